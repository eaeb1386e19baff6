"""The largest noise scale an exact sampler accepts, per noise dimension.

A D-dimensional K-norm noise whose ball lies inside the unit l_inf ball has
coordinates bounded by ``scale * R``, R ~ Gamma(D + 1) (the poset ball's vertices
+-(1, F), F 0/1, the l_2 and l_inf balls are all inside it); Laplace noise is bounded
by ``scale * E``, E ~ Exp(1) = Gamma(1) (D = 0 here). The scale is refused up front
unless ``scale * t(D) <= NOISE_LIMIT``, where ``P(Gamma(D + 1) > t(D)) <= 2^-128``, so
a draw whose rounded noise leaves +-``LIMIT`` (which the host refinement still
refuses at run time) has probability below 2^-128. The statistic is at most ``LIMIT``
in magnitude, so statistic + noise stays inside int32.
"""

from __future__ import annotations

import math

from jaxdp._cache import value_cache
from jaxdp.exact.intervals import LIMIT

MAX_SCALE = 2.0**20  # the largest scale at any dimension
NOISE_LIMIT = LIMIT - 1  # |rounded noise| <= scale * R + 1/2 < LIMIT when scale R <= this
TAIL_LOG = -128 * math.log(2)  # log of the failure probability allowed


def _chernoff_log(t: float, k: float) -> float:
  """An upper bound of log P(Gamma(k) > t), t > k: Chernoff's
  ``(t / k)^k e^(k - t)``, plus a margin covering float64 rounding of the terms."""
  value = k * math.log(t / k) + k - t
  return value + 1e-12 * (k * abs(math.log(t / k)) + k + t + 1.0)


@value_cache(maxsize=None)
def tail_quantile(dim: int) -> float:
  """A float t with ``P(Gamma(dim + 1) > t) <= 2^-128`` (Chernoff's bound, solved by
  bisection; the float64 rounding is covered by a margin, so t is an upper quantile).

  Args:
    dim: the noise dimension D >= 0 (0 for Laplace).
  """
  if isinstance(dim, bool) or not isinstance(dim, int) or dim < 0:
    raise ValueError(f"dim must be an integer >= 0; got {dim!r}.")
  k = float(dim + 1)
  lo, hi = k, 2 * k + 200.0
  while _chernoff_log(hi, k) > TAIL_LOG:  # the bound decreases in t > k
    hi *= 2
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if mid in (lo, hi):
      break
    lo, hi = (lo, mid) if _chernoff_log(mid, k) <= TAIL_LOG else (mid, hi)
  return math.nextafter(hi, math.inf)


@value_cache(maxsize=None)
def max_scale(dim: int) -> float:
  """The largest exact noise scale for D-dimensional K-norm noise (``dim = 0``: Laplace):
  ``min(MAX_SCALE, NOISE_LIMIT / t(D))`` rounded down (:func:`tail_quantile`).

  Args:
    dim: the noise dimension D >= 0.
  """
  return min(MAX_SCALE, math.nextafter(NOISE_LIMIT / tail_quantile(dim), 0.0))
