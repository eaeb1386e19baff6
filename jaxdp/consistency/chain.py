"""Exact batched isotonic regression on a chain: pool-adjacent-violators.

When the poset is a chain, the constraint graph (``n`` on top) is a path, and the
isotonic regression along it, read from the bottom up, is nondecreasing. Pool-
adjacent-violators pools two adjacent blocks whenever the lower one's mean is at
least the upper one's, and the result does not depend on the order of the pools.
One scan from the top down pools first: each maximal non-increasing run of values,
and each run into the block above it when the run's mean is at least that block's
(fewer blocks, so fewer steps below). Then a stack of blocks (sum and size): each
step either pushes the next block, or, when the block below the top has a larger
mean, pools the two. Every vector takes at most ``2 dim - 1`` steps, each a constant
number of array operations on the whole batch (the stack of every vector a column
of one array, its top block carried apart), so the batch runs as one
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
from jaxdp.consistency.certificate import Certificate, certify_path
from jaxdp.consistency.graph import ConstraintGraph

__all__ = ["CHUNK", "chain_isotonic", "chain_order"]


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


CHUNK = 128  # vectors per pool-adjacent-violators loop (lane-major stacks stay in cache)


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
  up = _permute(y, order)  # bottom-up
  up_t = up.T  # (n, B): the scans below step along the path, the batch in lanes
  block_sums, block_sizes = _blocks(up_t)  # adjacent violators pooled first
  sums, sizes, below = _chunked(_stack, block_sums.T, block_sizes.T)
  w_t, lam_t = _expand(up_t, sums, sizes, below)
  # in the scans' layout (nodes first): the same numbers in any node order
  cert = certify_path(up_t, w_t, lam_t[:-1], tol)
  w, lam = w_t.T, lam_t[:-1].T
  inverse = np.argsort(order)
  edge = inverse[np.asarray(graph.lo)]  # the path edge above each graph edge's lo
  return _permute(w, inverse), _permute(lam, edge), cert


def _permute(x: jax.Array, index: np.ndarray) -> jax.Array:
  """``x[:, index]`` for a static index; a flip (or nothing) when it is one."""
  if np.array_equal(index, np.arange(x.shape[1])):
    return x
  if np.array_equal(index, np.arange(x.shape[1])[::-1]):
    return x[:, ::-1]
  return x[:, index]


def _chunked(fn, *xs):
  """``fn(*xs)`` on ``CHUNK`` rows at a time (``lax.map``; padded with copies of
  the first row, dropped again): the loop stops when its slowest vector is done."""
  b = xs[0].shape[0]
  if b <= CHUNK:
    return fn(*xs)
  k = -(-b // CHUNK)
  pad = [
    jnp.concatenate([x, jnp.broadcast_to(x[:1], (k * CHUNK - b,) + x.shape[1:])])
    for x in xs
  ]
  out = jax.lax.map(lambda t: fn(*t), [x.reshape((k, CHUNK) + x.shape[1:]) for x in pad])
  return jax.tree.map(lambda a: a.reshape((k * CHUNK,) + a.shape[2:])[:b], out)


def _stack(block_sums: jax.Array, block_sizes: jax.Array):
  """Pool-adjacent-violators over the blocks of :func:`_blocks` (``(B, n)`` each: at
  each block's first position, its sum and size). Each step, per vector, either
  pools the top two blocks (the lower has the larger mean) or pushes the next block;
  the stacks are lane-major (each vector's blocks contiguous), in flat arrays.

  Returns:
    ``(sums, sizes, below)``: ``(B, n + 1)`` block sums and sizes from the bottom
    (rows past ``below`` unused) and the index of each vector's top block.
  """
  b, n = block_sums.shape
  base = jnp.arange(b) * (n + 1)
  rbase = jnp.arange(b) * n
  flat_s, flat_c = block_sums.reshape(-1), block_sizes.reshape(-1)

  def step(state):
    i, below, s1, c1, ss, cs, _ = state  # below: blocks stored under the top one
    at = base + jnp.maximum(below - 1, 0)
    s2, c2 = ss[at], cs[at]
    # the means the result is made of: pooling on them keeps it exactly ordered
    pool = (below >= 1) & (s2 / jnp.maximum(c2, 1.0) > s1 / c1)
    push = ~pool & (i < n)
    where = base + jnp.where(push, below, n)  # column n: a write never read
    ss = ss.at[where].set(s1, unique_indices=True)
    cs = cs.at[where].set(c1, unique_indices=True)
    nxt = rbase + jnp.minimum(i, n - 1)
    s3, c3 = flat_s[nxt], flat_c[nxt]
    s1 = jnp.where(pool, s1 + s2, jnp.where(push, s3, s1))
    c1 = jnp.where(pool, c1 + c2, jnp.where(push, c3, c1))
    i = i + jnp.where(push, c3, 0.0).astype(jnp.int32)
    return i, below + push - pool, s1, c1, ss, cs, jnp.any(pool | push)

  ss = jnp.zeros((b * (n + 1),), block_sums.dtype)
  s1, c1 = block_sums[:, 0], block_sizes[:, 0]
  state = (c1.astype(jnp.int32), jnp.zeros(b, jnp.int32), s1, c1, ss, ss, jnp.array(True))
  _, below, s1, c1, ss, cs, _ = jax.lax.while_loop(lambda s: s[-1], step, state)
  ss = ss.at[base + below].set(s1, unique_indices=True)
  cs = cs.at[base + below].set(c1, unique_indices=True)
  return ss.reshape(b, n + 1), cs.reshape(b, n + 1), below


def _expand(up_t: jax.Array, sums: jax.Array, sizes: jax.Array, below: jax.Array):
  """``(w, lam)`` along the path (``(n, B)`` each) from the blocks: one scan from the
  top down, each node taking its block's mean; ``lam`` of the edge above node
  ``k`` is minus the sum of ``up - w`` over the nodes of its block above ``k``
  (0 at a block's top node), the sum below ``k`` in exact arithmetic (a block sums
  to 0), kept small by starting from each block's top."""
  b, width = sums.shape
  # each block's mean and size in one complex number: one gather a row, not two
  blocks = jax.lax.complex(sums / jnp.maximum(sizes, 1.0), sizes).reshape(-1)
  base = jnp.arange(b) * width

  def down(carry, row):
    j, left, m, acc = carry
    new = left == 0  # the block below starts here
    j = j - new
    block = blocks[base + jnp.maximum(j, 0)]
    m = jnp.where(new, block.real, m)
    left = jnp.where(new, block.imag.astype(jnp.int32), left) - 1
    acc = jnp.where(new, 0.0, acc)
    lam = -acc
    return (j, left, m, acc + (row - m)), (m, lam)

  zero = jnp.zeros_like(up_t[0])
  carry = (below + 1, jnp.zeros_like(below), zero, zero)
  return jax.lax.scan(down, carry, up_t, reverse=True)[1]


def _blocks(x: jax.Array) -> tuple[jax.Array, jax.Array]:
  """``(sums, sizes)``, ``(n, B)`` each: the sum and the size of each block of a first
  pooling of ``x`` (``(n, B)``, bottom-up), at the block's first row (other rows:
  unused).

  One scan from the top down pools adjacent violators (Barlow et al. 1972, Section
  1.2: any order of pools gives the isotonic regression): each maximal run
  ``x[i] >= x[i + 1] >= ... >= x[j]``, then each run (at its first row ``i``: ``i =
  0`` or not ``x[i - 1] >= x[i]``) with the block above it (from ``j + 1``) when the
  run's mean is at least the block's.
  """
  more = jnp.concatenate([x[:-1] >= x[1:], jnp.zeros_like(x[:1], bool)], 0)
  first = jnp.concatenate([jnp.ones_like(x[:1], bool), ~more[:-1]], 0)  # NaN too

  def back(carry, row):
    s, c, bs, bc, bm = carry  # the run from this row on; the block above the run
    xi, more_i, first_i = row
    s, c = xi + jnp.where(more_i, s, 0.0), 1.0 + jnp.where(more_i, c, 0.0)
    pool = s / c >= bm
    s_out, c_out = s + jnp.where(pool, bs, 0.0), c + jnp.where(pool, bc, 0.0)
    bs, bc = jnp.where(first_i, s_out, bs), jnp.where(first_i, c_out, bc)
    bm = jnp.where(first_i, s_out / c_out, bm)
    return (s, c, bs, bc, bm), (s_out, c_out)

  zero = jnp.zeros_like(x[0])
  carry = (zero, zero, zero, zero, jnp.full_like(zero, jnp.inf))  # no block above n
  return jax.lax.scan(back, carry, (x, more, first), reverse=True)[1]
