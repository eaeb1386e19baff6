"""Kairouz-Oh-Viswanath optimal composition of k eps-DP releases.

References:
  P. Kairouz, S. Oh, P. Viswanath, "The composition theorem for differential
  privacy", ICML 2015, Theorem 3.3; J. Murtagh, S. Vadhan, TCC 2016.
"""

from __future__ import annotations

import math

from jaxdp import _checks
from jaxdp.composition.search import bisect

__all__ = ["optimal_composition_delta", "optimal_composition_epsilon"]


def optimal_composition_delta(eps: float, k: int, eps_total: float) -> float:
  """The least delta such that k releases of eps-DP are (eps_total, delta)-DP.

  Exact (Kairouz-Oh-Viswanath): the worst case is k-fold randomized response, so
  delta = sum over l of C(k, l) (e^((k-l) eps) - e^(eps_total + l eps))_+ /
  (1 + e^eps)^k, summed here in logarithms (stable for large k). Valid when the k
  releases' parameters are fixed before the run (the queries may be adaptive).

  References:
    P. Kairouz, S. Oh, P. Viswanath, "The composition theorem for differential
    privacy", ICML 2015, Theorem 3.3; J. Murtagh, S. Vadhan, TCC 2016 (the closed form
    for any eps_total).
  """
  eps = _checks.check_positive(eps, "eps")
  k = _checks.check_int(k, "k", minimum=1)
  total = 0.0
  log_norm = k * (eps + math.log1p(math.exp(-eps)))  # k log(1 + e^eps)
  for l in range(k + 1):
    gap = (k - 2 * l) * eps - eps_total  # log of e^((k-l)eps) / e^(...)
    if gap <= 0:
      continue
    log_c = math.lgamma(k + 1) - math.lgamma(l + 1) - math.lgamma(k - l + 1)
    total += math.exp(log_c + (k - l) * eps - log_norm) * -math.expm1(-gap)
  return min(total, 1.0)


def optimal_composition_epsilon(eps: float, k: int, delta: float) -> float:
  """The least eps_total with :func:`optimal_composition_delta` at most ``delta``."""
  delta = _checks.check_delta(delta, "delta")
  if optimal_composition_delta(eps, k, 0.0) <= delta:
    return 0.0
  return bisect(
    lambda e: optimal_composition_delta(eps, k, e) <= delta,  # decreasing
    k * eps,
    0.0,
    steps=100,
  )
