"""The constraint graph of order-consistent poset counts.

A poset-count vector is ``y = (n, c_1, ..., c_d)``: node 0 is the number of
respondents, node ``1 + q`` the count of question ``q``. Every real dataset
satisfies ``c_q <= c_p`` whenever ``p_q <= p_p`` (q requires p), ``c_q <= n`` and
``c_q >= 0``. The graph has one edge ``lo -> hi`` ("z_lo <= z_hi") per cover
relation of the poset and one from each maximal element to node 0 (n on top); the
lower bound 0 is a constant below every node. Cover edges suffice: the other order
relations follow by transitivity.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp._identity import FieldIdentity
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation

__all__ = ["ConstraintGraph", "constraint_graph"]


@dataclasses.dataclass(frozen=True, eq=False)
class ConstraintGraph(FieldIdentity):
  """Edges ``z[lo[e]] <= z[hi[e]]`` on the ``dim = d + 1`` nodes of a count vector.

  Hashable (a static argument of ``jax.jit``, and the key of the solvers' host
  plans, shared by every caller in the process); build it with
  :func:`constraint_graph`. It compares and hashes its fields' types with their
  values, element by element
  (:class:`~jaxdp._identity.FieldIdentity`), and its derived arrays
  are computed from the plain values of its fields (properties, which an instance
  attribute cannot shadow): a graph whose edges were replaced by int subclasses
  that compare as other nodes never shares an honest graph's compilation or plans.

  Attributes:
    dim: number of nodes, ``d + 1`` (node 0 is n).
    lo: the lower node of each edge.
    hi: the upper node of each edge.
    is_tree: True when every node but node 0 has exactly one edge up (the poset is
      a forest); the tree's multipliers then have a closed form.
  """

  dim: int
  lo: tuple[int, ...]
  hi: tuple[int, ...]

  @property
  def num_edges(self) -> int:
    return len(self.lo)

  @property
  def is_tree(self) -> bool:
    return self.num_edges == self.dim - 1 and sorted(self.lo) == list(range(1, self.dim))

  @property
  def incidence(self) -> np.ndarray:
    """``A``, ``(E, dim)``: ``(A z)_e = z_lo - z_hi`` (feasible iff ``A z <= 0``)."""
    return _incidence(self.dim, self.lo, self.hi)

  @property
  def lipschitz(self) -> float:
    """The largest eigenvalue of ``A A^T`` (the graph Laplacian's), slightly padded:
    the step ``1 / lipschitz`` of projected gradient on the dual."""
    return _lipschitz(self.dim, self.lo, self.hi)

  @property
  def edge_steps(self) -> np.ndarray:
    """Per-edge steps ``1 / (deg(lo) + deg(hi))``: the inverse row sums of ``|A A^T|``,
    a diagonal that dominates ``A A^T`` (Gershgorin), so projected gradient in that
    metric converges; faster than the uniform ``1 / lipschitz`` on uneven degrees."""
    return _edge_steps(self.dim, self.lo, self.hi)

  @property
  def subtree(self) -> np.ndarray:
    """For a tree: ``S[e, i] = 1`` iff node ``i`` lies below or at ``lo[e]``; the
    multipliers of a block-constant candidate ``z`` are then ``S (y - z)``."""
    if not self.is_tree:
      raise ValueError("subtree sums exist only for a tree-shaped constraint graph.")
    return _subtree(self.dim, self.lo, self.hi)

  @property
  def up(self) -> tuple[tuple[int, ...], ...]:
    """``up[i]``: the nodes directly above node ``i``."""
    return _up(self.dim, self.lo, self.hi)


# The derived arrays, of plain (dim, lo, hi) (value_cache passes plain values).
@value_cache(maxsize=128)
def _incidence(dim: int, lo: tuple, hi: tuple) -> np.ndarray:
  a = np.zeros((len(lo), dim))
  a[np.arange(len(lo)), lo] = 1.0
  a[np.arange(len(lo)), hi] = -1.0
  a.setflags(write=False)
  return a


@value_cache(maxsize=128)
def _lipschitz(dim: int, lo: tuple, hi: tuple) -> float:
  a = _incidence(dim, lo, hi)
  top = float(np.linalg.eigvalsh(a.T @ a)[-1])
  return top * (1 + 1e-6) + 1e-12


@value_cache(maxsize=128)
def _edge_steps(dim: int, lo: tuple, hi: tuple) -> np.ndarray:
  deg = np.bincount(np.r_[lo, hi], minlength=dim)
  out = 1.0 / (deg[list(lo)] + deg[list(hi)])
  out.setflags(write=False)
  return out


@value_cache(maxsize=128)
def _subtree(dim: int, lo: tuple, hi: tuple) -> np.ndarray:
  parent = np.full(dim, -1)
  parent[list(lo)] = list(hi)
  s = np.zeros((len(lo), dim))
  edge_of = {low: e for e, low in enumerate(lo)}
  for i in range(1, dim):
    j = i
    while j != 0:  # every ancestor edge of i counts i
      s[edge_of[j], i] = 1.0
      j = parent[j]
  s.setflags(write=False)
  return s


@value_cache(maxsize=128)
def _up(dim: int, lo: tuple, hi: tuple) -> tuple[tuple[int, ...], ...]:
  out = [[] for _ in range(dim)]
  for a, b in zip(lo, hi):
    out[a].append(b)
  return tuple(tuple(v) for v in out)


def constraint_graph(poset: Poset) -> ConstraintGraph:
  """The constraint graph of ``poset``'s count vectors (cached per relation).

  Returns:
    A copy of the graph kept for the relation (equal to it): changing the copy's
    fields (``object.__setattr__``) never reaches the kept one, which every later
    caller's :func:`~jaxdp.consistent` of an equal poset reads.

  Raises:
    ArgTypeError: if ``poset`` is not a :class:`~jaxdp.Poset`.
  """
  if not isinstance(poset, Poset):
    raise _checks.ArgTypeError(f"poset must be a jaxdp.Poset; got {poset!r}.")
  return dataclasses.replace(_constraint_graph(poset))


@by_relation(128)
def _constraint_graph(poset: Poset) -> ConstraintGraph:
  cover = poset.cover_matrix
  lo, hi = [], []
  for i, j in zip(*np.nonzero(cover)):  # p_i covered by p_j: c_i <= c_j
    lo.append(1 + int(i))
    hi.append(1 + int(j))
  for j in np.nonzero(~cover.any(axis=1))[0]:  # maximal: c_j <= n
    lo.append(1 + int(j))
    hi.append(0)
  order = np.lexsort((hi, lo))
  return ConstraintGraph(
    poset.d + 1, tuple(int(lo[e]) for e in order), tuple(int(hi[e]) for e in order)
  )
