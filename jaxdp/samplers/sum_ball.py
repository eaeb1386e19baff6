"""The sum ball: {v : ||v||_inf <= 1, ||v||_1 <= k}.

A person contributes a vector in [-1, 1]^d with at most k non-zero entries; the
convex hull of those vectors (and so of the differences a person makes, added or
removed) is this ball, the optimal K-norm ball for the sum query.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 7.
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

__all__ = ["SumBall"]

# hull_points lists at most this many points.
MAX_HULL_POINTS = 2_000_000


@dataclasses.dataclass(frozen=True)
class SumBall(NormBall):
  """The unit ball of ``max(||v||_inf, ||v||_1 / k)`` in R^d.

  Attributes:
    d: the dimension.
    k: the most coordinates one person changes (1 <= k <= d; k = 1 is the l_1
      ball, k = d the cube).
  """

  d: int
  k: int

  name = "sum ball"

  def __post_init__(self):
    d, k = check_query_size(self.d, self.k)
    object.__setattr__(self, "d", d)
    object.__setattr__(self, "k", k)

  @property
  def dim(self) -> int:
    return self.d

  def norm(self, v: ArrayLike) -> jax.Array:
    a = jnp.abs(jnp.asarray(v))
    return jnp.maximum(jnp.max(a, axis=-1), jnp.sum(a, axis=-1) / self.k)

  def radius(self) -> float:
    return math.sqrt(self.k)

  def bounding_box(self) -> float:
    return 1.0

  def hull_points(self) -> np.ndarray:
    """Every vector with exactly k entries +-1 and the rest 0 (the extreme points)."""
    count = math.comb(self.d, self.k) * 2**self.k
    if count > MAX_HULL_POINTS:
      raise ValueError(
        f"the sum ball with d = {self.d}, k = {self.k} has {count} vertices."
      )
    out = []
    for support in itertools.combinations(range(self.d), self.k):
      for signs in itertools.product((-1.0, 1.0), repeat=self.k):
        v = np.zeros(self.d)
        v[list(support)] = signs
        out.append(v)
    return np.array(out).reshape(-1, self.d)

  def points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    return rejection_points(self, key, m, dtype)
