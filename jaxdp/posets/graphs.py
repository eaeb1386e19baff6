"""Order-relation helpers on numpy bool matrices: closure, cycles, order axioms."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from jaxdp.posets.canonical import by_relation

if TYPE_CHECKING:  # annotations only: a Poset is used through .order and .d
  from jaxdp.posets.relation import Poset


def transitive_closure(adj: np.ndarray) -> np.ndarray:
  """The reflexive-transitive closure of a ``(d, d)`` bool adjacency matrix."""
  d = adj.shape[0]
  reach = adj.copy() | np.eye(d, dtype=bool)
  for k in range(d):
    reach |= reach[:, k : k + 1] & reach[k : k + 1, :]
  return reach


def find_cycle(adj: np.ndarray) -> list[int] | None:
  """Returns one directed cycle of ``adj`` as a node list, or None."""
  d = adj.shape[0]
  color = [0] * d  # 0 new, 1 on stack, 2 done
  parent = [-1] * d
  for root in range(d):
    if color[root]:
      continue
    stack = [(root, iter(np.nonzero(adj[root])[0]))]
    color[root] = 1
    while stack:
      node, it = stack[-1]
      nxt = next(it, None)
      if nxt is None:
        color[node] = 2
        stack.pop()
        continue
      nxt = int(nxt)
      if color[nxt] == 1:
        cycle = [node]
        while cycle[-1] != nxt:
          cycle.append(parent[cycle[-1]])
        return cycle[::-1]
      if color[nxt] == 0:
        parent[nxt] = node
        color[nxt] = 1
        stack.append((nxt, iter(np.nonzero(adj[nxt])[0])))
  return None


def validate_order(o: np.ndarray, arg: str) -> None:
  """Raises ValueError naming the first broken order axiom of ``o`` (called ``arg``)."""
  d = o.shape[0]
  if o.ndim != 2 or o.shape != (d, d):
    raise ValueError(f"{arg} must be a square (d, d) matrix; got shape {o.shape}.")
  diag = np.nonzero(~np.diag(o))[0]
  if diag.size:
    i = diag[0]
    raise ValueError(
      f"{arg} is not reflexive: {arg}[{i}][{i}] is 0; every element satisfies p_i <= p_i."
    )
  both = np.argwhere(o & o.T & ~np.eye(d, dtype=bool))
  if both.size:
    i, j = both[0]
    raise ValueError(
      f"{arg} is not antisymmetric: {arg}[{i}][{j}] and {arg}[{j}][{i}] are both 1 "
      f"for i != j (p{i} <= p{j} <= p{i})."
    )
  closure = transitive_closure(o)
  missing = np.argwhere(closure & ~o)
  if missing.size:
    i, k = missing[0]
    j = int(np.nonzero(o[i] & o[:, k])[0][0]) if np.any(o[i] & o[:, k]) else -1
    via = f" (p{i} <= p{j} and p{j} <= p{k})" if j >= 0 else ""
    raise ValueError(
      f"{arg} is not transitive: {arg}[{i}][{k}] is 0 but p{i} <= p{k} follows"
      f"{via}. Use Poset.from_edges to take the transitive closure."
    )


@by_relation(64)
def filters_of(poset: Poset) -> np.ndarray:
  """All filters (up-sets) of ``poset`` as an ``(m, d)`` uint8 array (cached)."""
  d = poset.d
  o = poset.order
  masks = np.arange(1 << d, dtype=np.int64)
  bits = ((masks[:, None] >> np.arange(d)) & 1).astype(bool)
  ok = np.ones(1 << d, dtype=bool)
  for i in range(d):
    above = np.nonzero(o[i] & (np.arange(d) != i))[0]
    for j in above:
      ok &= ~(bits[:, i] & ~bits[:, j])
  out = bits[ok].astype(np.uint8)
  out.setflags(write=False)
  return out
