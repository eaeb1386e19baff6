"""The exact NHIS-3 K-norm kernel: stage costs, and the forest kernel beside the
generic ranks kernel and the float sampler, in one process.

  python benchmarks/exact_profile.py [--n 300000] [--repeats 3] [--out DIR] [--tree]

Rows (process CPU microseconds per sample, best of ``--repeats`` after a warm-up;
the machine's other load inflates them, the ratios within one run are what count):
* the float NHIS-3 K-norm (``jaxdp.random.knorm``, ChaCha20 key);
* the exact NHIS-3 K-norm: the forest kernel (the default: A from the rank,
  ``jaxdp.exact.forest``'s permutation in heap order, one ChaCha20 word per
  exponential, ``tree_round_marked`` and one int32 minimum deciding the host step);
  the same kernel with a per-sample boolean check (``tree_round`` + ``settle``; the
  same integers); and the generic unranking with ``chain_round`` (two words, the
  kernel for every other poset of the ranks path);
* the whole kernel at ``--n`` samples: the float sampler on the default (Threefry)
  key, ``jaxdp.exact.poset_knorm`` on a ChaCha20 and on a Threefry key, the
  ChaCha20 words it reads in one call, and the kernel with its ChaCha20 words, its
  permutation and positions, or its rounding replaced by a cheap stand-in (the
  difference is that stage's cost in the compiled kernel);
* stages of one 2^14-sample chunk: the rank and A, the permutation and positions,
  the chain positions, the ChaCha20 words of the d + 2 exponentials (one and two per
  exponential), the generic unranking, the exponential intervals (one fdlibm log per
  uniform, beside two of XLA's float64 ``log``), the roundings, and the two
  host-step checks; "outside the stages" is the forest kernel's time less its
  stages'.
Writes <out>/exact_profile.json and .md.

``--tree``: the decomposition-tree kernel instead (the 300-question questionnaire
and the d = 128 random forest of ``benchmarks/secure.py``): the float K-norm and the
exact kernel (``--n`` samples), the stages of one chunk of the exact kernel (the
size choices, the interleavings, the rest of the objects, the exponentials' words,
the rounding), ChaCha20 words per sample by use, and the compiled chunk's fusions,
loops and operations per sample (``sampler_profile.hlo_profile``). Writes
<out>/exact_profile_tree.json and .md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, machine, write_results
from exact_profile_tree import tree_profile
from folders import add_out

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import forest, samplers
from jaxdp.exact.choices import trie_subset
from jaxdp.exact.intervals import (
  FAST_BITS,
  UNSETTLED,
  chain_round,
  digits52,
  exp_intervals,
  tree_round,
  tree_round_marked,
)
from jaxdp.exact.refine import refine_tree_sample, settle, settle_marked
from jaxdp.samplers.exact_tables import exact_tables
from jaxdp.samplers.words import stored

STAND_INS = ("ChaCha20 words", "permutation and positions", "rounding")


def _cpu_us(fn, n, repeats):
  return 1e6 * best_time(fn, repeats, clock=time.process_time) / n


def _two_logs(words):
  j = digits52(words)
  return -jnp.log(1.0 - j * 2.0**-FAST_BITS), -jnp.log(1.0 - (j + 1.0) * 2.0**-FAST_BITS)


def _boolean_check_forest_kernel(key, scale, tables, total, order, n):
  """The forest kernel with the per-sample boolean host-step check (``tree_round`` +
  ``settle``); it releases the forest kernel's integers. The scale is an argument,
  as in the kernel (a constant would let XLA fold it)."""
  d = len(order.subtree_end)
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)

    def chunk(k_chunk, m):
      k_rank, k_bits, k_ref, k_ext = jax.random.split(k_chunk, 4)
      words = jax.random.bits(k_bits, (m, d + 2, 1), jnp.uint32)
      low, size_a, _ = forest.forest_object(k_rank, k_ext, t, total, order, m)
      k, settled = tree_round(words, low, size_a, scale)
      ok = jnp.zeros((m,), bool)
      return settle(k, settled, words, scale, k_ref, refine_tree_sample, low, size_a, ok)

    return samplers.run_chunks(chunk, key, scale, n, (d + 1,))


def _stand_in_kernel(key, tables, total, order, n, without=None):
  """The forest kernel (``_poset_kernel``'s forest branch, same integers) with stage
  ``without`` (one of ``STAND_INS``) replaced by a cheap stand-in of the same
  shapes: words from a multiplicative hash of the index, each part's positions in
  preorder, or k from the chain positions. Its time less the whole kernel's is the stage's
  cost inside the compiled kernel, fusion and memory traffic included."""
  d = len(order.subtree_end)
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    scale = jnp.float64(1.0)

    def positions(k, a, order):
      if without != STAND_INS[1]:
        return forest.forest_positions(k, a, order)
      del k  # each part in preorder (a linear extension; not random)
      u = a.astype(jnp.uint32)
      count = lambda s: jax.lax.population_count(s).astype(jnp.int32)
      below = [jnp.uint32((1 << x) - 1) for x in range(d)]
      return jnp.stack(
        [
          jnp.where((u >> x) & 1 == 1, count(u & b), count(u) + count(~u & b))
          for x, b in enumerate(below)
        ]
      )

    def chunk(k_chunk, m):
      k_rank, k_bits, k_ref, k_ext = jax.random.split(k_chunk, 4)
      if without == STAND_INS[0]:
        word = jax.random.key_data(k_bits).reshape(-1)[0].astype(jnp.uint32)
        idx = jax.lax.broadcasted_iota(jnp.uint32, (m, d + 2, 1), 0)
        words = (idx * jnp.uint32(2654435761)) ^ word
      else:
        words = jax.random.bits(k_bits, (m, d + 2, 1), jnp.uint32)
      # forest.forest_object, its positions from ``positions``
      a = trie_subset(exact.uniform_below(k_rank, total, m), t, d)[0]
      a = stored(a, a[0].astype(jnp.uint32))
      size_a = jax.lax.population_count(a.astype(jnp.uint32)).astype(jnp.int32)
      low = forest.forest_low(positions(k_ext, a, order), size_a, order)
      if without == STAND_INS[2]:
        k = low[:, 0] + low[:, 1] + words[:, :d, 0].astype(jnp.int32)
        k = jnp.concatenate([size_a[:, None], k], 1)
      else:
        k = tree_round_marked(words, low, size_a, scale)
      ok = jnp.zeros((m,), bool)
      return settle_marked(k, words, scale, k_ref, refine_tree_sample, low, size_a, ok)

    return samplers.run_chunks(chunk, key, scale, n, (d + 1,))


def _whole_kernel(cc, nhis, tables, total, order, n, rep):
  """CPU us per sample of the whole forest kernel at ``n`` samples beside the float
  sampler on the default (Threefry) key, the same kernel on a Threefry key (words
  from the fused Threefry stream), the ChaCha20 words it reads (one call), and the
  kernel with each stage replaced by a stand-in (``_stand_in_kernel``)."""
  d = nhis.d
  fry = jax.random.key(0)
  flt = jax.jit(lambda k: dprandom.knorm(k, jaxdp.PosetBall(nhis), 1.0, (n,)))
  ext = jax.jit(lambda k: exact.poset_knorm(k, nhis, 1.0, (n,)))
  words = d + 2 + 2 * (1 + len(forest.radix_groups(d)))  # exponentials, rank, digits
  bits = jax.jit(lambda k: jax.random.bits(k, (n, words), jnp.uint32))
  rows = {
    "float, Threefry (the default key)": _cpu_us(lambda: flt(fry), n, rep),
    "exact, ChaCha20 (poset_knorm)": _cpu_us(lambda: ext(cc), n, rep),
    "exact, Threefry key (poset_knorm)": _cpu_us(lambda: ext(fry), n, rep),
    f"ChaCha20 words it reads ({words} a sample), one call": _cpu_us(
      lambda: bits(cc), n, rep
    ),
  }
  for stage in STAND_INS:
    fn = jax.jit(lambda k, s=stage: _stand_in_kernel(k, tables, total, order, n, s))
    rows[f"exact, ChaCha20, {stage} by a stand-in"] = _cpu_us(lambda f=fn: f(cc), n, rep)
  return rows, words


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=300_000)
  ap.add_argument("--repeats", type=int, default=3)
  add_out(ap)
  ap.add_argument("--tree", action="store_true", help="profile the tree path instead")
  args = ap.parse_args(argv)
  if args.tree:
    return tree_profile(args.n, args.repeats, args.out)
  n, rep = args.n, args.repeats
  cc = dprandom.secure_key(bytes(range(32)))
  nhis = jaxdp.Poset.nhis(3)
  d = nhis.d
  tables, total = exact_tables(nhis)
  order = forest.forest_order(nhis)
  flt = jax.jit(lambda k: dprandom.knorm(k, jaxdp.PosetBall(nhis), 1.0, (n,)))

  def kernel(fo):
    with jax.enable_x64(True):
      return samplers._poset_kernel(
        cc, tables, jnp.float64(1.0), total=total, d=d, n=n, forest=fo
      )

  boolean_jit = jax.jit(
    lambda k, s: _boolean_check_forest_kernel(k, s, tables, total, order, n)
  )

  def boolean(k):
    with jax.enable_x64(True):
      return boolean_jit(k, jnp.float64(1.0))

  rows = {
    "float, ChaCha20": _cpu_us(lambda: flt(cc), n, rep),
    "exact, forest kernel": _cpu_us(lambda: kernel(order), n, rep),
    "exact, forest kernel, boolean check": _cpu_us(lambda: boolean(cc), n, rep),
    "exact, generic unranking": _cpu_us(lambda: kernel(None), n, rep),
  }
  same = bool(jnp.all(boolean(cc) == kernel(order)))
  m = samplers.CHUNK
  stages = {}
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    k1, k2, k3 = jax.random.split(cc, 3)
    rank = exact.uniform_below(k1, total, m)
    words = jax.random.bits(k2, (m, d + 2, 2), jnp.uint32)
    word1 = words[..., :1]
    seq, size_a = exact.unrank(rank, t, d)
    a = trie_subset(rank, t, d)[0]
    pos = forest.forest_positions(k3, a, order)
    low = forest.forest_low(pos, size_a, order)
    marked = tree_round_marked(word1, low, size_a, 1.0)
    settled = tree_round(word1, low, size_a, 1.0)[1]
    forest_jobs = {
      "rank (62-bit draws) and A (trie)": (
        lambda k: trie_subset(exact.uniform_below(k, total, m), t, d)[0],
        k1,
      ),
      "permutation, heap order and positions": (
        lambda k: forest.forest_positions(k, a, order),
        k3,
      ),
      "chain positions (subtree minima)": (
        lambda p: forest.forest_low(p, size_a, order),
        pos,
      ),
      "ChaCha20 words, d + 2 exponentials, one word each": (
        lambda k: jax.random.bits(k, (m, d + 2, 1), jnp.uint32),
        k2,
      ),
      "tree_round_marked (forest, one word)": (
        lambda w: tree_round_marked(w, low, size_a, 1.0),
        word1,
      ),
      "host-step check: int32 min of marked k": (
        lambda x: jnp.min(x) == UNSETTLED,
        marked,
      ),
    }
    other_jobs = {
      "ChaCha20 words, d + 2 exponentials, two words each": (
        lambda k: jax.random.bits(k, (m, d + 2, 2), jnp.uint32),
        k2,
      ),
      "generic unranking (int64 look-ups)": (lambda r: exact.unrank(r, t, d), rank),
      "intervals, two XLA logs": (_two_logs, words),
      "intervals, one fdlibm log (one word)": (exp_intervals, word1),
      "chain_round (generic)": (lambda w: chain_round(w, seq, size_a, t.up, 1.0), words),
      "host-step check: all of per-sample booleans": (jnp.all, settled),
    }
    for name, (fn, x) in {**forest_jobs, **other_jobs}.items():
      f = jax.jit(fn)
      stages[name] = _cpu_us(lambda f=f, x=x: f(x), m, rep)
  inside = sum(stages[k] for k in forest_jobs)
  stages["forest kernel outside these stages"] = rows["exact, forest kernel"] - inside
  whole, words = _whole_kernel(cc, nhis, tables, total, order, n, rep)
  payload = {"machine": machine(), "n": n, "kernels_us": rows, "stages_us": stages}
  payload["same_integers_boolean_check"] = same
  payload["whole_kernel_us"] = whole
  payload["chacha20_words_per_sample"] = words
  base = rows["float, ChaCha20"]
  lines = ["| NHIS-3 K-norm | CPU us / sample | float / this |", "|---|---:|---:|"]
  lines += [f"| {k} | {v:.3f} | {base / v:.2f} |" for k, v in rows.items()]
  lines += ["", "| stage (one chunk of 2^14) | CPU us / sample |", "|---|---:|"]
  lines += [f"| {k} | {v:.3f} |" for k, v in stages.items()]
  fry = whole["float, Threefry (the default key)"]
  full = whole["exact, ChaCha20 (poset_knorm)"]
  lines += [
    "",
    f"| whole kernel, {n:,} samples | CPU us / sample | float (Threefry) / this "
    "| stage's cost |",
    "|---|---:|---:|---:|",
  ]
  for k, v in whole.items():
    cost = f"{full - v:.3f}" if "stand-in" in k else ""
    lines.append(f"| {k} | {v:.3f} | {fry / v:.2f} | {cost} |")
  lines += [
    "",
    f"Batch {n:,}; process CPU time, best of {rep}; the same integers from the "
    f"forest kernel and its boolean-check form: {same}. The forest kernel's "
    "stages are the first six; the last row is its time less theirs. In the "
    "whole-kernel table a stage's cost is the exact kernel's time less the time "
    "with that stage replaced by a cheap stand-in of the same shapes (fusion and "
    f"memory traffic included); the kernel reads {words} ChaCha20 words a sample.",
  ]
  write_results(args.out, "exact_profile", payload, "\n".join(lines))
  print("\n".join(lines))


if __name__ == "__main__":
  main()
