"""Central quantiles of noise coordinates: exact where a closed form exists, Monte
Carlo with its error otherwise.

Every noise law here is symmetric (``-Y`` has the law of ``Y``: Laplace, Gaussian,
the discrete Gaussian, K-norm noise of a symmetric ball), so the central interval at
level ``L`` is ``[-t, t]`` with ``P(|Y_i| <= t) = L``. For integer noise ``K`` (the
exact rounding of ``Y``, or the discrete Gaussian) ``t`` is the smallest integer with
``P(|K_i| <= t) >= L``, and that probability, the interval's actual coverage, is
returned beside it.

Closed forms of ``F(t) = P(|Y_i| <= t)`` at scale ``b``:

* Laplace: ``1 - exp(-t / b)``.
* Gaussian: ``erf(t / (b sqrt 2))``; elliptic Gaussian noise: the same with ``b``
  the coordinate's standard deviation ``b sqrt(A_ii)``.
* K-norm noise of the l_inf ball in dimension D: ``Y_i = R U_i`` with ``R`` ~
  Gamma(D + 1, b) and ``U_i`` uniform on [-1, 1], so ``F(t) = E min(1, t / R) =
  P(G_(D+1) <= t) + t / (b D) P(G_D > t)`` (``G_k`` ~ Gamma(k, b); Poisson sums).
* Rounded noise: ``P(|round(Y_i)| <= t) = F(t + 1/2)`` (ties have probability 0).
* Discrete Gaussian: the sum of its pmf ``exp(-k^2 / (2 b^2)) / Z`` over ``|k| <= t``.

* The poset ball, when small enough to enumerate: a mixture of differences of Gamma
  variables (:mod:`jaxdp.reporting.poset_law`).

Larger poset balls' and the l_2 ball's coordinates have no such form: their quantiles are
order statistics of simulated noise, and the Monte Carlo error is the half-width of
the distribution-free 95% confidence interval of the quantile from the order
statistics of ranks ``n L +- 1.96 sqrt(n L (1 - L))``.
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp.reporting import poset_law
from jaxdp.reporting.laws import NoiseLaw
from jaxdp.samplers.balls import LpBall, PosetBall

__all__ = [
  "abs_cdf",
  "check_ranks",
  "exact_half_width",
  "has_closed_form",
  "mc_half_width",
  "order_ranks",
]

Z95 = 1.959963984540054  # the standard normal's 0.975 quantile
LOG_TAIL = math.log(0.025)  # a one-sided end of a 95% confidence interval


def has_closed_form(law: NoiseLaw) -> bool:
  """Whether :func:`exact_half_width` applies (else use :func:`mc_half_width`)."""
  if law.family != "knorm":
    return True
  if isinstance(law.ball, LpBall):
    return law.ball.p == math.inf
  return poset_law.enumerable(law.ball)


def _poisson_tail(x: float, k: int) -> float:
  """P(Poisson(x) < k) = P(Gamma(k, 1) > x), summed in log space."""
  if x <= 0:
    return 1.0
  terms = [j * math.log(x) - x - math.lgamma(j + 1) for j in range(k)]
  top = max(terms)
  return min(1.0, math.exp(top) * math.fsum(math.exp(t - top) for t in terms))


def abs_cdf(law: NoiseLaw, t: float, coord: int = 0) -> float:
  """``P(|Y_i| <= t)`` for the ideal (real, unrounded) noise of ``law``; ``coord``
  is i for the poset ball, whose coordinates differ (the others' do not).

  Raises:
    ValueError: a law without a closed form (the poset ball, l_2), or the discrete
      Gaussian (use :func:`exact_half_width`).
  """
  b = law.scale
  if t <= 0:
    return 0.0
  if law.family == "laplace":
    return -math.expm1(-t / b)
  if law.family == "gaussian":
    return math.erf(t / (b * math.sqrt(2.0)))
  if law.family == "elliptic":
    return math.erf(t / (float(law.coordinate_sd()[coord]) * math.sqrt(2.0)))
  if law.family == "knorm" and isinstance(law.ball, PosetBall) and has_closed_form(law):
    return poset_law.coordinate_cdf(law.ball.poset, coord, t / b)
  if law.family == "knorm" and has_closed_form(law):
    dim = law.ball.dim
    x = t / b
    return min(1.0, (1.0 - _poisson_tail(x, dim + 1)) + x / dim * _poisson_tail(x, dim))
  raise ValueError(f"no closed-form distribution function for {law.describe()}.")


def _solve(f, level: float, hi: float) -> float:
  """The t with f(t) = level (f increasing from 0), by bisection to 1e-13 relative."""
  for _ in range(2100):  # hi reaches float64's range long before
    if f(hi) >= level:
      break
    hi *= 2.0
  lo = 0.0
  for _ in range(200):
    mid = 0.5 * (lo + hi)
    if f(mid) < level:
      lo = mid
    else:
      hi = mid
    if hi - lo <= 1e-13 * hi:
      break
  return hi


def _discrete_gaussian_coverage(s: float):
  """``t -> P(|K| <= t)`` for K ~ N_Z(0, s^2), from its pmf in float64."""
  k = np.arange(0, int(math.ceil(40 * s)) + 2, dtype=np.float64)
  w = np.exp(-(k**2) / (2 * s * s))
  total = w[0] + 2 * math.fsum(w[1:])
  cum = (w[0] + 2 * (np.cumsum(w) - w[0])) / total  # cum[t] = P(|K| <= t)
  return lambda t: float(cum[min(int(t), len(cum) - 1)])


def exact_half_width(law: NoiseLaw, level: float):
  """``(t, coverage)``: the central interval ``[-t, t]`` of one coordinate's noise
  at ``level``, and ``P(|noise_i| <= t)`` (``level`` itself for continuous noise;
  at least ``level`` for integer noise, whose ``t`` is the smallest integer that
  reaches it). In units of :attr:`NoiseLaw.unit`. Floats, or for the poset ball and
  elliptic Gaussian noise (whose coordinates differ) arrays with one entry per
  coordinate.

  Raises:
    ValueError: a law without a closed form.
  """
  b = law.scale
  if law.family == "discrete_gaussian":
    cov = _discrete_gaussian_coverage(b)
    t = max(0, int(math.floor(b * math.sqrt(2.0) * _erfinv(level))) - 2)
    while cov(t) < level:
      t += 1
    return float(t), cov(t)
  if law.family == "elliptic":  # coordinate i: N(0, sd_i^2), so t_i = sd_i t_1
    t = _half_width(NoiseLaw("gaussian", 1.0), level, 0)[0]
    sd = law.coordinate_sd()
    return t * sd, np.full(sd.shape, level)
  if law.family == "knorm" and isinstance(law.ball, PosetBall):
    pairs = [_half_width(law, level, i) for i in range(law.ball.dim)]
    return tuple(np.array(v) for v in zip(*pairs))
  return _half_width(law, level, 0)


def _half_width(law, level, coord):
  b = law.scale
  if law.family == "laplace":
    real = -b * math.log1p(-level)
  else:
    real = _solve(lambda t: abs_cdf(law, t, coord), level, b)
  if not law.rounded:
    return real, level
  t = max(0, math.ceil(real - 0.5) - 1)  # then step to the smallest that reaches level
  while abs_cdf(law, t + 0.5, coord) < level:
    t += 1
  return float(t), abs_cdf(law, t + 0.5, coord)


def _erfinv(p: float) -> float:
  return _solve(math.erf, p, 1.0)


def order_ranks(n: int, level: float) -> tuple[int, int, int]:
  """0-based ranks ``(j, lo, hi)``: the empirical ``level`` quantile of ``n`` sorted
  values and the ranks of its distribution-free 95% confidence interval."""
  j = max(0, math.ceil(level * n) - 1)
  half = Z95 * math.sqrt(n * level * (1 - level))
  return (
    j,
    max(0, math.floor(level * n - half) - 1),
    min(n - 1, math.ceil(level * n + half)),
  )


def _ranks_fit(n: int, level: float) -> bool:
  """Whether the 95% confidence ranks of the ``level`` quantile of ``n`` draws bound
  it: each lies inside the draws, or, clipped to the largest (smallest) draw, that
  draw is still below (above) the quantile with probability at most 2.5%
  (``level^n``, ``(1 - level)^n``), as an unclipped rank's is."""
  half = Z95 * math.sqrt(n * level * (1 - level))
  top = math.ceil(level * n + half) <= n - 1 or n * math.log(level) <= LOG_TAIL
  bottom = math.floor(level * n - half) >= 1 or n * math.log1p(-level) <= LOG_TAIL
  return top and bottom


def check_ranks(n: int, level: float, *quantile: float) -> None:
  """Refuse Monte Carlo quantiles at ``level`` from ``n`` draws when the 95% confidence
  rank of a quantile is clipped to the largest (or smallest) draw and that draw no
  longer bounds it (:func:`_ranks_fit`): then neither the interval's coverage nor its
  Monte Carlo error would hold (at level 0.999 from 1,000 draws the largest draw is
  below the quantile with probability 0.37). ``quantile``: those estimated, if not
  ``level`` (a two-sided interval's ``(1 -+ level) / 2``). A ValueError names the
  draws needed."""
  for q in quantile or (level,):
    if _ranks_fit(n, q):
      continue
    need = max(n + 1, int((Z95 + 3) ** 2 / min(q, 1 - q)))  # enough: m - Z95 sqrt(m) > 2
    lo = n
    while lo + 1 < need:  # the smallest fitting size in (lo, need]: bisection
      mid = (lo + need) // 2
      lo, need = (lo, mid) if _ranks_fit(mid, q) else (mid, need)
    raise ValueError(
      f"num_samples = {n:,} simulated noise vectors are too few for level {level!r}: "
      "the 95% confidence bound of the quantile lies past the largest (or smallest) "
      "draw, so the interval's coverage would not hold. Pass num_samples >= "
      f"{need:,}, or a level further from 1 (or 0)."
    )


def mc_half_width(
  abs_noise: np.ndarray, level: float, rounded: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """``(t, coverage, mc_error)`` per coordinate from simulated ``|noise|``.

  Args:
    abs_noise: ``(n, dim)`` absolute values of simulated ideal noise.
    level: the interval's level.
    rounded: the released noise is the exact rounding of this noise: ``t`` is the
      smallest integer with ``t + 1/2`` above the upper end of the quantile's 95%
      confidence interval, so that ``P(|round(Y_i)| <= t) >= level`` holds with 95%
      confidence, not merely for the estimate.

  Returns:
    The half-widths, the estimated coverage ``P(|noise_i| <= t)`` (``level`` for real
    noise), and the Monte Carlo error of ``t`` (the 95% order-statistic interval's
    half-width, in the noise's units).
  """
  n = abs_noise.shape[0]
  j, lo, hi = order_ranks(n, level)
  part = np.partition(abs_noise, sorted({j, lo, hi}), axis=0)
  t, err = part[j], 0.5 * (part[hi] - part[lo])
  if not rounded:
    return t, np.full(t.shape, level), err
  # the upper confidence bound of the quantile: coverage >= level with 95% confidence
  t = np.maximum(0.0, np.ceil(part[hi] - 0.5))
  coverage = np.mean(abs_noise < t + 0.5, axis=0)
  return t, coverage, err
