"""The Laplace mechanism, float or exact (integer noise on an integer or grid statistic).

References:
  C. Dwork, A. Roth, "The Algorithmic Foundations of Differential Privacy" (2014),
  Theorem 3.6.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxdp import _checks, exact
from jaxdp import random as dprandom
from jaxdp.composition import renyi
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
  defined_entries,
  finite_entries,
  float_statistic,
  grid_units,
  integer_part_sums,
)
from jaxdp.typing import ArrayLike, KeyArray


@pytree("eps", "sensitivity")
@dataclasses.dataclass(frozen=True)
class LaplaceMechanism(EpsMechanism):
  """Adds i.i.d. Laplace(sensitivity / eps) noise to every entry of the statistic.

  With ``exact=True`` the release is safe to publish from floating-point hardware:
  the statistic is an integer array (or is snapped to the grid ``grid = 2**-k``) and
  the noise is the exact rounding of real Laplace noise to that grid
  (:func:`jaxdp.exact.laplace`), so the output is ``statistic + integer noise``,
  an int32 array (a float array of grid multiples when ``grid`` is given). Snapping
  moves each of the m entries by at most half a grid step, so the noise is scaled
  for sensitivity ``sensitivity + m * grid``. Refused exact releases hold int32's
  minimum (or NaN on a grid).

  On a grid, snapping clips to +-2^30 units and is monotone on the extended reals: a
  traced +-inf entry is released as +-2^30 units, like the largest finite values. A
  NaN entry is refused: a concrete one before anything is drawn (ValueError), a traced
  one by a run-time error naming it (its entry is NaN should the error be swallowed),
  never released as 0 (``docs/design/exactness.md``).

  Attributes:
    eps: privacy parameter (> 0).
    sensitivity: l_1 sensitivity of the whole statistic (> 0).
    exact: the publishable, float-safe form (static).
    grid: for ``exact=True`` on a real-valued statistic: a power of two 2**-k
      (static). ``None``: the statistic must have an integer dtype.
  """

  eps: Any
  sensitivity: float = 1.0
  exact: bool = False
  grid: float | None = None

  def __post_init__(self):
    self._check_eps()
    self._check_sensitivity()
    self._check_options()
    if self.grid is not None:  # a Python float: a mutable array could change later
      object.__setattr__(self, "grid", float(self.grid))

  def _check_options(self):
    check_exact_options(self.exact, self.grid)

  def _ranges(self, shape):
    if self.exact:
      scale = (
        "the exact noise scale (sensitivity in grid units / eps)",
        exact.max_scale(0),
      )
    else:
      scale = ("the noise scale sensitivity / eps", HUGE)
    return super()._ranges(shape) + [
      (scale[0], lambda: self._noise_scale(shape), TINY, scale[1], False)
    ]

  def _noise_scale(self, shape):
    """The Laplace scale: sensitivity / eps, or for exact noise the scale in grid
    units (snapping to a grid adds one unit of slack per entry)."""
    if not self.exact:
      return self.sensitivity / self.eps
    slack = 0 if self.grid is None else math.prod(shape)
    return exact_scale(self.sensitivity / (self.grid or 1.0) + slack, self.eps)

  norm = 1.0  # the sensitivity's norm (for clipping per-row contributions)

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> jax.Array:
    """The Laplace mechanism's own RDP curve at k eps (a group of k moves the
    statistic by at most k sensitivity; exact releases round it: postprocessing).

    References:
      Mironov (2017), Proposition 6; :func:`jaxdp.composition.renyi.laplace_rdp`.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return renyi.laplace_rdp(k * self.eps, orders)

  def event(self, group_size: int = 1) -> tuple:
    """``("laplace", k eps)``: the Laplace mechanism at scale sensitivity / eps."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return ("laplace", k * self.eps)

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    if self.exact:
      return self._randomize_exact(key, data)
    data = float_statistic(data)
    ok = self.valid(data.shape) & finite_entries(data)
    noise = dprandom.laplace(key, data.shape, data.dtype)
    ok, out = noisy(ok, data, noise * self._noise_scale(data.shape))
    return _checks.mark_invalid(ok, out)

  def _randomize_exact(self, key, data):
    units, _ = grid_units(data, self.grid)
    ok = self.valid(units.shape)
    if self.grid is not None:
      ok = ok & defined_entries(data)  # a traced NaN entry: a run-time error, the fill
    noise = exact.laplace(key, units.shape, scale=self._noise_scale(units.shape))
    ok, out = noisy(ok, units, noise)
    if self.grid is not None:
      out = out.astype(jnp.result_type(float)) * self.grid
    return _checks.mark_invalid(ok, out)

  def part_statistics(self, rows: ArrayLike, part: ArrayLike, num_parts: int) -> jax.Array:
    """Per-part sums of rows clipped to l_1 norm ``sensitivity``.

    Exact releases without a grid need integer (or bool) rows and keep integer sums:
    a row whose l_1 norm exceeds ``sensitivity`` counts as 0 (scaling it would leave
    the integers)."""
    if self.exact and self.grid is None:
      return integer_part_sums(rows, part, num_parts, self.sensitivity)
    return clipped_part_sums(rows, part, num_parts, self.norm, self.sensitivity)
