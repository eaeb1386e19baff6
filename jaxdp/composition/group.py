"""Group privacy (Dwork 2006, Lemma 2.8).

References:
  C. Dwork, "Differential privacy", ICALP 2006; C. Dwork, A. Roth, "The algorithmic
  foundations of differential privacy", 2014, Theorem 2.2.
"""

from __future__ import annotations

import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.composition.search import safe_exp
from jaxdp.typing import Scalar

__all__ = ["group_cost"]


def group_cost(eps: Scalar, delta: Scalar, group_size: int) -> tuple[Scalar, Scalar]:
  """(eps, delta)-DP for individuals -> the guarantee for groups of ``group_size``.

  Pure DP: ``k eps``. Approximate DP: ``(k eps, k e^((k-1) eps) delta)``.

  References:
    Dwork (2006), Lemma 2.8; Dwork & Roth (2014), Theorem 2.2.
  """
  k = _checks.check_int(group_size, "group_size", minimum=1)
  if _checks.is_concrete(delta) and delta == 0:
    return k * eps, 0.0
  if _checks.is_concrete(eps) and _checks.is_concrete(delta):
    return k * eps, k * safe_exp((k - 1) * eps) * delta  # inf: the guarantee is void
  return k * eps, k * jnp.exp((k - 1) * eps) * delta
