"""Attacks on the sum, count and vote query mechanisms and their balls through the
public API (``import jaxdp`` and the guides): each test asserts a guarantee the docs
state and failed on the code it was written against."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxdp

# three datasets of two count rows (d = 4, k = 1); the middle one differs from the
# others in one row, so a replayed noise shows the exact change of the totals
_COUNT_DATA = jnp.array(
  [
    [[1, 0, 0, 0], [0, 1, 0, 0]],
    [[1, 0, 0, 0], [0, 0, 1, 0]],
    [[1, 0, 0, 0], [0, 1, 0, 0]],
  ],
  jnp.int32,
)


def _scan_keeping_input(mech):
  def body(acct, rows):
    _, out = jaxdp.release(acct, mech, rows)  # the new accountant is dropped
    return acct, out

  return lambda acct: lax.scan(body, acct, _COUNT_DATA)


def _fori_keeping_input(mech):
  def body(i, carry):
    acct, outs = carry
    _, out = jaxdp.release(acct, mech, _COUNT_DATA[i])
    return acct, outs.at[i].set(out)

  empty = jnp.zeros(_COUNT_DATA.shape[::2], jnp.int32)
  return lambda acct: lax.fori_loop(0, len(_COUNT_DATA), body, (acct, empty))


def _jit_keeping_input(mech):
  @jax.jit
  def step(acct, rows):
    _, out = jaxdp.release(acct, mech, rows)
    return acct, out

  def run(acct):
    outs = []
    for rows in _COUNT_DATA:  # continues from the accountant each call returns
      acct, out = step(acct, rows)
      outs.append(out)
    return acct, jnp.stack(outs)

  return run


@pytest.mark.xfail(
  strict=True,
  reason="not detected: the guard sees one release per trace; a body or step that "
  "returns its input accountant starts every step from one key (documented in the "
  "trust model and the accounting guide; jax_debug_key_reuse raises KeyReuseError)",
)
@pytest.mark.parametrize(
  "loop", [_scan_keeping_input, _fori_keeping_input, _jit_keeping_input]
)
def test_a_loop_body_returning_its_input_accountant_is_not_a_free_replay(loop):
  """A ``lax.scan`` (or ``fori_loop``/``while_loop``) body that releases from its
  carry and returns the carry it was given, not the accountant ``release`` returned
  (``_, out = release(acct, ...); return acct, out``: one wrong name), runs the
  release once per step from the same key and never adds its cost. So does a jitted
  step with that mistake, called again on the accountant it returns (what the guide
  says to do between jitted calls). With a secure accountant and a budget of one
  release, all three exact count releases were answered with one noise vector and
  nothing spent: the differences of the outputs are the exact differences of the
  totals (here, which box the second person ticked). The guide says the stale guard
  covers loop bodies at trace time and does not list this case (only DP training
  documents it); ``jax_debug_key_reuse`` finds it, jaxdp's guard did not."""
  mech = jaxdp.CountQueryMechanism(4, 1, 0.1, exact=True)
  acct = jaxdp.Accountant.create(
    0.1, secure=True, key=jaxdp.random.secure_key(bytes(range(32))), allow_test_key=True
  )
  try:
    fin, outs = loop(mech)(acct)
  except (jaxdp.StaleAccountantError, jax.errors.KeyReuseError):
    return  # refused before any noise: fine
  noise = np.asarray(outs) - np.asarray(_COUNT_DATA.sum(axis=1))
  replayed = (noise[0] == noise[1]).all() and (noise[1] == noise[2]).all()
  assert not replayed, f"three releases drew one noise {noise[0]}; spent {fin.spent_eps}"
  assert float(fin.spent_eps) > 0.0, "three answered releases, nothing spent"


@pytest.mark.parametrize(
  "ball",
  [jaxdp.SumBall(3, 1), jaxdp.CountBall(3, 1), jaxdp.VoteBall(3)],
  ids=lambda b: type(b).__name__,
)
def test_a_stacked_statistic_is_not_several_releases_for_one_charge(ball):
  """``KNormMechanism(ball, eps)`` charges eps for "a statistic of sensitivity 1 in
  the ball's norm", a d-vector, but takes any statistic whose last axis is d. Handed
  one query's totals stacked m times (``np.broadcast_to(totals, (m, d))``), a secure
  release drew m independent noise vectors for one charge of eps: their mean has
  1/sqrt(m) of the noise, the totals learned as with m releases (m eps). The ball's
  norm of an (m, d) array is m numbers, not one sensitivity; a stacked statistic
  must be refused, charged for its rows, or given one noise."""
  mech = jaxdp.KNormMechanism(ball, 1.0, exact=True)
  acct = jaxdp.Accountant.create(
    1.0, secure=True, key=jaxdp.random.secure_key(bytes(range(32))), allow_test_key=True
  )
  totals = np.array([5, 2, 7], np.int32)
  try:
    acct, out = jaxdp.release(acct, mech, np.broadcast_to(totals, (2, 3)))
  except (ValueError, jaxdp.ReleaseRefusedError, jaxdp.BudgetExceededError):
    return  # refused: fine
  noise = np.asarray(out) - totals
  assert (noise[0] == noise[1]).all(), (
    f"one charge of eps ({float(acct.spent_eps)}) released two independent noises "
    f"{noise.tolist()}"
  )


def test_a_statistic_of_another_shape_is_refused_before_anything_is_spent():
  """The refusal that closes the stacked-statistic attack: ``release`` and
  ``release_parallel_unchecked`` refuse a K-norm or elliptic statistic of any shape
  but the ball's ``(d,)``, naming both shapes, before the key or the budget is
  touched (the same accountant then releases a ``(d,)`` statistic)."""
  acct = jaxdp.Accountant.create(4.0, key=jax.random.key(5))
  knorm = jaxdp.KNormMechanism(jaxdp.SumBall(3, 1), 1.0)
  ellipse = jaxdp.EllipticGaussianMechanism(jaxdp.SumBall(3, 1), 1.0, 1e-6)
  for mech in (knorm, ellipse):
    for shape in ((2, 3), (1, 3), (), (4,)):
      with pytest.raises(
        ValueError, match=rf"shape \(3,\).*got shape {re.escape(str(shape))}"
      ):
        jaxdp.release(acct, mech, np.zeros(shape, np.float32))
    with pytest.raises(ValueError, match=r"got shape \(2, 3\)"):
      jaxdp.release_parallel_unchecked(
        acct, [(mech, np.zeros(3, np.float32)), (mech, np.zeros((2, 3), np.float32))]
      )
  acct, out = jaxdp.release(acct, knorm, np.zeros(3, np.float32))
  assert out.shape == (3,) and abs(float(acct.spent_eps) - 1.0) <= 2.0**-20  # one charge


class _ShapeLiar:
  """Reports the shape ``(3,)`` but converts to a ``(2, 3)`` array."""

  shape, ndim, dtype = (3,), 1, np.dtype(np.float32)

  def __array__(self, dtype=None, copy=None):
    return np.zeros((2, 3), np.float32)


def test_an_object_that_misreports_its_shape_is_not_two_releases_for_one_charge():
  """The shape rule is checked on the array the noise is drawn for: an object whose
  ``shape`` says ``(3,)`` but which converts to ``(2, 3)`` was charged once and drew two
  noises; it is read once and refused, by ``release`` and
  ``release_parallel_unchecked``."""
  acct = jaxdp.Accountant.create(4.0, key=jax.random.key(6))
  mech = jaxdp.KNormMechanism(jaxdp.SumBall(3, 1), 1.0)
  with pytest.raises(ValueError, match=r"shape \(3,\).*got shape \(2, 3\)"):
    jaxdp.release(acct, mech, _ShapeLiar())
  with pytest.raises(ValueError, match=r"shape \(3,\).*got shape \(2, 3\)"):
    jaxdp.release_parallel_unchecked(acct, [(mech, _ShapeLiar())])
  acct, out = jaxdp.release(acct, mech, np.zeros(3, np.float32))
  assert out.shape == (3,)
