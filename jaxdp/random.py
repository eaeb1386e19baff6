"""Differential-privacy noise in the conventions of ``jax.random``.

Every function takes one key first, then the distribution's parameters, then
``shape=()`` and ``dtype=None``; vector draws have shape ``(*shape, dim)``. Batch by
``shape`` (one key, many draws) or by ``jax.vmap`` over split keys; a batch of keys
passed as ``key`` is rejected. All functions work under ``jax.jit`` and ``jax.vmap``.

Draws are produced in fixed-size chunks (``CHUNK`` samples on the CPU, one split key
each; on an accelerator chunks sized from its memory,
:func:`jaxdp.samplers.chunks.device_chunk`) so a batch of millions uses memory
proportional to the output.

``jax.random``'s default generator (Threefry) is a statistical generator, not a
cryptographic one, and floating-point noise has known attacks (Mironov 2012): the
float samplers here are for research, utility studies and benchmarks. For a release
to publish, use a ChaCha20 key (:func:`secure_key`) and the exact, integer-valued
samplers of :mod:`jaxdp.exact` (``exact=True`` on the mechanisms).

Generators for studies (:func:`study_key`): ``"threefry"`` (JAX's default, the
project's default; on the CPU the samplers compute its stream with the rounds
unrolled, :mod:`jaxdp.prng.threefry`: the same draws as JAX's own code, and the fastest
of the three on a 2-core CPU in ``benchmarks/generators.py``), ``"rbg"`` (JAX's
RngBitGenerator keys) and ``"chacha8"`` (:data:`jaxdp.prng.chacha.CHACHA8`: ChaCha with 8
rounds, the generator of Go's ``math/rand/v2``, a second cipher family for a study's
cross-check; no attack on 8 rounds is known, the best reach 7, but it is not offered
for releases). Every sampler accepts any of their keys.

References:
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
  I. Mironov, "On significance of the least significant bits for differential
  privacy", CCS 2012.
"""

from __future__ import annotations

import functools
import math
import secrets

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.posets import Poset
from jaxdp.prng.chacha import CHACHA8, CHACHA20
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers import dispatch
from jaxdp.samplers.balls import LpBall, PosetBall
from jaxdp.samplers.chunks import CHUNK, chunked, device_chunk
from jaxdp.samplers.gamma import gamma_radius
from jaxdp.samplers.norm_ball import NormBall
from jaxdp.samplers.query_draws import count_ball, query_draws, sum_ball, vote_ball
from jaxdp.typing import DTypeLike, KeyArray, Scalar, Shape

__all__ = [
  "poset_ball",
  "lp_ball",
  "sum_ball",
  "count_ball",
  "vote_ball",
  "knorm",
  "laplace",
  "gaussian",
  "os_key",
  "secure_key",
  "is_secure_key",
  "study_key",
  "GENERATORS",
  "CHUNK",
]

GENERATORS = ("threefry", "rbg", "chacha8")
_IMPLS = {"threefry": "threefry2x32", "chacha8": CHACHA8, "chacha20": CHACHA20}


Ball = PosetBall | LpBall | NormBall


def poset_ball(
  key: KeyArray,
  poset: Poset,
  shape: Shape = (),
  dtype: DTypeLike | None = None,
  *,
  method: str = "auto",
) -> jax.Array:
  """Exactly uniform points of the poset ball of ``poset``.

  Args:
    key: one PRNG key.
    poset: a :class:`~jaxdp.Poset` on d elements.
    shape: batch shape.
    dtype: a floating dtype (default: JAX's default float).
    method: ``"auto"``, ``"forest"`` (forests, d <= 128), ``"sp"``
      (series-parallel posets, d <= 512) or ``"general"`` (any poset, d <= 22). All
      are exact and agree in distribution (:class:`~jaxdp.PosetBall` says which
      "auto" takes).

  Returns:
    Array of shape ``(*shape, d + 1)``; coordinate 0 is the root.
  """
  ball = PosetBall(poset, method)
  return _draw(key, ball, None, shape, dtype, uniform=True)


def lp_ball(
  key: KeyArray, d: int, p: float, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Uniform points of the unit l_p ball in R^d.

  p = 1, 2 and inf use direct constructions (normalised exponentials, a normal
  direction with a U^(1/d) radius, a uniform cube); other p normalise generalized
  normals (Barthe et al. 2005), drawn so that none underflows to 0 at large p.

  Returns:
    Array of shape ``(*shape, d)``.
  """
  return _draw(key, LpBall(d, p), None, shape, dtype, uniform=True)


def knorm(
  key: KeyArray, ball: Ball, eps: Scalar, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """K-norm mechanism noise ``R Z``: ``R ~ Gamma(dim + 1, scale=1/eps)``, Z uniform in K.

  Its density is proportional to ``exp(-eps ||y||_K)``, so adding it to a statistic
  of K-norm sensitivity 1 is eps-DP. For the poset ball, Z R comes from ``dim + 1``
  exponentials on the vertices of a uniform simplex; for l_1 the noise is i.i.d.
  Laplace(1/eps).

  Args:
    key: one PRNG key.
    ball: a :class:`~jaxdp.PosetBall`, :class:`~jaxdp.LpBall` or a query ball.
    eps: privacy parameter; a positive number in float32's normal range (noise is
      scaled in float32), or a traced scalar (then a non-positive or non-finite
      value yields NaN noise, never weaker noise).
    shape: batch shape.
    dtype: a floating dtype.

  Returns:
    Array of shape ``(*shape, ball.dim)``.

  References:
    Hardt & Talwar (2010), Section 4; Joseph, Ribero & Yu (2025), Section 3.
  """
  if not isinstance(ball, (PosetBall, LpBall, NormBall)):
    raise _checks.ArgTypeError(f"ball must be a jaxdp ball; got {type(ball).__name__}.")
  eps = _checks.check_eps(eps, "eps")
  return _draw(key, ball, eps, shape, dtype, uniform=False)


def laplace(
  key: KeyArray, shape: Shape = (), dtype: DTypeLike | None = None, *, scale: Scalar = 1.0
) -> jax.Array:
  """I.i.d. Laplace noise with density ``exp(-|x| / scale) / (2 scale)``.

  The signature follows ``jax.random.laplace(key, shape, dtype)``; ``scale`` is
  keyword-only and broadcasts against ``shape``.

  Args:
    key: one PRNG key.
    shape: output shape.
    dtype: a floating dtype.
    scale: positive finite scale b (sensitivity / eps): a number or an array that
      broadcasts to ``shape``; may be traced (a bad traced value yields NaN there).

  Returns:
    Array of shape ``shape``.
  """
  return _scaled(_laplace, key, shape, dtype, scale)


def gaussian(
  key: KeyArray, shape: Shape = (), dtype: DTypeLike | None = None, *, scale: Scalar = 1.0
) -> jax.Array:
  """I.i.d. normal noise with mean 0 and standard deviation ``scale``.

  As :func:`laplace`: ``jax.random.normal``'s signature with a keyword-only,
  broadcasting ``scale`` (the Gaussian mechanism's sigma).
  """
  return _scaled(_gaussian, key, shape, dtype, scale)


def os_key(impl: str | None = None, *, entropy: bytes | None = None) -> jax.Array:
  """A typed key whose whole state comes from the operating system's entropy.

  ``jax.random.key(seed)`` keeps only the low 32 bits of ``seed`` unless x64 is
  enabled, so a key made from a 64-bit random seed has 32 bits of entropy and can be
  brute-forced. This fills every word of the generator's key data instead
  (``jax.random.wrap_key_data``): 64 bits for Threefry, the default.

  Args:
    impl: ``"chacha20"``, ``"chacha8"``, ``"threefry"``, or a ``jax.random`` PRNG
      implementation name or object (default: JAX's default implementation).
    entropy: for tests only: the exact key bytes (4 per 32-bit word of key data,
      little-endian); ``None`` reads the OS generator (``secrets.token_bytes``).

  Returns:
    A scalar typed key.

  Raises:
    ValueError: ``entropy`` has the wrong length, or is ``None`` inside ``jit`` or
      another transformation (the OS is read once, while JAX traces).
  """
  impl = _IMPLS.get(impl, impl) if isinstance(impl, str) else impl
  size = 4 * math.prod(words := _key_shape(impl))
  if entropy is None:
    _checks.check_os_read("jaxdp.random.os_key()", "Make the key outside and pass it in.")
  elif not isinstance(entropy, (bytes, bytearray)) or len(entropy) != size:
    raise ValueError(
      f"entropy must be {size} bytes for this generator's key; got {entropy!r:.40}."
    )
  raw = secrets.token_bytes(size) if entropy is None else bytes(entropy)
  data = np.frombuffer(raw, dtype="<u4").astype(np.uint32).reshape(words)
  return jax.random.wrap_key_data(data, impl=impl)


def secure_key(seed: bytes | None = None) -> jax.Array:
  """A ChaCha20 key (:data:`jaxdp.prng.chacha.CHACHA20`) for releases meant to be published.

  ``jax.random.bits(secure_key(K), (n,), jnp.uint32)`` is the RFC 8439 keystream of
  key ``K`` (nonce 0, block counter 0, 1, ...) as little-endian words; every
  ``jax.random`` function and jaxdp sampler accepts the key. See :mod:`jaxdp.prng.chacha`
  for what the generator is and is not.

  Args:
    seed: ``None``: 32 bytes from ``secrets.token_bytes``. A 32-byte ``bytes``
      value: that key, for tests only (noise whose key is known is not private).
      A secure accountant makes its own key: it takes one only as a test's.

  Returns:
    A scalar typed key of implementation ``chacha20``.

  Raises:
    ValueError: ``seed`` is not ``None`` or 32 bytes; ``None`` inside a transformation.
  """
  if seed is not None and not (isinstance(seed, (bytes, bytearray)) and len(seed) == 32):
    raise ValueError(
      f"seed must be None (32 bytes from the OS: use this for releases) or exactly "
      f"32 bytes; got {type(seed).__name__} {seed!r:.40}."
    )
  return os_key(CHACHA20, entropy=seed)


def study_key(seed: int = 0, generator: str = "threefry") -> jax.Array:
  """A typed key for Monte Carlo studies and benchmarks, from an integer seed.

  Args:
    seed: the study's seed, in [-2**31, 2**31) (reproducible; not a secret).
    generator: one of :data:`GENERATORS`: ``"threefry"`` (``jax.random.key``),
      ``"rbg"`` or ``"chacha8"`` (see the module docstring). Releases use
      :func:`secure_key`.

  Returns:
    A scalar typed key.

  Raises:
    ValueError: an unknown generator.
  """
  if generator not in GENERATORS:
    raise ValueError(
      f"generator must be one of {GENERATORS}; got {generator!r} "
      "(releases to publish use secure_key())."
    )
  seed = _checks.check_int(seed, "seed", minimum=-(2**31))
  if seed >= 2**31:  # jax.random.key would silently keep only the low 32 bits
    raise ValueError(
      f"seed must be in [-2**31, 2**31) (a study seed is a label, "
      f"and larger ones would collide); got {seed}."
    )
  return jax.random.key(seed, impl=_IMPLS.get(generator, generator))


def is_secure_key(key: KeyArray) -> bool:
  """Whether ``key`` is a typed ChaCha20 key. The generator only: not a test of where
  the bytes came from (``secure_key(bytes(32))`` passes)."""
  typed = isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)
  return typed and jax.random.key_impl(key) == CHACHA20


# ------------------------------------------------------------------ internals
def _key_shape(impl) -> tuple[int, ...]:
  if impl is CHACHA20:
    return (8,)  # its seed function refuses integers by design
  return jax.random.key_data(jax.random.key(0, impl=impl)).shape


def _draw(key, ball, eps, shape, dtype, *, uniform: bool):
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  dtype = _checks.check_float_dtype(dtype)
  n = math.prod(shape)
  if isinstance(ball, PosetBall):
    _, tables, layout = dispatch.tables_and_layout(ball.poset, ball.method)
    flat = _poset_kernel(
      key, tables, eps, d=ball.poset.d, layout=layout, n=n, uniform=uniform, dtype=dtype
    )
  elif isinstance(ball, NormBall):
    flat = query_draws(key, eps, ball=ball, n=n, uniform=uniform, dtype=dtype)
  else:
    flat = _lp_kernel(key, eps, d=ball.d, p=ball.p, n=n, uniform=uniform, dtype=dtype)
  return flat.reshape(*shape, ball.dim)


def _compute_dtype(dtype):
  return jnp.float64 if dtype == jnp.float64 else jnp.float32


@functools.partial(jax.jit, static_argnames=("d", "layout", "n", "uniform", "dtype"))
def _poset_kernel(key, tables, eps, *, d, layout, n, uniform, dtype):
  # Static: d and the layout (the general sampler's d and width; a forest's shape; a
  # series-parallel poset's labelled decomposition); the tables are data, so posets
  # of one size and width (general) or one forest shape share this compilation.
  tables = jax.tree_util.tree_map(jnp.asarray, tables)  # numpy when jit is disabled
  cdt = _compute_dtype(dtype)

  def fn(k, m):
    k_obj, k_exp, k_rad = jax.random.split(k, 3)
    if uniform:
      return dispatch.points(k_obj, k_exp, tables, d, layout, m, cdt).astype(dtype)
    # K-norm noise R Z with R ~ Gamma(D + 1), D = d + 1, independent of Z
    return _scale(
      dispatch.noise(k_obj, k_exp, k_rad, tables, d, layout, m, cdt), eps, dtype
    )

  return chunked(fn, key, n, (d + 1,), dtype, chunk=dispatch.device_chunk_size(layout, d))


@functools.partial(jax.jit, static_argnames=("d", "p", "n", "uniform", "dtype"))
def _lp_kernel(key, eps, *, d, p, n, uniform, dtype):
  cdt = _compute_dtype(dtype)

  def fn(k, m):
    if not uniform and p == 1:
      return _scale(jax.random.laplace(k, (m, d), cdt), eps, dtype)  # Gamma x unif(l1)
    k_dir, k_rad = jax.random.split(k)
    if not uniform and p == 2:
      g = jax.random.normal(k_dir, (m, d), cdt)
      radius = gamma_radius(k_rad, d, m, cdt)
      return _scale(g * (radius / jnp.linalg.norm(g, axis=1))[:, None], eps, dtype)
    if p == math.inf:
      z = jax.random.uniform(k_dir, (m, d), cdt, minval=-1.0, maxval=1.0)
    elif p == 2:
      g = jax.random.normal(k_dir, (m, d), cdt)
      r = jax.random.uniform(k_rad, (m,), cdt) ** (1.0 / d)
      z = g * (r / jnp.linalg.norm(g, axis=1))[:, None]
    elif p == 1:
      lap = jax.random.laplace(k_dir, (m, d), cdt)
      extra = jax.random.exponential(k_rad, (m,), cdt)
      z = lap / (jnp.sum(jnp.abs(lap), axis=1) + extra)[:, None]
    else:
      z = _lp_general(k_dir, d, p, m, cdt)
    if uniform:
      return z.astype(dtype)
    k_gam = jax.random.fold_in(k_rad, 1)
    radius = gamma_radius(k_gam, d + 1, m, cdt)
    return _scale(z * radius[:, None], eps, dtype)

  return chunked(fn, key, n, (d,), dtype, chunk=device_chunk(64 * d))


def _lp_general(key, d, p, m, dtype):
  """(m, d) uniform points of the unit l_p ball, 1 <= p < inf: g / (sum |g_i|^p +
  E)^(1/p), g_i i.i.d. with density proportional to exp(-|t|^p) and E ~ Exp(1)
  (Barthe, Guedon, Mendelson & Naor 2005).

  |g_i| = G^(1/p) with G ~ Gamma(1/p), drawn as X^(1/p) U with X ~ Gamma(1 + 1/p)
  and U uniform (G = X U^p): a Gamma(1/p) variate drawn directly underflows at
  large p (a Gamma(0.01) variate is below 10^-38 with probability 0.42), so the
  point ``jax.random.ball`` builds from it is exactly 0 that often. U is kept
  above 0, so no coordinate is exactly 0."""
  k_x, k_u, k_s, k_e = jax.random.split(key, 4)
  x = jax.random.gamma(k_x, 1.0 + 1.0 / p, (m, d), dtype)
  u = jax.random.uniform(k_u, (m, d), dtype, minval=jnp.finfo(dtype).tiny)
  sign = jax.random.rademacher(k_s, (m, d), dtype)
  e = jax.random.exponential(k_e, (m,), dtype)
  total = jnp.sum(x * u**p, axis=1) + e  # sum |g_i|^p + E
  return sign * (x ** (1.0 / p) * u) / (total ** (1.0 / p))[:, None]


def _scale(noise, eps, dtype):  # noise / eps, NaN for a traced eps <= 0 or not finite
  return _checks.guard_positive(eps, noise / eps).astype(dtype)


def _scaled(kernel, key, shape, dtype, scale):
  """Validates (key, shape, dtype, scale) and runs a scaled noise kernel."""
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  dtype = _checks.check_float_dtype(dtype)
  if _checks.is_concrete(scale):
    arr = np.asarray(scale)
    if arr.ndim == 0:
      scale = _checks.check_positive(scale, "scale")
    elif not (
      np.issubdtype(arr.dtype, np.number) and np.all(np.isfinite(arr)) and np.all(arr > 0)
    ):
      raise ValueError(f"scale must hold positive finite numbers; got {scale!r}.")
  try:
    np.broadcast_shapes(np.shape(scale), shape)
  except ValueError:
    raise ValueError(
      f"scale of shape {np.shape(scale)} does not broadcast to shape {shape}."
    ) from None
  return kernel(key, jnp.asarray(scale), shape=shape, dtype=dtype)


@functools.partial(jax.jit, static_argnames=("shape", "dtype"))
def _laplace(key, scale, *, shape, dtype):
  noise = jax.random.laplace(key, shape, _compute_dtype(dtype)) * scale
  return _checks.guard_positive(scale, noise).astype(dtype)


@functools.partial(jax.jit, static_argnames=("shape", "dtype"))
def _gaussian(key, scale, *, shape, dtype):
  noise = jax.random.normal(key, shape, _compute_dtype(dtype)) * scale
  return _checks.guard_positive(scale, noise).astype(dtype)
