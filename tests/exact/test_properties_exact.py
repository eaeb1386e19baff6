"""Property: an exact release adds noise that does not depend on the data, and a
refused one spends nothing.

For every exact mechanism, the same key on neighbouring statistics gives outputs
that differ by exactly the statistics' difference (integer arithmetic end to end),
or the release is refused on both with the same fill. A sampler whose noise read the
data, rounded it, or let a sentinel into the sum fails this.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import jaxdp
from jaxdp import (
  Accountant,
  DiscreteGaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  Poset,
  PosetBall,
  release,
)

_POSET = Poset.nhis(1)


def _mechanisms(eps):
  d1 = _POSET.d + 1
  return {
    "laplace": (LaplaceMechanism(eps, 2.0, exact=True), 3),
    "laplace grid": (LaplaceMechanism(eps, 1.0, exact=True, grid=2.0**-3), 3),
    "knorm poset": (KNormMechanism(PosetBall(_POSET), eps, exact=True), d1),
    "knorm l1": (KNormMechanism(LpBall(4, 1), eps, exact=True), 4),
    "knorm linf": (KNormMechanism(LpBall(4, math.inf), eps, exact=True), 4),
    "discrete gaussian": (DiscreteGaussianMechanism(min(eps, 5.0), 1e-6), 3),
  }


@pytest.mark.slow
@settings(
  max_examples=20,
  deadline=None,
  derandomize=True,
  suppress_health_check=[HealthCheck.too_slow],
)
@given(
  name=st.sampled_from(sorted(_mechanisms(1.0))),
  eps=st.sampled_from([0.05, 0.5, 2.0]),
  refuse=st.booleans(),
  seed=st.integers(0, 2**31 - 1),
  stat=st.lists(st.integers(-(10**6), 10**6), min_size=5, max_size=5),
  shift=st.lists(st.integers(-3, 3), min_size=5, max_size=5),
  secure=st.booleans(),
)
def test_exact_outputs_move_by_exactly_the_statistics_change(
  name, eps, refuse, seed, stat, shift, secure
):
  """Each example: one mechanism, a statistic and a neighbour within +-3 per entry,
  released from the same key; with ``refuse`` a first release leaves too little
  budget for the second."""
  mech, dim = _mechanisms(eps)[name]
  x = np.asarray(stat[:dim], np.int32)
  x2 = x + np.asarray(shift[:dim], np.int32)
  if name == "laplace grid":  # a real statistic on the grid 2**-3
    x, x2 = x / 8.0, x2 / 8.0
  key = jaxdp.random.secure_key() if secure else jax.random.key(seed)
  words, impl = jax.random.key_data(key), jax.random.key_impl(key)
  outs = []
  for data in (x, x2):  # the same key, as a new key object each time
    acct = Accountant.create(
      eps * 1.5,
      delta_budget=1e-5,
      secure=secure,
      key=jax.random.wrap_key_data(words, impl=impl),
      allow_test_key=secure,  # the same key bytes for both neighbours
      on_refusal=jaxdp.FillOnRefusal(),
    )
    if refuse:
      acct, _ = release(acct, mech, jnp.zeros_like(jnp.asarray(data)))
    before = (np.asarray(acct.spent_units), np.asarray(acct.spent_delta_units))
    acct, out = release(acct, mech, jnp.asarray(data))
    after = (np.asarray(acct.spent_units), np.asarray(acct.spent_delta_units))
    ok = bool(acct.last_answered)
    if not ok:  # a refused release spends nothing and says so by its flag
      assert all(np.array_equal(a, b) for a, b in zip(before, after))
      assert int(acct.refusals) == 1
    outs.append((ok, np.asarray(out), int(acct.answered)))
  (ok1, y1, n1), (ok2, y2, n2) = outs
  assert ok1 == ok2 and n1 == n2
  if not ok1:  # refused on both: the same data-independent fill
    np.testing.assert_array_equal(y1, y2)
    fill = np.iinfo(np.int32).min if np.issubdtype(y1.dtype, np.integer) else np.nan
    np.testing.assert_array_equal(y1, np.full_like(y1, fill))
    return
  np.testing.assert_array_equal(y2 - y1, x2 - x)
