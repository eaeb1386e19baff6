"""The zero-concentrated-DP privacy filter."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from jaxdp.accounting import budget, planning
from jaxdp.accounting.rules.base import Capacity, UnitRule
from jaxdp.composition.zcdp import zcdp_budget, zcdp_epsilon
from jaxdp.typing import Scalar

if TYPE_CHECKING:  # the accountant imports the rules
  from jaxdp.accounting.accountant import Accountant
  from jaxdp.mechanisms import Mechanism

__all__ = ["ZCDPFilter"]


@dataclasses.dataclass(frozen=True, eq=False)
class ZCDPFilter(UnitRule):
  """Each release is charged its rho against the largest rho that fits the budget.

  The charge is ``mech.zcdp_cost(k)``: (k eps)^2 / 2 for pure DP, (k Delta)^2 /
  (2 sigma^2) for Gaussian noise. The budget is the largest rho whose conversion
  (:func:`jaxdp.composition.zcdp_epsilon`; Canonne, Kamath & Steinke 2020,
  Proposition 12) fits ``(eps_budget, delta_budget)``. Valid for adaptively chosen
  parameters: a sum of rho_i below rho bounds every Rényi order at once, and the
  Rényi filter of Feldman & Zrnic (2021) holds at each order. The guarantee is the
  conversion of the spent rho at ``delta_budget`` (for parameters fixed before the
  run; adaptively, ``(eps_budget, delta_budget)``).
  """

  name = "zcdp"
  needs_delta = True

  def unit_exponents(self, eps_budget: float, delta_budget: float) -> tuple:
    return (
      budget.unit_exponent(zcdp_budget(eps_budget, delta_budget)),
      budget.unit_exponent(0.0),
    )

  def rho_budget(self, acct: Accountant) -> float:
    return zcdp_budget(acct.eps_budget, acct.delta_budget)

  def cost(self, mech: Mechanism, group_size: int) -> tuple[Scalar, Scalar]:
    return mech.zcdp_cost(group_size), 0.0

  def capacity(self, acct: Accountant) -> Capacity:
    eps = budget.capped_capacity(self.rho_budget(acct), acct.unit_exponent)
    return Capacity(eps, 0, eps, 0)  # delta enters through the conversion

  def describe_cost(self, eps: Scalar, delta: Scalar) -> str:
    return f"rho={float(eps):g}"

  def describe_limit(self, acct: Accountant) -> str:
    return (
      f"the whole zCDP budget (rho={self.rho_budget(acct):g}, from eps="
      f"{acct.eps_budget:g} at delta={acct.delta_budget:g})"
    )

  def spent_eps(self, acct: Accountant) -> jax.Array:
    spent = budget.in_cost(acct.spent_units, acct.unit_exponent)
    return jnp.asarray(zcdp_epsilon(spent, acct.delta_budget), spent.dtype)

  def spent_delta(self, acct: Accountant) -> jax.Array:
    return jnp.where(acct.spent_units > 0, acct.delta_budget, 0.0).astype(
      jnp.result_type(float)
    )

  def remaining(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    """The pure eps whose rho (eps^2 / 2) is left, and 0."""
    left = budget.in_cost(
      jnp.asarray(self.capacity(acct).eps_capacity) - acct.spent_units, acct.unit_exponent
    )
    return jnp.sqrt(2 * left), jnp.zeros((), jnp.result_type(float))

  def plan_row(
    self, eps: Scalar, delta: Scalar, refused: bool, event: tuple
  ) -> planning.PlannedRelease:
    return planning.PlannedRelease(math.nan, 0.0, refused, rho=float(eps), event=event)

  def plan_totals(
    self, acct: Accountant, rows: list, spent: int, spent_delta: int
  ) -> tuple[float, float]:
    e, _ = super().plan_totals(acct, rows, spent, spent_delta)
    return zcdp_epsilon(e, acct.delta_budget), (acct.delta_budget if e > 0 else 0.0)
