"""What an (eps, delta) guarantee means for a test about one individual.

References:
  L. Wasserman, S. Zhou, "A statistical framework for differential privacy", JASA
  2010. P. Kairouz, S. Oh, P. Viswanath, "The composition theorem for differential
  privacy", ICML 2015.
"""

from __future__ import annotations

import math

from jaxdp import _checks
from jaxdp.composition.search import safe_exp

__all__ = ["hypothesis_test_bound"]


def hypothesis_test_bound(eps: float, alpha: float, delta: float = 0.0) -> float:
  """Largest power of any test about one individual at significance ``alpha``.

  For an (eps, delta)-DP output, any test of H0 versus H1 about one person's value
  with type I error alpha has power at most
  min(e^eps alpha + delta, 1 - e^-eps (1 - alpha - delta)) (and at most 1): it
  rejects with about the same probability whether or not the hypothesis is true.

  References:
    Wasserman & Zhou (2010); Kairouz, Oh & Viswanath (2015).
  """
  eps = _checks.check_positive(eps, "eps")
  alpha = float(alpha)
  if not 0 <= alpha <= 1:
    raise ValueError(f"alpha must be in [0, 1]; got {alpha}.")
  delta = _checks.check_delta(delta, "delta")
  first = alpha * safe_exp(eps) + delta if alpha > 0 else delta
  return float(min(1.0, first, 1 - math.exp(-eps) * (1 - alpha - delta)))
