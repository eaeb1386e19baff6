"""The exact law of one coordinate of poset-ball K-norm noise, for small posets.

The K-norm sampler draws ``Y = b R Z``: Z uniform in the poset ball (a uniformly
chosen simplex of its triangulation, then Dirichlet(1, ..., 1) weights ``w`` on the
simplex's D + 1 vertices) and R ~ Gamma(D + 1). Then ``R w`` is a vector of D + 1
i.i.d. Exp(1) variables, and every vertex ``+-(1, 1_F)`` has coordinates in
{-1, 0, 1}, so on an object whose vertices have ``a`` entries +1 and ``c`` entries -1
in coordinate i, ``Y_i / b = G_a - G_c``: the difference of independent Gamma(a) and
Gamma(c) variables. All simplices have the same volume, so the law of ``Y_i`` is the
uniform mixture of these over the objects, and for integer shapes

``P(G_a - G_c > x) = sum_(k < a) sum_(m <= k) e^-x x^(k-m) / (m! (k-m)!) *
Gamma(c + m) / (Gamma(c) 2^(c + m))``

(condition on G_c, then a Poisson tail), a finite sum of positive terms. Posets small
enough to enumerate (:func:`enumerable`) therefore get exact quantiles.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025,
  Section 3 (the triangulation).
"""

from __future__ import annotations

import collections
import math

import numpy as np

from jaxdp._cache import value_cache
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.balls import PosetBall, enumerate_objects, simplex_vertices

__all__ = [
  "ENUMERATE_MAX_D",
  "ENUMERATE_MAX_OBJECTS",
  "coordinate_cdf",
  "difference_tail",
  "enumerable",
  "sign_counts",
]

# Poset balls with at most this many elements and simplices are enumerated (the
# enumeration visits all 2^d subsets).
ENUMERATE_MAX_D = 14
ENUMERATE_MAX_OBJECTS = 5_000
LOG2 = math.log(2.0)


def enumerable(ball) -> bool:
  """Whether ``ball`` is a poset ball small enough to enumerate."""
  return (
    isinstance(ball, PosetBall)
    and ball.poset.d <= ENUMERATE_MAX_D
    and ball.num_objects() <= ENUMERATE_MAX_OBJECTS
  )


@by_relation(16)
def sign_counts(poset: Poset) -> tuple[tuple[tuple[int, int, float], ...], ...]:
  """Per coordinate, the ``(a, c, weight)`` of the objects: ``a`` vertices with +1 and
  ``c`` with -1 in that coordinate, and the share of objects with that pair."""
  seq, k = enumerate_objects(poset)
  hist = [collections.Counter() for _ in range(poset.d + 1)]
  for s, kk in zip(seq, k):
    v = simplex_vertices(poset, s, int(kk))
    for i, pair in enumerate(zip((v > 0).sum(axis=0), (v < 0).sum(axis=0))):
      hist[i][(int(pair[0]), int(pair[1]))] += 1
  n = len(seq)
  return tuple(tuple((a, c, w / n) for (a, c), w in sorted(h.items())) for h in hist)


@value_cache(maxsize=4096)
def _terms(a: int, c: int) -> tuple[np.ndarray, np.ndarray]:
  """The log coefficients and powers of x of ``P(G_a - G_c > x) e^x``."""
  logs, powers = [], []
  for k in range(a):
    for m in range(k + 1 if c else 1):
      log = -math.lgamma(m + 1) - math.lgamma(k - m + 1)
      if c:
        log += math.lgamma(c + m) - math.lgamma(c) - (c + m) * LOG2
      logs.append(log)
      powers.append(k - m)
  return np.array(logs), np.array(powers, dtype=np.float64)


def difference_tail(a: int, c: int, x: float) -> float:
  """``P(G_a - G_c > x)`` for independent Gamma(a, 1) and Gamma(c, 1), ``x >= 0``
  (shape 0: the constant 0)."""
  if a == 0:
    return 0.0
  logs, powers = _terms(a, c)
  logx = math.log(x) if x > 0 else -math.inf
  with np.errstate(invalid="ignore"):
    expo = logs + np.where(powers > 0, powers * logx, 0.0) - x
  return float(min(1.0, np.sum(np.exp(expo))))


def coordinate_cdf(poset: Poset, i: int, x: float) -> float:
  """``P(|Y_i| <= x b)`` for coordinate i (0: the respondents) of poset-ball K-norm
  noise of scale b."""
  if x <= 0:
    return 0.0
  pairs = sign_counts(poset)[i]
  tails = math.fsum(
    w * (difference_tail(a, c, x) + difference_tail(c, a, x)) for a, c, w in pairs
  )
  return max(0.0, 1.0 - tails)
