"""Between accountants and ledger entries: budget records, states and mechanism
descriptions, all plain JSON of exact integers, floats and strings.

A budget record holds everything that fixes what a charge costs and how much may be
charged: the budgets, the group size, the composition rule's name, configuration
and digest, its unit exponents, its capacities in units and the shape of its state.
A state holds the accountant's counters: spent units (one per Rényi order), spent
delta units, answered and (for a plan, whose position counts refusals) refused
releases. The units are the accountant's own integers
(:mod:`jaxdp.accounting.budget`), so an accountant resumed from a state is
bit-identical to the one that wrote it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxdp.accounting import (
  Accountant,
  AdvancedComposition,
  BasicComposition,
  PlannedComposition,
  RenyiFilter,
  ZCDPFilter,
)
from jaxdp.accounting.rules.planned import checked_rows
from jaxdp.ledger.errors import BudgetMismatchError, LedgerCorruptError
from jaxdp.ledger.fingerprint import array_fingerprint
from jaxdp.posets import Poset

__all__ = [
  "POSITIONAL",
  "BUILTIN_RULES",
  "budget_record",
  "check_budget",
  "check_rule",
  "describe_mechanism",
  "jsonable",
  "rebuild",
  "resume",
  "state_of",
]

POSITIONAL = ("planned",)  # rules whose state counts refused releases too

# The composition rules a ledger stores, by exact type: a record must rebuild to the
# same accountant in every process (:func:`rebuild`), which no subclass can promise.
BUILTIN_RULES = (
  BasicComposition,
  AdvancedComposition,
  ZCDPFilter,
  RenyiFilter,
  PlannedComposition,
)


def check_rule(acct: Accountant, rebuilds: bool = True) -> None:
  """Refuses an accountant whose composition rule a ledger cannot store: a rule
  that is not one of :data:`BUILTIN_RULES` by exact type (a subclass, even one
  that only overrides ``allows``, is refused), or (``rebuilds``) whose budget
  record does not rebuild to the same accountant.

  Raises:
    ValueError: naming the rule's type and what to pass instead.
  """
  rule = acct.rule
  if type(rule) not in BUILTIN_RULES:
    raise ValueError(
      f"composition {type(rule).__name__!r} cannot be kept in a ledger: a ledger "
      "stores only jaxdp's own rules (composition='basic', 'advanced', 'zcdp', 'rdp' "
      "or a plan), not a subclass or another rule; nothing was written."
    )
  if rebuilds:
    try:
      rebuild(budget_record(acct))
    except LedgerCorruptError:
      raise ValueError(
        f"composition {type(rule).__name__!r} with this configuration does not "
        "rebuild to the same accountant, so a ledger cannot keep it; create the "
        "accountant with Accountant.create; nothing was written."
      ) from None


def jsonable(v: Any) -> Any:
  """``v`` as JSON: numbers exactly (ints, floats), tuples as lists, a poset as its
  fingerprint, another object as its type and a SHA-256 of its repr."""
  if isinstance(v, (bool, np.bool_)):
    return bool(v)
  if isinstance(v, (int, np.integer)):
    return int(v)
  if isinstance(v, (float, np.floating)):
    f = float(v)
    return f if math.isfinite(f) else repr(f)
  if isinstance(v, str) or v is None:
    return v
  if isinstance(v, (tuple, list)):
    return [jsonable(x) for x in v]
  if isinstance(v, np.ndarray) and v.ndim <= 1:
    return jsonable(v.tolist())
  if isinstance(v, Poset):
    return {"poset": array_fingerprint(np.asarray(v.order, bool))}
  return {"type": type(v).__name__, "sha256": hashlib.sha256(repr(v).encode()).hexdigest()}


def _tuples(v):
  return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def budget_record(acct: Accountant) -> dict:
  """What fixes the costs and the capacity of ``acct`` (see the module docstring)."""
  rule = acct.rule
  module, qualname, fields = rule.configuration()
  return {
    "eps": float(acct.eps_budget),
    "delta": float(acct.delta_budget),
    "group_size": int(acct.group_size),
    "rule": rule.name,
    "params": {k: jsonable(v) for k, v in fields},
    "digest": rule.digest(),
    "unit_exponent": jsonable(acct.unit_exponent),
    "delta_unit_exponent": int(acct.delta_unit_exponent),
    "capacity": jsonable(acct.eps_capacity),
    "delta_capacity": int(acct.delta_capacity),
    "state_shape": list(rule.state_shape()),
  }


def check_budget(stored: dict, given: dict, dataset: str) -> None:
  """Raises BudgetMismatchError naming what differs from the stored record."""
  names = {
    "eps": "eps_budget",
    "delta": "delta_budget",
    "group_size": "group_size",
    "rule": "composition",
  }
  diff = [k for k in stored if stored[k] != given.get(k)]
  if diff:
    shown = [k for k in diff if k in names] or diff
    what = ", ".join(
      f"{names.get(k, k)} {given.get(k)!r} here, {stored[k]!r} in the ledger" for k in shown
    )
    raise BudgetMismatchError(
      f"dataset {dataset!r} has another budget in the ledger ({what}): a dataset's "
      "budget, composition rule and group size are fixed by its first use. Use the "
      "ledger's, or a new dataset name for new data."
    )


def state_of(acct: Accountant) -> dict:
  """The accountant's counters as a state (refusals only for a positional rule)."""
  spent = np.asarray(acct.spent_units)
  return {  # each counter read once, as numpy (faster than int() of a jax.Array)
    "spent": [int(x) for x in spent] if spent.ndim else int(spent),
    "spent_delta": int(np.asarray(acct.spent_delta_units)),
    "answered": int(np.asarray(acct.answered)),
    "refusals": int(np.asarray(acct.refusals)) if acct.rule.name in POSITIONAL else 0,
  }


def resume(acct: Accountant, state: dict) -> Accountant:
  """``acct`` (its key and configuration) with the counters of ``state``."""
  shape = tuple(np.shape(acct.spent_units))
  refusals = state["refusals"] if acct.rule.name in POSITIONAL else acct.refusals
  return dataclasses.replace(
    acct,
    spent_units=jnp.asarray(np.asarray(state["spent"], np.int32).reshape(shape)),
    spent_delta_units=jnp.asarray(state["spent_delta"], jnp.int32),
    answered=jnp.asarray(state["answered"], jnp.int32),
    refusals=jnp.asarray(refusals, jnp.int32),
  )


def rebuild(
  record: dict, *, key=None, secure: bool = False, allow_test_key: bool = False
) -> Accountant:
  """A fresh accountant for a stored budget record (no state yet); ``key``,
  ``secure`` and ``allow_test_key`` as for :meth:`jaxdp.Accountant.create`, already
  checked by the caller (:meth:`jaxdp.Ledger.accountant`: an error here is the
  record's).

  Raises:
    LedgerCorruptError: the record does not describe an accountant jaxdp can build
      exactly (its rebuilt record differs).
  """
  eps, delta, params = record["eps"], record["delta"], record["params"]
  kw = dict(delta_budget=delta, group_size=record["group_size"], key=key)
  kw.update(secure=secure, allow_test_key=allow_test_key)
  name = record["rule"]
  try:
    if name == "planned":
      acct = Accountant.create(eps, composition="basic", **kw)
      rows = checked_rows(_tuples(params["planned"]), float(eps), float(delta))
      rule = dataclasses.replace(PlannedComposition(), planned=rows)
      rule = dataclasses.replace(rule, bound=(float(eps), float(delta), rule.digest()))
      exps = rule.unit_exponents(eps, delta)
      acct = dataclasses.replace(
        acct, rule=rule, unit_exponent=exps[0], delta_unit_exponent=exps[1]
      )
    elif name == "advanced":
      acct = Accountant.create(
        eps,
        composition="advanced",
        max_releases=params["max_releases"],
        delta_prime=params["delta_prime"],
        **kw,
      )
    elif name == "rdp":
      acct = Accountant.create(eps, composition="rdp", orders=params["orders"], **kw)
    else:
      acct = Accountant.create(eps, composition=name, **kw)
  except (KeyError, TypeError, ValueError) as e:
    raise LedgerCorruptError(f"a budget record cannot be rebuilt ({e}).") from None
  if budget_record(acct) != record:
    raise LedgerCorruptError("a budget record does not rebuild to the same accountant.")
  return acct


def describe_mechanism(mech: Any, cost: tuple, event: tuple) -> dict:
  """A mechanism's kind and parameters, its charge in the rule's currency and its
  event, as JSON."""
  fields = dataclasses.fields(mech) if dataclasses.is_dataclass(mech) else ()
  return {
    "kind": type(mech).__name__,
    "params": {f.name: jsonable(getattr(mech, f.name)) for f in fields},
    "cost": [jsonable(np.asarray(c, np.float64)) for c in cost],
    "event": jsonable(event),
  }
