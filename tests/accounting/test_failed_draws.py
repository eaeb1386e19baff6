"""A release whose exact draw fails after drawing (a RuntimeError from an exact
sampler's host side) is not free: the Session charges it and moves to a fresh key,
and a functional accountant whose release raised is stale."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import exact, queries, rowwise, session_rows
from jaxdp.accounting import guard

MESSAGE = "exact noise beyond +-2^30 (scale too large); nothing released."


def _boom(*_):
  raise RuntimeError(MESSAGE)


def _failing_laplace(key, shape=(), *, scale):
  """Fails at run time, on the host, like the exact refinement (after drawing)."""
  noise = jax.random.bits(key, shape, jnp.uint32).astype(jnp.int32)
  return jax.pure_callback(_boom, jax.ShapeDtypeStruct(shape, jnp.int32), noise, scale)


def test_a_session_charges_a_draw_that_fails_after_drawing(monkeypatch):
  monkeypatch.setattr(queries, "COMPILED", rowwise.LRU(8))  # no program from elsewhere
  monkeypatch.setattr(session_rows, "RELEASES", rowwise.LRU(8))
  monkeypatch.setattr(exact, "laplace", _failing_laplace)
  session = jaxdp.Session(np.array([[1], [0], [1]], np.int32), 1.0, secure=True)
  before = session._acct.key
  with pytest.raises(jaxdp.UnsafeQueryError, match="charged"):
    session.count(lambda r: r[0] == 1, eps=0.25)
  assert session.spent == pytest.approx(0.25, rel=1e-6)
  after = session._acct.key
  assert not np.array_equal(jax.random.key_data(after), jax.random.key_data(before))
  with pytest.raises(jaxdp.StaleAccountantError):  # the failed draw's key is used
    guard.check_unused(before)


def test_a_functional_accountant_whose_draw_failed_is_stale(monkeypatch):
  monkeypatch.setattr(exact, "laplace", _failing_laplace)
  acct = jaxdp.Accountant.create(1.0, key=jax.random.key(0))
  mech = jaxdp.LaplaceMechanism(0.5, exact=True)
  stat = jnp.array([1, 2], jnp.int32)
  with pytest.raises(RuntimeError, match="beyond"):
    jaxdp.release(acct, mech, stat)
  with pytest.raises(jaxdp.StaleAccountantError):
    jaxdp.release(acct, mech, stat)


def test_a_session_does_not_charge_a_query_that_fails_before_drawing():
  session = jaxdp.Session(np.array([[1], [0], [1]], np.int32), 1.0, secure=True)
  with pytest.raises(ValueError):
    session.count(lambda r: r[0] == 1, eps=-1.0)
  assert session.spent == 0.0
