"""EllipticGaussianMechanism and PosetCountGaussianMechanism: the Gaussian's privacy
curve at sensitivity 1, the noise's covariance, accounting, and bad parameters."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import (
  Accountant,
  CountBall,
  EllipticGaussianMechanism,
  EllipticZCDPGaussianMechanism,
  GaussianMechanism,
  LpBall,
  Poset,
  PosetBall,
  PosetCountGaussianMechanism,
  PosetCountMechanism,
  SumBall,
  VoteBall,
  ZCDPGaussianMechanism,
  ellipse,
  release,
)
from jaxdp.accounting.refusal import FillOnRefusal
from jaxdp.composition.gaussian import analytic_gaussian_delta

NHIS = Poset.nhis(1)


@pytest.mark.parametrize("eps, delta", [(0.1, 1e-6), (1.0, 1e-5), (4.0, 1e-9)])
def test_sigma_and_costs_are_the_unit_gaussians(eps, delta):
  mech = EllipticGaussianMechanism(VoteBall(4), eps, delta)
  ref = GaussianMechanism(eps, delta, 1.0, calibration="analytic")
  assert mech.sigma == ref.sigma
  # the privacy curve itself: the analytic Gaussian's delta at sigma is at most delta
  assert analytic_gaussian_delta(eps, mech.sigma) <= delta
  assert analytic_gaussian_delta(eps, mech.sigma * (1 - 1e-4)) > delta
  assert mech.cost() == ref.cost() == (eps, delta)
  assert mech.cost(3) == ref.cost(3)
  assert mech.zcdp_cost(2) == ref.zcdp_cost(2) == 4 / (2 * ref.sigma**2)
  orders = jnp.array([2.0, 8.0])
  np.testing.assert_array_equal(mech.rdp_cost(orders), ref.rdp_cost(orders))
  assert mech.event() == ("gaussian", ref.sigma)


@pytest.mark.parametrize("ball", [CountBall(5, 4), VoteBall(4), PosetBall(NHIS)], ids=repr)
def test_sample_covariance_is_sigma_squared_a(ball):
  """200,000 draws (fixed key): every entry of the sample covariance within 5
  standard errors of sigma^2 A (se of entry ij: sqrt((A_ii A_jj + A_ij^2) / n))."""
  mech = EllipticGaussianMechanism(ball, 1.0, 1e-6)
  n = 200_000
  out = np.asarray(mech.randomize(jax.random.key(11), jnp.zeros((n, ball.dim))))
  cov = out.T @ out / n / mech.sigma**2
  a = ellipse(ball).matrix()
  se = np.sqrt((np.outer(np.diag(a), np.diag(a)) + a * a) / n)
  assert np.all(np.abs(cov - a) <= 5 * se), (cov - a) / se
  # and not the spherical Gaussian's covariance (the test can fail)
  sphere = np.eye(ball.dim) * np.max(np.diag(a))
  assert np.any(np.abs(cov - sphere) > 5 * se)


def test_noise_is_added_to_the_statistic_and_keys_matter():
  mech = EllipticGaussianMechanism(SumBall(3, 2), 1.0, 1e-6)
  x = jnp.array([1.0, 2.0, 3.0])
  a = mech.randomize(jax.random.key(1), x)
  b = mech.randomize(jax.random.key(2), x)
  assert a.shape == (3,) and not np.array_equal(a, b)
  z = np.asarray(mech.randomize(jax.random.key(1), jnp.zeros(3)))
  np.testing.assert_allclose(np.asarray(a) - np.asarray(x), z, rtol=1e-6, atol=1e-5)


def test_release_charges_eps_delta_and_zcdp():
  mech = EllipticGaussianMechanism(VoteBall(3), 0.5, 1e-6)
  acct = Accountant.create(1.0, delta_budget=1e-5, key=jax.random.key(0))
  acct, out = release(acct, mech, jnp.zeros(3))
  assert out.shape == (3,) and np.all(np.isfinite(out))
  assert float(acct.spent_eps) == pytest.approx(0.5)
  z = Accountant.create(1.0, delta_budget=1e-5, key=jax.random.key(1), composition="zcdp")
  z, _ = release(z, mech, jnp.zeros(3))
  assert z.last_answered


def test_pytree_and_jit_closed_over():
  mech = EllipticGaussianMechanism(CountBall(4, 2), 1.0, 1e-6)
  leaves, tree = jax.tree_util.tree_flatten(mech)
  assert leaves == [1.0, 1e-6]
  assert jax.tree_util.tree_unflatten(tree, leaves) == mech
  out = jax.jit(lambda k, x: mech.randomize(k, x))(jax.random.key(0), jnp.zeros((2, 4)))
  assert out.shape == (2, 4)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.nan, math.inf, 1e-45])
def test_bad_eps_or_delta_is_refused(bad):
  with pytest.raises(ValueError, match="eps"):
    EllipticGaussianMechanism(VoteBall(3), bad, 1e-6)
  with pytest.raises(ValueError, match="delta"):
    EllipticGaussianMechanism(VoteBall(3), 1.0, bad)
  with pytest.raises(ValueError, match="delta"):
    EllipticGaussianMechanism(VoteBall(3), 1.0, 1.0)


def test_traced_parameters_are_refused():
  """sigma is solved for on the host: a traced eps is an error, never noise."""
  mech = EllipticGaussianMechanism(VoteBall(3), 1.0, 1e-6)
  with pytest.raises(ValueError, match="static"):
    jax.jit(lambda m, k: m.randomize(k, jnp.zeros(3)))(mech, jax.random.key(0))


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -2.0])
def test_rebuilt_with_bad_leaves_never_releases(bad):
  mech = EllipticGaussianMechanism(VoteBall(3), 1.0, 1e-6)
  _, tree = jax.tree_util.tree_flatten(mech)
  for leaves in ([bad, 1e-6], [1.0, bad]):
    forged = jax.tree_util.tree_unflatten(tree, leaves)
    with pytest.raises(ValueError):
      forged.randomize(jax.random.key(0), jnp.zeros(3))
    acct = Accountant.create(
      10.0, delta_budget=0.5, key=jax.random.key(0), on_refusal=FillOnRefusal()
    )
    with pytest.raises(ValueError):
      release(acct, forged, jnp.zeros(3))


def test_non_finite_data_is_refused_as_by_the_gaussian():
  mech = EllipticGaussianMechanism(VoteBall(3), 1.0, 1e-6)
  bad = jnp.array([1.0, jnp.nan, 2.0])
  with pytest.raises(ValueError, match="non-finite value at index"):
    mech.randomize(jax.random.key(0), bad)
  with pytest.raises(Exception, match="not finite"):
    jax.jit(lambda x: mech.randomize(jax.random.key(0), x))(bad)


def test_bad_ball_and_shape():
  with pytest.raises(TypeError, match="ball must be"):
    EllipticGaussianMechanism(LpBall(3, 2), 1.0, 1e-6)
  with pytest.raises(TypeError, match="ball must be"):
    EllipticGaussianMechanism(None, 1.0, 1e-6)
  mech = EllipticGaussianMechanism(VoteBall(3), 1.0, 1e-6)
  with pytest.raises(ValueError, match="last dimension 3"):
    mech.randomize(jax.random.key(0), jnp.zeros(4))
  with pytest.raises(ValueError, match="does not clip rows"):
    mech.part_statistics(jnp.zeros((2, 3)), jnp.zeros(2, int), 1)
  big = Poset.from_parents([-1] * 14)
  with pytest.raises(ValueError, match="MAX_ELLIPSE_FILTERS"):
    EllipticGaussianMechanism(PosetBall(big), 1.0, 1e-6)
  with pytest.raises(ValueError, match="MAX_ELLIPSE_FILTERS"):
    PosetCountGaussianMechanism(big, 1.0, 1e-6)
  assert PosetCountGaussianMechanism(big, 1.0, 1e-6, "spherical").dim == 15


# poset counts


def test_poset_counts_share_the_statistic_and_the_row_checks():
  rows = np.asarray(NHIS.filters())[[0, 1, 2, 4, 6, 6]]
  gauss = PosetCountGaussianMechanism(NHIS, 1.0, 1e-6)
  pure = PosetCountMechanism(NHIS, 1.0)
  np.testing.assert_array_equal(gauss.statistic(rows), pure.statistic(rows))
  bad = rows.copy()
  bad[3] = [0, 1, 0, 0]  # q2 without q1
  with pytest.raises(ValueError, match="data row 3 is not a filter"):
    gauss.randomize(jax.random.key(0), bad)
  clipped = dataclasses.replace(gauss, on_invalid="clip")
  assert isinstance(clipped, PosetCountGaussianMechanism) and clipped.delta == 1e-6
  assert clipped.randomize(jax.random.key(0), bad).shape == (5,)


def test_poset_count_costs_are_the_noises():
  ell = PosetCountGaussianMechanism(NHIS, 1.0, 1e-6)
  sph = PosetCountGaussianMechanism(NHIS, 1.0, 1e-6, noise="spherical")
  assert ell.cost() == sph.cost() == (1.0, 1e-6)
  assert ell.zcdp_cost() == ell.inner.gaussian.zcdp_cost()
  # sqrt(5)^2 / (2 (sqrt(5) sigma)^2): equal up to the float64 rounding of the scaling
  assert sph.zcdp_cost() == pytest.approx(ell.zcdp_cost(), rel=1e-14)
  assert ell.event() == ("gaussian", ell.inner.sigma)
  assert sph.inner.sigma == pytest.approx(math.sqrt(5) * ell.inner.sigma)
  assert PosetCountMechanism(NHIS, 1.0).zcdp_cost() == 0.5  # unchanged: pure DP


def test_poset_count_release_through_an_accountant():
  rows = np.asarray(NHIS.filters())
  mech = PosetCountGaussianMechanism(NHIS, 0.5, 1e-6)
  acct = Accountant.create(1.0, delta_budget=1e-5, key=jax.random.key(3))
  acct, out = release(acct, mech, rows)
  assert out.shape == (5,) and float(acct.spent_eps) == pytest.approx(0.5)


@pytest.mark.parametrize(
  "kw, match",
  [
    ({"noise": "poset"}, "noise must be one of"),
    ({"noise": "laplace"}, "noise must be one of"),
    ({"exact": True}, "exact must be False"),
    ({"on_invalid": "drop"}, "on_invalid"),
  ],
)
def test_poset_count_options_are_checked(kw, match):
  with pytest.raises(ValueError, match=match):
    PosetCountGaussianMechanism(NHIS, 1.0, 1e-6, **kw)


def test_poset_count_refuses_bad_poset_and_delta():
  with pytest.raises(TypeError, match="poset"):
    PosetCountGaussianMechanism("nhis", 1.0, 1e-6)
  with pytest.raises(ValueError, match="delta"):
    PosetCountGaussianMechanism(NHIS, 1.0, 0.0)
  with pytest.raises(ValueError, match="delta"):
    PosetCountGaussianMechanism(NHIS, 1.0, None)


# the zCDP variant


def test_zcdp_variant_costs_are_the_unit_gaussians():
  mech = EllipticZCDPGaussianMechanism(CountBall(4, 3), 2.0)
  ref = ZCDPGaussianMechanism(2.0, 1.0)
  assert mech.zcdp_cost() == ref.zcdp_cost() == 1 / 8
  assert mech.zcdp_cost(3) == ref.zcdp_cost(3)
  orders = jnp.array([2.0, 8.0])
  np.testing.assert_array_equal(mech.rdp_cost(orders), ref.rdp_cost(orders))
  assert mech.event() == ("gaussian", 2.0)
  with pytest.raises(ValueError, match="zCDP cost"):
    mech.cost()
  acct = Accountant.create(
    1.0, delta_budget=1e-5, key=jax.random.key(4), composition="zcdp"
  )
  small = EllipticZCDPGaussianMechanism(CountBall(4, 3), 8.0)  # rho = 1/128
  acct, out = release(acct, small, jnp.zeros(4))
  assert acct.last_answered and out.shape == (4,)
  assert float(acct.spent_rho) == pytest.approx(1 / 128, rel=1e-3)
  basic = Accountant.create(1.0, delta_budget=1e-5, key=jax.random.key(5))
  with pytest.raises(ValueError, match="zCDP cost"):
    release(basic, mech, jnp.zeros(4))


def test_zcdp_variant_traced_sigma_bad_values_give_the_fill():
  mech = EllipticZCDPGaussianMechanism(VoteBall(3), 2.0)
  _, tree = jax.tree_util.tree_flatten(mech)
  sigmas = jnp.array([2.0, 0.0, -1.0, jnp.nan, jnp.inf, 1e-45])

  def draw(s):
    forged = jax.tree_util.tree_unflatten(tree, [s])
    return forged.randomize(jax.random.key(0), jnp.zeros(3))

  out = np.asarray(jax.jit(jax.vmap(draw))(sigmas))
  assert np.all(np.isfinite(out[0])) and np.any(out[0] != 0)
  assert np.all(np.isnan(out[1:]))
  for bad in (0.0, math.nan, -1.0):
    with pytest.raises(ValueError, match="sigma"):
      EllipticZCDPGaussianMechanism(VoteBall(3), bad)
  with pytest.raises(TypeError, match="ball must be"):
    EllipticZCDPGaussianMechanism(LpBall(2, 2), 1.0)


def test_zcdp_variant_noise_matches_the_eps_delta_one():
  """Same key, same sigma: the two mechanisms draw the same noise."""
  a = EllipticGaussianMechanism(PosetBall(NHIS), 1.0, 1e-6)
  b = EllipticZCDPGaussianMechanism(PosetBall(NHIS), a.sigma)
  key, x = jax.random.key(8), jnp.zeros(5)
  np.testing.assert_array_equal(a.randomize(key, x), b.randomize(key, x))
