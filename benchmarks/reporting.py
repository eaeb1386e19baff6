"""Error bars and mechanism advice: how long a user waits.

Times ``jaxdp.error_bars`` (the poset ball: Monte Carlo quantiles of simulated noise),
``jaxdp.consistent_error_bars`` (bootstrap replicates, each projected by
``jaxdp.consistent``) and ``jaxdp.advise`` (every noise, with delta = 1e-6) at their
default sizes on NHIS-3 (d = 15) and a synthetic 300-question questionnaire, side by
side in one run. ``first`` includes compiling the poset-ball sampler for that poset (once per
process); ``again`` is the best of three later calls.

Run: python benchmarks/reporting.py [--out DIR] [--quick]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from folders import add_out

import jaxdp
from jaxdp.experiments.questionnaire import synthetic_questionnaire


def _time(fn):
  t0 = time.perf_counter()
  fn()
  first = time.perf_counter() - t0
  again = []
  for _ in range(3):
    t0 = time.perf_counter()
    fn()
    again.append(time.perf_counter() - t0)
  return first, min(again)


def _per_release(mech, released, calls: int = 20_000) -> float:
  """Releases per second of ``error_bars(mech).interval(released)``, best of 3."""
  best = math.inf
  for _ in range(3):
    t0 = time.perf_counter()
    for _ in range(calls):
      jaxdp.error_bars(mech).interval(released)
    best = min(best, time.perf_counter() - t0)
  return calls / best


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  add_out(ap)
  ap.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
  args = ap.parse_args(argv)
  n_bars, n_sim = (20_000, 500) if args.quick else (None, None)  # None: the defaults
  rows = []
  for poset in (jaxdp.Poset.nhis(3), synthetic_questionnaire(0, 300)):
    mech = jaxdp.PosetCountMechanism(poset, 1.0)
    x = jaxdp.reporting.default_counts(poset)
    cases = {
      "error_bars": lambda: jaxdp.error_bars(mech, num_samples=n_bars),
      "consistent_error_bars": lambda: jaxdp.consistent_error_bars(
        x, mech, num_samples=n_sim or 4_000
      ),
      "advise": lambda: jaxdp.advise(poset, 1.0, 1e-6, num_samples=n_sim),
    }
    for name, fn in cases.items():
      first, again = _time(fn)
      rows.append(
        {
          "poset": poset.name,
          "d": poset.d,
          "call": name,
          "first_s": first,
          "again_s": again,
        }
      )
      print(rows[-1], flush=True)
    rate = _per_release(mech, np.asarray(x, np.float64) + 0.5)
    t0 = time.perf_counter()  # a key not seen before: the bars are simulated afresh
    jaxdp.error_bars(mech, num_samples=n_bars, key=jax.random.key(len(rows)))
    miss = time.perf_counter() - t0
    rows.append(
      {
        "poset": poset.name,
        "d": poset.d,
        "call": "error_bars per release",
        "releases_per_s": rate,
        "uncached_s": miss,
      }
    )
    print(rows[-1], flush=True)
  timed = [r for r in rows if "first_s" in r]
  table = "| poset | d | call | first (s) | again (s) |\n| --- | --- | --- | --- | --- |\n"
  table += "\n".join(
    f"| {r['poset']} | {r['d']} | `{r['call']}` | {r['first_s']:.2f} | {r['again_s']:.2f} |"
    for r in timed
  )
  table += (
    "\n\n| poset | d | `error_bars(mech).interval(y)` per release (releases/s) "
    "| bars simulated afresh (s) | speed-up |\n| --- | --- | --- | --- | --- |\n"
  )
  table += "\n".join(
    f"| {r['poset']} | {r['d']} | {r['releases_per_s']:,.0f} | {r['uncached_s']:.2f} "
    f"| {r['releases_per_s'] * r['uncached_s']:,.0f}x |"
    for r in rows
    if "releases_per_s" in r
  )
  table += (
    "\n\nDefault sizes: error bars from 200,000 noise vectors (27,869 for d = 300), "
    "4,000 bootstrap replicates, 4,000 simulated releases per mechanism for the "
    "advice (870 for d = 300). `first` includes compiling the poset-ball sampler and "
    "the batched projection for the poset; `again` for `error_bars` reuses the kept "
    "bars, as every later call for the same mechanism does."
  )
  if args.quick:
    table += " (A --quick run: smaller sizes.)"
  write_results(args.out, "reporting", {"machine": machine(), "rows": rows}, table)
  return np.array([r["again_s"] for r in timed])


if __name__ == "__main__":
  main()
