"""Throughput of the vote ball's exact sampler (K-norm noise and uniform points).

  python benchmarks/vote_ball.py [--d 10 20 50 100] [--n 262144] [--out DIR]

Samples per second of ``jaxdp.random.knorm(key, VoteBall(d), eps, (n,))`` and of
``jaxdp.random.vote_ball`` for each d, and, at d = 50, the same uniform draw with
the sort swapped for ``jnp.sort`` and with other piece sizes (``POINTS_WORK``), all
timed in one interleaved run (best of rounds) so their ratios are measured under the
same load. Writes <out>/vote_ball.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_best, machine, write_results
from folders import add_out

import jaxdp
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers import permutohedron, vote_ball

VARIANT_D = 50


def variant(d, n, work=None, xla_sort=False):
  """A compiled uniform draw of n points traced with another piece size or sort."""
  ball = jaxdp.VoteBall(d)
  saved = (vote_ball.POINTS_WORK, permutohedron.sort_columns)
  try:
    if work is not None:
      vote_ball.POINTS_WORK = work
    if xla_sort:
      permutohedron.sort_columns = lambda x: jnp.sort(x, axis=0)
    f = jax.jit(lambda k: ball.points(k, n, jnp.float32))
    f = f.lower(fast_key(jax.random.key(0))).compile()
  finally:
    vote_ball.POINTS_WORK, permutohedron.sort_columns = saved
  return f


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--d", type=int, nargs="+", default=[10, 20, 50, 100])
  ap.add_argument("--n", type=int, default=1 << 18)
  ap.add_argument("--rounds", type=int, default=7)
  add_out(ap)
  args = ap.parse_args(argv)
  n, key = args.n, jax.random.key(1)
  fns = {}
  for d in args.d:
    ball = jaxdp.VoteBall(d)
    fns[f"knorm d={d}"] = lambda ball=ball: jaxdp.random.knorm(key, ball, 1.0, (n,))
    fns[f"vote_ball d={d}"] = lambda d=d: jaxdp.random.vote_ball(key, d, (n,))
  k = fast_key(key)
  variants = {
    f"points d={VARIANT_D}, POINTS_WORK=2^{w}": variant(VARIANT_D, n, work=1 << w)
    for w in (12, 14, 17, 20)
  }
  variants[f"points d={VARIANT_D}, jnp.sort"] = variant(VARIANT_D, n, xla_sort=True)
  for name, f in variants.items():
    fns[name] = lambda f=f: f(k)
  best = interleaved_best(fns, rounds=args.rounds)
  rows = [{"what": name, "n": n, "seconds": t, "per_s": n / t} for name, t in best.items()]
  lines = ["| draw | n | best seconds | samples/s |", "|---|---|---|---|"]
  lines += [
    f"| {r['what']} | {r['n']:,} | {r['seconds']:.3f} | {r['per_s']:,.0f} |" for r in rows
  ]
  note = (
    f"\n\nPOINTS_WORK = 2^{vote_ball.POINTS_WORK.bit_length() - 1} is the default; "
    "best of interleaved rounds (shared machines: compare rows of one run)."
  )
  write_results(
    args.out,
    "vote_ball",
    {"machine": machine(), "rows": rows, "rounds": args.rounds},
    "\n".join(lines) + note,
  )


if __name__ == "__main__":
  main()
