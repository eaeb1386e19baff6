"""ChaCha20 (RFC 8439) as a ``jax.random`` PRNG implementation.

:data:`CHACHA20` is registered with ``jax.extend.random.define_prng_impl``, so every
``jax.random`` function, ``split``, ``fold_in``, ``vmap`` over keys and every jaxdp
sampler accept its typed keys. Make keys with :func:`jaxdp.random.secure_key`
(32 bytes from the operating system); an integer seed is refused.

The contract (pinned by the tests against RFC 8439's vectors and an independent
implementation):

* ``jax.random.bits(key, (n,), jnp.uint32)`` is the RFC 8439 keystream of the key's
  32 bytes with nonce 0 and block counter 0, 1, 2, ..., as little-endian 32-bit words
  (8- and 16-bit draws are the same bytes, 64-bit draws little-endian pairs of words).
* ``split`` gives child ``i`` the first 8 words of the block function at counter
  ``i`` under nonce ``(1, 0, 0)``; ``fold_in(key, x)`` the first 8 words at counter
  ``x`` under nonce ``(2, 0, 0)``. The stream itself uses nonce ``(0, 0, 0)``, so a
  derived key and the parent's stream come from distinct block inputs: no two
  derived streams overlap unless ChaCha20 itself collides.
* A draw needing more than 2**32 blocks (256 GiB) is an error, never a wrapped
  counter.

What it is and is not: ChaCha20 is a stream cipher whose keystream is believed
indistinguishable from random without the key (it is the Linux kernel's and Rust
``rand``'s generator). Security rests on the key staying secret: a key from
``secure_key()`` carries 256 bits from ``secrets.token_bytes``. The implementation is
plain 32-bit add/xor/rotate with data-independent control flow; it is not hardened
against side channels on shared hardware.

References:
  Y. Nir, A. Langley, "ChaCha20 and Poly1305 for IETF Protocols", RFC 8439 (2018).
  D. J. Bernstein, "ChaCha, a variant of Salsa20" (2008).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import define_prng_impl

from jaxdp.typing import ArrayLike

__all__ = ["CHACHA20", "CHACHA8", "block", "MAX_BLOCKS"]

SIGMA = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)  # "expand 32-byte k"
MAX_BLOCKS = 1 << 32  # the RFC's 32-bit block counter
STREAM, SPLIT, FOLD_IN = 0, 1, 2  # nonce word 0: one domain per use of the block


def _rotl(x, r: int):
  return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _quarter(a, b, c, d):
  """The quarter round on words a, b, c and d; on rows of the state (``(4, n)``
  arrays), four quarter rounds at once, one on each column."""
  a = a + b
  d = _rotl(d ^ a, 16)
  c = c + d
  b = _rotl(b ^ c, 12)
  a = a + b
  d = _rotl(d ^ a, 8)
  c = c + d
  b = _rotl(b ^ c, 7)
  return a, b, c, d


def _double_round(_, words):
  x = list(words)  # 16 arrays, one per state word
  for q in (
    (0, 4, 8, 12),
    (1, 5, 9, 13),
    (2, 6, 10, 14),
    (3, 7, 11, 15),  # columns
    (0, 5, 10, 15),
    (1, 6, 11, 12),
    (2, 7, 8, 13),
    (3, 4, 9, 14),
  ):  # diagonals
    x[q[0]], x[q[1]], x[q[2]], x[q[3]] = _quarter(*(x[i] for i in q))
  return tuple(x)


def _state(key, counter, nonce) -> tuple[jax.Array, ...]:
  """The 16 input words of the blocks at ``counter``, one ``(n,)`` array each."""
  counter = jnp.asarray(counter, jnp.uint32)
  n = counter.shape[0]
  key = jnp.asarray(key, jnp.uint32)
  state = [jnp.full((n,), w, jnp.uint32) for w in SIGMA]
  state += [jnp.broadcast_to(key[i], (n,)) for i in range(8)]
  state += [counter] + [jnp.broadcast_to(jnp.asarray(w, jnp.uint32), (n,)) for w in nonce]
  # One type for all 16 words: under shard_map the constants are replicated while the
  # key and counter may vary over a mesh axis, and the rounds mix every word into
  # every other. Stacking promotes all words to the union of the axes they vary over
  # (XLA drops the stack and slices).
  return tuple(jnp.stack(state))


def _row_double_round(_, rows):
  """A double round on the state's rows: the column round, then the diagonal round as
  a column round on rows b, c and d rotated left by 1, 2 and 3 words (word 5 under
  word 0, and so on), rotated back after."""
  a, b, c, d = _quarter(*rows)
  a, b, c, d = _quarter(a, jnp.roll(b, -1, 0), jnp.roll(c, -2, 0), jnp.roll(d, -3, 0))
  return a, jnp.roll(b, 1, 0), jnp.roll(c, 2, 0), jnp.roll(d, 3, 0)


def _vector_rounds(state, rounds: int):
  """The rounds as array operations on the state's four rows (each ``(4, n)``: four
  quarter rounds in one operation), one double round per loop step: an accelerator
  runs each step as one pass over all blocks, and a program holds a quarter of the
  operations that one array per word would take (less to compile, which is most of
  a small draw's cost)."""
  words = jnp.stack(state)
  rows = tuple(words[4 * i : 4 * i + 4] for i in range(4))
  out = lax.fori_loop(0, rounds // 2, _row_double_round, rows)
  return (jnp.concatenate(out) + words).T


RAW, DONE = 1, 3  # tags of an input state and of a finished block; 0 is the identity


def _combine(rounds: int):
  """The reducer of :func:`_scalar_rounds`: ``f(a, b)`` is the block of ``b`` when
  ``b`` is an input state (tag RAW), else ``a`` when ``b`` is the identity or ``a`` a
  finished block, else ``b``. On the values a reduce of two copies of one input
  state can produce (the identity, the state, its block) it is associative with
  ``init`` a right identity, and every order in which a reduce may combine the two
  copies (with or without ``init``) ends in that state's block, tagged DONE."""

  def f(a, b):
    (tag_a, *words_a), (tag_b, *words_b) = a, b
    x = list(words_b)
    for _ in range(rounds // 2):
      x = list(_double_round(0, x))
    raw = tag_b == np.uint32(RAW)
    keep_a = (tag_b == np.uint32(0)) | (tag_a == np.uint32(DONE))
    tag = jnp.where(raw, np.uint32(DONE), jnp.where(keep_a, tag_a, tag_b))
    out = [
      jnp.where(raw, o + s, jnp.where(keep_a, wa, s))
      for o, s, wa in zip(x, words_b, words_a)
    ]
    return (tag, *out)

  return f


@functools.partial(jax.jit, static_argnums=1, inline=False)
def _scalar_rounds(state, rounds: int):
  """The rounds as one scalar function per block, kept in registers: the computation
  of a variadic reduce over two copies of each block's input state (XLA:CPU emits a
  reduce's computation inline in its loop; as array operations the rounds are dozens
  of passes over memory per double round).

  A function of its own (not inlined when traced): a caller whose program discards
  every output of the reduce (``bits * 0``) otherwise crashes the compiler's
  simplification of the reduce. The optimization barrier keeps a key that is a
  constant of the caller's program (closed over) from being folded: XLA would
  evaluate the rounds while compiling, in its interpreter."""
  state = lax.optimization_barrier(tuple(state))
  n = state[0].shape[0]
  pair = lambda w: jnp.broadcast_to(w[:, None], (n, 2))
  tags = jnp.broadcast_to(jnp.asarray([RAW, RAW], jnp.uint32), (n, 2))
  zero = jnp.zeros((), jnp.uint32)
  tag, *words = lax.reduce((tags, *map(pair, state)), (zero,) * 17, _combine(rounds), (1,))
  # Adds 0 (every tag is DONE): a program that drops the tag output sends XLA:CPU's
  # compiler into a stall.
  return jnp.stack(words, axis=1) + (tag - np.uint32(DONE))[:, None]


SCALAR_MIN_BLOCKS = 1 << 12  # on the CPU, draws of this many blocks or more run scalar


def block(
  key: ArrayLike, counter: ArrayLike, nonce: ArrayLike, rounds: int = 20
) -> jax.Array:
  """The ChaCha20 block function (ChaCha``rounds``), vectorised over counters.

  On the CPU, from ``SCALAR_MIN_BLOCKS`` blocks, each block's rounds run as one
  scalar function (:func:`_scalar_rounds`); smaller draws, and every draw on an
  accelerator, run the rounds as array operations, one double round per loop step
  (the scalar program costs a fixed time per call, about that of a few thousand
  blocks). Both compute RFC 8439's function; the tests pin each to its vectors.

  Args:
    key: ``(8,)`` uint32 key words (the 32-byte key read little-endian).
    counter: ``(n,)`` uint32 block counters.
    nonce: three uint32 words (scalars or ``(n,)`` arrays).
    rounds: 20 (RFC 8439) or 8 (ChaCha8, the statistical generator).

  Returns:
    ``(n, 16)`` uint32: word ``j`` of block ``i`` at ``[i, j]``.

  References:
    RFC 8439, Section 2.3.
  """
  state = _state(key, counter, nonce)
  if state[0].shape[0] < SCALAR_MIN_BLOCKS:
    return _vector_rounds(state, rounds)
  # chosen when the program is lowered, for the platform it is lowered for (which
  # need not be JAX's default backend): no conditional in the compiled program
  return lax.platform_dependent(
    *state,
    cpu=lambda *s: _scalar_rounds(s, rounds),
    default=lambda *s: _vector_rounds(s, rounds),
  )


LOOP_BLOCKS = 1 << 16  # on the CPU, draws of twice this or more run in steps of it
STEPS_MAX_BLOCKS = (1 << 27) - 1  # ... up to this many: word offsets below 2^31


def _blocks(key, num_blocks: int, domain: int, rounds: int = 20):
  """``(num_blocks, 16)`` words of the blocks at counters 0.. under ``domain``.

  On the CPU a draw of ``2 * LOOP_BLOCKS`` to ``STEPS_MAX_BLOCKS`` blocks fills its
  output in place, ``LOOP_BLOCKS`` blocks a step and then the rest, so that the
  rounds' temporaries are a step's size, not the draw's (each call maps fresh pages
  for them). Beyond, a word's offset in the output would not fit the uint32 index
  of a step: such a draw (8 GiB or more) runs in one pass."""
  if num_blocks > MAX_BLOCKS:
    raise ValueError(
      f"a ChaCha{rounds} draw of {num_blocks:,} blocks exceeds the 2**32-block stream "
      "of one key; split the key and draw in pieces."
    )
  nonce = (domain, 0, 0)

  def words(key, start, n):
    return block(key, start + lax.iota(jnp.uint32, n), nonce, rounds).reshape(-1)

  def in_steps(key):
    steps, rest = divmod(num_blocks, LOOP_BLOCKS)

    def step(i, out):
      start = i.astype(jnp.uint32) * np.uint32(LOOP_BLOCKS)
      return lax.dynamic_update_slice(out, words(key, start, LOOP_BLOCKS), (16 * start,))

    out = lax.fori_loop(0, steps, step, jnp.zeros(16 * num_blocks, jnp.uint32))
    if rest:
      start = steps * LOOP_BLOCKS
      out = lax.dynamic_update_slice(out, words(key, np.uint32(start), rest), (16 * start,))
    return out.reshape(num_blocks, 16)

  one_pass = lambda key: words(key, np.uint32(0), num_blocks).reshape(num_blocks, 16)
  if not 2 * LOOP_BLOCKS <= num_blocks <= STEPS_MAX_BLOCKS:
    return one_pass(key)
  # chosen when the program is lowered, for the platform it is lowered for: an
  # accelerator computes all blocks in one pass
  return lax.platform_dependent(key, cpu=in_steps, default=one_pass)


def _seed(seed):
  raise TypeError(
    "ChaCha20 keys are not made from integer seeds (an integer has too little "
    "entropy to protect a release); use jaxdp.random.secure_key(), or "
    "secure_key(seed_bytes) with 32 bytes in tests."
  )


def _split(key, shape, rounds: int = 20):
  num = math.prod(shape)
  return _blocks(key, num, SPLIT, rounds)[:, :8].reshape(*shape, 8)


def _fold_in(key, data, rounds: int = 20):
  data = jnp.asarray(data).astype(jnp.uint32)
  return block(key, data[None], (FOLD_IN, 0, 0), rounds)[0, :8]


def _random_bits(key, bit_width: int, shape, rounds: int = 20):
  if bit_width not in (8, 16, 32, 64):
    raise TypeError(f"bit_width must be 8, 16, 32 or 64; got {bit_width}.")
  n = math.prod(shape)
  num_words = -(-n * bit_width // 32)
  words = _blocks(key, -(-num_words // 16), STREAM, rounds).reshape(-1)[:num_words]
  if bit_width == 32:
    out = words
  elif bit_width == 64:
    pairs = words.reshape(-1, 2).astype(jnp.uint64)
    out = pairs[:, 0] | (pairs[:, 1] << np.uint64(32))
  else:  # the keystream's bytes (or 16-bit halves), little-endian within a word
    per = 32 // bit_width
    shifts = jnp.arange(per, dtype=jnp.uint32) * np.uint32(bit_width)
    parts = (words[:, None] >> shifts) & np.uint32((1 << bit_width) - 1)
    out = parts.reshape(-1)[:n].astype(jnp.dtype(f"uint{bit_width}"))
  return out.reshape(shape)


CHACHA20 = define_prng_impl(
  key_shape=(8,),
  seed=_seed,
  split=_split,
  random_bits=_random_bits,
  fold_in=_fold_in,
  name="chacha20",
  tag="cc20",
)


def _seed8(seed):
  """An integer seed (up to 64 bits) as key words (lo, hi, 0, ..., 0, 0x43433820):
  the last word ("CC8 ") keeps these keys apart from 32-byte OS keys' typical use."""
  seed = jnp.asarray(seed)
  lo = seed.astype(jnp.uint32)  # the low 32 bits (two's complement)
  if seed.dtype.itemsize == 8:
    hi = (seed >> 32).astype(jnp.uint32)
  else:  # a 32-bit seed, sign-extended
    hi = jnp.where(seed < 0, np.uint32(0xFFFFFFFF), np.uint32(0))
  zero = jnp.zeros((), jnp.uint32)
  return jnp.stack([lo, hi] + [zero] * 5 + [jnp.asarray(0x43433820, jnp.uint32)])


# ChaCha8: the same code with 8 rounds, for Monte Carlo (see jaxdp.random.study_key).
CHACHA8 = define_prng_impl(
  key_shape=(8,),
  seed=_seed8,
  split=lambda key, shape: _split(key, shape, 8),
  random_bits=lambda key, bit_width, shape: _random_bits(key, bit_width, shape, 8),
  fold_in=lambda key, data: _fold_in(key, data, 8),
  name="chacha8",
  tag="cc8",
)
