"""Private counts of partially ordered 0/1 data with Gaussian noise ((eps, delta)-DP).

The approximate-DP counterpart of :class:`~jaxdp.PosetCountMechanism`: the same
statistic (n, c_1..c_d), whose changes lie in the poset ball, with elliptic Gaussian
noise (the smallest-trace ellipse containing the poset ball) or spherical Gaussian
noise (l_2 sensitivity sqrt(d + 1), the ball's radius).

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdp.mechanisms.base import pytree
from jaxdp.mechanisms.elliptic import EllipticGaussianMechanism
from jaxdp.mechanisms.gaussian import GaussianMechanism
from jaxdp.mechanisms.poset_count import PosetCountMechanism, sqrt_up
from jaxdp.posets import Poset
from jaxdp.samplers.balls import PosetBall
from jaxdp.typing import Scalar

__all__ = ["GAUSSIAN_COUNT_NOISES", "PosetCountGaussianMechanism"]

GAUSSIAN_COUNT_NOISES = ("elliptic", "spherical")


@pytree("eps", "delta")
@dataclasses.dataclass(frozen=True, init=False)
class PosetCountGaussianMechanism(PosetCountMechanism):
  """(eps, delta)-DP counts of partially ordered 0/1 data: (n, c_1..c_d) plus
  Gaussian noise, analytically calibrated.

  Rows are validated (or clipped) as by :class:`~jaxdp.PosetCountMechanism`, whose
  statistic this is; only the noise differs. Its privacy costs are those of the
  noise mechanism :attr:`inner`.

  Attributes:
    poset: the :class:`~jaxdp.Poset`.
    eps, delta: privacy parameters (static; 0 < delta < 1).
    noise: ``"elliptic"`` (default: :class:`~jaxdp.EllipticGaussianMechanism` on the
      poset ball, for posets of at most
      :data:`~jaxdp.samplers.ellipse.MAX_ELLIPSE_FILTERS` filters) or
      ``"spherical"`` (:class:`~jaxdp.GaussianMechanism`, l_2 sensitivity
      sqrt(d + 1)).
    on_invalid: ``"raise"`` or ``"clip"``, as for PosetCountMechanism.
    exact: False (there is no exact sampler for this noise; the discrete Gaussian is
      :class:`~jaxdp.DiscreteGaussianMechanism`).

  References:
    Joseph & Yu (2024); Balle & Wang (2018), Theorem 8.
  """

  delta: Any = None

  def __init__(
    self,
    poset: Poset,
    eps: Any,
    delta: Any,
    noise: str = "elliptic",
    on_invalid: str = "raise",
    exact: bool = False,
  ) -> None:
    for name, value in (
      ("poset", poset),
      ("eps", eps),
      ("delta", delta),
      ("noise", noise),
      ("on_invalid", on_invalid),
      ("exact", exact),
    ):
      object.__setattr__(self, name, value)
    self._check_options()
    inner = self.inner  # validates eps and delta (static, in range) and the ellipse
    object.__setattr__(self, "eps", inner.eps)
    object.__setattr__(self, "delta", inner.delta)

  def _check_noise(self):
    if self.noise not in GAUSSIAN_COUNT_NOISES:
      raise ValueError(
        f"noise must be one of {GAUSSIAN_COUNT_NOISES} for Gaussian counts; got "
        f"{self.noise!r}. PosetCountMechanism has the pure-DP noises."
      )
    if self.exact is not False:
      raise ValueError(
        f"exact must be False for Gaussian poset counts (no exact sampler); got "
        f"{self.exact!r}. Use PosetCountMechanism(exact=True) for exact pure-DP noise."
      )

  @property
  def inner(self) -> EllipticGaussianMechanism | GaussianMechanism:
    """The mechanism that noises the (d + 1,) count vector."""
    if self.noise == "elliptic":
      return EllipticGaussianMechanism(PosetBall(self.poset), self.eps, self.delta)
    radius = sqrt_up(self.dim)  # ||(1, 1_F)||_2 <= sqrt(d + 1), never rounded down
    return GaussianMechanism(self.eps, self.delta, radius, calibration="analytic")

  def cost(self, group_size: int = 1) -> tuple[Scalar, Scalar]:
    """The noise mechanism's (eps, delta) for groups of ``group_size``."""
    return self.inner.cost(group_size)

  def zcdp_cost(self, group_size: int = 1) -> Scalar:
    """The noise mechanism's rho (the Gaussian's, not a pure-DP bound)."""
    return self.inner.zcdp_cost(group_size)
