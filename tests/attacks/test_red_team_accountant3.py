"""Attacks on the functional accountant and ``plan`` through the public API
(``import jaxdp`` and the guides): each test asserts a guarantee the docs state
and failed on the code it was written against."""

import dataclasses

import jax
import jax.numpy as jnp
import pytest
from jax import lax

import jaxdp


def _sensitivity_from_data(x):
  """A Laplace sensitivity that is 1 on some data and inf (refused) on the rest."""
  return jnp.where(x[0] > 0, jnp.inf, 1.0)


def _fill_acct(seed):
  return jaxdp.Accountant.create(
    1.0, key=jax.random.key(seed), on_refusal=jaxdp.FillOnRefusal()
  )


def _outputs_only(acct, x):
  # the accountant is dropped: only the output leaves the query function
  _, out = jaxdp.release(
    acct, jaxdp.LaplaceMechanism(eps=0.5, sensitivity=_sensitivity_from_data(x)), x
  )
  return out


def test_plan_refuses_a_sensitivity_computed_from_the_data():
  """plan rejects a release whose refusal depends on the data (trust model: "refusal
  decided from an eps computed from the data"). A sensitivity computed from the data
  decides the refusal just as well (an infinite one is out of range): the planned
  query below answers on one dataset and is refused on its neighbour, and plan
  passed it, reporting eps 0.5, because only eps and delta were tagged."""
  acct = _fill_acct(0)
  run = jax.jit(_outputs_only)
  neighbours = (jnp.array([0.0, 1.0]), jnp.array([1.0, 1.0]))
  answered = [
    bool(jnp.all(jnp.isfinite(run(_fill_acct(seed), x))))
    for seed, x in enumerate(neighbours, 1)
  ]
  assert answered == [True, False]  # the refusal discloses x[0] > 0
  with pytest.raises(jaxdp.DataDependentCostError, match="argument 0"):
    jaxdp.plan(_outputs_only, acct, neighbours[0])


@pytest.mark.parametrize(
  "composition, eps, group_size", [("zcdp", 1e20, 1), ("basic", 1e30, 10**9)]
)
def test_a_cost_past_float32_is_named_over_budget_not_underflowing(
  composition, eps, group_size
):
  """A static cost beyond float32's range (rho = eps^2 / 2 = 5e39; k eps = 1e39) was
  refused with a message saying it "underflows float32" and asking for a larger
  eps: the opposite of what to do. It must read as more than the budget."""
  acct = jaxdp.Accountant.create(
    1.0,
    delta_budget=1e-6 if composition == "zcdp" else 0.0,
    composition=composition,
    group_size=group_size,
    key=jax.random.key(2),
  )
  with pytest.raises(jaxdp.BudgetExceededError) as info:
    jaxdp.release(acct, jaxdp.LaplaceMechanism(eps=eps), jnp.zeros(()))
  assert "underflow" not in str(info.value)
  assert "more than the whole" in str(info.value)


def _mechanism_chosen_by_the_data(acct, x):
  # both branches charge eps 0.5 from the same state, to different mechanisms
  stat = jnp.zeros(())
  return lax.cond(
    x[0] > 0,
    lambda a: jaxdp.release(a, jaxdp.LaplaceMechanism(eps=0.5), stat),
    lambda a: jaxdp.release(a, jaxdp.LaplaceMechanism(eps=0.5, sensitivity=2.0**20), stat),
    acct,
  )


def test_plan_refuses_a_cond_on_the_data_between_different_mechanisms():
  """plan accepts a cond on the data only when "every branch makes the same releases
  (same mechanisms and parameters, in the same order)". Releases were compared by
  eps, delta and event only, so Laplace noise of sensitivity 1 in one branch and
  2**20 in the other counted as the same: plan passed the query, charged eps 0.5,
  and the output's size tells which branch ran (x[0] > 0), one bit of one row."""
  run = jax.jit(_mechanism_chosen_by_the_data)
  neighbours = (jnp.array([1.0, 1.0]), jnp.array([0.0, 1.0]))
  small = [
    bool(abs(run(_fill_acct(seed), x)[1]) < 1e3) for seed, x in enumerate(neighbours, 3)
  ]
  assert small == [True, False]
  with pytest.raises(jaxdp.DataDependentCostError, match="cond"):
    jaxdp.plan(_mechanism_chosen_by_the_data, _fill_acct(0), neighbours[0])


def test_the_history_never_logs_a_release_as_cheaper_than_it_was():
  """The history leaf (``events()``, ``to_dp_event()``) stored each event's value
  rounded to the nearest float32: Laplace eps 0.7 was logged as 0.69999999 and a
  Gaussian noise multiplier 17.6626750895 as 17.6626758575 (more noise than drawn),
  so a composition of the logged events came out below the releases' true cost."""
  acct = jaxdp.Accountant.create(100.0, delta_budget=1e-3, history=2, key=jax.random.key(4))
  mechs = [jaxdp.LaplaceMechanism(eps=0.7), jaxdp.GaussianMechanism(0.3, 1e-6)]
  for m in mechs:
    acct, _ = jaxdp.release(acct, m, jnp.zeros(()))
  (_, eps), (_, multiplier) = acct.events()
  assert eps >= 0.7
  assert multiplier <= mechs[1].event(1)[1]


def _one_laplace(acct, x):
  return jaxdp.release(acct, jaxdp.LaplaceMechanism(eps=0.5), x)


def test_a_planned_accountant_answers_nothing_past_its_plan_after_2_31_refusals():
  """The refusal counter added one per refused release and wrapped past int32 after
  2**31 refusals (a long ``lax.scan`` of refused releases under ``FillOnRefusal``;
  the counter is set here to stand for them). The planned rule found its next row
  at ``answered + refusals``, which then wrapped negative and indexed the plan's
  first row again: a release past the end of the plan was answered."""
  acct = _fill_acct(5)
  x = jnp.zeros(())
  planned = jaxdp.Accountant.create(
    1.0,
    composition=jaxdp.accounting.rules.PlannedComposition(
      plan=jaxdp.plan(_one_laplace, acct, x)
    ),
    key=jax.random.key(6),
    on_refusal=jaxdp.FillOnRefusal(),
  )
  planned, _ = _one_laplace(planned, x)
  assert bool(planned.last_answered)
  worn = dataclasses.replace(planned, refusals=jnp.int32(2**31 - 1))
  after, out = _one_laplace(worn, x)
  assert not bool(after.last_answered) and bool(jnp.isnan(out))
  assert int(after.refusals) == 2**31 - 1  # saturated, never wrapped
