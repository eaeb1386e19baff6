"""Zero-concentrated DP: its (eps, delta) conversion and the rho budget of a target.

References:
  M. Bun, T. Steinke, TCC 2016. C. Canonne, G. Kamath, T. Steinke, "The discrete
  Gaussian for differential privacy", NeurIPS 2020, Proposition 12 (Corollary 13).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.composition.search import bisect
from jaxdp.typing import Scalar

__all__ = ["zcdp_epsilon", "zcdp_budget", "ALPHAS"]

# Renyi orders at which the zCDP -> (eps, delta) conversion is evaluated. The bound
# holds at every order alpha > 1, so its minimum over any fixed set is valid; this
# grid is within 1e-4 of the optimum for the budgets jaxdp meets.
ALPHAS = 1.0 + np.geomspace(1e-4, 1e5, 4096)


def zcdp_epsilon(rho: Scalar, delta: float) -> jax.Array:
  """The eps of (eps, delta)-DP implied by rho-zCDP (Canonne, Kamath & Steinke).

  eps = min over alpha > 1 of alpha rho + (log(1/delta) + (alpha - 1) log(1 - 1/alpha)
  - log(alpha)) / (alpha - 1), evaluated on a fixed grid of orders (every order gives
  a valid bound, so the minimum over the grid is valid), and at least 0 (for delta
  near 1 the formula goes negative; (eps, delta)-DP implies (eps', delta)-DP for any
  eps' >= eps). Works on Python floats and on traced values; rho = 0 gives 0.

  References:
    C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
    privacy", NeurIPS 2020, Proposition 12 (Corollary 13).
  """
  delta = _checks.check_delta(delta, "delta")
  if not delta > 0:
    raise ValueError("delta must be > 0 to convert zCDP to (eps, delta)-DP.")
  a = ALPHAS
  tail = (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)
  if _checks.is_concrete(rho) and np.ndim(rho) == 0:
    rho = float(rho)
    return 0.0 if rho <= 0 else max(float(np.min(a * rho + tail)), 0.0)
  rho = jnp.asarray(rho)  # traced, or a batch (e.g. of vmapped accountants)
  eps = jnp.maximum(jnp.min(a * rho[..., None] + tail, axis=-1), 0.0)
  return jnp.where(rho > 0, eps, 0.0)


@value_cache(maxsize=256)
def zcdp_budget(eps: float, delta: float) -> float:
  """The largest rho whose :func:`zcdp_epsilon` at ``delta`` is at most ``eps``."""
  return bisect(lambda r: zcdp_epsilon(r, delta) <= eps, 0.0, eps)  # increasing in rho
