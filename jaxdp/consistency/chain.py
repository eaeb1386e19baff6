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

from jaxdp.consistency.certificate import Certificate, certify
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


def chain_isotonic(
  y: jax.Array, graph: ConstraintGraph, tol: float
) -> tuple[jax.Array, jax.Array, Certificate]:
  """The isotonic regression of each row of ``y`` (``(B, dim)`` float) on a path.

  Returns:
    ``(w, lam, certificate)``: the regression, its multipliers (one per edge of
    ``graph``: 0 between blocks, else the sum of ``y - w`` over the path below the
    edge, whose earlier blocks each sum to 0, so it stays at the size of the
    multipliers) and its :class:`~jaxdp.consistency.Certificate`.

  Raises:
    ValueError: the graph is not a path.
  """
  order = chain_order(graph)
  if order is None:
    raise ValueError("the chain path needs a chain poset (a path with n on top).")
  b, n = y.shape
  lanes = jnp.arange(b)
  # adjacent violators share a block (Barlow et al. 1972, Section 1.2): each run
  # with y_i >= y_(i+1) is pooled first, and pushed whole; flat, one index per read
  up = y[:, order]
  runs = _runs(up.T).reshape(-1, 2)  # (n * B, 2): sum and size from i to its run's end

  def step(state):
    i, below, s1, c1, stack, _ = state  # below: blocks stored under the top one
    s2, c2 = stack[jnp.maximum(below - 1, 0) * b + lanes].T
    # the means the result is made of: pooling on them keeps it exactly ordered
    pool = (below >= 1) & (s2 / jnp.maximum(c2, 1.0) > s1 / c1)
    push = ~pool & (i < n)
    where = jnp.where(push, below, n) * b + lanes  # row n: a write never read
    stack = stack.at[where].set(jnp.stack([s1, c1], 1), unique_indices=True)
    s3, c3 = runs[jnp.minimum(i, n - 1) * b + lanes].T
    s1 = jnp.where(pool, s1 + s2, jnp.where(push, s3, s1))
    c1 = jnp.where(pool, c1 + c2, jnp.where(push, c3, c1))
    i = i + jnp.where(push, c3, 0.0).astype(jnp.int32)
    return i, below + push - pool, s1, c1, stack, jnp.any(pool | push)

  stack = jnp.zeros(((n + 1) * b, 2), y.dtype)
  s1, c1 = runs[:b].T
  state = (c1.astype(jnp.int32), jnp.zeros(b, jnp.int32), s1, c1, stack, jnp.array(True))
  _, below, s1, c1, stack, _ = jax.lax.while_loop(lambda s: s[5], step, state)
  stack = stack.reshape(n + 1, b, 2).at[below, lanes].set(jnp.stack([s1, c1], 1))[:n]
  blocks = jnp.arange(n)[:, None] <= below  # (n, B): the rows holding a block
  size = jnp.where(blocks, stack[..., 1], 0.0).astype(jnp.int32)
  first = jnp.where(blocks, _cumsum(size) - size, n)  # each block's first node
  marks = jnp.zeros((n + 1, b), jnp.int32).at[first, lanes].add(1)
  block = _cumsum(marks[:n]) - 1  # (n, B): the block of each node
  means = stack[..., 0] / jnp.maximum(stack[..., 1], 1.0)
  w_t = jnp.take_along_axis(means, block, 0)
  lam_t = jnp.where(block[:-1] == block[1:], _cumsum(up.T - w_t)[:-1], 0.0)
  w, lam = w_t.T, lam_t.T
  path = ConstraintGraph(n, tuple(range(n - 1)), tuple(range(1, n)))
  cert = certify(up, w, lam, path, tol)  # the same numbers in any node order
  inverse = np.argsort(order)
  edge = inverse[np.asarray(graph.lo)]  # the path edge above each graph edge's lo
  return w[:, inverse], lam[:, edge], cert


def _cumsum(x: jax.Array) -> jax.Array:
  """Cumulative sums down the first axis: a ``lax.scan`` over its rows, several
  times faster on CPU than ``jnp.cumsum`` on the same array."""
  return jax.lax.scan(lambda c, r: (c + r, c + r), jnp.zeros_like(x[0]), x, unroll=8)[1]


def _runs(x: jax.Array) -> jax.Array:
  """``(n, B, 2)``: per row ``i`` of ``x`` (``(n, B)``), the sum and the size of
  ``x[i..j]``, ``j`` the end of the run ``x[i] >= x[i + 1] >= ... >= x[j]``."""
  cont = jnp.concatenate([x[:-1] >= x[1:], jnp.zeros_like(x[:1], bool)], 0)

  def back(carry, row):
    s, c = carry
    xi, more = row
    s, c = xi + jnp.where(more, s, 0.0), 1.0 + jnp.where(more, c, 0.0)
    return (s, c), jnp.stack([s, c], -1)

  zero = jnp.zeros_like(x[0])
  return jax.lax.scan(back, (zero, zero), (x, cont), reverse=True, unroll=8)[1]
