"""Error bars, squared errors and advice for elliptic Gaussian noise: exact
per-coordinate quantiles, checked against the mechanism's own draws."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import (
  CountBall,
  EllipticGaussianMechanism,
  Poset,
  PosetBall,
  PosetCountGaussianMechanism,
  VoteBall,
  ellipse,
)
from jaxdp.reporting import error_bars, noise_law, simulate, squared_error

Z975 = 1.959963984540054  # the standard normal's 0.975 quantile
NHIS = Poset.nhis(1)
N = 100_000


@pytest.fixture(scope="module", params=[CountBall(5, 4), PosetBall(NHIS)], ids=repr)
def case(request):
  mech = EllipticGaussianMechanism(request.param, 1.0, 1e-5)
  draws = np.asarray(mech.randomize(jax.random.key(5), jnp.zeros((N, mech.dim))))
  return mech, draws.astype(np.float64)


def test_bars_are_the_exact_gaussian_quantiles(case):
  mech, draws = case
  bars = error_bars(mech, 0.95)
  sd = mech.sigma * np.sqrt(np.diag(ellipse(mech.ball).matrix()))
  np.testing.assert_allclose(bars.upper, Z975 * sd, rtol=1e-9)
  np.testing.assert_allclose(bars.lower, -Z975 * sd, rtol=1e-9)
  assert bars.exact and "elliptic Gaussian noise" in bars.method
  # the mechanism's own noise falls inside each bar 95% of the time (4 se)
  inside = np.mean(np.abs(draws) <= bars.upper, axis=0)
  assert np.all(np.abs(inside - 0.95) <= 4 * math.sqrt(0.95 * 0.05 / N)), inside


def test_squared_error_and_simulation_match_the_draws(case):
  mech, draws = case
  law = noise_law(mech)
  got = squared_error(law, mech.dim)
  a = ellipse(mech.ball).matrix()
  np.testing.assert_allclose(got.per_coordinate, mech.sigma**2 * np.diag(a), rtol=1e-12)
  se = draws.var(axis=0) * math.sqrt(2 / N)
  assert np.all(np.abs(np.mean(draws**2, axis=0) - got.per_coordinate) <= 5 * se)
  sim = simulate.noise_draws(jax.random.key(9), law, N)
  cov = sim.T @ sim / N
  scale = mech.sigma**2 * np.sqrt(np.outer(np.diag(a), np.diag(a)) + a * a) / math.sqrt(N)
  assert np.all(np.abs(cov - mech.sigma**2 * a) <= 5 * scale)


def test_poset_count_law_names_and_spherical_option():
  law = noise_law(PosetCountGaussianMechanism(NHIS, 1.0, 1e-6))
  assert law.family == "elliptic" and law.names[0] == "respondents"
  sph = noise_law(PosetCountGaussianMechanism(NHIS, 1.0, 1e-6, noise="spherical"))
  assert sph.family == "gaussian" and sph.dim == 5
  assert sph.scale == pytest.approx(math.sqrt(5) * law.scale)


def test_vote_error_bars_are_equal_per_coordinate():
  mech = EllipticGaussianMechanism(VoteBall(6), 1.0, 1e-6)
  bars = error_bars(mech)
  assert np.ptp(bars.upper) <= 1e-12 * bars.upper[0]


def test_advise_compares_elliptic_at_the_stated_delta():
  got = jaxdp.advise(NHIS, 1.0, 1e-6, consistency=False)
  ell, sph = got.option("elliptic"), got.option("gaussian")
  sigma = jaxdp.GaussianMechanism(1.0, 1e-6, 1.0, calibration="analytic").sigma
  assert ell.total == pytest.approx(sigma**2 * ellipse(PosetBall(NHIS)).trace, rel=1e-12)
  assert ell.total < sph.total  # the sphere of radius sqrt(5) is one feasible ellipse
  assert got.to_dict()["options"][[o.noise for o in got.options].index("elliptic")][
    "label"
  ].startswith("Gaussian, elliptic")
  assert "elliptic" not in [
    o.noise for o in jaxdp.advise(NHIS, 1.0, consistency=False).options
  ]


def test_bars_of_a_4096_candidate_vote():
  """Exact bars need no simulation, whatever the dimension (the default sample
  count stays within MAX_ENTRIES past 3,355 coordinates)."""
  mech = EllipticGaussianMechanism(VoteBall(4096), 1.0, 1e-6)
  bars = error_bars(mech)
  ell = ellipse(VoteBall(4096))
  sd = mech.sigma * math.sqrt(ell.across + (ell.along - ell.across) / 4096)
  np.testing.assert_allclose(bars.upper, Z975 * sd, rtol=1e-9)
