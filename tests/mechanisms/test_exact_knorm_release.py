"""Exact K-norm releases of per-row integer contributions (l_1 and l_inf balls):
through :func:`jaxdp.release_partitioned` and :meth:`jaxdp.Session.release` the rows
are summed as integers, a row beyond the sensitivity counting as 0 (Joseph, Ribero &
Yu 2025, Lemma 2.2: the sum's K-norm sensitivity is then the bound)."""

import jax
import numpy as np
import pytest

import jaxdp

# row 2's l_1 norm is 15 and its l_inf norm 5: beyond either bound below, it counts 0
ROWS = np.array([[1, 0, 2], [0, 1, 1], [5, 5, 5], [0, 0, 1]], np.int32)
KEPT = ROWS[[0, 1, 3]].sum(axis=0)
BALLS = {"l1": (jaxdp.LpBall(3, 1), 3.0), "linf": (jaxdp.LpBall(3, np.inf), 2.0)}


def _mech(ball, eps):
  shape, sensitivity = BALLS[ball]
  return jaxdp.KNormMechanism(shape, eps, sensitivity, exact=True)


@pytest.mark.parametrize("ball", sorted(BALLS))
def test_session_releases_exact_knorm_integer_sums(ball):
  """At eps 1e6 the exact noise (scale 3e-6) rounds to 0 with probability
  1 - exp(-1.6e5): the release is the integer sum of the kept rows."""
  session = jaxdp.Session(ROWS, eps_budget=1e7, secure=True)
  out = session.release(_mech(ball, 1e6))
  assert out.dtype == np.int32
  np.testing.assert_array_equal(out, KEPT)


@pytest.mark.parametrize("ball", sorted(BALLS))
def test_session_releases_exact_knorm_by_part(ball):
  session = jaxdp.Session(ROWS, eps_budget=1e7, secure=True)
  out = session.release(_mech(ball, 1e6), by=lambda r: (r[2] > 1).astype(int), num_parts=2)
  np.testing.assert_array_equal(out, [ROWS[[1, 3]].sum(0), ROWS[0]])


@pytest.mark.parametrize("ball", sorted(BALLS))
def test_partitioned_exact_knorm_is_noisy_at_a_small_eps(ball):
  """At eps 0.5 the integer noise is not all zero (the release is not the sum)."""
  acct = jaxdp.Accountant.create(10.0, key=jax.random.key(3))
  part = np.zeros(len(ROWS), np.int32)
  _, out = jaxdp.release_partitioned(acct, _mech(ball, 0.5), ROWS, part, 1)
  out = np.asarray(out)
  assert out.dtype == np.int32 and out.shape == (1, 3)
  assert np.any(out[0] != KEPT)


def test_exact_knorm_refuses_float_contributions():
  acct = jaxdp.Accountant.create(10.0, key=jax.random.key(3))
  with pytest.raises(ValueError, match="sums integer contributions"):
    jaxdp.release_partitioned(
      acct, _mech("l1", 0.5), ROWS.astype(np.float32), np.zeros(len(ROWS), np.int32), 1
    )
