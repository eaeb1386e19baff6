"""Exact batched isotonic regression on a chain: pool-adjacent-violators.

When the poset is a chain, the constraint graph (``n`` on top) is a path, and the
isotonic regression along it, read from the bottom up, is nondecreasing. Pool-
adjacent-violators pools two adjacent blocks whenever the lower one's mean is at
least the upper one's, and the result does not depend on the order of the pools.
The solver keeps each vector with its nodes from the top down, the order in which a
questionnaire numbers them (so that such a chain needs no permutation). One scan
from the top down pools first: each maximal non-increasing run of values (read
from the bottom up), and each run into the block above it when the run's mean is
at least that block's (fewer blocks, so fewer steps below). Then a stack of blocks
(sum and size), filled from the bottom up: each step either pushes the next block,
or, when the block below the top has a larger mean, pools the two. Every vector
takes at most ``2 dim - 1`` steps, each a constant number of array operations on
the whole batch (the stack of every vector in its column of the blocks' array, in
the rows already read, its top block carried apart), so the batch runs as one
``lax.while_loop`` that stops when no vector has a step left: ``O(dim)`` work per
vector, no tolerance and no iteration count.

References:
  M. Ayer, H. D. Brunk, G. M. Ewing, W. T. Reid, E. Silverman, "An empirical
  distribution function for sampling with incomplete information", Ann. Math.
  Statist. 26 (1955); R. E. Barlow, D. J. Bartholomew, J. M. Bremner, H. D. Brunk,
  "Statistical Inference under Order Restrictions", Wiley 1972, Section 1.2 (any
  order of pooling adjacent violators gives the isotonic regression).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache
from jaxdp.consistency.certificate import Certificate, from_sums, gap_scale
from jaxdp.consistency.graph import ConstraintGraph

__all__ = ["chain_isotonic", "chain_order"]


@value_cache(maxsize=64)
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
    ``graph``: 0 between blocks, else the sum of ``y - w`` over the nodes of the
    edge's block above the edge, negated, summed from the block's top down) and its
    :class:`~jaxdp.consistency.Certificate`.

  Raises:
    ValueError: the graph is not a path.
  """
  order = chain_order(graph)
  if order is None:
    raise ValueError("the chain path needs a chain poset (a path with n on top).")
  down = order[::-1]  # the nodes from the top (node 0) down
  # (dim, B): every step below reads a row (a node), the batch in lanes
  x = _rows(y.T, down)
  sums, sizes, below = _stack(*_blocks(x))  # adjacent violators pooled first
  top = jnp.maximum(1.0, jnp.max(jnp.abs(y), axis=-1))
  inv = gap_scale(top)
  (w_t, lam_t), (violation, scaled) = _expand(x, sums, sizes, below, inv)
  cert = from_sums(violation, scaled, inv, top, tol)
  inverse = np.argsort(down)
  edge = inverse[np.asarray(graph.lo)]  # the row of each graph edge's lower node
  return _rows(w_t, inverse).T, _rows(lam_t, edge).T, cert


def _rows(x: jax.Array, index: np.ndarray) -> jax.Array:
  """``x[index]`` for a static index; a slice (or nothing) when it is a range."""
  start = int(index[0]) if len(index) else 0
  if np.array_equal(index, np.arange(start, start + len(index))):
    return x[start : start + len(index)]
  return x[index]


def _stack(block_sums: jax.Array, block_sizes: jax.Array):
  """Pool-adjacent-violators over the blocks of :func:`_blocks` (``(n, B)`` each,
  from the top down: at each block's lowest row, its sum and size). Each step, per
  vector, either pools the top two blocks (the lower has the larger mean) or pushes
  the next block up. The stack is kept in the rows already read: ``k`` blocks
  stored take at least ``k`` rows, from the last up, and the next block is read
  above them.

  Returns:
    ``(sums, sizes, below)``: ``(n, B)`` each vector's stack of blocks, the one at
    the bottom of the path on the last row, the next one up on the row above and
    so on (the rows above the top block's unused), and ``(B,)`` the index of each
    vector's top block.
  """
  n, b = block_sums.shape
  last = (n - 1) * b + jnp.arange(b)  # each vector's bottom row, in the flat arrays

  def step(state):
    i, below, s1, c1, ss, cs, _ = state  # i rows read; below: blocks under the top
    at = last - b * jnp.maximum(below - 1, 0)
    s2, c2 = ss[at], cs[at]
    # the means the result is made of: pooling on them keeps it exactly ordered
    pool = (below >= 1) & (s2 / jnp.maximum(c2, 1.0) > s1 / c1)
    push = ~pool & (i < n)
    where = jnp.where(push, last - b * below, at)  # no push: the same value again
    ss = ss.at[where].set(jnp.where(push, s1, s2), unique_indices=True)
    cs = cs.at[where].set(jnp.where(push, c1, c2), unique_indices=True)
    nxt = last - b * jnp.minimum(i, n - 1)
    s3, c3 = ss[nxt], cs[nxt]
    s1 = jnp.where(pool, s1 + s2, jnp.where(push, s3, s1))
    c1 = jnp.where(pool, c1 + c2, jnp.where(push, c3, c1))
    i = i + jnp.where(push, c3, 0.0).astype(jnp.int32)
    return i, below + push - pool, s1, c1, ss, cs, jnp.any(pool | push)

  s1, c1 = block_sums[-1], block_sizes[-1]
  ss, cs = block_sums.reshape(-1), block_sizes.reshape(-1)
  state = (c1.astype(jnp.int32), jnp.zeros(b, jnp.int32), s1, c1, ss, cs, jnp.array(True))
  _, below, s1, c1, ss, cs, _ = jax.lax.while_loop(lambda s: s[-1], step, state)
  ss = ss.at[last - b * below].set(s1, unique_indices=True)
  cs = cs.at[last - b * below].set(c1, unique_indices=True)
  return ss.reshape(n, b), cs.reshape(n, b), below


def _expand(
  x: jax.Array, sums: jax.Array, sizes: jax.Array, below: jax.Array, inv: jax.Array
):
  """``(w, lam)`` along the path (``(n, B)`` each, from the top down) from the
  stacks of :func:`_stack`, and the certificate's sums: one scan from the top down,
  each node taking its block's mean; ``lam`` of the edge above node ``k`` is minus
  the sum of ``x - w`` over the nodes of its block above ``k`` (0 at a block's top
  node), the sum below ``k`` in exact arithmetic (a block sums to 0), kept small by
  starting from each block's top.

  The certificate (:func:`~jaxdp.consistency.certificate.certify`'s sums, with
  ``lam`` clipped at 0) is summed as the scan goes: node ``k``'s residual ``w_k -
  x_k + lam_k - lam_(k+1)``, scaled by ``inv``
  (:func:`~jaxdp.consistency.certificate.gap_scale`), once the edge below it is
  known, and the largest ``w_lo - w_hi``. The gap's other sum, of ``lam * (w_hi -
  w_lo)`` over the edges, is 0 here: ``lam`` is 0 on the edge above a block's top
  node, and ``w`` is constant within a block.

  Returns:
    ``((w, lam), (violation, scaled gap))``.
  """
  n, b = sums.shape
  flat_sums, flat_sizes = sums.reshape(-1), sizes.reshape(-1)
  last = (n - 1) * b + jnp.arange(b)

  def down(carry, row):
    t, j, left, m_up, acc, x_up, lam_up, violation, squares = carry
    new = left == 0  # the block below starts here
    j = j - new
    at = last - b * jnp.maximum(j, 0)
    size = flat_sizes[at]
    m = jnp.where(new, flat_sums[at] / jnp.maximum(size, 1.0), m_up)
    left = jnp.where(new, size.astype(jnp.int32), left) - 1
    acc = jnp.where(new, 0.0, acc)
    lam = -acc
    # the node above: its residual, and the edge between it and this node
    above = t > 0
    res = (m_up - x_up + jnp.maximum(lam_up, 0.0) - jnp.maximum(lam, 0.0)) * inv
    squares = squares + jnp.where(above, res * res, 0.0)
    violation = jnp.where(above, jnp.maximum(violation, m - m_up), violation)
    carry = (t + 1, j, left, m, acc + (row - m), row, lam, violation, squares)
    return carry, (m, lam)

  zero = jnp.zeros_like(x[0])
  init = (jnp.int32(0), below + 1, jnp.zeros_like(below)) + (zero,) * 6
  out, (w, lam) = jax.lax.scan(down, init, x)
  m, x_last, lam_last, violation, squares = out[3], *out[5:]
  res = (m - x_last + jnp.maximum(lam_last, 0.0)) * inv  # the bottom node
  return (w, lam), (violation, 0.5 * (squares + res * res))


def _blocks(x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(sums, sizes)``, ``(n, B)`` each: the sum and the size of each block of a first
  pooling of ``x`` (``(n, B)``, from the top down), at the block's lowest row (other
  rows: the part of the block down to the row).

  One scan from the top down pools adjacent violators (Barlow et al. 1972, Section
  1.2: any order of pools gives the isotonic regression): each maximal run
  ``x[i] >= x[i - 1] >= ... >= x[j]`` (``i > j``: from the bottom up), then each run
  with the block above it (the block ending on row ``j - 1``) when the run's mean is
  at least the block's. A row that does not continue the run above it (``x[t] <
  x[t - 1]``, or NaN) starts a run, and the block on the row above becomes the
  block above: the scan reads ``x`` alone.
  """

  def step(carry, xi):
    prev, s, e, c, so, co, bs, bc, bm = carry
    more = xi >= prev  # the run goes on
    bs, bc = jnp.where(more, bs, so), jnp.where(more, bc, co)
    bm = jnp.where(more, bm, so / jnp.maximum(co, 1.0))
    # the run's sum, compensated (Kahan): a long run of ties keeps its mean to rounding
    t = jnp.where(more, s, 0.0)
    add = xi - jnp.where(more, e, 0.0)
    s = t + add
    e = (s - t) - add
    c = 1.0 + jnp.where(more, c, 0.0)
    pool = s / c >= bm
    so, co = s + jnp.where(pool, bs, 0.0), c + jnp.where(pool, bc, 0.0)
    return (xi, s, e, c, so, co, bs, bc, bm), (so, co)

  zero = jnp.zeros_like(x[0])
  # above the top row: no run (NaN), and an empty block (pooling it changes nothing)
  carry = (jnp.full_like(zero, jnp.nan),) + (zero,) * 8
  return jax.lax.scan(step, carry, x)[1]
