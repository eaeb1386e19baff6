"""The Rényi privacy filter over a fixed set of orders."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.accounting import budget, planning
from jaxdp.accounting.rules.base import Capacity, UnitRule
from jaxdp.composition import renyi
from jaxdp.typing import ArrayLike, Scalar

if TYPE_CHECKING:  # the accountant imports the rules
  from jaxdp.accounting.accountant import Accountant
  from jaxdp.mechanisms import Mechanism

__all__ = ["RenyiFilter"]


@dataclasses.dataclass(frozen=True, eq=False)
class RenyiFilter(UnitRule):
  """Each release is charged its Rényi curve; answered iff some order still holds it.

  The charge is ``mech.rdp_cost(orders, k)``: Laplace's own curve for
  :class:`~jaxdp.LaplaceMechanism`, randomized response's for other pure-DP
  mechanisms, alpha rho for Gaussian noise (:mod:`jaxdp.composition.renyi`). Each of
  the m orders kept gets delta_budget / m and the budget B_a whose
  Canonne-Kamath-Steinke conversion at delta_budget / m is eps_budget
  (:func:`jaxdp.composition.renyi.filter_budgets`; orders whose budget would be
  <= 0 are dropped). Valid for adaptively chosen parameters: at each order
  exp((a-1)(L_t - sum of the charges)) is a supermartingale (Feldman & Zrnic 2021,
  the Rényi filter), and since the run ends with some order within its budget, the
  hockey-stick divergence at eps_budget is at most the sum over orders of each
  order's bound, delta_budget / m each (the union bound over orders of Lécuyer
  2021). One order is Feldman and Zrnic's filter at that order with all of delta.

  Args:
    orders: the Rényi orders (> 1); ``None``: :data:`jaxdp.composition.renyi.
      DEFAULT_ORDERS` (2, 4, ..., 256). Fewer orders pay less for the union bound.
  """

  orders: tuple | None = None
  name = "rdp"
  needs_delta = True

  def configure(self, eps_budget: float, delta_budget: float) -> UnitRule:
    super().configure(eps_budget, delta_budget)
    orders, _ = renyi.filter_budgets(
      eps_budget,
      delta_budget,
      renyi.check_orders(renyi.DEFAULT_ORDERS if self.orders is None else self.orders),
    )
    if not orders:
      raise ValueError(
        f"no Rényi order can hold anything within (eps={eps_budget:g}, delta="
        f"{delta_budget:g}): each order's conversion alone exceeds eps_budget. "
        "Raise the budget or pass larger orders."
      )
    return dataclasses.replace(self, orders=orders)

  def unit_exponents(self, eps_budget: float, delta_budget: float) -> tuple:
    budgets = renyi.filter_budgets(eps_budget, delta_budget, self.orders)[1]
    return tuple(budget.unit_exponent(b) for b in budgets), budget.unit_exponent(0.0)

  def state_shape(self) -> tuple:
    return (len(self.orders),)

  def rdp_budgets(self, acct: Accountant) -> tuple:
    return renyi.filter_budgets(acct.eps_budget, acct.delta_budget, self.orders)[1]

  def cost(self, mech: Mechanism, group_size: int) -> tuple[Scalar, Scalar]:
    return mech.rdp_cost(self.orders, group_size), 0.0

  def capacity(self, acct: Accountant) -> Capacity:
    eps = tuple(
      budget.capped_capacity(b, e)
      for b, e in zip(self.rdp_budgets(acct), acct.unit_exponent)
    )
    return Capacity(eps, 0, eps, 0)  # delta enters through the conversion

  def allows(
    self,
    caps: Capacity,
    spent: ArrayLike,
    spent_delta: ArrayLike,
    answered: ArrayLike,
    ce: ArrayLike,
    cd: ArrayLike,
  ) -> jax.Array:
    return (ce <= np.asarray(caps.eps_capacity) - spent).any()

  def add(self, caps: Capacity, spent: ArrayLike, ce: ArrayLike) -> jax.Array:
    """An order the charge does not fit is saturated at capacity + 1 (over budget for
    good; spent stays monotone and never overflows int32). A saturated order no
    longer holds the sum of its charges, so it bounds nothing: the reported spend
    skips it (:attr:`jaxdp.Accountant.spent_rdp` shows ``inf``)."""
    cap = np.asarray(caps.eps_capacity)
    xp = np if isinstance(spent, np.ndarray) else jnp  # plan: numpy; release: traced
    return xp.where(ce <= cap - spent, spent + ce, cap + 1).astype(spent.dtype)

  def describe_cost(self, eps: Scalar, delta: Scalar) -> str:
    return f"RDP {tuple(round(float(c), 6) for c in np.asarray(eps))}"

  def describe_limit(self, acct: Accountant) -> str:
    return (
      f"the whole Rényi budget at every order (orders {self.orders}, "
      f"budgets {tuple(round(b, 6) for b in self.rdp_budgets(acct))}, from eps="
      f"{acct.eps_budget:g} at delta={acct.delta_budget:g})"
    )

  def spent_eps(self, acct: Accountant) -> jax.Array:
    """The smallest conversion of the spent curve over the orders within budget,
    capped at ``eps_budget`` (0 before anything was answered)."""
    spent = budget.in_cost(acct.spent_units, acct.unit_exponent)
    best = renyi.rdp_epsilon(acct.spent_rdp, self.orders, acct.delta_budget)
    return jnp.where(
      jnp.any(acct.spent_units > 0, axis=-1), jnp.minimum(best, acct.eps_budget), 0.0
    ).astype(spent.dtype)

  def spent_delta(self, acct: Accountant) -> jax.Array:
    return jnp.where(jnp.any(acct.spent_units > 0, axis=-1), acct.delta_budget, 0.0).astype(
      jnp.result_type(float)
    )

  def remaining(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    """A pure eps that is surely answered (the largest sqrt(2 left_a / a): any
    eps-DP curve is below a eps^2 / 2), and 0."""
    f = jnp.result_type(float)
    left = budget.in_cost(
      jnp.asarray(self.capacity(acct).eps_capacity) - acct.spent_units, acct.unit_exponent
    )
    a = jnp.asarray(self.orders, f)
    return (
      jnp.max(jnp.sqrt(2 * jnp.maximum(left, 0.0) / a), axis=-1),
      jnp.zeros(jnp.shape(left)[:-1], f),
    )

  def plan_row(
    self, eps: Scalar, delta: Scalar, refused: bool, event: tuple
  ) -> planning.PlannedRelease:
    return planning.PlannedRelease(
      math.nan, 0.0, refused, rdp=tuple(np.asarray(eps, float)), event=event
    )

  def plan_totals(
    self, acct: Accountant, rows: list, spent: int, spent_delta: int
  ) -> tuple[float, float]:
    answered = [r for r in rows if not r.refused]
    if not answered:
      return 0.0, 0.0
    curve = np.sum([r.rdp for r in answered], axis=0)
    return (
      min(renyi.rdp_epsilon(curve, self.orders, acct.delta_budget), acct.eps_budget),
      acct.delta_budget,
    )
