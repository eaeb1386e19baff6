"""Optimal composition of fixed pure-DP plans (issue 10, item 2, homogeneous part)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Accountant, KNormMechanism, LaplaceMechanism, release
from jaxdp.composition import optimal_composition_delta, optimal_composition_epsilon


def _hockey_stick_bruteforce(eps, k, eps_total):
  """sup over events of P(S) - e^eps_total Q(S) for k-fold randomized response, by
  enumerating all 2^k outcomes (an independent reference: no closed form)."""
  p = math.exp(eps) / (1 + math.exp(eps))
  total = 0.0
  for x in itertools.product((0, 1), repeat=k):
    ones = sum(x)
    pp = p**ones * (1 - p) ** (k - ones)
    qq = (1 - p) ** ones * p ** (k - ones)
    total += max(0.0, pp - math.exp(eps_total) * qq)
  return total


@pytest.mark.parametrize("eps,k", [(0.1, 10), (0.5, 8), (1.0, 6), (0.3, 12)])
def test_closed_form_equals_enumeration(eps, k):
  for eps_total in np.linspace(0, k * eps, 7):
    assert optimal_composition_delta(eps, k, float(eps_total)) == pytest.approx(
      _hockey_stick_bruteforce(eps, k, float(eps_total)), rel=1e-9, abs=1e-15
    )


@pytest.mark.slow
def test_the_design_note_figure_and_plan_epsilon():
  """100 releases at eps 0.1, delta 1e-6: generic eps-DP mechanisms (K-norm) get the
  KOV optimum 4.7746 (dp_accounting's from_privacy_parameters(0.1, 0)
  .self_compose(100) gives 4.7746 as well); Laplace releases get their own PLD,
  4.6930 (dp_accounting's PLD: 4.6927), below KOV."""
  assert optimal_composition_epsilon(0.1, 100, 1e-6) == pytest.approx(4.7746, abs=1e-4)

  def query(mech):
    def run(acct, x):
      for _ in range(100):
        acct, _ = release(acct, mech, x)
      return acct

    return run

  knorm = KNormMechanism(jaxdp.LpBall(2, 1.0), 0.1)
  pk = jaxdp.plan(
    query(knorm), Accountant.create(20.0, key=jax.random.key(0)), jnp.zeros(2)
  )
  assert pk.epsilon(1e-6) == pytest.approx(4.7746, abs=1e-4)
  p = jaxdp.plan(
    query(LaplaceMechanism(0.1)),
    Accountant.create(20.0, key=jax.random.key(0)),
    jnp.zeros(()),
  )
  assert 4.6927 <= p.epsilon(1e-6) <= 4.6927 * 1.001
  assert p.epsilon(0.0) == pytest.approx(10.0)  # pure: basic composition is optimal

  # heterogeneous: never worse than the zCDP conversion or basic composition
  def mixed(acct, x):
    for e in (0.1, 0.2) * 30:
      acct, _ = release(acct, LaplaceMechanism(e), x)
    return acct

  pm = jaxdp.plan(mixed, Accountant.create(20.0, key=jax.random.key(0)), jnp.zeros(()))
  rho = 30 * (0.1**2 + 0.2**2) / 2
  assert pm.epsilon(1e-6) < min(9.0, jaxdp.zcdp_epsilon(rho, 1e-6))


def test_plan_epsilon_counts_only_answered_releases_and_approximate_ones():
  def query(acct, x):
    for _ in range(3):
      acct, _ = release(acct, LaplaceMechanism(0.4), x)
    return acct

  p = jaxdp.plan(query, Accountant.create(1.0, key=jax.random.key(0)), jnp.zeros(()))
  assert p.refused == (2,) and p.epsilon(0.0) == pytest.approx(0.8)

  def gauss(acct, x):
    return release(acct, jaxdp.GaussianMechanism(0.5, 1e-5), x)[0]

  pg = jaxdp.plan(
    gauss, Accountant.create(1.0, delta_budget=1e-4, key=jax.random.key(0)), jnp.zeros(())
  )
  # one Gaussian release: its exact profile (Balle & Wang, Theorem 8, scipy's normal
  # CDF) at 1e-4, far below the classical (0.5, 1e-5) it was calibrated for
  from scipy import optimize
  from scipy.stats import norm

  s = jaxdp.GaussianMechanism(0.5, 1e-5).sigma
  exact = optimize.brentq(
    lambda e: (
      norm.cdf(1 / (2 * s) - e * s) - math.exp(e) * norm.cdf(-1 / (2 * s) - e * s) - 1e-4
    ),
    1e-6,
    5,
  )
  assert exact <= pg.epsilon(1e-4) <= exact + 2e-4 and pg.epsilon(1e-4) < 0.5


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (1.0, 1e-6), (3.0, 1e-9), (0.05, 1e-3)])
def test_analytic_gaussian_is_exact_against_scipy(eps, delta):
  """Balle-Wang: the analytic sigma meets delta exactly (scipy's normal CDF as an
  independent reference): delta(sigma) <= delta < delta(sigma (1 - 1e-6))."""
  from scipy.stats import norm

  def exact_delta(s):
    return norm.cdf(1 / (2 * s) - eps * s) - math.exp(eps) * norm.cdf(
      -1 / (2 * s) - eps * s
    )

  m = jaxdp.GaussianMechanism(eps, delta, sensitivity=2.0, calibration="analytic")
  s = m.sigma / 2.0
  assert exact_delta(s) <= delta * (1 + 1e-9) and exact_delta(s * (1 - 1e-6)) > delta
  if eps < 1:
    assert m.sigma < jaxdp.GaussianMechanism(eps, delta, sensitivity=2.0).sigma
  assert m.zcdp_cost() == pytest.approx(4.0 / (2 * m.sigma**2))


def test_analytic_gaussian_allows_eps_above_one_and_has_its_variance():
  with pytest.raises(ValueError, match="calibration='analytic'"):
    jaxdp.GaussianMechanism(2.0, 1e-5)
  m = jaxdp.GaussianMechanism(2.0, 1e-5, calibration="analytic")
  x = np.asarray(m.randomize(jax.random.key(7), jnp.zeros(200_000)), np.float64)
  # sample variance vs sigma^2: z < 5 with Var(s^2) ~ 2 sigma^4 / n
  assert abs(x.var() - m.sigma**2) / (math.sqrt(2 / len(x)) * m.sigma**2) < 5
  with pytest.raises(ValueError, match="static"):
    jax.jit(lambda mm: mm.sigma)(m)
