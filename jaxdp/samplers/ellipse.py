"""The minimum-trace ellipse of a sensitivity ball, for elliptic Gaussian noise.

An ellipse E_A = {x : x^T A^-1 x <= 1} (A symmetric positive definite) that contains
a ball K makes N(0, sigma^2 A) noise as private as spherical Gaussian noise of
standard deviation sigma on l_2 sensitivity 1: whitening by A^(-1/2) maps every
v in K into the unit l_2 ball. The noise's expected squared norm is sigma^2 tr(A),
and among ellipses that contain the points v_1..v_N (whose convex hull is K) the
smallest trace is

  min tr(A) = max over probability vectors lam of (tr M(lam)^(1/2))^2,
  M(lam) = sum_v lam_v v v^T,  attained at A = tr(M^(1/2)) M^(1/2)

(the construction of Joseph & Yu 2024). At the maximising lam, the optimality
(KKT) conditions, v^T M^(-1/2) v <= tr M^(1/2) for every v, say exactly that this A
contains the points, and tr A = (tr M^(1/2))^2. Weak duality holds for every lam: if
every v^T A^-1 v <= 1 then tr(A^-1 M) <= 1 and, by Cauchy-Schwarz,
tr M^(1/2) = tr(A^(1/2) A^(-1/2) M^(1/2)) <= sqrt(tr A) sqrt(tr(A^-1 M)) <= sqrt(tr A);
so that A is optimal, and :func:`trace_lower_bound` certifies any ellipse.

:func:`ellipse` gives closed forms for the query balls (their symmetry makes
A = a P + b (I - P), P the projection on the all-ones direction) and solves the
concave problem numerically for a poset ball. Every ellipse is then rescaled by the
largest v^T A^-1 v over the ball's points (times 1 + :data:`MARGIN`), so it
contains the ball by construction, whatever the optimiser's accuracy.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024 (the count ellipse, Theorem 8.9; the vote
  ellipse, Theorem 9.10).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.samplers.balls import PosetBall
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall
from jaxdp.typing import ArrayLike

__all__ = [
  "ELLIPSE_BALLS",
  "MARGIN",
  "MAX_ELLIPSE_FILTERS",
  "Ellipse",
  "ellipse",
  "has_ellipse",
  "optimal_design",
  "poset_filters",
  "trace_lower_bound",
]

ELLIPSE_BALLS = (SumBall, CountBall, VoteBall, PosetBall)
# Every ellipse is widened by this relative margin past the ball's farthest point: more
# than float32's rounding of its scales (2^-24), so the noise sampled in float32 is
# never narrower than the ball needs.
MARGIN = 2.0**-20
# The largest number of filters a poset's ellipse is computed over (enumerated; a few
# seconds on the host for thousands of filters, once per poset: ellipses are kept).
MAX_ELLIPSE_FILTERS = 1 << 13
# The numerical optimum: stop when the largest v^T A^-1 v is within this of 1.
DESIGN_TOL = 1e-5
DESIGN_ITERATIONS = 2_000


@dataclasses.dataclass(frozen=True, eq=False)
class Ellipse:
  """The ellipse {x : x^T A^-1 x <= 1} in R^dim, A symmetric positive definite.

  Structured (``root`` None): A = ``along`` P + ``across`` (I - P), P = 1 1^T / dim
  the projection on the all-ones direction (A v costs O(dim)). Dense: A =
  ``root`` ``root`` (``root`` symmetric, float32-representable: the factor the noise
  is drawn with, so A is exactly the covariance drawn from).

  Attributes:
    dim: the dimension.
    along, across: A's eigenvalues on the all-ones direction and its complement
      (structured only).
    root: the symmetric square root of A, ``(dim, dim)`` float64, read-only (dense
      only).
  """

  dim: int
  along: float = 0.0
  across: float = 0.0
  root: np.ndarray | None = None

  def matrix(self) -> np.ndarray:
    """A, ``(dim, dim)`` float64."""
    if self.root is not None:
      return self.root @ self.root
    ones = np.full((self.dim, self.dim), 1.0 / self.dim)
    return self.across * np.eye(self.dim) + (self.along - self.across) * ones

  def diagonal(self) -> np.ndarray:
    """A's diagonal: the variance of each coordinate of N(0, A)."""
    if self.root is not None:
      return np.sum(self.root * self.root, axis=1)
    return np.full(self.dim, self.across + (self.along - self.across) / self.dim)

  @property
  def trace(self) -> float:
    """tr(A): E||x||^2 for x ~ N(0, A)."""
    return float(np.sum(self.diagonal()))

  def gauge_sq(self, points: ArrayLike) -> np.ndarray:
    """v^T A^-1 v for each row v of ``points`` (float64; <= 1 inside the ellipse)."""
    v = np.asarray(points, np.float64).reshape(-1, self.dim)
    if self.root is None:
      s = np.sum(v, axis=1) ** 2 / self.dim  # the squared length along 1
      return s / self.along + (np.sum(v * v, axis=1) - s) / self.across
    w = np.linalg.solve(self.root, v.T)  # root^-1 v: |.|^2 = v^T A^-1 v
    return np.sum(w * w, axis=0)

  def contains(self, points: ArrayLike) -> np.ndarray:
    """Whether each row of ``points`` lies in the ellipse."""
    return self.gauge_sq(points) <= 1.0

  def apply_root(self, z: jax.Array) -> jax.Array:
    """A^(1/2) z along the last axis (traceable; ``z``'s dtype)."""
    if self.root is not None:  # symmetric; exact float32 products (DEFAULT precision
      # is TF32 on recent GPUs and bfloat16 on TPUs: a narrower covariance than A)
      return jnp.matmul(
        z, jnp.asarray(self.root, z.dtype), precision=jax.lax.Precision.HIGHEST
      )
    a, b = math.sqrt(self.across), math.sqrt(self.along)
    return a * z + (b - a) * jnp.mean(z, axis=-1, keepdims=True)


def trace_lower_bound(points: ArrayLike, lam: ArrayLike) -> float:
  """(tr M(lam)^(1/2))^2 with M(lam) = sum_v lam_v v v^T: at most tr(A) for every
  ellipse A containing ``points`` (weak duality, see the module docstring)."""
  v = np.asarray(points, np.float64)
  lam = np.asarray(lam, np.float64)
  w = np.linalg.eigvalsh((v.T * lam) @ v)
  return float(np.sum(np.sqrt(np.maximum(w, 0.0))) ** 2)


def optimal_design(points: ArrayLike) -> tuple[np.ndarray, float]:
  """Weights lam maximising tr M(lam)^(1/2) over ``points`` (rows spanning R^dim).

  The multiplicative update lam_v <- lam_v r_v^4 (normalised), r_v = v^T M^(-1/2) v /
  tr M^(1/2), in float64: sum_v lam_v r_v = 1, and at the optimum r_v <= 1 with
  equality on the support (the KKT condition), which the update drives to. It stops
  when max_v r_v <= 1 + DESIGN_TOL, or after DESIGN_ITERATIONS, returning the
  weights with the smallest max_v r_v seen.

  Returns:
    ``(lam, c)``: the weights and their max_v r_v = c (>= 1): the ellipse
    tr(M^(1/2)) M^(1/2), scaled by c, contains the points and its trace is within a
    factor c of the smallest (weak duality, :func:`trace_lower_bound`).
  """
  v = np.asarray(points, np.float64)
  lam = np.full(v.shape[0], 1.0 / v.shape[0])
  best = (lam, math.inf)
  for _ in range(DESIGN_ITERATIONS):
    w, q = np.linalg.eigh((v.T * lam) @ v)
    w = np.maximum(w, np.finfo(np.float64).tiny)
    ratio = np.sum((v @ (q / np.sqrt(w))) * (v @ q), axis=1) / float(np.sum(np.sqrt(w)))
    c = float(np.max(ratio))
    if c < best[1]:
      best = (lam, c)
    if c <= 1.0 + DESIGN_TOL:
      break
    lam = lam * ratio**4
    lam /= np.sum(lam)
  return best


def poset_filters(poset) -> np.ndarray:
  """Every filter of ``poset`` as a 0/1 ``(m, d)`` float64 array, enumerated up to
  :data:`MAX_ELLIPSE_FILTERS`.

  Raises:
    ValueError: more than :data:`MAX_ELLIPSE_FILTERS` filters (checked as they are
      enumerated, before any large allocation).
  """
  masks = _filters_upto(poset)
  if masks is None:
    raise ValueError(
      f"the elliptic Gaussian needs every filter of the poset, and {poset!r} has more "
      f"than MAX_ELLIPSE_FILTERS = {MAX_ELLIPSE_FILTERS} of them; use the spherical "
      "Gaussian (noise='spherical') or K-norm noise for this poset."
    )
  return masks.astype(np.float64)


def has_ellipse(ball) -> bool:
  """Whether :func:`ellipse` computes ``ball``'s ellipse: one of
  :data:`ELLIPSE_BALLS`, and for a poset ball at most :data:`MAX_ELLIPSE_FILTERS`
  filters."""
  if type(ball) not in ELLIPSE_BALLS:
    return False
  return not isinstance(ball, PosetBall) or _filters_upto(ball.poset) is not None


def _filters_upto(poset) -> np.ndarray | None:
  """The filters as bools (elements top down: a partial filter grows by an element
  once everything above it is in, so the count never shrinks), or None past
  :data:`MAX_ELLIPSE_FILTERS`."""
  d = poset.d
  order = np.asarray(poset.order, bool)  # order[i, j]: p_i <= p_j
  masks = np.zeros((1, d), bool)
  for i in np.argsort(order.sum(axis=1), kind="stable"):  # fewer above: higher up
    above = order[i] & (np.arange(d) != i)
    grow = masks[np.all(masks[:, above], axis=1)]
    if masks.shape[0] + grow.shape[0] > MAX_ELLIPSE_FILTERS:
      return None
    grow[:, i] = True  # boolean indexing made a copy
    masks = np.concatenate([masks, grow])
  return masks


def _check_ball(ball):
  """A TypeError unless ``ball`` is exactly one of :data:`ELLIPSE_BALLS` (a subclass
  could change the set whose ellipse the closed forms give)."""
  if type(ball) not in ELLIPSE_BALLS:
    names = [f"jaxdp.{c.__name__}" for c in ELLIPSE_BALLS]
    raise _checks.ArgTypeError(
      f"ball must be a {', '.join(names[:-1])} or {names[-1]} (exactly, not a "
      f"subclass) for elliptic Gaussian noise; got {ball!r}."
    )


def ellipse(ball: Any) -> Ellipse:
  """The smallest-trace ellipse containing ``ball`` (widened by :data:`MARGIN`).

  * :class:`~jaxdp.SumBall` ``(d, k)``: the ball of radius sqrt(k) (A = k I; sign
    flips and permutations fix the optimal design, so M = (k / d) I).
  * :class:`~jaxdp.CountBall` ``(d, k)``: the vertices with j ones have squared length
    p_j = j^2 / d along 1 and q_j = j (d - j) / d across it; the design puts weight
    on j = k when k <= d / 2 (Joseph & Yu, Theorem 8.9) and, in general, on the
    point of the concave curve's segments maximising sqrt(P) + sqrt((d - 1) Q).
  * :class:`~jaxdp.VoteBall` ``(d)``: along 1, w1 = sqrt(d) (d - 1) / 2; across,
    w2^2 = d (d^2 - 1) / 12 spread over d - 1 dimensions (Theorem 9.10).
  * :class:`~jaxdp.PosetBall`: the vertices (1, 1_F) over every filter F
    (:func:`poset_filters`), :func:`optimal_design`, then A = tr(M^(1/2)) M^(1/2).

  Args:
    ball: one of :data:`ELLIPSE_BALLS`.

  Returns:
    The :class:`Ellipse` (a copy of the one kept for ``ball``, with the same
    immutable root); every point of the ball has v^T A^-1 v <= 1 / (1 + MARGIN).

  Raises:
    TypeError: another ball.
    ValueError: a poset with more than :data:`MAX_ELLIPSE_FILTERS` filters.
  """
  _check_ball(ball)
  # a copy: setting a field of the returned ellipse never reaches the kept one (its
  # root is immutable), so no caller can shrink later releases' noise
  return dataclasses.replace(_cached_ellipse(ball))


@value_cache(maxsize=64)
def _cached_ellipse(ball) -> Ellipse:
  """:func:`ellipse` of a checked ball, kept (balls are immutable and hashable)."""
  if isinstance(ball, SumBall):
    return Ellipse(ball.d, _up(ball.k), _up(ball.k))
  if isinstance(ball, VoteBall):
    d = ball.d
    p, q = np.array([d * (d - 1) ** 2 / 4]), np.array([d * (d * d - 1) / 12])
    return _structured(d, p, q)
  if isinstance(ball, CountBall):
    d, j = ball.d, np.arange(1, ball.k + 1, dtype=np.float64)
    return _structured(d, j * j / d, j * (d - j) / d)
  filters = poset_filters(ball.poset)
  v = np.concatenate([np.ones((filters.shape[0], 1)), filters], axis=1)
  lam, _ = optimal_design(v)
  w, q = np.linalg.eigh((v.T * lam) @ v)
  half = np.sqrt(np.maximum(w, 0.0))  # M^(1/2)'s eigenvalues; A = tr(M^(1/2)) M^(1/2)
  root = (q * np.sqrt(half * np.sum(half))) @ q.T
  return _contained(Ellipse(ball.dim, root=(root + root.T) / 2), v)


def _structured(d, p, q) -> Ellipse:
  """The optimal A = a P + b (I - P) for orbits of points with squared lengths p_j
  along 1 and q_j across (the design's weights on the orbits are the free variables),
  scaled to contain every orbit."""
  if d == 1:  # the interval [-1, 1]
    return Ellipse(1, _up(float(np.max(p))), _up(float(np.max(p))))
  big_p, big_q = _best_mixture(p, q, d)
  total = math.sqrt(big_p) + math.sqrt((d - 1) * big_q)
  along, across = total * math.sqrt(big_p), total * math.sqrt(big_q / (d - 1))
  scale = float(np.max(p / along + q / across))  # 1 at the optimum (KKT)
  return Ellipse(d, _up(along * scale), _up(across * scale))


def _best_mixture(p, q, d) -> tuple[float, float]:
  """(P, Q) maximising sqrt(P) + sqrt((d - 1) Q) over the convex hull of the points
  (p_j, q_j). They lie on a concave curve (q = sqrt(d p) - p for the count ball's), so
  the optimum lies on a segment between consecutive points: each segment's concave
  maximum is at the root of the derivative, clipped to the segment."""
  f = np.sqrt(p) + np.sqrt((d - 1) * q)
  best = int(np.argmax(f))
  out, value = (float(p[best]), float(q[best])), float(f[best])
  dp, dq = np.diff(p), np.diff(q)
  for j in np.nonzero((dp > 0) & (dq < 0))[0]:  # the max needs a trade-off
    # sqrt(P) + c sqrt(Q) on P = p_j + t dp: stationary where dp^2 Q = (d-1) dq^2 P
    c2 = d - 1.0
    t = (c2 * dq[j] ** 2 * p[j] - dp[j] ** 2 * q[j]) / (
      dp[j] ** 2 * dq[j] - c2 * dq[j] ** 2 * dp[j]
    )
    t = min(1.0, max(0.0, float(t)))
    cand = (float(p[j] + t * dp[j]), float(q[j] + t * dq[j]))
    val = math.sqrt(cand[0]) + math.sqrt(c2 * max(cand[1], 0.0))
    if val > value:
      out, value = cand, val
  return out


def _up(x: float) -> float:
  return x * (1.0 + MARGIN)


def _immutable(a: np.ndarray) -> np.ndarray:
  """``a`` backed by an immutable bytes buffer: read-only, and ``setflags(write=True)``
  cannot make it writable again (an array owning its data can)."""
  return np.frombuffer(a.tobytes(), a.dtype).reshape(a.shape)


def _contained(ell: Ellipse, points: np.ndarray) -> Ellipse:
  """``ell`` with its float32-rounded root scaled up until every point has
  v^T A^-1 v <= 1 / (1 + MARGIN), computed from the rounded root itself."""
  root = ell.root
  for _ in range(8):
    out = Ellipse(ell.dim, root=_immutable(root.astype(np.float32).astype(np.float64)))
    worst = float(np.max(out.gauge_sq(points))) * (1.0 + MARGIN)
    if worst <= 1.0:
      return out
    root = root * math.sqrt(worst) * (1.0 + 2.0**-22)
  raise ArithmeticError("could not widen the ellipse to contain the ball.")
