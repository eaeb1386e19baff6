"""Does sampling a new poset, or releasing at a new eps, recompile?

  python benchmarks/recompile.py [--posets 50] [--d 10] [--n 2000] [--eps-values 20]
      [--out DIR]

Draws n points from each of ``--posets`` new random posets of ``--d`` elements with
``jaxdp.random.poset_ball(method="general")`` and reports the time and how many new
compilations of the sampling kernel that took (its tables are data: posets of one
size share one compilation). Then noises NHIS-3 counts with the exact (secure)
poset-ball mechanism at ``--eps-values`` new values of eps, reporting the same for
the exact kernel (the scale is an argument of the kernel, not a constant of its
program). Writes <out>/recompile.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from folders import add_out

import jaxdp
from jaxdp import random as dprandom
from jaxdp.exact import samplers as exact_samplers


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--posets", type=int, default=50, help="new posets (default: 50)")
  ap.add_argument("--d", type=int, default=10, help="elements per poset (default: 10)")
  ap.add_argument("--n", type=int, default=2000, help="draws per poset (default: 2000)")
  ap.add_argument(
    "--eps-values", type=int, default=20, help="new eps of the exact noise (default: 20)"
  )
  add_out(ap)
  args = ap.parse_args(argv)
  warm = jaxdp.Poset.random(jax.random.key(10_000), args.d)
  jax.block_until_ready(
    dprandom.poset_ball(jax.random.key(0), warm, (args.n,), method="general")
  )
  posets = [jaxdp.Poset.random(jax.random.key(100 + i), args.d) for i in range(args.posets)]
  before = dprandom._poset_kernel._cache_size()
  t0 = time.perf_counter()
  for i, p in enumerate(posets):
    jax.block_until_ready(
      dprandom.poset_ball(jax.random.key(i), p, (args.n,), method="general")
    )
  seconds = time.perf_counter() - t0
  row = {
    "posets": args.posets,
    "d": args.d,
    "draws_each": args.n,
    "seconds": seconds,
    "new_compilations": dprandom._poset_kernel._cache_size() - before,
  }
  nhis = jaxdp.Poset.nhis(3)
  counts = jnp.arange(nhis.d + 1, dtype=jnp.int32)
  key = jaxdp.random.secure_key(bytes(32))

  def noisy_counts(i, eps):
    mech = jaxdp.PosetCountMechanism(nhis, eps, exact=True).inner
    return mech.randomize(jax.random.fold_in(key, i), counts)

  jax.block_until_ready(noisy_counts(0, 1.0))
  eps_values = [0.05 * (i + 1) for i in range(args.eps_values)]
  before = exact_samplers._poset_kernel._cache_size()
  t0 = time.perf_counter()
  for i, eps in enumerate(eps_values):
    jax.block_until_ready(noisy_counts(i + 1, eps))
  eps_row = {
    "eps_values": args.eps_values,
    "mechanism": "exact poset-ball K-norm, NHIS-3, ChaCha20 key",
    "seconds": time.perf_counter() - t0,
    "new_compilations": exact_samplers._poset_kernel._cache_size() - before,
  }
  table = (
    "| new posets | d | draws each | seconds | new compilations |\n"
    "|---|---|---|---|---|\n"
    f"| {row['posets']} | {row['d']} | {row['draws_each']:,} | {seconds:.2f} | "
    f"{row['new_compilations']} |\n\n"
    "| new eps values | exact noise | seconds | new compilations |\n"
    "|---|---|---|---|\n"
    f"| {eps_row['eps_values']} | {eps_row['mechanism']} | {eps_row['seconds']:.2f} | "
    f"{eps_row['new_compilations']} |"
  )
  write_results(
    args.out,
    "recompile",
    {"machine": machine(), "rows": [row], "eps_rows": [eps_row]},
    table,
  )


if __name__ == "__main__":
  main()
