"""Expected squared error of a noise law, per coordinate: exact where known.

For K-norm noise ``Y = b R Z`` (R ~ Gamma(D + 1), Z uniform in the ball K, independent)
``E[Y_i^2] = (D + 1)(D + 2) b^2 E[Z_i^2]``. ``E[Z_i^2]`` is exact for the l_p balls
(:meth:`jaxdp.LpBall.expected_sq_norm` over D, by symmetry), for a query ball with
an exact :meth:`~jaxdp.NormBall.second_moment`, and for a poset ball
small enough to enumerate (:func:`jaxdp.exact_second_moment`,
:func:`jaxdp.reporting.poset_law.enumerable`); otherwise it is the mean
of ``Z_i^2`` over exactly uniform points of the ball, with its standard error.
Laplace noise of scale b has ``2 b^2``, Gaussian noise ``b^2``, elliptic Gaussian
noise ``b^2 A_ii``, the discrete Gaussian the sum of ``k^2`` times its pmf.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025,
  Section 5 (Figure 4 compares these errors).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxdp.reporting import poset_law, simulate
from jaxdp.reporting.laws import NoiseLaw, ball_name
from jaxdp.samplers.balls import PosetBall, exact_second_moment
from jaxdp.samplers.norm_ball import NormBall
from jaxdp.typing import KeyArray

__all__ = ["SquaredError", "squared_error", "total_stderr"]


@dataclasses.dataclass(frozen=True)
class SquaredError:
  """``E[noise_i^2]`` per coordinate.

  Attributes:
    per_coordinate: the expected squared error of each coordinate.
    stderr: its Monte Carlo standard error (0 where exact).
    method: ``"exact"`` or ``"Monte Carlo (n points of the ball)"``.
    total_se: the standard error of :attr:`total`, from the sum over coordinates of
      each simulated point (the coordinates of one point are correlated, so their
      errors do not add in quadrature); None: not known (:attr:`total_stderr` is then
      the coordinates' errors added, an upper bound).
  """

  per_coordinate: np.ndarray
  stderr: np.ndarray
  method: str
  total_se: float | None = None

  @property
  def total(self) -> float:
    """``E||noise||^2``."""
    return float(np.sum(self.per_coordinate))

  @property
  def total_stderr(self) -> float:
    """The total's standard error: :attr:`total_se`, else an upper bound (the
    coordinates' errors added)."""
    return total_stderr(self.stderr, self.total_se)


def total_stderr(stderr: np.ndarray, total_se: float | None) -> float:
  """The standard error of a sum of per-coordinate squared errors: ``total_se`` (from
  each simulated point's sum), else the coordinates' standard errors added, an upper
  bound (one point's coordinates are correlated, so they do not add in quadrature)."""
  return float(np.sum(stderr)) if total_se is None else total_se


def squared_error(
  law: NoiseLaw, dim: int, *, key: KeyArray | None = None, num_samples: int = 20_000
) -> SquaredError:
  """``E[noise_i^2]`` of each of ``dim`` coordinates of the ideal noise of ``law``.

  Args:
    law: the noise law (rounding to integers is not included; it changes each
      coordinate's error by about 1/12 for smooth noise of scale >> 1).
    dim: the number of coordinates.
    key: the simulation key (a poset ball too large to enumerate).
    num_samples: points of the ball for that simulation.

  Returns:
    :class:`SquaredError`.
  """
  b = law.scale
  zeros = np.zeros(dim)
  if law.family == "laplace":
    return SquaredError(np.full(dim, 2 * b * b), zeros, "exact")
  if law.family == "gaussian":
    return SquaredError(np.full(dim, b * b), zeros, "exact")
  if law.family == "elliptic":
    return SquaredError(law.coordinate_sd() ** 2, zeros, "exact")
  if law.family == "discrete_gaussian":
    k = np.arange(-int(math.ceil(40 * b)) - 1, int(math.ceil(40 * b)) + 2, dtype=np.float64)
    w = np.exp(-(k**2) / (2 * b * b))
    return SquaredError(np.full(dim, float(np.sum(k * k * w) / np.sum(w))), zeros, "exact")
  ball = law.ball
  radius = (ball.dim + 1) * (ball.dim + 2) * b * b  # E[R^2] b^2
  if isinstance(ball, NormBall):
    try:
      return SquaredError(radius * np.diag(ball.second_moment()), zeros, "exact")
    except NotImplementedError:  # a query ball without an exact second moment
      pass
  elif not isinstance(ball, PosetBall):
    return SquaredError(
      np.full(dim, radius * ball.expected_sq_norm() / ball.dim), zeros, "exact"
    )
  elif poset_law.enumerable(ball):
    moment = np.diag(exact_second_moment(ball.poset))
    return SquaredError(radius * moment, zeros, "exact (enumerated simplices)")
  z2 = simulate.ball_draws(simulate.simulation_key(key), ball, num_samples) ** 2
  se = z2.std(axis=0, ddof=1) / math.sqrt(num_samples)
  total_se = float(z2.sum(axis=1).std(ddof=1)) / math.sqrt(num_samples)
  return SquaredError(
    radius * z2.mean(axis=0),
    radius * se,
    f"Monte Carlo ({num_samples:,} exactly uniform points of the {ball_name(ball)})",
    radius * total_se,
  )
