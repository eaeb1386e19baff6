"""Composition mathematics: group privacy, advanced composition, interpretations.

Pure functions of privacy parameters (Python floats, or traced values where noted);
the accountant (:mod:`jaxdp.accounting`) applies them.

References:
  C. Dwork, "Differential privacy", ICALP 2006, and the chapter on postprocessing,
  composition and group privacy (Lemma 2.8, group privacy). C. Dwork, G. Rothblum,
  S. Vadhan, "Boosting and differential privacy", FOCS 2010. L. Wasserman, S. Zhou,
  "A statistical framework for differential privacy", JASA 2010. P. Kairouz, S. Oh,
  P. Viswanath, "The composition theorem for differential privacy", ICML 2015.
"""

from __future__ import annotations

import functools
import math

import jax.numpy as jnp
import numpy as np

from jaxdp import _checks

__all__ = ["group_cost", "advanced_composition", "hypothesis_test_bound",
           "zcdp_epsilon", "zcdp_budget", "optimal_composition_delta",
           "optimal_composition_epsilon"]

# Renyi orders at which the zCDP -> (eps, delta) conversion is evaluated. The bound
# holds at every order alpha > 1, so its minimum over any fixed set is valid; this
# grid is within 1e-4 of the optimum for the budgets jaxdp meets.
_ALPHAS = 1.0 + np.geomspace(1e-4, 1e5, 4096)


def group_cost(eps, delta, group_size: int):
  """(eps, delta)-DP for individuals -> the guarantee for groups of ``group_size``.

  Pure DP: ``k eps``. Approximate DP: ``(k eps, k e^((k-1) eps) delta)``.

  References:
    Dwork (2006), Lemma 2.8; Dwork & Roth (2014), Theorem 2.2.
  """
  k = _checks.check_int(group_size, "group_size", minimum=1)
  if _checks.is_concrete(delta) and delta == 0:
    return k * eps, 0.0
  if _checks.is_concrete(eps) and _checks.is_concrete(delta):
    return k * eps, k * _exp((k - 1) * eps) * delta  # inf: the guarantee is void
  return k * eps, k * jnp.exp((k - 1) * eps) * delta


def advanced_composition(eps, delta, k: int, delta_prime: float):
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
  exp = _exp if _checks.is_concrete(eps) else jnp.exp
  total = eps * math.sqrt(2 * k * math.log(1 / delta_prime)) + k * eps * (exp(eps) - 1)
  return total, k * delta + delta_prime


@functools.lru_cache(maxsize=256)
def _advanced_caps(eps_budget, delta_budget, k, delta_prime):
  """Largest per-release (eps, delta) whose k-fold composition fits the budget."""
  delta_cap = (delta_budget - delta_prime) / k
  cap = _bisect(lambda e: e > 0 and advanced_composition(e, delta_cap, k, delta_prime)[0]
                <= eps_budget, 0.0, eps_budget)  # advanced_composition grows with eps
  return max(cap, eps_budget / k), delta_cap


def hypothesis_test_bound(eps, alpha, delta: float = 0.0) -> float:
  """Largest power of any test about one individual at significance ``alpha``.

  For an (eps, delta)-DP output, any test of H0 versus H1 about one person's value
  with type I error alpha has power at most
  min(e^eps alpha + delta, 1 - e^-eps (1 - alpha - delta)) (and at most 1): it
  rejects with about the same probability whether or not the hypothesis is true.

  References:
    Wasserman & Zhou (2010); Kairouz, Oh & Viswanath (2015).
  """
  eps = _checks.check_positive(eps, "eps")
  alpha = float(alpha)
  if not 0 <= alpha <= 1:
    raise ValueError(f"alpha must be in [0, 1]; got {alpha}.")
  delta = _checks.check_delta(delta, "delta")
  first = alpha * _exp(eps) + delta if alpha > 0 else delta
  return float(min(1.0, first, 1 - math.exp(-eps) * (1 - alpha - delta)))


def _bisect(feasible, good: float, bad: float, *, steps: int = 200) -> float:
  """The boundary of a monotone predicate, on its feasible side.

  ``feasible(good)`` holds (or is the side to return) and ``feasible(bad)`` does not;
  ``good`` may lie above or below ``bad``. Returns the last feasible point found.
  """
  for _ in range(steps):
    mid = (good + bad) / 2
    if feasible(mid):
      good = mid
    else:
      bad = mid
  return good


def _exp(x: float) -> float:
  """math.exp, with inf instead of OverflowError."""
  try:
    return math.exp(x)
  except OverflowError:
    return math.inf


def zcdp_epsilon(rho, delta: float):
  """The eps of (eps, delta)-DP implied by rho-zCDP (Canonne, Kamath & Steinke).

  eps = min over alpha > 1 of alpha rho + (log(1/delta) + (alpha - 1) log(1 - 1/alpha)
  - log(alpha)) / (alpha - 1), evaluated on a fixed grid of orders (every order gives
  a valid bound, so the minimum over the grid is valid). Works on Python floats and on
  traced values; rho = 0 gives 0.

  References:
    C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
    privacy", NeurIPS 2020, Proposition 12 (Corollary 13).
  """
  delta = _checks.check_delta(delta, "delta")
  if not delta > 0:
    raise ValueError("delta must be > 0 to convert zCDP to (eps, delta)-DP.")
  a = _ALPHAS
  tail = (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)
  if _checks.is_concrete(rho) and np.ndim(rho) == 0:
    rho = float(rho)
    return 0.0 if rho <= 0 else float(np.min(a * rho + tail))
  rho = jnp.asarray(rho)  # traced, or a batch (e.g. of vmapped accountants)
  return jnp.where(rho > 0, jnp.min(a * rho[..., None] + tail, axis=-1), 0.0)


@functools.lru_cache(maxsize=256)
def zcdp_budget(eps: float, delta: float) -> float:
  """The largest rho whose :func:`zcdp_epsilon` at ``delta`` is at most ``eps``."""
  return _bisect(lambda r: zcdp_epsilon(r, delta) <= eps, 0.0, eps)  # increasing in rho


def optimal_composition_delta(eps: float, k: int, eps_total: float) -> float:
  """The least delta such that k releases of eps-DP are (eps_total, delta)-DP.

  Exact (Kairouz-Oh-Viswanath): the worst case is k-fold randomized response, so
  delta = sum over l of C(k, l) (e^((k-l) eps) - e^(eps_total + l eps))_+ /
  (1 + e^eps)^k, summed here in logarithms (stable for large k). Valid when the k
  releases' parameters are fixed before the run (the queries may be adaptive).

  References:
    P. Kairouz, S. Oh, P. Viswanath, "The composition theorem for differential
    privacy", ICML 2015, Theorem 3.3; J. Murtagh, S. Vadhan, TCC 2016 (the closed form
    for any eps_total).
  """
  eps = _checks.check_positive(eps, "eps")
  k = _checks.check_int(k, "k", minimum=1)
  total = 0.0
  log_norm = k * (eps + math.log1p(math.exp(-eps)))  # k log(1 + e^eps)
  for l in range(k + 1):
    gap = (k - 2 * l) * eps - eps_total              # log of e^((k-l)eps) / e^(...)
    if gap <= 0:
      continue
    log_c = math.lgamma(k + 1) - math.lgamma(l + 1) - math.lgamma(k - l + 1)
    total += math.exp(log_c + (k - l) * eps - log_norm) * -math.expm1(-gap)
  return min(total, 1.0)


def optimal_composition_epsilon(eps: float, k: int, delta: float) -> float:
  """The least eps_total with :func:`optimal_composition_delta` at most ``delta``."""
  delta = _checks.check_delta(delta, "delta")
  if optimal_composition_delta(eps, k, 0.0) <= delta:
    return 0.0
  return _bisect(lambda e: optimal_composition_delta(eps, k, e) <= delta,  # decreasing
                 k * eps, 0.0, steps=100)
