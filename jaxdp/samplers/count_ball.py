"""The count ball: conv(C u -C), C = {x in [0, 1]^d : sum(x) <= k}.

A person ticks at most k of d boxes (a 0/1 vector with at most k ones) and is added
or removed; the convex hull of those changes is this ball, the optimal K-norm ball
for the count query. Its norm is g(v+) + g(v-), with g(x) = max(||x||_inf,
||x||_1 / k) and v+, v- the positive and negative parts of v.

Sampler (exact): in the orthant whose j positive coordinates form the set P, the
ball is {(a, -b) : g(a) + g(b) <= 1}, with unit balls of g the cube slices S(j, k)
and S(d - j, k); its volume is vol S(j, k) vol S(d - j, k) j! (d - j)! / d!, so the
class of the C(d, j) orthants with j positive coordinates has weight proportional to
vol S(j, k) vol S(d - j, k). A point of an orthant is (r u, -s w) with (r, s, 1 - r -
s) ~ Dirichlet(j, d - j, 1) and u = x / g(x), w = y / g(y) for x, y uniform in the
two slices (the direction x / g(x) of a uniform point follows the cone measure,
independent of g(x)). A row draws j from the class weights (their CDF computed in
float64 on the host), P by selection sampling, (r, s) from Gamma(j), Gamma(d - j)
and Exp(1) variates (K-norm noise uses the two Gammas alone, as R (r, s) with R ~
Gamma(d + 1): :meth:`CountBall.knorm_points`), and x and y by rejection
(:mod:`jaxdp.samplers.slice_kernel`: each half from the proposal that accepts most
for its size, the wrapped simplex, the tilted exponentials or the cube, gathered per
row; each half retried on its own until accepted); a row whose computed norm rounds
above 1 is drawn again in full, so every point lies in the ball as computed. Only
the directions u and w are used, and a half of any density h(g(x)) has a direction
of the cone measure, so the halves take the proposals for the cone measure
(``proposal_table(d, k, cone=True)``: the wrapped simplex accepted against
h(g(x)) = C(a + m - 1 - floor(k g(x)), m), which accepts more than against the
uniform law, :func:`~jaxdp.samplers.cube_slice.shell_proposal`; near m = 2 k the
cube folded by its complement, :func:`~jaxdp.samplers.cube_slice.fold_proposal`).

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 8.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.samplers.cube_slice import (
  rejection_fill,
  round_slots,
  slice_moments,
  slice_table,
)
from jaxdp.samplers.gamma import gamma_shapes
from jaxdp.samplers.logweights import cdf
from jaxdp.samplers.norm_ball import SlicedBall
from jaxdp.samplers.slice_kernel import proposal_table, slice_proposals, uniforms
from jaxdp.samplers.words import key_word, stored
from jaxdp.typing import ArrayLike, DTypeLike, KeyArray

__all__ = ["CountBall"]

# hull_points lists at most this many points.
MAX_HULL_POINTS = 2_000_000
# second_moment's rational arithmetic is for d up to this.
MAX_MOMENT_D = 256


@dataclasses.dataclass(frozen=True, eq=False)
class CountBall(SlicedBall):
  """The count ball in R^d: conv of +-x for 0/1 vectors x with at most k ones.

  Attributes:
    d: the number of boxes.
    k: the most boxes one person ticks (1 <= k <= d).
  """

  name = "count ball"
  # The redraw loop's rows beside the halves' fill: half the rows of a chunk of the
  # sum ball's (faster on the CPU's caches; K-norm noise keeps the default).
  points_bytes = 128

  def norm(self, v: ArrayLike) -> jax.Array:
    v = jnp.asarray(v)
    return self.slice_norm(jnp.maximum(v, 0)) + self.slice_norm(jnp.maximum(-v, 0))

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

  def class_weights(self) -> np.ndarray:
    """log of the total volume of the orthants with j positive coordinates, j = 0..d,
    up to a constant: log vol S(j, k) + log vol S(d - j, k)."""
    logvol = slice_table(self.d, self.k).logvol
    return logvol + logvol[::-1]

  def row_acceptance(self) -> float:
    """The probability that a row's first proposal accepts both halves (the
    proposals of :func:`~jaxdp.samplers.slice_kernel.proposal_table`)."""
    weights = np.exp(self.class_weights() - np.max(self.class_weights()))
    acc = np.exp(proposal_table(self.d, self.k, cone=True).log_acc)
    return float(np.sum(weights * acc * acc[::-1]) / np.sum(weights))

  def points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    # Rows whose computed norm rounds above 1 (or with a zero half) are drawn again.
    def cond(state):
      return ~jnp.all(state[1])

    def body(state):
      z, ok, k = state
      k, sub = jax.random.split(k)
      z_new, ok_new = self._rows(sub, m, dtype)
      return jnp.where((ok_new & ~ok)[:, None], z_new, z), ok | ok_new, k

    init = (jnp.zeros((m, self.d), dtype), jnp.zeros((m,), bool), key)
    return jax.lax.while_loop(cond, body, init)[0]

  def knorm_points(self, key: KeyArray, m: int, dtype: DTypeLike) -> jax.Array:
    """``m`` K-norm noise vectors R Z (R ~ Gamma(d + 1), Z uniform in the ball) at
    eps = 1: R (r, s, 1 - r - s) for (r, s, 1 - r - s) ~ Dirichlet(j, d - j, 1) are
    independent Gamma(j), Gamma(d - j) and Gamma(1) variates, so the noise is
    (G_j u, -G_(d-j) w) with no radius of its own."""
    return self._rows(key, m, dtype, noise=True)[0]

  def _rows(self, key, m, dtype, noise=False):
    """``m`` candidate points (or K-norm noise vectors) and whether each lies in the
    ball as computed."""
    d, k = self.d, self.k
    table = proposal_table(d, k, cone=True)
    class_cdf = jnp.asarray(cdf(self.class_weights()), dtype)
    k_class, k_slices, k_gamma = jax.random.split(key, 3)
    # Column-major: the subset's scan reads one coordinate's uniforms a step.
    v = uniforms(k_class, (d + 2, m), dtype)
    j = jnp.minimum(jnp.searchsorted(class_cdf, v[d + 1], side="right"), d)
    # Stored row-major: every consumer reads the subset across rows.
    pos = stored(uniform_subset(v[:d], j).astype(jnp.int8), key_word(k_class)) != 0

    def candidates(key, rows):
      jj, pp = (j, pos) if rows is None else (j[rows], pos[rows])
      u = uniforms(key, (jj.shape[0], d + 4), dtype)
      x, ok, g = slice_proposals(u[:, :d], u[:, d:], pp, (jj, d - jj), table, k)
      ok_pos = ok[0] & ((jj == 0) | (g[0] > 0))
      ok_neg = ok[1] & ((jj == d) | (g[1] > 0))
      # The halves' norms ride along as two more columns, one in each group.
      halves = jnp.broadcast_to(jnp.arange(2, dtype=jnp.int8), (jj.shape[0], 2))
      member = jnp.concatenate([(~pp).astype(jnp.int8), halves], 1)
      out = jnp.concatenate([x, g[0][:, None], g[1][:, None]], 1)
      return out, jnp.stack([ok_pos, ok_neg], axis=1), member

    slots = round_slots(m, self.row_acceptance())
    out = rejection_fill(candidates, k_slices, m, d + 2, 2, dtype, slots=slots)
    x, g_pos, g_neg = out[:, :d], out[:, d], out[:, d + 1]
    # Gamma(j), Gamma(d - j) (0 for an empty half): times Gamma(1) they are R times
    # (r, s, 1 - r - s) ~ Dirichlet(j, d - j, 1), R ~ Gamma(d + 1) independent
    shapes = jnp.stack([j, d - j])
    gam = gamma_shapes(k_gamma, jnp.maximum(shapes, 1), d, dtype).astype(dtype)
    gam_pos, gam_neg = jnp.where(shapes > 0, gam, 0)
    total = 1.0 if noise else gam_pos + gam_neg - jnp.log1p(-v[d])
    scale_pos = gam_pos / (total * jnp.where(g_pos > 0, g_pos, 1))
    scale_neg = gam_neg / (total * jnp.where(g_neg > 0, g_neg, 1))
    z = x * jnp.where(pos, scale_pos[:, None], -scale_neg[:, None])
    return z, self.norm(z) <= 1

  def second_moment(self) -> np.ndarray:
    """Exact E[Z Z^T] in rational arithmetic (d <= ``MAX_MOMENT_D``).

    By symmetry it is a I + c (11^T - I); given j positive coordinates, E[r^2] =
    j (j + 1) / ((d + 1) (d + 2)) and E[r s] = j (d - j) / ((d + 1) (d + 2))
    (Dirichlet), E[u_1^2] = E[x_1^2] (j + 2) / j and E[u_1] = E[x_1] (j + 1) / j
    (g(x) ~ Beta(j, 1), independent of u), with the slices' exact moments
    (:func:`~jaxdp.samplers.cube_slice.slice_moments`).

    Raises:
      ValueError: if d > ``MAX_MOMENT_D``.
    """
    d, k = self.d, self.k
    if d > MAX_MOMENT_D:
      raise ValueError(
        f"CountBall.second_moment computes exactly for d <= {MAX_MOMENT_D}; got d = "
        f"{d}. Estimate it from draws instead."
      )
    mom = [slice_moments(j, k) for j in range(d + 1)]
    weight = [mom[j][0] * mom[d - j][0] for j in range(d + 1)]
    diag = cross = Fraction(0)
    for j in range(d + 1):
      l = d - j
      (_, m1, m2, mx), (_, n1, n2, nx) = mom[j], mom[l]
      diag += weight[j] * (j * (j + 1) * (j + 2) * m2 + l * (l + 1) * (l + 2) * n2)
      cross += weight[j] * (
        j * (j - 1) * (j + 1) * (j + 2) * mx
        + l * (l - 1) * (l + 1) * (l + 2) * nx
        - 2 * j * l * (j + 1) * (l + 1) * m1 * n1
      )
    norm = sum(weight) * (d + 1) * (d + 2)
    a = float(diag / (norm * d))
    c = float(cross / (norm * d * (d - 1))) if d > 1 else 0.0
    return (a - c) * np.eye(d) + c * np.ones((d, d))


def uniform_subset(w: jax.Array, j: jax.Array) -> jax.Array:
  """A uniformly random j-subset of the d columns of each of n rows, as ``(n, d)``
  bools, by selection sampling: column i is taken with probability (j - taken so
  far) / (d - i), from the uniforms ``w`` ``(d, n)`` (row i for column i)."""
  d = w.shape[0]

  def step(taken, xs):
    wi, i = xs
    need = j - taken
    take = (need >= d - i) | (wi * (d - i) < need)
    return taken + take, take

  _, takes = jax.lax.scan(step, jnp.zeros_like(j), (w, jnp.arange(d)))
  return takes.T
