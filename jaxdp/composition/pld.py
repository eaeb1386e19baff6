"""Privacy-loss distributions (PLD): the tightest figure for a fixed plan.

For a mechanism with a dominating pair (P, Q), the privacy loss L = log(p/q)(X),
X ~ P, fixes its whole privacy profile: delta(eps) = E[(1 - e^(eps - L))_+] (plus the
mass where L is infinite). The losses of a fixed sequence of mechanisms add, so the
composition's PLD is the convolution of theirs, also when each query is chosen from
earlier answers, as long as the mechanisms themselves (their parameters) are fixed
before the run (Zhu, Dong & Wang 2022, Theorem 10: dominating pairs compose).

Discretization is pessimistic: every loss is rounded *up* to the grid ``h`` (delta(eps)
grows with L, and the rounded sum is above the true sum for every outcome, so the
figure is an upper bound); a Gaussian's loss is truncated, the upper tail counted as
infinite loss and the lower tail moved up to the lowest grid point. Convolutions use
the FFT; its rounding is covered by adding ``n 2**-48`` to delta for a result on n grid
points. Host-side numpy only: plans are static.

Dominating pairs used (one direction suffices: each pair below is symmetric):

* Laplace with scale Delta / eps (Lap(0) vs Lap(Delta)): L = eps w.p. 1/2, -eps
  w.p. e^-eps / 2, and continuous on (-eps, eps) with P(L <= l) = e^(-(eps - l)/2) / 2.
* any pure eps-DP mechanism: randomized response (Kairouz, Oh & Viswanath 2015):
  L = eps w.p. e^eps / (1 + e^eps), -eps otherwise.
* any (eps, delta)-DP mechanism: the same with infinite loss w.p. delta.
* Gaussian noise sigma on sensitivity Delta: L ~ N(mu, 2 mu), mu = Delta^2 /
  (2 sigma^2).

References:
  S. Meiser, E. Mohammadi, "Tight on budget?", CCS 2018. A. Koskela, J. Jälkö,
  A. Honkela, "Computing tight differential privacy guarantees using FFT", AISTATS
  2020. Y. Zhu, J. Dong, Y.-X. Wang, "Optimal accounting of differential privacy via
  characteristic function", AISTATS 2022. V. Doroshenko, B. Ghazi, P. Kamath,
  R. Kumar, P. Manurangsi, "Connect the dots: tighter discrete approximations of
  privacy loss distributions", PETS 2022.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from jaxdp import _checks

__all__ = ["PLD", "laplace_pld", "pure_pld", "approx_pld", "gaussian_pld", "compose"]

_ERFC = np.vectorize(math.erfc, otypes=[np.float64])
FFT_SLACK = 2.0**-48  # added to delta per grid point of a convolved PLD
TAIL_SIGMAS = 12.0  # Gaussian truncation: mass beyond is < 2e-33


class PLD(NamedTuple):
  """A discretized privacy-loss distribution: ``pmf[j]`` is the probability of loss
  ``(offset + j) h``; ``inf`` is the probability of infinite loss."""

  pmf: np.ndarray
  offset: int
  h: float
  inf: float = 0.0

  def delta(self, eps: float) -> float:
    """delta(eps) = E[(1 - e^(eps - L))_+] + P(L = inf), for eps >= 0."""
    loss = (self.offset + np.arange(len(self.pmf))) * self.h
    gain = -np.expm1(np.minimum(eps - loss, 0.0))
    return float(min(1.0, np.sum(self.pmf * gain) + self.inf))

  def epsilon(self, delta: float) -> float:
    """The least eps >= 0 with delta(eps) <= ``delta`` (inf if none).

    delta(eps) = sum over l > eps of p_l - e^eps sum over l > eps of p_l e^-l, from
    suffix sums over the positive losses, so each trial eps costs O(1)."""
    delta = _checks.check_delta(delta, "delta")
    if self.inf > delta:
      return math.inf
    start = max(0, -self.offset)  # first index with loss >= 0
    loss = (self.offset + np.arange(start, len(self.pmf))) * self.h
    p = self.pmf[start:]
    tail_p = np.cumsum(p[::-1])[::-1]
    tail_pe = np.cumsum((p * np.exp(-loss))[::-1])[::-1]

    def delta_at(eps):
      i = int(np.searchsorted(loss, eps, side="right"))  # first loss > eps
      if i >= len(loss):
        return self.inf
      if tail_pe[i] <= 0:  # e^-l underflowed: every such loss counts in full
        return tail_p[i] + self.inf
      return tail_p[i] - math.exp(eps + math.log(tail_pe[i])) + self.inf  # no overflow

    if delta_at(0.0) <= delta:
      return 0.0
    lo, hi = 0.0, max(float(loss[-1]), self.h) if len(loss) else self.h
    for _ in range(100):  # delta(eps) decreases; at the top loss it is the inf mass
      mid = (lo + hi) / 2
      lo, hi = (lo, mid) if delta_at(mid) <= delta else (mid, hi)
    return hi


def _from_cdf(cdf, lo: float, hi: float, h: float) -> PLD:
  """Pessimistic PLD of a loss supported on [lo, hi] with CDF ``cdf``: the mass in
  ((j-1) h, j h] goes to j h."""
  first, last = math.ceil(lo / h - 1e-9), math.ceil(hi / h - 1e-9)
  grid = np.arange(first - 1, last + 1) * h
  grid[0], grid[-1] = -np.inf, np.inf
  mass = np.diff(cdf(grid))
  return PLD(np.maximum(mass, 0.0), first, h)


def laplace_pld(eps: float, h: float) -> PLD:
  """PLD of the Laplace mechanism at eps = Delta / scale."""
  eps = float(eps)

  def cdf(l):
    inner = 0.5 * np.exp(-(eps - np.clip(l, -eps, eps)) / 2)
    return np.where(l < -eps, 0.0, np.where(l >= eps, 1.0, inner))

  return _from_cdf(cdf, -eps, eps, h)


def approx_pld(eps: float, delta: float, h: float) -> PLD:
  """PLD of the worst (eps, delta)-DP mechanism (randomized response with a leak)."""
  eps = float(eps)
  p_hi = (1 - delta) / (1 + math.exp(-eps))
  lo, hi = math.ceil(-eps / h - 1e-9), math.ceil(eps / h - 1e-9)
  pmf = np.zeros(hi - lo + 1)
  pmf[0] += (1 - delta) - p_hi
  pmf[-1] += p_hi
  return PLD(pmf, lo, h, float(delta))


def pure_pld(eps: float, h: float) -> PLD:
  """PLD of the worst eps-DP mechanism (randomized response)."""
  return approx_pld(eps, 0.0, h)


def gaussian_pld(sigma: float, h: float) -> PLD:
  """PLD of Gaussian noise ``sigma`` on sensitivity 1: N(mu, 2 mu), mu = 1/(2 s^2)."""
  mu = 1 / (2 * float(sigma) ** 2)
  sd = math.sqrt(2 * mu)
  lo, hi = mu - TAIL_SIGMAS * sd, mu + TAIL_SIGMAS * sd

  def cdf(l):
    inner = _ERFC(-(np.clip(l, lo, hi) - mu) / (sd * math.sqrt(2))) / 2
    return np.where(l < lo, 0.0, inner)  # mass below lo joins the lowest point

  pld = _from_cdf(cdf, lo, hi, h)
  tail = 0.5 * math.erfc(TAIL_SIGMAS / math.sqrt(2))
  return pld._replace(inf=tail)


def compose(plds: Sequence[PLD], counts: Sequence[int] | None = None) -> PLD:
  """The PLD of the composition: ``plds[i]`` repeated ``counts[i]`` times (same h).

  One FFT of the total support; self-compositions are powers of a transform.
  """
  counts = [1] * len(plds) if counts is None else list(counts)
  h = plds[0].h
  if any(p.h != h for p in plds):
    raise ValueError("compose needs PLDs on the same grid h.")
  size = sum(c * (len(p.pmf) - 1) for p, c in zip(plds, counts)) + 1
  n = 1 << max(1, (size - 1).bit_length())
  spectrum = np.ones(n // 2 + 1, complex)
  keep, offset = 1.0, 0
  for p, c in zip(plds, counts):
    spectrum *= np.fft.rfft(p.pmf, n) ** c
    keep *= (1 - p.inf) ** c
    offset += c * p.offset
  pmf = np.maximum(np.fft.irfft(spectrum, n)[:size], 0.0)
  return PLD(pmf, offset, h, min(1.0, 1 - keep + size * FFT_SLACK))
