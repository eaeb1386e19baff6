"""Does sampling a new poset recompile? The public sampler on fresh random posets.

  python benchmarks/recompile.py [--posets 50] [--d 10] [--n 2000] [--out DIR]

Draws n points from each of ``--posets`` new random posets of ``--d`` elements with
``jaxdp.random.poset_ball(method="general")`` and reports the time and how many new
compilations of the sampling kernel that took (its tables are data: posets of one
size share one compilation). Writes <out>/recompile.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from folders import add_out

import jaxdp
from jaxdp import random as dprandom


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--posets", type=int, default=50, help="new posets (default: 50)")
  ap.add_argument("--d", type=int, default=10, help="elements per poset (default: 10)")
  ap.add_argument("--n", type=int, default=2000, help="draws per poset (default: 2000)")
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
  table = (
    "| new posets | d | draws each | seconds | new compilations |\n"
    "|---|---|---|---|---|\n"
    f"| {row['posets']} | {row['d']} | {row['draws_each']:,} | {seconds:.2f} | "
    f"{row['new_compilations']} |"
  )
  write_results(args.out, "recompile", {"machine": machine(), "rows": [row]}, table)


if __name__ == "__main__":
  main()
