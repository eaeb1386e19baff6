"""``exact_profile.py --tree``: where the exact decomposition-tree kernel spends its
time, beside the float K-norm of the same poset (see exact_profile's docstring)."""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np
from common import best_time, machine, write_results
from sampler_profile import hlo_profile

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import samplers
from jaxdp.exact import tree as exact_tree
from jaxdp.exact.interleave import interleave
from jaxdp.exact.intervals import tree_round
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from jaxdp.samplers.exact_tree_tables import exact_tree_tables


def _posets():
  rng = np.random.default_rng(0)  # secure.py's forest of this size
  parents = [-1] + [int(rng.integers(0, i)) for i in range(1, 128)]
  return {
    "300-question questionnaire": synthetic_questionnaire(0, 300),
    "random forest d = 128": jaxdp.Poset.from_parents(parents, name="forest128"),
  }


def _cpu_us(fn, x, n, repeats):
  return 1e6 * best_time(lambda: fn(x), repeats, clock=time.process_time) / n


def _one(poset, n, rep, key):
  tables, layout = exact_tree_tables(poset)
  d, m = poset.d, samplers.tree_chunk(layout)
  flt = jax.jit(lambda k: dprandom.knorm(k, jaxdp.PosetBall(poset), 1.0, (n,)))
  ext = jax.jit(lambda k: exact.poset_knorm(k, poset, 1.0, (n,)))
  kern = {"float, ChaCha20": _cpu_us(flt, key, n, rep)}
  kern["exact, ChaCha20"] = _cpu_us(ext, key, n, rep)
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    k_more = jax.random.fold_in(key, 1)
    sizes = jax.jit(lambda k: exact_tree.size_counts(k, k_more, t, layout, m)[0])
    cnt = sizes(key)
    objs = lambda k: exact_tree.tree_objects(k, t, layout, m)[1:]
    size_a, low, _ = jax.jit(objs)(key)
    words = jax.random.bits(key, (m, d + 2, 2), jnp.uint32)

    def chunk(k):
      k_obj, k_bits = jax.random.split(k)
      _, sa, lw, failed = exact_tree.tree_objects(k_obj, t, layout, m)
      w = jax.random.bits(k_bits, (m, d + 2, 2), jnp.uint32)
      return tree_round(w, lw, sa, 1.0), failed

    jobs = {
      "size choices (words + first pass)": (sizes, key),
      "interleavings (words + two sorts)": (
        lambda k: interleave(k, cnt, t, layout, m),
        key,
      ),
      "objects in all (sizes, blocks, interleavings, positions, down-sets)": (objs, key),
      "words of the d + 2 exponentials": (
        lambda k: jax.random.bits(k, (m, d + 2, 2), jnp.uint32),
        key,
      ),
      "tree_round (intervals, prefix sums, rounding)": (
        lambda w: tree_round(w, low, size_a, 1.0),
        words,
      ),
      "one chunk without the host step": (chunk, key),
    }
    stages = {k: _cpu_us(jax.jit(f), x, m, rep) for k, (f, x) in jobs.items()}
    hlo = hlo_profile(jax.jit(chunk).lower(key).compile(), m)
  words_per = {
    "size choices": layout.num_choices,
    "interleaving keys": layout.slots,
    "block ranks (62-bit draws)": 2 * len(layout.blocks),
    "exponentials": 2 * (d + 2),
  }
  return {
    "d": d,
    "chunk": m,
    "nodes": layout.num_nodes,
    "slots": layout.slots,
    "waves": int(tables.waves.shape[0]),
    "search_runs": len(layout.runs),
    "kernels_us": kern,
    "stages_us": stages,
    "words_per_sample": words_per,
    "hlo": hlo,
  }


def tree_profile(n: int, repeats: int, out: str) -> None:
  """Profiles both tree-path posets; writes <out>/exact_profile_tree.*."""
  key = dprandom.secure_key(bytes(range(32)))
  rows = {name: _one(p, n, repeats, key) for name, p in _posets().items()}
  lines = []
  for name, r in rows.items():
    base = r["kernels_us"]["float, ChaCha20"]
    lines += [
      f"### {name} (d = {r['d']}, {r['nodes']} nodes, {r['slots']} interleaving "
      f"slots, chunk {r['chunk']})",
      "",
      "| kernel | CPU us / sample | float / this |",
      "|---|---:|---:|",
    ]
    lines += [f"| {k} | {v:.2f} | {base / v:.2f} |" for k, v in r["kernels_us"].items()]
    lines += ["", "| stage (one chunk) | CPU us / sample |", "|---|---:|"]
    lines += [f"| {k} | {v:.2f} |" for k, v in r["stages_us"].items()]
    w = r["words_per_sample"]
    h = r["hlo"]
    lines += [
      "",
      "ChaCha20 words per sample: "
      + ", ".join(f"{k} {v}" for k, v in w.items())
      + f" ({sum(w.values())} in all). Compiled chunk: {h['fusions']} fusions, "
      f"{h['loops']} loops, {h['ops_per_sample']:,.0f} operations and "
      f"{h['bytes_per_sample']:,.0f} bytes accessed per sample; size choices in "
      f"{r['waves']} waves, {r['search_runs']} runs of equal search length.",
      "",
    ]
  lines.append(f"Batch {n:,}; process CPU time, best of {repeats} after a warm-up.")
  payload = {"machine": machine(), "n": n, "posets": rows}
  write_results(out, "exact_profile_tree", payload, "\n".join(lines))
