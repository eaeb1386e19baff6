"""The exact NHIS-3 K-norm kernel: stage costs, and the forest kernel beside the
generic ranks kernel and the float sampler, in one process.

  python benchmarks/exact_profile.py [--n 300000] [--repeats 3] [--out results] [--tree]

Rows (process CPU microseconds per sample, best of ``--repeats`` after a warm-up;
the machine's other load inflates them, the ratios within one run are what count):
* the float NHIS-3 K-norm (``jaxdp.random.knorm``, ChaCha20 key);
* the exact NHIS-3 K-norm through the forest unranking (``jaxdp.exact.forest``,
  the default) and through the generic unranking with ``chain_round`` (the kernel
  for every other poset of the ranks path): the same integers from the same key;
* stages of one 2^14-sample chunk: the rank, the ChaCha20 words of the d + 2
  exponentials, the forest and the generic unranking, the exponential intervals
  (one fdlibm log per uniform, beside two of XLA's float64 ``log``), and the two
  roundings.
Writes results/exact_profile.json and .md.

``--tree``: the decomposition-tree kernel instead (the 300-question questionnaire
and the d = 128 random forest of ``benchmarks/secure.py``): the float K-norm and the
exact kernel (``--n`` samples), the stages of one chunk of the exact kernel (the
size choices, the interleavings, the rest of the objects, the exponentials' words,
the rounding), ChaCha20 words per sample by use, and the compiled chunk's fusions,
loops and operations per sample (``sampler_profile.hlo_profile``). Writes
results/exact_profile_tree.json and .md.
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

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import forest, samplers
from jaxdp.exact.intervals import (
  FAST_BITS,
  chain_round,
  digits52,
  exp_intervals,
  tree_round,
)
from jaxdp.samplers.exact_tables import exact_tables


def _cpu_us(fn, n, repeats):
  return 1e6 * best_time(fn, repeats, clock=time.process_time) / n


def _two_logs(words):
  j = digits52(words)
  return -jnp.log(1.0 - j * 2.0**-FAST_BITS), -jnp.log(1.0 - (j + 1.0) * 2.0**-FAST_BITS)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=300_000)
  ap.add_argument("--repeats", type=int, default=3)
  ap.add_argument("--out", default="results")
  ap.add_argument("--tree", action="store_true", help="profile the tree path instead")
  args = ap.parse_args(argv)
  if args.tree:
    return tree_profile(args.n, args.repeats, args.out)
  n, rep = args.n, args.repeats
  cc = dprandom.secure_key(bytes(range(32)))
  nhis = jaxdp.Poset.nhis(3)
  d = nhis.d
  tables, total = exact_tables(nhis)
  order = forest.forest_order(nhis, total)
  flt = jax.jit(lambda k: dprandom.knorm(k, jaxdp.PosetBall(nhis), 1.0, (n,)))

  def kernel(fo):
    with jax.enable_x64(True):
      return samplers._poset_kernel(
        cc, tables, None, const=1.0, total=total, d=d, n=n, forest=fo
      )

  rows = {
    "float, ChaCha20": _cpu_us(lambda: flt(cc), n, rep),
    "exact, forest unranking": _cpu_us(lambda: kernel(order), n, rep),
    "exact, generic unranking": _cpu_us(lambda: kernel(None), n, rep),
  }
  same = bool(jnp.all(kernel(order) == kernel(None)))
  m = samplers.CHUNK
  stages = {}
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    k1, k2 = jax.random.split(cc)
    rank = exact.uniform_below(k1, total, m)
    words = jax.random.bits(k2, (m, d + 2, 2), jnp.uint32)
    seq, size_a = exact.unrank(rank, t, d)
    fseq, _ = forest.forest_unrank(rank, t, order)
    low = forest.forest_low(fseq, size_a, order)
    jobs = {
      "rank (62-bit draws)": (lambda k: exact.uniform_below(k, total, m), k1),
      "ChaCha20 words, d + 2 exponentials": (
        lambda k: jax.random.bits(k, (m, d + 2, 2), jnp.uint32),
        k2,
      ),
      "generic unranking (int64 look-ups)": (lambda r: exact.unrank(r, t, d), rank),
      "forest unranking + chain positions": (
        lambda r: forest.forest_low(*forest.forest_unrank(r, t, order), order),
        rank,
      ),
      "intervals, two XLA logs": (_two_logs, words),
      "intervals, one fdlibm log": (exp_intervals, words),
      "chain_round (generic)": (lambda w: chain_round(w, seq, size_a, t.up, 1.0), words),
      "tree_round (forest)": (lambda w: tree_round(w, low, size_a, 1.0), words),
    }
    for name, (fn, x) in jobs.items():
      f = jax.jit(fn)
      stages[name] = _cpu_us(lambda f=f, x=x: f(x), m, rep)
  payload = {"machine": machine(), "n": n, "kernels_us": rows, "stages_us": stages}
  payload["same_integers"] = same
  base = rows["float, ChaCha20"]
  lines = ["| NHIS-3 K-norm | CPU us / sample | float / this |", "|---|---:|---:|"]
  lines += [f"| {k} | {v:.3f} | {base / v:.2f} |" for k, v in rows.items()]
  lines += ["", "| stage (one chunk of 2^14) | CPU us / sample |", "|---|---:|"]
  lines += [f"| {k} | {v:.3f} |" for k, v in stages.items()]
  lines += [
    "",
    f"Batch {n:,}; process CPU time, best of {rep}; the two exact kernels release "
    f"the same integers: {same}.",
  ]
  write_results(args.out, "exact_profile", payload, "\n".join(lines))
  print("\n".join(lines))


if __name__ == "__main__":
  main()
