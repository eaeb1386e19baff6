"""Stale accountants inside traced programs, and refusals that cannot pass silently.

Two releases from one accountant value share their noise. Eagerly the guard follows
the key object; inside one traced program (``jit``, a loop body, ``vmap``) the two
releases hold the same key tracer, and an accountant closed over by a loop body is a
tracer of the enclosing trace: both are refused at trace time, before any noise.
Creating an accountant consumes its key. A refused release raises by default
(:class:`jaxdp.RaiseOnRefusal`); NaN comes back only when the caller chose
:class:`jaxdp.FillOnRefusal`.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from jaxdp import (
  Accountant,
  FillOnRefusal,
  LaplaceMechanism,
  ReleaseRefusedError,
  StaleAccountantError,
  release,
)

MECH = LaplaceMechanism(0.1)  # eps 0.1: ten releases fit a budget of 1
X = jnp.zeros(3)
XS = jnp.zeros((3, 3))


def _acct(seed, budget=1.0, **kw):
  return Accountant.create(budget, key=jax.random.key(seed), **kw)


def _distinct_rows(ys) -> int:
  return len({tuple(r) for r in np.asarray(ys).reshape(len(ys), -1).tolist()})


# ------------------------------------------------------------------ stale keys
def _twice(acct, x):
  """Two releases from the same accountant value: the same noise twice."""
  _, y1 = release(acct, MECH, x)
  acct2, y2 = release(acct, MECH, x)
  return acct2, y1, y2


def test_two_releases_from_one_accountant_in_one_jit_are_refused_at_trace_time():
  with pytest.raises(StaleAccountantError, match="in this traced program"):
    jax.jit(_twice)(_acct(0), X)


def test_two_releases_from_one_batch_of_accountants_under_vmap_are_refused():
  accts = jax.vmap(lambda k: Accountant.create(1.0, key=k))(
    jax.random.split(jax.random.key(1), 3)
  )
  with pytest.raises(StaleAccountantError, match="in this traced program"):
    jax.vmap(_twice)(accts, XS)


def _chain_jit(acct, x):
  outs = []
  for _ in range(3):
    acct, y = release(acct, MECH, x)
    outs.append(y)
  return acct, jnp.stack(outs)


def _chain_scan(acct, x):
  def step(a, _):
    return release(a, MECH, x)

  return lax.scan(step, acct, None, length=3)


def _chain_fori(acct, x):
  def step(i, carry):
    a, ys = carry
    a, y = release(a, MECH, x)
    return a, ys.at[i].set(y)

  return lax.fori_loop(0, 3, step, (acct, jnp.zeros((3,) + x.shape)))


@pytest.mark.parametrize("chain", [_chain_jit, _chain_scan, _chain_fori])
def test_releases_threaded_through_jit_scan_and_fori_loop_are_answered(chain):
  acct, ys = jax.jit(chain)(_acct(2), X)
  assert int(acct.answered) == 3 and bool(acct.last_answered)
  assert _distinct_rows(ys) == 3  # three draws, from three keys


@pytest.mark.parametrize("loop", ["scan", "fori_loop", "map"])
def test_an_accountant_closed_over_by_a_loop_body_is_refused(loop):
  """Every step of the body would release from the same key: the same noise on
  every step. The accountant is a tracer of the enclosing jit, not of the body."""

  def replay(acct, xs):
    def step(x):
      return release(acct, MECH, x)[1]

    if loop == "scan":
      return lax.scan(lambda c, x: (c, step(x)), 0, xs)[1]
    if loop == "fori_loop":
      return lax.fori_loop(0, 3, lambda i, ys: ys.at[i].set(step(xs[i])), xs)
    return lax.map(step, xs)

  with pytest.raises(StaleAccountantError, match="closed over"):
    jax.jit(replay)(_acct(3), XS)


def test_a_cond_takes_the_accountant_as_an_operand_not_as_a_closure():
  other = LaplaceMechanism(0.2)

  def operand(acct, x, p):
    return lax.cond(p, lambda a: release(a, MECH, x), lambda a: release(a, other, x), acct)

  def closure(acct, x, p):
    return lax.cond(p, lambda: release(acct, MECH, x), lambda: release(acct, other, x))

  acct, _ = jax.jit(operand)(_acct(4), X, True)
  assert int(acct.answered) == 1
  with pytest.raises(StaleAccountantError):
    jax.jit(closure)(_acct(5), X, True)


def test_two_accountants_from_one_key_are_refused():
  key = jax.random.key(6)
  Accountant.create(1.0, key=key)
  with pytest.raises(StaleAccountantError, match="another accountant"):
    Accountant.create(1.0, key=key)
  raw = jax.random.key_data(jax.random.key(7))  # raw key data likewise
  Accountant.create(1.0, key=raw)
  with pytest.raises(StaleAccountantError):
    Accountant.create(1.0, key=raw)
  acct = _acct(8)
  release(acct, MECH, X)
  with pytest.raises(StaleAccountantError):  # a key a release already used
    Accountant.create(1.0, key=acct.key)

  def two(key, x):
    _, y = release(Accountant.create(1.0, key=key), MECH, x)
    _, z = release(Accountant.create(1.0, key=key), MECH, x)
    return y, z

  with pytest.raises(StaleAccountantError, match="in this traced program"):
    jax.jit(two)(jax.random.key(9), X)


def test_accountants_from_split_keys_under_vmap_are_fine():
  def one(k, x):
    return release(Accountant.create(1.0, key=k), MECH, x)

  accts, ys = jax.jit(jax.vmap(one))(jax.random.split(jax.random.key(10), 3), XS)
  assert np.asarray(accts.answered).tolist() == [1, 1, 1]
  assert _distinct_rows(ys) == 3


# ------------------------------------------------------------------ refusals
def _over(acct, x):
  """Two releases of eps 0.1 from a budget of 0.15: the second is refused."""
  acct, _ = release(acct, MECH, x)
  return release(acct, MECH, x)


def test_a_refused_release_raises_on_the_host_before_any_noise():
  acct, _ = release(_acct(11, 0.15), MECH, X)
  with pytest.raises(ReleaseRefusedError, match="FillOnRefusal"):
    release(acct, MECH, X)
  # nothing was drawn: the accountant is unchanged and answers a cheaper release
  acct, y = release(acct, LaplaceMechanism(0.04), X)
  assert bool(acct.last_answered) and int(acct.answered) == 2
  assert np.isfinite(np.asarray(y)).all()


def test_a_refused_release_inside_jit_fails_the_run_instead_of_returning_nan():
  with pytest.raises(RuntimeError, match="ReleaseRefusedError"):  # JaxRuntimeError
    jax.block_until_ready(jax.jit(_over)(_acct(12, 0.15), X))


def test_a_refused_lane_of_a_batch_in_a_scan_fails_the_run():
  """One callback for the whole batch, at the step where a lane is refused."""
  accts = jax.vmap(lambda k: Accountant.create(1.0, key=k))(
    jax.random.split(jax.random.key(16), 2)
  )

  def steps(acct):
    return lax.scan(lambda a, _: release(a, MECH, X), acct, None, length=11)

  with pytest.raises(RuntimeError, match="ReleaseRefusedError"):
    jax.block_until_ready(jax.jit(jax.vmap(steps))(accts))


def test_fill_on_refusal_returns_the_flagged_fill():
  acct, y = jax.jit(_over)(_acct(13, 0.15, on_refusal=FillOnRefusal()), X)
  assert not bool(acct.last_answered) and int(acct.refusals) == 1
  assert np.isnan(np.asarray(y)).all()


def test_only_the_policy_classes_are_accepted():
  with pytest.raises(ValueError, match="on_refusal"):
    _acct(14, on_refusal="fill")
  acct = dataclasses.replace(_acct(15), on_refusal=object())
  with pytest.raises(ValueError, match="on_refusal"):
    release(acct, MECH, X)
