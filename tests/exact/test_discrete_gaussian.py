"""The exact discrete Gaussian's lane steps and batching, against the exact law.

References: the pmf P(y) proportional to exp(-y^2 / (2 s^2)) (numpy float64, a
normaliser summed over |z| <= 60 s + 60), and ``fractions.Fraction`` for the integer
trial tables.
"""

import math
from fractions import Fraction

import jax
import numpy as np
import pytest
from scipy import stats

from jaxdp import exact
from jaxdp.exact import gaussian as exact_gaussian

P_U, P_D, P_V, P_W, P_F = 0, 1, 2, 4, 5  # the lane phases whose trials draw


@pytest.mark.parametrize("a, bits", [(4, 31), (66, 31), (400, 62), (4 * 2047**2, 62)])
def test_step_tables_decide_each_trial_with_its_exact_probability(a, bits):
  """For every drawing phase and counter k, a uniform X in [0, 2^bits) is accepted
  with probability above 1 - 2^-6 and, given acceptance, ``X < num b`` has
  probability exactly num / (q k) (q: t for U's trial, 1 for the Bernoulli(1/e)
  trials, 8 a t^2 for the final one) and ``X // b`` for P_U is uniform in [0, t)."""
  t, den, b, lim = exact_gaussian.step_tables(a, bits)
  s2 = Fraction(a, 4)
  assert t == math.floor(math.sqrt(s2)) + 1 and (t - 1) ** 2 <= s2 < t**2
  assert den == 8 * a * t * t and den * exact_gaussian.K_MAX < 1 << bits
  cases = [(P_U, t, False), (P_D, t, True), (P_V, 1, True), (P_W, 1, True)]
  cases.append((P_F, den, True))
  for phase, q, per_k in cases:
    for k in (1, 2, 3, 7, exact_gaussian.K_MAX):
      qk = q * k if per_k else q
      bb, ll = int(b[phase, k]), int(lim[phase, k])
      assert ll == qk * bb and ll <= 1 << bits
      assert Fraction((1 << bits) - ll, 1 << bits) < Fraction(1, 64)
      for num in {0, 1, qk // 2, qk - 1}:
        assert Fraction(num * bb, ll) == Fraction(num, qk)  # P(X < num b | X < lim)
  assert int(b[P_U, 1]) * t == int(lim[P_U, 1])  # X // b takes each of 0..t-1 b times
  assert exact_gaussian.SHORT_DEN * exact_gaussian.K_MAX < 1 << 31


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
  [(1.7, 200_003), (10.0, 60_001)],  # 31-bit steps (den 384); 62-bit (den 387,200)
  ids=["short_words", "long_words"],
)
def test_discrete_gaussian_frequencies_across_balanced_chunks(monkeypatch, sigma, n):
  """``n`` draws in chunks of at most 2^15 samples (the last overlapping the one
  before): the frequencies against the exact pmf, chi-square p > 1e-4, over all
  draws and over the last chunk's. Each of these wrong lane steps fails at least
  one of the two cases (checked by hand): the Bernoulli(1/e) trials restarted at K =
  3, the final trial accepting even K, the sign bit read from bit 30 of the uniform,
  U = 0 sent to the Bernoulli(1/e) trials at K = 3, U + 1 for U in U's trial, a
  failed Bernoulli(1/e) trial of the W loop not rejecting when it is the last one."""
  monkeypatch.setattr(exact_gaussian, "DG_CHUNK", 1 << 15)
  x = np.asarray(exact.discrete_gaussian(jax.random.key(31), (n,), sigma=sigma))
  a = exact.sigma_quarters(sigma)
  assert x.shape == (n,) and x.dtype == np.int32
  assert _chisquare_pvalue(x, a) > 1e-4
  assert _chisquare_pvalue(x[-(1 << 15) :], a) > 1e-4  # the overlapping last chunk
