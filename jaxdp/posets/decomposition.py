"""Series-parallel (modular) decomposition of a poset, and induced-N certificates.

A poset is *series-parallel* (N-free) when it is built from single elements by
parallel composition P1 + P2 (no relation across) and series composition P1 < P2
(everything in P1 below everything in P2). Such posets are exactly those with no
induced N: four elements a < b, c < b, c < d with a, d and a, c and b, d
incomparable (Valdes, Tarjan, Lawler 1982). The decomposition follows the modular
decomposition of the comparability graph: a set whose comparability graph is
disconnected splits into a parallel composition of its components; one whose
incomparability graph is disconnected splits into a series composition of its
co-components (a chain of blocks); a set with both graphs connected is *prime*. A
prime set of four or more elements always contains an induced N (its comparability
graph contains an induced path on four vertices, whose orientation is an N).

The exact poset-ball sampler for series-parallel posets (``method="sp"``) descends
this tree; prime sets of at most ``BLOCK_MAX_D`` elements are handled as blocks by
the subset recursion.

References:
  J. Valdes, R. E. Tarjan, E. L. Lawler, "The recognition of series parallel
  digraphs", SIAM J. Comput. 11(2), 1982.
  R. H. Moehring, "Computationally tractable classes of ordered sets", 1989
  (substitution decomposition of posets).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from jaxdp.posets.canonical import by_relation

if TYPE_CHECKING:  # annotations only: a Poset is used through .order and .d
  from jaxdp.posets.relation import Poset

__all__ = ["SPNode", "decompose", "induced_n", "is_series_parallel"]


@dataclasses.dataclass(frozen=True)
class SPNode:
  """A node of the decomposition tree.

  Attributes:
    kind: ``"leaf"`` (one element), ``"parallel"`` (children pairwise unrelated),
      ``"series"`` (children ordered bottom to top: every element of ``children[i]``
      is below every element of ``children[i + 1]``) or ``"prime"`` (neither; no
      children are recorded, ``elements`` is the whole set).
    elements: the elements of the node, ascending.
    children: the child nodes.
  """

  kind: str
  elements: tuple
  children: tuple = ()

  @property
  def size(self) -> int:
    return len(self.elements)


@by_relation(64)
def decompose(poset: Poset) -> SPNode:
  """The series-parallel decomposition tree of ``poset`` (prime sets as leaves).

  Returns:
    The root :class:`SPNode`. Children of series and parallel nodes are never of
    their parent's kind (maximal compositions).
  """
  o = poset.order
  comp = o | o.T
  root_elems = np.arange(poset.d)
  # Iterative: the tree of a d-element chain-like poset is d deep.
  stack = [(root_elems, None, 0)]
  built = {}
  order = []
  while stack:
    elems, parent, slot = stack.pop()
    key = len(order)
    order.append((elems, parent, slot))
    if len(elems) == 1:
      built[key] = ("leaf", elems, [])
      continue
    sub = comp[np.ix_(elems, elems)]
    parts = _components(sub)
    if len(parts) > 1:
      kind = "parallel"
    else:
      parts = _components(~sub | np.eye(len(elems), dtype=bool))
      if len(parts) > 1:
        kind = "series"
        # co-components are totally ordered: sort by how many elements lie below
        below = o[np.ix_(elems, elems)].sum(axis=0)  # column j: elements <= j
        parts.sort(key=lambda p: int(below[p[0]]))
      else:
        built[key] = ("prime", elems, [])
        continue
    built[key] = (kind, elems, [None] * len(parts))
    for i, p in enumerate(parts):
      stack.append((elems[p], key, i))
  nodes = {}
  for key in reversed(range(len(order))):
    kind, elems, kids = built[key]
    node = SPNode(kind, tuple(int(x) for x in np.sort(elems)), tuple(kids))
    nodes[key] = node
    _, parent, slot = order[key]
    if parent is not None:
      built[parent][2][slot] = node
  return nodes[0]


def is_series_parallel(poset: Poset) -> bool:
  """Whether ``poset`` is series-parallel (N-free)."""
  return not prime_nodes(decompose(poset))


def induced_n(poset: Poset) -> tuple | None:
  """An induced N of ``poset``, or None if it is series-parallel.

  Returns:
    ``(a, b, c, d)`` element indices with a < b, c < b, c < d and no other relation
    among them, or None.
  """
  for node in prime_nodes(decompose(poset)):
    found = n_in(poset.order, np.asarray(node.elements))
    if found is not None:
      return found
  return None


def describe_n(poset: Poset, n) -> str:
  """``n`` (from :func:`induced_n`) in words, with element names."""
  a, b, c, d = (poset.element_names[i] for i in n)
  return (
    f"{a} < {b}, {c} < {b}, {c} < {d} with {a}, {d} incomparable "
    f"(and {a} || {c}, {b} || {d})"
  )


# ------------------------------------------------------------------ internals
def prime_nodes(node: SPNode):
  """The prime nodes of a decomposition tree (depth first)."""
  out, stack = [], [node]
  while stack:
    v = stack.pop()
    if v.kind == "prime":
      out.append(v)
    stack.extend(v.children)
  return out


def _components(adj: np.ndarray):
  """Connected components (lists of local indices) of a symmetric boolean graph."""
  n = adj.shape[0]
  seen = np.zeros(n, dtype=bool)
  parts = []
  for start in range(n):
    if seen[start]:
      continue
    reach = np.zeros(n, dtype=bool)
    reach[start] = True
    frontier = reach.copy()
    while frontier.any():
      nxt = adj[frontier].any(axis=0) & ~reach
      reach |= nxt
      frontier = nxt
    seen |= reach
    parts.append(np.nonzero(reach)[0])
  return parts


def n_in(order: np.ndarray, elems: np.ndarray):
  """An induced N inside ``elems`` (a prime set), from an induced path w-x-y-z of
  its comparability graph: edges wx, xy, yz, no edges wy, xz, wz."""
  o = order[np.ix_(elems, elems)]
  n = len(elems)
  adj = (o | o.T) & ~np.eye(n, dtype=bool)
  closed = adj | np.eye(n, dtype=bool)
  non = (~closed).astype(np.float32)
  for x in range(n):
    ys = np.nonzero(adj[x])[0]
    if not len(ys):
      continue
    w_sets = adj[x][None, :] & ~closed[ys]  # w ~ x, w !~ y, w != y
    z_sets = adj[ys] & ~closed[x][None, :]  # z ~ y, z !~ x, z != x
    hits = (w_sets.astype(np.float32) @ non > 0) & z_sets
    rows = np.nonzero(hits.any(axis=1))[0]
    if len(rows):
      y = ys[rows[0]]
      z = int(np.nonzero(hits[rows[0]])[0][0])
      w = int(np.nonzero(w_sets[rows[0]] & (non[:, z] > 0))[0][0])
      path = [w, x, int(y), z]
      if o[path[0], path[1]]:  # w < x > y < z: N with b = x
        a, b, c, d = w, x, int(y), z
      else:  # w > x < y > z: N with b = y
        a, b, c, d = z, int(y), x, w
      return tuple(int(elems[i]) for i in (a, b, c, d))
  return None
