"""Exact 128-bit integer ranks on the device: uniform ranks in [0, N(P)) for
N(P) < 2^75 and their unranking to poset-ball objects, every count two uint64 limbs
``(hi, lo)`` (value ``hi 2^64 + lo``) and every operation exact (carries, borrows,
restoring division), for posets with d <= 22 whose N(P) is too large for int64.

The object is the one :func:`jaxdp.exact.choices.unrank` gives for the same rank,
with the same bijection (a trie over the bits of A, then r // e(B) and r % e(B)
unranked as extensions), so a uniform rank gives an exactly uniform object.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.samplers.exact_wide_tables import WideTables
from jaxdp.typing import KeyArray

RANK_BITS = 96  # random bits per rank draw (three ChaCha20/threefry words)
MAX_TOTAL_BITS = 75  # N(P) < 2^75, so a draw is rejected with probability < 2^-21

M32 = np.uint64(0xFFFFFFFF)


def const(value: int) -> tuple[jax.Array, jax.Array]:
  """A Python int in [0, 2^128) as uint64 limbs."""
  if not 0 <= value < 1 << 128:
    raise ValueError(f"a 128-bit limb constant must be in [0, 2^128); got {value}.")
  return jnp.uint64(value >> 64), jnp.uint64(value & ((1 << 64) - 1))


def add(a, b):
  """``a + b`` mod 2^128."""
  lo = a[1] + b[1]
  return a[0] + b[0] + (lo < b[1]).astype(jnp.uint64), lo


def sub(a, b):
  """``a - b`` mod 2^128 (exact when a >= b)."""
  lo = a[1] - b[1]
  return a[0] - b[0] - (a[1] < b[1]).astype(jnp.uint64), lo


def less(a, b) -> jax.Array:
  """``a < b``."""
  return (a[0] < b[0]) | ((a[0] == b[0]) & (a[1] < b[1]))


def select(cond, a, b):
  """``where(cond, a, b)`` limb by limb."""
  return jnp.where(cond, a[0], b[0]), jnp.where(cond, a[1], b[1])


def bit(a, j) -> jax.Array:
  """Bit ``j`` (0 <= j < 128, traced or static) of ``a`` as uint64 0/1."""
  j = jnp.asarray(j, jnp.uint64)
  high = j >= 64
  word = jnp.where(high, a[0], a[1])
  return (word >> jnp.where(high, j - 64, j)) & jnp.uint64(1)


def shl1(a, low_bit):
  """``2 a + low_bit`` mod 2^128 (low_bit 0/1 uint64)."""
  return (a[0] << 1) | (a[1] >> 63), (a[1] << 1) | low_bit


def shr(a, s: int):
  """``a >> s`` for a static shift 0 <= s < 128."""
  if s == 0:
    return a
  if s >= 64:
    return jnp.zeros_like(a[0]), a[0] >> (s - 64)
  return a[0] >> s, (a[1] >> s) | (a[0] << (64 - s))


def divmod_wide(x, div, bits: int, skip: int = 0):
  """``(x // div, x % div)`` by restoring division, for ``x < 2^bits`` (bits <= 128),
  ``1 <= div < 2^127``; ``skip`` leading bits go straight into the remainder, which
  needs ``x >> (bits - skip) < div`` (e.g. ``div >= 2^skip``). The quotient holds the
  remaining ``bits - skip`` bits (the skipped part of the quotient is zero)."""
  zero = jnp.zeros_like(x[1])
  rem = shr(x, bits - skip) if skip else (zero, zero)

  def step(i, state):
    q, r = state
    r = shl1(r, bit(x, bits - skip - 1 - i))
    take = ~less(r, div)
    r = select(take, sub(r, div), r)
    return shl1(q, take.astype(jnp.uint64)), r

  return lax.fori_loop(0, bits - skip, step, ((zero, zero), rem))


def words_to_limbs(w):
  """96-bit integers from uint32 word triples ``w[..., :3]`` (most significant first)."""
  w = w.astype(jnp.uint64)
  return w[..., 0], (w[..., 1] << 32) | w[..., 2]


def uniform_below_wide(key: KeyArray, total: int, m: int):
  """``m`` exactly uniform ranks in [0, total) (1 <= total < 2^75) as limbs.

  A 96-bit draw X is accepted when X < L = floor(2^96 / total) total, and then
  X mod total is uniform (each residue has exactly L / total preimages below L);
  rejected samples are redrawn with fresh bits (``fold_in`` by round) until all are
  accepted. A rejection has probability total / 2^96 < 2^-21.
  """
  if not 1 <= total < 1 << MAX_TOTAL_BITS:
    raise ValueError(f"total must be in [1, 2^{MAX_TOTAL_BITS}); got {total}.")
  limit = const(((1 << RANK_BITS) // total) * total)

  def draw(i):
    return words_to_limbs(jax.random.bits(jax.random.fold_in(key, i), (m, 3), jnp.uint32))

  def body(state):
    x, i = state
    return select(less(x, limit), x, draw(i)), i + 1

  def cond(state):
    return jnp.any(~less(state[0], limit))

  x, _ = lax.while_loop(cond, body, (draw(0), 1))
  skip = total.bit_length() - 1  # x >> (96 - skip) < 2^skip <= total
  return divmod_wide(x, const(total), RANK_BITS, skip)[1]


def unrank_wide(
  rank,
  tables: WideTables,
  d: int,
  total_bits: int,
  ext64: bool = False,
  trie64: bool = False,
):
  """Object number ``rank`` (limbs, below N(P) < 2^total_bits) in [0, N(P)): the
  bijection of :func:`jaxdp.exact.choices.unrank` in exact 128-bit arithmetic.

  ``ext64`` (static): every e(S) is below 2^64 (``tables.ext_hi`` is all zero, as
  for the 22-element fence, whose N(P) alone exceeds 2^64). The counts after the
  trie (e(S), the ranks among A's and B's extensions, the cumulative counts) are
  then one uint64 each and ``ext_hi`` is never read: the same values, half the
  gathers. ``trie64`` (static): ``tables.trie_hi`` is all zero (N(P) < 2^64) and is
  never read either. A high limb that is all zero is never gathered, so XLA cannot
  turn it into a materialised 2^d-entry zero array when the tables are constants
  of the compiled code (8 bytes per subset of temporary memory).

  Returns:
    seq (m, d) int32: A top down, then B top down; size_a (m,) int32: |A|.
  """
  m = rank[0].shape[0]

  def descend(level, state):  # the trie over A's bits, one level per step
    a, r_hi, r_lo = state
    idx = (jnp.left_shift(jnp.int64(1), level) - 1) + a
    left = (jnp.zeros_like(r_hi) if trie64 else tables.trie_hi[idx]), tables.trie_lo[idx]
    right = ~less((r_hi, r_lo), left)
    r_hi, r_lo = select(right, sub((r_hi, r_lo), left), (r_hi, r_lo))
    return 2 * a + right, r_hi, r_lo

  a, r_hi, r_lo = lax.fori_loop(0, d, descend, (jnp.zeros((m,), jnp.int64), *rank))
  r = r_hi, r_lo
  full = (1 << d) - 1
  comp = full ^ a
  zero = jnp.zeros((m,), jnp.uint64)
  ext_hi = (lambda idx: zero) if ext64 else (lambda idx: tables.ext_hi[idx])
  r_a, r_b = divmod_wide(r, (ext_hi(comp), tables.ext_lo[comp]), total_bits)
  size_a = lax.population_count(a.astype(jnp.uint32)).astype(jnp.int32)
  rest = a.astype(jnp.uint32) ^ jnp.uint32(full)
  # below 2^64 every count is its low limb: one-limb tuples and native arithmetic
  if ext64:
    ops = _one_limb
    r_a, r_b = r_a[1:], r_b[1:]
    ext = lambda top, idx: (jnp.where(top, tables.ext_lo[idx], zero),)
  else:
    ops = _two_limbs
    ext = lambda top, idx: (
      jnp.where(top, ext_hi(idx), zero),
      jnp.where(top, tables.ext_lo[idx], zero),
    )
  w_add, w_sub, w_less, w_select = ops

  def step(i, state):
    s_set, q, seq = state
    switch = size_a == i
    s_set = jnp.where(switch, rest, s_set)
    q = w_select(switch, r_b, q)
    # the cumulative counts over the maximal x in index order, element by element
    # (fused elementwise work; a cumsum over (m, d) limbs is slower on XLA:CPU)
    c = before = tuple(zero for _ in q)
    x = jnp.zeros((m,), jnp.int32)
    for j in range(d):
      bit_j = jnp.uint32(1 << j)
      top = ((s_set & bit_j) != 0) & ((s_set & tables.strict_up[j]) == 0)
      c = w_add(c, ext(top, (s_set ^ bit_j).astype(jnp.int32)))
      passed = ~w_less(q, c)  # c <= q: q lies beyond every extension through x <= j
      x = x + passed
      before = w_select(passed, c, before)
    q = w_sub(q, before)
    s_set = s_set ^ jnp.left_shift(jnp.uint32(1), x.astype(jnp.uint32))
    return s_set, q, seq.at[:, i].set(x)

  # a loop over the d positions, not d unrolled steps (as in the int64 unranking)
  init = (a.astype(jnp.uint32), tuple(r_a), jnp.zeros((m, d), jnp.int32))
  _, _, seq = lax.fori_loop(0, d, step, init)
  return seq, size_a


_two_limbs = (add, sub, less, select)
_one_limb = (
  lambda a, b: (a[0] + b[0],),
  lambda a, b: (a[0] - b[0],),
  lambda a, b: a[0] < b[0],
  lambda cond, a, b: (jnp.where(cond, a[0], b[0]),),
)
