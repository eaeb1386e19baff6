"""The base of the query balls: a symmetric convex body with its norm and a sampler.

A :class:`NormBall` is immutable, hashable configuration (a static jit argument and
a static pytree field), like :class:`~jaxdp.PosetBall` and :class:`~jaxdp.LpBall`.
Subclasses give the ball's dimension, its norm (gauge), points that span it and an
exactly uniform sampler; :func:`jaxdp.random.knorm` turns the sampler into K-norm
noise.

References:
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._identity import FieldIdentity
from jaxdp.samplers.gamma import gamma_radius
from jaxdp.typing import ArrayLike, DTypeLike, KeyArray

__all__ = ["MAX_QUERY_D", "NormBall", "SlicedBall", "check_query_size"]

# The largest dimension of a query ball.
MAX_QUERY_D = 4096


def check_query_size(d, k=None) -> tuple[int, int | None]:
  """``(d, k)`` as ints: 1 <= d <= MAX_QUERY_D and 1 <= k <= d.

  Raises:
    TypeError, ValueError: naming the argument and the bad value.
  """
  d = _checks.check_int(d, "d", minimum=1)
  if d > MAX_QUERY_D:
    raise ValueError(f"d must be at most {MAX_QUERY_D}; got {d}.")
  if k is None:
    return d, None
  k = _checks.check_int(k, "k", minimum=1)
  if k > d:
    raise ValueError(
      f"k must be between 1 and d = {d} (each person contributes at most k of the "
      f"d coordinates); got k = {k}. Use k = {d} for no limit."
    )
  return d, k


class NormBall(FieldIdentity):
  """A symmetric convex body K in R^dim: the unit ball of the norm ``norm``.

  Subclasses are frozen dataclasses (``eq=False``: equality and hashing are
  :class:`~jaxdp._identity.FieldIdentity`'s) and define :attr:`dim`, :meth:`norm`,
  :meth:`hull_points`, :meth:`points` and :attr:`name`.
  """

  name = "norm ball"
  # A draw's working set per coordinate of a row of uniform points, in bytes: it
  # sizes the CPU's chunks of draws (:func:`~jaxdp.samplers.query_draws.query_chunk`).
  points_bytes = 64

  @property
  def dim(self) -> int:
    """The dimension of the ball."""
    raise NotImplementedError

  def norm(self, v: ArrayLike) -> jax.Array:
    """The gauge ||v||_K along the last axis (jnp, jit-friendly)."""
    raise NotImplementedError

  def radius(self) -> float:
    """max ||z||_2 over the ball (its largest vertex norm)."""
    raise NotImplementedError

  def hull_points(self) -> np.ndarray:
    """Points whose convex hull is the ball (its vertices, maybe more), ``(N, dim)``
    float64; small sizes only.

    Raises:
      ValueError: if there are too many to list.
    """
    raise NotImplementedError

  def points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    """``(m, dim)`` exactly uniform points of the ball (traceable; ``m`` static)."""
    raise NotImplementedError

  def bounding_box(self) -> float:
    """The smallest r with K inside [-r, r]^dim."""
    raise NotImplementedError

  def knorm_points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    """``(m, dim)`` K-norm noise vectors at eps = 1: R Z with R ~ Gamma(dim + 1)
    and Z uniform in the ball, independent (a subclass may draw them directly)."""
    k_pts, k_rad = jax.random.split(key)
    radius = gamma_radius(k_rad, self.dim + 1, m, dtype)
    return self.points(k_pts, m, dtype) * radius[:, None]

  def second_moment(self) -> np.ndarray:
    """Exact E[Z Z^T] for Z uniform in the ball, ``(dim, dim)`` float64."""
    raise NotImplementedError

  def expected_sq_norm(self) -> float:
    """Exact E||Z||_2^2 for Z uniform in the ball (the trace of
    :meth:`second_moment`)."""
    return float(np.trace(self.second_moment()))


@dataclasses.dataclass(frozen=True, eq=False)
class SlicedBall(NormBall):
  """A ball of d coordinates of which one person changes at most k, each by at most
  1 (the sum and count balls): its parts in an orthant are cube slices
  {x in [0, 1]^m : sum(x) <= k}, the unit balls of :meth:`slice_norm`.

  Attributes:
    d: the dimension.
    k: the most coordinates one person changes (1 <= k <= d).
  """

  d: int
  k: int

  def __post_init__(self):
    d, k = check_query_size(self.d, self.k)
    object.__setattr__(self, "d", d)
    object.__setattr__(self, "k", k)

  @property
  def dim(self) -> int:
    return self.d

  def slice_norm(self, x: ArrayLike) -> jax.Array:
    """max(||x||_inf, ||x||_1 / k) of non-negative ``x`` along the last axis."""
    return jnp.maximum(jnp.max(x, axis=-1), jnp.sum(x, axis=-1) / self.k)

  def radius(self) -> float:
    return math.sqrt(self.k)

  def bounding_box(self) -> float:
    return 1.0


def rejection_points(ball: NormBall, key: KeyArray, m: int, dtype) -> jax.Array:
  """Uniform points of ``ball`` by rejection from its bounding box: exact, and slow
  (the acceptance is vol(K) / (2r)^dim), so for small dimensions only."""
  r = ball.bounding_box()
  dim = ball.dim

  def cond(state):
    return ~jnp.all(state[1])

  def body(state):
    pts, done, k = state
    k, sub = jax.random.split(k)
    cand = jax.random.uniform(sub, (m, dim), dtype, minval=-r, maxval=r)
    ok = ball.norm(cand) <= 1.0
    take = ok & ~done
    return jnp.where(take[:, None], cand, pts), done | take, k

  init = (jnp.zeros((m, dim), dtype), jnp.zeros((m,), bool), key)
  return jax.lax.while_loop(cond, body, init)[0]
