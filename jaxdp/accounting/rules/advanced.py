"""Advanced composition (Dwork, Rothblum & Vadhan 2010)."""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.accounting import budget
from jaxdp.accounting.rules.base import Capacity, UnitRule
from jaxdp.composition.advanced import advanced_caps, advanced_composition
from jaxdp.typing import ArrayLike, Scalar

if TYPE_CHECKING:  # the accountant imports the rules
  from jaxdp.accounting.accountant import Accountant

__all__ = ["AdvancedComposition"]


@dataclasses.dataclass(frozen=True, eq=False)
class AdvancedComposition(UnitRule):
  """At most ``max_releases`` releases, each within fixed per-release caps.

  Theorem (Dwork-Rothblum-Vadhan; Dwork & Roth 2014, Theorem 3.20): k adaptively
  chosen (eps, delta)-DP mechanisms are together
  (eps sqrt(2 k ln(1/delta')) + k eps (e^eps - 1), k delta + delta')-DP. It needs k
  and one per-release eps fixed in advance, so the rule derives per-release caps
  (:func:`jaxdp.composition.advanced.advanced_caps`): the largest eps* whose k-fold
  bound is within the budget (or budget / k if that is larger), delta* =
  (delta_budget - delta') / k, and answers at most k releases, each costing at most
  the caps. The guarantee is that bound for the k releases at the caps, or basic
  composition of them if smaller.

  Args:
    max_releases: the number k of releases, declared in advance.
    delta_prime: the slack delta' > 0 (at most ``delta_budget``).
  """

  max_releases: int | None = None
  delta_prime: float = 0.0
  name = "advanced"

  def __post_init__(self):
    if self.max_releases is None:
      raise ValueError(
        "composition='advanced' needs max_releases (k, declared in advance)."
      )
    object.__setattr__(
      self, "max_releases", _checks.check_int(self.max_releases, "max_releases", minimum=1)
    )
    object.__setattr__(
      self,
      "delta_prime",
      _checks.check_positive(
        self.delta_prime, "delta_prime", hint="Advanced composition needs delta' > 0."
      ),
    )

  def configure(self, eps_budget: float, delta_budget: float) -> UnitRule:
    if not self.delta_prime <= delta_budget:  # NaN refuses
      raise ValueError(
        f"delta_prime ({self.delta_prime}) must not exceed delta_budget "
        f"({delta_budget}); advanced composition spends k delta + delta'."
      )
    return self

  def unit_exponents(self, eps_budget: float, delta_budget: float) -> tuple:
    eps_cap, delta_cap = advanced_caps(
      eps_budget, delta_budget, self.max_releases, self.delta_prime
    )
    # units large enough to count k releases at the caps
    return (
      budget.unit_exponent(max(eps_budget, self.max_releases * eps_cap)),
      budget.unit_exponent(max(delta_budget, self.max_releases * delta_cap)),
    )

  def per_release_caps(self, acct: Accountant) -> tuple:
    return advanced_caps(
      acct.eps_budget, acct.delta_budget, self.max_releases, self.delta_prime
    )

  def capacity(self, acct: Accountant) -> Capacity:
    basic = super().capacity(acct)
    eps_cap, delta_cap = self.per_release_caps(acct)
    return Capacity(
      math.floor(math.ldexp(eps_cap, -acct.unit_exponent)),
      math.floor(math.ldexp(delta_cap, -acct.delta_unit_exponent)),
      basic.eps_capacity,
      basic.delta_capacity,
    )

  def allows(
    self,
    caps: Capacity,
    spent: ArrayLike,
    spent_delta: ArrayLike,
    answered: ArrayLike,
    ce: ArrayLike,
    cd: ArrayLike,
  ) -> jax.Array:
    return (
      (answered < self.max_releases) & (ce <= caps.eps_limit) & (cd <= caps.delta_limit)
    )

  def describe_limit(self, acct: Accountant) -> str:
    eps_cap, delta_cap = self.per_release_caps(acct)
    return (
      "the per-release cap of advanced composition over "
      f"{self.max_releases} releases (eps={eps_cap:g}, delta={delta_cap:g})"
    )

  def remaining(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    f = jnp.result_type(float)
    eps_cap, delta_cap = self.per_release_caps(acct)
    more = acct.answered < self.max_releases
    return (
      jnp.where(more, eps_cap, 0.0).astype(f),
      jnp.where(more, delta_cap, 0.0).astype(f),
    )

  def guarantee(self, acct: Accountant) -> tuple[Scalar, Scalar]:
    k = self.max_releases
    eps_cap, delta_cap = self.per_release_caps(acct)
    adv = advanced_composition(eps_cap, delta_cap, k, self.delta_prime)
    f = jnp.result_type(float)
    return tuple(jnp.asarray(v, f) for v in min(adv, (k * eps_cap, k * delta_cap)))
