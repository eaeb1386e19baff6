"""A functional privacy accountant that threads through jit-compiled query code.

:class:`Accountant` (:mod:`.accountant`) is a pytree holding the budget state and one
composition rule (:mod:`.rules`); :func:`release` and its variants (:mod:`.releases`)
charge it; :func:`plan` (:mod:`.planning`) computes what a query function would
spend without reading data. :mod:`.budget` is the integer-unit arithmetic,
:mod:`.guard` the stale-key guard, :mod:`.keys` the key a new accountant owns (a
secure one: only a key made from the OS), :mod:`.refusal` what a refused release does
and :mod:`.dependence` the data-dependence analysis that planning runs.
"""

from jaxdp.accounting.accountant import Accountant
from jaxdp.accounting.errors import (
  BudgetExceededError,
  DataDependentCostError,
  ReleaseRefusedError,
  StaleAccountantError,
)
from jaxdp.accounting.planning import Plan, PlannedRelease, events_epsilon, plan
from jaxdp.accounting.refusal import FillOnRefusal, RaiseOnRefusal
from jaxdp.accounting.releases import (
  MAX_PARTS,
  postprocess,
  raise_if_refused,
  release,
  release_parallel_unchecked,
  release_partitioned,
)
from jaxdp.accounting.rules import (
  COMPOSITIONS,
  AdvancedComposition,
  BasicComposition,
  CompositionRule,
  PlannedComposition,
  RenyiFilter,
  ZCDPFilter,
)

__all__ = [
  "COMPOSITIONS",
  "MAX_PARTS",
  "Accountant",
  "AdvancedComposition",
  "BasicComposition",
  "BudgetExceededError",
  "CompositionRule",
  "DataDependentCostError",
  "FillOnRefusal",
  "Plan",
  "PlannedComposition",
  "PlannedRelease",
  "RaiseOnRefusal",
  "ReleaseRefusedError",
  "RenyiFilter",
  "StaleAccountantError",
  "ZCDPFilter",
  "events_epsilon",
  "plan",
  "postprocess",
  "raise_if_refused",
  "release",
  "release_parallel_unchecked",
  "release_partitioned",
]
