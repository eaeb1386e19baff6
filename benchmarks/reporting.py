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
import sys
import time
from pathlib import Path

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
  table = "| poset | d | call | first (s) | again (s) |\n| --- | --- | --- | --- | --- |\n"
  table += "\n".join(
    f"| {r['poset']} | {r['d']} | `{r['call']}` | {r['first_s']:.2f} | {r['again_s']:.2f} |"
    for r in rows
  )
  table += (
    "\n\nDefault sizes: error bars from 200,000 noise vectors (27,869 for d = 300), "
    "4,000 bootstrap replicates, 4,000 simulated releases per mechanism for the "
    "advice (870 for d = 300). `first` includes compiling the poset-ball sampler and "
    "the batched projection for the poset."
  )
  if args.quick:
    table += " (A --quick run: smaller sizes.)"
  write_results(args.out, "reporting", {"machine": machine(), "rows": rows}, table)
  return np.array([r["again_s"] for r in rows])


if __name__ == "__main__":
  main()
