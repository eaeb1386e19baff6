"""Rényi differential privacy: mechanism curves, conversion, and the filter's budgets.

A mechanism is (alpha, tau)-RDP when the Rényi divergence of order alpha between its
outputs on neighbouring datasets is at most tau. This module gives, for a fixed tuple
of orders, each mechanism family's RDP curve (computed stably, on Python floats or on
traced values), the conversion to (eps, delta)-DP, and the per-order budgets of the
Rényi privacy filter that :class:`jaxdp.Accountant` runs with ``composition="rdp"``.

Curves (group size k enters as the sensitivity k Delta, i.e. eps -> k eps, and
rho -> k^2 rho):

* any pure eps-DP mechanism: the randomized-response curve
  (1/(alpha-1)) log((e^(alpha eps) + e^((1-alpha) eps)) / (1 + e^eps)), the largest
  RDP an eps-DP mechanism can have (Bun & Steinke 2016, Proposition 3.3, written there
  with sinh); it is below min(eps, alpha eps^2 / 2).
* the Laplace mechanism at eps = Delta / b: (1/(alpha-1)) log(alpha/(2 alpha-1)
  e^((alpha-1) eps) + (alpha-1)/(2 alpha-1) e^(-alpha eps)) (Mironov 2017,
  Proposition 6). For a vector statistic of l_1 sensitivity Delta the divergence is
  a sum over coordinates of the same curve at the coordinates' shifts; the curve is
  convex in eps (a log-sum-exp of affine functions) and 0 at 0, hence superadditive,
  so a shift concentrated on one coordinate is the worst case and the 1-D curve holds.
  Exact (integer) Laplace releases are a rounding of this mechanism: postprocessing.
* Gaussian noise (continuous or discrete) of zCDP rho: alpha rho (Bun & Steinke 2016;
  Canonne, Kamath & Steinke 2020, Theorem 4).

Static costs use float64 and formulas without cancellation (relative error < 1e-9).
Traced costs (inside jit, one per release per order, so speed matters) use float32
and the short log-sum-exp form, then are rounded up: times ``1 + 2**-12``
(:data:`TRACED_MARGIN`) plus ``2**-20 (|p| + |q| + 1) / (alpha - 1)`` for the two
log-sum-exp terms p and q (16x a bound on float32's rounding of them). Tests check
the result against 50-digit mpmath values for eps from 1e-6 to 90: a traced cost is
never charged below the true one, and above it by at most that rounding-up (at
alpha = 4: 0.4% at eps = 0.01, 0.005% at eps = 0.1; orders near 1 pay more at tiny
eps, since log((alpha-1)/(2 alpha-1)) grows, but never more than eps itself).

References:
  I. Mironov, "Rényi differential privacy", CSF 2017. M. Bun, T. Steinke,
  "Concentrated differential privacy", TCC 2016. C. Canonne, G. Kamath, T. Steinke,
  "The discrete Gaussian for differential privacy", NeurIPS 2020 (Proposition 12).
  V. Feldman, T. Zrnic, "Individual privacy accounting via a Rényi filter", NeurIPS
  2021. M. Lécuyer, "Practical privacy filters and odometers with Rényi differential
  privacy", 2021.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.typing import ArrayLike, Scalar

__all__ = [
  "DEFAULT_ORDERS",
  "pure_rdp",
  "laplace_rdp",
  "gaussian_rdp",
  "rdp_epsilon",
  "filter_budgets",
]

DEFAULT_ORDERS = (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
TRACED_MARGIN = 1.0 + 2.0**-12


def check_orders(orders) -> tuple:
  """A non-empty tuple of distinct finite orders > 1, as floats (sorted)."""
  try:
    values = tuple(sorted({float(a) for a in orders}))
  except (TypeError, ValueError):
    raise _checks.ArgTypeError(
      f"orders must be a sequence of numbers > 1; got {orders!r}."
    ) from None
  if not values or not all(1 < a < math.inf for a in values):
    raise ValueError(
      f"orders must be finite Rényi orders > 1 (at least one); got {orders!r}."
    )
  return values


# ------------------------------------------------------------------ curves
def _series_em(z, xp):
  """e^z - 1 - z by its Taylor series (|z| <= 1/2: 9 terms, relative error < 1e-9)."""
  total, term = 0.0 * z, z * z / 2
  for n in range(3, 12):
    total = total + term
    term = term * z / n
  return total


def _em(z, xp):
  """e^z - 1 - z without cancellation (>= 0 for every z)."""
  small = xp.abs(z) <= 0.5
  safe = xp.where(small, 1.0, z)
  return xp.where(small, _series_em(xp.where(small, z, 0.0), xp), xp.expm1(safe) - safe)


def _log_expm1(z, xp):
  """log(e^z - 1) for z > 0, without overflow."""
  big = z > 20
  return xp.where(
    big,
    z + xp.log1p(-xp.exp(-xp.where(big, z, 20.0))),
    xp.log(xp.expm1(xp.minimum(z, 20.0))),
  )


def _softplus(y, xp):
  return xp.logaddexp(y, 0.0)


def _curve(fn, terms, eps, orders):
  """Evaluates ``fn(eps, alpha, xp)`` on every order for a static eps (float64), or
  the rounded-up log-sum-exp of ``terms(eps, alpha)`` for a traced one (float32).
  0 where eps == 0."""
  a = np.asarray(orders, np.float64)
  if _checks.is_concrete(eps) and np.ndim(eps) == 0:
    e = float(eps)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
      return np.where(e > 0, fn(np.float64(max(e, 1e-300)), a, np), 0.0)
  e = jnp.asarray(eps, jnp.float32)[..., None]
  pos = e > 0
  e = jnp.where(pos, e, 1.0)
  p, q, rest = terms(e, a)
  scale = np.float32(1 / (a - 1))
  value = (jnp.logaddexp(p, q) - rest) * scale
  slack = (jnp.abs(p) + jnp.abs(q) + jnp.abs(rest) + 1) * (scale * np.float32(2.0**-20))
  out = jnp.minimum(value * np.float32(TRACED_MARGIN) + slack, e)
  return jnp.where(pos, jnp.maximum(out, 0.0), 0.0)


def _pure_terms(e, a):
  """(alpha - 1) D = logaddexp(alpha e, (1 - alpha) e) - softplus(e)."""
  return (np.float32(a) * e, np.float32(1 - a) * e, jnp.logaddexp(e, 0.0))


def _laplace_terms(e, a):
  """(alpha - 1) D = logaddexp(log(a / (2a-1)) + (a-1) e, log((a-1) / (2a-1)) - a e)."""
  c1, c2 = np.log(a / (2 * a - 1)), np.log((a - 1) / (2 * a - 1))
  return (np.float32(c1) + np.float32(a - 1) * e, np.float32(c2) - np.float32(a) * e, 0.0)


def _pure(e, a, xp):
  # (e^(a e) + e^((1-a) e)) / (1 + e^e) - 1 = expm1((a-1) e) expm1(a e) e^(-(a-1) e)
  # / (1 + e^e): a product of positive factors, so no cancellation.
  x = (a - 1) * e
  y = _log_expm1(x, xp) + _log_expm1(a * e, xp) - x - _softplus(e, xp)
  return xp.minimum(_softplus(y, xp) / (a - 1), e)


def _laplace(e, a, xp):
  # alpha/(2a-1) e^x + (a-1)/(2a-1) e^(-a e) - 1 with x = (a-1) e equals
  # (a em(x) + (a-1) em(-a e)) / (2a-1): the first-order terms cancel exactly.
  x = (a - 1) * e
  small = x <= 60
  xs = xp.where(small, x, 0.0)
  s = (a * _em(xs, xp) + (a - 1) * _em(-a * xp.where(small, e, 0.0), xp)) / (2 * a - 1)
  near = xp.log1p(s)
  far = xp.logaddexp(xp.log(a / (2 * a - 1)) + x, xp.log((a - 1) / (2 * a - 1)) - a * e)
  return xp.minimum(xp.where(small, near, far) / (a - 1), e)


def pure_rdp(eps: Scalar, orders: ArrayLike) -> jax.Array:
  """RDP of any eps-DP mechanism at each order (randomized response's curve).

  Args:
    eps: the pure-DP parameter (a float or a traced scalar; 0 gives 0).
    orders: the Rényi orders (> 1).

  Returns:
    An array with one value per order (numpy float64 for a static eps; jnp float32,
    rounded up as the module docstring says, for a traced one).

  References:
    Bun & Steinke (2016), Proposition 3.3.
  """
  return _curve(_pure, _pure_terms, eps, orders)


def laplace_rdp(eps: Scalar, orders: ArrayLike) -> jax.Array:
  """RDP of the Laplace mechanism with scale Delta / eps at each order.

  References:
    Mironov (2017), Proposition 6.
  """
  return _curve(_laplace, _laplace_terms, eps, orders)


def gaussian_rdp(rho: Scalar, orders: ArrayLike) -> jax.Array:
  """RDP of a rho-zCDP Gaussian (or discrete Gaussian) mechanism: alpha rho."""
  a = np.asarray(orders, np.float64)
  if _checks.is_concrete(rho) and np.ndim(rho) == 0:
    return a * float(rho)
  return (
    jnp.asarray(rho, jnp.float32)[..., None] * jnp.asarray(a, jnp.float32) * TRACED_MARGIN
  )


# ------------------------------------------------------------------ conversion
def conversion_tail(orders, delta):
  """The CKS term (log(1/delta) + (a-1) log(1-1/a) - log a) / (a-1) per order."""
  a = np.asarray(orders, np.float64)
  return (math.log(1 / delta) + (a - 1) * np.log1p(-1 / a) - np.log(a)) / (a - 1)


def rdp_epsilon(rdp: ArrayLike, orders: ArrayLike, delta: float) -> jax.Array:
  """The eps of (eps, delta)-DP implied by (alpha, rdp[alpha])-RDP at the best order.

  eps = min over the orders of rdp_a + (log(1/delta) + (a-1) log(1 - 1/a) - log a) /
  (a - 1). For a fixed sequence of mechanisms their RDP curves add, and this converts
  the sum. An order whose entry is ``inf`` (no bound known there) is skipped; ``inf``
  if every entry is. Python floats in, a float out; traced arrays give an array.

  References:
    Canonne, Kamath & Steinke (2020), Proposition 12.
  """
  delta = _checks.check_delta(delta, "delta")
  if not delta > 0:
    raise ValueError("delta must be > 0 to convert RDP to (eps, delta)-DP.")
  tail = conversion_tail(orders, delta)
  if _checks.is_concrete(rdp):
    rdp = np.asarray(rdp, np.float64)
    return (
      float(np.max([0.0, np.min(rdp + tail)]))
      if rdp.ndim == 1
      else np.maximum(np.min(rdp + tail, axis=-1), 0.0)
    )
  return jnp.maximum(jnp.min(jnp.asarray(rdp) + tail, axis=-1), 0.0)


@value_cache(maxsize=256)
def filter_budgets(eps: float, delta: float, orders: tuple) -> tuple:
  """Per-order budgets of the Rényi filter over ``orders`` for a total (eps, delta).

  Each order a of the m kept gets delta / m and the largest B_a whose CKS conversion
  at delta / m is eps: B_a = eps - tail(a, delta / m). Orders where that is <= 0 can
  never answer and are dropped (m shrinks, the rest get more delta), until stable.

  Returns:
    ``(orders_kept, budgets)``, two tuples of floats (empty if no order fits).
  """
  kept = tuple(orders)
  while kept:
    budgets = eps - conversion_tail(kept, delta / len(kept))
    if (budgets > 0).all():
      return kept, tuple(float(b) for b in budgets)
    kept = tuple(a for a, b in zip(kept, budgets) if b > 0)
  return (), ()
