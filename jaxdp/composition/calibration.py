"""Calibration: the noise for a target (eps, delta) over k releases, per composition.

Each helper answers "how much noise (or how small an eps per release) lets k releases
fit a total (eps, delta)" under one composition rule, so a user can compare what each
accountant would need before running anything. Host-side, Python floats.

* ``"basic"``: eps / k (pure mechanisms only; Dwork, Lemma 2.5).
* ``"zcdp"``: the rho budget of :func:`jaxdp.composition.zcdp_budget` split evenly (what
  ``Accountant(composition="zcdp")`` enforces).
* ``"rdp"``: the summed Rényi curve converted at the best of 300 orders (a fixed
  plan; the filter of ``composition="rdp"`` pays a union bound on top).
* ``"pld"``: the privacy-loss distribution of the k-fold composition (the tightest;
  what ``composition="planned"`` enforces). For Gaussian noise it is exact: k releases
  with sigma are one with sigma / sqrt(k), calibrated by Balle & Wang's condition.

References:
  B. Balle, Y.-X. Wang, ICML 2018 (analytic Gaussian); M. Bun, T. Steinke, TCC 2016;
  C. Canonne, G. Kamath, T. Steinke, NeurIPS 2020; Y. Zhu, J. Dong, Y.-X. Wang,
  AISTATS 2022.
"""

from __future__ import annotations

import math

from jaxdp import _checks
from jaxdp.composition.events import events_epsilon
from jaxdp.composition.gaussian import analytic_gaussian_sigma
from jaxdp.composition.search import bisect
from jaxdp.composition.zcdp import zcdp_budget

__all__ = ["gaussian_sigma", "laplace_eps", "CALIBRATIONS"]

CALIBRATIONS = ("basic", "zcdp", "rdp", "pld")


def _check(eps, delta, k, composition, allowed):
  eps = _checks.check_positive(eps, "eps")
  delta = _checks.check_delta(delta, "delta")
  k = _checks.check_int(k, "k", minimum=1)
  if composition not in allowed:
    raise ValueError(f"composition must be one of {allowed}; got {composition!r}.")
  if composition != "basic" and not delta > 0:
    raise ValueError(f"composition={composition!r} needs delta > 0.")
  return eps, delta, k


def gaussian_sigma(
  eps: float,
  delta: float,
  k: int = 1,
  *,
  composition: str = "pld",
  sensitivity: float = 1.0,
) -> float:
  """The smallest sigma such that k Gaussian releases (l_2 sensitivity
  ``sensitivity``) are together (eps, delta)-DP under ``composition``.

  Args:
    eps: the total target eps.
    delta: the total target delta (> 0).
    k: the number of releases.
    composition: ``"pld"`` (exact), ``"zcdp"`` or ``"rdp"``.
    sensitivity: the l_2 sensitivity of each release.

  Returns:
    sigma (a float, rounded up: never below the exact value).

  Raises:
    ValueError: for arguments out of range.
  """
  eps, delta, k = _check(eps, delta, k, composition, ("zcdp", "rdp", "pld"))
  s = _checks.check_positive(sensitivity, "sensitivity")
  if composition == "pld":
    return s * math.sqrt(k) * analytic_gaussian_sigma(eps, delta)
  if composition == "zcdp":
    return s * math.sqrt(k / (2 * zcdp_budget(eps, delta)))
  fits = lambda sigma: (
    events_epsilon([("gaussian", sigma)] * k, delta, methods=("rdp",)) <= eps
  )
  hi = 1.0
  while not fits(hi):
    hi *= 2
  return s * bisect(fits, hi, 0.0, steps=60)


def laplace_eps(eps: float, delta: float, k: int = 1, *, composition: str = "pld") -> float:
  """The largest per-release eps such that k Laplace releases are together
  (eps, delta)-DP under ``composition`` (the noise scale is sensitivity / that).

  Args:
    eps: the total target eps.
    delta: the total target delta (0 for ``"basic"`` only).
    k: the number of releases.
    composition: ``"basic"``, ``"zcdp"``, ``"rdp"`` or ``"pld"``.

  Returns:
    the per-release eps (rounded down).
  """
  eps, delta, k = _check(eps, delta, k, composition, CALIBRATIONS)
  if composition == "basic":
    return eps / k
  if composition == "zcdp":
    return math.sqrt(2 * zcdp_budget(eps, delta) / k)
  methods = None if composition == "pld" else ("rdp",)  # pld: the tightest of all
  fits = lambda e: events_epsilon([("laplace", e)] * k, delta, methods=methods) <= eps
  return bisect(fits, 0.0, eps, steps=40)
