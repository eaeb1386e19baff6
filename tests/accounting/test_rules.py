"""Composition rules: one class per rule behind one protocol, held by the Accountant."""

import dataclasses

import jax.numpy as jnp
import pytest

from jaxdp import Accountant, LaplaceMechanism, plan, raise_if_refused, release
from jaxdp.accounting import ReleaseRefusedError
from jaxdp.accounting.refusal import FillOnRefusal
from jaxdp.accounting.rules import (
  RULES,
  AdvancedComposition,
  BasicComposition,
  CompositionRule,
  PlannedComposition,
  RenyiFilter,
  UnitRule,
  ZCDPFilter,
)


def _key() -> dict:
  """A fixed key, a new object each time (an accountant consumes its key)."""
  return {"key": jnp.zeros(2, jnp.uint32)}


def _query(acct, x):
  for _ in range(3):
    acct, _ = release(acct, LaplaceMechanism(0.1), x)
  return acct


OPTIONS = {
  "basic": {},
  "advanced": {"max_releases": 3, "delta_prime": 1e-7},
  "zcdp": {},
  "rdp": {"orders": (8.0, 16.0)},
  "planned": {
    "plan": plan(
      _query, Accountant.create(1.0, **_key(), on_refusal=FillOnRefusal()), jnp.zeros(())
    )
  },
}
CLASSES = {
  "basic": BasicComposition,
  "advanced": AdvancedComposition,
  "zcdp": ZCDPFilter,
  "rdp": RenyiFilter,
  "planned": PlannedComposition,
}


@pytest.mark.parametrize("name", list(CLASSES))
def test_each_shorthand_maps_to_its_class_which_satisfies_the_protocol(name):
  acct = Accountant.create(
    3.0,
    delta_budget=1e-5,
    composition=name,
    **OPTIONS[name],
    **_key(),
    on_refusal=FillOnRefusal(),
  )
  assert type(acct.rule) is CLASSES[name] and RULES[name] is CLASSES[name]
  assert isinstance(acct.rule, CompositionRule)
  assert acct.composition == name == acct.rule.name
  hash(acct.rule)  # a static pytree field: hashable
  acct = _query(acct, jnp.zeros(()))
  assert int(acct.answered) == 3
  eps, delta = acct.guarantee()
  assert 0 < float(eps) <= 3.0 + 1e-6 and 0 <= float(delta) <= 1e-5


@pytest.mark.parametrize(
  "name, rule",
  [
    ("advanced", AdvancedComposition(max_releases=3, delta_prime=1e-7)),
    ("rdp", RenyiFilter(orders=(8.0, 16.0))),
    ("zcdp", ZCDPFilter()),
  ],
)
def test_a_rule_instance_is_the_same_accountant_as_its_shorthand(name, rule):
  by_name = Accountant.create(
    3.0,
    delta_budget=1e-5,
    composition=name,
    **OPTIONS.get(name, {}),
    **_key(),
    on_refusal=FillOnRefusal(),
  )
  by_rule = Accountant.create(
    3.0, delta_budget=1e-5, composition=rule, **_key(), on_refusal=FillOnRefusal()
  )
  assert by_name.rule == by_rule.rule
  assert by_name.unit_exponent == by_rule.unit_exponent
  a, _ = release(by_name, LaplaceMechanism(0.2), jnp.zeros(()))
  b, _ = release(by_rule, LaplaceMechanism(0.2), jnp.zeros(()))
  assert int(jnp.sum(a.spent_units)) == int(jnp.sum(b.spent_units)) > 0


def test_unknown_shorthand_names_the_argument_the_value_and_the_choices():
  with pytest.raises(
    ValueError,
    match=r"composition must be one of \('basic', "
    r"'advanced', 'zcdp', 'rdp', 'planned'\); got 'renyi'",
  ):
    Accountant.create(1.0, composition="renyi", on_refusal=FillOnRefusal())
  with pytest.raises(TypeError, match="composition must be one of"):
    Accountant.create(1.0, composition=3, on_refusal=FillOnRefusal())


def test_options_belong_to_the_rule_instance():
  with pytest.raises(ValueError, match="orders must be given to the rule RenyiFilter"):
    Accountant.create(
      1.0,
      delta_budget=1e-5,
      composition=RenyiFilter(),
      orders=(2.0,),
      on_refusal=FillOnRefusal(),
    )


@dataclasses.dataclass(frozen=True)
class AtMostKReleases(UnitRule):
  """Pure eps-DP releases under basic composition, and at most ``k`` of them."""

  k: int = 2
  name = "at-most-k"

  def cost(self, mech, group_size):
    eps, delta = mech.cost(group_size)
    if delta != 0:
      raise ValueError("at-most-k takes pure eps-DP mechanisms only.")
    return eps, delta

  def allows(self, caps, spent, spent_delta, answered, ce, cd):
    return (answered < self.k) & super().allows(caps, spent, spent_delta, answered, ce, cd)


def test_a_sixth_rule_runs_without_editing_the_accountant():
  acct = Accountant.create(
    1.0, composition=AtMostKReleases(k=2), **_key(), on_refusal=FillOnRefusal()
  )
  assert acct.composition == "at-most-k" and isinstance(acct.rule, CompositionRule)
  x = jnp.zeros(())
  acct, out = release(acct, LaplaceMechanism(0.1), x)
  raise_if_refused(acct, out)
  acct, out = release(acct, LaplaceMechanism(0.1), x)
  raise_if_refused(acct, out)
  acct, out = release(acct, LaplaceMechanism(0.1), x)  # budget left, count spent
  assert bool(jnp.isnan(out)) and int(acct.refusals) == 1 and int(acct.answered) == 2
  with pytest.raises(ReleaseRefusedError):
    raise_if_refused(acct, out)
  assert float(acct.guarantee()[0]) == pytest.approx(0.2, rel=1e-5)
  # planning uses the same rule: the third release is planned refused
  p = plan(
    _query,
    Accountant.create(
      1.0, composition=AtMostKReleases(k=2), **_key(), on_refusal=FillOnRefusal()
    ),
    x,
  )
  assert p.refused == (2,)
