"""Compile time and chunk size of the series-parallel poset-ball sampler.

  python benchmarks/sp_costs.py [--n 100000] [--quick] [--out DIR]

1. First-call (compile + run, 20,000 draws) time of method="sp" against the depth of
   the balanced binary decomposition, and samples per second after it: a 200-chain
   and a 200-antichain (shallow trees), the 300-question synthetic questionnaire,
   caterpillars (a spine x_1 < x_2 < ... with one leaf below each x_i: a tree d
   depths deep) of 200 elements, with and without the scans over runs of narrow
   depths, and of 512, and a 300-element chain of gates with 1-4 follow-ups each.
2. Samples per second (batch 10^5) at several chunk sizes (node rows per chunk) for a
   random forest with d = 128 and the 300-question questionnaire.

Both against the RNG floor (2(d+1) float32 uniforms per sample: "x floor" with JAX's
Threefry key, "x fast" with the key the samplers draw from,
``jaxdp.prng.threefry.fast_key``), measured in the same run.

``--quick`` (a smoke run): the chain and the antichain in 1., the forest at one chunk
size in 2. Writes <out>/sp_costs.json and <out>/sp_costs.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, machine, write_results
from folders import add_out

import jaxdp
from jaxdp import Poset
from jaxdp.experiments.questionnaire import gate_chain, synthetic_questionnaire
from jaxdp.samplers import sp_kernel, sp_plan, sp_tables


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=100_000)
  ap.add_argument("--quick", action="store_true", help="a smoke run (fewer posets)")
  add_out(ap)
  args = ap.parse_args(argv)
  key = jax.random.key(0)
  fast = jaxdp.prng.threefry.fast_key(key)

  compile_rows = []
  cases = [
    (Poset.from_edges(200, [(i, i + 1) for i in range(199)], name="chain d=200"), True),
    (Poset.from_edges(200, [], name="antichain d=200"), True),
    (synthetic_questionnaire(0, 300), True),
    (gate_chain(200, follow_ups=1), True),
    (gate_chain(200, follow_ups=1), False),
    (gate_chain(300), True),
    (gate_chain(512, follow_ups=1), True),
  ]
  if args.quick:
    cases = cases[:2]
  default_band = sp_plan.BAND_MIN_STEPS
  try:
    for p, banded in cases:
      sp_plan.BAND_MIN_STEPS = default_band if banded else 10**9
      jaxdp.random._poset_kernel.clear_cache()
      plan = sp_plan.LevelPlan(sp_tables.sp_tables(p)[1])
      f = jax.jit(lambda k, p=p: jaxdp.random.poset_ball(k, p, (20_000,), method="sp"))
      t0 = time.perf_counter()
      jax.block_until_ready(f(key))
      first = time.perf_counter() - t0
      t = best_time(lambda: f(key))
      fl = jax.jit(lambda k, dim=p.d + 1: jax.random.uniform(k, (20_000, 2 * dim)))
      compile_rows.append(
        {
          "poset": p.name,
          "d": p.d,
          "depths": plan.num_levels,
          "scanned_depths": sum(b.b - b.a for b in plan.bands),
          "banded": banded,
          "first_call_seconds": first,
          "samples_per_s": 20_000 / t,
          "x_floor": t / best_time(lambda: fl(key)),
          "x_fast_floor": t / best_time(lambda: fl(fast)),
        }
      )
      print(compile_rows[-1], flush=True)
  finally:
    sp_plan.BAND_MIN_STEPS = default_band
    jaxdp.random._poset_kernel.clear_cache()

  rng = np.random.default_rng(0)
  forest = Poset.from_parents(
    [-1] + [int(rng.integers(0, i)) for i in range(1, 128)], name="random forest d=128"
  )
  chunk_rows = []
  default = sp_kernel.chunk_size
  try:
    for rows in (1 << 18,) if args.quick else (1 << 16, 1 << 18, 1 << 20):
      jaxdp.random._poset_kernel.clear_cache()  # the chunk is fixed at trace time
      sp_kernel.chunk_size = lambda lay, chunk, r=rows: int(
        max(64, min(chunk, r // len(lay.kind)))
      )
      for p in (forest,) if args.quick else (forest, synthetic_questionnaire(0, 300)):
        f = jax.jit(lambda k, p=p: jaxdp.random.poset_ball(k, p, (args.n,), method="sp"))
        jax.block_until_ready(f(key))
        t = best_time(lambda: f(key))
        fl = jax.jit(lambda k, dim=p.d + 1: jax.random.uniform(k, (args.n, 2 * dim)))
        floor = best_time(lambda: fl(key))
        chunk_rows.append(
          {
            "node_rows": rows,
            "poset": p.name,
            "d": p.d,
            "n": args.n,
            "samples_per_s": args.n / t,
            "x_floor": t / floor,
            "x_fast_floor": t / best_time(lambda: fl(fast)),
          }
        )
        print(chunk_rows[-1], flush=True)
  finally:
    sp_kernel.chunk_size = default
    jaxdp.random._poset_kernel.clear_cache()

  lines = [
    "First call of method='sp' (compile + 20,000 draws), then 20,000 draws:",
    "",
    "| poset | d | tree depths | depths in scans | first call s | samples/s | x floor "
    "| x fast |",
    "|---|---|---|---|---|---|---|---|",
  ]
  lines += [
    f"| {r['poset']} | {r['d']} | {r['depths']} | "
    f"{r['scanned_depths'] if r['banded'] else '0 (scans disabled)'} | "
    f"{r['first_call_seconds']:.1f} | {r['samples_per_s']:,.0f} | "
    f"{r['x_floor']:.2f} | {r['x_fast_floor']:.2f} |"
    for r in compile_rows
  ]
  lines += [
    "",
    f"Chunk size (node rows per chunk), batch {args.n:,}:",
    "",
    "| node rows | poset | samples/s | x floor | x fast |",
    "|---|---|---|---|---|",
  ]
  lines += [
    f"| {r['node_rows']:,} | {r['poset']} | {r['samples_per_s']:,.0f} | "
    f"{r['x_floor']:.2f} | {r['x_fast_floor']:.2f} |"
    for r in chunk_rows
  ]
  write_results(
    args.out,
    "sp_costs",
    {"machine": machine(), "compile": compile_rows, "chunks": chunk_rows},
    "\n".join(lines),
  )


if __name__ == "__main__":
  main()
