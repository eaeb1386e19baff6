"""Attacks on the query balls, the query mechanisms and elliptic Gaussian noise
through the public API: each failed on the code it was written against; the strict
xfail stands for a weakness left open (its reason says the fix)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import CountBall, Poset, PosetBall

POSET_BALL = PosetBall(Poset.nhis(1))


def _dot_precisions(fn, *args):
  """The ``precision`` of every dot_general in ``fn``'s jaxpr (nested ones too)."""
  out = []

  def walk(jaxpr):
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "dot_general":
        out.append(eqn.params["precision"])
      for v in eqn.params.values():  # pjit, custom_jvp, ...: their inner jaxpr
        inner = getattr(v, "jaxpr", v)
        if hasattr(inner, "eqns"):
          walk(inner)

  walk(jax.make_jaxpr(fn)(*args).jaxpr)
  return out


def test_dense_ellipse_noise_is_drawn_at_full_float32_precision():
  # The poset ellipse's float32 root is checked to contain the ball with a margin of
  # 2^-20, but z @ root at DEFAULT precision is a TF32 (10-bit mantissa) product on
  # A100/H100 GPUs and a bfloat16 one on TPUs: the covariance actually drawn could
  # then be narrower than the checked one by ~2^-11 in some direction, past the
  # margin, so the whitened sensitivity would exceed 1. The product must ask for
  # HIGHEST precision (exact float32 products, as on the CPU).
  ell = jaxdp.ellipse(POSET_BALL)
  z = jnp.zeros((3, POSET_BALL.dim), jnp.float32)
  precisions = _dot_precisions(ell.apply_root, z)
  assert precisions, "the dense ellipse multiplies by its root"
  highest = jax.lax.Precision.HIGHEST
  for p in precisions:
    assert p is not None and all(q == highest for q in p), precisions
  # the mechanism draws through the same product
  mech = jaxdp.EllipticGaussianMechanism(POSET_BALL, 1.0, 1e-5)
  key = jax.random.key(0)
  x = jnp.zeros(POSET_BALL.dim)
  precisions = _dot_precisions(lambda v: mech.randomize(key, v), x)
  assert precisions and all(
    p is not None and all(q == highest for q in p) for p in precisions
  ), precisions


def _noise_norm(mech, dim):
  out = mech.randomize(jax.random.key(7), jnp.zeros(dim))
  return float(jnp.linalg.norm(out))


def test_ellipse_returned_to_a_caller_cannot_shrink_later_noise():
  # jaxdp.ellipse returned the very object cached for every later release with an
  # equal ball: making its read-only root writable again (it owned its buffer) and
  # scaling it, or setting a structured ellipse's scales, silently shrank the noise
  # of every later EllipticGaussianMechanism / PosetCountGaussianMechanism in the
  # process while the accountant still charged the full (eps, delta).
  mech = jaxdp.EllipticGaussianMechanism(POSET_BALL, 1.0, 1e-5)
  before = _noise_norm(mech, POSET_BALL.dim)
  ell = jaxdp.ellipse(POSET_BALL)
  try:
    ell.root.setflags(write=True)
    ell.root[...] *= 1e-6
  except ValueError:
    pass  # the root cannot be made writable: fine
  assert _noise_norm(mech, POSET_BALL.dim) == before
  counts = jaxdp.PosetCountGaussianMechanism(Poset.nhis(1), 1.0, 1e-5)
  assert _noise_norm(counts.inner, POSET_BALL.dim) == before

  ball = CountBall(4, 2)
  mech = jaxdp.EllipticGaussianMechanism(ball, 1.0, 1e-5)
  before = _noise_norm(mech, 4)
  s = jaxdp.ellipse(ball)
  object.__setattr__(s, "across", 1e-12)
  object.__setattr__(s, "along", 1e-12)
  assert _noise_norm(mech, 4) == before
  assert jaxdp.ellipse(ball).across > 1.0


def test_ellipse_root_stays_the_checked_factor():
  # the root cannot be made writable again, and it is still the checked float32
  # factor (containment holds)
  ell = jaxdp.ellipse(POSET_BALL)
  with pytest.raises(ValueError):
    ell.root.setflags(write=True)
  assert np.array_equal(ell.root, ell.root.astype(np.float32).astype(np.float64))
  v = np.asarray(jaxdp.samplers.ellipse.poset_filters(POSET_BALL.poset))
  v = np.concatenate([np.ones((v.shape[0], 1)), v], axis=1)
  assert np.max(ell.gauge_sq(v)) <= 1.0


@pytest.mark.xfail(
  strict=True,
  reason="real sum rows are summed in float64 and rounded to float32 before the "
  "noise: the rounding is not 1-Lipschitz, so a neighbour's change can exceed the "
  "sum ball (1 + ulp(total), 2x at 2^24 rows). Fix: add the noise to the float64 "
  "total and round the noisy release (postprocessing), or refuse totals past a "
  "stated bound",
)
def test_rounded_sum_total_stays_within_the_sum_ball():
  # neighbours: the same 2^20 + 1 rows, and those plus one row (-1); the released
  # statistics must differ by at most 1 in the sum ball's norm (d = k = 1: |.|)
  mech = jaxdp.SumQueryMechanism(1, 1, 1.0)
  rows = np.ones((2**20 + 1, 1), np.float32)
  rows[-1] = 0.07
  more = np.concatenate([rows, [[-1.0]]]).astype(np.float32)
  change = np.asarray(mech.statistic(more), np.float64) - np.asarray(
    mech.statistic(rows), np.float64
  )
  assert float(jaxdp.SumBall(1, 1).norm(change)) <= 1.0, change


class _RereadRows:
  """An array-like whose every read returns the next array (a lazy source that
  changes between reads, as a file being written behind a memory map)."""

  def __init__(self, *reads):
    self.reads = list(reads)
    self.shape, self.ndim, self.dtype = reads[0].shape, reads[0].ndim, reads[0].dtype

  def __array__(self, dtype=None, copy=None):
    out = self.reads[0]
    if len(self.reads) > 1:
      self.reads.pop(0)
    return out


@pytest.mark.parametrize(
  "mech",
  [
    jaxdp.CountQueryMechanism(3, 1, 1.0),
    jaxdp.SumQueryMechanism(3, 1, 1.0),
    jaxdp.VoteQueryMechanism(3, 1.0),
  ],
  ids=lambda m: type(m).__name__,
)
def test_rows_checked_are_the_rows_summed(mech):
  # the rows were read once for the row check and again for the sum: a source that
  # passed valid rows to the check and a row of 1000s to the sum released a total
  # 1000 times past the sensitivity ball (PosetCountMechanism checks what it sums)
  good = np.array([[0, 1, 2], [2, 1, 0]] if mech.kind == "vote" else [[1, 0, 0], [0, 1, 0]])
  bad = good * 1000
  try:
    stat = np.asarray(mech.statistic(_RereadRows(good, bad)))
  except ValueError:
    return  # refused: fine
  np.testing.assert_array_equal(stat, good.sum(axis=0))


@pytest.mark.parametrize(
  "draw",
  [
    lambda k, s: jaxdp.random.sum_ball(k, 3, 1, s),
    lambda k, s: jaxdp.random.lp_ball(k, 3, 2.0, s),
    lambda k, s: jaxdp.random.laplace(k, s),
  ],
)
def test_an_overflowing_shape_is_an_error_not_a_process_abort(draw):
  # XLA aborted the interpreter on (2**31, 2**31, 0): an extent product overflow
  for shape in [(2**31, 2**31, 0), (2**48,), (2**24, 2**24, 0)]:
    with pytest.raises(ValueError, match="too large"):
      draw(jax.random.key(0), shape)
