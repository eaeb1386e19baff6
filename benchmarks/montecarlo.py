"""Throughput of the Monte Carlo engine on the NHIS study statistic.

  python benchmarks/montecarlo.py [--n 4000000] [--out DIR]

Draws per second of ``jaxdp.montecarlo.estimate`` for the NHIS (3 sections) ratio
E||Z||^2/(d/3) with exactly uniform poset-ball draws, on 1 device and on all local
devices, beside calling ``jaxdp.random.poset_ball`` directly on the same number of
draws in one batch (no streaming). Writes <out>/montecarlo.{json,md}.
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
from jaxdp import montecarlo


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=4_000_000)
  add_out(ap)
  args = ap.parse_args(argv)
  p = jaxdp.Poset.nhis(3)
  draw = lambda k, m: jaxdp.random.poset_ball(k, p, (m,))
  stat = lambda z: jnp.sum(z[:, 1:] ** 2, axis=1) / (p.d / 3)
  rows = []
  for devs in sorted({1, len(jax.devices())}):
    kw = dict(chunk_size=1 << 20, devices=jax.devices()[:devs], progress=False)
    montecarlo.estimate(jax.random.key(0), draw, stat, 1 << 20, **kw)  # compile
    t0 = time.perf_counter()
    est = montecarlo.estimate(jax.random.key(1), draw, stat, args.n, **kw)
    t = time.perf_counter() - t0
    rows.append(
      {
        "how": f"montecarlo.estimate, {devs} device(s)",
        "n": args.n,
        "seconds": t,
        "draws_per_s": args.n / t,
        "estimate": float(est.mean),
        "stderr": float(est.stderr),
      }
    )
  f = jax.jit(lambda k: stat(jaxdp.random.poset_ball(k, p, (args.n,))).mean())
  jax.block_until_ready(f(jax.random.key(0)))
  t0 = time.perf_counter()
  jax.block_until_ready(f(jax.random.key(1)))
  t = time.perf_counter() - t0
  rows.append(
    {
      "how": "poset_ball in one batch (not streamed)",
      "n": args.n,
      "seconds": t,
      "draws_per_s": args.n / t,
    }
  )
  lines = ["| how | draws | seconds | draws/s |", "|---|---|---|---|"]
  lines += [
    f"| {r['how']} | {r['n']:,} | {r['seconds']:.2f} | {r['draws_per_s']:,.0f} |"
    for r in rows
  ]
  write_results(
    args.out, "montecarlo", {"machine": machine(), "rows": rows}, "\n".join(lines)
  )


if __name__ == "__main__":
  main()
