"""Speed of the sum and count balls' exact samplers (uniform points and K-norm noise).

  python benchmarks/query_balls.py [--d 50] [--ks 1,5,15,25,50] [--n 262144] [--out DIR]

In one run, side by side and interleaved (after compilation, the median of several
rounds, each round drawing from a fresh key: a rejection sampler's time varies with
its key's number of retries, which one fixed key would hide):
``jaxdp.random.sum_ball``, ``jaxdp.random.count_ball`` and ``jaxdp.random.knorm``
over both balls for each k, with the l_1 ball's K-norm noise
(Laplace coordinates) in the same dimension as a reference, and the exact probability
that a first proposal is accepted, from the host tables: the sum ball's slice S(d, k),
the count ball's two halves together (``CountBall.row_acceptance``). Also from the
tables, the proposals a row takes on average (:func:`proposals`): the count ball
proposes both halves of a row together and retries each until accepted, so a row
takes the larger of two geometric counts; proposing each half alone would take fewer,
counted in rows of d coordinates ("halves apart": the sampler's own rejection work
if its two halves were decoupled).

Writes <out>/query_balls.{json,md} and <out>/query_balls_table.md (the table with the
machine, which the K-norm guide includes).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_times, machine, write_results
from folders import add_out

import jaxdp
from jaxdp.samplers.slice_kernel import proposal_table


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--d", type=int, default=50)
  ap.add_argument("--ks", default="1,5,15,25,50")
  ap.add_argument("--n", type=int, default=1 << 18)
  ap.add_argument("--rounds", type=int, default=9)
  add_out(ap)
  args = ap.parse_args(argv)
  d, n = args.d, args.n
  ks = [int(k) for k in args.ks.split(",")]
  fns = {
    "knorm l_1 (reference)": lambda key: jaxdp.random.knorm(
      key, jaxdp.LpBall(d, 1), 1.0, (n,)
    )
  }
  for k in ks:
    sb, cb = jaxdp.SumBall(d, k), jaxdp.CountBall(d, k)
    fns[f"sum_ball k={k}"] = lambda key, k=k: jaxdp.random.sum_ball(key, d, k, (n,))
    fns[f"knorm sum k={k}"] = lambda key, b=sb: jaxdp.random.knorm(key, b, 1.0, (n,))
    fns[f"count_ball k={k}"] = lambda key, k=k: jaxdp.random.count_ball(key, d, k, (n,))
    fns[f"knorm count k={k}"] = lambda key, b=cb: jaxdp.random.knorm(key, b, 1.0, (n,))
  key = jax.random.key(0)
  times = interleaved_times(fns, args.rounds, lambda r: (jax.random.fold_in(key, r),))
  median = {name: float(np.median(t)) for name, t in times.items()}
  best = {name: min(t) for name, t in times.items()}
  rows = []
  for name, seconds in median.items():
    k = int(name.split("k=")[1]) if "k=" in name else None
    acc = 1.0
    if k and "sum" in name:  # the best proposal for S(d, k)
      acc = math.exp(proposal_table(d, k).log_acc[d])
    elif k:  # both halves of a row (their sizes vary by row)
      acc = jaxdp.CountBall(d, k).row_acceptance()
    together, apart = proposals(name, d, k)
    rows.append(
      {
        "draw": name,
        "d": d,
        "n": n,
        "seconds": seconds,
        "best_seconds": best[name],
        "samples_per_s": n / seconds,
        "first_acceptance": acc,
        "proposals_per_row": together,
        "proposals_halves_apart": apart,
      }
    )
  head = (
    "| draw | d | samples/s | first acceptance | proposals a row | halves apart |\n"
    "|---|---|---|---|---|---|\n"
  )
  table = head + "\n".join(
    f"| {r['draw']} | {d} | {r['samples_per_s']:,.0f} | {r['first_acceptance']:.3f} | "
    f"{r['proposals_per_row']:.2f} | {r['proposals_halves_apart']:.2f} |"
    for r in rows
  )
  m = machine()
  write_results(args.out, "query_balls", {"machine": m, "rows": rows}, table)
  where = (
    f"Measured on {m['cpu']}, {m['cpu_count']} CPUs, backend {m['backend']}, "
    f"jax {m['jax']}; {n:,} samples a call, the median of {args.rounds} rounds, each "
    "from a fresh key."
  )
  Path(args.out, "query_balls_table.md").write_text(f"{table}\n\n{where}\n")


def proposals(name: str, d: int, k: int | None) -> tuple[float, float]:
  """Expected proposals a row takes, from the host tables: ``(together, apart)``.

  The sum ball (and the l_1 reference, k None) proposes a row whole: 1 / acceptance
  for both. The count ball draws the class j of a row (the number of its positive
  coordinates) and proposes its halves of sizes j and d - j together, retrying each
  until accepted (acceptances p and q): E[max(G_p, G_q)] = 1/p + 1/q - 1/(1 - (1 - p)
  (1 - q)) for geometric G. Apart: (j / p + (d - j) / q) / d, the same work if each
  half were proposed alone, in rows of d coordinates. Both averaged over j.
  """
  if k is None:
    return 1.0, 1.0
  if "sum" in name:
    acc = math.exp(proposal_table(d, k).log_acc[d])
    return 1.0 / acc, 1.0 / acc
  weights = jaxdp.CountBall(d, k).class_weights()
  weights = np.exp(weights - np.max(weights))
  weights /= np.sum(weights)
  p = np.exp(proposal_table(d, k, cone=True).log_acc)
  q = p[::-1]
  j = np.arange(d + 1)
  together = 1 / p + 1 / q - 1 / (1 - (1 - p) * (1 - q))
  apart = (j / p + (d - j) / q) / d
  return float(weights @ together), float(weights @ apart)


if __name__ == "__main__":
  main()
