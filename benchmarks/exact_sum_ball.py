"""Throughput of the exact sum-ball and vote-ball K-norm noise beside the float
samplers.

  python benchmarks/exact_sum_ball.py [--dk 10:4 50:19 100:37 300:110]
    [--vote 10 50 100 300] [--n 8192] [--out DIR]

Samples per second of ``jaxdp.exact.sum_knorm`` and ``jaxdp.exact.vote_knorm``
(ChaCha20 key, the release path), of the float ``jaxdp.random.knorm`` with the same
ball (Threefry key) and of the exact l_inf noise ``jaxdp.exact.linf_knorm``
(ChaCha20) of the same d, timed in one interleaved run (best of rounds), so their
ratios are measured under the same load; the sum ball's (d, k) pairs default to the
slice's least acceptance at each d. Also the sum ball's plan (cube or wrapped
simplex, a) and its exact acceptance. Writes <out>/exact_sum_ball.{json,md}.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_best, machine, write_results
from folders import add_out

import jaxdp
from jaxdp import exact
from jaxdp.exact.slices import slice_plan


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--dk", nargs="+", default=["10:4", "50:19", "100:37", "300:110"])
  ap.add_argument("--vote", type=int, nargs="*", default=[10, 50, 100, 300])
  ap.add_argument("--n", type=int, default=1 << 13)
  ap.add_argument("--scale", type=float, default=10.0)
  ap.add_argument("--rounds", type=int, default=3)
  add_out(ap)
  args = ap.parse_args(argv)
  n, s = args.n, args.scale
  secure = jaxdp.random.secure_key(bytes(range(32)))
  fast = jax.random.key(1)
  fns, plans = {}, {}
  for dk in args.dk:
    d, k = (int(v) for v in dk.split(":"))
    plans[(d, k)] = slice_plan(d, k)
    ball = jaxdp.SumBall(d, k)
    fns[("exact sum", d, k)] = lambda d=d, k=k: exact.sum_knorm(secure, d, k, s, (n,))
    fns[("float sum", d, k)] = lambda b=ball: jaxdp.random.knorm(fast, b, 1 / s, (n,))
    fns[("exact l_inf", d, k)] = lambda d=d: exact.linf_knorm(secure, d, s, (n,))
  for d in args.vote:
    ball = jaxdp.VoteBall(d)
    fns[("exact vote", d, None)] = lambda d=d: exact.vote_knorm(secure, d, s, (n,))
    fns[("float vote", d, None)] = lambda b=ball: jaxdp.random.knorm(fast, b, 1 / s, (n,))
    fns[("exact l_inf", d, None)] = lambda d=d: exact.linf_knorm(secure, d, s, (n,))
  best = interleaved_best(fns, rounds=args.rounds)
  rows = []
  for (what, d, k), t in best.items():
    row = {"what": what, "d": d, "k": k, "n": n, "seconds": t, "per_s": n / t}
    if k is not None:
      plan = plans[(d, k)]
      row["plan"] = "cube" if plan.a == 0 else f"wrapped a={plan.a}"
      row["acceptance"] = math.exp(plan.log_acc)
    rows.append(row)
  per_s = {(r["what"], r["d"], r["k"] is None): r["per_s"] for r in rows}
  lines = [
    "| d | k | plan | acceptance | exact sum /s | float sum /s | exact l_inf /s "
    "| exact / float |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    if r["what"] != "exact sum":
      continue
    d = r["d"]
    ratio = per_s[("exact sum", d, False)] / per_s[("float sum", d, False)]
    lines.append(
      f"| {d} | {r['k']} | {r['plan']} | {r['acceptance']:.3f} | "
      f"{per_s[('exact sum', d, False)]:,.0f} | {per_s[('float sum', d, False)]:,.0f} | "
      f"{per_s[('exact l_inf', d, False)]:,.0f} | {ratio:.3f} |"
    )
  lines += [
    "",
    "| d | exact vote /s | float vote /s | exact l_inf /s | exact / float |",
    "|---|---|---|---|---|",
  ]
  for d in args.vote:
    e, f, li = (per_s[(w, d, True)] for w in ("exact vote", "float vote", "exact l_inf"))
    lines.append(f"| {d} | {e:,.0f} | {f:,.0f} | {li:,.0f} | {e / f:.3f} |")
  note = (
    f"\n\nn = {n:,} samples per call at scale {s:g}, best of {args.rounds} interleaved "
    "rounds (shared machines: compare rows of one run)."
  )
  write_results(
    args.out,
    "exact_sum_ball",
    {"machine": machine(), "rows": rows, "rounds": args.rounds},
    "\n".join(lines) + note,
  )


if __name__ == "__main__":
  main()
