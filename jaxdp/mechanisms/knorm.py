"""The K-norm mechanism for the poset ball, the l_p balls and the query balls (sum,
count, vote), float or exact.

References:
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax

from jaxdp import _checks, exact
from jaxdp import random as dprandom
from jaxdp.mechanisms.base import (
  HUGE,
  TINY,
  EpsMechanism,
  check_exact_options,
  exact_scale,
  noisy,
  pytree,
)
from jaxdp.mechanisms.statistics import (
  clipped_part_sums,
  finite_entries,
  float_statistic,
  grid_units,
  integer_part_sums,
  saturating_add,
)
from jaxdp.samplers.balls import LpBall, PosetBall
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.norm_ball import NormBall
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall
from jaxdp.typing import ArrayLike, KeyArray

EXACT_BALLS = (
  "exact=True is available for the poset ball, the l_1 (i.i.d. Laplace), l_2 and "
  "l_inf balls, the sum, count and vote balls (SumBall, CountBall, VoteBall, "
  "d <= 1024)"
)
EXACT_QUERY_BALLS = {
  SumBall: exact.MAX_SUM_D,
  CountBall: exact.MAX_COUNT_D,
  VoteBall: exact.MAX_VOTE_D,
}


@pytree("eps", "sensitivity")
@dataclasses.dataclass(frozen=True)
class KNormMechanism(EpsMechanism):
  """K-norm mechanism: adds noise of density proportional to exp(-eps ||y||_K / s).

  Attributes:
    ball: a :class:`~jaxdp.PosetBall`, :class:`~jaxdp.LpBall` or query ball
      (:class:`~jaxdp.SumBall`, :class:`~jaxdp.CountBall`, :class:`~jaxdp.VoteBall`):
      the unit ball K.
    eps: privacy parameter.
    sensitivity: sensitivity s of the statistic in the K-norm.
    exact: integer statistic plus exactly rounded noise (int32): the poset ball,
      the l_1, l_2 and l_inf balls and the query balls (d <= 1024). For the
      poset and vote balls, whose norms clipping the statistic does not keep, a
      traced statistic of any integer width is released as the sum saturated at
      +-(2^31 - 1) (postprocessing); l_p, sum- and count-ball statistics are
      clipped to +-2^30 first (clipping toward 0 never grows their norms).

  References:
    Hardt & Talwar (2010); Joseph, Ribero & Yu (2025), Lemma 2.2.
  """

  ball: Any
  eps: Any
  sensitivity: float = 1.0
  exact: bool = False

  def __post_init__(self):
    self._check_options()
    self._check_eps()
    self._check_sensitivity()

  def _check_options(self):
    if not isinstance(self.ball, (PosetBall, LpBall, NormBall)):
      raise _checks.ArgTypeError(
        "ball must be a jaxdp.PosetBall, jaxdp.LpBall or query ball (SumBall, "
        f"CountBall, VoteBall); got {self.ball!r}."
      )
    check_exact_options(self.exact, None)
    if self.exact and isinstance(self.ball, NormBall):
      limit = EXACT_QUERY_BALLS.get(type(self.ball))
      if limit is None:
        raise ValueError(
          f"{EXACT_BALLS}; the {self.ball.name} ({self.ball!r}) has no exact sampler. "
          "Use exact=False, or one of those balls with its own sensitivity."
        )
      if self.ball.d > limit:
        raise ValueError(
          f"exact {self.ball.name} noise is available for d <= {limit}; got "
          f"{self.ball!r}. Use exact=False, or an l_p ball with its own sensitivity."
        )
    if self.exact and not (
      isinstance(self.ball, (PosetBall, NormBall)) or self.ball.p in (1, 2, math.inf)
    ):
      raise ValueError(
        f"{EXACT_BALLS}; got {self.ball!r}, whose noise the exact sampler cannot bound "
        "in intervals. Use one of those balls or exact=False."
      )
    if self.exact and isinstance(self.ball, PosetBall):
      exact.poset_path(self.ball.poset)  # the exact sampler's limits, now

  def _ranges(self, shape):
    if self.exact:
      scale = (
        "the exact noise scale sensitivity / eps",
        lambda: exact_scale(self.sensitivity, self.eps),
        self._scale_limit(),
      )
    else:
      scale = (
        "the noise scale sensitivity / eps",
        lambda: self.sensitivity / self.eps,
        HUGE,
      )
    return super()._ranges(shape) + [(scale[0], scale[1], TINY, scale[2], False)]

  def _scale_limit(self) -> float:
    """``max_scale`` of the noise's dimension, over the ball's l_inf radius for a
    query ball (the vote ball reaches d - 1), rounded down."""
    limit = exact.max_scale(self._noise_dim())
    if isinstance(self.ball, NormBall) and self.ball.bounding_box() != 1:
      limit = math.nextafter(limit / self.ball.bounding_box(), 0.0)
    return limit

  def _noise_dim(self) -> int:
    """The exact noise's dimension for its scale limit (0: i.i.d. Laplace)."""
    if isinstance(self.ball, LpBall) and self.ball.p == 1:
      return 0
    if isinstance(self.ball, CountBall):  # |noise| <= a sum of d + 2 exponentials
      return self.ball.dim + 1
    return self.ball.dim

  @property
  def norm(self) -> float | NormBall:
    """What rows are clipped by: the l_p ball's p, or the query ball itself."""
    if isinstance(self.ball, PosetBall):
      raise ValueError(
        "per-row contributions cannot be clipped into a poset ball here; release "
        "poset counts by part with PosetCountMechanism."
      )
    return self.ball if isinstance(self.ball, NormBall) else self.ball.p

  @property
  def statistic_shape(self) -> tuple[int]:
    """The shape of the statistic one release is charged for: one vector of the
    ball's dimension (the sensitivity is the K-norm of one vector's change);
    :func:`jaxdp.release` refuses a statistic of any other shape."""
    return (self.ball.dim,)

  def part_statistics(self, rows: ArrayLike, part: ArrayLike, num_parts: int) -> jax.Array:
    """Per-part sums of rows clipped to K-norm ``sensitivity`` (l_p and query balls).

    Each row is scaled by ``min(1, sensitivity / ||row||_K)`` (a query ball's own
    norm), so one person moves one part's sum by at most ``sensitivity`` in the
    K-norm whatever the rows hold. Exact releases (l_p and sum balls; the vote ball
    is refused) need integer (or bool) rows and keep int32 sums: a row whose K-norm
    exceeds ``sensitivity`` counts as 0 (scaling it would leave the integers).
    """
    if self.exact:
      if isinstance(self.ball, VoteBall):
        raise ValueError(
          "exact per-row contributions cannot be clipped into the vote ball exactly; "
          "release Borda totals with VoteQueryMechanism(..., exact=True)."
        )
      return integer_part_sums(rows, part, num_parts, self.sensitivity, p=self.norm)
    return clipped_part_sums(rows, part, num_parts, self.norm, self.sensitivity)

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    if self.exact:
      # the poset and vote balls' norms are not kept by clipping: saturate after
      poset = isinstance(self.ball, (PosetBall, VoteBall))
      units, _ = grid_units(data, None, wide=poset)
      self._check_dim(units)
      ok = self.valid(units.shape)
      scale = exact_scale(self.sensitivity, self.eps)
      if poset:  # clipping the statistic would break the sensitivity: saturate after
        if isinstance(self.ball, VoteBall):
          noise = exact.vote_knorm(key, self.ball.d, scale, units.shape[:-1])
        else:
          noise = exact.poset_knorm(key, self.ball.poset, scale, units.shape[:-1])
        return _checks.mark_invalid(*noisy(ok, units, noise, saturating_add))
      if isinstance(self.ball, SumBall):
        d, k = self.ball.d, self.ball.k
        noise = exact.sum_knorm(key, d, k, scale, units.shape[:-1])
      elif isinstance(self.ball, CountBall):  # its norm shrinks under clipping too
        d, k = self.ball.d, self.ball.k
        noise = exact.count_knorm(key, d, k, scale, units.shape[:-1])
      elif self.ball.p == math.inf:
        noise = exact.linf_knorm(key, self.ball.d, scale, units.shape[:-1])
      elif self.ball.p == 2:
        noise = exact.l2_knorm(key, self.ball.d, scale, units.shape[:-1])
      else:
        noise = exact.laplace(key, units.shape, scale=scale)
      return _checks.mark_invalid(*noisy(ok, units, noise))
    data = float_statistic(data)
    self._check_dim(data)
    ok = self.valid(data.shape) & finite_entries(data)
    noise = dprandom.knorm(key, self.ball, self.eps, data.shape[:-1], data.dtype)
    return _checks.mark_invalid(*noisy(ok, data, self.sensitivity * noise))

  def _check_dim(self, data):
    if data.shape[-1:] != (self.ball.dim,):
      raise ValueError(
        f"data must have last dimension {self.ball.dim} (the ball's); got shape "
        f"{data.shape}."
      )
