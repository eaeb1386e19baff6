"""The exact discrete Gaussian's table, host refinement and batching, against the
exact law.

References: the distribution function summed in ``mpmath`` at 110 digits (each
weight exp(-2 z^2 / a) computed directly, the normaliser as Jacobi's theta_3(0,
e^(-2/a)), an independent closed form), and the pmf
P(y) proportional to exp(-y^2 / (2 s^2)) (numpy float64, a normaliser summed over
|z| <= 60 s + 60) for the frequency tests.
"""

import decimal
import functools
import math

import jax
import mpmath
import numpy as np
import pytest
from scipy import stats

from jaxdp import exact
from jaxdp.exact import gaussian as exact_gaussian

DPS = 110  # mpmath's precision in every test here (other modules set their own)


@pytest.fixture(autouse=True)
def _precision():
  with mpmath.workdps(DPS):
    yield


@functools.cache
def _tails(a, dps=DPS):  # dps: the precision they were computed at (cache key)
  """mpmath tail sums ``sum_{z >= m} exp(-2 z^2 / a)`` for m = 0.. up to where the
  terms fall below 1e-120, and theta_3(0, e^(-2/a)) (the normaliser)."""
  q = mpmath.exp(mpmath.mpf(-2) / a)
  reach = math.isqrt(140 * a) + 2  # 2 z^2 / a > 280: terms below 1e-120
  tails = [mpmath.mpf(0)] * (reach + 1)
  for z in range(reach - 1, -1, -1):
    tails[z] = tails[z + 1] + q ** (z * z)
  return tails, mpmath.jtheta(3, 0, q)


def _cdf(a, y):
  """F(y) = P(Y <= y) for s^2 = a / 4, in mpmath at 110 digits."""
  tails, total = _tails(a, mpmath.mp.dps)
  m = len(tails) - 1
  if y < 0:
    return tails[min(-y, m)] / total
  return 1 - tails[min(y + 1, m)] / total


@pytest.mark.parametrize("a", [1, 4, 66, 400, 4 * 2047**2])
def test_table_brackets_the_exact_distribution_function(a):
  """``lo[j] <= F(j - T - 1) 2^64 <= hi[j]`` with ``hi - lo <= 2`` at every boundary
  (every 509th and the last 20 for sigma = 2047), T the largest t with P(Y > t) >
  2^-62; the host's decimal F within 1e-90 of mpmath's."""
  law = exact_gaussian.law(a)
  t = law.t
  assert _cdf(a, -t - 1) > mpmath.mpf(2) ** -62 >= _cdf(a, -t - 2)
  assert len(law.lo) == len(law.hi) == 2 * t + 2
  js = (
    range(len(law.lo))
    if t < 1000
    else [*range(0, 2 * t + 2, 509), *range(2 * t - 18, 2 * t + 2)]
  )
  for j in js:
    exact_value = _cdf(a, j - t - 1) * mpmath.mpf(2) ** 64
    assert int(law.lo[j]) <= exact_value <= int(law.hi[j]), j
    assert int(law.hi[j]) - int(law.lo[j]) <= 2
    host = mpmath.mpf(str(law.cdf(j - t - 1)))
    assert abs(host - _cdf(a, j - t - 1)) < mpmath.mpf(10) ** -90


def _inverse(a, v):
  """The smallest y with v < F(y), by bisection on mpmath's F."""
  lo, hi = -len(_tails(a)[0]), len(_tails(a)[0])
  while hi - lo > 1:  # F(lo) <= v < F(hi)
    mid = (lo + hi) // 2
    lo, hi = (mid, hi) if _cdf(a, mid) <= v else (lo, mid)
  return hi


@pytest.mark.parametrize("a", [1, 66])
def test_host_refinement_inverts_the_exact_distribution_function(a):
  """Uniforms of 256 digits (the fast pass's 64 then 192), drawn to fall where the
  refinement is needed (in the 64-bit table's windows around F, beyond the table's
  ends) and anywhere: ``refine_sample`` gives the smallest y with V < F(y)."""
  law = exact_gaussian.law(a)
  rng = np.random.default_rng(7)
  tops = [int(v) for v in law.lo[:: max(1, len(law.lo) // 6)]]  # windows around F
  tops += [0, 1, int(law.lo[0]) - 1, int(law.hi[-1]), (1 << 64) - 1]  # the ends
  tops += [int(v) for v in rng.integers(0, 1 << 63, 5, dtype=np.uint64) * 2]
  for top in tops:
    extra = rng.integers(0, 1 << 32, 6, dtype=np.uint64).astype(np.uint32)
    words = np.array([top >> 32, top & 0xFFFFFFFF], np.uint32)
    big = top
    for w in extra:
      big = (big << 32) | int(w)
    v = mpmath.mpf(big) / mpmath.mpf(2) ** 256
    assert exact_gaussian.refine_sample(a, words, extra, 1.0) == _inverse(a, v), top


@pytest.mark.parametrize("a", [12, 400])  # tables of 30 (compared whole), 178
def test_the_device_settles_only_what_every_uniform_of_its_interval_agrees_on(a):
  """For 64-bit u at and beside every table entry (lo - 1, lo, hi - 1, hi) and at
  the ends, ``lookup`` settles y only if both ends of V's interval [u, u + 1) 2^-64
  invert to y (mpmath), and leaves unsettled only u within one of some F(y) 2^64 or
  beyond the table: a search over ``lo`` instead of ``hi``, or y off by one, fails
  it."""
  law = exact_gaussian.law(a)
  us = {0, 1, (1 << 64) - 1}
  for v in (*law.lo.tolist(), *law.hi.tolist()):
    us |= {v - 1, v, v + 1}
  us = sorted(u for u in us if 0 <= u < 1 << 64)
  with jax.enable_x64(True):
    y, settled = exact_gaussian.lookup(jax.numpy.asarray(us, jax.numpy.uint64), law)
  scale = mpmath.mpf(2) ** 64
  boundaries = [_cdf(a, y) * scale for y in range(-law.t - 1, law.t + 1)]
  for u, yi, ok in zip(us, np.asarray(y).tolist(), np.asarray(settled).tolist()):
    low = _inverse(a, u / scale)
    high = _inverse(a, (u + 1 - mpmath.mpf(10) ** -40) / scale)
    if ok:
      assert low == high == yi, u
    else:
      near = any(u - 1 <= b <= u + 2 for b in boundaries)
      assert near or u < boundaries[0] or u + 1 > boundaries[-1], u


def test_an_unsettled_refinement_raises_rather_than_guesses(monkeypatch):
  """With the host's margin widened to 1/2, no uniform can be settled: the draw
  (whose table is forced to send every sample to the host) raises, releasing
  nothing."""
  jax.clear_caches()
  exact_gaussian.law.cache_clear()
  monkeypatch.setattr(exact_gaussian, "TABLE_TAIL", decimal.Decimal("0.4"))
  exact_gaussian.law(9)  # built with the true margin, then:
  monkeypatch.setattr(exact_gaussian, "SLACK", decimal.Decimal("0.5"))
  with pytest.raises(Exception, match="nothing released"):
    np.asarray(exact.discrete_gaussian(jax.random.key(21), (64,), sigma=1.5))
  monkeypatch.undo()
  exact_gaussian.law.cache_clear()
  jax.clear_caches()


def _pmf(a, ys):
  s2 = a / 4
  lim = int(60 * math.sqrt(s2) + 60)
  span = np.arange(-lim, lim + 1).astype(float)
  return np.exp(-(ys.astype(float) ** 2) / (2 * s2)) / np.exp(-(span**2) / (2 * s2)).sum()


def _chisquare_pvalue(x, a):
  """Chi-square of the draws' frequencies against the exact pmf: every value with
  expected count >= 5, and the two tails beyond them as two more cells."""
  n = x.size
  lim = int(np.ceil(8 * math.sqrt(a / 4))) + 2
  ys = np.arange(-lim, lim + 1)
  p = _pmf(a, ys)
  core = ys[p * n >= 5]
  lo, hi = core.min(), core.max()
  probs = np.concatenate([[p[ys < lo].sum()], p[p * n >= 5], [p[ys > hi].sum()]])
  counts = np.concatenate(
    [[np.sum(x < lo)], [np.sum(x == y) for y in core], [np.sum(x > hi)]]
  )
  return stats.chisquare(counts, probs / probs.sum() * n).pvalue


@pytest.mark.statistical
@pytest.mark.parametrize(
  "sigma, n",
  [(1.7, 200_003), (10.0, 60_001)],  # tables of 30 (compared whole) and 178 (searched)
  ids=["compare_all", "binary_search"],
)
def test_discrete_gaussian_frequencies_across_balanced_chunks(monkeypatch, sigma, n):
  """``n`` draws in chunks of at most 2^15 samples (the last overlapping the one
  before): the frequencies against the exact pmf, chi-square p > 1e-4, over all
  draws and over the last chunk's. A kernel with y off by one fails both cases
  (checked by hand)."""
  monkeypatch.setattr(exact_gaussian, "DG_CHUNK", 1 << 15)
  x = np.asarray(exact.discrete_gaussian(jax.random.key(31), (n,), sigma=sigma))
  a = exact.sigma_quarters(sigma)
  assert x.shape == (n,) and x.dtype == np.int32
  assert _chisquare_pvalue(x, a) > 1e-4
  assert _chisquare_pvalue(x[-(1 << 15) :], a) > 1e-4  # the overlapping last chunk


@pytest.mark.statistical
def test_samples_refined_on_the_host_have_the_exact_law(monkeypatch):
  """With the table cut to |y| <= 1 (T is the largest t with P(Y > t) above 0.3),
  most samples at sigma = 3 are refined on the host: 20,000 draws against the exact
  pmf, chi-square p > 1e-4."""
  jax.clear_caches()
  exact_gaussian.law.cache_clear()
  monkeypatch.setattr(exact_gaussian, "TABLE_TAIL", decimal.Decimal("0.3"))
  assert exact_gaussian.law(36).t <= 1
  x = np.asarray(exact.discrete_gaussian(jax.random.key(32), (20_000,), sigma=3.0))
  monkeypatch.undo()
  exact_gaussian.law.cache_clear()
  jax.clear_caches()
  assert np.mean(np.abs(x) > 1) > 0.5  # most came from the host
  assert _chisquare_pvalue(x, 36) > 1e-4
