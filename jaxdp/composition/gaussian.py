"""Analytic calibration of Gaussian noise (Balle & Wang 2018).

References:
  B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising", ICML 2018, Theorem 8.
"""

from __future__ import annotations

import functools
import math

from jaxdp.composition.search import bisect

__all__ = [
  "analytic_gaussian_delta",
  "analytic_gaussian_delta_bound",
  "analytic_gaussian_sigma",
]


def normal_cdf(x: float) -> float:
  """The standard normal distribution function."""
  return 0.5 * math.erfc(-x / math.sqrt(2))


def analytic_gaussian_delta(eps: float, s: float) -> float:
  """delta of Gaussian noise of standard deviation s on sensitivity 1 at eps
  (Balle & Wang 2018, Theorem 8), evaluated in float64: a point estimate, which at
  small eps can be below the exact value (see :func:`analytic_gaussian_delta_bound`)."""
  a, b = 1 / (2 * s) - eps * s, -1 / (2 * s) - eps * s
  tail = normal_cdf(b)
  second = 0.0 if tail == 0.0 else math.exp(min(eps + math.log(tail), 700.0))
  return normal_cdf(a) - second


# Relative error bound of one float64 evaluation of Phi(a) or e^eps Phi(b), per unit
# of (1 + (|a| + |b|)^2 + |eps + log Phi(b)|): the arguments' roundings move log Phi
# by at most (|x| + 1) times their absolute error (the Mills ratio), erfc, log and exp
# add a few ulps; 2**-40 leaves a factor of over 100 on that.
EVAL_ERROR = 2.0**-40


def analytic_gaussian_delta_bound(eps: float, s: float) -> float:
  """:func:`analytic_gaussian_delta` rounded up by a bound on its float64 evaluation
  error, so it is never below the exact delta.

  Phi(a) - e^eps Phi(b) with a, b = +-1/(2s) - eps s: at small eps the two terms are
  about eps s^2 times delta, and their float64 difference loses the digits a
  calibration compares (at eps = 1e-8, delta = 1e-16 it is off by about 5e-6 of
  delta)."""
  a, b = 1 / (2 * s) - eps * s, -1 / (2 * s) - eps * s
  first, tail = normal_cdf(a), normal_cdf(b)
  x = eps + math.log(tail) if tail > 0.0 else -math.inf
  second = 0.0 if tail == 0.0 else math.exp(min(x, 700.0))  # clipped: delta rounds up
  spread = 1 + (abs(a) + abs(b)) ** 2 + (abs(x) if tail > 0.0 else 0.0)
  return min(1.0, first - second + EVAL_ERROR * spread * (first + second))


@functools.lru_cache(maxsize=256)
def analytic_gaussian_sigma(eps: float, delta: float) -> float:
  """The smallest standard deviation (sensitivity 1) that is (eps, delta)-DP; rounded
  up, so the returned sigma is never below the exact one (the bisection compares
  :func:`analytic_gaussian_delta_bound`, an upper bound of delta)."""
  hi = 1.0
  while analytic_gaussian_delta_bound(eps, hi) > delta:  # decreases in sigma
    hi *= 2
  return bisect(lambda s: analytic_gaussian_delta_bound(eps, s) <= delta, hi, 1e-6)
