"""Rényi DP of the Poisson-subsampled Gaussian mechanism (one step of DP-SGD).

Each record is kept with probability q; Gaussian noise of standard deviation
``noise_multiplier`` sigma (in units of the l2 clip norm) is added to the sum; add or
remove one record. With mu0 = N(0, s^2), mu1 = N(1, s^2) and L = mu1 / mu0 =
exp((2z - 1) / (2 s^2)), the RDP at order a is log(A_a) / (a - 1) with

  A_a = E_{z ~ mu0}[(1 - q + q L(z))^a]

(Mironov, Talwar & Zhang 2019, Theorem 4 and Section 3). Both cases are written so
that A_a - 1 (which is O(q^2) and the only part that matters) is formed without
cancelling O(1) quantities:

* integer a: A_a - 1 = sum over k = 2..a of C(a, k) (1-q)^(a-k) q^k
  (exp((k^2 - k) / (2 s^2)) - 1), every term positive (the k = 0, 1 terms vanish since
  the binomial weights sum to 1).
* fractional a: the two-series expansion of Mironov, Talwar & Zhang (Section 3.3),
  split at z0 = s^2 log(1/q - 1) + 1/2 where q L = 1 - q: on z <= z0 the binomial
  series of (1 - q)^a (1 + x)^a with x = q L / (1 - q) <= 1, on z > z0 that of
  (q L)^a (1 + y)^a with y = 1 / x <= 1; term i integrates to C(a, i) q^i (1-q)^(a-i)
  exp((i^2 - i) / (2 s^2)) Phi((z0 - i) / s) (and its mirror). From i = ceil(a) on the
  terms alternate in sign (C(a, i) changes sign; dp_accounting adds their absolute
  values instead, an upper bound up to 2.7x too large at q = 0.1, sigma = 5, order
  1.25) and shrink, so a partial sum that ends on a positive term is above the
  series' sum by at most the first omitted term: every truncation here ends that way.
  The expectation of 1 + a q (L - 1) (which is 1) over each half is subtracted in
  closed form. The result is also capped by the chord between the neighbouring
  integer orders (log A_a is convex in a, a cumulant generating function, and
  log A_1 = 0), which only binds when sigma is large (above ~100 on the host).

Every piece is summed in log space with its sign. On Python floats (host, float64)
the series run to ceil(a) + 2000 terms with a relative slack of 2**-46 per piece:
tests find these figures within 1e-8 of 30-digit mpmath quadrature (q up to 0.5,
sigma 0.6 to 100) and equal to dp_accounting's at integer orders. On traced q and
sigma (inside jit, float32) the series run to ceil(a) + 64 terms, each piece gets a
relative slack of 2**-20 (|its log| + 1) plus 2**-24 per piece summed (16x a bound on
float32's rounding of it), and the figure is multiplied by
:data:`~jaxdp.composition.renyi.TRACED_MARGIN` and kept at least float32's smallest
normal number. Traced figures are never below the host ones in the tests; above
them by 0.025% to 0.05% at integer orders, and at fractional orders by up to 0.3%
(sigma <= 5, q <= 0.1), 1% (sigma = 10) and 7% (larger sigma, the chord), with eps
after T steps within 0.02% of the host's. A traced q outside [0, 1] or NaN, or a
sigma below :data:`MIN_NOISE_MULTIPLIER` or NaN gives ``inf`` (a cost no budget
admits); q = 0 or sigma = inf gives 0, q = 1 gives a / (2 s^2).

References:
  I. Mironov, K. Talwar, L. Zhang, "Rényi differential privacy of the sampled
  Gaussian mechanism", arXiv:1908.10530, 2019. M. Abadi et al., "Deep learning with
  differential privacy", CCS 2016.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import log_ndtr

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.composition.renyi import TRACED_MARGIN, check_orders
from jaxdp.typing import ArrayLike, Scalar

__all__ = ["subsampled_gaussian_rdp", "MIN_NOISE_MULTIPLIER", "MAX_ORDER", "check_sampling"]

MIN_NOISE_MULTIPLIER = 0.01  # there the order-2 RDP is already about 1e4 + 2 log q
MAX_ORDER = 4096.0  # higher orders only help where eps < 2 log(1/delta) / 4095
HOST_TERMS, TRACED_TERMS = 1000, 32  # pairs of series terms past ceil(a)
HOST_SLACK, TRACED_SLACK, TRACED_ULP = 2.0**-46, 2.0**-20, 2.0**-24
_ERFC = np.vectorize(math.erfc, otypes=[np.float64])
_LGAMMA = np.vectorize(math.lgamma, otypes=[np.float64])


def check_sampling(q: Scalar, noise_multiplier: Scalar) -> tuple[float, float]:
  """(q, sigma) as Python floats, or ValueError naming the bad one.

  q must be in [0, 1]; sigma a number >= :data:`MIN_NOISE_MULTIPLIER` (``inf`` is
  allowed: no privacy loss)."""
  for name, v in (("q", q), ("noise_multiplier", noise_multiplier)):
    if not _checks.is_concrete(v):
      raise ValueError(
        f"{name} must be a concrete number for host-side accounting; got a traced "
        "value. Inside jit, add subsampled_gaussian_rdp(...) (or RdpAccounting."
        "step_rdp) per step and convert with jaxdp.composition.renyi.rdp_epsilon."
      )
    scalar = isinstance(v, (np.ndarray, jax.Array)) and np.ndim(v) == 0
    if not (_checks.is_real(v) or scalar and np.issubdtype(v.dtype, np.number)):
      raise _checks.ArgTypeError(f"{name} must be a real number; got {v!r}.")
  q, s = float(q), float(noise_multiplier)
  if not 0 <= q <= 1:
    raise ValueError(f"q (the sampling rate) must be in [0, 1]; got {q!r}.")
  if not s >= MIN_NOISE_MULTIPLIER:
    raise ValueError(
      f"noise_multiplier must be >= {MIN_NOISE_MULTIPLIER} (noise std / clip norm; "
      f"below it no order gives a usable guarantee); got {s!r}."
    )
  return q, s


def _log_ndtr_np(x):
  """log Phi(x) in float64 numpy, accurate in both tails."""
  x = np.asarray(x, np.float64)
  mid = np.clip(x, -37.0, 37.0)
  low = np.log(0.5 * _ERFC(-mid / math.sqrt(2)))
  high = np.log1p(-0.5 * _ERFC(mid / math.sqrt(2)))
  out = np.where(mid > 0, high, low)
  # x < -37: Phi(x) = phi(x) / |x| (1 - 1/x^2 + 3/x^4 - 15/x^6 + 105/x^8 ...).
  t = 1.0 / np.maximum(x * x, 1.0)
  series = 1 - t + 3 * t**2 - 15 * t**3 + 105 * t**4 - 945 * t**5
  far = -x * x / 2 - np.log(np.maximum(-x, 1.0)) - 0.5 * math.log(2 * math.pi)
  return np.where(x < -37, far + np.log(series), out)


def _log_comb(a, i):
  """(sign, log |C(a, i)|) of the generalized binomial coefficient, i integer >= 0."""
  i = np.asarray(i, np.float64)
  k = a - i + 1
  # Gamma(k) for k <= 0 non-integer: |Gamma(k)| = pi / |sin(pi k) Gamma(1 - k)|.
  neg = k <= 0
  kk = np.where(neg, 1 - k, k)
  lg = _LGAMMA(kk)
  with np.errstate(divide="ignore"):  # integer k <= 0 only in padding (masked)
    log_sin = np.log(np.abs(np.sin(math.pi * k)))
  log_gk = np.where(neg, math.log(math.pi) - log_sin - lg, lg)
  sign = np.where(neg, np.where(np.floor(i - a) % 2 == 1, -1.0, 1.0), 1.0)
  return sign, _LGAMMA(a + 1.0) - _LGAMMA(i + 1) - log_gk


@value_cache(maxsize=64)
def _tables(orders: tuple, n_pairs: int):
  """Static constants of the terms, one row per order (padding: sign 0, mask False):
  for the integer orders (k, C's log, mask) and for the fractional ones (i, sign and
  log of C(a, i), mask) for both series, and phi_a's series coefficients."""
  ints = np.asarray([a for a in orders if float(a).is_integer()], np.float64)[:, None]
  fracs = np.asarray([a for a in orders if not float(a).is_integer()], np.float64)
  fracs = fracs[:, None]
  k = np.arange(2, int(ints.max(initial=2)) + 1, dtype=np.float64)[None, :]
  kmask = k <= ints
  _, kc = _log_comb(ints, k)
  top = np.ceil(fracs) + 2 * n_pairs
  i = np.arange(0, int(top.max(initial=0)) + 1, dtype=np.float64)[None, :]
  imask = i <= top
  isign, ic = _log_comb(fracs, i)
  kk = np.arange(2, 42, dtype=np.float64)[None, :]
  psign, pc = _log_comb(fracs, kk)
  return _checks.read_only(
    (ints, k, kmask, np.where(kmask, kc, 0.0), fracs, i, imask, isign * imask,
     np.where(imask, ic, 0.0), kk, psign * (-1.0) ** kk, pc)
  )  # fmt: skip


def _signed_log_sum(signs, logs, size, xp, rel, ulp):
  """Per row, an upper bound on log(sum signs e^logs): the sum plus each term's
  relative rounding bound ``rel (size + 1) + n ulp``."""
  m = xp.max(logs, axis=-1, keepdims=True)
  m = xp.where(m > -xp.inf, m, 0.0)
  w = xp.exp(logs - m)
  slack = w * (rel * (size + 1) + logs.shape[-1] * ulp)
  total = xp.sum(signs * w, axis=-1) + xp.sum(slack, axis=-1)
  return m[:, 0] + xp.log(xp.maximum(total, 0.0))


def _log_am1(tables, lq, l1q, u, s, xp, log_ndtr_fn, rel, ulp):
  """Upper bounds on log(A_a - 1): integer orders' rows, then fractional orders'."""
  ints, k, kmask, kc, a, i, imask, isign, ic, kk, psign, pc = tables
  out = []
  if ints.size:
    x = (k * k - k) / 2.0 * u
    big = x > 20
    log_em1 = xp.where(big, x + xp.log1p(-xp.exp(-xp.where(big, x, 20.0))), 0.0)
    log_em1 = xp.where(big, log_em1, xp.log(xp.expm1(xp.clip(x, 1e-30, 20.0))))
    logs = xp.where(kmask, kc + k * lq + (ints - k) * l1q + log_em1, -xp.inf)
    size = xp.abs(kc) + k * xp.abs(lq) + (ints - k) * xp.abs(l1q) + xp.abs(log_em1)
    out.append(_signed_log_sum(kmask * 1.0, logs, xp.where(kmask, size, 0.0), xp, rel, ulp))
  if a.size:
    z0 = s * s * (l1q - lq) + 0.5
    j = a - i
    # One call of log Phi for every argument (each call is a large graph in jit).
    width = i.shape[-1]
    args = [(z0 - i) / s, (j - z0) / s] + [v / s for v in (z0, z0 - 1, -z0, 1 - z0)]
    nd = log_ndtr_fn(xp.concatenate([v + 0 * a for v in args], axis=-1))
    nd0, nd1 = nd[:, :width], nd[:, width : 2 * width]
    nd_z, nd_z1, nd_m, nd_m1 = (nd[:, 2 * width + c : 2 * width + c + 1] for c in range(4))
    # Series 0 starts at i = 2 (its i = 0, 1 terms are in the closed forms below).
    mask0 = imask & (i >= 2)
    log0 = xp.where(mask0, ic + i * lq + j * l1q + (i * i - i) / 2.0 * u + nd0, -xp.inf)
    log1 = xp.where(imask, ic + j * lq + i * l1q + (j * j - j) / 2.0 * u + nd1, -xp.inf)
    size0 = xp.abs(ic) + i * xp.abs(lq) + xp.abs(j * l1q) + i * i / 2.0 * u + xp.abs(nd0)
    size1 = xp.abs(ic) + xp.abs(j * lq) + i * xp.abs(l1q) + j * j / 2.0 * u + xp.abs(nd1)
    # phi_a(-q) = (1-q)^a - 1 + a q: its binomial series when a q <= 1/2, else direct.
    q = xp.exp(lq)
    series = xp.sum(psign * xp.exp(pc + kk * lq), axis=-1, keepdims=True)
    phi = xp.where(a * q <= 0.5, series, xp.expm1(a * l1q) + a * q)
    laq = xp.log(a) + lq
    extra = [
      xp.log(phi) + nd_z,
      laq + xp.log(-xp.expm1((a - 1) * l1q)) + nd_z1,
      nd_m,
      laq + nd_m1,
      laq + nd_m,
    ]
    extra = xp.concatenate(extra, axis=-1)
    signs = xp.concatenate(
      [isign * mask0, isign, xp.ones_like(a) * np.array([1.0, -1.0, -1.0, -1.0, 1.0])],
      axis=-1,
    )
    logs = xp.concatenate([log0, log1, extra], axis=-1)
    size = xp.concatenate(
      [xp.where(mask0, size0, 0.0), xp.where(imask, size1, 0.0), xp.abs(extra) + 2],
      axis=-1,
    )
    out.append(_signed_log_sum(signs, logs, size, xp, rel, ulp))
  return xp.concatenate(out)


def _log_a(orders, n_pairs, lq, l1q, u, s, xp, log_ndtr_fn, rel, ulp) -> list:
  """Upper bounds on log A_a, one per order. A fractional order's is also capped by
  the chord between its integer neighbours' (log A_a is convex in a: a cumulant
  generating function; log A_1 = 0), which is tighter when sigma is large."""
  fracs = [a for a in orders if not float(a).is_integer()]
  near = {float(f(a)) for a in fracs for f in (math.floor, math.ceil)} - {1.0}
  tables = _tables(tuple(sorted(set(orders) | near)), n_pairs)
  lam = _log_am1(tables, lq, l1q, u, s, xp, log_ndtr_fn, rel, ulp)
  rows = np.concatenate([tables[0][:, 0], tables[4][:, 0]])
  log_a = {float(a): v for a, v in zip(rows, xp.logaddexp(lam, 0.0))}
  log_a[1.0] = 0.0
  out = []
  for a in orders:
    if a in fracs:
      lo, theta = math.floor(a), a - math.floor(a)
      chord = (1 - theta) * log_a[float(lo)] + theta * log_a[float(lo + 1)]
      out.append(xp.minimum(log_a[a], chord))
    else:
      out.append(log_a[a])
  return out


def _rdp_host(q: float, s: float, orders: tuple) -> np.ndarray:
  a = np.asarray(orders, np.float64)
  if q == 0 or s == math.inf:
    return np.zeros_like(a)
  if q == 1:
    return a / (2 * s * s)
  lq, l1q, u = math.log(q), math.log1p(-q), 1 / (s * s)
  with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
    log_a = _log_a(orders, HOST_TERMS, lq, l1q, u, s, np, _log_ndtr_np, HOST_SLACK, 0.0)
  return np.asarray(log_a, np.float64) / (a - 1)


def _rdp_traced(q, s, orders: tuple) -> jax.Array:
  q = jnp.asarray(q, jnp.float32)
  s = jnp.asarray(s, jnp.float32)
  ok = (q >= 0) & (q <= 1) & (s >= MIN_NOISE_MULTIPLIER)  # NaN fails both
  none = (q == 0) | (s == jnp.inf)
  qs = jnp.clip(jnp.where(ok, q, 0.5), 1e-37, 1 - 2.0**-24)
  ss = jnp.where(ok & (s < jnp.inf), s, 1.0)
  lq, l1q = jnp.log(qs), jnp.log1p(-qs)
  u = 1 / (ss * ss)
  log_a = _log_a(
    orders, TRACED_TERMS, lq, l1q, u, ss, jnp, log_ndtr, TRACED_SLACK, TRACED_ULP
  )
  a = np.asarray(orders, np.float64)
  value = jnp.stack(log_a) / np.float32(a - 1)
  value = jnp.where(q == 1, np.float32(a) * u * np.float32(0.5), value)
  # Rounded up; at least float32's smallest normal number (below it softplus underflows).
  value = jnp.maximum(value * np.float32(TRACED_MARGIN), np.finfo(np.float32).tiny)
  value = jnp.where(jnp.isnan(value), jnp.inf, value)
  value = jnp.where(none, 0.0, value)
  return jnp.where(ok, value, jnp.inf)


def subsampled_gaussian_rdp(
  q: Scalar, noise_multiplier: Scalar, orders: ArrayLike
) -> np.ndarray | jax.Array:
  """RDP of one step of the Poisson-subsampled Gaussian mechanism at each order.

  Args:
    q: the sampling rate, in [0, 1] (a float, or a traced scalar).
    noise_multiplier: sigma, the noise standard deviation over the l2 clip norm
      (>= :data:`MIN_NOISE_MULTIPLIER`, or ``inf``; a float or a traced scalar).
    orders: the Rényi orders (> 1; integer and fractional), a static sequence.

  Returns:
    One value per order (in the order of ``orders`` sorted): numpy float64 when q and
    sigma are Python numbers, else jnp float32 rounded up as the module docstring
    says (``inf`` for invalid traced values). Add the values of T steps to compose.

  Raises:
    ValueError: on a concrete q outside [0, 1], a sigma below
      :data:`MIN_NOISE_MULTIPLIER` (or NaN), or orders not all in (1, 4096].

  References:
    Mironov, Talwar & Zhang (2019), Theorem 4 and Section 3.3.
  """
  orders = check_orders(orders)
  if orders[-1] > MAX_ORDER:
    raise ValueError(
      f"orders must be at most {MAX_ORDER} here (the integer-order sum has a term per "
      f"integer up to the order); got {orders[-1]!r}."
    )
  if _checks.is_concrete(q) and _checks.is_concrete(noise_multiplier):
    q, s = check_sampling(q, noise_multiplier)
    return _rdp_host(q, s, orders)
  return _rdp_traced(q, noise_multiplier, orders)
