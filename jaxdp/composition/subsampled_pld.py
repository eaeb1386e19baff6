"""Privacy-loss distributions of the Poisson-subsampled Gaussian mechanism (DP-SGD).

With add/remove neighbours the mechanism has two dominating pairs, one per direction
(mu = (1 - q) N(0, s^2) + q N(1, s^2), mu0 = N(0, s^2)):

* remove: (mu, mu0), loss l(x) = log(1 - q + q exp((2x - 1) / (2 s^2))), x ~ mu;
* add: (mu0, mu), loss -l(x), x ~ mu0.

Each direction is composed on its own and the figure is the worse of the two
(Zhu, Dong & Wang 2022, Section 5: a pair dominating one direction composes to one
that dominates the composition in that direction).

Discretization "connects the dots" (Doroshenko et al. 2022): the loss's probability
under P and Q in each grid interval ((j-1) h, j h] is split between its two ends so
that both the P-mass and the Q-mass (P-mass times e^-loss) are kept. The continuous
pair is a postprocessing (merging the two ends) of the discrete one, so the discrete
pair dominates it, while rounding error is second order in h (rounding every loss
up, as :mod:`.pld` does for one-off releases, adds about T h / 2 to eps over T
steps). Loss below the grid is moved up to its lowest point and loss above it is
counted as infinite (both dominate too); the grid ends where each Gaussian has
12 standard deviations (mass beyond < 2e-33). Self-composition squares by FFT; after
each product the two tails holding at most ``tail`` of the mass each are moved the
same way (lower tail up to the lowest kept point, upper tail to infinite loss), and
a bound on the FFT's rounding is added to the infinite mass (see :func:`_product`).

References:
  Y. Zhu, J. Dong, Y.-X. Wang, "Optimal accounting of differential privacy via
  characteristic function", AISTATS 2022. V. Doroshenko, B. Ghazi, P. Kamath,
  R. Kumar, P. Manurangsi, "Connect the dots: tighter discrete approximations of
  privacy loss distributions", PETS 2022. A. Koskela, J. Jälkö, A. Honkela,
  "Computing tight differential privacy guarantees using FFT", AISTATS 2020.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxdp.composition.pld import PLD, TAIL_SIGMAS
from jaxdp.composition.subsampled import check_sampling

__all__ = ["PLDPair", "subsampled_gaussian_pld", "DEFAULT_TAIL"]

DEFAULT_TAIL = 1e-15  # mass moved per tail and product during self-composition
_ERFC = np.vectorize(math.erfc, otypes=[np.float64])


def _normal_mass(a, b):
  """P(a < Z <= b) for a standard normal Z, accurate in both tails (a <= b)."""
  r = 1 / math.sqrt(2)
  upper = 0.5 * (_ERFC(a * r) - _ERFC(b * r))  # accurate when a >= 0
  lower = 0.5 * (_ERFC(-b * r) - _ERFC(-a * r))  # accurate when b <= 0
  return np.maximum(np.where(a >= 0, upper, lower), 0.0)


def _truncate(pmf: np.ndarray, offset: int, inf: float, tail: float):
  """Moves at most ``tail`` of the mass from each end: the lower part onto the lowest
  kept point (its loss rounded up), the upper part to infinite loss."""
  low = np.cumsum(pmf)
  high = np.cumsum(pmf[::-1])[::-1]
  first = int(np.searchsorted(low, tail, side="right"))  # low[first] > tail
  keep_hi = np.nonzero(high > tail)[0]
  last = int(keep_hi[-1]) if len(keep_hi) else len(pmf) - 1
  first = min(first, last)
  out = pmf[first : last + 1].copy()
  out[0] += low[first - 1] if first > 0 else 0.0
  moved = high[last + 1] if last + 1 < len(pmf) else 0.0
  return out, offset + first, min(1.0, inf + moved)


def product(a: PLD, b: PLD, tail: float) -> PLD:
  """The PLD of the composition of two PLDs on the same grid, tails truncated.

  FFT rounding: the product's l2 error is below e2 = 2**-46 log2(n) (|a|_2 + |b|_2)
  (Higham's FFT bound with a 10x margin), so every entry's error is below e2 and their
  sum below sqrt(n) e2, which is added to the infinite mass. Entries at most e2 (FFT
  noise far out in the tails) are moved to infinite loss (which dominates)."""
  size = len(a.pmf) + len(b.pmf) - 1
  n = 1 << max(1, (size - 1).bit_length())
  spec = np.fft.rfft(a.pmf, n) * np.fft.rfft(b.pmf, n)
  pmf = np.fft.irfft(spec, n)[:size]
  e2 = 2.0**-46 * math.log2(n) * (np.linalg.norm(a.pmf) + np.linalg.norm(b.pmf))
  noise = pmf <= e2
  moved = float(np.sum(np.maximum(pmf[noise], 0.0)))
  pmf[noise] = 0.0
  inf = 1 - (1 - a.inf) * (1 - b.inf) + moved + math.sqrt(size) * e2
  pmf, offset, inf = _truncate(pmf, a.offset + b.offset, inf, tail)
  return PLD(pmf, offset, a.h, min(1.0, inf))


def power_table(pld: PLD, top: int, tail: float) -> list:
  """[pld, pld^2, pld^4, ..., pld^(2^top)] by repeated squaring."""
  table = [pld]
  for _ in range(top):
    table.append(product(table[-1], table[-1], tail))
  return table


def compose_bits(table: list, count: int, tail: float) -> PLD:
  """pld^count from a :func:`power_table`: the highest power times the lower set bits,
  from the highest down (the order :meth:`PLDPair.max_steps` also uses)."""
  bits = [b for b in range(count.bit_length()) if count >> b & 1][::-1]
  out = table[bits[0]]
  for b in bits[1:]:
    out = product(out, table[b], tail)
  return out


class PLDPair(NamedTuple):
  """The PLDs of the two directions (remove, add) of an add/remove mechanism."""

  remove: PLD
  add: PLD

  def delta(self, eps: float) -> float:
    """The worse direction's delta(eps)."""
    return max(self.remove.delta(eps), self.add.delta(eps))

  def epsilon(self, delta: float) -> float:
    """The worse direction's eps(delta)."""
    return max(self.remove.epsilon(delta), self.add.epsilon(delta))

  def self_compose(self, count: int, tail: float = DEFAULT_TAIL) -> PLDPair:
    """The pair of ``count`` compositions (count >= 1), each direction on its own."""
    top = count.bit_length() - 1
    return PLDPair(*(compose_bits(power_table(p, top, tail), count, tail) for p in self))


def _direction(q: float, s: float, h: float, remove: bool) -> PLD:
  """Connect-the-dots PLD of one direction (see the module docstring)."""
  c = 1 / (2 * s * s)
  with np.errstate(divide="ignore"):
    log1mq = float(np.log1p(-q))  # -inf at q = 1

  def loss(x):  # remove-direction loss, increasing in x
    return np.logaddexp(log1mq, math.log(q) + (2 * x - 1) * c)

  def inverse(l):  # the x with loss(x) = l for l > log(1 - q); -inf below
    with np.errstate(divide="ignore", invalid="ignore"):
      x = (np.log(np.maximum(np.exp(l) - (1 - q), 0.0)) - math.log(q)) / (2 * c) + 0.5
    return np.where(l > log1mq, x, -np.inf)

  l_lo, l_hi = float(loss(-TAIL_SIGMAS * s)), float(loss(1 + TAIL_SIGMAS * s))
  if not remove:
    l_lo, l_hi = -l_hi, -l_lo
  first, last = math.floor(l_lo / h), math.ceil(l_hi / h)
  grid = np.arange(first, last + 1) * h
  # Point j collects loss in (grid[j-1], grid[j]] (point 0: all loss <= grid[0]);
  # [xa, xb] are those losses' x, ``beyond`` the x of loss above the grid.
  if remove:
    xb = inverse(grid)
    xa = np.concatenate([[-np.inf], xb[:-1]])
    beyond = (xb[-1], np.inf)
  else:  # -loss(x) <= l  <=>  x >= inverse(-l)
    xa = inverse(-grid)
    xb = np.concatenate([[np.inf], xa[:-1]])
    beyond = (-np.inf, xa[-1])
  m0 = _normal_mass(xa / s, xb / s)
  m1 = _normal_mass((xa - 1) / s, (xb - 1) / s)
  mix = (1 - q) * m0 + q * m1
  p, qm = (mix, m0) if remove else (m0, mix)
  # Split p (point j's interval) between grid[j-1] and grid[j], keeping the P-mass
  # and the Q-mass: lower (e^h - 1) = qm e^grid[j] - p.
  lower = np.clip((qm * np.exp(grid) - p) / math.expm1(h), 0.0, p)
  lower[0] = 0.0
  pmf = p - lower
  pmf[:-1] += lower[1:]
  b0, b1 = np.asarray([beyond[0]]), np.asarray([beyond[1]])
  tail0 = _normal_mass(b0 / s, b1 / s)[0]
  tail1 = _normal_mass((b0 - 1) / s, (b1 - 1) / s)[0]
  inf = (1 - q) * tail0 + q * tail1 if remove else tail0
  return PLD(pmf, first, h, float(inf))


def subsampled_gaussian_pld(q: float, noise_multiplier: float, h: float) -> PLDPair:
  """PLDs (remove, add) of one step of the Poisson-subsampled Gaussian mechanism.

  Args:
    q: the sampling rate, in [0, 1].
    noise_multiplier: sigma, the noise standard deviation over the l2 clip norm.
    h: the loss grid (e.g. 1e-4; smaller is tighter and slower).

  Returns:
    A :class:`PLDPair`; ``.self_compose(T).epsilon(delta)`` is T steps' eps.

  Raises:
    ValueError: on q outside [0, 1], sigma below the minimum, or h not in (0, 1).

  References:
    Zhu, Dong & Wang (2022); Doroshenko et al. (2022), Section 3.
  """
  q, s = check_sampling(q, noise_multiplier)
  h = float(h)
  if not 0 < h < 1:
    raise ValueError(f"h (the loss grid) must be in (0, 1); got {h!r}.")
  if q == 0 or s == math.inf:
    zero = PLD(np.ones(1), 0, h, 0.0)
    return PLDPair(zero, zero)
  return PLDPair(_direction(q, s, h, True), _direction(q, s, h, False))
