"""Exact discrete choices: exactly uniform integers below a bound, the unranking of a
poset-ball object, and the integer coefficients of its simplex.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.samplers.exact_tables import ExactTables
from jaxdp.typing import ArrayLike, KeyArray


def uniform_below(key: KeyArray, total: int, m: int) -> jax.Array:
  """``m`` independent, exactly uniform int64 in [0, total) (0 < total < 2^61).

  A 62-bit draw X is accepted when X < L = floor(2^62 / total) total, and then
  X mod total is uniform (each residue has exactly L / total preimages below L).
  Rejected samples are redrawn with fresh bits until all are accepted; acceptance
  is above 1 - total / 2^62 (1 - 1.3e-7 for NHIS-3), so a second round is rare.
  """
  return uniform_below_each(key, jnp.full((m,), total, jnp.int64), m)


def uniform_below_each(key: KeyArray, total: jax.Array, n: int) -> jax.Array:
  """``n`` exactly uniform int64, entry i in [0, total[i]) (1 <= total < 2^61): 62-bit
  draws, rejected at or above the largest multiple of total[i] below 2^62 and
  redrawn (fresh bits per round) until all are accepted."""
  total = total.astype(jnp.int64)
  limit = (jnp.int64(1 << 62) // total) * total

  def draw(i):
    return int62(jax.random.bits(jax.random.fold_in(key, i), (n, 2), jnp.uint32))

  def body(state):
    x, i = state
    return jnp.where(x < limit, x, draw(i)), i + 1

  x, _ = lax.while_loop(lambda st: jnp.any(st[0] >= limit), body, (draw(0), 1))
  return x % total


def int62(w):
  """62-bit non-negative int64 from uint32 word pairs ``w[..., 0]`` (high; its top
  two bits are not used) and ``w[..., 1]``."""
  w = w.astype(jnp.uint64)
  x = ((w[..., 0] & np.uint64(0x3FFFFFFF)) << np.uint64(32)) | w[..., 1]
  return x.astype(jnp.int64)


def unrank(rank: ArrayLike, tables: ExactTables, d: int) -> tuple[jax.Array, jax.Array]:
  """Object number ``rank`` in [0, N(P)): a bijection onto the objects
  (A, ext(A), ext(B)), so a uniform rank gives an exactly uniform object.

  A is found by descending the binary trie over its bits with integer object counts;
  the rest r in [0, e(A) e(B)) splits into r // e(B) (the extension of A) and
  r % e(B) (of B); an extension of S with rank q takes as next top the maximal x whose
  cumulative count of extensions of S \\ x (over maximal x in index order) passes q.

  Returns:
    seq (m, d) int32: A top down, then B top down; size_a (m,) int32: |A|.
  """
  m = rank.shape[0]
  a, r = trie_subset(rank, tables, d)
  full = (1 << d) - 1
  e_b = tables.ext[full ^ a]
  r_a, r_b = r // e_b, r % e_b
  size_a = lax.population_count(a.astype(jnp.uint32)).astype(jnp.int32)
  bits = jnp.left_shift(jnp.uint32(1), jnp.arange(d, dtype=jnp.uint32))
  rest = a.astype(jnp.uint32) ^ jnp.uint32(full)

  def step(i, state):
    s_set, q, seq = state
    switch = size_a == i
    s_set = jnp.where(switch, rest, s_set)
    q = jnp.where(switch, r_b, q)
    member = (s_set[:, None] & bits) != 0
    top = member & ((s_set[:, None] & tables.strict_up[None, :]) == 0)
    w = jnp.where(top, tables.ext[(s_set[:, None] ^ bits).astype(jnp.int32)], 0)
    c = jnp.cumsum(w, axis=1)
    passed = c <= q[:, None]  # q lies beyond every extension through x
    x = jnp.sum(passed, axis=1).astype(jnp.int32)
    q = q - jnp.max(jnp.where(passed, c, 0), axis=1)
    return s_set ^ bits[x], q, seq.at[:, i].set(x)

  # a loop, not d unrolled steps: XLA:CPU fuses the unrolled graph badly
  _, _, seq = lax.fori_loop(
    0, d, step, (a.astype(jnp.uint32), r_a, jnp.zeros((m, d), jnp.int32))
  )
  return seq, size_a


def trie_subset(
  rank: ArrayLike, tables: ExactTables, d: int
) -> tuple[jax.Array, jax.Array]:
  """The first step of :func:`unrank`: ``(a, r)``, A's bit mask (int64; bit x set iff
  element x is in A) and the rest r in [0, e(A) e(B)), by descending the binary trie
  over A's bits with integer object counts."""
  r = rank
  a = jnp.zeros(rank.shape, jnp.int64)
  for level in range(d):
    left = tables.trie_left[(1 << level) - 1 + a]
    right = r >= left
    r = jnp.where(right, r - left, r)
    a = 2 * a + right
  return a, r


def simplex_coefficients(seq: ArrayLike, size_a: ArrayLike, up: ArrayLike) -> jax.Array:
  """The (m, d + 2, d + 1) int8 matrix whose row i is vertex i of the object's
  simplex: (1, 1_F0..F_k) for A (F_0 empty, then A's elements' up-sets added top
  down), -(1, 1_G0..G_l) for B. The K-norm noise is ``scale * sum_i E_i row_i``."""
  m, d = seq.shape
  rows = [jnp.zeros((m, d), bool)]  # F_0
  f = jnp.zeros((m, d), bool)
  for step in range(d):
    f = jnp.where((size_a == step)[:, None], False, f) | up[seq[:, step]]
    rows.append(f)
  # row 0: F_0 (A); rows 1..d: chain filters; B's empty G_0 sits at index k + 1
  filt = jnp.stack(rows, axis=1)  # (m, d + 1, d)
  idx = jnp.arange(d + 2)
  k = size_a[:, None]
  # vertex i: i <= k -> A's F_i = filt[i]; i == k + 1 -> G_0 (empty); i > k + 1 ->
  # G_(i-k-1) = filt[i - 1]
  src = jnp.where(idx <= k, idx, jnp.maximum(idx - 1, 0))
  chosen = jnp.take_along_axis(filt, src[:, :, None], axis=1)  # (m, d + 2, d)
  chosen = jnp.where((idx == k + 1)[:, :, None], False, chosen)
  sign = jnp.where(idx <= k, 1, -1).astype(jnp.int8)  # (m, d + 2)
  vec = jnp.concatenate(
    [jnp.ones((m, d + 2, 1), jnp.int8), chosen.astype(jnp.int8)], axis=2
  )
  return vec * sign[:, :, None]
