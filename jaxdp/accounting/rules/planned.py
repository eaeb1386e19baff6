"""Enforcing a fixed plan at its tightest figure."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.accounting import budget, planning
from jaxdp.accounting.history import logged
from jaxdp.accounting.rules.base import UnitRule
from jaxdp.composition.events import events_epsilon
from jaxdp.typing import ArrayLike, KeyArray, Scalar

if TYPE_CHECKING:  # the accountant imports the rules
  from jaxdp.accounting.accountant import Accountant
  from jaxdp.mechanisms import Mechanism

__all__ = ["PlannedComposition"]

# Which planned kinds a release of each kind may use (it must be dominated).
FITS = {
  "laplace": ("laplace", "pure"),
  "pure": ("pure",),
  "gaussian": ("gaussian",),
  "zcdp": ("zcdp",),
}


@dataclasses.dataclass(frozen=True)
class PlannedComposition(UnitRule):
  """The i-th release is answered iff it is dominated by the plan's i-th row.

  The plan (:func:`jaxdp.plan` of the query function, against any accountant) is
  enforced at its tightest figure, ``plan.epsilon(delta_budget)`` (PLD,
  Kairouz-Oh-Viswanath, ...), which must be at most ``eps_budget``. The i-th
  release (answered or refused) is answered iff the plan answered its i-th release
  and the mechanism is dominated by the planned one: the same kind (Laplace,
  Gaussian, zCDP) or a Laplace / pure release on a pure row, with eps at most the
  planned eps (sigma / sensitivity at least the planned one, rho at most). Valid
  because the parameters are fixed before the run and a dominated mechanism's
  privacy profile lies below the planned one's (Laplace: delta(eps') = 1 -
  e^((eps' - eps) / 2) grows with eps; Gaussian: more noise is postprocessing);
  composition preserves that order (Dong, Roth & Su 2022, f-DP composition).
  Anything else, or more releases than planned, is refused.

  Args:
    plan: the :class:`~jaxdp.Plan` to enforce.
  """

  plan: object = dataclasses.field(default=None, compare=False, repr=False)
  planned: tuple = ()  # the plan's events, () for a refused row (set by bind)
  name = "planned"

  def configure(self, eps_budget: float, delta_budget: float) -> UnitRule:
    plan = self.plan
    if not isinstance(plan, planning.Plan):
      raise _checks.ArgTypeError(
        f"plan must be a jaxdp.Plan (from jaxdp.plan); got {type(plan).__name__}."
      )
    rows = [() if r.refused else r.event for r in plan.releases]
    if any(not r.refused and not r.event for r in plan.releases):
      raise ValueError(
        "the plan has releases whose mechanism is unknown (planned with "
        "traced costs); plan with static eps."
      )
    eps = planned_epsilon(tuple(rows), delta_budget)
    if eps > eps_budget:
      raise ValueError(
        f"the plan needs eps = {eps:.6g} at delta = {delta_budget:g} "
        f"(its tightest figure), more than eps_budget = {eps_budget:g}."
      )
    return dataclasses.replace(self, plan=None, planned=tuple(rows))

  def cost(self, mech: Mechanism, group_size: int) -> tuple[Scalar, Scalar]:
    return 0.0, 0.0  # judged by its event against the plan's row

  def spend(
    self, acct: Accountant, eps: Scalar, delta: Scalar, valid: ArrayLike, event: tuple
  ) -> tuple[jax.Array, KeyArray, Accountant]:
    """The i-th release fits the plan's i-th row and has ``valid`` parameters, or is
    refused."""
    if not event:
      raise ValueError(
        "composition='planned' needs mechanisms with a known event "
        "(Laplace, Gaussian, discrete Gaussian, pure eps-DP)."
      )
    if planning.current() is not None:
      raise ValueError(
        "plan() with a composition='planned' accountant: plan against "
        "the accountant the plan was made with."
      )
    kind, value = event
    limits = np.array(
      [r[1] if r and r[0] in FITS[kind] else np.nan for r in self.planned] + [np.nan],
      np.float64,
    )
    index = jnp.minimum(acct.answered + acct.refusals, len(self.planned))
    more = kind == "gaussian"  # sigma must be at least the planned one; else at most
    if _checks.is_concrete(value):  # compared in float64, row by row, now
      v = float(value)
      fits = jnp.asarray((v >= limits) if more else (v <= limits))[index]
    else:  # float32: the budget's 2**-22 slack forgives the rounding of a decimal
      # eps (see jaxdp.accounting.budget); the limits are then rounded toward refusing
      slack = 1 + 2.0**-budget.SLACK_BITS
      limits = limits / slack if more else limits * slack
      limit32 = limits.astype(np.float32)
      limit32 = np.where(
        limit32 < limits if more else limit32 > limits,
        np.nextafter(limit32, np.float32(np.inf if more else 0)),
        limit32,
      )
      value = jnp.asarray(value, jnp.float32)
      limit = jnp.asarray(limit32)[index]
      fits = (
        (value >= limit if more else value <= limit) & jnp.isfinite(value) & (value > 0)
      )
    key, sub = jax.random.split(acct.key)
    ok = jnp.broadcast_to(fits & valid, jnp.shape(acct.last_answered))
    return (
      ok,
      sub,
      dataclasses.replace(
        acct,
        key=key,
        log=logged(acct, ok, event),
        answered=acct.answered + ok.astype(jnp.int32),
        refusals=acct.refusals + (~ok).astype(jnp.int32),
        last_answered=ok,
      ),
    )

  def guarantee(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    """The plan's figure and ``delta_budget`` once something was answered."""
    f = jnp.result_type(float)
    eps = planned_epsilon(self.planned, acct.delta_budget)
    return (
      jnp.where(acct.answered > 0, eps, 0.0).astype(f),
      jnp.where(acct.answered > 0, acct.delta_budget, 0.0).astype(f),
    )

  def spent_eps(self, acct: Accountant) -> jax.Array:
    return self.guarantee(acct)[0]

  def spent_delta(self, acct: Accountant) -> jax.Array:
    return self.guarantee(acct)[1]

  def remaining(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    """The eps of the plan's next row when it is a Laplace or pure row, else 0."""
    f = jnp.result_type(float)
    rows = [r[1] if r and r[0] in ("laplace", "pure") else 0.0 for r in self.planned]
    index = jnp.minimum(acct.answered + acct.refusals, len(self.planned))
    return (jnp.asarray(rows + [0.0], f)[index], jnp.zeros(jnp.shape(acct.answered), f))


@functools.lru_cache(maxsize=64)
def planned_epsilon(rows, delta):
  """The tightest figure of a plan's rows (() for a refused row) at ``delta``."""
  return events_epsilon([r for r in rows if r], delta)
