"""Samples per second of jaxdp's samplers, side by side with the RNG floor and the
published sequential insertion sampler, at a batch of 10^6.

  python benchmarks/samplers.py [--n 1000000] [--out DIR] [--only TEXT]

Rows: poset ball and K-norm noise for NHIS three sections (d = 15, forest sampler), a
random series-parallel poset with d = 20 (sp and general samplers), a random poset with
d = 20 whose prime piece is too large for sp (general sampler), l_inf K-norm and
Laplace at d = 16; then large posets at a batch of 10^5: random forests (forest vs
series-parallel sampler) and synthetic questionnaires up to d = 512 (series-parallel
sampler).
Each time is the best of 5 calls; a draw's, of two such runs before and after its floors.
"floor" is the time ``jax.random.uniform`` takes for the same number of samples times
2(dim) floats (dim = d + 1 for posets), with JAX's own Threefry code; "x floor" is
time / floor. "fast floor" is the same draw with the key jaxdp's samplers use
(``jaxdp.prng.threefry.fast_key``: the same Threefry stream, unrolled on the CPU; on other
backends the same key), "x fast" is time / fast floor. The numpy insertion
sampler runs one object at a time, so it is timed on fewer samples and scaled.
Writes <out>/samplers.json and <out>/samplers.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, interleaved_best, machine, peak_ratio, write_results
from folders import add_out

import jaxdp
from jaxdp import LpBall, Poset, PosetBall
from jaxdp.experiments import baselines

# best of this many calls (after a warm-up) for each timing
REPEATS = 5


def _timed(f, key, n, floats):
  """Seconds of ``f(key)``, of ``jax.random.uniform`` for (n, floats) with JAX's own
  code (the floor), and of the same with the key jaxdp's samplers draw from (the
  fast floor). Each is the best of ``REPEATS`` consecutive calls; the draw is timed
  before and after its floors and keeps the better, so that a passing slowdown of a
  shared machine does not set its row. (Calling the draw and its floors in turn
  instead slows the floors: their output pages are touched afresh.)"""
  u = jax.jit(lambda k: jax.random.uniform(k, (n, floats)))
  fast_key = jaxdp.prng.threefry.fast_key(key)
  t = best_time(lambda: f(key), REPEATS)
  floor = best_time(lambda: u(key), REPEATS)
  fast = best_time(lambda: u(fast_key), REPEATS)
  return min(t, best_time(lambda: f(key), REPEATS)), floor, fast


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1_000_000)
  ap.add_argument(
    "--numpy-n",
    type=int,
    default=5_000,
    help="samples for the sequential numpy baseline (scaled to --n)",
  )
  ap.add_argument(
    "--large-n",
    type=int,
    default=100_000,
    help="batch for the large posets (d = 32 .. 512)",
  )
  add_out(ap)
  ap.add_argument(
    "--only",
    default=None,
    help="run only the rows whose case contains this text (e.g. 'general'), each "
    "with its floor; the large posets only if one of theirs matches",
  )
  ap.add_argument(
    "--rounds",
    type=int,
    default=15,
    help="rounds of the K-norm / poset ball comparison (the two called in turn)",
  )
  ap.add_argument(
    "--quick",
    action="store_true",
    help="a smoke run: NHIS-3's poset ball and K-norm rows, and the large posets' "
    "smallest forest and questionnaire only",
  )
  args = ap.parse_args(argv)
  n = args.n
  key = jax.random.key(0)
  rows = []

  nhis = Poset.nhis(3)
  rand20 = Poset.random(jax.random.key(20), 20)  # series-parallel
  # a prime piece of more than 16 elements (the first such seed from 21 on: random
  # DAGs with d = 20 rarely have one), so auto takes the general sampler
  rand20n = Poset.random(jax.random.key(44), 20)
  assert rand20.is_series_parallel and PosetBall(rand20n).resolved_method == "general"
  cases = [
    ("poset_ball", "NHIS 3 sections (forest)", nhis, None),
    ("knorm", "NHIS 3 sections (forest)", nhis, PosetBall(nhis)),
    ("poset_ball", "NHIS 3 sections (series-parallel)", nhis, "sp"),
    ("poset_ball", "NHIS 3 sections (general)", nhis, "general"),
    (
      "poset_ball",
      f"random d=20 ({PosetBall(rand20).resolved_method}, "
      f"{rand20.num_cover_edges} cover edges)",
      rand20,
      None,
    ),
    ("poset_ball", "random d=20 (general)", rand20, "general"),
    (
      "knorm",
      f"random d=20 ({PosetBall(rand20).resolved_method})",
      rand20,
      PosetBall(rand20),
    ),
    (
      "poset_ball",
      f"random d=20 with a prime piece of > 16 elements (`auto`: general; "
      f"{rand20n.num_cover_edges} cover edges)",
      rand20n,
      None,
    ),
  ]
  if args.quick:  # one poset ball and one K-norm row
    cases = cases[:2]
  if args.only is not None:
    cases = [c for c in cases if args.only in c[1]]
  for fn_name, label, poset, extra in cases:
    dim = poset.d + 1
    if fn_name == "poset_ball":
      method = extra if isinstance(extra, str) else "auto"
      f = jax.jit(
        lambda k, p=poset, m=method: jaxdp.random.poset_ball(k, p, (n,), method=m)
      )
    else:
      f = jax.jit(lambda k, b=extra: jaxdp.random.knorm(k, b, 1.0, (n,)))
    t, floor, fast = _timed(f, key, n, 2 * dim)
    row = {
      "sampler": fn_name,
      "case": label,
      "d": poset.d,
      "n": n,
      "seconds": t,
      "samples_per_s": n / t,
      "floor_seconds": floor,
      "x_floor": t / floor,
      "fast_floor_seconds": fast,
      "x_fast_floor": t / fast,
      "peak_over_output": peak_ratio(f, key, n * dim * 4),
    }
    if fn_name == "poset_ball" and poset is nhis and extra is None:
      rng = np.random.default_rng(0)
      t0 = time.perf_counter()
      baselines.insertion_poset_ball(rng, poset, args.numpy_n)
      per = (time.perf_counter() - t0) / args.numpy_n
      row["numpy_insertion_seconds"] = per * n
      row["speedup_vs_numpy"] = per * n / t
    rows.append(row)
    print(row, flush=True)

  small = [
    ("knorm l_inf d=16", lambda k: jaxdp.random.knorm(k, LpBall(16, jnp.inf), 1.0, (n,))),
    ("laplace d=16", lambda k: jaxdp.random.laplace(k, (n, 16))),
    ("jax.random.laplace d=16", lambda k: jax.random.laplace(k, (n, 16))),
  ]
  for label, fn in [c for c in small if args.only is None or args.only in c[0]]:
    f = jax.jit(fn)
    t, floor, fast = _timed(f, key, n, 2 * 17)
    rows.append(
      {
        "sampler": label.split()[0],
        "case": label,
        "d": 16,
        "n": n,
        "seconds": t,
        "samples_per_s": n / t,
        "floor_seconds": floor,
        "x_floor": t / floor,
        "fast_floor_seconds": fast,
        "x_fast_floor": t / fast,
        "peak_over_output": peak_ratio(f, key, n * 16 * 4),
      }
    )
    print(rows[-1], flush=True)

  large = _large_posets(key, args.large_n, args.only, args.quick)
  paired = _paired(key, n, nhis, args.only, args.rounds)
  lines = [
    "| sampler | case | n | seconds | samples/s | floor s | x floor | fast floor s | "
    "x fast | peak mem / output | numpy insertion s | speed-up vs numpy |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    peak = r["peak_over_output"]
    lines.append(
      f"| {r['sampler']} | {r['case']} | {r['n']:,} | {r['seconds']:.3f} | "
      f"{r['samples_per_s']:,.0f} | {r['floor_seconds']:.3f} | {r['x_floor']:.2f} | "
      f"{r['fast_floor_seconds']:.3f} | {r['x_fast_floor']:.2f} | "
      f"{'' if peak is None else f'{peak:.2f}'} | "
      f"{r.get('numpy_insertion_seconds', float('nan')):.0f} | "
      f"{r.get('speedup_vs_numpy', float('nan')):,.0f} |".replace(
        "| nan |", "| - |"
      ).replace("| nan |", "| - |")
    )
  lines += [
    "",
    f"Large posets (batch {args.large_n:,}; first call includes compilation):",
    "",
    "| poset | d | method | first call s | samples/s | x floor | x fast |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in large:
    lines.append(
      f"| {r['case']} | {r['d']} | {r['method']} | {r['first_call_seconds']:.1f} | "
      f"{r['samples_per_s']:,.0f} | {r['x_floor']:.1f} | {r['x_fast_floor']:.1f} |"
    )
  if paired:
    lines += [
      "",
      f"K-norm noise against the poset ball it scales (the two called in turn, best of "
      f"{args.rounds} rounds each):",
      "",
      "| draw | against | n | draw s | against s | ratio |",
      "|---|---|---|---|---|---|",
    ]
    for r in paired:
      lines.append(
        f"| {r['draw']} | {r['against']} | {r['n']:,} | {r['seconds']:.4f} | "
        f"{r['against_seconds']:.4f} | {r['ratio']:.2f} |"
      )
  write_results(
    args.out,
    "samplers",
    {"machine": machine(), "rows": rows, "large_posets": large, "paired": paired},
    "\n".join(lines),
  )


def _paired(key, n, nhis, only, rounds):
  """K-norm noise against the poset ball it scales (NHIS-3), the two called in turn
  (``interleaved_best``): the one ratio of two draws that the main table, which
  times each draw with its own floors, does not take under the same load."""
  if only is not None and only not in "NHIS 3 sections (forest)":
    return []
  ball = jax.jit(lambda k: jaxdp.random.poset_ball(k, nhis, (n,)))
  knorm = jax.jit(lambda k: jaxdp.random.knorm(k, PosetBall(nhis), 1.0, (n,)))
  t = interleaved_best({"draw": lambda: knorm(key), "ref": lambda: ball(key)}, rounds)
  row = {
    "draw": "NHIS 3 sections K-norm noise (forest)",
    "against": "poset ball (forest)",
    "n": n,
    "seconds": t["draw"],
    "against_seconds": t["ref"],
    "ratio": t["draw"] / t["ref"],
  }
  print(row, flush=True)
  return [row]


def _large_posets(key, n, only=None, quick=False):
  """Random forests (d = 32, 64, 128: forest vs series-parallel sampler; then 16 and
  24, where ``auto`` switches from one to the other) and synthetic questionnaires
  with joint follow-ups (not forests; d = 128, 300, 512); with ``quick``, d = 32 and
  d = 128 only."""
  from jaxdp.experiments.questionnaire import synthetic_questionnaire

  rng = np.random.default_rng(0)
  cases = []
  for d in (32,) if quick else (32, 64, 128, 16, 24):
    forest = Poset.from_parents(
      [-1] + [int(rng.integers(0, i)) for i in range(1, d)], name=f"random forest d={d}"
    )
    cases += [(forest, "forest"), (forest, "sp")]
  for d in (128,) if quick else (128, 300, 512):
    cases.append((synthetic_questionnaire(0, d), "sp"))
  if only is not None:
    cases = [(p, m) for p, m in cases if only in f"{p.name} ({m})"]
  rows = []
  for poset, method in cases:
    f = jax.jit(lambda k, p=poset, m=method: jaxdp.random.poset_ball(k, p, (n,), method=m))
    t0 = time.perf_counter()
    jax.block_until_ready(f(key))
    first = time.perf_counter() - t0
    t, floor, fast = _timed(f, key, n, 2 * (poset.d + 1))
    rows.append(
      {
        "case": poset.name,
        "d": poset.d,
        "method": method,
        "n": n,
        "first_call_seconds": first,
        "seconds": t,
        "samples_per_s": n / t,
        "floor_seconds": floor,
        "x_floor": t / floor,
        "fast_floor_seconds": fast,
        "x_fast_floor": t / fast,
      }
    )
    print(rows[-1], flush=True)
  return rows


if __name__ == "__main__":
  main()
