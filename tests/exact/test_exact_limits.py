"""The exact samplers' per-dimension scale limit (jaxdp.exact.limits): a scale whose
noise could leave +-2^30 with probability 2^-128 or more is refused before drawing."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import exact

OLD_EDGE = 0.9999 * 2.0**20  # accepted by MAX_SCALE alone


@pytest.mark.parametrize("dim", [0, 1, 2, 10, 100, 600, 1000, 1001, 1100, 20000])
def test_tail_quantile_is_an_upper_quantile(dim):
  """t(D) >= scipy's Gamma(D + 1) upper 2^-128 quantile, and not far above it."""
  ref = stats.gamma.isf(2.0**-128, dim + 1)
  t = exact.tail_quantile(dim)
  assert ref <= t <= 1.07 * ref
  assert stats.gamma.logsf(t, dim + 1) <= -128 * math.log(2)


def test_max_scale_is_min_of_max_scale_and_noise_room():
  assert exact.max_scale(0) == exact.max_scale(600) == exact.MAX_SCALE
  for dim in (1000, 1100):
    limit = exact.max_scale(dim)
    assert limit < OLD_EDGE
    assert limit * exact.tail_quantile(dim) <= exact.LIMIT - 1


@pytest.mark.parametrize("d", [1000, 1100])
def test_samplers_refuse_the_old_edge_before_drawing(d):
  key = jax.random.key(0)
  with pytest.raises(ValueError, match=rf"scale.*d = {d}.*larger eps"):
    exact.linf_knorm(key, d, OLD_EDGE)
  d2 = min(d, exact.MAX_L2_D)
  with pytest.raises(ValueError, match=rf"d = {d2}"):
    exact.l2_knorm(key, d2, OLD_EDGE)


@pytest.mark.parametrize("d", [1000, 1100])
def test_mechanism_and_session_refuse_the_old_edge_and_spend_nothing(d):
  mech = jaxdp.KNormMechanism(jaxdp.LpBall(d, np.inf), 1.0 / OLD_EDGE, exact=True)
  with pytest.raises(ValueError, match="exact noise scale"):
    mech.randomize(jax.random.key(0), np.zeros(d, np.int32))
  session = jaxdp.Session(np.zeros((2, d), np.int32), eps_budget=1.0, secure=True)
  with pytest.raises(ValueError):
    session.release(mech)
  assert session.spent == 0.0


def test_traced_scale_beyond_the_limit_gives_the_sentinel():
  """Under jit: just under the limit is drawn, just over it is the sentinel."""
  d = 1000
  limit = exact.max_scale(d)
  draw = jax.jit(lambda s: exact.linf_knorm(jax.random.key(1), d, s))
  ok = np.asarray(draw(jnp.float32(np.float32(limit) * np.float32(0.999))))
  assert ok.shape == (d,) and np.all(np.abs(ok) < exact.LIMIT)
  assert np.any(ok != 0)
  bad = np.asarray(draw(jnp.float32(OLD_EDGE)))
  assert np.all(bad == np.iinfo(np.int32).min)


def test_traced_eps_beyond_the_limit_is_refused_and_spends_nothing():
  """jaxdp.release under jit: the old edge is refused (the sentinel, nothing spent,
  the key not advanced); an eps whose scale is just under the limit is answered."""
  d = 1000
  acct = jaxdp.Accountant.create(
    1.0, key=jax.random.key(2), on_refusal=jaxdp.FillOnRefusal()
  )
  mech = lambda e: jaxdp.KNormMechanism(jaxdp.LpBall(d, np.inf), e, exact=True)
  run = jax.jit(lambda a, e, x: jaxdp.release(a, mech(e), x))
  x = jnp.zeros(d, jnp.int32)
  after, out = run(acct, jnp.float32(1.0 / OLD_EDGE), x)
  assert int(after.answered) == 0 and int(after.refusals) == 1
  assert float(after.spent_eps) == 0.0
  assert np.all(np.asarray(out) == np.iinfo(np.int32).min)
  eps_ok = jnp.float32(1.0 / (0.999 * exact.max_scale(d)))
  after, out = run(acct, eps_ok, x)
  assert int(after.answered) == 1 and float(after.spent_eps) > 0.0
  assert np.all(np.abs(np.asarray(out)) < exact.LIMIT) and np.any(np.asarray(out) != 0)


def test_a_ratio_of_exactly_max_scale_is_refused_with_a_message_that_says_why():
  """The scale is sensitivity / eps rounded up: a ratio of exactly 2^20 lies above."""
  with pytest.raises(ValueError, match=r"rounded up by two float64 ulps.*MAX_SCALE"):
    jaxdp.LaplaceMechanism(2.0**-20, exact=True).randomize(
      jax.random.key(0), np.zeros(2, np.int32)
    )
