"""The count ball: conv(C u -C), C = {x in [0, 1]^d : sum(x) <= k}.

A person ticks at most k of d boxes (a 0/1 vector with at most k ones) and is added
or removed; the convex hull of those changes is this ball, the optimal K-norm ball
for the count query. Its norm is g(v+) + g(v-), with g(x) = max(||x||_inf,
||x||_1 / k) and v+, v- the positive and negative parts of v.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 8.
"""

from __future__ import annotations

import dataclasses
import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.samplers.norm_ball import NormBall, check_query_size, rejection_points
from jaxdp.typing import ArrayLike, DTypeLike, KeyArray

__all__ = ["CountBall"]

# hull_points lists at most this many points.
MAX_HULL_POINTS = 2_000_000


@dataclasses.dataclass(frozen=True)
class CountBall(NormBall):
  """The count ball in R^d: conv of +-x for 0/1 vectors x with at most k ones.

  Attributes:
    d: the number of boxes.
    k: the most boxes one person ticks (1 <= k <= d).
  """

  d: int
  k: int

  name = "count ball"

  def __post_init__(self):
    d, k = check_query_size(self.d, self.k)
    object.__setattr__(self, "d", d)
    object.__setattr__(self, "k", k)

  @property
  def dim(self) -> int:
    return self.d

  def norm(self, v: ArrayLike) -> jax.Array:
    v = jnp.asarray(v)
    return self._half(jnp.maximum(v, 0)) + self._half(jnp.maximum(-v, 0))

  def _half(self, x):
    return jnp.maximum(jnp.max(x, axis=-1), jnp.sum(x, axis=-1) / self.k)

  def radius(self) -> float:
    return math.sqrt(self.k)

  def bounding_box(self) -> float:
    return 1.0

  def hull_points(self) -> np.ndarray:
    """+-x for every 0/1 vector x with 1 to k ones (a superset of the vertices)."""
    count = 2 * sum(math.comb(self.d, j) for j in range(1, self.k + 1))
    if count > MAX_HULL_POINTS:
      raise ValueError(
        f"the count ball with d = {self.d}, k = {self.k} has {count} points."
      )
    out = []
    for j in range(1, self.k + 1):
      for support in itertools.combinations(range(self.d), j):
        v = np.zeros(self.d)
        v[list(support)] = 1.0
        out += [v, -v]
    return np.array(out).reshape(-1, self.d)

  def points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    return rejection_points(self, key, m, dtype)
