"""Exact batched isotonic regression on a chain: pool-adjacent-violators.

When the poset is a chain, the constraint graph (``n`` on top) is a path, and the
isotonic regression along it, read from the bottom up, is nondecreasing. Pool-
adjacent-violators keeps a stack of blocks (sum and size): each step either pushes
the next value as a block, or, when the block below the top has a larger mean,
pools the two. Every vector takes at most ``2 dim - 1`` steps, each a constant
number of array operations on the whole batch (the stack of every vector a column
of one array, its top block carried apart), so the batch runs as one
``lax.while_loop`` that stops when no vector has a step left: ``O(dim)`` work per
vector, no tolerance and no iteration count.

References:
  M. Ayer, H. D. Brunk, G. M. Ewing, W. T. Reid, E. Silverman, "An empirical
  distribution function for sampling with incomplete information", Ann. Math.
  Statist. 26 (1955); R. E. Barlow, D. J. Bartholomew, J. M. Bremner, H. D. Brunk,
  "Statistical Inference under Order Restrictions", Wiley 1972, Section 1.2.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.consistency.graph import ConstraintGraph

__all__ = ["chain_isotonic", "chain_order"]


@functools.lru_cache(maxsize=64)
def chain_order(graph: ConstraintGraph) -> np.ndarray | None:
  """The nodes of a path-shaped graph from the bottom up (node 0, ``n``, last), or
  None when the graph is not a path (the poset not a chain)."""
  if not graph.is_tree or np.any(np.bincount(graph.hi, minlength=graph.dim) > 1):
    return None
  parent = dict(zip(graph.lo, graph.hi))
  below = set(graph.hi)
  node = next(v for v in range(graph.dim) if v not in below)  # the bottom
  order = [node]
  while node != 0:
    node = parent[node]
    order.append(node)
  out = np.asarray(order, np.int32)
  out.setflags(write=False)
  return out


def chain_isotonic(y: jax.Array, graph: ConstraintGraph) -> tuple[jax.Array, jax.Array]:
  """The isotonic regression of each row of ``y`` (``(B, dim)`` float) on a path.

  Returns:
    ``(w, label)``: the regression, and per node the index of its block (equal
    labels, one block; blocks are numbered from the bottom up).

  Raises:
    ValueError: the graph is not a path.
  """
  order = chain_order(graph)
  if order is None:
    raise ValueError("the chain path needs a chain poset (a path with n on top).")
  b, n = y.shape
  lanes = jnp.arange(b)
  # bottom-up values, one column per vector, and a zero row read past the end
  yt = jnp.concatenate([y[:, order].T, jnp.zeros((1, b), y.dtype)], 0)

  def step(state):
    i, below, s1, c1, stack, _ = state  # below: blocks stored under the top one
    s2, c2 = stack[jnp.maximum(below - 1, 0), lanes].T
    # the means the result is made of: pooling on them keeps it exactly ordered
    pool = (below >= 1) & (s2 / jnp.maximum(c2, 1.0) > s1 / c1)
    push = ~pool & (i < n)
    where = jnp.where(push, below, n)  # row n: a write that is never read
    stack = stack.at[where, lanes].set(jnp.stack([s1, c1], 1))
    s1 = jnp.where(pool, s1 + s2, jnp.where(push, yt[i, lanes], s1))
    c1 = jnp.where(pool, c1 + c2, jnp.where(push, 1.0, c1))
    return i + push, below + push - pool, s1, c1, stack, jnp.any(pool | push)

  stack = jnp.zeros((n + 1, b, 2), y.dtype)
  zeros = jnp.zeros(b, jnp.int32)
  state = (zeros + 1, zeros, yt[0], jnp.ones(b, y.dtype), stack, jnp.array(True))
  _, below, s1, c1, stack, _ = jax.lax.while_loop(lambda s: s[5], step, state)
  stack = stack.at[below, lanes].set(jnp.stack([s1, c1], 1))[:n]
  blocks = jnp.arange(n)[:, None] <= below  # (n, B): the rows holding a block
  size = jnp.where(blocks, stack[..., 1], 0.0).astype(jnp.int32)
  first = jnp.where(blocks, jnp.cumsum(size, 0) - size, n)  # each block's first node
  marks = jnp.zeros((n + 1, b), jnp.int32).at[first, lanes].add(1)
  block = jnp.cumsum(marks[:n], 0) - 1  # (n, B): the block of each bottom-up node
  means = stack[..., 0] / jnp.maximum(stack[..., 1], 1.0)
  w = jnp.take_along_axis(means, block, 0)
  inverse = np.argsort(order)
  return w.T[:, inverse], block.T[:, inverse]
