"""Analytic calibration of Gaussian noise (Balle & Wang 2018).

References:
  B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising", ICML 2018, Theorem 8.
"""

from __future__ import annotations

import functools
import math

from jaxdp.composition.search import bisect

__all__ = ["analytic_gaussian_delta", "analytic_gaussian_sigma"]


def normal_cdf(x: float) -> float:
  """The standard normal distribution function."""
  return 0.5 * math.erfc(-x / math.sqrt(2))


def analytic_gaussian_delta(eps: float, s: float) -> float:
  """delta of Gaussian noise of standard deviation s on sensitivity 1 at eps
  (Balle & Wang 2018, Theorem 8)."""
  a, b = 1 / (2 * s) - eps * s, -1 / (2 * s) - eps * s
  tail = normal_cdf(b)
  second = 0.0 if tail == 0.0 else math.exp(min(eps + math.log(tail), 700.0))
  return normal_cdf(a) - second


@functools.lru_cache(maxsize=256)
def analytic_gaussian_sigma(eps: float, delta: float) -> float:
  """The smallest standard deviation (sensitivity 1) that is (eps, delta)-DP; rounded
  up, so the returned sigma is never below the exact one."""
  hi = 1.0
  while analytic_gaussian_delta(eps, hi) > delta:  # delta(sigma) decreases in sigma
    hi *= 2
  return bisect(lambda s: analytic_gaussian_delta(eps, s) <= delta, hi, 1e-6)
