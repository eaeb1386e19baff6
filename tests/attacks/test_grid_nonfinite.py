"""Non-finite traced statistics of the exact releases.

On a grid, +-inf must clip like the largest finite values (snapping is monotone on
the extended reals), and NaN must not become a plausible release of 0: under jit the
review's ``LaplaceMechanism(8.0, exact=True, grid=2**-4)`` answered a traced inf,
-inf or NaN with noise around 0 while a traced 3e38 was clipped to 2^30 units. The
other exact mechanisms take integer statistics only, so a float (and so a non-finite)
one is refused when traced.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import (
  DiscreteGaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  Poset,
  PosetBall,
)
from jaxdp.random import secure_key

F32_MAX = float(np.finfo(np.float32).max)


def test_infinite_grid_statistics_clip_like_the_largest_finite_ones_and_nan_fails():
  """One key, one compilation: inf is released exactly as float32's largest value
  (the same noise, both clipped to 2^30 units), -inf as its negative; NaN fails at
  run time instead of being released as 0."""
  mech = LaplaceMechanism(8.0, exact=True, grid=2.0**-4)
  run = jax.jit(mech.randomize)
  key = secure_key()
  infinite = run(key, jnp.array([np.inf, -np.inf, 1.5], jnp.float32))
  largest = run(key, jnp.array([F32_MAX, -3e38, 1.5], jnp.float32))
  np.testing.assert_array_equal(np.asarray(infinite), np.asarray(largest))
  limit = 2**30 * 2.0**-4
  assert abs(float(infinite[0]) - limit) < 2**20 and abs(float(infinite[1]) + limit) < 2**20
  with pytest.raises(Exception, match=r"data at index \(1,\) is NaN: an exact release"):
    jax.block_until_ready(run(key, jnp.array([0.0, np.nan, 1.5], jnp.float32)))


def test_a_concrete_nonfinite_grid_statistic_is_refused_before_drawing():
  mech = LaplaceMechanism(8.0, exact=True, grid=2.0**-4)
  for bad in (np.inf, -np.inf, np.nan):
    with pytest.raises(ValueError, match="non-finite value"):
      mech.randomize(secure_key(), jnp.array([1.0, bad], jnp.float32))


@pytest.mark.parametrize(
  "mech",
  [
    KNormMechanism(LpBall(3, 2), 0.5, exact=True),
    KNormMechanism(LpBall(3, math.inf), 0.5, exact=True),
    KNormMechanism(PosetBall(Poset.from_edges(2, [(1, 0)])), 0.5, exact=True),
    DiscreteGaussianMechanism(1.0, 1e-6),
    LaplaceMechanism(0.5, exact=True),
  ],
  ids=["l2", "linf", "poset", "discrete-gaussian", "laplace-no-grid"],
)
def test_exact_mechanisms_without_a_grid_refuse_a_traced_float_statistic(mech):
  """No float reaches them, so no inf or NaN either (refused while tracing)."""
  x = jnp.array([np.inf, np.nan, 1.0], jnp.float32)
  with pytest.raises(ValueError, match="needs an integer statistic"):
    jax.jit(mech.randomize)(secure_key(), x)
