"""Draws of the query balls (:class:`~jaxdp.SumBall`, :class:`~jaxdp.CountBall`,
:class:`~jaxdp.VoteBall`) in ``jax.random``'s conventions; :mod:`jaxdp.random`
re-exports the public functions."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.chunks import CHUNK, chunked, device_chunk
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall
from jaxdp.typing import DTypeLike, KeyArray, Shape

__all__ = [
  "count_ball",
  "narrow",
  "narrow_points",
  "query_chunk",
  "query_draws",
  "sum_ball",
  "toward_zero",
  "vote_ball",
]

# Fresh draws a round for the rows that rounding leaves outside the ball.
REDRAW_ROWS = 64


def sum_ball(
  key: KeyArray, d: int, k: int, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Exactly uniform points of the sum ball {v : ||v||_inf <= 1, ||v||_1 <= k} in R^d
  (:class:`~jaxdp.SumBall`).

  Returns:
    Array of shape ``(*shape, d)``.
  """
  return _uniform(key, SumBall(d, k), shape, dtype)


def count_ball(
  key: KeyArray, d: int, k: int, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Exactly uniform points of the count ball in R^d (:class:`~jaxdp.CountBall`).

  Returns:
    Array of shape ``(*shape, d)``.
  """
  return _uniform(key, CountBall(d, k), shape, dtype)


def vote_ball(
  key: KeyArray, d: int, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Exactly uniform points of the vote ball in R^d (:class:`~jaxdp.VoteBall`).

  Returns:
    Array of shape ``(*shape, d)``.
  """
  return _uniform(key, VoteBall(d), shape, dtype)


def _uniform(key, ball, shape, dtype):
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  dtype = _checks.check_float_dtype(dtype)
  flat = query_draws(key, None, ball=ball, n=math.prod(shape), uniform=True, dtype=dtype)
  return flat.reshape(*shape, ball.dim)


@functools.partial(jax.jit, static_argnames=("ball", "n", "uniform", "dtype"))
def query_draws(key, eps, *, ball, n, uniform, dtype):
  """``(n, ball.dim)`` uniform points of ``ball`` or K-norm noise ``R Z / eps`` (R ~
  Gamma(dim + 1)), from a checked key, in chunks."""
  cdt = jnp.float64 if dtype == jnp.float64 else jnp.float32
  dim = ball.dim

  def fn(k, m):
    if uniform:
      return narrow_points(ball, k, m, cdt, dtype)
    return _checks.guard_positive(eps, ball.knorm_points(k, m, cdt) / eps).astype(dtype)

  return chunked(fn, key, n, (dim,), dtype, chunk=query_chunk(dim))


def narrow_points(ball, key, m, cdt, dtype):
  """``(m, ball.dim)`` uniform points of ``ball`` in ``dtype``, drawn in ``cdt``.

  In ``cdt`` itself: ``ball.points``. In a narrower dtype (float16, bfloat16) each
  row is rounded by :func:`narrow`, and a row that is still outside the ball (its
  norm computed in ``cdt``) is replaced by the first fresh draw that is not
  (``REDRAW_ROWS`` fresh draws a round), so every row is a draw of the rounded
  uniform point given that it lies in the ball, independently of the others.
  """
  if jnp.dtype(dtype) == jnp.dtype(cdt):
    return ball.points(key, m, cdt)
  k_first, k_more = jax.random.split(key)

  def draw(k, rows):
    z = narrow(ball, ball.points(k, rows, cdt), dtype)
    return z, ball.norm(z.astype(cdt)) > 1

  def body(state):
    z, out, k = state
    k, sub = jax.random.split(k)
    idx = jnp.nonzero(out, size=REDRAW_ROWS, fill_value=m)[0]
    new, new_out = draw(sub, REDRAW_ROWS)
    target = jnp.where(new_out, m, idx)  # fill_value m: dropped
    return z.at[target].set(new, mode="drop"), out.at[target].set(False, mode="drop"), k

  z, out = draw(k_first, m)
  return jax.lax.while_loop(lambda s: jnp.any(s[1]), body, (z, out, k_more))[0]


def narrow(ball, z, dtype):
  """Points ``z`` of ``ball`` in ``dtype``: each row rounded to nearest, or, when
  that row's norm (computed in ``z``'s dtype) exceeds 1, rounded by
  :func:`toward_zero`. Rounding every row toward zero would shrink every point by
  about half a unit in the last place (E[|z|^2] about 0.5% low in bfloat16); only
  the rows that rounding to nearest pushes out of the ball are shrunk."""
  out = z.astype(dtype)
  inside = ball.norm(out.astype(z.dtype)) <= 1
  return jnp.where(inside[:, None], out, toward_zero(z, dtype))


def toward_zero(z, dtype):
  """``z`` in ``dtype``, rounded toward zero where rounding to nearest grew |z_i|: the
  sum and count balls' norms grow with every |z_i|, so their points stay inside in a
  narrower dtype (float16, bfloat16) too."""
  out = z.astype(dtype)
  if out.dtype == z.dtype:
    return out
  grew = jnp.abs(out.astype(z.dtype)) > jnp.abs(z)
  return jnp.where(grew, jnp.nextafter(out, jnp.zeros_like(out)), out)


def query_chunk(dim: int) -> int:
  """Rows per chunk: :func:`~jaxdp.samplers.chunks.device_chunk`'s, and on the CPU at
  most ``CHUNK * 64 / dim`` (a power of two, at least 1024), so that a chunk of a
  wide ball (d up to 4096) stays a few megabytes."""
  chunk = device_chunk(64 * dim)
  if chunk > CHUNK:
    return chunk
  return min(CHUNK, 1 << max(10, (CHUNK * 64 // dim).bit_length() - 1))
