"""Privacy events and the tightest figure of a fixed sequence of them.

An event is ``(kind, value)``: ``("laplace", eps)``, ``("pure", eps)``,
``("gaussian", sigma / sensitivity)`` or ``("zcdp", rho)`` (what
:meth:`jaxdp.Mechanism.event` returns). :func:`events_epsilon` takes the smallest of
the composition bounds valid for a sequence fixed before the run; :func:`to_dp_event`
exports one to dp_accounting.

References:
  Kairouz, Oh & Viswanath (2015); Canonne, Kamath & Steinke (2020); Zhu, Dong &
  Wang (2022).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from jaxdp import _checks
from jaxdp.composition import pld, renyi
from jaxdp.composition.optimal import optimal_composition_epsilon
from jaxdp.composition.zcdp import zcdp_epsilon

__all__ = [
  "check_event",
  "events_epsilon",
  "to_dp_event",
  "rdp_curve",
  "composed_pld",
  "PLAN_ORDERS",
  "METHODS",
  "PLD_GRID",
]


# Orders for the Rényi conversion of a fixed plan (any order is valid, so the best of
# a wide grid is): 1.01 to 10^4.
PLAN_ORDERS = tuple(1.0 + np.geomspace(0.01, 1e4, 300))
METHODS = ("basic", "kov", "zcdp", "rdp", "pld")
PLD_GRID = 1e-4  # loss grid of the PLD figure
PLD_MAX_POINTS = 1 << 22  # coarser grid beyond (the error bound grows with it)
KINDS = ("laplace", "pure", "gaussian", "zcdp")


def check_event(event: Any, name: str) -> tuple:
  """``event`` as ``(kind, float value)``, checked by allowlist: a kind of
  :data:`KINDS` and a finite value, positive (an eps or a noise multiplier) or, for
  ``"zcdp"``, non-negative (a rho). NaN, infinities, negative figures, booleans and
  other kinds are refused: every bound of :func:`events_epsilon` assumes them.

  Raises:
    ValueError: naming ``name`` and the bad event.
  """
  ok = isinstance(event, tuple) and len(event) == 2 and isinstance(event[0], str)
  ok = ok and event[0] in KINDS
  value = event[1] if ok else None
  ok = ok and _checks.is_real(value) and math.isfinite(value)
  ok = ok and (value >= 0 if event[0] == "zcdp" else value > 0)
  if not ok:
    raise ValueError(
      f"{name} must be a mechanism event (kind, value) with kind one of {KINDS} and a "
      f"finite value, > 0 (>= 0 for zcdp); got {event!r}. Build plans with "
      "jaxdp.plan, events with Mechanism.event."
    )
  return (event[0], float(value))


def events_epsilon(
  events: Sequence[tuple], delta: float, methods: Sequence[str] | None = None
) -> float:
  """The tightest eps for a fixed sequence of mechanism events at ``delta``.

  Events are ``(kind, value)``: ``("laplace", eps)``, ``("pure", eps)``,
  ``("gaussian", sigma / sensitivity)``, ``("zcdp", rho)`` (checked by
  :func:`check_event`). Each bound below is
  valid for a sequence fixed before the run, so their minimum is:

  * basic composition, sum of eps (pure events only);
  * the Kairouz-Oh-Viswanath optimum when all events are eps-DP for one eps;
  * zCDP: sum of rho_i (eps^2 / 2, 1 / (2 s^2), rho), converted (CKS);
  * Rényi: the summed curves (Laplace's own, randomized response's, alpha rho) at
    300 orders from 1.01 to 10^4, converted at the best one (CKS);
  * the PLD (without zCDP events): pessimistic grid h = 1e-4 (coarser if the
    composed support would pass 2^22 points), so the figure is above the exact
    one by at most (number of releases) x h.

  ``methods`` restricts the bounds to a subset of ``("basic", "kov", "zcdp", "rdp",
  "pld")`` (default: all).
  """
  delta = _checks.check_delta(delta, "delta")
  use = set(METHODS if methods is None else methods)
  if not use <= set(METHODS):
    raise ValueError(f"methods must be a subset of {METHODS}; got {methods!r}.")
  if not events:
    return 0.0
  events = [check_event(e, f"event #{i}") for i, e in enumerate(events)]
  kinds = {k for k, _ in events}
  pure = [v for k, v in events if k in ("laplace", "pure")]
  all_pure = len(pure) == len(events)
  best = sum(pure) if all_pure and "basic" in use else math.inf
  if not delta > 0:
    return best
  if all_pure and len(set(pure)) == 1 and "kov" in use:
    best = min(best, optimal_composition_epsilon(pure[0], len(pure), delta))
  if "zcdp" in use:
    rho = sum(
      v * v / 2 if k in ("laplace", "pure") else (1 / (2 * v * v) if k == "gaussian" else v)
      for k, v in events
    )
    best = min(best, zcdp_epsilon(rho, delta))
  if "rdp" in use:
    curve = sum(rdp_curve(k, v) for k, v in events)
    best = min(best, renyi.rdp_epsilon(curve, PLAN_ORDERS, delta))
  if "zcdp" not in kinds and "pld" in use:
    best = min(best, composed_pld(events).epsilon(delta))
  return best


def to_dp_event(events: Sequence[tuple], pure_as: str = "randomized_response") -> Any:
  """Events ``(kind, value)`` as one dp_accounting ``ComposedDpEvent``.

  Laplace -> ``LaplaceDpEvent(1 / eps)`` (l_1 sensitivity 1 after scaling);
  Gaussian -> ``GaussianDpEvent(sigma / sensitivity)``; discrete Gaussian ->
  ``ZCDpEvent(rho)``; any other pure eps-DP mechanism (K-norm, exact poset noise) has
  no exact event: its worst case is two-bucket randomized response,
  ``RandomizedResponseDpEvent(2 / (1 + e^eps), 2)``, which dp_accounting evaluates
  under ``NeighboringRelation.REPLACE_ONE`` (the same two-point dominating pair; its
  Laplace events need add/remove, so a plan mixing both needs two accountants), or
  with ``pure_as="zcdp"`` ``ZCDpEvent(eps^2 / 2)`` (RdpAccountant; looser). Needs the
  optional ``dp-accounting`` package (``pip install jaxdp[accounting]``).
  """
  import dp_accounting  # optional: only this export needs it

  if pure_as not in ("randomized_response", "zcdp"):
    raise ValueError(f"pure_as must be 'randomized_response' or 'zcdp'; got {pure_as!r}.")
  out = []
  for i, e in enumerate(events):
    kind, value = check_event(e, f"event #{i}")
    if kind == "laplace":
      out.append(dp_accounting.LaplaceDpEvent(1.0 / value))
    elif kind == "gaussian":
      out.append(dp_accounting.GaussianDpEvent(value))
    elif kind == "zcdp":
      out.append(dp_accounting.ZCDpEvent(value))
    elif pure_as == "zcdp":
      out.append(dp_accounting.ZCDpEvent(value * value / 2))
    else:
      out.append(dp_accounting.RandomizedResponseDpEvent(2.0 / (1.0 + math.exp(value)), 2))
  return dp_accounting.ComposedDpEvent(out)


def rdp_curve(kind: str, value: float) -> np.ndarray:
  """The Rényi curve of one event at :data:`PLAN_ORDERS`."""
  if kind == "laplace":
    return renyi.laplace_rdp(value, PLAN_ORDERS)
  if kind == "pure":
    return renyi.pure_rdp(value, PLAN_ORDERS)
  rho = 1 / (2 * value * value) if kind == "gaussian" else value
  return renyi.gaussian_rdp(rho, PLAN_ORDERS)


def composed_pld(events: Sequence[tuple]) -> pld.PLD:
  """The composed PLD of pure, Laplace and Gaussian events (identical ones grouped)."""
  groups = {}
  for e in events:
    groups[e] = groups.get(e, 0) + 1
  span = sum(
    c * (2 * v if k in ("laplace", "pure") else 2 * pld.TAIL_SIGMAS / v)
    for (k, v), c in groups.items()
  )
  h = max(PLD_GRID, span / PLD_MAX_POINTS)
  make = {"laplace": pld.laplace_pld, "pure": pld.pure_pld, "gaussian": pld.gaussian_pld}
  parts = [make[k](v, h) for k, v in groups]
  return pld.compose(parts, list(groups.values()))
