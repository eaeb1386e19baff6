"""Exact batched isotonic regression on a tree (the poset a forest, n on top).

Pool-adjacent-violators on a rooted tree where every child lies below its parent:
the nodes are visited bottom-up, and each node's block (initially itself) absorbs,
while one exceeds it, the adjacent block below of largest mean: the block whose top
node hangs from it. The solution on a subtree is then exact, so the root's is the
isotonic regression. Every step is a fixed-shape array operation on the whole batch
(a ``lax.scan`` over a static schedule of ``sum_v (|subtree(v)| - 1)`` steps), so it
runs under ``jit`` and ``vmap`` and needs no tolerance to stop.

References:
  W. A. Thompson, "The problem of negative estimates of variance components", Ann.
  Math. Statist. 33 (1962); P. M. Pardalos, G. Xue, "Algorithms for the simple equal
  weighted isotonic regression problem on trees", Algorithmica 23 (1999).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.consistency.graph import ConstraintGraph

__all__ = ["TREE_MAX_STEPS", "tree_isotonic", "tree_schedule"]

TREE_MAX_STEPS = 4096  # longest schedule the batched tree path takes


@functools.lru_cache(maxsize=64)
def tree_schedule(graph: ConstraintGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(parent, node, below)``: the parent of each node (the root its own), and per
  step the node whose block grows and the mask of the nodes strictly below it."""
  if not graph.is_tree:
    raise ValueError("the tree path needs a forest poset (a tree with n on top).")
  parent = np.arange(graph.dim, dtype=np.int32)
  parent[list(graph.lo)] = list(graph.hi)
  children = [[] for _ in range(graph.dim)]
  for c in range(1, graph.dim):
    children[parent[c]].append(c)
  order, stack = [], [0]
  while stack:  # preorder; reversed it visits every child before its parent
    v = stack.pop()
    order.append(v)
    stack.extend(children[v])
  below = np.zeros((graph.dim, graph.dim), bool)
  for v in reversed(order):
    for c in children[v]:
      below[v] |= below[c]
      below[v, c] = True
  nodes = [v for v in reversed(order) for _ in range(int(below[v].sum()))]
  return parent, np.asarray(nodes, np.int32), below[nodes]


def tree_isotonic(y: jax.Array, graph: ConstraintGraph) -> jax.Array:
  """The isotonic regression of each row of ``y`` (``(B, dim)``) on a tree graph."""
  parent, nodes, below = tree_schedule(graph)
  b, dim = y.shape
  rows = jnp.arange(b)
  ids = jnp.arange(dim, dtype=jnp.int32)

  def step(state, xs):
    label, sums, sizes = state
    v, mask = xs
    means = sums / sizes
    cand = mask & (label == ids) & (label[:, parent] == v)
    cm = jnp.where(cand, means, -jnp.inf)
    u = jnp.argmax(cm, axis=1)
    merge = cm[rows, u] > means[:, v]
    label = jnp.where(merge[:, None] & (label == u[:, None]), v, label)
    sums = sums.at[:, v].add(jnp.where(merge, sums[rows, u], 0.0))
    sizes = sizes.at[:, v].add(jnp.where(merge, sizes[rows, u], 0.0))
    return (label, sums, sizes), None

  label0 = jnp.zeros_like(y, jnp.int32) + ids  # derived from y: varies as y does
  state = (label0, y, jnp.ones_like(y))
  (label, sums, sizes), _ = jax.lax.scan(
    step, state, (jnp.asarray(nodes), jnp.asarray(below))
  )
  return jnp.take_along_axis(sums / sizes, label, axis=1)
