"""Row clipping into the l_p ball holds at every scale.

A row's l_p norm computed as (sum |x_i|^p)^(1/p) in float32 underflows to 0 when
every |x_i|^p does (p = 10 at |x| = 1e-5; p = 2 at 1e-25), and a row of norm 0 was
summed unclipped: one person moved a Session's or a partitioned release's statistic
by 100 to 10^6 times the declared sensitivity.
"""

import math

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.mechanisms.statistics import clipped_part_sums
from tests.helpers.exactness import lp_norm


@pytest.mark.parametrize("p", [2.0, 3.0, 10.0, 100.0, math.inf, 1.0])
@pytest.mark.parametrize("bound", [1e-30, 1e-7, 1.0])
@pytest.mark.parametrize("jit", [False, True])
def test_every_row_is_clipped_into_the_ball(p, bound, jit):
  """Rows from 1e-35 to 1e30 in magnitude, one part each: every clipped row's l_p
  norm (float64, scaled by its largest entry) is at most bound (1 + 1e-5)."""
  mags = np.float32(10.0) ** np.arange(-35, 31, dtype=np.float32)
  rows = np.stack([mags, 0.5 * mags, -0.25 * mags], axis=1).astype(np.float32)
  n = len(rows)

  def fn(r):
    return clipped_part_sums(r, np.arange(n), n, p, bound)

  out = np.asarray((jax.jit(fn) if jit else fn)(rows))
  assert np.all(lp_norm(out, p) <= bound * (1 + 1e-5))
  small = lp_norm(rows, p) <= bound * (1 - 1e-5)  # rows inside the ball pass as they are
  np.testing.assert_allclose(out[small], rows[small], rtol=1e-6)


def test_a_session_row_at_100_times_the_sensitivity_is_clipped():
  """The review's attack: K-norm noise of sensitivity 1e-7 in the l_10 ball, a
  dataset of zeros and its neighbour with one more row of 1e-5. Unclipped, every
  release of the neighbour sat at 1e-5; clipped it is within a few 1e-7 of 0 (the
  median of five releases below 1e-6: noise Gamma(2) x 1e-7 exceeds 9e-7 with
  probability about 1e-3)."""
  rows = np.append(np.zeros(100, np.float32), np.float32(1e-5))
  mech = jaxdp.KNormMechanism(jaxdp.LpBall(1, 10.0), eps=1.0, sensitivity=1e-7)
  session = jaxdp.Session(rows, eps_budget=5.0)
  out = [float(session.release(mech, lambda r: r[None])[0]) for _ in range(5)]
  assert abs(np.median(out)) < 1e-6, out
