"""Exact Gamma(a) variates for K-norm noise and the poset-ball samplers (integer shapes),
two random words per variate."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxdp.samplers.words import normal_from_bits, paired_words, stored, unit_floats

__all__ = ["gamma_radius", "gamma_shapes"]


def gamma_radius(key, a: int, m: int, dtype, *, slots: int | None = None):
  """``m`` i.i.d. Gamma(a) variates (integer shape ``a`` >= 1), exactly.

  Marsaglia & Tsang's method, one try per variate (a normal and a uniform; accepted
  with probability > 0.99 for a >= 3); every rejected variate is replaced by an
  independent sum of ``a`` exponentials (the exact Gamma(a)), drawn for a buffer of
  ``max(64, m / 16)`` slots, or for all m in the (astronomically rare) case of more
  rejections. A variate is thus Gamma(a) whether accepted (the method's conditional
  law) or replaced, independently of the rest: 2 random words instead of a. Shapes
  a < 3 use the sum directly.

  References:
    G. Marsaglia, W. W. Tsang, "A simple method for generating gamma variables",
    ACM TOMS 26(3), 2000.
  """
  k_norm, k_unif, k_back = jax.random.split(key, 3)
  if a < 3:
    return jnp.sum(jax.random.exponential(k_back, (m, a), dtype), axis=1)
  dd = a - 1.0 / 3.0
  c = 1.0 / math.sqrt(9.0 * dd)
  x = jax.random.normal(k_norm, (m,), dtype)
  u = jax.random.uniform(k_unif, (m,), dtype, minval=jnp.finfo(dtype).tiny)
  t = 1.0 + c * x
  v = t * t * t
  log_v = jnp.log(jnp.where(t > 0, v, 1.0))
  ok = (t > 0) & (jnp.log(u) < 0.5 * x * x + dd - dd * v + dd * log_v)
  out = (dd * v).astype(dtype)
  slots = min(m, max(64, m // 16)) if slots is None else slots  # (tests: fewer)
  rejected = ~ok

  def some(out):
    idx = jnp.nonzero(rejected, size=slots, fill_value=m)[0]
    back = jnp.sum(jax.random.exponential(k_back, (slots, a), dtype), axis=1)
    return out.at[idx].set(back, mode="drop")

  def many(out):
    back = jnp.sum(jax.random.exponential(k_back, (m, a), dtype), axis=1)
    return jnp.where(rejected, back, out)

  return jax.lax.cond(jnp.sum(rejected) > slots, many, some, out)


def gamma_shapes(key, a, a_max: int, dtype, *, slots: int | None = None):
  """Independent Gamma(a_i) variates for an array ``a`` of integer shapes in
  [1, ``a_max``] (traced; float32, the shape of ``a``), exactly.

  As :func:`gamma_radius` with a shape per variate: Marsaglia & Tsang's method, one
  try each (valid for every a >= 1; accepted with probability above 0.95 at a = 1
  and 0.99 from a = 3), every rejected variate replaced by an independent sum of
  ``a_i`` exponentials, drawn for a buffer of ``max(64, size / 16)`` slots or, when
  more are rejected, for all. One Threefry hash per variate (the normal and the
  uniform of the try, :func:`jaxdp.samplers.words.paired_words`), no loop. The
  try's result is stored before its four consumers (XLA would recompute it in each).
  """
  del dtype  # float32: the variates scale float32 weights
  shape = a.shape
  m = math.prod(shape)
  a = a.reshape(m)
  k_try, k_back = jax.random.split(key)
  w_norm, w_unif = paired_words(k_try, (m,))
  dd = a.astype(jnp.float32) - 1.0 / 3.0
  c = jax.lax.rsqrt(9.0 * dd)
  x = normal_from_bits(w_norm)
  u = jnp.maximum(unit_floats(w_unif), jnp.finfo(jnp.float32).tiny)
  t = 1.0 + c * x
  v = t * t * t
  log_v = jnp.log(jnp.where(t > 0, v, 1.0))
  ok = (t > 0) & (jnp.log(u) < 0.5 * x * x + dd - dd * v + dd * log_v)
  out, rejected = stored((dd * v, (~ok).astype(jnp.int32)), w_unif[0])
  rejected = rejected != 0
  slots = min(m, max(64, m // 16)) if slots is None else slots
  terms = jnp.arange(a_max, dtype=a.dtype)

  def sums(rows, shapes):
    e = jax.random.exponential(k_back, (rows, a_max), jnp.float32)
    return jnp.sum(jnp.where(terms < shapes[:, None], e, 0.0), axis=1)

  def some(out):
    idx = jnp.nonzero(rejected, size=slots, fill_value=m)[0]
    back = sums(slots, a[jnp.minimum(idx, m - 1)])
    return out.at[idx].set(back, mode="drop")

  def many(out):
    return jnp.where(rejected, sums(m, a), out)

  return jax.lax.cond(jnp.sum(rejected) > slots, many, some, out).reshape(shape)
