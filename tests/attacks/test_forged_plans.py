"""Attacks with a hand-made :class:`jaxdp.Plan`, and the zCDP conversion near delta 1.

``Plan`` and ``PlannedRelease`` are public named tuples: an analyst can build one
whose rows cancel (eps 1000 and -999: its figure is 1), end in NaN (the figure is NaN
and ``NaN > budget`` is False) or state a negative delta, and bind it to a
:class:`jaxdp.PlannedComposition` in a Session, an Accountant or a ledger record.
Every row must be checked by allowlist, and a NaN figure must refuse.
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp.composition.zcdp import zcdp_epsilon
from jaxdp.ledger import records
from jaxdp.ledger.errors import LedgerCorruptError

PR = jaxdp.PlannedRelease
NAN = float("nan")
AGES = np.random.default_rng(0).integers(18, 90, size=50)


def _laplace(e):
  return PR(e, 0.0, False, NAN, (), ("laplace", e))


FORGED = {
  "cancelling rows": (_laplace(1000.0), _laplace(-999.0)),
  "a trailing NaN row": (_laplace(1000.0), _laplace(NAN)),
  "a negative delta": (PR(0.5, -1.0, False, NAN, (), ("gaussian", 10.6)),),
  "an unknown kind": (PR(0.5, 0.0, False, NAN, (), ("free", 0.5)),),
  "an eps that is not the event's": (PR(0.1, 0.0, False, NAN, (), ("laplace", 50.0)),),
  "an infinite value": (_laplace(math.inf),),
  "a rho that is not the event's": (PR(NAN, 0.0, False, 1e-9, (), ("laplace", 50.0)),),
  "a Gaussian delta its sigma does not give": (
    PR(0.5, 1e-9, False, NAN, (), ("gaussian", 1.0)),
  ),
  "a NaN rdp curve": (PR(NAN, 0.0, False, NAN, (NAN, 0.1), ("laplace", 0.5)),),
  "a boolean event value": (PR(1.0, 0.0, False, NAN, (), ("laplace", True)),),
  "a refused flag that is not a bool": (PR(0.5, 0.0, "no", NAN, (), ("laplace", 0.5)),),
}


@pytest.mark.parametrize("why", list(FORGED))
def test_a_forged_plan_is_refused_by_every_binder(why):
  forged = jaxdp.Plan(1.0, 0.0, FORGED[why])
  binders = [
    lambda: jaxdp.Session(
      AGES, eps_budget=1.0, secure=True, composition=jaxdp.PlannedComposition(forged)
    ),
    lambda: jaxdp.Accountant.create(
      1.0, secure=True, composition=jaxdp.PlannedComposition(forged)
    ),
    lambda: jaxdp.Accountant.create(1.0, composition="planned", plan=forged),
  ]
  for bind in binders:
    with pytest.raises(ValueError, match=r"plan release #[01]"):
      bind()


@pytest.mark.parametrize("total", [(NAN, 0.0), (1.0, -1.0), (-1.0, 0.0), (1.0, NAN)])
def test_a_plan_with_bad_totals_is_refused(total):
  forged = jaxdp.Plan(*total, (_laplace(0.5),))
  with pytest.raises(ValueError, match="the plan's total"):
    jaxdp.Accountant.create(1.0, composition="planned", plan=forged)


def test_a_plan_that_is_not_a_plan_is_refused():
  rows = (_laplace(0.5),)
  with pytest.raises(TypeError, match="jaxdp.Plan"):
    jaxdp.PlannedComposition((1.0, 0.0, rows)).bind(1.0, 0.0)
  with pytest.raises(TypeError, match="PlannedRelease"):
    jaxdp.PlannedComposition(jaxdp.Plan(1.0, 0.0, ((0.5, 0.0, False),))).bind(1.0, 0.0)


def test_the_forged_row_events_are_refused_by_the_figure_itself():
  """The composition figure refuses what no mechanism is (negative, NaN, unknown)."""
  for events in ([("laplace", 1.0), ("laplace", -0.9)], [("laplace", NAN)], [("x", 1)]):
    with pytest.raises(ValueError, match="event #"):
      jaxdp.events_epsilon(events, 1e-6)


def test_a_forged_planned_record_in_a_ledger_is_corrupt():
  """A ledger's budget record holds the plan's events; a record whose events were
  edited (and its digest recomputed) does not resume."""
  plan = jaxdp.plan(
    lambda a, x: jaxdp.release(a, jaxdp.LaplaceMechanism(0.5), x),
    jaxdp.Accountant.create(1.0, key=jax.random.key(0)),
    jnp.zeros(()),
  )
  acct = jaxdp.Accountant.create(1.0, composition="planned", plan=plan)
  record = records.budget_record(acct)
  assert records.budget_record(records.rebuild(record)) == record  # the honest one
  forged_rows = (("laplace", 1000.0), ("laplace", -999.0))
  forged_rule = dataclasses.replace(acct.rule, planned=forged_rows)
  record = dict(
    record, params={"planned": records.jsonable(forged_rows)}, digest=forged_rule.digest()
  )
  with pytest.raises(LedgerCorruptError, match=r"plan release #1"):
    records.rebuild(record)


def _two_releases(mech_a, mech_b, dtype):
  def fn(acct, x):
    acct, _ = jaxdp.release(acct, mech_a, x)
    return jaxdp.release(acct, mech_b, x)

  return fn, jnp.zeros((), dtype)


CASES = [
  (jaxdp.LaplaceMechanism(0.3), jaxdp.GaussianMechanism(0.5, 1e-7), jnp.float32),
  (
    jaxdp.GaussianMechanism(2.0, 1e-7, calibration="analytic"),
    jaxdp.DiscreteGaussianMechanism(0.5, 1e-7),
    jnp.int8,
  ),
]


@pytest.mark.parametrize(
  "options, case",
  [
    (dict(group_size=2, delta_budget=1e-5), 0),
    (dict(delta_budget=1e-5), 1),
    (dict(composition="zcdp", delta_budget=1e-5), 1),
    (dict(composition="rdp", delta_budget=1e-5), 0),
  ],
)
def test_every_plan_jaxdp_makes_still_binds(options, case):
  """The row check accepts jaxdp's own plans in each rule's currency (Laplace,
  classical and analytic Gaussian, discrete Gaussian)."""
  acct = jaxdp.Accountant.create(100.0, key=jax.random.key(0), **options)
  fn, x = _two_releases(*CASES[case])
  plan = jaxdp.plan(fn, acct, x)
  assert not plan.refused
  bound = jaxdp.Accountant.create(10.0, delta_budget=1e-5, composition="planned", plan=plan)
  assert bound.rule.planned == tuple(r.event for r in plan.releases)


# ------------------------------------------------------------------ zCDP near delta 1
def test_the_zcdp_conversion_is_never_negative():
  """rho-zCDP implies (eps, delta)-DP with eps >= 0; near delta = 1 the CKS formula
  goes negative, and (eps, delta)-DP implies (eps', delta)-DP for eps' >= eps."""
  for rho in (1e-6, 0.125):
    assert zcdp_epsilon(rho, 0.999999) >= 0.0
    assert float(jax.jit(zcdp_epsilon, static_argnums=1)(jnp.float32(rho), 0.999999)) >= 0
  assert zcdp_epsilon(0.125, 1e-6) > 0  # unchanged where the formula is positive


def test_a_zcdp_session_near_delta_1_reports_a_non_negative_spend():
  s = jaxdp.Session(AGES, eps_budget=1.0, composition="zcdp", delta_budget=0.999999)
  s.count(lambda a: a > 65, eps=0.5)
  assert s.spent >= 0.0 and s.answered == 1


# ------------------------------------------------------------------ integer sentinels
SENTINEL = np.full(5, np.iinfo(np.int32).min, np.int32)  # a refused exact release


def test_the_integer_sentinel_is_refused_as_nan_is():
  """An int32 minimum marks a refused exact release, as NaN marks a float one: it is
  no count to make consistent or to bootstrap (concrete: refused; under jit: the
  certificate says not ok, as for NaN)."""
  poset = jaxdp.Poset.nhis(1)
  with pytest.raises(ValueError, match="mark of a refused"):
    jaxdp.consistent(SENTINEL, poset, integer=True)
  with pytest.raises(ValueError, match="mark of a refused"):
    jaxdp.consistent(SENTINEL[None].repeat(2, 0), poset, method="batched")
  mech = jaxdp.PosetCountMechanism(poset, 1.0, exact=True)
  with pytest.raises(ValueError, match="mark of a refused"):
    jaxdp.consistent_error_bars(SENTINEL, mech, integer=True, num_samples=100)
  ok = np.array([10, 3, 2, 1, 0], np.int32)  # a count of 0 or a large one is a count
  np.testing.assert_array_equal(jaxdp.consistent(ok, poset, integer=True), ok)
  np.testing.assert_array_equal(
    jaxdp.consistent(np.array([7, 0, 0, 0, 0], np.uint8), poset, integer=True),
    [7, 0, 0, 0, 0],
  )
