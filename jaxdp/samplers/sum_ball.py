"""The sum ball: {v : ||v||_inf <= 1, ||v||_1 <= k}.

A person contributes a vector in [-1, 1]^d with at most k non-zero entries; the
convex hull of those vectors (and so of the differences a person makes, added or
removed) is this ball, the optimal K-norm ball for the sum query.

Sampler (exact): the ball is the union of the 2^d reflections of the cube slice
S(d, k) = {x in [0, 1]^d : sum(x) <= k}, so a uniform point is a uniform point of
S(d, k) (:mod:`jaxdp.samplers.slice_kernel`: rejection from the wrapped simplex
frac(a D), the tilted exponentials or the cube, whichever accepts most) with
independent uniform signs.

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

from jaxdp.samplers.cube_slice import rejection_fill, slice_moments
from jaxdp.samplers.norm_ball import SlicedBall
from jaxdp.samplers.slice_kernel import proposal_table, slice_proposals, uniforms
from jaxdp.typing import ArrayLike, DTypeLike, KeyArray

__all__ = ["SumBall"]

# hull_points lists at most this many points.
MAX_HULL_POINTS = 2_000_000


@dataclasses.dataclass(frozen=True, eq=False)
class SumBall(SlicedBall):
  """The unit ball of ``max(||v||_inf, ||v||_1 / k)`` in R^d.

  Attributes:
    d: the dimension.
    k: the most coordinates one person changes (1 <= k <= d; k = 1 is the l_1
      ball, k = d the cube).
  """

  name = "sum ball"

  def norm(self, v: ArrayLike) -> jax.Array:
    return self.slice_norm(jnp.abs(jnp.asarray(v)))

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
    d, k = self.d, self.k
    k_slice, k_sign = jax.random.split(key)
    if k >= d:  # the cube
      x = jax.random.uniform(k_slice, (m, d), dtype)
    else:
      table = proposal_table(d, k)

      def candidates(key, rows):
        u = uniforms(key, (m if rows is None else rows.shape[0], d + 2), dtype)
        x, ok, _ = slice_proposals(u[:, :d], u[:, d:], None, (d,), table, k)
        ok = (ok[0] & (self.norm(x) <= 1))[:, None]
        return x, ok, jnp.zeros(x.shape, jnp.int32)

      x = rejection_fill(candidates, k_slice, m, d, 1, dtype)
    return jnp.where(random_signs(k_sign, m, d), -x, x)

  def second_moment(self) -> np.ndarray:
    """Exact E[Z Z^T]: E[x_1^2] I for x uniform in S(d, k) (independent signs), from
    the Irwin-Hall CDF in rational arithmetic (:func:`~jaxdp.samplers.cube_slice.
    slice_moments`; seconds at d in the thousands)."""
    return float(slice_moments(self.d, self.k)[2]) * np.eye(self.d)


def random_signs(key: KeyArray, m: int, d: int) -> jax.Array:
  """``(m, d)`` i.i.d. fair booleans, 32 from each random word."""
  words = jax.random.bits(key, (m, -(-d // 32)), jnp.uint32)
  col = np.arange(d)
  shift = jnp.asarray(col % 32, jnp.uint32)
  return ((words[:, col // 32] >> shift) & 1) == 1
