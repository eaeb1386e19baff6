"""Tight accounting (issue 10): Rényi curves and filter, PLD figures of fixed plans,
the planned accountant, and the dp_accounting export.

Independent references: 50-digit mpmath for the Rényi curves, the Kairouz-Oh-Viswanath
closed form for randomized response, scipy's normal CDF for the Gaussian's exact
profile (Balle & Wang, Theorem 8), and Google's dp_accounting (PLD and RDP
accountants) on random plans.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy.stats import norm

import jaxdp
from jaxdp import (
  Accountant,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  release,
)
from jaxdp.accounting.refusal import FillOnRefusal
from jaxdp.composition import optimal_composition_delta, pld, renyi
from tests.helpers.oracles import renyi_filter_budgets

mpmath.mp.dps = 50


def _mp_pure(e, a):
  e, a = mpmath.mpf(e), mpmath.mpf(a)
  return mpmath.log((mpmath.exp(a * e) + mpmath.exp((1 - a) * e)) / (1 + mpmath.exp(e))) / (
    a - 1
  )


def _mp_laplace(e, a):
  e, a = mpmath.mpf(e), mpmath.mpf(a)
  return mpmath.log(
    a / (2 * a - 1) * mpmath.exp((a - 1) * e) + (a - 1) / (2 * a - 1) * mpmath.exp(-a * e)
  ) / (a - 1)


@pytest.mark.parametrize(
  "curve,ref", [(renyi.pure_rdp, _mp_pure), (renyi.laplace_rdp, _mp_laplace)]
)
def test_renyi_curves_against_mpmath(curve, ref):
  """Static (float64, cancellation-free): relative error < 1e-9. Traced (float32,
  rounded up): never below the exact value at the float32 eps it was given, and at
  most 0.1% + 2**-19 (3 + |log((a-1)/(2a-1))| + 2 a eps) / (a - 1) above it (twice the
  documented rounding-up of the log-sum-exp terms); 60 eps from 1e-6 to 90."""
  orders = (1.01, 1.5, 2.0, 6.0, 64.0, 1e4)
  grid = np.geomspace(1e-6, 90.0, 60)
  traced = np.asarray(jax.jit(jax.vmap(lambda e: curve(e, orders)))(grid), np.float64)
  for j, eps in enumerate(grid):
    static = curve(float(eps), orders)
    e32 = float(np.float32(eps))
    for i, a in enumerate(orders):
      assert static[i] == pytest.approx(float(ref(eps, a)), rel=1e-9)
      exact = float(ref(e32, a))
      slack = 2**-19 * (3 + abs(math.log((a - 1) / (2 * a - 1))) + 2 * a * e32) / (a - 1)
      assert exact <= traced[j, i] <= exact * (1 + 1e-3) + slack


def _rdp_expected(eps_budget, delta, orders, cost):
  """How many releases of RDP curve ``cost`` (mpmath, one value per order) the union-
  bound filter answers: each kept order gets delta / m (mpmath conversion)."""
  kept, budgets = renyi_filter_budgets(eps_budget, delta, orders)
  return max(int(mpmath.floor(b / cost(a))) for a, b in zip(kept, budgets))


@pytest.mark.parametrize("orders", [None, (6.0,)])
def test_renyi_filter_counts_laplace_releases(orders):
  """Laplace(0.1) under (5, 1e-6): the count predicted by an mpmath computation of
  the budgets and Mironov's curve (up to one release lost to unit rounding); the same
  eagerly, under jit and with traced eps. One order (a = 6): 100; default: 89."""
  kw = {} if orders is None else dict(orders=orders)
  make = lambda seed: Accountant.create(  # one accountant per run: no replay
    5.0,
    delta_budget=1e-6,
    composition="rdp",
    key=jax.random.key(seed),
    **kw,
    on_refusal=FillOnRefusal(),
  )
  expected = _rdp_expected(
    5.0, 1e-6, orders or renyi.DEFAULT_ORDERS, lambda a: _mp_laplace(0.1, a)
  )
  run = jax.jit(
    lambda a, e: jax.lax.scan(
      lambda s, x: release(s, LaplaceMechanism(x), jnp.zeros(())), a, e
    )
  )
  traced, outs = run(make(0), jnp.full(120, 0.1))
  static = jax.lax.scan(
    lambda s, _: release(s, LaplaceMechanism(0.1), jnp.zeros(())), make(1), None, length=120
  )[0]
  n = int(static.answered)
  assert n in (expected, expected - 1) and n >= (100 if orders else 89)
  assert int(traced.answered) in (n, n - 1)
  assert np.isnan(np.asarray(outs[n:])).all()
  eps, delta = static.guarantee()
  assert float(eps) <= 5.0 and float(delta) == pytest.approx(1e-6)


def test_renyi_filter_attack_mixed_adaptive_sequence():
  """An analyst mixing Laplace, K-norm and Gaussian releases with random parameters,
  each chosen after the last answer, until refused 30 times: at the end some order's
  total (summed with independent float64 / mpmath curves) is within its budget, the
  invariant the filter's proof needs. A rule that only checked the order of the last
  charge, or the smallest total, fails this."""
  rng = np.random.default_rng(7)
  orders = renyi.DEFAULT_ORDERS
  acct = Accountant.create(
    3.0,
    delta_budget=1e-6,
    composition="rdp",
    key=jax.random.key(1),
    on_refusal=FillOnRefusal(),
  )
  kept, budgets = acct.orders, acct.rdp_budgets
  total = np.zeros(len(kept))
  while int(acct.refusals) < 30:
    kind, x = rng.integers(3), float(rng.uniform(0.02, 1.5))
    if kind == 0:
      mech, curve = LaplaceMechanism(x), [float(_mp_laplace(x, a)) for a in kept]
    elif kind == 1:
      mech, curve = KNormMechanism(LpBall(2, 2.0), x), [float(_mp_pure(x, a)) for a in kept]
    else:
      mech = GaussianMechanism(x, 1e-6, calibration="analytic")
      curve = [a / (2 * mech.sigma**2) for a in kept]
    before = int(acct.answered)
    acct, _ = release(acct, mech, jnp.zeros(2))
    if int(acct.answered) > before:
      total += curve
  assert int(acct.answered) > 5 and orders != kept  # order 2 dropped at this budget
  assert np.any(total <= np.asarray(budgets) * (1 + 2**-20))


def test_renyi_filter_errors_and_plan():
  with pytest.raises(ValueError, match="delta_budget > 0"):
    Accountant.create(1.0, composition="rdp", on_refusal=FillOnRefusal())
  with pytest.raises(ValueError, match="orders"):
    Accountant.create(
      1.0, delta_budget=1e-6, composition="rdp", orders=(0.5,), on_refusal=FillOnRefusal()
    )
  with pytest.raises(ValueError, match="orders is for"):
    Accountant.create(1.0, delta_budget=1e-6, orders=(2,), on_refusal=FillOnRefusal())
  with pytest.raises(ValueError, match="no Rényi order"):
    Accountant.create(
      1e-3, delta_budget=1e-9, composition="rdp", orders=(2,), on_refusal=FillOnRefusal()
    )
  acct = Accountant.create(
    1.0,
    delta_budget=1e-6,
    composition="rdp",
    key=jax.random.key(2),
    on_refusal=FillOnRefusal(),
  )
  with pytest.raises(jaxdp.BudgetExceededError, match="every order"):
    release(acct, LaplaceMechanism(50.0), jnp.zeros(()))
  # a cost that underflows float32 cannot be charged: refused, and the error says why
  for a in (
    acct,
    Accountant.create(
      1.0,
      delta_budget=1e-6,
      composition="zcdp",
      key=jax.random.key(3),
      on_refusal=FillOnRefusal(),
    ),
  ):
    with pytest.raises(jaxdp.BudgetExceededError, match="underflows float32"):
      release(a, LaplaceMechanism(1e-30), jnp.zeros(()))
  p = jaxdp.plan(lambda a: release(a, LaplaceMechanism(0.3), jnp.zeros(()))[0], acct)
  assert p.releases[0].rdp[0] == pytest.approx(float(_mp_laplace(0.3, acct.orders[0])))
  assert 0 < p.eps <= 1.0


def test_pld_against_closed_forms():
  """Randomized response x 30 vs the KOV closed form; Laplace's one-release profile
  1 - e^((eps - e)/2); 16 Gaussians of sigma = one of sigma / 4 (Balle-Wang, scipy).
  Pessimistic: never below the exact value, above it by at most the grid's share."""
  rr = pld.compose([pld.pure_pld(0.2, 1e-4)], [30])
  for e in (0.5, 1.5, 3.0):
    exact = optimal_composition_delta(0.2, 30, e)
    assert exact <= rr.delta(e) <= exact * 1.01 + 1e-12
  lap = pld.laplace_pld(1.0, 1e-4)
  for e in (0.0, 0.3, 0.9):
    exact = 1 - math.exp((e - 1.0) / 2)
    assert exact <= lap.delta(e) <= exact + 1e-4
  g = pld.compose([pld.gaussian_pld(4.0, 1e-4)], [16])
  for e in (0.5, 1.0, 2.0):
    s = 1.0  # 16 releases of sigma 4 = one of sigma 1
    exact = norm.cdf(1 / (2 * s) - e * s) - math.exp(e) * norm.cdf(-1 / (2 * s) - e * s)
    assert exact <= g.delta(e) <= exact * 1.01 + 1e-9


dp_accounting = pytest.importorskip("dp_accounting")


def _random_plan(rng):
  """A random fixed plan of Laplace and Gaussian releases (dp_accounting accepts
  both under add/remove neighbours; its randomized response only under replace-one,
  so K-norm plans are checked apart)."""
  mechs = []
  for _ in range(int(rng.integers(3, 10))):
    if rng.integers(2):
      mechs.append(LaplaceMechanism(float(rng.uniform(0.02, 1.0))))
    else:
      mechs.append(GaussianMechanism(float(rng.uniform(0.1, 0.9)), 1e-5))

  def query(acct, x):
    for m in mechs:
      acct, _ = release(acct, m, x)
    return acct

  return jaxdp.plan(
    query,
    Accountant.create(
      1e3, delta_budget=0.5, key=jax.random.key(0), on_refusal=FillOnRefusal()
    ),
    jnp.zeros(2),
  )


@pytest.mark.slow
def test_plan_epsilon_within_one_percent_of_dp_accounting_pld_on_20_random_plans():
  """jaxdp's figure vs dp_accounting's PLD accountant on the exported events: within
  1% relative, and at most dp_accounting's RDP figure on every plan. K-norm (generic
  pure) plans, exported as two-bucket randomized response, against dp_accounting's
  PLD under replace-one neighbours (whose dominating pair for RR is the same)."""
  rng = np.random.default_rng(2026)
  for _ in range(20):
    p = _random_plan(rng)
    delta = float(10 ** rng.uniform(-8, -4))
    ours = p.epsilon(delta)
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(p.to_dp_event())
    assert ours == pytest.approx(acc.get_epsilon(delta), rel=0.01)
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(p.to_dp_event())
    assert ours <= rdp.get_epsilon(delta) * (1 + 1e-9)
  for eps, k in ((0.1, 50), (0.3, 20), (1.0, 5)):
    mech = KNormMechanism(LpBall(2, 1.0), eps)
    p = jaxdp.plan(
      lambda a: jax.lax.scan(
        lambda s, _: release(s, mech, jnp.zeros(2)), a, None, length=k
      )[0],
      Accountant.create(1e3, key=jax.random.key(0), on_refusal=FillOnRefusal()),
    )
    acc = dp_accounting.pld.PLDAccountant(
      dp_accounting.NeighboringRelation.REPLACE_ONE, value_discretization_interval=1e-4
    )
    acc.compose(p.to_dp_event())
    assert p.epsilon(1e-6) == pytest.approx(acc.get_epsilon(1e-6), rel=0.01)


@pytest.mark.slow
def test_export_events_and_the_design_note_figure():
  m = LaplaceMechanism(0.1)
  p = jaxdp.plan(
    lambda a: jax.lax.scan(lambda s, _: release(s, m, jnp.zeros(())), a, None, length=100)[
      0
    ],
    Accountant.create(20.0, key=jax.random.key(3), on_refusal=FillOnRefusal()),
  )
  event = p.to_dp_event()
  assert list(event.events) == [dp_accounting.LaplaceDpEvent(10.0)] * 100
  acc = dp_accounting.pld.PLDAccountant()
  # the 100 exported events, all equal, composed by dp_accounting's self-composition
  # (the same figure as composing them one by one, in 0.1 s instead of 3 s)
  acc.compose(event.events[0], 100)
  assert acc.get_epsilon(1e-6) == pytest.approx(4.6927, abs=1e-4)
  assert 4.6927 <= p.epsilon(1e-6) <= 4.6927 * 1.001
  zevent = jaxdp.plan(
    lambda a: release(a, KNormMechanism(LpBall(2, 1.0), 0.4), jnp.zeros(2))[0],
    Accountant.create(1.0, key=jax.random.key(3), on_refusal=FillOnRefusal()),
  ).to_dp_event(pure_as="zcdp")
  assert zevent.events[0].rho == pytest.approx(0.08)


def _laplace_run(n):
  return lambda a, e: jax.lax.scan(
    lambda s, x: release(s, LaplaceMechanism(x), jnp.zeros(())),
    a,
    e if e is not None else jnp.full(n, 0.1),
  )


@pytest.mark.slow
def test_planned_accountant_enforces_the_plan():
  """111 Laplace(0.1) releases fit (5, 1e-6) by their PLD (4.990; 112 need 5.016, as
  dp_accounting says: 4.989 / 5.015). The planned accountant answers exactly the
  plan, also with traced eps under jit and vmap, and refuses a larger eps, a 112th
  release and anything the plan did not hold."""
  m = LaplaceMechanism(0.1)
  plan_of = lambda n: jaxdp.plan(
    lambda a: jax.lax.scan(lambda s, _: release(s, m, jnp.zeros(())), a, None, length=n)[0],
    Accountant.create(100.0, key=jax.random.key(0), on_refusal=FillOnRefusal()),
  )
  p = plan_of(111)
  assert p.epsilon(1e-6) <= 5.0 < jaxdp.events_epsilon([("laplace", 0.1)] * 112, 1e-6)
  too_long = p._replace(releases=p.releases + p.releases[:1])
  with pytest.raises(ValueError, match="more than eps_budget"):
    Accountant.create(
      5.0,
      delta_budget=1e-6,
      composition="planned",
      plan=too_long,
      on_refusal=FillOnRefusal(),
    )
  make = lambda k: Accountant.create(
    5.0, delta_budget=1e-6, composition="planned", plan=p, key=k, on_refusal=FillOnRefusal()
  )
  eps = jnp.full(112, 0.1).at[7].set(0.2)  # row 7 asks for more than planned
  run = jax.jit(
    jax.vmap(
      lambda a, e: jax.lax.scan(
        lambda s, x: release(s, LaplaceMechanism(x), jnp.zeros(())), a, e
      )
    )
  )
  accts = jax.vmap(make)(jax.random.split(jax.random.key(1), 2))
  out_acct, outs = run(accts, jnp.stack([eps, jnp.full(112, 0.1)]))
  assert out_acct.answered.tolist() == [110, 111] and out_acct.refusals.tolist() == [2, 1]
  assert np.isnan(np.asarray(outs[0, 7])) and np.isnan(np.asarray(outs[1, 111]))
  g_eps, g_delta = make(jax.random.key(2)).guarantee()
  assert float(g_eps) == 0.0
  acct, _ = release(make(jax.random.key(3)), m, jnp.zeros(()))
  assert float(acct.guarantee()[0]) == pytest.approx(p.epsilon(1e-6), rel=1e-6)


def test_planned_accountant_attack_swapping_the_mechanism():
  """The plan holds Laplace rows; a K-norm release of the same eps has a worse privacy
  profile (randomized response's), and a Gaussian one a different kind: both are
  refused, though their eps matches. A pure row accepts a Laplace release (Laplace
  is eps-DP), never the other way round."""
  lap = jaxdp.plan(
    lambda a: release(a, LaplaceMechanism(0.5), jnp.zeros(2))[0],
    Accountant.create(1.0, key=jax.random.key(0), on_refusal=FillOnRefusal()),
  )
  acct = Accountant.create(
    1.0,
    delta_budget=1e-6,
    composition="planned",
    plan=lap,
    key=jax.random.key(4),
    on_refusal=FillOnRefusal(),
  )
  for mech in (KNormMechanism(LpBall(2, 1.0), 0.5), GaussianMechanism(0.5, 1e-6)):
    new, out = release(acct, mech, jnp.zeros(2))
    assert int(new.answered) == 0 and np.isnan(np.asarray(out)).all()
    acct = Accountant.create(
      1.0,
      delta_budget=1e-6,
      composition="planned",
      plan=lap,
      key=jax.random.key(5),
      on_refusal=FillOnRefusal(),
    )
  pure = jaxdp.plan(
    lambda a: release(a, KNormMechanism(LpBall(2, 1.0), 0.5), jnp.zeros(2))[0],
    Accountant.create(1.0, key=jax.random.key(0), on_refusal=FillOnRefusal()),
  )
  acct = Accountant.create(
    1.0,
    delta_budget=1e-6,
    composition="planned",
    plan=pure,
    key=jax.random.key(6),
    on_refusal=FillOnRefusal(),
  )
  new, _ = release(acct, LaplaceMechanism(0.5), jnp.zeros(2))
  assert int(new.answered) == 1
  # a sigma-given Gaussian against a Gaussian plan: at least the planned noise
  gp = jaxdp.plan(
    lambda a: release(a, jaxdp.ZCDPGaussianMechanism(4.0), jnp.zeros(2))[0],
    Accountant.create(
      10.0,
      delta_budget=1e-6,
      composition="zcdp",
      key=jax.random.key(0),
      on_refusal=FillOnRefusal(),
    ),
  )
  for sigma, answered in ((3.9, 0), (4.0, 1)):
    acct = Accountant.create(
      2.0,
      delta_budget=1e-6,
      composition="planned",
      plan=gp,
      key=jax.random.key(8),
      on_refusal=FillOnRefusal(),
    )
    new, _ = release(acct, jaxdp.ZCDPGaussianMechanism(sigma), jnp.zeros(2))
    assert int(new.answered) == answered
  with pytest.raises(ValueError, match="needs plan"):
    Accountant.create(
      1.0, delta_budget=1e-6, composition="planned", on_refusal=FillOnRefusal()
    )


def test_history_exports_a_jitted_run():
  """history=K logs each answered release's event inside jit; the export composed by
  dp_accounting's PLD gives the figure of the same plan."""
  acct = Accountant.create(
    5.0,
    delta_budget=1e-6,
    composition="rdp",
    key=jax.random.key(7),
    history=100,
    on_refusal=FillOnRefusal(),
  )
  run = jax.jit(
    lambda a, e: jax.lax.scan(
      lambda s, x: release(s, LaplaceMechanism(x), jnp.zeros(())), a, e
    )
  )
  acct, _ = run(acct, jnp.full(80, 0.1))
  acct, _ = release(acct, jaxdp.ZCDPGaussianMechanism(40.0, 2.0), jnp.zeros(3))
  events = acct.events()
  assert len(events) == int(acct.answered) == 81
  assert events[0] == ("laplace", pytest.approx(0.1)) and events[-1] == ("gaussian", 20.0)
  acc = dp_accounting.pld.PLDAccountant()
  acc.compose(acct.to_dp_event())
  assert acc.get_epsilon(1e-6) == pytest.approx(
    jaxdp.events_epsilon(events, 1e-6), rel=0.01
  )
  with pytest.raises(ValueError, match="history >= 81"):
    dataclasses.replace(acct, history=10, log=acct.log[:10]).events()
  with pytest.raises(ValueError, match="keeps no history"):
    Accountant.create(1.0, on_refusal=FillOnRefusal()).events()


def test_zcdp_gaussian_mechanism_costs_and_refusal_under_basic():
  m = jaxdp.ZCDPGaussianMechanism(2.0, sensitivity=3.0)
  assert m.zcdp_cost(2) == pytest.approx(36 / 8)
  np.testing.assert_allclose(m.rdp_cost((2.0, 10.0)), [2 * 9 / 8, 10 * 9 / 8])
  with pytest.raises(ValueError, match="composition='zcdp'"):
    release(
      Accountant.create(1.0, key=jax.random.key(0), on_refusal=FillOnRefusal()),
      m,
      jnp.zeros(2),
    )
  acct = Accountant.create(
    1.0,
    delta_budget=1e-6,
    composition="zcdp",
    key=jax.random.key(0),
    on_refusal=FillOnRefusal(),
  )
  acct, _ = jax.jit(lambda a, s: release(a, jaxdp.ZCDPGaussianMechanism(s), jnp.zeros(2)))(
    acct, 10.0
  )
  assert float(acct.spent_rho) == pytest.approx(1 / 200, rel=1e-5)


@pytest.mark.slow
def test_calibration_against_dp_accounting_and_its_own_figures():
  """Gaussian sigma by PLD equals dp_accounting's calibrate_dp_mechanism (exact: the
  composition is one Gaussian); Laplace by PLD within 0.1% of it; every helper's
  answer meets its target by the figure it names, and tighter compositions need
  less noise."""
  from jaxdp.composition import calibration

  ref = dp_accounting.calibrate_dp_mechanism(
    dp_accounting.pld.PLDAccountant,
    lambda s: dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(s), 10),
    1.0,
    1e-5,
  )
  assert calibration.gaussian_sigma(1.0, 1e-5, 10) == pytest.approx(ref, rel=1e-6)
  ref = dp_accounting.calibrate_dp_mechanism(
    dp_accounting.pld.PLDAccountant,
    lambda s: dp_accounting.SelfComposedDpEvent(dp_accounting.LaplaceDpEvent(s), 100),
    5.0,
    1e-6,
  )
  e = {
    c: calibration.laplace_eps(5.0, 1e-6, 100, composition=c)
    for c in calibration.CALIBRATIONS
  }
  assert 1 / e["pld"] == pytest.approx(ref, rel=1e-3)
  assert e["basic"] < e["zcdp"] < e["rdp"] < e["pld"]
  assert jaxdp.events_epsilon([("laplace", e["pld"])] * 100, 1e-6) <= 5.0
  s = calibration.gaussian_sigma(1.0, 1e-5, 10, composition="zcdp", sensitivity=2.0)
  assert jaxdp.zcdp_epsilon(10 * 4 / (2 * s * s), 1e-5) <= 1.0 + 1e-9
  with pytest.raises(ValueError, match="composition must be one of"):
    calibration.gaussian_sigma(1.0, 1e-5, composition="basic")
