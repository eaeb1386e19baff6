"""The zCDP privacy filter (issue 10, item 1) and its (eps, delta) conversion.

References checked against an independent computation: scipy's bounded scalar
minimisation of the Canonne-Kamath-Steinke bound over the order alpha.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize

import jaxdp
from jaxdp import Accountant, GaussianMechanism, LaplaceMechanism, release
from jaxdp.composition import zcdp_budget, zcdp_epsilon


def _cks_reference(rho, delta):
  """min over alpha > 1 of the CKS bound, by scipy (an independent optimiser)."""
  f = lambda a: (
    a * rho + (math.log(1 / delta) + (a - 1) * math.log1p(-1 / a) - math.log(a)) / (a - 1)
  )
  best = optimize.minimize_scalar(
    f, bounds=(1 + 1e-9, 1e6), method="bounded", options={"xatol": 1e-10}
  )
  return best.fun


@pytest.mark.parametrize(
  "rho,delta", [(0.5, 1e-6), (0.01, 1e-5), (2.0, 1e-9), (1e-4, 1e-6)]
)
def test_conversion_matches_an_independent_optimiser(rho, delta):
  """Valid (never below the optimum) and within 1e-3 relative of it; better than the
  standard rho + 2 sqrt(rho log(1/delta))."""
  ours, ref = zcdp_epsilon(rho, delta), _cks_reference(rho, delta)
  assert ref - 1e-9 <= ours <= ref * (1 + 1e-3)
  assert ours < rho + 2 * math.sqrt(rho * math.log(1 / delta))
  # 100 releases of eps 0.1 (rho 0.5 in all) at delta 1e-6 -> 5.22 (worked by hand)
  assert zcdp_epsilon(0.5, 1e-6) == pytest.approx(5.2215, abs=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("jit", [False, True])
def test_filter_answers_92_laplace_releases_under_5_and_1e_6(jit):
  """Target: at least 90 releases of Laplace(0.1) under (5, 1e-6) (basic composition:
  50). Expected count from the independent optimiser: floor(rho_max / 0.005)."""
  rho_max = optimize.brentq(lambda r: _cks_reference(r, 1e-6) - 5.0, 1e-6, 5.0)
  expected = math.floor(rho_max / 0.005)
  acct = Accountant.create(
    5.0,
    delta_budget=1e-6,
    composition="zcdp",
    key=jax.random.key(0),
    on_refusal=jaxdp.FillOnRefusal(),
  )
  mech = LaplaceMechanism(0.1)

  def run(a):
    return jax.lax.scan(lambda s, _: release(s, mech, jnp.zeros(())), a, None, length=120)

  acct, outs = (jax.jit(run) if jit else run)(acct)
  answered = int(acct.answered)
  assert answered >= 90 and answered in (expected, expected - 1)
  assert (
    np.isfinite(np.asarray(outs[:answered])).all()
    and np.isnan(np.asarray(outs[answered:])).all()
  )
  eps, delta = acct.guarantee()
  assert float(eps) <= 5.0 and float(delta) == pytest.approx(1e-6)
  p = jaxdp.plan(
    run,
    Accountant.create(5.0, delta_budget=1e-6, composition="zcdp", key=jax.random.key(1)),
  )
  assert sum(not r.refused for r in p.releases) == answered
  assert p.releases[0].rho == pytest.approx(0.005) and p.eps <= 5.0


def test_traced_costs_and_gaussian_group_scaling():
  """A traced eps is charged as a static one; the Gaussian mechanism costs
  (k Delta)^2 / (2 sigma^2) (sensitivity scaling for groups of k)."""
  g = GaussianMechanism(0.5, 1e-5, sensitivity=2.0)
  assert g.zcdp_cost(3) == pytest.approx((3 * 2.0) ** 2 / (2 * g.sigma**2))
  assert LaplaceMechanism(0.2).zcdp_cost(4) == pytest.approx(0.32)
  make = lambda: Accountant.create(
    5.0, delta_budget=1e-6, composition="zcdp", key=jax.random.key(2)
  )
  static, _ = release(make(), LaplaceMechanism(0.3), jnp.zeros(()))
  traced, _ = jax.jit(lambda a, e: release(a, LaplaceMechanism(e), jnp.zeros(())))(
    make(), 0.3
  )
  assert int(static.spent_units) == int(traced.spent_units) > 0
  assert float(static.spent_rho) == pytest.approx(0.045, rel=1e-5)
  batch = jax.vmap(
    lambda k: Accountant.create(5.0, delta_budget=1e-6, composition="zcdp", key=k)
  )(jax.random.split(jax.random.key(3), 2))
  batch, _ = jax.vmap(lambda a: release(a, LaplaceMechanism(0.3), jnp.zeros(())))(batch)
  np.testing.assert_allclose(
    np.asarray(batch.spent_eps),
    [zcdp_epsilon(float(static.spent_rho), 1e-6)] * 2,
    rtol=1e-5,
  )


def test_bad_zcdp_budgets_and_over_budget_release():
  with pytest.raises(ValueError, match="delta_budget > 0"):
    Accountant.create(1.0, composition="zcdp")
  acct = Accountant.create(
    1.0, delta_budget=1e-6, composition="zcdp", key=jax.random.key(0)
  )
  assert acct.rho_budget == pytest.approx(zcdp_budget(1.0, 1e-6))
  with pytest.raises(jaxdp.BudgetExceededError, match="zCDP budget"):
    release(acct, LaplaceMechanism(1.0), jnp.zeros(()))  # rho 0.5 > ~0.0165
