"""JAX's Threefry-2x32 stream, computed in one fused kernel on the CPU.

On the CPU backend JAX lowers its ``threefry2x32`` primitive as a loop over the five
groups of four rounds (``use_rolled_loops=True``); XLA:CPU then keeps the two state
words in memory between loop steps, and Threefry draws run at a fraction of the
speed of numpy's PCG64. :data:`THREEFRY_UNROLLED` is a ``jax.random`` PRNG
implementation that computes the *same* function with the rounds written out, so
the whole hash fuses into the kernel that consumes its words (as JAX's own lowering
does on other backends). Hashes of fewer than ``SMALL_COUNT`` elements (splits,
fold_in, a few words) go to JAX's ``threefry2x32`` primitive: the same function, with
less for XLA to compile.

The contract (pinned by the tests against ``jax.random`` with Threefry keys): for
the same key data, ``random_bits`` (8, 16, 32 and 64 bits), ``split`` and
``fold_in`` return exactly what JAX's ``threefry2x32`` implementation returns with
``jax_threefry_partitionable`` on (JAX's default). :func:`fast_key` swaps a
Threefry key for this implementation on the CPU when that flag is on; jaxdp's
samplers do so, so a study run with ``jax.random.key(seed)`` gives the same draws,
faster.

What it is and is not: Threefry-2x32 with 20 rounds (Salmon et al.), a counter-based
generator that passes TestU01's BigCrush; it is JAX's default generator, not a
cryptographic one (use :func:`jaxdp.random.secure_key` for releases).

References:
  J. K. Salmon, M. A. Moraes, R. O. Dror, D. E. Shaw, "Parallel random numbers: as
  easy as 1, 2, 3", SC 2011 (Threefry-2x32: rotations, key schedule, 20 rounds).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend.random import define_prng_impl, threefry2x32_p, threefry_prng_impl

from jaxdp.typing import ArrayLike, KeyArray, Shape

__all__ = ["THREEFRY_UNROLLED", "hash2x32", "fast_key", "words64"]

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))  # Threefry-2x32, even and odd groups
PARITY = 0x1BD11BDA  # the key schedule's parity constant
MAX_COUNT = 1 << 32  # counters kept in one 32-bit word; larger draws go to JAX's code
SMALL_COUNT = 1 << 10  # hashes of fewer elements take JAX's primitive (:func:`_hash`)


def _rotl(x, r: int):
  return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def hash2x32(
  k0: ArrayLike, k1: ArrayLike, x0: ArrayLike, x1: ArrayLike
) -> tuple[jax.Array, jax.Array]:
  """Threefry-2x32 (20 rounds) of the counter pair ``(x0, x1)`` under key ``(k0, k1)``.

  Args:
    k0: the first uint32 key word (a scalar or an array broadcasting with the
      counters).
    k1: the second key word.
    x0: the first uint32 counter word.
    x1: the second counter word.

  Returns:
    The two uint32 output words.
  """
  ks = (k0, k1, k0 ^ k1 ^ np.uint32(PARITY))
  x0, x1 = x0 + ks[0], x1 + ks[1]
  for group in range(5):  # four rounds, then a key injection
    for r in ROTATIONS[group % 2]:
      x0 = x0 + x1
      x1 = _rotl(x1, r) ^ x0
    x0 = x0 + ks[(group + 1) % 3]
    x1 = x1 + ks[(group + 2) % 3] + np.uint32(group + 1)
  return x0, x1


def _counters(shape):
  """The flat index of each element of ``shape`` (< 2**32 elements) as uint32."""
  if not shape:
    return jnp.zeros((), jnp.uint32)
  strides = np.cumprod((*shape[1:], 1)[::-1])[::-1]
  return sum(
    lax.broadcasted_iota(jnp.uint32, shape, i) * np.uint32(s) for i, s in enumerate(strides)
  )


def _hash(k0, k1, x0, x1):
  """:func:`hash2x32`, through JAX's ``threefry2x32`` primitive for fewer than
  ``SMALL_COUNT`` elements: the same function, its rounds rolled into a loop on the
  CPU, so that a program's many small draws (splits, fold_in, a few words) add less
  for XLA to compile."""
  shape = jnp.broadcast_shapes(jnp.shape(x0), jnp.shape(x1))
  if math.prod(shape) < SMALL_COUNT:
    args = (jnp.broadcast_to(jnp.asarray(w, jnp.uint32), shape) for w in (k0, k1, x0, x1))
    return tuple(threefry2x32_p.bind(*args))
  return hash2x32(k0, k1, x0, x1)


def _hash_index(key, shape):
  """The hash of each element's flat index (high counter word 0) under ``key``."""
  lo = _counters(shape)
  return _hash(key[0], key[1], jnp.zeros_like(lo), lo)


def _materialised(keys):
  # Derived keys are computed once and stored: left to fusion, XLA recomputes the
  # parent's hash for every element of every draw made from them, and poset-ball
  # draws ran slower than with JAX's own code.
  return lax.optimization_barrier(keys)


def _random_bits(key, bit_width: int, shape):
  if math.prod(shape) >= MAX_COUNT:  # counters need both words: JAX's own code
    return threefry_prng_impl.random_bits(key, bit_width, shape)
  b0, b1 = _hash_index(key, shape)
  if bit_width == 64:
    dtype = jnp.dtype("uint64")
    return (
      lax.convert_element_type(b0, dtype) << np.uint64(32)
    ) | lax.convert_element_type(b1, dtype)
  out = b0 ^ b1
  if bit_width == 32:
    return out
  if bit_width in (8, 16):
    return lax.convert_element_type(out, jnp.dtype(f"uint{bit_width}"))
  raise TypeError(f"bit_width must be 8, 16, 32 or 64; got {bit_width}.")


def _split(key, shape):
  if math.prod(shape) >= MAX_COUNT:
    return threefry_prng_impl.split(key, shape)
  return _materialised(jnp.stack(_hash_index(key, shape), axis=-1))


def _fold_in(key, data):
  data = jnp.asarray(data).astype(jnp.uint32)
  return _materialised(jnp.stack(_hash(key[0], key[1], jnp.zeros((), jnp.uint32), data)))


THREEFRY_UNROLLED = define_prng_impl(
  key_shape=(2,),
  seed=threefry_prng_impl.seed,
  split=_split,
  random_bits=_random_bits,
  fold_in=_fold_in,
  name="threefry2x32_unrolled",
  tag="fryu",
)


def _threefry_data(key, impls):
  """The key data of ``key`` if it is a typed key of one of ``impls`` (JAX's Threefry
  by its registered name, :data:`THREEFRY_UNROLLED`) or a legacy uint32 key under
  JAX's default Threefry; else None."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.key_data(key) if jax.random.key_impl(key) in impls else None
  return key if jax.config.jax_default_prng_impl == threefry_prng_impl.name else None


def words64(key: KeyArray, shape: Shape) -> tuple[jax.Array, jax.Array]:
  """64 random bits per element of ``shape`` as two uint32 arrays ``(hi, lo)``.

  Made for float64 variates in code traced without x64 (where ``jax.random.bits``
  cannot return uint64): for a Threefry key with ``jax_threefry_partitionable`` on
  (JAX's defaults) one hash per element gives both words, and ``(hi, lo)`` are the
  high and low halves of ``jax.random.bits(key, shape, jnp.uint64)`` under x64;
  for any other key (or a draw of 2^32 or more elements) they are
  ``jax.random.bits(key, (2, *shape), jnp.uint32)``, two 32-bit draws.

  Args:
    key: a PRNG key (typed or legacy), possibly traced.
    shape: the output shape.

  Returns:
    ``(hi, lo)``, uint32 arrays of ``shape``.
  """
  shape = tuple(shape)
  data = _threefry_data(key, (threefry_prng_impl.name, THREEFRY_UNROLLED))
  if (
    jax.config.jax_threefry_partitionable
    and data is not None
    and math.prod(shape) < MAX_COUNT
  ):
    return _hash_index(data, shape)
  bits = jax.random.bits(key, (2, *shape), jnp.uint32)
  return bits[0], bits[1]


def fast_key(key: KeyArray) -> KeyArray:
  """``key`` as a :data:`THREEFRY_UNROLLED` key where that is faster and the same.

  Swapped: a Threefry key (typed, or a legacy uint32 key under JAX's default
  Threefry), with ``jax_threefry_partitionable`` on and the CPU as the default
  backend (where JAX rolls the rounds into a loop; other backends already compute
  them unrolled). Anything else is returned as is. The draws are the same either way.

  Args:
    key: a PRNG key (typed or legacy), possibly traced.

  Returns:
    A key with the same key data.
  """
  if not jax.config.jax_threefry_partitionable or jax.default_backend() != "cpu":
    return key
  data = _threefry_data(key, (threefry_prng_impl.name,))  # a registered name
  return key if data is None else jax.random.wrap_key_data(data, impl=THREEFRY_UNROLLED)
