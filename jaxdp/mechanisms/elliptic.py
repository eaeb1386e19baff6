"""Elliptic Gaussian noise: N(0, sigma^2 A), A the smallest-trace ellipse of a ball.

A statistic whose changes (one person added or removed) lie in a ball K gets noise
sigma A^(1/2) z, z ~ N(0, I), with E_A = {x : x^T A^-1 x <= 1} containing K
(:func:`jaxdp.samplers.ellipse.ellipse`). Whitening the release by A^(-1/2) (an
invertible map: postprocessing both ways) gives the statistic A^(-1/2) T, whose
changes A^(-1/2) v have l_2 norm sqrt(v^T A^-1 v) <= 1, plus N(0, sigma^2 I): the
Gaussian mechanism of l_2 sensitivity 1. So this mechanism has exactly that
mechanism's privacy curve: (eps, delta) by the analytic calibration, rho =
1 / (2 sigma^2), its Rényi curve and its PLD, and it is accounted as
``GaussianMechanism(eps, delta, 1.0, calibration="analytic")``, which computes sigma.
Its expected squared error is sigma^2 tr(A), against sigma^2 dim r^2 for spherical
noise on the ball's l_2 radius r.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024.
  B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising", ICML 2018, Theorem 8.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NoReturn

import jax

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.mechanisms.base import EpsMechanism, noisy, pytree
from jaxdp.mechanisms.gaussian import (
  GaussianMechanism,
  GaussianNoise,
  ZCDPGaussianMechanism,
)
from jaxdp.mechanisms.statistics import finite_entries, float_statistic
from jaxdp.samplers.ellipse import Ellipse, ellipse
from jaxdp.typing import ArrayLike, KeyArray, Scalar, Shape

__all__ = ["EllipticGaussianMechanism", "EllipticNoise", "EllipticZCDPGaussianMechanism"]


class EllipticNoise:
  """What elliptic Gaussian noise of noise multiplier ``self.sigma`` shares: the
  ellipse, the sampler, and no per-row clipping."""

  sensitivity = 1.0  # the whitened statistic's l_2 sensitivity (not a field)
  exact = False  # float noise

  @property
  def ellipse(self) -> Ellipse:
    """The noise's ellipse A (its covariance is sigma^2 A)."""
    return ellipse(self.ball)

  @property
  def dim(self) -> int:
    return self.ball.dim

  @property
  def statistic_shape(self) -> tuple[int]:
    """The shape of the statistic one release is charged for: one vector of the
    ball's dimension; :func:`jaxdp.release` refuses a statistic of any other shape."""
    return (self.ball.dim,)

  @property
  def norm(self) -> NoReturn:
    """Raises: per-row contributions are not clipped into an ellipse's ball."""
    raise ValueError(
      f"{type(self).__name__} does not clip rows into its ball; compute the "
      "statistic (whose changes lie in the ball) and release it, or release poset "
      "counts by part with PosetCountGaussianMechanism."
    )

  def part_statistics(self, rows: ArrayLike, part: ArrayLike, num_parts: int) -> NoReturn:
    """Raises ValueError (see :attr:`norm`)."""
    return self.norm

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    data = float_statistic(data)
    if data.shape[-1:] != (self.dim,):
      raise ValueError(
        f"data must have last dimension {self.dim} (the ball's); got shape {data.shape}."
      )
    ok = self.valid(data.shape) & finite_entries(data)
    z = dprandom.gaussian(key, data.shape, data.dtype)
    noise = self.ellipse.apply_root(z) * self.sigma
    return _checks.mark_invalid(*noisy(ok, data, noise))


@pytree("eps", "delta")
@dataclasses.dataclass(frozen=True)
class EllipticGaussianMechanism(EllipticNoise, GaussianNoise, EpsMechanism):
  """(eps, delta)-DP elliptic Gaussian noise for a statistic with sensitivity ball
  ``ball``: ``statistic + sigma A^(1/2) z``.

  The statistic's changes must lie in ``ball`` (e.g. the sum, count or vote vector of
  one person's contribution; the poset counts (n, c_1..c_d)). It is the Gaussian
  mechanism of l_2 sensitivity 1 after whitening (module docstring), so its costs are
  :class:`~jaxdp.GaussianMechanism`'s with sensitivity 1 and analytic calibration;
  eps and delta must be static (sigma is solved for on the host).

  Attributes:
    ball: a :class:`~jaxdp.SumBall`, :class:`~jaxdp.CountBall`,
      :class:`~jaxdp.VoteBall` or :class:`~jaxdp.PosetBall` (static).
    eps, delta: privacy parameters (0 < delta < 1).

  References:
    Joseph & Yu (2024); Balle & Wang (2018), Theorem 8.
  """

  ball: Any
  eps: Any
  delta: Any

  def __post_init__(self):
    self._check_options()
    gauss = self.gaussian  # validates eps and delta (static, in range)
    object.__setattr__(self, "eps", gauss.eps)
    object.__setattr__(self, "delta", gauss.delta)

  def _check_options(self):
    ellipse(self.ball)  # TypeError for another ball; the poset's filter limit

  @property
  def gaussian(self) -> GaussianMechanism:
    """The spherical Gaussian mechanism on the whitened statistic (sensitivity 1)."""
    return GaussianMechanism(self.eps, self.delta, 1.0, calibration="analytic")

  @property
  def sigma(self) -> Scalar:
    """The noise multiplier: the analytic Gaussian's sigma at sensitivity 1."""
    return self.gaussian.sigma

  def valid(self, shape: Shape = ()) -> jax.Array:
    """:meth:`GaussianMechanism.valid` of :attr:`gaussian`, after the ball's checks."""
    self._check_options()
    return self.gaussian.valid(shape)


@pytree("sigma")
@dataclasses.dataclass(frozen=True)
class EllipticZCDPGaussianMechanism(EllipticNoise, GaussianNoise):
  """Elliptic Gaussian noise of a given noise multiplier, accounted in zCDP / RDP /
  PLD: ``statistic + sigma A^(1/2) z``.

  :class:`~jaxdp.ZCDPGaussianMechanism` at sensitivity 1 after whitening (see the
  module docstring): 1 / (2 sigma^2)-zCDP, no single (eps, delta) (an accountant
  with basic or advanced composition refuses it). ``sigma`` may be traced (a leaf).

  Attributes:
    ball: as for :class:`EllipticGaussianMechanism` (static).
    sigma: the noise multiplier (> 0).

  References:
    Joseph & Yu (2024); Bun & Steinke (2016), Proposition 1.6.
  """

  ball: Any
  sigma: Any

  def __post_init__(self):
    ellipse(self.ball)  # TypeError for another ball; the poset's filter limit
    object.__setattr__(self, "sigma", self.spherical.sigma)  # checks sigma

  @property
  def spherical(self) -> ZCDPGaussianMechanism:
    """The spherical mechanism on the whitened statistic (sensitivity 1)."""
    return ZCDPGaussianMechanism(self.sigma, 1.0)

  def valid(self, shape: Shape = ()) -> jax.Array:
    """:meth:`ZCDPGaussianMechanism.valid` of :attr:`spherical` (the ball's checks
    first)."""
    ellipse(self.ball)
    return self.spherical.valid(shape)

  def cost(self, group_size: int = 1) -> tuple[Scalar, Scalar]:
    """Raises ValueError: a zCDP cost, not one (eps, delta)."""
    return self.spherical.cost(group_size)
