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
a bound on the FFT's rounding (Higham 2002, Theorem 24.2) is added to the infinite mass.

References:
  Y. Zhu, J. Dong, Y.-X. Wang, "Optimal accounting of differential privacy via
  characteristic function", AISTATS 2022. V. Doroshenko, B. Ghazi, P. Kamath,
  R. Kumar, P. Manurangsi, "Connect the dots: tighter discrete approximations of
  privacy loss distributions", PETS 2022. A. Koskela, J. Jälkö, A. Honkela,
  "Computing tight differential privacy guarantees using FFT", AISTATS 2020.
  N. Higham, "Accuracy and stability of numerical algorithms", 2nd ed., SIAM 2002.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxdp import _checks
from jaxdp.composition.pld import PLD, TAIL_SIGMAS
from jaxdp.composition.subsampled import check_sampling

__all__ = ["PLDPair", "subsampled_gaussian_pld", "DEFAULT_TAIL"]

DEFAULT_TAIL = 1e-15  # mass moved per tail and product during self-composition
FFT_ETA = 2.0**-49  # FFT rounding constant (see product)
MAX_POINTS = 2**25  # grid points of one PLD (float64: 256 MiB, and its FFT)
_ERFC = np.vectorize(math.erfc, otypes=[np.float64])


def _check_size(points: int, h: float) -> None:
  if points > MAX_POINTS:
    raise ValueError(
      f"h = {h!r} needs {points} loss grid points here (at most {MAX_POINTS}); use a "
      "coarser h, or fewer steps."
    )


def _tail(z):
  """P(Z > |z|) for a standard normal Z."""
  return 0.5 * _ERFC(np.abs(z) / math.sqrt(2))


def _normal_mass(a, b, ta, tb):
  """P(a < Z <= b) for a <= b, from ta = :func:`_tail` (a) and tb = :func:`_tail` (b),
  accurate in both tails: ta - tb when a >= 0, tb - ta when b <= 0, else 1 - ta - tb."""
  return np.maximum(np.where(a >= 0, ta - tb, np.where(b <= 0, tb - ta, 1 - ta - tb)), 0.0)


def _masses(ends, shift: float, s: float, remove: bool):
  """Masses of N(shift, s^2) on consecutive intervals: (-inf, ends[0]], (ends[0],
  ends[1]], ... when ``remove`` (ends increasing), else [ends[0], inf), [ends[1],
  ends[0]), ... (ends decreasing). One erfc per end."""
  z = (ends - shift) / s
  tz = _tail(z)
  far = -np.inf if remove else np.inf
  zo, to = np.concatenate([[far], z[:-1]]), np.concatenate([[0.0], tz[:-1]])
  return _normal_mass(zo, z, to, tz) if remove else _normal_mass(z, zo, tz, to)


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

  FFT rounding: each transform of x is off by at most log2(n) eta |Fx|_2 in l2, with
  eta = mu + gamma_4 (sqrt 2 + mu) ~ 6.7 u (Higham 2002, Theorem 24.2; u = 2**-53,
  mu the twiddle factors' error ~ u), and |Fb|_inf <= |b|_1 = 1, so the product c is
  off by at most e2 = log2(n) eta' (|a|_2 + |b|_2 + |c|_2) in l2, taking eta' =
  2**-49 (2.4x eta). Every entry's error is then below e2 and their sum below
  sqrt(n) e2, which is added to the infinite mass. The runs of entries at most e2 at
  either end (FFT noise beyond the tails) are moved as tails are."""
  size = len(a.pmf) + len(b.pmf) - 1
  _check_size(size, a.h)
  n = 1 << max(1, (size - 1).bit_length())
  spec = np.fft.rfft(a.pmf, n) * np.fft.rfft(b.pmf, n)
  pmf = np.maximum(np.fft.irfft(spec, n)[:size], 0.0)
  norms = sum(math.sqrt(np.sum(np.square(x))) for x in (a.pmf, b.pmf, pmf))  # no BLAS
  e2 = FFT_ETA * math.log2(n) * norms
  above = np.nonzero(pmf > e2)[0]
  first, last = (above[0], above[-1]) if len(above) else (0, size - 1)
  body = pmf[first : last + 1].copy()
  body[0] += np.sum(pmf[:first])  # lower run: loss rounded up to the first kept point
  inf = 1 - (1 - a.inf) * (1 - b.inf) + np.sum(pmf[last + 1 :]) + math.sqrt(size) * e2
  body, offset, inf = _truncate(body, a.offset + b.offset + int(first), inf, tail)
  return PLD(body, offset, a.h, min(1.0, inf))


def power_table(pld: PLD, top: int, tail: float) -> list:
  """[pld, pld^2, pld^4, ..., pld^(2^top)] by repeated squaring."""
  table = [pld]
  for _ in range(top):
    table.append(product(table[-1], table[-1], tail))
  return table


def compose_bits(table: list, count: int, tail: float) -> PLD:
  """pld^count from a :func:`power_table`: the highest power times the lower set bits,
  from the highest down (the order :meth:`.dpsgd.PldAccounting.max_steps` also uses)."""
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
    count = _checks.check_int(count, "count", minimum=1)
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
  _check_size(last - first + 1, h)
  grid = np.arange(first, last + 1) * h
  # Point j collects loss in (grid[j-1], grid[j]] (point 0: all loss <= grid[0]),
  # whose x lie below ends[j] (remove) or at or above it (add); ``beyond`` (an interval
  # in x) is the loss above the grid.
  if remove:
    ends = inverse(grid)
    beyond = np.asarray([ends[-1]]), np.asarray([np.inf])
  else:  # -loss(x) <= l  <=>  x >= inverse(-l)
    ends = inverse(-grid)
    beyond = np.asarray([-np.inf]), np.asarray([ends[-1]])
  m0, m1 = (_masses(ends, shift, s, remove) for shift in (0.0, 1.0))
  mix = (1 - q) * m0 + q * m1
  p, qm = (mix, m0) if remove else (m0, mix)
  # Split p (point j's interval) between grid[j-1] and grid[j], keeping the P-mass
  # and the Q-mass: lower (e^h - 1) = qm e^grid[j] - p.
  lower = np.clip((qm * np.exp(grid) - p) / math.expm1(h), 0.0, p)
  lower[0] = 0.0
  pmf = p - lower
  pmf[:-1] += lower[1:]
  za, zb = beyond[0] / s, beyond[1] / s
  tail0 = _normal_mass(za, zb, _tail(za), _tail(zb))[0]
  za, zb = (beyond[0] - 1) / s, (beyond[1] - 1) / s
  tail1 = _normal_mass(za, zb, _tail(za), _tail(zb))[0]
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
