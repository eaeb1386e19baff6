"""Enforcing a fixed plan at its tightest figure."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.accounting import budget, planning
from jaxdp.accounting.history import logged
from jaxdp.accounting.rules.base import UnitRule
from jaxdp.composition.events import check_event, events_epsilon
from jaxdp.composition.gaussian import analytic_gaussian_delta
from jaxdp.composition.zcdp import zcdp_epsilon
from jaxdp.typing import ArrayLike, KeyArray, Scalar

if TYPE_CHECKING:  # the accountant imports the rules
  from jaxdp.accounting.accountant import Accountant
  from jaxdp.mechanisms import Mechanism

__all__ = ["PlannedComposition", "check_release", "checked_rows", "plan_events"]

# Which planned kinds a release of each kind may use (it must be dominated).
FITS = {
  "laplace": ("laplace", "pure"),
  "pure": ("pure",),
  "gaussian": ("gaussian",),
  "zcdp": ("zcdp",),
}


@dataclasses.dataclass(frozen=True, eq=False)
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

  Every row of the plan is checked by allowlist when it is bound
  (:func:`check_release`: a hand-made plan whose rows cancel or hold NaN is refused).

  Args:
    plan: the :class:`~jaxdp.Plan` to enforce.

  Raises:
    ValueError: when bound, a row out of range (named by its index) or a figure
      above ``eps_budget``.
  """

  plan: object = dataclasses.field(default=None, compare=False, repr=False)
  planned: tuple = ()  # the plan's events, () for a refused row (set by bind)
  name = "planned"

  def configure(self, eps_budget: float, delta_budget: float) -> UnitRule:
    rows = checked_rows(plan_events(self.plan), eps_budget, delta_budget)
    return dataclasses.replace(self, plan=None, planned=rows)

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
    index = _next_row(acct, len(self.planned))
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
        answered=budget.add_units(acct.answered, ok.astype(jnp.int32)),
        refusals=budget.add_units(acct.refusals, (~ok).astype(jnp.int32)),
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
    index = _next_row(acct, len(self.planned))
    return (jnp.asarray(rows + [0.0], f)[index], jnp.zeros(jnp.shape(acct.answered), f))


def _next_row(acct: Accountant, n: int) -> jax.Array:
  """The index of the next release, ``answered + refusals`` capped at ``n`` (summed
  after capping each: their int32 sum could wrap to a negative index)."""
  answered, refusals = (jnp.clip(c, 0, n) for c in (acct.answered, acct.refusals))
  return jnp.minimum(answered + refusals, n)


def plan_events(plan: object) -> tuple:
  """The events of a :class:`~jaxdp.Plan`'s rows (``()`` for a refused row), every
  row checked by allowlist (:func:`check_release`).

  Raises:
    ArgTypeError: ``plan`` is not a :class:`~jaxdp.Plan` of
      :class:`~jaxdp.PlannedRelease` rows.
    ValueError: a row (named by its index) or a total out of range.
  """
  if type(plan) is not planning.Plan or type(plan.releases) is not tuple:
    raise _checks.ArgTypeError(
      f"plan must be a jaxdp.Plan (from jaxdp.plan); got {type(plan).__name__}."
    )
  for name, v in (("eps", plan.eps), ("delta", plan.delta)):
    if not (_checks.is_real(v) and 0 <= v < math.inf and (name == "eps" or v < 1)):
      raise ValueError(
        f"the plan's total {name} must be finite and non-negative (delta below 1); "
        f"got {v!r}. Use the Plan jaxdp.plan returns."
      )
  return tuple(check_release(r, i) for i, r in enumerate(plan.releases))


def check_release(row: object, index: int) -> tuple:
  """A plan row's event, ``()`` if refused, after checking the row by allowlist.

  The row's figures are in one currency, the one of the accountant it was planned
  against: ``(eps, delta)``, ``rho`` or an ``rdp`` curve, each finite and
  non-negative, the others unset (nan, 0 or ``()``). Its event is one of
  :data:`~jaxdp.composition.events.KINDS` with a finite positive value, and the
  figures must be the event's: a pure eps its eps and delta 0; a Gaussian's (eps,
  delta) true of its noise multiplier (Balle & Wang 2018, Theorem 8); a zCDP
  mechanism's (eps, delta) implied by its rho (Canonne, Kamath & Steinke 2020,
  Proposition 12); rho the event's own (eps^2 / 2, 1 / (2 s^2), rho). The rule then
  charges the event only (the figures are never trusted).

  Raises:
    ValueError: naming the row and what is wrong.
  """
  where = f"plan release #{index}"
  if type(row) is not planning.PlannedRelease:
    raise _checks.ArgTypeError(
      f"{where} must be a jaxdp.PlannedRelease; got {type(row).__name__}."
    )
  if type(row.refused) not in (bool, np.bool_):
    raise _checks.ArgTypeError(
      f"{where}: refused must be True or False; got {row.refused!r}."
    )
  if row.refused:
    return ()
  if not row.event:
    raise ValueError(
      f"{where}'s mechanism is unknown (planned with traced costs); plan with static eps."
    )
  kind, value = check_event(row.event, f"{where}'s event")
  why = _figures_problem(row, kind, value)
  if why:
    raise ValueError(
      f"{where} has figures that do not match its event {row.event!r}: {why}; got "
      f"eps={row.eps!r}, delta={row.delta!r}, rho={row.rho!r}, rdp={row.rdp!r}. "
      "Use the Plan jaxdp.plan returns."
    )
  return (kind, value)


_TOL = 1e-9  # relative: float64 rounding of the same figure computed twice


def _close(a: float, b: float) -> bool:
  return abs(a - b) <= _TOL * max(abs(a), abs(b))


def _figures_problem(row, kind: str, value: float) -> str:
  """Why ``row``'s figures are not those of its event ``(kind, value)``; '' if they
  are. Comparisons are written so that NaN fails them."""
  eps, delta, rho, rdp = row.eps, row.delta, row.rho, row.rdp
  if not (all(map(_checks.is_real, (eps, delta, rho))) and type(rdp) is tuple):
    return "eps, delta and rho must be numbers and rdp a tuple"
  if not all(_checks.is_real(v) and 0 <= v < math.inf for v in rdp):
    return "an rdp value is not a finite non-negative number"
  if not (0 <= delta < 1):
    return "delta must be in [0, 1)"
  if rdp:  # the Rényi filter's currency
    ok = math.isnan(eps) and math.isnan(rho) and delta == 0
    return "" if ok else "an rdp row has eps and rho unset (nan) and delta 0"
  if not math.isnan(rho):  # zCDP's currency
    if not (math.isnan(eps) and delta == 0 and 0 <= rho < math.inf):
      return "a rho row has eps unset (nan), delta 0 and a finite rho >= 0"
    want = {"gaussian": 1 / (2 * value * value), "zcdp": value}.get(kind, value**2 / 2)
    return "" if _close(rho, want) else f"rho must be {want!r}"
  if not (0 < eps < math.inf):
    return "eps must be finite and positive"
  if kind in ("laplace", "pure"):
    return "" if delta == 0 and _close(eps, value) else f"eps must be {value!r}, delta 0"
  if not delta > 0:
    return "delta must be positive"
  if kind == "gaussian":
    bound = analytic_gaussian_delta(eps, value)
    return "" if bound <= delta * (1 + 1e-6) else f"its delta at eps is {bound:g}"
  bound = float(zcdp_epsilon(value, delta))
  return "" if bound <= eps * (1 + 1e-6) else f"its eps at delta is {bound:g}"


def checked_rows(rows: tuple, eps_budget: float, delta_budget: float) -> tuple:
  """``rows`` (a plan's events, ``()`` for a refused row) checked
  (:func:`~jaxdp.composition.events.check_event`) and fitting the budget at their
  tightest figure.

  Raises:
    ValueError: a bad row, or a figure above ``eps_budget`` (NaN refuses).
  """
  if type(rows) is not tuple:
    raise _checks.ArgTypeError(f"planned rows must be a tuple; got {type(rows).__name__}.")
  rows = tuple(
    r if type(r) is tuple and not r else check_event(r, f"plan release #{i}'s event")
    for i, r in enumerate(rows)
  )
  eps = planned_epsilon(rows, delta_budget)
  if not eps <= eps_budget:  # NaN refuses
    raise ValueError(
      f"the plan needs eps = {eps:.6g} at delta = {delta_budget:g} "
      f"(its tightest figure), more than eps_budget = {eps_budget:g}."
    )
  return rows


@value_cache(maxsize=64)
def planned_epsilon(rows, delta):
  """The tightest figure of a plan's rows (() for a refused row) at ``delta``."""
  return events_epsilon([r for r in rows if r], delta)
