"""Gaussian noise: the (eps, delta) Gaussian mechanism (classical or analytic
calibration) and the zCDP Gaussian mechanism of a given sigma.

References:
  B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising", ICML 2018.
  M. Bun, T. Steinke, "Concentrated differential privacy", TCC 2016.
  I. Mironov, "Rényi differential privacy", CSF 2017.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.composition import renyi
from jaxdp.composition.gaussian import analytic_gaussian_sigma
from jaxdp.mechanisms.base import HUGE, TINY, EpsMechanism, RangeChecked, noisy, pytree
from jaxdp.mechanisms.statistics import clipped_part_sums, finite_entries, float_statistic
from jaxdp.typing import ArrayLike, KeyArray, Scalar


class GaussianNoise(RangeChecked):
  """What Gaussian noise of standard deviation ``self.sigma`` costs, whatever set
  sigma: zCDP, Rényi curve, event, and l_2-clipped part sums."""

  norm = 2.0

  def zcdp_cost(self, group_size: int = 1) -> Scalar:
    """rho = (k sensitivity)^2 / (2 sigma^2): a group of k moves the statistic by at
    most k sensitivity (sensitivity scaling, tighter than Lemma 2.8).

    References:
      Bun & Steinke (2016), Proposition 1.6.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return (k * self.sensitivity) ** 2 / (2 * self.sigma**2)

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> jax.Array:
    """alpha rho at each order (Mironov 2017, Proposition 7)."""
    return renyi.gaussian_rdp(self.zcdp_cost(group_size), orders)

  def event(self, group_size: int = 1) -> tuple:
    """``("gaussian", sigma / (k sensitivity))``: the noise multiplier."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return ("gaussian", self.sigma / (k * self.sensitivity))

  def part_statistics(self, rows: ArrayLike, part: ArrayLike, num_parts: int) -> jax.Array:
    """Per-part sums of rows clipped to l_2 norm ``sensitivity``."""
    return clipped_part_sums(rows, part, num_parts, self.norm, self.sensitivity)


@pytree("eps", "delta", "sensitivity")
@dataclasses.dataclass(frozen=True)
class GaussianMechanism(GaussianNoise, EpsMechanism):
  """The Gaussian mechanism, (eps, delta)-DP.

  ``calibration="classical"`` (default): sigma = sensitivity sqrt(2 ln(1.25 / delta)) /
  eps (Dwork & Roth, Theorem A.1), which requires 0 < eps < 1. ``"analytic"``: the
  smallest sigma with Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) -
  eps sigma/D) <= delta (Balle & Wang 2018, Theorem 8; exact, any eps > 0, always at
  most the classical sigma); eps, delta and sensitivity must then be static.

  Attributes:
    eps, delta: privacy parameters.
    sensitivity: l_2 sensitivity of the statistic.
    calibration: ``"classical"`` or ``"analytic"`` (static).

  References:
    B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
    analytical calibration and optimal denoising", ICML 2018.
  """

  eps: Any
  delta: Any
  sensitivity: Any = 1.0
  calibration: str = "classical"

  def __post_init__(self):
    self._check_eps()
    self._check_options()
    if (
      self.calibration == "classical" and _checks.is_concrete(self.eps) and not self.eps < 1
    ):
      raise ValueError(
        f"eps must be < 1 for the classical Gaussian mechanism; got {self.eps}. "
        "Use calibration='analytic' (any eps > 0), a smaller eps, or a pure-DP "
        "mechanism."
      )
    delta = _checks.check_eps(self.delta, "delta")
    if _checks.is_concrete(delta):
      if delta >= 1:
        raise ValueError(f"delta must be in (0, 1); got {delta}.")
      delta = float(delta)
    object.__setattr__(self, "delta", delta)
    self._check_sensitivity()

  def _check_options(self):
    if self.calibration not in ("classical", "analytic"):
      raise ValueError(
        f"calibration must be 'classical' or 'analytic'; got {self.calibration!r}."
      )
    if self.calibration == "analytic" and not all(
      _checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)
    ):
      raise ValueError(
        "calibration='analytic' needs static eps, delta and "
        "sensitivity (sigma is solved for on the host)."
      )

  def _ranges(self, shape):
    classical = self.calibration == "classical"  # Dwork & Roth's sigma needs eps < 1
    return [
      ("eps", self.eps, TINY, 1.0 if classical else HUGE, classical),
      ("delta", self.delta, TINY, 1.0, True),
      ("sensitivity", self.sensitivity, TINY, HUGE, False),
      ("sigma", lambda: self.sigma, TINY, HUGE, False),
    ]

  @property
  def sigma(self) -> Scalar:
    """The noise's standard deviation (a float when eps, delta, sensitivity are static)."""
    if self.calibration == "analytic":
      if not all(_checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
        raise ValueError(
          "calibration='analytic' needs static eps, delta and sensitivity; "
          "pass the mechanism as a static jit argument."
        )
      return self.sensitivity * analytic_gaussian_sigma(float(self.eps), float(self.delta))
    if all(_checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
      return self.sensitivity * math.sqrt(2 * math.log(1.25 / self.delta)) / self.eps
    return self.sensitivity * jnp.sqrt(2 * jnp.log(1.25 / self.delta)) / self.eps

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    data = float_statistic(data)
    ok = self.valid(data.shape) & finite_entries(data)
    noise = dprandom.gaussian(key, data.shape, data.dtype)
    return _checks.mark_invalid(*noisy(ok, data, noise * self.sigma))


@pytree("sigma", "sensitivity")
@dataclasses.dataclass(frozen=True)
class ZCDPGaussianMechanism(GaussianNoise):
  """Gaussian noise of a given standard deviation, accounted in zCDP / RDP / PLD.

  The mechanism deep-learning users know (a noise multiplier, not an (eps, delta)):
  adding N(0, sigma^2) to a statistic of l_2 sensitivity Delta is
  Delta^2 / (2 sigma^2)-zCDP, and its privacy profile is the Gaussian's. It has no
  single (eps, delta), so an accountant with basic or advanced composition refuses
  it (ValueError at trace time); use ``composition="zcdp"``, ``"rdp"`` or a plan.
  ``sigma`` may be traced (a leaf).

  Attributes:
    sigma: the noise's standard deviation (> 0).
    sensitivity: l_2 sensitivity of the statistic.

  References:
    Bun & Steinke (2016), Proposition 1.6; Mironov (2017), Proposition 7.
  """

  sigma: Any
  sensitivity: Any = 1.0

  exact = False

  def __post_init__(self):
    object.__setattr__(self, "sigma", _checks.check_eps(self.sigma, "sigma"))
    object.__setattr__(
      self, "sensitivity", _checks.check_eps(self.sensitivity, "sensitivity")
    )

  def _ranges(self, shape):
    return [
      ("sigma", self.sigma, TINY, HUGE, False),
      ("sensitivity", self.sensitivity, TINY, HUGE, False),
    ]

  def cost(self, group_size: int = 1) -> tuple[Scalar, Scalar]:
    raise ValueError(
      "ZCDPGaussianMechanism has a zCDP cost, not one (eps, delta): use an "
      "accountant with composition='zcdp' or 'rdp' (or a plan), or "
      "GaussianMechanism(eps, delta) under basic composition."
    )

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    data = float_statistic(data)
    ok = self.valid(data.shape) & finite_entries(data)
    noise = dprandom.gaussian(key, data.shape, data.dtype)
    return _checks.mark_invalid(*noisy(ok, data, noise * self.sigma))
