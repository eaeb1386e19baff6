"""Composition mathematics: group privacy, advanced composition, interpretations.

Pure functions of privacy parameters (Python floats, or traced values where noted);
the accountant (:mod:`jaxdp.accounting`) applies them. Submodules: :mod:`.group`,
:mod:`.advanced`, :mod:`.optimal`, :mod:`.zcdp`, :mod:`.renyi` (Rényi curves and
filter budgets), :mod:`.pld` (privacy-loss distributions), :mod:`.events` (the tightest
figure of a fixed sequence of mechanism events), :mod:`.gaussian` (analytic Gaussian
calibration), :mod:`.calibration`, :mod:`.search`, and for DP-SGD's
Poisson-subsampled Gaussian mechanism :mod:`.subsampled` (its RDP, also traced),
:mod:`.subsampled_pld` (its PLDs) and :mod:`.dpsgd` (the two accounting policies).

References:
  C. Dwork, "Differential privacy", ICALP 2006, and the chapter on postprocessing,
  composition and group privacy (Lemma 2.8, group privacy). C. Dwork, G. Rothblum,
  S. Vadhan, "Boosting and differential privacy", FOCS 2010. L. Wasserman, S. Zhou,
  "A statistical framework for differential privacy", JASA 2010. P. Kairouz, S. Oh,
  P. Viswanath, "The composition theorem for differential privacy", ICML 2015.
"""

from __future__ import annotations

from jaxdp.composition import (
  calibration,
  dpsgd,
  events,
  gaussian,
  pld,
  renyi,
  search,
  subsampled,
  subsampled_pld,
)
from jaxdp.composition.advanced import advanced_composition
from jaxdp.composition.dpsgd import PldAccounting, RdpAccounting, dpsgd_epsilon
from jaxdp.composition.group import group_cost
from jaxdp.composition.hypothesis import hypothesis_test_bound
from jaxdp.composition.optimal import optimal_composition_delta, optimal_composition_epsilon
from jaxdp.composition.subsampled import subsampled_gaussian_rdp
from jaxdp.composition.subsampled_pld import subsampled_gaussian_pld
from jaxdp.composition.zcdp import zcdp_budget, zcdp_epsilon

__all__ = [
  "PldAccounting",
  "RdpAccounting",
  "advanced_composition",
  "calibration",
  "dpsgd",
  "dpsgd_epsilon",
  "events",
  "gaussian",
  "group_cost",
  "hypothesis_test_bound",
  "optimal_composition_delta",
  "optimal_composition_epsilon",
  "pld",
  "renyi",
  "search",
  "subsampled",
  "subsampled_gaussian_pld",
  "subsampled_gaussian_rdp",
  "subsampled_pld",
  "zcdp_budget",
  "zcdp_epsilon",
]
