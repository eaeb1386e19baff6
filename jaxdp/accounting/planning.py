"""Planning: what a query function would spend, computed without reading data.

:func:`plan` traces a query function with its data arguments abstract, applies the
accountant's refusal rule to every release in the order they run (the same integer
arithmetic as :func:`jaxdp.release`), and rejects any release whose eps or delta is
computed from the data, that runs or not depending on the data (inside a ``cond``
branch or ``while_loop`` decided by it), or that starts from an accountant state
computed from the data (:mod:`jaxdp.accounting.dependence`): the refusal would then disclose
the data.

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
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from jaxdp import _checks
from jaxdp.accounting import budget, dependence, numbering
from jaxdp.accounting.errors import DataDependentCostError
from jaxdp.composition.events import events_epsilon, to_dp_event
from jaxdp.composition.zcdp import zcdp_epsilon

if TYPE_CHECKING:  # the accountant imports this module
  from jaxdp.accounting.accountant import Accountant

__all__ = [
  "plan",
  "Plan",
  "PlannedRelease",
  "DataDependentCostError",
  "spend_host",
  "events_epsilon",
]


class PlannedRelease(NamedTuple):
  """One release of a :class:`Plan`: its cost and whether it would be refused.

  The cost is in the accountant's currency: ``(eps, delta)``; ``rho`` under zCDP
  (``eps`` nan); ``rdp`` (one value per order) under the Rényi filter. ``event`` is
  what the mechanism is (:meth:`jaxdp.Mechanism.event`), whatever the accountant.
  """

  eps: float
  delta: float
  refused: bool
  rho: float = math.nan
  rdp: tuple = ()
  event: tuple = ()


class Plan(NamedTuple):
  """What a query function would spend: totals and one row per release (under zCDP
  or the Rényi filter, ``eps`` converts the planned spend at the accountant's
  ``delta_budget``)."""

  eps: float
  delta: float
  releases: tuple  # of PlannedRelease

  def epsilon(self, delta: float) -> float:
    """The tightest eps jaxdp can prove for this fixed plan at ``delta``.

    The plan's mechanisms and parameters are known before the run, so
    fixed-sequence composition theorems apply (the queries may still be adaptive):
    this is the smallest of basic composition (when the deltas fit), the zCDP and
    Rényi conversions of the summed curves (best order), the Kairouz-Oh-Viswanath
    optimum when every release is eps-DP for one eps (100 x 0.1 at 1e-6: 4.7746) and
    the privacy-loss distribution of the sequence (:mod:`jaxdp.composition.pld`; 100
    Laplace(0.1) at 1e-6: 4.6930, dp_accounting's PLD 4.6927). Refused releases cost
    nothing.
    See :func:`jaxdp.composition.events.events_epsilon`.

    References:
      Kairouz, Oh & Viswanath (2015); Canonne, Kamath & Steinke (2020); Zhu, Dong &
      Wang (2022).
    """
    delta = _checks.check_delta(delta, "delta")
    rows = [r for r in self.releases if not r.refused]
    if rows and all(r.event for r in rows):
      return events_epsilon([r.event for r in rows], delta)
    return _fallback_epsilon(rows, delta)

  def to_dp_event(self, pure_as: str = "randomized_response") -> Any:
    """The answered releases as one dp_accounting ``ComposedDpEvent``
    (:func:`to_dp_event`).

    Raises:
      ImportError: dp_accounting is not installed (``pip install jaxdp[accounting]``).
      ValueError: a release's mechanism is unknown (planned with traced costs).
    """
    events = []
    for i, r in enumerate(self.releases):
      if r.refused:
        continue
      if not r.event:
        raise ValueError(f"release #{i} has no known mechanism (a traced cost).")
      events.append(r.event)
    return to_dp_event(events, pure_as)

  @property
  def refused(self) -> tuple:
    return tuple(i for i, r in enumerate(self.releases) if r.refused)


def _fallback_epsilon(rows, delta):
  """Plans recorded without events: basic composition, or the zCDP conversion."""
  if not rows:
    return 0.0
  if any(not math.isnan(r.rho) for r in rows):
    return zcdp_epsilon(sum(r.rho for r in rows), delta) if delta > 0 else math.inf
  used = sum(r.delta for r in rows)
  return sum(r.eps for r in rows) if used <= delta else math.inf


@dataclasses.dataclass
class _PlanState:
  acct: object  # the Accountant planned against
  raw: list  # per release, in tracing order: (eps, delta, event); None: a traced cost
  mechanisms: dict = dataclasses.field(default_factory=dict)  # index -> what it noises


_PLAN: contextvars.ContextVar[_PlanState | None] = contextvars.ContextVar(
  "jaxdp_plan", default=None
)


def current() -> _PlanState | None:
  """The plan being traced in this context, if any."""
  return _PLAN.get()


def plan(fn: Callable, acct: Accountant, *args, **kwargs) -> Plan:
  """Traces ``fn(acct, *args, **kwargs)`` abstractly and reports what it would spend.

  No data is read: arrays in ``args`` and ``kwargs`` are replaced by their shapes and
  dtypes. The refusal rule is applied to the releases in the order they run, as
  :func:`release` would (the same integer arithmetic). Releases inside jitted helpers
  are seen (they are traced again), and a ``lax.scan``'s once per step.

  Control flow: whether a release inside a ``lax.cond``/``lax.switch`` branch or a
  ``lax.while_loop`` (a ``fori_loop`` with traced bounds) runs depends on the branch
  index or the loop predicate, and so do the spend, the counters and the key that
  every later release starts from. A release under an index or predicate computed
  from the data is rejected (Lemma 2.6: a refusal may depend on the privacy
  parameters only), unless every branch makes the same releases (same mechanisms and
  parameters, in the same order, from the same accountant state): the cond then
  leaves the accountant in the same state, key included, whichever branch runs.
  Control flow on Python values is resolved while tracing. Control flow on earlier
  released outputs is postprocessing and allowed; but if its branches release
  differently, or a loop with releases has a traced trip count, the releases are no
  fixed sequence and plan cannot list them (ValueError).

  :func:`release` under ``jax.jit`` makes no such check. Inside jit every value is a
  tracer: a release could learn from JAX's internals that it is being traced for a
  cond branch or a loop body, but not whether the predicate comes from the data, from
  released outputs (the basis of adaptive queries) or from public values, so it
  would have to refuse them all. Check a query function with plan before running it,
  or give untrusted analysts a :class:`jaxdp.Session`.

  What plan cannot see: the arguments' shapes and dtypes are public to it (JAX traces
  with concrete shapes, so a query may branch on the number of rows: when that
  number is private, use a :class:`jaxdp.Session`, whose row functions never see
  it), and Python code that behaves differently when it is not traced (a ``try``
  around ``float(x.sum())``, data passed as Python lists). Run a planned query as it
  was planned: under ``jax.jit``, with its data as array arguments, so the program
  that runs is the one plan traced.

  Args:
    fn: the query function; its first argument is the accountant.
    acct: the accountant to plan against (not consumed).
    *args: the data and other arguments; every array among them is treated as data.
    **kwargs: likewise.

  Returns:
    A :class:`Plan` with the totals it would spend and one :class:`PlannedRelease`
    per release, in the order they run.

  Raises:
    DataDependentCostError: a release's eps or delta depends on the data arguments
      (or another parameter its refusal checks, such as a sensitivity), or whether
      it runs does (an enclosing cond/switch index or while_loop
      predicate), or the accountant state it starts from does (or that of the
      accountant ``fn`` returns): its refusal, or what the accountant reports, would
      disclose something about the data. The message names the release (its index
      in tracing order) and the data argument. Costs and control flow computed from
      earlier *released outputs* are fine (postprocessing).
    ValueError: a release's cost is traced (not a Python number), or the releases are
      no fixed sequence (see above), so the plan cannot be computed.
  """
  leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
  is_array = [hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves]
  abstract = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x, a in zip(leaves, is_array) if a]
  names = _argument_names(args, kwargs)

  def run(*arrays):
    it = iter(arrays)
    full = [next(it) if a else x for x, a in zip(leaves, is_array)]
    a, k = jax.tree_util.tree_unflatten(treedef, full)
    return _mark_returned(fn(acct, *a, **k), type(acct))

  if not all(
    _checks.is_concrete(v)
    for v in (acct.spent_units, acct.spent_delta_units, acct.answered)
  ):
    raise ValueError(
      "plan() needs an accountant whose state is known (not traced): "
      "plan before the run, with the accountant you will pass to it."
    )
  state = _PlanState(acct, [])
  token = _PLAN.set(state)
  try:
    # disable_jit: jitted helpers inside fn are traced again (a compilation cache
    # hit would otherwise skip their releases).
    with jax.disable_jit():
      closed = jax.make_jaxpr(run)(*abstract)
  finally:
    _PLAN.reset(token)
  found = dependence.analyse(closed, lambda i: _release_key(i, state))
  _raise_if_data_dependent(found, names)
  for i, where in sorted(found.unplanned.items()):
    raise ValueError(
      f"release #{i} runs inside {_UNPLANNED.get(where, _unknown(where))}: the "
      "releases are no fixed sequence, so plan() cannot list them. Make every "
      "branch release the same mechanisms in the same order, or loop with lax.scan "
      "or a fori_loop with Python int bounds."
    )
  traced = [i for i in found.order if state.raw[i] is None]
  if traced:
    raise ValueError(
      f"plan() needs static (Python number) costs; release #{traced[0]}'s "
      "eps or delta is traced. Pass eps as a Python float to plan."
    )
  rows, spent, spent_delta = _rows(acct, [state.raw[i] for i in found.order])
  return Plan(*acct.rule.plan_totals(acct, rows, spent, spent_delta), tuple(rows))


_WHERE = {
  "cond": "a lax.cond or lax.switch branch whose index depends on the data",
  "while": "a lax.while_loop (or a fori_loop with traced bounds) whose "
  "predicate depends on the data",
}
_LATER = "known only at run time (from released outputs or the accountant's state)"
_UNPLANNED = {
  "cond": "a lax.cond or lax.switch whose branches release differently, "
  f"with an index {_LATER}",
  "while": "a lax.while_loop (or a fori_loop with traced bounds) with a "
  f"trip count {_LATER}",
}


def _unknown(name):
  return f"a {name!r} primitive, which jaxdp does not analyse"


def _raise_if_data_dependent(found, names):
  """Raises DataDependentCostError for the first release the data can reach."""

  def which(inputs):
    return ", ".join(dict.fromkeys(names[j] for j in sorted(inputs)))

  for i, kinds in sorted(found.found.items()):
    if "cost" in kinds:
      raise DataDependentCostError(
        f"release #{i} has an eps, delta or other mechanism parameter (a "
        f"sensitivity) computed from the data ({which(kinds['cost'][0])}): whether "
        "it is refused would then disclose the data. Choose privacy parameters from "
        "public values or from earlier released outputs only."
      )
    if "control" in kinds:
      inputs, where = kinds["control"]
      where = _WHERE.get(where, _unknown(where) + ", fed by the data")
      raise DataDependentCostError(
        f"release #{i} runs inside {where} ({which(inputs)}): "
        "whether it runs, and so what the accountant spends and refuses "
        "afterwards, would disclose the data. Branch and loop on public values or "
        "on earlier released outputs only, or make every branch release the same "
        "mechanisms in the same order."
      )
    if "state" in kinds:
      raise DataDependentCostError(
        f"release #{i} starts from an accountant state (spend, counters, key) "
        f"computed from the data ({which(kinds['state'][0])}): whether it is "
        "refused would disclose the data. Pass each release the accountant the "
        "previous one returned, never one chosen by the data (jnp.where, a "
        "vmapped cond)."
      )
  if found.final:
    raise DataDependentCostError(
      "the accountant the query function returns has a state (spend, counters, "
      f"key) computed from the data ({which(found.final)}): what it reports, and "
      "whether later releases are refused, would disclose the data. Return the "
      "accountant the last release returned, never one chosen by the data."
    )


def _argument_names(args, kwargs):
  """Names of the array leaves of (args, kwargs), in flattening order."""
  names = []
  for label, tree in [(f"argument {i}", a) for i, a in enumerate(args)] + [
    (f"argument {k!r}", v) for k, v in sorted(kwargs.items())
  ]:
    names += [label] * sum(
      hasattr(x, "shape") and hasattr(x, "dtype") for x in jax.tree_util.tree_leaves(tree)
    )
  return names


def record(state: _PlanState, eps, delta, event=(), acct=None, valid=True):
  """Notes one release while planning and tags it for the dependence analysis.

  The refusal rule is applied after tracing, to the releases in the order they run.
  A traced cost is tagged, so is a traced ``valid`` (the parameter check, which
  refuses too), and so is the state of ``acct``, the accountant the release starts
  from (the tag also marks where it runs). ``event``: :meth:`~jaxdp.Mechanism.event`.

  Returns:
    ``(eps, delta, acct, valid)``, tagged.
  """
  index = len(state.raw)
  if _checks.is_concrete(eps) and _checks.is_concrete(delta):
    state.raw.append((eps, delta, (event[0], float(event[1])) if event else ()))
  else:
    state.raw.append(None)
    eps, delta = dependence.mark_cost(eps, index), dependence.mark_cost(delta, index)
  if not _checks.is_concrete(valid):
    valid = dependence.mark_cost(valid, index)
  if acct is not None:
    leaves, treedef = jax.tree_util.tree_flatten(acct)
    acct = jax.tree_util.tree_unflatten(treedef, dependence.mark_state(leaves, index))
  return eps, delta, acct, valid


def _release_key(index, state):
  """What a recorded release charges and noises (equal keys: interchangeable)."""
  raw, mechanisms = state.raw[index], state.mechanisms.get(index)
  if raw is None or mechanisms is None:
    return ("traced", index)
  e = np.asarray(raw[0], np.float64)
  return (e.shape, tuple(e.ravel().tolist()), float(raw[1]), raw[2], mechanisms)


def note_mechanisms(inputs) -> None:
  """While planning: the last release's mechanisms (:func:`numbering.mechanism_key`)."""
  state = _PLAN.get()
  if state is not None and state.raw:
    state.mechanisms[len(state.raw) - 1] = numbering.mechanism_key(inputs)


def spend_host(rule, caps, exponents: tuple, counters: tuple, eps, delta):
  """The host twin of a release's charge (``jaxdp.accounting.rules.base._charge``)
  for a static cost, on Python and numpy integers: the same units
  (:func:`budget.charge_host`) and the rule's own ``allows`` and ``add``. Planning
  and a ledger's charge decide by it.

  Args:
    counters: ``(spent, spent_delta, answered)`` before the release.

  Returns:
    ``(answered, counters after it)`` (unchanged when refused).
  """
  spent, spent_delta, answered = counters
  ve, ce = budget.charge_host(eps, exponents[0], positive=True)
  vd, cd = budget.charge_host(delta, exponents[1], positive=False)
  if not (ve and vd and rule.allows(caps, spent, spent_delta, answered, ce, cd)):
    return False, counters
  return True, (rule.add(caps, spent, ce), budget.add_units(spent_delta, cd), answered + 1)


def _rows(acct, releases):
  """The refusal rule applied to ``(eps, delta, event)`` in the order they run.

  Returns:
    ``(rows, spent units, spent delta units)`` after the last release.
  """
  spent, spent_delta, answered = (
    np.asarray(v, np.int64) if np.ndim(v) else int(v)
    for v in (acct.spent_units, acct.spent_delta_units, acct.answered)
  )
  rule, caps = acct.rule, acct.rule.capacity(acct)
  exponents = (acct.unit_exponent, acct.delta_unit_exponent)
  rows = []
  for eps, delta, event in releases:
    ok, (spent, spent_delta, answered) = spend_host(
      rule, caps, exponents, (spent, spent_delta, answered), eps, delta
    )
    rows.append(rule.plan_row(eps, delta, not ok, event))
  return rows, spent, spent_delta


def _mark_returned(out, cls):
  """``out`` with the state of every accountant (a ``cls``) in it tagged."""

  def mark(x):
    if not isinstance(x, cls):
      return x
    leaves, treedef = jax.tree_util.tree_flatten(x)
    return jax.tree_util.tree_unflatten(
      treedef, dependence.mark_state(leaves, dependence.FINAL)
    )

  return jax.tree_util.tree_map(mark, out, is_leaf=lambda x: isinstance(x, cls))


def mark_if_planning(out):
  return out if _PLAN.get() is None else dependence.mark_released(out)
