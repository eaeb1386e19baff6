"""Basic composition (Dwork 2006, Lemmas 2.5 and 2.6)."""

from __future__ import annotations

import dataclasses

from jaxdp.accounting.rules.base import UnitRule

__all__ = ["BasicComposition"]


@dataclasses.dataclass(frozen=True, eq=False)
class BasicComposition(UnitRule):
  """Epsilons and deltas add; a release is answered iff it fits what is left.

  Composition (Lemma 2.5): the adaptive composition of (eps_i, delta_i)-DP
  mechanisms is (sum eps_i, sum delta_i)-DP, also when later queries are chosen from
  earlier answers. Budget (Lemma 2.6): the curator answers until the first round
  whose cost would take the total past the budget and refuses that round; the
  decision depends only on the privacy parameters, so refusing discloses nothing.
  The guarantee is the spent totals.
  """

  name = "basic"
