"""Exact batched isotonic regression on a tree (the poset a forest, n on top).

Pool-adjacent-violators on a rooted tree where every child lies below its parent:
the nodes are visited bottom-up, and each node's block (initially itself) absorbs,
while one exceeds it, the adjacent block below of largest mean: the block whose top
node hangs from it. The solution on a subtree is then exact, so the root's is the
isotonic regression.

Two batched forms, both fixed-shape array code (``jit``, ``vmap``), with no
tolerance and no iteration count. Small trees (``steps * dim <= SCHEDULE_MAX``)
take a static schedule of ``steps = sum_v (|subtree(v)| - 1)`` merge attempts, each
over all the nodes, as one ``lax.scan`` (:func:`scheduled_isotonic`). Larger ones
(:func:`windowed_isotonic`) number the nodes in preorder, so that every subtree is
a range of columns: node ``v``'s merges read and write only the ``W_v`` columns
from ``v`` on (``W_v`` the power of two at least ``|subtree(v)|``), one merge per
step of a ``lax.while_loop`` that stops when no vector of the batch has a merge
left; the nodes of one width form one ``lax.scan``. A vector costs ``O(sum_v W_v
(1 + merges_v))``: ``O(d log d)`` on shallow forests, ``O(d^2)`` on deep ones (a
chain goes to :mod:`jaxdp.consistency.chain`).

References:
  W. A. Thompson, "The problem of negative estimates of variance components", Ann.
  Math. Statist. 33 (1962); P. M. Pardalos, G. Xue, "Algorithms for the simple equal
  weighted isotonic regression problem on trees", Algorithmica 23 (1999).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache
from jaxdp.consistency.graph import ConstraintGraph

__all__ = [
  "SCHEDULE_MAX",
  "TreePlan",
  "scheduled_isotonic",
  "tree_isotonic",
  "tree_multipliers",
  "tree_plan",
  "tree_schedule",
  "windowed_isotonic",
]

SCHEDULE_MAX = 1024  # steps * dim up to which the static schedule is used


class TreePlan(NamedTuple):
  """The static layout of a tree graph (preorder numbering, ``p`` = preorder index).

  Attributes:
    order: ``order[p]`` the node at preorder index ``p`` (root first).
    parent: the preorder index of each preorder node's parent (the root its own).
    size: ``|subtree|`` of each preorder node.
    widths: per group of non-leaf nodes, the window width (a power of two).
    groups: per width, its nodes' preorder indices, deepest first.
    levels: ``(depth, widest)`` preorder indices of the nodes at each depth,
      deepest first, padded with ``dim`` (a column that is never read back).
  """

  order: np.ndarray
  parent: np.ndarray
  size: np.ndarray
  widths: tuple[int, ...]
  groups: tuple[np.ndarray, ...]
  levels: np.ndarray


@value_cache(maxsize=64)
def tree_plan(graph: ConstraintGraph) -> TreePlan:
  """The :class:`TreePlan` of a tree graph.

  Raises:
    ValueError: the graph is not a tree (the poset not a forest).
  """
  if not graph.is_tree:
    raise ValueError("the tree path needs a forest poset (a tree with n on top).")
  up = np.zeros(graph.dim, np.int64)
  up[list(graph.lo)] = list(graph.hi)
  children = [[] for _ in range(graph.dim)]
  for c in range(1, graph.dim):
    children[up[c]].append(c)
  order, stack = [], [0]
  while stack:
    v = stack.pop()
    order.append(v)
    stack.extend(reversed(children[v]))
  order = np.asarray(order, np.int32)
  pos = np.argsort(order)
  parent = pos[up[order]].astype(np.int32)
  size = np.ones(graph.dim, np.int32)
  depth = np.zeros(graph.dim, np.int32)
  for p in range(1, graph.dim):
    depth[p] = depth[parent[p]] + 1
  for p in range(graph.dim - 1, 0, -1):  # children after their parent in preorder
    size[parent[p]] += size[p]
  width = 1 << np.ceil(np.log2(size)).astype(np.int64)
  widths = tuple(int(w) for w in np.unique(width[size > 1]))
  groups = tuple(
    np.nonzero((width == w) & (size > 1))[0][::-1].astype(np.int32) for w in widths
  )
  per_depth = [np.nonzero(depth == k)[0] for k in range(int(depth.max()), 0, -1)]
  levels = np.full(
    (len(per_depth), max(map(len, per_depth), default=0)), graph.dim, np.int32
  )
  for k, nodes in enumerate(per_depth):
    levels[k, : len(nodes)] = nodes
  for a in (order, parent, size, levels, *groups):
    a.setflags(write=False)
  return TreePlan(order, parent, size, widths, groups, levels)


def tree_isotonic(y: jax.Array, graph: ConstraintGraph) -> tuple[jax.Array, jax.Array]:
  """The isotonic regression of each row of ``y`` (``(B, dim)`` float) on a tree:
  :func:`scheduled_isotonic` when its schedule is short, else
  :func:`windowed_isotonic`.

  Returns:
    ``(w, label)``: the regression, and per node the index of its block (equal
    labels, one block).

  Raises:
    ValueError: the graph is not a tree.
  """
  if len(tree_schedule(graph)[1]) * graph.dim <= SCHEDULE_MAX:
    return scheduled_isotonic(y, graph)
  return windowed_isotonic(y, graph)


@value_cache(maxsize=64)
def tree_schedule(graph: ConstraintGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(parent, node, below)``: the parent of each node (the root its own), and per
  step the node whose block grows and the mask of the nodes strictly below it."""
  plan = tree_plan(graph)
  parent = np.arange(graph.dim, dtype=np.int32)
  parent[list(graph.lo)] = list(graph.hi)
  below = np.zeros((graph.dim, graph.dim), bool)
  for p in range(graph.dim - 1, 0, -1):  # every child before its parent
    v, c = parent[plan.order[p]], plan.order[p]
    below[v] |= below[c]
    below[v, c] = True
  nodes = [v for v in plan.order[::-1] for _ in range(int(below[v].sum()))]
  return parent, np.asarray(nodes, np.int32), below[nodes]


def scheduled_isotonic(y: jax.Array, graph: ConstraintGraph) -> tuple[jax.Array, jax.Array]:
  """:func:`tree_isotonic` by the static schedule of :func:`tree_schedule`: each
  step lets one node's block absorb the largest adjacent block below, if larger."""
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
  return jnp.take_along_axis(sums / sizes, label, axis=1), label


def windowed_isotonic(y: jax.Array, graph: ConstraintGraph) -> tuple[jax.Array, jax.Array]:
  """:func:`tree_isotonic` in preorder windows, one merge per ``while_loop`` step."""
  plan = tree_plan(graph)
  b, dim = y.shape
  pad = max(plan.widths, default=1)
  sums = jnp.concatenate([y[:, plan.order], jnp.zeros((b, pad), y.dtype)], 1)
  sizes = jnp.ones_like(sums)
  ids = jnp.arange(dim + pad, dtype=jnp.int32)
  label = jnp.zeros((b, dim + pad), jnp.int32) + ids  # the top node of each block
  parent = jnp.asarray(np.r_[plan.parent, np.zeros(pad, np.int32)])
  size = jnp.asarray(np.r_[plan.size, np.zeros(pad, np.int32)])
  for width, nodes in zip(plan.widths, plan.groups):
    cols = jnp.arange(width, dtype=jnp.int32)

    def at_node(state, v, cols=cols, width=width):
      # candidates: block tops strictly inside v's subtree, their parent in v's block
      inside = (cols >= 1) & (cols < size[v])
      up = jnp.clip(jax.lax.dynamic_slice(parent, (v,), (width,)) - v, 0, width - 1)

      def merge(state):
        label, sums, sizes, _ = state
        lab = jax.lax.dynamic_slice(label, (jnp.int32(0), v), (b, width))
        s = jax.lax.dynamic_slice(sums, (jnp.int32(0), v), (b, width))
        c = jax.lax.dynamic_slice(sizes, (jnp.int32(0), v), (b, width))
        mean = s / c
        hangs = inside & (lab == v + cols) & (lab[:, up] == v)
        cand = jnp.where(hangs, mean, -jnp.inf)
        u = jnp.argmax(cand, axis=1)
        pool = jnp.max(cand, axis=1) > mean[:, 0]
        lab = jnp.where(pool[:, None] & (lab == (v + u)[:, None]), v, lab)
        pick = jnp.where(pool[:, None], cols == u[:, None], False)
        s = s.at[:, 0].add(jnp.sum(jnp.where(pick, s, 0.0), axis=1))
        c = c.at[:, 0].add(jnp.sum(jnp.where(pick, c, 0.0), axis=1))
        return (
          jax.lax.dynamic_update_slice(label, lab, (jnp.int32(0), v)),
          jax.lax.dynamic_update_slice(sums, s, (jnp.int32(0), v)),
          jax.lax.dynamic_update_slice(sizes, c, (jnp.int32(0), v)),
          jnp.any(pool),
        )

      out = jax.lax.while_loop(lambda st: st[3], merge, (*state, jnp.array(True)))
      return out[:3], None

    (label, sums, sizes), _ = jax.lax.scan(
      at_node, (label, sums, sizes), jnp.asarray(nodes)
    )
  pos = np.argsort(plan.order)
  w = jnp.take_along_axis(sums / sizes, label, axis=1)
  return w[:, pos], label[:, pos]


def tree_multipliers(
  y: jax.Array, w: jax.Array, label: jax.Array, graph: ConstraintGraph
) -> jax.Array:
  """The multipliers of a block solution ``w`` on a tree, one per edge.

  The exact multiplier of the edge above node ``v`` is 0 between two blocks and
  otherwise ``sum (y_i - w_i)`` over the nodes of ``v``'s block at or below ``v`` (the
  blocks further down each sum to 0 in exact arithmetic, so they are left out, as
  is their rounding); accumulated level by level from the deepest.

  Args:
    y: the vectors, ``(B, dim)``.
    w: their block solutions.
    label: per node its block (equal labels, one block).
    graph: the tree graph.

  Returns:
    ``lam``, ``(B, num_edges)``, edges in ``graph``'s order.
  """
  plan = tree_plan(graph)
  b = y.shape[0]
  pos = np.argsort(plan.order)
  parent = jnp.asarray(np.r_[plan.parent, graph.dim])  # the pad column: its own parent
  lab = jnp.concatenate([label[:, plan.order], jnp.zeros((b, 1), label.dtype)], 1)
  same = lab == lab[:, parent]  # joined to its parent within one block
  acc = jnp.concatenate([(y - w)[:, plan.order], jnp.zeros((b, 1), y.dtype)], 1)
  levels = jnp.asarray(plan.levels)

  def level(k, acc):
    nodes = levels[k]
    return acc.at[:, parent[nodes]].add(jnp.where(same[:, nodes], acc[:, nodes], 0.0))

  acc = jax.lax.fori_loop(0, len(plan.levels), level, acc)
  lo = pos[np.asarray(graph.lo)]
  return jnp.where(same[:, lo], acc[:, lo], 0.0)
