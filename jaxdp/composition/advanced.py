"""Dwork-Rothblum-Vadhan advanced composition, and the per-release caps it allows.

References:
  C. Dwork, G. Rothblum, S. Vadhan, "Boosting and differential privacy", FOCS 2010;
  C. Dwork, A. Roth, 2014, Theorem 3.20.
"""

from __future__ import annotations

import math

import jax.numpy as jnp

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.composition.search import bisect, safe_exp
from jaxdp.typing import Scalar

__all__ = ["advanced_composition", "advanced_caps"]


def advanced_composition(
  eps: Scalar, delta: Scalar, k: int, delta_prime: float
) -> tuple[Scalar, Scalar]:
  """Dwork-Rothblum-Vadhan advanced composition.

  The k-fold adaptive composition of (eps, delta)-DP mechanisms is
  (eps sqrt(2 k ln(1/delta')) + k eps (e^eps - 1), k delta + delta')-DP for any
  delta' > 0. It holds when k is fixed in advance and every mechanism is
  (eps, delta)-DP for the same eps (use the largest); each may be chosen adaptively.
  It beats basic composition (k eps) only for many small releases.

  Returns:
    ``(eps_total, delta_total)``.

  References:
    Dwork, Rothblum & Vadhan (2010); Dwork & Roth (2014), Theorem 3.20.
  """
  eps = _checks.check_positive(eps, "eps", allow_traced=True)
  if _checks.is_concrete(delta):
    delta = _checks.check_delta(delta, "delta")
  k = _checks.check_int(k, "k", minimum=1)
  delta_prime = _checks.check_positive(delta_prime, "delta_prime")
  exp = safe_exp if _checks.is_concrete(eps) else jnp.exp
  total = eps * math.sqrt(2 * k * math.log(1 / delta_prime)) + k * eps * (exp(eps) - 1)
  return total, k * delta + delta_prime


@value_cache(maxsize=256)
def advanced_caps(eps_budget, delta_budget, k, delta_prime):
  """Largest per-release (eps, delta) whose k-fold composition fits the budget.

  The eps cap is the largest eps* with ``advanced_composition(eps*, delta*, k,
  delta_prime)`` within ``eps_budget`` (or ``eps_budget / k`` if that is larger, the
  basic-composition share), with delta* = (delta_budget - delta') / k.

  Returns:
    ``(eps_cap, delta_cap)``.
  """
  delta_cap = (delta_budget - delta_prime) / k
  cap = bisect(
    lambda e: e > 0 and advanced_composition(e, delta_cap, k, delta_prime)[0] <= eps_budget,
    0.0,
    eps_budget,
  )  # advanced_composition grows with eps
  return max(cap, eps_budget / k), delta_cap
