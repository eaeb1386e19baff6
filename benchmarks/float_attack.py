"""The floating-point attack on float32 Laplace releases, computed exactly.

A float32 Laplace sample is a deterministic function of 23 random mantissa bits
(``jax.random.laplace``: a uniform from the bits, then sign(u) log1p(-|u|)), so the
output of ``LaplaceMechanism(eps).randomize`` on a count x takes at most 2^23 values,
each with probability 2^-23. This script enumerates all of them for x = 0 and x = 1
and reports the probability that an output under one input is *impossible* under the
other: such an output identifies the input with certainty, which no eps-DP mechanism
allows (Mironov, CCS 2012). No sampling: the figures are exact for this generator.

The enumeration reproduces ``jax.random.laplace``'s arithmetic; the script checks it
against ``jax.random.laplace`` itself on 100,000 draws before using it.

Run: python benchmarks/float_attack.py [--eps 0.1,1,10] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from folders import add_out

import jaxdp


@jax.jit
def _laplace_from_bits(bits):
  """jax.random.laplace(key, shape, float32) as a function of its 32-bit words."""
  f32 = jnp.float32
  minval, maxval = f32(-1.0) + jnp.finfo(f32).epsneg, f32(1.0)
  mant = jax.lax.shift_right_logical(bits, jnp.uint32(32 - 23))
  one = jnp.asarray(np.array(1.0, np.float32).view(np.uint32))
  floats = jax.lax.bitcast_convert_type(mant | one, f32) - f32(1.0)
  u = jax.lax.max(minval, floats * (maxval - minval) + minval)
  return jax.lax.sign(u) * jax.lax.log1p(-jnp.abs(u))


def _check_replica():
  key = jax.random.key(123)
  ours = _laplace_from_bits(jax.random.bits(key, (100_000,), jnp.uint32))
  np.testing.assert_array_equal(
    np.asarray(ours), np.asarray(jax.random.laplace(key, (100_000,)))
  )


def impossible_share(eps: float, x0: float, x1: float) -> tuple[float, float]:
  """P(output under x0 is impossible under x1), and the reverse, exactly."""
  noise = _laplace_from_bits(jnp.arange(2**23, dtype=jnp.uint32) << 9)
  mech = jaxdp.LaplaceMechanism(eps)
  scale = np.float32(mech.sensitivity / eps)
  outs = [np.asarray(jnp.float32(x) + noise * scale).view(np.uint32) for x in (x0, x1)]
  a, b = outs
  return float(np.mean(~np.isin(a, b))), float(np.mean(~np.isin(b, a)))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  ap.add_argument(
    "--eps", default="0.1,1,10", help="comma-separated eps values (default: 0.1,1,10)"
  )
  add_out(ap)
  args = ap.parse_args(argv)
  _check_replica()
  rows = []
  for eps in (float(e) for e in args.eps.split(",")):
    p01, p10 = impossible_share(eps, 0.0, 1.0)
    rows.append(
      {
        "eps": eps,
        "x0": 0,
        "x1": 1,
        "impossible_under_other_from_0": p01,
        "impossible_under_other_from_1": p10,
      }
    )
  table = (
    "| eps | counts | P(output under 0 impossible under 1) | "
    "P(output under 1 impossible under 0) |\n|---|---|---|---|\n"
  )
  table += "\n".join(
    f"| {r['eps']:g} | 0 vs 1 | {r['impossible_under_other_from_0']:.1%}"
    f" | {r['impossible_under_other_from_1']:.1%} |"
    for r in rows
  )
  write_results(args.out, "float_attack", {"machine": machine(), "rows": rows}, table)


if __name__ == "__main__":
  main()
