"""Float64 variates from random 32-bit words, written with array operations so that XLA
vectorises them and fuses them with their neighbours (used by the series-parallel
kernel; call them inside ``jax.enable_x64(True)``)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.prng.threefry import words64
from jaxdp.samplers.chunks import varying_like

__all__ = [
  "exp_nonpositive",
  "exponential",
  "key_word",
  "log_normal",
  "normal_from_bits",
  "pack",
  "packed_words",
  "paired_words",
  "static_index",
  "stored",
  "stored_call",
  "uniform52",
  "unit_floats",
  "word_pairs",
]


def packed_words(key, shape):
  """One random uint64 array of ``shape`` (call in the x64 scope): the two uint32
  words ``(hi, lo)`` of :func:`word_pairs` as ``hi << 32 | lo``, stored."""
  with jax.enable_x64(True):
    return stored_call(lambda k: pack(_pair(k, tuple(shape))), (key,), key_word(key))


def word_pairs(key, shape):
  """Two random uint32 arrays ``(hi, lo)`` of ``shape``: the words that
  :func:`jaxdp.prng.threefry.words64` gives (one Threefry hash per element for
  Threefry keys), computed once and stored (see :func:`stored_call`).

  XLA:CPU computes two outputs of one hash in two fusions, hashing twice. Packed into
  one uint64 (:func:`packed_words`) the hash runs once, but the fusion then
  vectorises at the width of its widest type: four 64-bit lanes to an AVX2 vector
  where the hash's 32-bit operations run eight, and the hash takes as long as two.
  On the CPU both words are instead the outputs of one variadic reduction (an or
  over a trailing axis of the word and a zero), which XLA:CPU emits as one fusion
  with two uint32 outputs: one hash per element at the 32-bit width. The words are
  the same on every platform; elsewhere they are returned as they are.
  """
  return stored_call(lambda k: _pair(k, tuple(shape)), (key,), key_word(key))


def _pair(key, shape):
  with jax.enable_x64(False):  # traced in the caller's mode, as words64 is
    hi, lo = words64(key, shape)
  return jax.lax.platform_dependent(hi, lo, cpu=_one_fusion, default=lambda h, w: (h, w))


def _one_fusion(hi, lo):
  zero = jnp.zeros_like(hi)
  return jax.lax.reduce(
    (jnp.stack([hi, zero], axis=-1), jnp.stack([lo, zero], axis=-1)),
    (np.uint32(0), np.uint32(0)),
    lambda a, b: (a[0] | b[0], a[1] | b[1]),
    (hi.ndim,),
  )


def pack(words):
  """``(hi, lo)`` uint32 words as one uint64 ``hi << 32 | lo``."""
  hi, lo = words
  with jax.enable_x64(True):
    return (jnp.asarray(hi).astype(jnp.uint64) << np.uint64(32)) | jnp.asarray(lo).astype(
      jnp.uint64
    )


def paired_words(key, shape):
  """Two random uint32 arrays ``(hi, lo)`` of ``shape``: :func:`word_pairs`."""
  return word_pairs(key, shape)


def key_word(key):
  """One uint32 word of ``key``'s data (typed or legacy key): a traced scalar for the
  predicate of :func:`stored_call` that does not wait for a draw."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)
  return key.reshape(-1)[0].astype(jnp.uint32)


def unit_floats(bits):
  """float32 in [0, 1) from uint32 words as ``jax.random.uniform`` makes them: the
  high 23 bits as the mantissa of a number in [1, 2), minus 1."""
  one = jax.lax.bitcast_convert_type(
    (bits >> np.uint32(9)) | np.uint32(0x3F800000), jnp.float32
  )
  return one - 1.0


def normal_from_bits(bits):
  """float32 standard normals from uint32 words as ``jax.random.normal`` makes them:
  sqrt(2) erfinv(v), v uniform on [-1, 1) from 23 bits, kept above -1."""
  v = jnp.maximum(2.0 * unit_floats(bits) - 1.0, np.nextafter(np.float32(-1), 0))
  return np.float32(np.sqrt(2)) * jax.lax.erf_inv(v)


def static_index(idx):
  """A static index array as uint32. It is non-negative by construction, so JAX
  gathers with it directly: a signed index gets a wrap-around select for negative
  values at each gather, a large share of the operations of a deep tree's kernel)."""
  return jnp.asarray(np.asarray(idx, np.uint32))


def uniform52(words):
  """Uniform on (0, 1): the midpoint (j + 1/2) 2^-52 of one of 2^52 equal cells, j
  from 52 random bits of two uint32 words ``(hi, lo)``, the high 27 bits of ``hi``
  over the high 25 of ``lo`` (as :func:`word_pairs` gives them, or the same bits of
  their packed uint64, :func:`packed_words`); exact in float64 (so never 0 or 1).
  Call in the x64 scope.

  j sits in the mantissa of 1 + j 2^-52 (a bit pattern, no integer conversion);
  subtracting 1 and adding 2^-53 are exact."""
  if isinstance(words, tuple):  # the shifts in 32 bits, then one conversion each
    hi, lo = words
    j = ((hi >> np.uint32(5)).astype(jnp.uint64) << np.uint64(25)) | (
      lo >> np.uint32(7)
    ).astype(jnp.uint64)
  else:
    j = ((words >> np.uint64(37)) << np.uint64(25)) | (
      (words & np.uint64(0xFFFFFFFF)) >> np.uint64(7)
    )
  one = jax.lax.bitcast_convert_type(j | np.uint64(0x3FF0000000000000), jnp.float64)
  return (one - 1.0) + (1.0 / 9007199254740992.0)


def exponential(words):
  """Exp(1) variates -log(U), U from :func:`uniform52`: positive and finite (at most
  53 log 2); call in the x64 scope."""
  return -log_normal(uniform52(words))


def stored(tree, word):
  """``tree`` (arrays), computed once and stored before its consumers run.

  XLA:CPU fuses cheap elementwise producers (a Threefry hash, :func:`log_normal`) into
  every consumer, recomputing them per use: an (n,) variate broadcast over d
  coordinates is hashed d times. ``lax.optimization_barrier`` does not prevent that
  on the CPU (a (2, n) variate broadcast over 129 coordinates ran as slowly with one
  as without, and the compiled program holds no barrier); a conditional is a fusion
  boundary there. Its predicate ``(word | 1) != 0`` (``word`` any traced uint32
  scalar) is always true, so the other branch never runs; it differs from the first
  only so that the two are not merged. Under ``vmap`` the conditional becomes a
  select (same values, no boundary).

  Other platforms get ``lax.optimization_barrier``: XLA:GPU evaluates a
  conditional's predicate on the host (a device-to-host copy and a wait, once per
  loop step where the kernel loops), and a barrier does not branch. The choice is
  made when the program is lowered (``lax.platform_dependent``): the CPU's program
  is the conditional alone, a GPU's holds no conditional.
  """
  return jax.lax.platform_dependent(
    tree, word, cpu=_conditional, default=lambda t, _: jax.lax.optimization_barrier(t)
  )


def _conditional(tree, word):
  return jax.lax.cond(
    (word | np.uint32(1)) != 0,
    lambda t: t,
    lambda t: jax.tree_util.tree_map(jnp.negative, t),
    tree,
  )


def stored_call(fn, args, word):
  """``fn(*args)``, computed inside a conditional and stored before its consumers run.

  As :func:`stored`, a fusion boundary, and one copy less: a branch that returns
  its operand makes XLA copy it into the conditional's result, while a branch that
  computes ``fn`` writes the result once. The other branch (never taken: its
  predicate ``(word | 1) != 0`` is always true) returns zeros, so under ``vmap``,
  where the conditional becomes a select, ``fn`` still runs once. Other platforms
  get ``fn``'s value behind ``lax.optimization_barrier``, as :func:`stored`.
  """

  def zeros(*a):  # of fn's types, varying over the same shard_map axes
    return jax.tree_util.tree_map(
      lambda s: varying_like(s, jnp.zeros(s.shape, s.dtype)), jax.eval_shape(fn, *a)
    )

  def conditional(word, *a):
    return jax.lax.cond((word | np.uint32(1)) != 0, fn, zeros, *a)

  def barrier(word, *a):
    del word
    return jax.lax.optimization_barrier(fn(*a))

  return jax.lax.platform_dependent(word, *args, cpu=conditional, default=barrier)


# fdlibm's e_log.c (Sun Microsystems, 1993): ln 2 in two parts and the coefficients
# of its minimax polynomial in s^2, s = f / (2 + f).
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_LG = (
  6.666666666666735130e-01,
  3.999999999940941908e-01,
  2.857142874366239149e-01,
  2.222219843214978396e-01,
  1.818357216161805012e-01,
  1.531383769920937332e-01,
  1.479819860511658591e-01,
)


def log_normal(x):
  """Natural logarithm of positive normal float64 ``x`` (call in the x64 scope):
  fdlibm's algorithm (error below 1 ulp), written with array operations so that
  XLA vectorises it and fuses it with its neighbours (XLA:CPU's own float64
  ``jnp.log`` was the slower choice in this kernel); ``tests/test_series_parallel.py``
  checks it against mpmath. Zero, negative,
  subnormal and non-finite inputs are outside its domain (the kernel's are in
  [2^-53, 1 - 2^-53]).

  x = 2^k (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)); log(1 + f) = 2 atanh(s),
  s = f / (2 + f), = f - f^2/2 + s (f^2/2 + R(s^2)).
  """
  bits = jax.lax.bitcast_convert_type(x, jnp.int64)
  # The high word in int32: AVX2 converts int32, not int64, to float64 in vectors.
  high = (bits >> 32).astype(jnp.int32)
  mant = high & 0xFFFFF  # high 20 bits of the mantissa
  i = (mant + 0x95F64) & 0x100000  # set where 1.m >= sqrt(2)
  m = jax.lax.bitcast_convert_type(
    ((mant | (i ^ 0x3FF00000)).astype(jnp.int64) << 32) | (bits & 0xFFFFFFFF), jnp.float64
  )  # 1 + f, halved where i is set
  k = ((high >> 20) - 1023 + (i >> 20)).astype(jnp.float64)
  f = m - 1.0
  # s = f / (2 + f) as f times a reciprocal: a division with several users stays a
  # fusion of its own on XLA:CPU (its result stored and read back), one with a
  # single user fuses into it
  s = f * (1.0 / (2.0 + f))
  z = s * s
  w = z * z
  r = w * (_LG[1] + w * (_LG[3] + w * _LG[5])) + z * (
    _LG[0] + w * (_LG[2] + w * (_LG[4] + w * _LG[6]))
  )
  hfsq = 0.5 * f * f
  mid = ((mant - 0x6147A) | (0x6B851 - mant)) > 0  # fdlibm's choice of rearrangement
  return jnp.where(
    mid,
    k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f),
    k * _LN2_HI - ((s * (f - r) - k * _LN2_LO) - f),
  )


# fdlibm's e_exp.c: 1/ln 2 and the coefficients of its minimax polynomial in r^2.
_INV_LN2 = 1.44269504088896338700e00
_P = (
  1.66666666666666019037e-01,
  -2.77777777770155933842e-03,
  6.61375632143793436117e-05,
  -1.65339022054652515390e-06,
  4.13813679705723846039e-08,
)


def exp_nonpositive(x):
  """e^x for float64 ``x`` in [-708, 0] (call in the x64 scope): fdlibm's algorithm
  (error below 1 ulp), written with array operations so that XLA vectorises it and
  fuses it with its neighbours (XLA:CPU's float64 ``jnp.exp`` took about three times
  as long in this kernel); ``tests/samplers/test_series_parallel.py`` checks it
  against mpmath.
  Outside that range (where the result would be subnormal or above 1) it is not
  defined; the kernel's arguments are log(V) / (m + 1) >= -37.

  x = k ln 2 + r with |r| <= ln 2 / 2 (k = floor(x / ln 2 + 1/2), r in two parts);
  e^r = 1 + r + r c / (2 - c), c = r - r^2 P(r^2); e^x = 2^k e^r.
  """
  k = jnp.floor(x * _INV_LN2 + 0.5)
  hi = x - k * _LN2_HI
  lo = k * _LN2_LO
  r = hi - lo
  t = r * r
  c = r - t * (_P[0] + t * (_P[1] + t * (_P[2] + t * (_P[3] + t * _P[4]))))
  y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
  # 2^k as a bit pattern (k in [-1022, 0]: a normal number)
  scale = jax.lax.bitcast_convert_type((k.astype(jnp.int64) + 1023) << 52, jnp.float64)
  return y * scale
