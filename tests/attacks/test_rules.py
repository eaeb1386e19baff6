"""Attacks on the accountant's composition rule, and what must keep working.

The rule is a static field of the accountant, bound to its budgets by
``Accountant.create``. Before: a rule changed after binding (``dataclasses.replace``
of a plan's rows, of the Rényi orders) was used as it was, a ``Session`` or a secure
accountant took any rule object (one whose ``allows`` answers everything), and the
spent units wrapped past int32 into negative spend.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import Accountant, LaplaceMechanism, Session, plan, release
from jaxdp.accounting.refusal import FillOnRefusal
from jaxdp.accounting.rules import (
  BasicComposition,
  PlannedComposition,
  RenyiFilter,
  UnitRule,
)


def _key() -> dict:
  """A fixed key, a new object each time (an accountant consumes its key)."""
  return {"key": jnp.zeros(2, jnp.uint32)}


REBUILD = r"Accountant\.create\(\.\.\., composition=Rule\(\.\.\.\)\)"


def _laplace_scan(n):
  """A query of ``n`` Laplace releases at eps = 1, in one ``lax.scan``."""

  def query(acct, x):
    def body(a, _):
      a, out = release(a, LaplaceMechanism(1.0), x)
      return a, out

    acct, _ = jax.lax.scan(body, acct, None, length=n)
    return acct

  return query


# ------------------------------------------------------------------ changed rules
def test_a_swapped_plan_is_refused_at_the_first_release():
  """Before: a planned accountant on (5, 1e-6) whose ``planned`` rows were swapped
  for a 111-release plan's answered 111 releases at eps = 1."""
  x = jnp.zeros(())
  small = plan(
    _laplace_scan(5), Accountant.create(200.0, **_key(), on_refusal=FillOnRefusal()), x
  )
  large = plan(
    _laplace_scan(111), Accountant.create(200.0, **_key(), on_refusal=FillOnRefusal()), x
  )
  acct = Accountant.create(
    5.0,
    delta_budget=1e-6,
    composition=PlannedComposition(small),
    **_key(),
    on_refusal=FillOnRefusal(),
  )
  other = Accountant.create(
    200.0,
    delta_budget=1e-6,
    composition=PlannedComposition(large),
    **_key(),
    on_refusal=FillOnRefusal(),
  )
  assert len(acct.planned) == 5 and len(other.planned) == 111
  swapped = dataclasses.replace(
    acct, rule=dataclasses.replace(acct.rule, planned=other.rule.planned)
  )
  with pytest.raises(ValueError, match=f"changed after it was bound.*{REBUILD}"):
    _laplace_scan(200)(swapped, x)
  # the same with the whole rule of the other accountant (bound to other budgets)
  with pytest.raises(ValueError, match=f"bound to \\(eps=200.*{REBUILD}"):
    _laplace_scan(200)(dataclasses.replace(acct, rule=other.rule), x)
  # unchanged, the plan is enforced: 5 answered, the rest refused
  done = _laplace_scan(200)(acct, x)
  assert int(done.answered) == 5 and int(done.refusals) == 195


def test_changed_renyi_orders_are_refused():
  """Before: orders changed from (64,) to (64, 2) after create broadcast the spent
  state of one order over two."""
  acct = Accountant.create(
    1.0,
    delta_budget=1e-5,
    composition=RenyiFilter(orders=(64.0,)),
    **_key(),
    on_refusal=FillOnRefusal(),
  )
  assert acct.orders == (64.0,)
  changed = dataclasses.replace(
    acct, rule=dataclasses.replace(acct.rule, orders=(64.0, 2.0))
  )
  for fn in (release, jax.jit(release)):
    with pytest.raises(ValueError, match=f"changed after it was bound.*{REBUILD}"):
      fn(changed, LaplaceMechanism(0.1), jnp.zeros(()))


def test_changed_budgets_units_and_state_shape_are_refused():
  acct = Accountant.create(1.0, **_key(), on_refusal=FillOnRefusal())
  for changed, what in [
    (dataclasses.replace(acct, eps_budget=100.0), "bound to"),
    (dataclasses.replace(acct, rule=BasicComposition()), "never bound"),
    (dataclasses.replace(acct, unit_exponent=acct.unit_exponent + 7), "unit exponents"),
    (dataclasses.replace(acct, spent_units=jnp.zeros(3, jnp.int32)), "shape"),
  ]:
    with pytest.raises(ValueError, match=f"{what}.*{REBUILD}"):
      release(changed, LaplaceMechanism(0.1), jnp.zeros(()))


def test_bound_accountants_still_flatten_map_jit_and_plan():
  x = jnp.zeros(())
  small = plan(
    _laplace_scan(3), Accountant.create(10.0, **_key(), on_refusal=FillOnRefusal()), x
  )
  for composition in ("basic", RenyiFilter(orders=(8.0, 16.0)), PlannedComposition(small)):
    acct = Accountant.create(
      3.0, delta_budget=1e-5, composition=composition, **_key(), on_refusal=FillOnRefusal()
    )
    again = Accountant.create(
      3.0, delta_budget=1e-5, composition=composition, **_key(), on_refusal=FillOnRefusal()
    )
    assert acct.rule == again.rule and hash(acct.rule) == hash(again.rule)
    leaves, treedef = jax.tree_util.tree_flatten(acct)
    assert hash(treedef)
    acct = jax.tree_util.tree_unflatten(treedef, leaves)
    acct = jax.jit(_laplace_scan(2))(acct, x)
    assert int(acct.answered) == 2
    keys = jax.random.split(jax.random.key(1), 3)
    batch = jax.vmap(
      lambda k: Accountant.create(
        3.0, delta_budget=1e-5, composition=composition, key=k, on_refusal=FillOnRefusal()
      )
    )(keys)
    batch = jax.vmap(_laplace_scan(2), in_axes=(0, None))(batch, x)
    assert np.all(np.asarray(batch.answered) == 2)
  assert (
    plan(
      _laplace_scan(2), Accountant.create(3.0, **_key(), on_refusal=FillOnRefusal()), x
    ).refused
    == ()
  )


# ------------------------------------------------------------------ custom rules
@dataclasses.dataclass(frozen=True)
class AnswersEverything(BasicComposition):
  """A subclass of a jaxdp rule whose refusal rule answers every release."""

  def allows(self, caps, spent, spent_delta, answered, ce, cd):
    return jnp.asarray(True)


def test_a_session_refuses_a_rule_that_is_not_jaxdps_own():
  """Before: a Session with ``composition=AnswersEverything()`` answered every
  query, and its ``spent`` wrapped negative."""
  data = np.arange(100.0)
  for secure in (False, True):
    with pytest.raises(
      TypeError, match=r"composition must be one of \('basic'.*AnswersEverything"
    ):
      Session(data, 1.0, composition=AnswersEverything(), secure=secure)
  with pytest.raises(ValueError, match="composition must be one of"):
    Session(data, 1.0, composition="everything")
  # jaxdp's own classes and names stay accepted
  assert Session(data, 1.0, composition=BasicComposition()).eps_budget == 1.0
  s = Session(data, 1.0, delta_budget=1e-5, composition=RenyiFilter(orders=(64.0,)))
  assert s.eps_budget == 1.0


def test_a_secure_accountant_refuses_a_custom_rule():
  with pytest.raises(TypeError, match="for a secure accountant.*AnswersEverything"):
    Accountant.create(
      1.0, composition=AnswersEverything(), secure=True, on_refusal=FillOnRefusal()
    )
  with pytest.raises(ValueError, match="for a secure accountant"):
    Accountant.create(
      1.0, composition=AnswersEverything(), secure=True, on_refusal=FillOnRefusal()
    )
  assert Accountant.create(
    1.0, composition=BasicComposition(), secure=True, on_refusal=FillOnRefusal()
  ).secure
  # a non-secure accountant keeps custom rules; a secure one cannot be given one later
  plain = Accountant.create(
    1.0, composition=AnswersEverything(), **_key(), on_refusal=FillOnRefusal()
  )
  secure = Accountant.create(1.0, secure=True, on_refusal=FillOnRefusal())
  forged = dataclasses.replace(secure, rule=plain.rule)
  with pytest.raises(ValueError, match="not one of jaxdp's rule classes"):
    release(forged, LaplaceMechanism(0.1, exact=True), jnp.zeros(()))


# ------------------------------------------------------------------ saturation
@dataclasses.dataclass(frozen=True)
class NoRefusals(UnitRule):
  """A non-secure custom rule that answers everything (a buggy rule of one's own)."""

  name = "no-refusals"

  def allows(self, caps, spent, spent_delta, answered, ce, cd):
    return jnp.asarray(True)


@pytest.mark.parametrize("jit", [False, True])
def test_spent_units_saturate_and_read_as_over_budget(jit):
  """Before: each release charged about 2**30 units, the third wrapped int32 and
  ``spent_eps`` went negative."""
  budget = 1e-3
  acct = Accountant.create(
    budget,
    delta_budget=1e-6,
    composition=NoRefusals(),
    **_key(),
    on_refusal=FillOnRefusal(),
  )
  step = jax.jit(release) if jit else release
  for _ in range(8):
    acct, _ = step(acct, LaplaceMechanism(budget), jnp.zeros(()))
    assert float(acct.spent_eps) >= budget * (1 - 2**-20)
  assert int(acct.answered) == 8
  assert int(acct.spent_units) == 2**31 - 1
  assert float(acct.spent_eps) > budget and float(acct.remaining()[0]) < 0
