"""The published insertion sampler for the poset ball, kept as a named baseline.

The public research code of Joseph, Ribero & Yu builds an object (A, ext(A), ext(B))
by removing a maximal element m, recursing on the rest, then inserting m at a
uniformly random valid position of A's or B's ascending list (any position after the
last element below m). The number of valid positions depends on where earlier
elements landed, so objects are **not** equally likely: for a < c with b free,
inserted in the order b, a, c, four objects get probability 1/12 and twelve get 1/18.
Its points are therefore not uniform on the poset ball. It is here only so studies
and benchmarks can compare against it; use :func:`jaxdp.random.poset_ball` for real
work.

This is a plain sequential numpy implementation (one object at a time), as the
research code is.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import collections
from fractions import Fraction

import numpy as np

from jaxdp.posets import Poset
from jaxdp.samplers.balls import simplex_vertices

__all__ = [
  "insertion_order",
  "insertion_objects",
  "insertion_poset_ball",
  "insertion_object_probabilities",
]


def insertion_order(poset: Poset) -> list[int]:
  """The order in which elements are inserted: the reverse of repeatedly removing
  the maximal element with the smallest label (the recursion's natural order)."""
  o = poset.order
  remaining = set(range(poset.d))
  removed = []
  while remaining:
    maximal = [x for x in remaining if not any(o[x, y] and y != x for y in remaining)]
    m = min(maximal)
    removed.append(m)
    remaining.remove(m)
  return removed[::-1]


def _valid_positions(o, lst, m):
  last = -1
  for i, y in enumerate(lst):
    if o[y, m]:
      last = i
  return range(last + 1, len(lst) + 1)


def insertion_objects(rng: np.random.Generator, poset: Poset, n: int):
  """``n`` objects from the insertion sampler, in the encoding of the exact sampler.

  Returns:
    ``(seq, k)``: ``seq`` (n, d) int32 (A top down, then B top down), ``k`` (n,).
  """
  o = poset.order
  order = insertion_order(poset)
  d = poset.d
  seq = np.empty((n, d), np.int32)
  ks = np.empty(n, np.int32)
  for t in range(n):
    a, b = [], []
    for m in order:
      pa = _valid_positions(o, a, m)
      pb = _valid_positions(o, b, m)
      r = rng.integers(len(pa) + len(pb))
      if r < len(pa):
        a.insert(pa[r], m)
      else:
        b.insert(pb[r - len(pa)], m)
    seq[t] = a[::-1] + b[::-1]
    ks[t] = len(a)
  return seq, ks


def insertion_poset_ball(rng: np.random.Generator, poset: Poset, n: int) -> np.ndarray:
  """``n`` points of the poset ball as the published sampler draws them (not uniform).

  Each object's simplex gets Dirichlet(1, ..., 1) weights, sequentially in numpy.

  Returns:
    ``(n, d + 1)`` float64, root first.
  """
  seq, ks = insertion_objects(rng, poset, n)
  out = np.empty((n, poset.d + 1))
  for t in range(n):
    w = rng.exponential(size=poset.d + 2)
    out[t] = (w / w.sum()) @ simplex_vertices(poset, seq[t], int(ks[t]))
  return out


def insertion_object_probabilities(poset: Poset) -> dict:
  """Exact probability of each object under the insertion sampler (small posets).

  Returns:
    ``{(tuple(seq), k): Fraction}``.
  """
  o = poset.order
  order = insertion_order(poset)
  probs = collections.defaultdict(Fraction)

  def rec(i, a, b, p):
    if i == len(order):
      probs[(tuple(a[::-1] + b[::-1]), len(a))] += p
      return
    m = order[i]
    pa = _valid_positions(o, a, m)
    pb = _valid_positions(o, b, m)
    q = p / (len(pa) + len(pb))
    for pos in pa:
      rec(i + 1, a[:pos] + [m] + a[pos:], b, q)
    for pos in pb:
      rec(i + 1, a, b[:pos] + [m] + b[pos:], q)

  rec(0, [], [], Fraction(1))
  return dict(probs)
