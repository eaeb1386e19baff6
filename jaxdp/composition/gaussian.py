"""Analytic calibration of Gaussian noise (Balle & Wang 2018).

delta(eps, s) = Phi(a) - e^eps Phi(b), a, b = +-u - v, u = 1/(2s), v = eps s, is
evaluated two ways, each with a bound on its float64 error, and the bound calibrates:

- direct: Phi(a) - e^eps Phi(b), the tails as e^z R(t) / sqrt(2 pi) (R the Mills ratio
  Phi(-t) / phi(t), z <= 0), so neither overflows nor underflows early;
- series: phi(v) [F - G], F = int_{-u}^{u} e^(v t - t^2/2) dt = 2u sum_{n even}
  He_n(v) u^n / (n + 1)! (so phi(v) F = Phi(a) - Phi(b), no subtraction of tails) and
  G = 2 sinh(eps/2) e^(-u^2/2) R(u + v) (so phi(v) G = expm1(eps) Phi(b)).

The direct form's two terms cancel by a factor of about 1 + eps s^2 (10^41 at
eps = 1e-38, delta = 1e-300); the series' F and G by about 1 + v^2 only (v^2 <= 1500
wherever delta >= 1e-300), and phi(v), their common factor, not at all.

Error bounds (u_r = 2^-53): +-, *, / and sqrt round to within u_r; erfc, exp, sinh,
lgamma and expm1 are taken to within LIBM = 2^-46 (64 ulps; glibc's and CPython's are
within a few, erfc's arguments here below 2.2).
The inputs eps, s are exact; u and v are within u_r, and each function's argument
error moves it by at most its logarithmic derivative times that error (bounded below:
|R'/R| <= min(1, 1/t), |d log Phi(-t)/dt| <= t + 1, |d log erfc(y)/dy| <= 2y + sqrt 2,
from 2/(t + sqrt(t^2 + 4)) < R(t) < 1/t). Relative errors compound as
expm1(their sum). A result below 2^-1000 may have lost its relative precision to
underflow: TINY = 2^-1040 is added to every bound.

References:
  B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
  analytical calibration and optimal denoising", ICML 2018, Theorem 8.
"""

from __future__ import annotations

import math

from jaxdp._cache import value_cache
from jaxdp.composition.search import bisect

__all__ = [
  "analytic_gaussian_delta",
  "analytic_gaussian_delta_bound",
  "analytic_gaussian_sigma",
]

EPS = 2.0**-53  # float64 unit roundoff
LIBM = 2.0**-46  # a libm call's relative error allowance
TINY = 2.0**-1040  # absolute allowance for underflow
INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
SQRT_HALF_PI = math.sqrt(math.pi / 2)
SQRT_E = math.sqrt(math.e)
CF_FROM = 3.0  # the Mills ratio by its continued fraction from here
SERIES_TERMS = 200
MIN_DELTA = 2.0**-1022  # the smallest normal float64


def _expm1_up(x: float) -> float:
  """math.expm1, with inf instead of OverflowError (an error bound past any use)."""
  return math.expm1(x) if x < 700.0 else math.inf


def _compound(*rels: float) -> float:
  """A bound on prod(1 + r) - 1 (<= expm1(sum r)), rounded up."""
  return _expm1_up(sum(rels)) * 1.001


def _mills_cf(t: float, n: int) -> float:
  """The continued fraction 1/(t + 1/(t + 2/(t + ... + n/t))) in float64."""
  d = t
  for k in range(n, 0, -1):
    d = t + k / d
  return 1 / d


def _mills(t: float) -> tuple[float, float]:
  """(R(t), a bound on its relative error): R(t) = Phi(-t) / phi(t), t >= 0 exact.

  t < CF_FROM: erfc(t/sqrt 2) e^(t^2/2) sqrt(pi/2): the argument's 2 u_r moves erfc by
  (t^2 + t) 2.03 u_r, t^2 / 2 rounds by t^2 u_r / 2, 3 roundings more. Otherwise
  Laplace's continued fraction: consecutive truncations bracket R (positive
  elements), and each is evaluated (backward, positive terms) to within (2n + 3) u_r.
  """
  if t < CF_FROM:
    r = math.erfc(t / math.sqrt(2)) * math.exp(t * t / 2) * SQRT_HALF_PI
    return r, 2 * LIBM + (2.6 * t * t + 2.1 * t + 4) * EPS
  n = 64 if t < 6 else 24
  lo, hi = sorted((_mills_cf(t, n), _mills_cf(t, n + 1)))
  return (lo + hi) / 2, (hi - lo) / (2 * lo) + (2 * n + 6) * EPS


def _scaled_tail(t: float, dt: float, shift: float = 0.0) -> tuple[float, float]:
  """(e^shift Phi(-t*), a bound on its absolute error), t* the true argument, within
  dt of t >= 0, and shift exact with shift <= t*^2 / 2.

  As e^z R(t) / sqrt(2 pi), z = shift - t^2/2: z is within
  dz = u_r (|z| + t^2) + t dt + dt^2 of z*; R(t) within expm1(k dt) of R(t*),
  k = sup |R'/R| on [t - dt, t + dt] (<= 1 + dt; <= 1 / (t - dt) above 1)."""
  if t > 1e150:
    return 0.0, TINY / 4  # z* < -1e299: e^z* R / sqrt(2 pi) < 2^-1100
  z = shift - t * t / 2
  dz = EPS * (abs(z) + t * t) + 1.01 * t * dt + dt * dt
  if z + dz < -760:
    return 0.0, TINY / 4  # e^(z + dz) R(t) < e^-760 sqrt(pi / 2)
  r, rel_r = _mills(t)
  k = 1 / (t - dt) if t - dt > 1 else 1 + dt
  rel = _compound(_expm1_up(dz), LIBM, rel_r, _expm1_up(1.01 * k * dt), 3 * EPS)
  value = math.exp(z) * r * INV_SQRT_2PI
  if rel == math.inf:  # argument errors past any bound: nothing known but 0 <= it
    return value, math.inf
  return value, value * rel + 2.0**-1070


def _direct(eps: float, s: float) -> tuple[float, float]:
  """(Phi(a) - e^eps Phi(b), a bound on its absolute error): a, b within
  u_r (u + v + |a|) and u_r (u + v + |b|) of the true ones."""
  u, v = 0.5 / s, eps * s
  a, t = u - v, u + v
  da, dt = 1.01 * EPS * (u + v + abs(a)), 1.01 * EPS * (u + v + t)
  if a >= 0:
    p, p_err = _scaled_tail(a, da)
    first, first_err = 1 - p, p_err + EPS
  else:
    first, first_err = _scaled_tail(-a, da)
  second, second_err = _scaled_tail(t, dt, eps)  # e^eps Phi(b): eps <= (u + v)^2 / 2
  value = first - second
  return value, first_err + second_err + EPS * abs(value)


def _interval_series(u: float, v: float) -> tuple[float, float] | None:
  """(S, a bound on its error) for S = sum_{n even} g_n, g_n = He_n(v) u^n / (n + 1)!,
  or None where it does not converge within SERIES_TERMS terms.

  g_n = u (v g_{n-1} - (n - 1) u g_{n-2} / n) / (n + 1) (He's recurrence; at most 6
  roundings on either term's path). |g_n| <= m_n, the same recurrence with a plus, and
  m_n <= T_n = (v + sqrt n)^n u^n / (n + 1)!. Each step adds at most 6.01 u_r m_n to
  the error, the sum (n/2 + 1) u_r sum m_n: (7n + 4) u_r sum m_n in all.
  T_{n+1} <= rho_n T_n, rho_n = sqrt(e) (v + sqrt(n + 1)) u / (n + 2) (decreasing in
  n), so once rho_n <= 1/2 the tail is at most 2 T_{n+1}."""
  g_prev, g, m_prev, m = 0.0, 1.0, 0.0, 1.0
  total = total_bar = 1.0
  for n in range(1, SERIES_TERMS + 1):
    g_prev, g = g, u * (v * g - (n - 1) * u * g_prev / n) / (n + 1)
    m_prev, m = m, u * (v * m + (n - 1) * u * m_prev / n) / (n + 1)
    if n % 2:
      continue
    total += g
    total_bar += m
    if SQRT_E * (v + math.sqrt(n + 1)) * u / (n + 2) > 0.5:
      continue
    if u == 0.0:
      return total, 0.0
    log_t = (n + 1) * math.log((v + math.sqrt(n + 1)) * u) - math.lgamma(n + 3)
    if log_t < -75.0:  # 2.01 T_{n+1} < 2^-107 <= u_r^2 S (S >= e^-1/2)
      tail = 2.01 * math.exp(log_t)
      return total, (7 * n + 4) * 1.01 * EPS * total_bar + tail
  return None


def _series(eps: float, s: float) -> tuple[float, float] | None:
  """(phi(v) [F - G], a bound on its absolute error), or None (u > 1, u v > 16 or a
  slow series).

  u, v within u_r move F by (1 + 2 u v) u_r relative (u dF/du <= u v coth(u v) F, as
  F >= 2 e^(-u^2/2) sinh(u v) / v; |dF/dv| <= u F), e^(-u^2/2) by 1.6 u^2 u_r,
  R(u + v) by 2.03 u_r, phi(v) by 1.6 v^2 u_r. F <= 2 u e^(u v) <= 2 e^16, so an
  underflowed phi(v) leaves less than TINY."""
  u, v = 0.5 / s, eps * s
  if not (u <= 1.0 and u * v <= 16.0 and v < 1e150):  # (v * v below float64's range)
    return None
  z, dz = -v * v / 2, 1.6 * v * v * EPS
  if z + dz < -760:
    return 0.0, TINY / 4
  found = _interval_series(u, v)
  if found is None:
    return None
  total, total_err = found
  f = 2 * u * total
  f_err = 2 * u * total_err + EPS * abs(f)
  f_err += _compound((1 + 2 * u * v) * 1.01 * EPS) * (abs(f) + f_err)
  sh = eps if eps < 2.0**-500 else 2 * math.sinh(eps / 2)
  r, rel_r = _mills(u + v)
  g = sh * math.exp(-u * u / 2) * r
  rel_g = _compound(LIBM + EPS, math.expm1(1.6 * u * u * EPS) + LIBM, rel_r, 4.03 * EPS)
  br = f - g
  br_err = f_err + g * rel_g + EPS * abs(br)
  p = math.exp(z) * INV_SQRT_2PI
  rel_p = _compound(_expm1_up(dz), LIBM, 2 * EPS)
  value = p * br
  err = p * (br_err * (1 + rel_p) + (rel_p + EPS) * abs(br)) + 2.0**-1070
  # a subnormal phi(v) is also off by up to two roundings to the subnormal grid
  err += 2.0**-1073 * (abs(br) + br_err)
  return value, err


def _evaluations(eps: float, s: float) -> list[tuple[float, float]]:
  if not eps >= 0:
    raise ValueError(f"the analytic Gaussian's eps must be >= 0; got {eps!r}.")
  found = _series(eps, s)
  return [_direct(eps, s)] + ([] if found is None else [found])


def analytic_gaussian_delta(eps: float, s: float) -> float:
  """delta of Gaussian noise of standard deviation s on sensitivity 1 at eps >= 0
  (Balle & Wang 2018, Theorem 8), evaluated in float64: a point estimate (the
  evaluation with the smaller error bound; see :func:`analytic_gaussian_delta_bound`)."""
  return min(_evaluations(eps, s), key=lambda e: e[1])[0]


def analytic_gaussian_delta_bound(eps: float, s: float) -> float:
  """An upper bound of the exact delta of :func:`analytic_gaussian_delta`: each
  evaluation plus twice its error bound (the factor covers the rounding of the bound's
  own arithmetic), plus TINY; the smaller. Within about 1e-9 relative of the exact
  delta where that is above 1e-300 and eps <= 1e6 (see the module docstring); above,
  the arguments' rounding (eps s u_r) loosens it (to the trivial 1 near a = 0 at eps
  about 5e15)."""
  return min(1.0, min(v + 2 * e for v, e in _evaluations(eps, s)) + TINY)


@value_cache(maxsize=256)
def analytic_gaussian_sigma(eps: float, delta: float) -> float:
  """The smallest standard deviation (sensitivity 1) that is (eps, delta)-DP; rounded
  up, so the returned sigma is never below the exact one (the bisection compares
  :func:`analytic_gaussian_delta_bound`, an upper bound of delta).

  Raises:
    ValueError: eps not finite and >= 0, or delta not in [2^-1022, 1) (below the
      smallest normal float64 the bound, which is at least TINY, cannot reach it).
  """
  if not 0 <= eps < math.inf:
    raise ValueError(f"eps must be finite and >= 0; got {eps!r}.")
  if not MIN_DELTA <= delta < 1:
    raise ValueError(f"delta must be in [2**-1022, 1); got {delta!r}.")
  feasible = lambda s: analytic_gaussian_delta_bound(eps, s) <= delta
  hi = 1.0
  while not feasible(hi):  # delta decreases in sigma
    hi *= 2
  lo = min(hi / 2, 1e-6)
  while feasible(lo) and lo > 1e-300:  # a very large eps: sigma below 1e-6
    lo /= 2
  return bisect(feasible, hi, lo)
