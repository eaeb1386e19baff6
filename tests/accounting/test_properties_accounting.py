"""Property tests: what an accountant reports covers what it answered.

For every composition mode, random fixed sequences of Laplace, Gaussian ((eps,
delta), classical calibration) and sigma-given Gaussian releases run eagerly
against random budgets small enough to force refusals. Then:

* the answered/refused decisions equal an independent re-implementation of the
  mode's documented rule (float64 / mpmath arithmetic, written from the theorems,
  not from jaxdp's code);
* the reported guarantee ``(eps, delta)`` is at least a *lower* bound on the true
  eps, at the reported delta, of the composition of the releases that were
  answered: dp_accounting's privacy-loss distribution with
  ``pessimistic_estimate=False`` (losses rounded down, the truncated right tail
  moved down, the left tail dropped: its hockey-stick divergence is below the true
  one at any grid, so its eps is below the true eps);
* what was answered stays within the mode's documented bound, and a release at
  :meth:`~jaxdp.Accountant.remaining`'s eps is answered.

Tolerance of the lower-bound comparison: relative 2**-19 plus 1e-9. The unit
arithmetic forgives a relative 2**-20 of the costs (:mod:`jaxdp.accounting.budget`), the
reported figures are float32 (2**-24), and dp_accounting's optimistic figure is a
lower bound up to its FFT's rounding (~1e-15 in delta, far below 1e-9 in eps).
"""

import functools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import jaxdp
from jaxdp import (
  Accountant,
  BudgetExceededError,
  FillOnRefusal,
  GaussianMechanism,
  LaplaceMechanism,
  ZCDPGaussianMechanism,
  release,
)
from tests.helpers.oracles import renyi_filter_budgets

dp_accounting = pytest.importorskip("dp_accounting")
from dp_accounting.pld import privacy_loss_distribution as pld_lib  # noqa: E402

PROFILE = settings(
  max_examples=12,
  deadline=None,
  derandomize=True,
  database=None,
  suppress_health_check=[HealthCheck.too_slow],
)
RDP_PROFILE = settings(PROFILE, max_examples=20)
SLACK = 2.0**-20  # the unit arithmetic's documented relative slack
BAND = 2.0**-17  # decisions this close to a budget may go either way
GRID = 1e-3  # dp_accounting's loss grid (any grid gives a lower bound)

# ------------------------------------------------------------------ mechanisms
LAPLACE = st.tuples(st.just("laplace"), st.sampled_from([0.05, 0.1, 0.3, 0.7, 1.2]))
GAUSS = st.tuples(
  st.just("gauss"), st.sampled_from([0.3, 0.6, 0.9]), st.sampled_from([1e-6, 1e-7])
)
ZGAUSS = st.tuples(st.just("zgauss"), st.sampled_from([1.5, 3.0, 6.0]))


def _mech(spec):
  if spec[0] == "laplace":
    return LaplaceMechanism(spec[1])
  if spec[0] == "gauss":
    return GaussianMechanism(spec[1], spec[2])
  return ZCDPGaussianMechanism(spec[1])


def _sigma(spec):
  """The Gaussian's standard deviation: sqrt(2 ln(1.25 / delta)) / eps (Dwork & Roth,
  Theorem A.1), or the given sigma."""
  if spec[0] == "gauss":
    return math.sqrt(2 * math.log(1.25 / spec[2])) / spec[1]
  return spec[1]


def _event(spec, k):
  """The true mechanism for groups of k: Laplace at k eps, or the Gaussian's noise
  multiplier sigma / k (l_2 sensitivity k)."""
  if spec[0] == "laplace":
    return ("laplace", k * spec[1])
  return ("gaussian", _sigma(spec) / k)


def _dp_cost(spec, k):
  """(eps, delta) for groups of k (Dwork, Lemma 2.8: k eps, k e^((k-1) eps) delta)."""
  if spec[0] == "laplace":
    return k * spec[1], 0.0
  return k * spec[1], k * math.exp((k - 1) * spec[1]) * spec[2]


def _rho(spec, k):
  """zCDP of the release for groups of k: (k eps)^2 / 2, or k^2 / (2 sigma^2)."""
  if spec[0] == "laplace":
    return (k * spec[1]) ** 2 / 2
  return k * k / (2 * _sigma(spec) ** 2)


# ------------------------------------------------------------------ lower bound
def _lower_bound(events, delta):
  """A lower bound on the eps at ``delta`` of the composition of ``events``."""
  if not events:
    return 0.0
  if delta == 0:  # only pure releases compose to a finite eps at delta = 0: the sum
    return sum(v for k, v in events) if all(k == "laplace" for k, _ in events) else math.inf
  return _optimistic_eps(tuple(sorted(events)), float(delta))


@functools.cache
def _optimistic_eps(events, delta, grid=GRID):
  groups = {}
  for e in events:
    groups[e] = groups.get(e, 0) + 1
  total = None
  for (kind, v), n in sorted(groups.items()):
    if kind == "laplace":
      p = pld_lib.from_laplace_mechanism(
        1 / v,
        pessimistic_estimate=False,
        value_discretization_interval=grid,
        use_connect_dots=False,
      )
    else:
      p = pld_lib.from_gaussian_mechanism(
        v,
        pessimistic_estimate=False,
        value_discretization_interval=grid,
        use_connect_dots=False,
      )
    p = p.self_compose(n) if n > 1 else p
    total = p if total is None else total.compose(p)
  return total.get_epsilon_for_delta(delta)


def _assert_covers(reported_eps, reported_delta, events):
  lb = _lower_bound(events, float(reported_delta))
  assert float(reported_eps) >= lb - (2.0**-19 * lb + 1e-9), (reported_eps, lb, events)


# ------------------------------------------------------------------ running
def _query(specs):
  """A query function for jaxdp.plan: the releases of ``specs`` in order."""

  def query(acct):
    for spec in specs:
      acct, _ = release(acct, _mech(spec), jnp.zeros(()))
    return acct

  return query


def _run(acct, specs):
  """Eager releases; returns the accountant and which were answered (a release that
  raises BudgetExceededError, a static cost no state could answer, is not)."""
  answered = []
  for spec in specs:
    before = int(acct.answered)
    try:
      acct, out = release(acct, _mech(spec), jnp.zeros(()))
    except BudgetExceededError:
      answered.append(False)
      continue
    answered.append(int(acct.answered) == before + 1)
    assert answered[-1] == bool(np.isfinite(np.asarray(out)))
  return acct, answered


def _check_remaining(acct, k):
  """A Laplace release charged just below remaining()'s eps is answered."""
  eps, _ = acct.remaining()
  if float(eps) > 1e-3:
    new, _ = release(acct, LaplaceMechanism(float(eps) / k * (1 - 1e-4)), jnp.zeros(()))
    assert int(new.answered) == int(acct.answered) + 1, float(eps)


def _decide(total, cost, budget):
  """True / False for ``total + cost <= budget``; None within BAND of the budget."""
  x = total + cost
  if abs(x - budget) <= BAND * budget:
    return None
  return x <= budget


BUDGETS = st.sampled_from([float(b) for b in np.geomspace(0.37, 4.1, 15)])
GROUPS = st.sampled_from([1, 1, 2])
DELTAS = st.sampled_from([2.55e-6, 6.35e-6, 1.215e-5])


# ------------------------------------------------------------------ basic
@pytest.mark.subprocess
@PROFILE
@given(
  specs=st.lists(st.one_of(LAPLACE, GAUSS), min_size=3, max_size=14),
  eps_budget=BUDGETS,
  delta_budget=st.sampled_from([0.0, 2.55e-6, 1.215e-5]),
  k=GROUPS,
)
def test_basic_reports_cover_what_was_answered(specs, eps_budget, delta_budget, k):
  acct = Accountant.create(
    eps_budget,
    delta_budget=delta_budget,
    group_size=k,
    key=jax.random.key(0),
    on_refusal=FillOnRefusal(),
  )
  acct, answered = _run(acct, specs)
  spent_e = spent_d = 0.0
  for spec, ok in zip(specs, answered):  # Lemma 2.6: answer iff both totals fit
    e, d = _dp_cost(spec, k)
    fits = [
      _decide(spent_e, e, eps_budget),
      True if d == 0 else _decide(spent_d, d, delta_budget) if delta_budget else False,
    ]
    assume(None not in fits)
    assert ok == all(fits)
    if ok:
      spent_e, spent_d = spent_e + e, spent_d + d
  assert spent_e <= eps_budget * (1 + SLACK) and spent_d <= delta_budget * (1 + SLACK)
  eps, delta = acct.guarantee()
  events = [_event(s, k) for s, ok in zip(specs, answered) if ok]
  _assert_covers(eps, delta, events)
  _assert_covers(acct.spent_eps, acct.spent_delta, events)
  assert float(eps) >= spent_e * (1 - SLACK) and float(delta) >= spent_d * (1 - SLACK)
  _check_remaining(acct, k)


# ------------------------------------------------------------------ advanced
@pytest.mark.subprocess
@PROFILE
@given(
  specs=st.lists(st.one_of(LAPLACE, GAUSS), min_size=3, max_size=14),
  eps_budget=BUDGETS,
  delta_budget=DELTAS,
  max_releases=st.integers(2, 10),
  k=GROUPS,
)
def test_advanced_reports_cover_what_was_answered(
  specs, eps_budget, delta_budget, max_releases, k
):
  acct = Accountant.create(
    eps_budget,
    delta_budget=delta_budget,
    group_size=k,
    composition="advanced",
    max_releases=max_releases,
    delta_prime=1e-6,
    key=jax.random.key(1),
    on_refusal=FillOnRefusal(),
  )
  acct, answered = _run(acct, specs)
  count = 0
  for spec, ok in zip(specs, answered):  # at most k releases, each within the caps
    e, d = _dp_cost(spec, k)
    fits = [
      count < max_releases,
      _decide(0.0, e, acct.eps_cap),
      _decide(0.0, d, acct.delta_cap) if d else True,
    ]
    assume(None not in fits)
    assert ok == all(fits)
    count += ok
  eps, delta = acct.guarantee()
  # Dwork-Rothblum-Vadhan for max_releases at the caps, or basic composition
  cap, dcap, n = acct.eps_cap, acct.delta_cap, max_releases
  drv = (
    cap * math.sqrt(2 * n * math.log(1e6)) + n * cap * math.expm1(cap),
    n * dcap + 1e-6,
  )
  assert (float(eps), float(delta)) in [
    pytest.approx(drv, rel=1e-6),
    pytest.approx((n * cap, n * dcap), rel=1e-6),
  ]
  assert float(eps) <= eps_budget * (1 + 1e-6)
  events = [_event(s, k) for s, ok in zip(specs, answered) if ok]
  _assert_covers(eps, delta, events)
  _assert_covers(acct.spent_eps, acct.spent_delta, events)  # basic composition's sums
  _check_remaining(acct, k)


# ------------------------------------------------------------------ zCDP
def _cks_epsilon(rho, delta):
  """Canonne-Kamath-Steinke Proposition 12 at 20000 orders: an upper bound on the
  conversion's minimum over all orders."""
  a = 1 + np.geomspace(1e-4, 1e5, 20000)
  return float(
    np.min(
      a * rho + (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)
    )
  )


@pytest.mark.subprocess
@PROFILE
@given(
  specs=st.lists(st.one_of(LAPLACE, GAUSS, ZGAUSS), min_size=3, max_size=14),
  eps_budget=BUDGETS,
  delta_budget=DELTAS,
  k=GROUPS,
)
def test_zcdp_reports_cover_what_was_answered(specs, eps_budget, delta_budget, k):
  acct = Accountant.create(
    eps_budget,
    delta_budget=delta_budget,
    group_size=k,
    composition="zcdp",
    key=jax.random.key(2),
    on_refusal=FillOnRefusal(),
  )
  rho_budget = acct.rho_budget
  assert _cks_epsilon(rho_budget, delta_budget) <= eps_budget * (1 + 1e-6)
  acct, answered = _run(acct, specs)
  total = 0.0
  for spec, ok in zip(specs, answered):  # the zCDP filter: answer iff the rho fits
    fits = _decide(total, _rho(spec, k), rho_budget)
    assume(fits is not None)
    assert ok == fits
    total += _rho(spec, k) if ok else 0.0
  assert total <= rho_budget * (1 + SLACK)
  eps, delta = acct.guarantee()
  events = [_event(s, k) for s, ok in zip(specs, answered) if ok]
  assert float(delta) == pytest.approx(delta_budget if events else 0.0)
  _assert_covers(eps, delta, events)
  _assert_covers(acct.spent_eps, acct.spent_delta, events)
  if events:
    assert float(eps) >= _cks_epsilon(total, delta_budget) * (1 - 1e-4)
  _check_remaining(acct, k)


# ------------------------------------------------------------------ Rényi filter
def _mp_laplace(e, a):
  """Mironov (2017), Proposition 6, at 40 digits."""
  with mpmath.workdps(40):
    e, a = mpmath.mpf(e), mpmath.mpf(a)
    return float(
      mpmath.log(
        a / (2 * a - 1) * mpmath.exp((a - 1) * e)
        + (a - 1) / (2 * a - 1) * mpmath.exp(-a * e)
      )
      / (a - 1)
    )


@functools.cache
def _rdp_curve(spec, k, orders):
  if spec[0] == "laplace":
    return tuple(_mp_laplace(k * spec[1], a) for a in orders)
  return tuple(a * _rho(spec, k) for a in orders)  # Gaussian: alpha rho


@functools.cache
def _filter_budgets(eps, delta, orders):
  """The filter's kept orders and budgets (:func:`renyi_filter_budgets`, 40 digits)."""
  with mpmath.workdps(40):
    kept, budgets = renyi_filter_budgets(eps, delta, orders)
  return kept, tuple(float(b) for b in budgets)


def _rdp_reference(specs, k, orders, budgets):
  """The Rényi filter's decisions: a release is answered iff some order not yet past
  its budget holds it; an order the answered release does not fit is past its
  budget for good. Returns the decisions, each order's true total (inf once past)
  and whether any decision lay within BAND of a budget."""
  total = [0.0] * len(orders)
  decisions, close = [], False
  for spec in specs:
    curve = _rdp_curve(spec, k, orders)
    fits = [
      _decide(t, c, b) if t < math.inf else False for t, c, b in zip(total, curve, budgets)
    ]
    close |= None in fits
    ok = any(fits)
    decisions.append(ok)
    if ok:
      total = [t + c if f else math.inf for t, c, f in zip(total, curve, fits)]
  return decisions, total, close


ORDERS = st.sampled_from([None, (6.0,), (2.0, 8.0, 32.0)])


@pytest.mark.slow
@pytest.mark.subprocess
@RDP_PROFILE
@given(
  specs=st.lists(st.one_of(LAPLACE, GAUSS, ZGAUSS), min_size=3, max_size=14),
  eps_budget=BUDGETS,
  delta_budget=DELTAS,
  k=GROUPS,
  orders=ORDERS,
)
def test_renyi_filter_reports_cover_what_was_answered(
  specs, eps_budget, delta_budget, k, orders
):
  kw = {} if orders is None else dict(orders=orders)
  requested = jaxdp.renyi.DEFAULT_ORDERS if orders is None else orders
  kept, budgets = _filter_budgets(eps_budget, delta_budget, tuple(requested))
  make = lambda key: Accountant.create(
    eps_budget,
    delta_budget=delta_budget,
    group_size=k,
    composition="rdp",
    key=key,
    **kw,
    on_refusal=FillOnRefusal(),
  )
  if not kept:
    with pytest.raises(ValueError, match="no Rényi order"):
      make(jax.random.key(3))
    return
  acct = make(jax.random.key(3))
  assert acct.orders == kept
  np.testing.assert_allclose(acct.rdp_budgets, budgets, rtol=1e-9)
  decisions, total, close = _rdp_reference(specs, k, kept, budgets)
  assume(not close)
  acct, answered = _run(acct, specs)
  assert answered == decisions
  events = [_event(s, k) for s, ok in zip(specs, answered) if ok]
  # the filter's invariant: some order holds everything answered within its budget
  assert not events or any(t <= b * (1 + SLACK) for t, b in zip(total, budgets))
  # an order past its budget shows inf; the order that held the last answer does not
  spent = np.asarray(acct.spent_rdp, np.float64)
  assert np.array_equal(np.isinf(spent), np.isinf(total))
  assert not events or np.isfinite(spent).any()
  finite = np.isfinite(total)
  np.testing.assert_allclose(
    spent[finite], np.asarray(total)[finite], rtol=2.0**-19, atol=0
  )
  eps, delta = acct.guarantee()
  assert float(eps) <= eps_budget
  assert float(delta) == pytest.approx(delta_budget if events else 0.0)
  _assert_covers(eps, delta, events)
  _assert_covers(acct.spent_eps, acct.spent_delta, events)
  # the plan of the same sequence: same decisions, a figure that covers them too
  run = [s for s in specs if any(c <= b for c, b in zip(_rdp_curve(s, k, kept), budgets))]
  p = jaxdp.plan(_query(run), make(jax.random.key(4)))
  assert [not r.refused for r in p.releases] == _rdp_reference(run, k, kept, budgets)[0]
  _assert_covers(p.eps, p.delta, events)
  _check_remaining(acct, k)


# ------------------------------------------------------------------ planned
VARIANTS = st.sampled_from(["same", "same", "half", "double", "swap"])


def _variant(spec, how):
  """The release actually run for a planned one: the same, half or double its eps
  (sigma), or another kind."""
  if how == "same":
    return spec
  if how == "swap":
    return ("zgauss", 3.0) if spec[0] == "laplace" else ("laplace", 0.3)
  f = 0.5 if how == "half" else 2.0
  return (spec[0], spec[1] * f) if spec[0] != "gauss" else ("gauss", spec[1] * f, spec[2])


def _dominated(run, planned, k):
  """The run release's mechanism is dominated by the planned one: Laplace with eps at
  most the planned eps, or Gaussian noise with a multiplier at least the planned one."""
  (kind, v), (pkind, pv) = _event(run, k), _event(planned, k)
  return kind == pkind and (v <= pv if kind == "laplace" else v >= pv)


@pytest.mark.slow
@pytest.mark.subprocess
@PROFILE
@given(
  specs=st.lists(
    st.one_of(
      LAPLACE,
      st.tuples(
        st.just("gauss"), st.sampled_from([0.3, 0.45]), st.sampled_from([1e-6, 1e-7])
      ),
      ZGAUSS,
    ),
    min_size=2,
    max_size=8,
  ),
  variants=st.lists(VARIANTS, min_size=8, max_size=8),
  extra=st.booleans(),
  delta_budget=DELTAS,
  k=GROUPS,
)
def test_planned_reports_cover_what_was_answered(specs, variants, extra, delta_budget, k):
  planner = Accountant.create(
    1e3,
    delta_budget=0.5,
    composition="zcdp",
    group_size=k,
    key=jax.random.key(5),
    on_refusal=FillOnRefusal(),
  )
  p = jaxdp.plan(_query(specs), planner)
  assert not p.refused
  make = lambda key: Accountant.create(
    100.0,
    delta_budget=delta_budget,
    composition="planned",
    plan=p,
    group_size=k,
    key=key,
    on_refusal=FillOnRefusal(),
  )
  acct = make(jax.random.key(6))
  # remaining(): the first row's eps for a Laplace row (a Laplace release within it
  # is answered), else 0
  first = k * specs[0][1] if specs[0][0] == "laplace" else 0.0
  assert float(acct.remaining()[0]) == pytest.approx(first, rel=1e-6)
  _check_remaining(make(jax.random.key(7)), k)
  runs = [_variant(s, v) for s, v in zip(specs, variants)] + ([specs[0]] if extra else [])
  acct, answered = _run(acct, runs)
  expected = [i < len(specs) and _dominated(r, specs[i], k) for i, r in enumerate(runs)]
  assert answered == expected
  eps, delta = acct.guarantee()
  events = [_event(s, k) for s, ok in zip(runs, answered) if ok]
  assert float(delta) == pytest.approx(delta_budget if events else 0.0)
  _assert_covers(eps, delta, events)
  _assert_covers(acct.spent_eps, acct.spent_delta, events)
  assert float(acct.remaining()[0]) == 0.0  # the plan is used up


# ------------------------------------------------------------------ the figures
@pytest.mark.subprocess
@pytest.mark.parametrize(
  "eps,n,answered,true_lb", [(0.3, 11, 6, 1.7994), (0.1, 30, 23, 1.7506)]
)
def test_renyi_filter_reports_at_least_the_true_eps_of_what_it_answered(
  eps, n, answered, true_lb
):
  """(2, 1e-5) with the default orders: 6 of 11 Laplace(0.3) (23 of 30 Laplace(0.1))
  are answered, after which the smaller orders are past their budgets. dp_accounting
  puts the true eps of what was answered at about 1.7994 (1.7506); a figure that
  converted the past-budget orders' capped totals said 1.7440 for both. Each past
  order shows inf, and the figure is the best conversion over the others."""
  acct = Accountant.create(
    2.0,
    delta_budget=1e-5,
    composition="rdp",
    key=jax.random.key(9),
    on_refusal=FillOnRefusal(),
  )
  specs = [("laplace", eps)] * n
  kept, budgets = _filter_budgets(2.0, 1e-5, jaxdp.renyi.DEFAULT_ORDERS)
  decisions, total, close = _rdp_reference(specs, 1, kept, budgets)
  assert sum(decisions) == answered and not close
  acct, got = _run(acct, specs)
  assert got == decisions
  reported, delta = (float(v) for v in acct.guarantee())
  lb = _optimistic_eps((("laplace", eps),) * answered, 1e-5, grid=1e-4)
  assert lb == pytest.approx(true_lb, abs=1e-3)
  assert reported >= max(lb, true_lb) and delta == pytest.approx(1e-5)
  spent = np.asarray(acct.spent_rdp)
  assert np.isinf(spent).any() and np.isfinite(spent).any()
  tail = (
    math.log(1e5) + (np.array(kept) - 1) * np.log1p(-1 / np.array(kept)) - np.log(kept)
  ) / (np.array(kept) - 1)
  assert reported == pytest.approx(min(np.min(np.asarray(total) + tail), 2.0), rel=1e-5)
  rdp = dp_accounting.rdp.RdpAccountant(orders=list(kept))
  rdp.compose(dp_accounting.LaplaceDpEvent(1 / eps), answered)
  assert reported >= rdp.get_epsilon(1e-5) * (1 - 2.0**-19)
  # batched accountants report the same, lane by lane
  batch = jax.vmap(lambda _: acct)(jnp.arange(2))
  np.testing.assert_array_equal(np.asarray(batch.spent_eps), [reported] * 2)
