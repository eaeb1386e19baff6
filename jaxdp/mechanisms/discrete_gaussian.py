"""The discrete Gaussian mechanism: an integer statistic plus exact N_Z(0, s^2) noise.

References:
  C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
  privacy", NeurIPS 2020.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax

from jaxdp import _checks, exact
from jaxdp._cache import value_cache
from jaxdp.composition import renyi, zcdp_budget
from jaxdp.mechanisms.base import HUGE, TINY, EpsMechanism, noisy, pytree
from jaxdp.mechanisms.statistics import grid_units, integer_part_sums
from jaxdp.typing import ArrayLike, KeyArray, Scalar


@pytree("eps", "delta", "sensitivity")
@dataclasses.dataclass(frozen=True)
class DiscreteGaussianMechanism(EpsMechanism):
  """The discrete Gaussian mechanism: integer statistic + N_Z(0, s^2), exact.

  Publishable (``exact`` is always True): integer arithmetic and exact Bernoulli
  trials only (:func:`jaxdp.exact.discrete_gaussian`). sigma is calibrated on the
  host through zero-concentrated DP: rho is the largest value whose conversion
  (:func:`jaxdp.composition.zcdp_epsilon`) is at most eps at ``delta``, sigma =
  sensitivity / sqrt(2 rho), and the sampler's s^2 rounds sigma^2 up to a quarter.
  Adding N_Z(0, s^2) to each entry of an integer statistic of l_2 sensitivity Delta
  is Delta^2 / (2 s^2)-zCDP (CKS, Theorem 4; for vectors, by composition over the
  entries, since the divergence bound holds for every integer shift).

  Attributes:
    eps, delta: the target (eps, delta) (static).
    sensitivity: l_2 sensitivity of the integer statistic (static).

  References:
    C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
    privacy", NeurIPS 2020.
  """

  eps: Any
  delta: Any
  sensitivity: Any = 1.0

  exact = True
  norm = 2.0

  def __post_init__(self):
    self._check_eps()
    delta = _checks.check_eps(self.delta, "delta")
    if not all(_checks.is_concrete(v) for v in (self.eps, delta, self.sensitivity)):
      raise ValueError(
        "DiscreteGaussianMechanism needs static eps, delta and "
        "sensitivity (sigma and the sampler's integer tables are set on "
        "the host)."
      )
    if not 0 < float(delta) < 1:
      raise ValueError(f"delta must be in (0, 1); got {delta}.")
    object.__setattr__(self, "delta", float(delta))
    self._check_sensitivity()
    if self.sigma > exact.MAX_SIGMA:
      raise ValueError(
        f"eps = {self.eps:g} at delta = {self.delta:g} and sensitivity "
        f"{self.sensitivity:g} need sigma = {self.sigma:.4g}, above the exact "
        f"sampler's {exact.MAX_SIGMA:g}; use a larger eps or a coarser statistic."
      )

  def _check_options(self):
    if not all(_checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
      raise ValueError(
        "DiscreteGaussianMechanism needs static eps, delta and sensitivity (sigma and "
        "the sampler's integer tables are set on the host); got traced ones. Pass "
        "the mechanism as a static argument (or close over it) instead of as a "
        "traced jit, vmap or scan input."
      )

  def _ranges(self, shape):
    return [
      ("eps", self.eps, TINY, HUGE, False),
      ("delta", self.delta, TINY, 1.0, True),
      ("sensitivity", self.sensitivity, TINY, HUGE, False),
      ("sigma", lambda: self.sigma, TINY, exact.MAX_SIGMA, False),
    ]

  @property
  def sigma(self) -> float:
    """sensitivity / sqrt(2 rho) (before the sampler rounds sigma^2 up to a quarter)."""
    return discrete_gaussian_sigma(
      float(self.eps), float(self.delta), float(self.sensitivity)
    )

  def zcdp_cost(self, group_size: int = 1) -> Scalar:
    """rho = (k sensitivity)^2 / (2 s^2) with the sampler's s^2 (at most the
    calibrated rho for k = 1)."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    s2 = exact.sigma_quarters(self.sigma) / 4
    return (k * self.sensitivity) ** 2 / (2 * s2)

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> jax.Array:
    """alpha rho at each order (Canonne, Kamath & Steinke 2020, Theorem 4)."""
    return renyi.gaussian_rdp(self.zcdp_cost(group_size), orders)

  def event(self, group_size: int = 1) -> tuple:
    """``("zcdp", rho)``: the discrete Gaussian's privacy profile is not the
    continuous one's, so it is accounted through its zCDP guarantee only."""
    return ("zcdp", self.zcdp_cost(group_size))

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    units, _ = grid_units(data, None)
    ok = self.valid(units.shape)
    noise = exact.discrete_gaussian(key, units.shape, sigma=self.sigma)
    return _checks.mark_invalid(*noisy(ok, units, noise))

  def part_statistics(self, rows: ArrayLike, part: ArrayLike, num_parts: int) -> jax.Array:
    """Per-part int32 sums of integer rows; a row of l_2 norm above ``sensitivity``
    counts as 0."""
    return integer_part_sums(rows, part, num_parts, self.sensitivity, p=2)


@value_cache(maxsize=256)
def discrete_gaussian_sigma(eps: float, delta: float, sensitivity: float) -> float:
  rho = zcdp_budget(eps, delta)
  return sensitivity / math.sqrt(2 * rho) if rho > 0 else math.inf  # eps too small
