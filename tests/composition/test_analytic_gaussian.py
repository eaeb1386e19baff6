"""The analytic Gaussian calibration (Balle & Wang 2018, Theorem 8) against mpmath at
60 digits or more: the returned sigma's exact delta is at most the target and within
1e-9 of it, and the delta bound is above the exact delta and within 1e-9 of it, from
eps = 1.2e-38 to 1000 and delta = 1e-300 to 0.999."""

import math

import pytest

from jaxdp.composition import gaussian
from jaxdp.composition.gaussian import (
  analytic_gaussian_delta,
  analytic_gaussian_delta_bound,
  analytic_gaussian_sigma,
)

mp = pytest.importorskip("mpmath")

SLACK = 1e-9  # relative; measured <= 1.3e-10 on these grids
EPSILONS = [1.2e-38, 1e-30, 1e-20, 1e-12, 1e-8, 1e-6, 1e-4, 1e-2, 0.1, 0.5, 1.0, 2.0]
EPSILONS += [5.0, 10.0, 30.0, 100.0, 300.0, 1000.0]
DELTAS = [1e-300, 1e-200, 1e-100, 1e-50, 1.2e-38, 1e-30, 1e-16, 1e-10, 1e-5, 1e-2]
DELTAS += [0.1, 0.5, 0.9, 0.999]


def _exact(eps, s):
  """Balle & Wang's delta at enough digits: the subtraction cancels about
  eps s^2 + s of them."""
  digits = 60 + int(math.log10(1 + eps * s * s) + math.log10(1 + s))
  with mp.workdps(digits):
    e, s = mp.mpf(eps), mp.mpf(s)
    return mp.ncdf(1 / (2 * s) - e * s) - mp.exp(e) * mp.ncdf(-1 / (2 * s) - e * s)


@pytest.mark.parametrize("eps", EPSILONS)
def test_sigma_meets_delta_exactly_from_above(eps):
  for delta in DELTAS:
    ratio = _exact(eps, analytic_gaussian_sigma(eps, delta)) / delta
    assert 1 - SLACK <= ratio <= 1, (eps, delta, ratio)


@pytest.mark.parametrize(
  "eps,delta,before",
  [
    (1e-8, 1e-30, 0.13),
    (1.2e-38, 1.2e-38, 9e-32),
    (1e-8, 1e-300, 6.8e-4),
    (1e3, 1e-300, 0.36),
  ],
)
def test_small_eps_no_longer_overpays(eps, delta, before):
  """The float64 difference Phi(a) - e^eps Phi(b) and its error bound gave a sigma
  whose exact delta was only ``before`` of the target."""
  ratio = _exact(eps, analytic_gaussian_sigma(eps, delta)) / delta
  assert 1 - SLACK <= ratio <= 1


def _sigmas(eps):
  """s on a log grid, and around the calibrated sigmas."""
  yield from (10.0**k for k in range(-8, 46, 3))
  for delta in (1e-300, 1e-30, 1e-5, 0.5):
    sigma = analytic_gaussian_sigma(eps, delta)
    yield from (sigma * (1 + f) for f in (-0.1, -1e-6, 0.0, 1e-12, 1e-3))


@pytest.mark.parametrize("eps", [0.0, 1e-300, *EPSILONS[::2], 709.0, 1e4])
def test_delta_bound_is_above_the_exact_delta(eps):
  for s in _sigmas(eps):
    exact = _exact(eps, s)
    bound = analytic_gaussian_delta_bound(eps, s)
    assert bound >= exact, (eps, s)
    for value, err in gaussian._evaluations(eps, s):  # each error bound holds
      assert value - err <= exact <= value + err, (eps, s)
    if exact >= 1e-300:
      assert bound <= exact * (1 + SLACK), (eps, s)
      assert abs(analytic_gaussian_delta(eps, s) - exact) <= SLACK * exact


def test_delta_extremes():
  assert analytic_gaussian_delta_bound(1.0, 1e-8) == 1.0
  assert 0 < analytic_gaussian_delta_bound(1.0, 1e300) <= 2 * gaussian.TINY
  assert analytic_gaussian_delta(0.0, 1.0) == pytest.approx(math.erf(0.5 / math.sqrt(2)))
  with pytest.raises(ValueError, match="eps must be >= 0"):
    analytic_gaussian_delta(-1.0, 1.0)
