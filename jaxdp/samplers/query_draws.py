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
from jaxdp.samplers.cube_slice import rejection_fill
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall
from jaxdp.typing import DTypeLike, KeyArray, Shape

__all__ = [
  "count_ball",
  "narrow_points",
  "query_chunk",
  "query_draws",
  "redraw_rows",
  "sum_ball",
  "vote_ball",
]

# The fewest slots a round for the rows that rounding pushes out of the ball.
MIN_REDRAW_ROWS = 64


def sum_ball(
  key: KeyArray, d: int, k: int, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Exactly uniform points of the sum ball {v : ||v||_inf <= 1, ||v||_1 <= k} in R^d
  (:class:`~jaxdp.SumBall`).

  In float16 or bfloat16 a point is the nearest rounding of a uniform point, given
  that it lies in the ball (:func:`~jaxdp.samplers.query_draws.narrow_points`).

  Returns:
    Array of shape ``(*shape, d)``.
  """
  return _uniform(key, SumBall(d, k), shape, dtype)


def count_ball(
  key: KeyArray, d: int, k: int, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Exactly uniform points of the count ball in R^d (:class:`~jaxdp.CountBall`).

  In float16 or bfloat16 a point is the nearest rounding of a uniform point, given
  that it lies in the ball (:func:`~jaxdp.samplers.query_draws.narrow_points`).

  Returns:
    Array of shape ``(*shape, d)``.
  """
  return _uniform(key, CountBall(d, k), shape, dtype)


def vote_ball(
  key: KeyArray, d: int, shape: Shape = (), dtype: DTypeLike | None = None
) -> jax.Array:
  """Exactly uniform points of the vote ball in R^d (:class:`~jaxdp.VoteBall`).

  In float16 or bfloat16 a point is the nearest rounding of a uniform point, given
  that it lies in the ball (:func:`~jaxdp.samplers.query_draws.narrow_points`).

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

  chunk = query_chunk(dim, ball.points_bytes) if uniform else query_chunk(dim)
  return chunked(fn, key, n, (dim,), dtype, chunk=chunk)


def narrow_points(ball, key, m, cdt, dtype):
  """``(m, ball.dim)`` uniform points of ``ball`` in ``dtype``, drawn in ``cdt``.

  In ``cdt`` itself: ``ball.points``. In a narrower dtype (float16, bfloat16) each
  row is rounded to nearest, and a row that rounding pushes out of the ball (its
  norm computed in ``cdt`` above 1) is replaced by a fresh rounded draw that is not
  (:func:`~jaxdp.samplers.cube_slice.rejection_fill`, :func:`redraw_rows` slots a
  round). Every row is thus the nearest rounding of a uniform point, given that it
  lies in the ball, independently of the others. Rounding toward zero instead would
  keep the sum and count balls' points inside without redraws, but shrinks them:
  E[|z|^2] comes out low, whether every row or only the rows pushed out are so
  rounded.
  """
  if jnp.dtype(dtype) == jnp.dtype(cdt):
    return ball.points(key, m, cdt)

  def candidates(k, rows):
    n = m if rows is None else rows.shape[0]
    z = ball.points(k, n, cdt).astype(dtype)
    inside = ball.norm(z.astype(cdt)) <= 1
    return z, inside[:, None], jnp.zeros(z.shape, jnp.int32)

  return rejection_fill(candidates, key, m, ball.dim, 1, dtype, slots=redraw_rows(m))


def redraw_rows(m: int) -> int:
  """Slots a round of :func:`narrow_points`'s redraws for ``m`` rows: ``m / 32`` (a
  power of two, at least ``MIN_REDRAW_ROWS``, at most ``m``). In bfloat16, rounding
  pushes out a few percent of the rows of a wide ball (up to about 8% of the vote
  ball's at d = 200), so a round or two replaces them all."""
  return min(m, max(MIN_REDRAW_ROWS, 1 << max(0, (m // 32).bit_length() - 1)))


def query_chunk(dim: int, bytes_per_coordinate: int = 64) -> int:
  """Rows per chunk for a draw whose working set is ``bytes_per_coordinate`` bytes
  per coordinate of a row: :func:`~jaxdp.samplers.chunks.device_chunk`'s, and on
  the CPU at most ``CHUNK * 64 / dim`` rows at 64 bytes (a power of two, at least
  1024; fewer at more bytes), so that a chunk of a wide ball (d up to 4096) stays a
  few megabytes."""
  row_bytes = bytes_per_coordinate * dim
  chunk = device_chunk(row_bytes)
  if chunk > CHUNK:
    return chunk
  return min(CHUNK, 1 << max(10, (CHUNK * 4096 // row_bytes).bit_length() - 1))
