"""The vote ball: conv(P u -P), P the permutohedron of (0, 1, ..., d - 1).

A voter ranks d candidates and gives them the Borda scores d - 1, ..., 0 (a
permutation of (0, ..., d - 1)), and is added or removed; the convex hull of those
changes is this ball, the optimal K-norm ball for the vote query. As -P = P - (d - 1)1,
it is the prism P + [-(d - 1), 0] 1. With m the mean of v and u = v - m 1, its norm is
max(2 |m| / (d - 1), max_s (sum of the s largest u_i) / (s (d - s) / 2)).

Sampling: the segment's direction 1 is orthogonal to P's hyperplane, so a uniform
point of the prism is a uniform point y of P minus t (d - 1) 1 with t ~ U(0, 1)
independent. y comes from :mod:`jaxdp.samplers.permutohedron` (P is the Voronoi cell
of the lattice d A*_{d-1}: a uniform point of the torus reduced to its nearest
lattice point, one sort per sample), so the draw is exact, O(d log^2 d) per point,
with no rejection and no data-dependent loop. Centred, Z = y_c + (d - 1)(1/2 - t) 1,
and E[Z Z^T] = alpha (I - 1 1^T / d) + ((d - 1)^2 / 12) 1 1^T with alpha =
E||y_c||^2 / (d - 1) (:func:`~jaxdp.samplers.permutohedron.centred_sq_norm`).

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 9.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.samplers.chunks import chunked
from jaxdp.samplers.norm_ball import NormBall, check_query_size
from jaxdp.samplers.permutohedron import centred_points, centred_sq_norm
from jaxdp.typing import ArrayLike, DTypeLike, KeyArray

__all__ = ["VoteBall"]

# hull_points lists the 2 d! Borda vectors up to this d.
MAX_HULL_D = 9
# On the CPU, points works in pieces of about this many coordinates (samples times
# d): the sort's working set then stays in cache (benchmarks/vote_ball.py).
POINTS_WORK = 1 << 14


@dataclasses.dataclass(frozen=True, eq=False)
class VoteBall(NormBall):
  """The vote ball in R^d (d >= 2 candidates, Borda scores 0..d-1).

  Attributes:
    d: the number of candidates.
  """

  d: int

  name = "vote ball"

  def __post_init__(self):
    d, _ = check_query_size(self.d)
    if d < 2:
      raise ValueError(f"d must be >= 2 candidates for the vote ball; got {d}.")
    object.__setattr__(self, "d", d)

  @property
  def dim(self) -> int:
    return self.d

  def norm(self, v: ArrayLike) -> jax.Array:
    v = jnp.asarray(v)
    d = self.d
    m = jnp.mean(v, axis=-1, keepdims=True)
    u = jnp.sort(v - m, axis=-1)[..., ::-1]  # descending
    top = jnp.cumsum(u, axis=-1)[..., : d - 1]  # sums of the s largest, s = 1..d-1
    s = jnp.arange(1, d, dtype=top.dtype)
    shape = jnp.max(top / (s * (d - s) / 2), axis=-1)
    return jnp.maximum(2 * jnp.abs(m[..., 0]) / (d - 1), shape)

  def radius(self) -> float:
    d = self.d
    return math.sqrt((d - 1) * d * (2 * d - 1) / 6)

  def bounding_box(self) -> float:
    return float(self.d - 1)

  def hull_points(self) -> np.ndarray:
    """+-(every permutation of (0, ..., d - 1)): the vertices."""
    if self.d > MAX_HULL_D:
      raise ValueError(
        f"the vote ball with d = {self.d} has 2 * {self.d}! vertices; hull_points lists "
        f"them for d <= {MAX_HULL_D}."
      )
    perms = np.array(list(itertools.permutations(range(self.d))), dtype=float)
    return np.concatenate([perms, -perms])

  def points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    """``(m, d)`` exactly uniform points: a uniform point of the permutohedron (the
    lattice reduction of :mod:`jaxdp.samplers.permutohedron`) minus t (d - 1) 1.
    On the CPU, large ``m * d`` runs in pieces of about ``POINTS_WORK`` coordinates
    (so draws of many points differ between the CPU and an accelerator)."""
    d = self.d

    def draw(k, size):
      k_cube, k_shift = jax.random.split(k)
      v = jax.random.uniform(k_cube, (d, size), dtype)  # one sample per column
      t = jax.random.uniform(k_shift, (1, size), dtype)
      return (centred_points(v) + (d - 1) * (0.5 - t)).T

    # the CPU runs cache-sized pieces in sequence; an accelerator takes all m at once
    piece = max(64, POINTS_WORK // d) if jax.default_backend() == "cpu" else max(m, 1)
    return chunked(draw, key, m, (d,), dtype, chunk=piece)

  def second_moment(self) -> np.ndarray:
    """Exact E[Z Z^T] = alpha (I - 1 1^T / d) + ((d - 1)^2 / 12) 1 1^T, float64:
    the centred permutohedron's isotropic part (alpha = E||y_c||^2 / (d - 1), by
    symmetry) plus the uniform shift along 1."""
    d = self.d
    alpha = centred_sq_norm(d) / (d - 1)
    ones = np.ones((d, d))
    return alpha * (np.eye(d) - ones / d) + (d - 1) ** 2 / 12 * ones
