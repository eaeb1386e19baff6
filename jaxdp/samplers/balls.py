"""Norm balls for the K-norm mechanism: the poset ball and the l_p balls.

Ball objects are immutable, hashable configuration (usable as static jit arguments
and static pytree fields). Sample them with :func:`jaxdp.random.knorm` (noise) or
:func:`jaxdp.random.poset_ball` / :func:`jaxdp.random.lp_ball` (uniform points).

References:
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence

import numpy as np

from jaxdp import _checks
from jaxdp._identity import FieldIdentity
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers import dispatch

__all__ = ["MAX_OBJECTS", "LpBall", "PosetBall", "enumerate_objects", "exact_second_moment"]

# enumerate_objects refuses posets with more objects than this.
MAX_OBJECTS = 2_000_000


@dataclasses.dataclass(frozen=True)
class PosetBall:
  """The poset ball of ``poset``: conv{+-(1, 1_F) : F a filter} in R^(d+1).

  Coordinate 0 is the root (respondent count), coordinates 1..d the elements.

  Attributes:
    poset: the :class:`~jaxdp.Poset`.
    method: ``"auto"``, ``"forest"`` (forests, d <= 128), ``"sp"`` (series-parallel
      posets, i.e. without an induced N, d <= 512; prime pieces of up to 16
      elements allowed) or ``"general"`` (any poset, d <= 22). All are exact; "auto"
      takes the forest sampler for forests with d <= 16 (faster on NHIS, about even
      with "sp" at d = 16, slower above), else the series-parallel one when it
      applies, else the general one (``benchmarks/samplers.py``). See
      :mod:`jaxdp.random`.
  """

  poset: Poset
  method: str = "auto"

  def __post_init__(self):
    if not isinstance(self.poset, Poset):
      raise _checks.ArgTypeError(
        f"poset must be a jaxdp.Poset; got {type(self.poset).__name__}."
      )
    dispatch.resolve_method(self.poset, self.method)

  @property
  def dim(self) -> int:
    """Dimension of the ball, d + 1."""
    return self.poset.d + 1

  @property
  def resolved_method(self) -> str:
    """The algorithm that ``method`` selects for this poset."""
    return dispatch.resolve_method(self.poset, self.method)

  def num_objects(self) -> float:
    """N(P): number of simplices in the triangulation (volume is 2 N(P) / D!)."""
    return dispatch.num_objects(self.poset)


@dataclasses.dataclass(frozen=True, eq=False)
class LpBall(FieldIdentity):
  """The unit l_p ball in R^d (p >= 1, ``math.inf`` allowed).

  Attributes:
    d: dimension.
    p: the norm's exponent.
  """

  d: int
  p: float = 2.0

  def __post_init__(self):
    object.__setattr__(self, "d", _checks.check_int(self.d, "d", minimum=1))
    try:
      p = float(self.p)
    except (TypeError, ValueError):
      raise ValueError(f"p must be a number >= 1 or math.inf; got {self.p!r}.") from None
    if math.isnan(p) or p < 1:
      raise ValueError(f"p must be >= 1 (or math.inf) for a norm ball; got {self.p!r}.")
    object.__setattr__(self, "p", p)

  @property
  def dim(self) -> int:
    return self.d

  def expected_sq_norm(self) -> float:
    """E||Z||_2^2 for Z uniform in the ball (closed forms for p in {1, 2, inf})."""
    d, p = self.d, self.p
    if p == math.inf:
      return d / 3.0
    if p == 2:
      return d / (d + 2.0)
    if p == 1:
      # Z_i = +-E_i / sum_{j<=d+1} E_j: E[Z_i^2] = 2 / ((d+1)(d+2)).
      return 2.0 * d / ((d + 1.0) * (d + 2.0))
    raise NotImplementedError(f"no closed form for p = {p}; estimate it by sampling.")


# ------------------------------------------------------------------ exact checks
def enumerate_objects(poset: Poset) -> tuple[np.ndarray, np.ndarray]:
  """Every object (A, ext(A), ext(B)) of the triangulation, in the sampler's encoding.

  Args:
    poset: a small poset.

  Returns:
    ``(seq, k)``: ``seq`` an ``(N, d)`` int array (A's elements top down, then B's top
    down) and ``k`` an ``(N,)`` array of ``|A|``; ``N = N(P)``.

  Raises:
    ValueError: if the poset has more than ``MAX_OBJECTS`` objects.
  """
  n_obj = dispatch.num_objects(poset)
  if n_obj > MAX_OBJECTS:
    raise ValueError(
      f"this poset has {n_obj:.3g} objects; enumerate_objects supports at most "
      f"{MAX_OBJECTS}. Use a smaller poset."
    )
  return _enumerate(poset)


@by_relation(16)
def _enumerate(poset: Poset):
  d = poset.d
  o = poset.order
  seqs, ks = [], []
  for mask in range(1 << d):
    a = [x for x in range(d) if mask >> x & 1]
    b = [x for x in range(d) if not mask >> x & 1]
    for ea in _top_down_extensions(o, a):
      for eb in _top_down_extensions(o, b):
        seqs.append(ea + eb)
        ks.append(len(a))
  return np.array(seqs, dtype=np.int32).reshape(-1, d), np.array(ks, dtype=np.int32)


def _top_down_extensions(o, elems):
  """Orderings of ``elems`` in which no element comes after one it is below."""
  out = []
  for perm in itertools.permutations(elems):
    # perm[i] is added before perm[j] (i < j): perm[i] must not be below perm[j]
    if all(
      not o[perm[i], perm[j]] for i in range(len(perm)) for j in range(i + 1, len(perm))
    ):
      out.append(list(perm))
  return out


def simplex_vertices(poset: Poset, seq: Sequence[int], k: int) -> np.ndarray:
  """Vertices (D+1, D) of the simplex of one object: (1, 1_F0..Fk), -(1, 1_G0..Gl)."""
  up = poset.order[np.asarray(seq)]
  chains = []
  for sign, rows in ((1.0, up[:k]), (-1.0, up[k:])):
    filters = np.logical_or.accumulate(rows, axis=0) if len(rows) else rows
    f = np.concatenate([np.zeros((1, poset.d), bool), filters])  # F_0 = {} first
    chains.append(sign * np.concatenate([np.ones((len(f), 1)), f], axis=1))
  return np.concatenate(chains)


def exact_second_moment(poset: Poset) -> np.ndarray:
  """Exact E[Z Z^T] for Z uniform in the poset ball, by enumerating objects.

  For a simplex with m vertices v_i and Z uniform on it,
  E[Z Z^T] = (sum_i v_i v_i^T + (sum_i v_i)(sum_i v_i)^T) / (m (m + 1)); all simplices
  have equal volume, so the ball's moment is their average.

  Returns:
    ``(d+1, d+1)`` float64 matrix, root first.
  """
  seq, k = enumerate_objects(poset)
  dim = poset.d + 1
  m = dim + 1
  total = np.zeros((dim, dim))
  for s, kk in zip(seq, k):
    v = simplex_vertices(poset, s, int(kk))
    sv = v.sum(axis=0)
    total += v.T @ v + np.outer(sv, sv)
  return total / (len(seq) * m * (m + 1))
