"""Planning: what a query function would spend, computed without reading data.

:func:`plan` traces a query function with its data arguments abstract, applies the
accountant's refusal rule to every release in order (the same integer arithmetic as
:func:`jaxdp.release`), and rejects any release whose eps or delta is computed from
the data (:mod:`jaxdp._dependence`): the refusal would then disclose the data.

The plan in progress lives in a ``contextvars.ContextVar``, so plans nest and are
private to each thread.

References:
  C. Dwork, the chapter on postprocessing, composition and group privacy (Lemma 2.6:
  the refusal must depend only on the privacy parameters).
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
from typing import Callable, NamedTuple

import jax

from jaxdp import _budget, _checks, _dependence
from jaxdp.composition import optimal_composition_epsilon, zcdp_epsilon

__all__ = ["plan", "Plan", "PlannedRelease", "DataDependentCostError"]


class DataDependentCostError(ValueError):
  """A release's eps or delta is computed from the data: the refusal would leak."""


class PlannedRelease(NamedTuple):
  """One release of a :class:`Plan`: its cost and whether it would be refused.

  Under a zCDP accountant the cost is ``rho`` (``eps`` and ``delta`` are nan and 0).
  """
  eps: float
  delta: float
  refused: bool
  rho: float = math.nan


class Plan(NamedTuple):
  """What a query function would spend: totals and one row per release (under zCDP,
  ``eps`` converts the planned rho at the accountant's ``delta_budget``)."""
  eps: float
  delta: float
  releases: tuple  # of PlannedRelease

  def epsilon(self, delta: float) -> float:
    """The tightest eps jaxdp can prove for this fixed plan at ``delta``.

    The plan's parameters are known before the run, so fixed-sequence composition
    theorems apply (the queries may still be adaptive). Pure-DP plans: the smallest
    of basic composition, the zCDP conversion of sum eps_i^2 / 2 and, when every
    release has the same eps, the Kairouz-Oh-Viswanath optimum (for 100 x 0.1 at 1e-6:
    4.7746, against 10 basic). Plans with delta_i > 0: basic composition when the
    deltas fit in ``delta``, else inf. zCDP plans: the conversion of the planned rho.
    Refused releases cost nothing. (A privacy-loss-distribution figure for
    mechanism-specific plans is not implemented.)

    References:
      Kairouz, Oh & Viswanath (2015); Bun & Steinke (2016); Canonne, Kamath &
      Steinke (2020).
    """
    delta = _checks.check_delta(delta, "delta")
    rows = [r for r in self.releases if not r.refused]
    if not rows:
      return 0.0
    if any(not math.isnan(r.rho) for r in rows):
      return zcdp_epsilon(sum(r.rho for r in rows), delta) if delta > 0 else math.inf
    used = sum(r.delta for r in rows)
    eps = [r.eps for r in rows]
    if used > 0:
      return sum(eps) if used <= delta else math.inf
    best = sum(eps)
    if delta > 0:
      best = min(best, zcdp_epsilon(sum(e * e / 2 for e in eps), delta))
      if len(set(eps)) == 1:
        best = min(best, optimal_composition_epsilon(eps[0], len(eps), delta))
    return best

  @property
  def refused(self) -> tuple:
    return tuple(i for i, r in enumerate(self.releases) if r.refused)


@dataclasses.dataclass
class _PlanState:
  acct: object  # the Accountant planned against
  spent: int
  spent_delta: int
  answered: int
  rows: list
  traced: list  # indices of releases whose cost is traced


_PLAN: contextvars.ContextVar[_PlanState | None] = contextvars.ContextVar(
    "jaxdp_plan", default=None)


def current() -> _PlanState | None:
  """The plan being traced in this context, if any."""
  return _PLAN.get()


def plan(fn: Callable, acct, *args, **kwargs) -> Plan:
  """Traces ``fn(acct, *args, **kwargs)`` abstractly and reports what it would spend.

  No data is read: arrays in ``args`` and ``kwargs`` are replaced by their shapes and
  dtypes. The refusal rule is applied in order, as :func:`release` would (the same
  integer arithmetic). Releases inside jitted helpers are seen (they are traced
  again).

  Args:
    fn: the query function; its first argument is the accountant.
    acct: the accountant to plan against (not consumed).
    *args, **kwargs: the data and other arguments; every array among them is treated
      as data.

  Returns:
    A :class:`Plan` with the totals it would spend and one :class:`PlannedRelease`
    per release.

  Raises:
    DataDependentCostError: a release's eps or delta depends on the data arguments
      (its refusal would disclose something about the data). Costs computed from
      earlier *released outputs* are fine (postprocessing).
    ValueError: a release's cost is traced (not a Python number), so the plan
      cannot be computed.
  """
  leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
  is_array = [hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves]
  abstract = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x, a in zip(leaves, is_array)
              if a]
  names = _argument_names(args, kwargs)

  def run(*arrays):
    it = iter(arrays)
    full = [next(it) if a else x for x, a in zip(leaves, is_array)]
    a, k = jax.tree_util.tree_unflatten(treedef, full)
    return fn(acct, *a, **k)

  leaves = (acct.spent_units, acct.spent_delta_units, acct.answered)
  if not all(_checks.is_concrete(v) for v in leaves):
    raise ValueError("plan() needs an accountant whose state is known (not traced): "
                     "plan before the run, with the accountant you will pass to it.")
  state = _PlanState(acct, *(int(v) for v in leaves), [], [])
  token = _PLAN.set(state)
  try:
    # disable_jit: jitted helpers inside fn are traced again (a compilation cache
    # hit would otherwise skip their releases).
    with jax.disable_jit():
      closed = jax.make_jaxpr(run)(*abstract)
  finally:
    _PLAN.reset(token)
  for i, inputs in sorted(_dependence.cost_dependence(closed.jaxpr).items()):
    if inputs:
      which = ", ".join(names[j] for j in sorted(inputs))
      raise DataDependentCostError(
          f"release #{i} has an eps or delta computed from the data ({which}): "
          "whether it is refused would then disclose the data. Choose privacy "
          "parameters from public values or from earlier released outputs only.")
  if state.traced:
    raise ValueError(
        f"plan() needs static (Python number) costs; release #{state.traced[0]}'s "
        "eps or delta is traced. Pass eps as a Python float to plan.")
  e = _budget.to_float(state.spent - int(acct.spent_units), acct.unit_exponent)
  d = _budget.to_float(state.spent_delta - int(acct.spent_delta_units),
                       acct.delta_unit_exponent)
  if acct.composition == "zcdp":  # the planned rho, converted at delta_budget
    e, d = zcdp_epsilon(e, acct.delta_budget), (acct.delta_budget if e > 0 else 0.0)
  return Plan(e, d, tuple(state.rows))


def _argument_names(args, kwargs):
  """Names of the array leaves of (args, kwargs), in flattening order."""
  names = []
  for label, tree in [(f"argument {i}", a) for i, a in enumerate(args)] + \
      [(f"argument {k!r}", v) for k, v in sorted(kwargs.items())]:
    names += [label] * sum(hasattr(x, "shape") and hasattr(x, "dtype")
                           for x in jax.tree_util.tree_leaves(tree))
  return names


def record(state: _PlanState, eps, delta):
  """Applies the refusal rule to one release while planning; tags traced costs."""
  index = len(state.rows)
  if not (_checks.is_concrete(eps) and _checks.is_concrete(delta)):
    state.traced.append(index)
    state.rows.append(PlannedRelease(math.nan, math.nan, False))
    return _dependence.mark_cost(eps, index), _dependence.mark_cost(delta, index)
  acct = state.acct
  ve, ce = _budget.charge_host(eps, acct.unit_exponent, positive=True)
  vd, cd = _budget.charge_host(delta, acct.delta_unit_exponent, positive=False)
  ok = ve and vd and _budget.allowed(_budget.rule_of(acct), state.spent, state.spent_delta,
                              state.answered, ce, cd)
  if ok:
    state.spent += ce
    state.spent_delta += cd
    state.answered += 1
  if acct.composition == "zcdp":
    state.rows.append(PlannedRelease(math.nan, 0.0, not ok, rho=float(eps)))
  else:
    state.rows.append(PlannedRelease(float(eps), float(delta), not ok))
  return eps, delta


def mark_if_planning(out):
  return out if _PLAN.get() is None else _dependence.mark_released(out)


# ------------------------------------------------------------------ internals
