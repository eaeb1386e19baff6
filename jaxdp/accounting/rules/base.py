"""The protocol of a composition rule, and the base of the rules that count in units.

A rule decides what a release costs, whether it is answered and what the accountant
guarantees afterwards. The :class:`~jaxdp.Accountant` holds one rule instance as a
static field (hashable) and asks it; it never asks which rule it holds. A rule is a
static argument of the compiled charge, shared by every accountant in the process, so
jaxdp's rules compare and hash their fields' types with their values and refuse to
equal a rule with instance attributes of its own
(:class:`~jaxdp._identity.FieldIdentity`): a forged field or a
shadowed ``allows`` never shares an honest rule's compilation. A new rule is a new
class: subclass :class:`UnitRule` (spending counted in the integer units of
:mod:`jaxdp.accounting.budget`; declare it ``eq=False`` to keep that equality) and
override what differs.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
from typing import TYPE_CHECKING, NamedTuple, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import plain, value_cache
from jaxdp._identity import FieldIdentity
from jaxdp.accounting import budget, planning
from jaxdp.accounting.errors import BudgetExceededError
from jaxdp.accounting.history import logged
from jaxdp.typing import ArrayLike, KeyArray, Scalar

if TYPE_CHECKING:  # the accountant imports the rules
  from jaxdp.accounting.accountant import Accountant
  from jaxdp.mechanisms import Mechanism

__all__ = ["CompositionRule", "Capacity", "UnitRule", "bound_rule"]


class Capacity(NamedTuple):
  """A rule's static limits in units, for an accountant's budgets.

  ``eps_capacity`` is a tuple (one entry per order) under the Rényi filter."""

  eps_limit: int | tuple  # largest single charge: the capacity, or a per-release cap
  delta_limit: int
  eps_capacity: int | tuple
  delta_capacity: int


@runtime_checkable
class CompositionRule(Protocol):
  """What the accountant asks of its composition rule.

  ``name`` is what :attr:`jaxdp.Accountant.composition` reports. Every method is
  static configuration or a pure function of the accountant's leaves, so it works
  under ``jit`` and ``vmap``.
  """

  name: str
  bound: tuple  # (eps_budget, delta_budget, digest()) recorded by bind

  def bind(self, eps_budget: float, delta_budget: float) -> CompositionRule:
    """The rule checked against and completed for the budgets (raises ValueError),
    with ``bound`` set to ``(eps_budget, delta_budget, digest())``."""

  def digest(self) -> str:
    """A stable digest of the rule's configuration (what ``bind`` recorded)."""

  def state_shape(self) -> tuple:
    """The shape of the accountant's ``spent_units`` leaf."""

  def unit_exponents(self, eps_budget: float, delta_budget: float) -> tuple:
    """``(eps unit exponent, delta unit exponent)`` fixed at creation."""

  def cost(self, mech: Mechanism, group_size: int) -> tuple[Scalar, Scalar]:
    """``(eps, delta)``: a mechanism's charge in this rule's currency."""

  def capacity(self, acct: Accountant) -> Capacity:
    """The static limits, in units, for ``acct``'s budgets."""

  def allows(
    self,
    caps: Capacity,
    spent: ArrayLike,
    spent_delta: ArrayLike,
    answered: ArrayLike,
    ce: ArrayLike,
    cd: ArrayLike,
  ) -> jax.Array:
    """Whether a charge of ``ce``, ``cd`` units is answered (the refusal rule)."""

  def spend(
    self, acct: Accountant, eps: Scalar, delta: Scalar, valid: ArrayLike, event: tuple
  ) -> tuple[jax.Array, KeyArray, Accountant]:
    """``(ok, key for the mechanism, accountant after the charge)``."""

  def guarantee(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    """The ``(eps, delta)`` guarantee of what ``acct`` has answered."""

  def remaining(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    """The largest ``(eps, delta)`` one more release could be charged now."""


@dataclasses.dataclass(frozen=True, eq=False)
class UnitRule(FieldIdentity):
  """Basic composition's behaviour, counted in integer units; subclasses override.

  Defaults: the cost is ``mech.cost(group_size)``; the eps and delta budgets each
  fix a unit (:func:`jaxdp.accounting.budget.unit_exponent`); a release is answered
  iff its units fit what is left of both (Dwork, Lemma 2.6).

  A subclass is a frozen dataclass; its fields are its configuration, checked and
  completed for the budgets by :meth:`configure`.

  Attributes:
    bound: what :meth:`bind` recorded, ``(eps_budget, delta_budget, digest)``; ``()``
      for a rule not bound yet (keyword-only, set by :meth:`bind`).
  """

  bound: tuple = dataclasses.field(default=(), kw_only=True, repr=False)
  name = "basic"
  needs_delta = False  # the rule converts at delta_budget, which must be > 0
  max_releases = 0
  delta_prime = 0.0
  orders = ()
  planned = ()

  # ----------------------------------------------------------- configuration
  def bind(self, eps_budget: float, delta_budget: float) -> UnitRule:
    """The rule checked against and completed for the budgets, recording them.

    Runs :meth:`configure` (which subclasses override) and stores in :attr:`bound`
    the budgets and the :meth:`digest` of the configured rule: a release refuses an
    accountant whose rule was changed after binding (:func:`bound_rule`).

    Raises:
      ValueError: the rule does not fit the budgets.
    """
    rule = self.configure(eps_budget, delta_budget)
    return dataclasses.replace(
      rule, bound=(float(eps_budget), float(delta_budget), rule.digest())
    )

  def configure(self, eps_budget: float, delta_budget: float) -> UnitRule:
    """The rule checked against and completed for the budgets (override this, not
    :meth:`bind`, which records what it returns).

    Raises:
      ValueError: the rule does not fit the budgets.
    """
    if self.needs_delta and not delta_budget > 0:
      raise ValueError(
        f"composition={self.name!r} needs delta_budget > 0: the budget "
        "is the one whose (eps, delta) conversion fits (eps_budget, "
        "delta_budget)."
      )
    return self

  def configuration(self) -> tuple:
    """The rule's class and its compared fields but :attr:`bound`, as a tuple."""
    fields = tuple(
      (f.name, getattr(self, f.name))
      for f in dataclasses.fields(self)
      if f.compare and f.name != "bound"
    )
    return (type(self).__module__, type(self).__qualname__, fields)

  def digest(self) -> str:
    """A SHA-256 of :meth:`configuration` (hashable, the same in every process)."""
    return hashlib.sha256(repr(self.configuration()).encode()).hexdigest()

  def unit_exponents(self, eps_budget: float, delta_budget: float) -> tuple:
    """``(eps unit exponent, delta unit exponent)`` fixed at creation."""
    return budget.unit_exponent(eps_budget), budget.unit_exponent(delta_budget)

  def state_shape(self) -> tuple:
    """The shape of the ``spent_units`` leaf."""
    return ()

  def rho_budget(self, acct: Accountant) -> float:
    return math.nan

  def rdp_budgets(self, acct: Accountant) -> tuple:
    return ()

  def per_release_caps(self, acct: Accountant) -> tuple:
    """``(eps_cap, delta_cap)`` of one release (inf: none but the budget)."""
    return math.inf, math.inf

  # ----------------------------------------------------------- charging
  def cost(self, mech: Mechanism, group_size: int) -> tuple[Scalar, Scalar]:
    return mech.cost(group_size)

  def capacity(self, acct: Accountant) -> Capacity:
    eps = budget.capped_capacity(acct.eps_budget, acct.unit_exponent)
    delta = budget.capped_capacity(acct.delta_budget, acct.delta_unit_exponent)
    return Capacity(eps, delta, eps, delta)

  def allows(
    self,
    caps: Capacity,
    spent: ArrayLike,
    spent_delta: ArrayLike,
    answered: ArrayLike,
    ce: ArrayLike,
    cd: ArrayLike,
  ) -> jax.Array:
    """Lemma 2.6 on integer units (plain comparisons: traced values and Python ints
    alike; ``c <= capacity - spent`` cannot overflow int32)."""
    return (ce <= caps.eps_capacity - spent) & (cd <= caps.delta_capacity - spent_delta)

  def add(self, caps: Capacity, spent: ArrayLike, ce: ArrayLike) -> jax.Array:
    """``spent + ce`` after an answered release, saturated at the largest int32 (a
    saturated counter is over every capacity, never wrapped to a small one)."""
    return budget.add_units(spent, ce)

  def spend(
    self, acct: Accountant, eps: Scalar, delta: Scalar, valid: ArrayLike, event: tuple
  ) -> tuple[jax.Array, KeyArray, Accountant]:
    """Refuses a static over-budget cost, records the release for :func:`plan`,
    splits the key and charges (nothing where ``valid`` is False)."""
    caps = self.capacity(acct)
    self.check_static_cost(acct, caps, eps, delta)
    state = planning.current()
    if state is not None:
      eps, delta, acct, valid = planning.record(state, eps, delta, event, acct, valid)
    key, sub = jax.random.split(acct.key)
    ok, leaves = _charge(
      (
        acct.spent_units,
        acct.spent_delta_units,
        acct.answered,
        acct.refusals,
        acct.last_answered,
      ),
      eps,
      delta,
      valid,
      rule=self,
      caps=Capacity(*map(plain, caps)),  # plain values: static arguments compare
      exponents=plain((acct.unit_exponent, acct.delta_unit_exponent)),  # by ==
    )
    spent, spent_delta, answered, refusals, last = leaves
    return (
      ok,
      sub,
      dataclasses.replace(
        acct,
        spent_units=spent,
        spent_delta_units=spent_delta,
        answered=answered,
        refusals=refusals,
        last_answered=last,
        key=key,
        log=logged(acct, ok, event),
      ),
    )

  def check_static_cost(
    self, acct: Accountant, caps: Capacity, eps: Scalar, delta: Scalar
  ) -> None:
    """Raises BudgetExceededError for a static cost that no state could answer."""
    if not (_checks.is_concrete(eps) and _checks.is_concrete(delta)):
      return
    ve, ce = budget.charge_host(eps, acct.unit_exponent, positive=True)
    vd, cd = budget.charge_host(delta, acct.delta_unit_exponent, positive=False)
    e64 = np.asarray(eps, np.float64)
    with np.errstate(over="ignore"):  # past float32's range: over budget, below
      underflows = np.any(e64.astype(np.float32) == 0)
    if not ve and np.all(e64 > 0) and underflows:
      raise BudgetExceededError(
        f"one release's cost {e64} (its {self.name} cost "
        f"for groups of {acct.group_size}) is positive but underflows float32, the "
        "precision of the budget's arithmetic: it cannot be charged, so the release "
        "would always be refused. Use a larger eps; no data was read."
      )
    if type(ce) is int and type(caps.eps_limit) is int:  # a scalar cost: no numpy
      over = ce > caps.eps_limit
    else:
      over = np.all(ce > np.asarray(caps.eps_limit))
    if not (ve and vd) or over or cd > caps.delta_limit:
      raise BudgetExceededError(
        f"one release costs {self.describe_cost(eps, delta)} for groups of "
        f"{acct.group_size}, more than {self.describe_limit(acct)}. "
        "Lower eps or raise the budget; no data was read."
      )

  def describe_cost(self, eps: Scalar, delta: Scalar) -> str:
    return f"(eps={float(eps):g}, delta={float(delta):g})"

  def describe_limit(self, acct: Accountant) -> str:
    return f"the whole budget (eps={acct.eps_budget:g}, delta={acct.delta_budget:g})"

  # ----------------------------------------------------------- reporting
  def spent_eps(self, acct: Accountant) -> jax.Array:
    return budget.in_cost(acct.spent_units, acct.unit_exponent)

  def spent_delta(self, acct: Accountant) -> jax.Array:
    return budget.in_cost(acct.spent_delta_units, acct.delta_unit_exponent)

  def guarantee(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    return self.spent_eps(acct), self.spent_delta(acct)

  def remaining(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    caps = self.capacity(acct)
    left = budget.in_cost(
      jnp.asarray(caps.eps_capacity) - acct.spent_units, acct.unit_exponent
    )
    return left, budget.in_cost(
      caps.delta_capacity - acct.spent_delta_units, acct.delta_unit_exponent
    )

  # ----------------------------------------------------------- planning
  def plan_row(
    self, eps: Scalar, delta: Scalar, refused: bool, event: tuple
  ) -> planning.PlannedRelease:
    """One :class:`~jaxdp.PlannedRelease` in this rule's currency."""
    return planning.PlannedRelease(float(eps), float(delta), refused, event=event)

  def plan_totals(
    self, acct: Accountant, rows: list, spent: int, spent_delta: int
  ) -> tuple[float, float]:
    """The plan's ``(eps, delta)`` from the units spent after its last release."""
    e = budget.to_float(spent - int(acct.spent_units), acct.unit_exponent)
    d = budget.to_float(spent_delta - int(acct.spent_delta_units), acct.delta_unit_exponent)
    return e, d


_REBUILD = (
  "build the accountant with Accountant.create(..., composition=Rule(...)); a rule "
  "changed after binding (dataclasses.replace on acct.rule or on the accountant's "
  "budgets) is refused"
)


def bound_rule(acct: Accountant) -> CompositionRule:
  """``acct``'s rule, once checked to be the one :meth:`UnitRule.bind` made for
  ``acct``: bound to its ``(eps_budget, delta_budget)``, with an unchanged
  configuration digest, ``acct``'s unit exponents and a ``spent_units`` of its
  ``state_shape()``. Every release reads the rule through here. The check is on
  static fields and shapes only: at trace time, once per rule (cached).

  Raises:
    ValueError: naming what does not match and how to build a valid accountant.
  """
  rule = acct.rule
  _check_bound(
    rule,
    acct.eps_budget,
    acct.delta_budget,
    (acct.unit_exponent, acct.delta_unit_exponent),
    tuple(jnp.shape(acct.spent_units)),
  )
  return rule


@value_cache(maxsize=256)
def _check_bound(rule, eps_budget, delta_budget, exponents, shape):
  """Raises unless ``rule`` was bound to these budgets and is unchanged since."""
  name = type(rule).__name__
  bound = getattr(rule, "bound", ())
  if not (isinstance(bound, tuple) and len(bound) == 3):
    raise ValueError(
      f"the accountant's rule {name} was never bound to a budget: {_REBUILD}."
    )
  if bound[:2] != (eps_budget, delta_budget):
    raise ValueError(
      f"the accountant's rule {name} was bound to (eps={bound[0]:g}, delta="
      f"{bound[1]:g}), not to the accountant's (eps_budget={eps_budget:g}, "
      f"delta_budget={delta_budget:g}): {_REBUILD}."
    )
  if rule.digest() != bound[2]:
    raise ValueError(
      f"the accountant's rule {name} was changed after it was bound (its "
      f"configuration no longer matches the digest bind recorded): {_REBUILD}."
    )
  if tuple(rule.unit_exponents(eps_budget, delta_budget)) != exponents:
    raise ValueError(
      f"the accountant's unit exponents {exponents} are not those its rule {name} "
      f"fixes for its budgets: {_REBUILD}."
    )
  if shape != tuple(rule.state_shape()):
    raise ValueError(
      f"the accountant's spent_units has shape {shape}, not its rule {name}'s "
      f"state shape {tuple(rule.state_shape())}: {_REBUILD}."
    )


@functools.partial(jax.jit, static_argnames=("rule", "caps", "exponents"))
def _charge(leaves, eps, delta, valid, *, rule, caps, exponents):
  """The charge on the accountant's counters (one compiled call when eager); nothing
  is charged unless ``valid``."""
  spent, spent_delta, answered, refusals, last = leaves
  ve, ce = budget.charge(eps, exponents[0], positive=True)
  vd, cd = budget.charge(delta, exponents[1], positive=False)
  ok = valid & ve & vd & rule.allows(caps, spent, spent_delta, answered, ce, cd)
  return ok, (
    jnp.where(ok, rule.add(caps, spent, ce), spent),
    jnp.where(ok, budget.add_units(spent_delta, cd), spent_delta),
    budget.add_units(answered, ok.astype(jnp.int32)),  # counters saturate, never wrap
    budget.add_units(refusals, (~ok).astype(jnp.int32)),
    jnp.broadcast_to(ok, jnp.shape(last)),
  )
