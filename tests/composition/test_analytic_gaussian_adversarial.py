"""Adversarial inputs for the analytic Gaussian's delta bound and calibration
(jaxdp/composition/gaussian.py), against mpmath at 90 digits or more.

Passing: branch boundaries and edge regimes where the bound was tightest in a search of
about 50,000 points (erfc/continued fraction at t = 3, the fraction's depth at t = 6,
the series' u = 1 and u v = 16, the sinh switch at 2^-500, the underflow shortcuts at
z = -760, eps near 709 and subnormal, a = 0).

Regressions of what the search found (each test says what failed): a delta below
about 1.3e-313 made analytic_gaussian_sigma loop forever (refused below 2^-1022);
an OverflowError at eps near 1e16 and a = 0; the series' own error bound NaN for huge
s and too small where phi(v) is subnormal (the final bound held in both); and, for
tightness, the bisection's floor at sigma = 1e-6 at eps above about 5e11.
"""

import math
import signal

import pytest

from jaxdp.composition import gaussian
from jaxdp.composition.gaussian import (
  analytic_gaussian_delta,
  analytic_gaussian_delta_bound,
  analytic_gaussian_sigma,
)

mp = pytest.importorskip("mpmath")

SLACK = 1e-9


def _exact(eps, s):
  """Balle & Wang's delta, with 30 digits more than the cancellation needs."""
  digits = 90 + int(math.log10(1 + eps * s * s) + math.log10(1 + s))
  with mp.workdps(digits):
    e, s = mp.mpf(eps), mp.mpf(s)
    return mp.ncdf(1 / (2 * s) - e * s) - mp.exp(e) * mp.ncdf(-1 / (2 * s) - e * s)


# (eps, s): the search's tightest points and the branch boundaries
HARD = [
  (1e-300, 0.08333333333333329),  # u = 6 - 1 ulp: the direct form's error half used
  (5.270134223735181e-39, 0.08223705155275739),
  (3.494573389545553e-19, 0.10056741217251025),
  (1.0203628158699053e-17, 0.08888097525598883),
  (4.6177731316364895e-09, 0.08333333332799178),
  (0.04608796380946754, 782.153120663234),  # the largest bound / exact, 1 + 1.2e-10
  (0.05272163548815432, 692.0572060680665),
  (0.4238696854883909, 14.058831371145041),
  (1.457528463225759e-09, 1966050379.660254),  # the series' error most used
  (1.271556579833082e-08, 117627.7204592195),
  (32.0, 0.5),  # u = 1, u v = 8
  (31.999999999999996, 0.9474899854854222),
  (32.00000000000001, 0.9474899854854222),  # u v just above 16: direct only
  (32.00320000000003, 0.9474899854854222),
  (2.0**-500, 1e150),  # sinh switch
  (math.nextafter(2.0**-500, 0), 0.14806372766608994),
  (5e-324, 0.066273180147167),  # subnormal eps
  (2.2e-308, 3.465546530629883),
  (156.0497996705655, 0.25007484573972677),  # |a| near sqrt(1520), z near -760
  (21.30254371390839, 1.8275851317930134),
  (720.707340890118, 0.024056600190799072),  # eps above 709
  (709.78, 0.03753),
  (1e-30, 1 / math.sqrt(2e-30)),  # a = 0 up to rounding
  (100.0, 0.07071067811865475),
  (1.0, 1e-8),
]


@pytest.mark.parametrize("eps,s", HARD)
def test_bound_holds_at_hard_points(eps, s):
  exact = _exact(eps, s)
  bound = analytic_gaussian_delta_bound(eps, s)
  assert bound >= exact, (eps, s, bound)
  assert analytic_gaussian_delta(eps, s) <= bound
  for value, err in gaussian._evaluations(eps, s):
    assert value - err <= exact <= value + err, (eps, s)
  if exact >= 1e-300:
    assert bound <= exact * (1 + SLACK), (eps, s)


@pytest.mark.parametrize(
  "eps,delta",
  [
    (5e-324, 1e-300),
    (1e-300, 2.2250738585072014e-308),  # subnormal-adjacent delta: privacy only
    (32.00000000000001, 1e-300),
    (709.78, 0.999999),
    (1e-5, 0.9999999999999999),
    (1e300, 1e-300),
    (1.7976931348623157e308, 0.5),
  ],
)
def test_sigma_is_private_at_hard_pairs(eps, delta):
  sigma = analytic_gaussian_sigma(eps, delta)
  assert 0 < sigma < math.inf
  if 0.5 / sigma - eps * sigma < -100:  # delta(eps, sigma) < Phi(-99) < 1e-2000
    return
  assert _exact(eps, sigma) <= delta


def _within(seconds, f, *args):
  """f(*args), or TimeoutError after ``seconds`` (a pure-Python loop is interrupted)."""
  if not hasattr(signal, "setitimer"):
    pytest.skip("needs signal.setitimer")

  def expire(signum, frame):
    raise TimeoutError(f"{f.__name__}{args} still running after {seconds} s")

  previous = signal.signal(signal.SIGALRM, expire)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    return f(*args)
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(
  "eps,delta", [(1.0, 1e-320), (5e-324, 5e-324), (100.0, 1.5e-313), (1e-38, 1e-312)]
)
def test_sigma_returns_or_refuses_tiny_delta(eps, delta):
  """The bound never falls below 1.5 TINY, so a delta below it made the search for an
  upper end run to sigma = inf and loop there; a delta below 2^-1022 is refused."""
  try:
    sigma = _within(0.5, analytic_gaussian_sigma, eps, delta)
  except ValueError:
    return
  assert _exact(eps, sigma) <= delta


@pytest.mark.parametrize(
  "eps,s,exact",
  [
    (1e17, 2.2360679774997897e-09, 0.4999999955873),
    (9772372209558112.0, 7.15294691816161e-09, 0.5000000013207),
  ],
)
def test_bound_does_not_overflow_near_a_zero(eps, s, exact):
  """The argument error dz (about 6 eps u_r) made math.expm1 raise OverflowError; the
  bound is 1 there (an upper bound, not a tight one)."""
  assert analytic_gaussian_delta_bound(eps, s) >= _exact(eps, s)
  assert float(_exact(eps, s)) == pytest.approx(exact, rel=1e-12)


def test_series_error_bound_is_not_nan():
  """v = eps s = 6.5e160 made v * v inf and z + dz = -inf + inf NaN, so the series'
  error was NaN (the bound survived only because min kept the direct form)."""
  for value, err in gaussian._evaluations(5.619558281683406e-07, 1.1629713075476007e167):
    assert err >= 0 and value - err <= 0 <= value + err


@pytest.mark.parametrize(
  "eps,s",
  [(31.950735714285717, 1.2007391736787638), (32.0, 1.19), (30.0, 1.2678126677210853)],
)
def test_series_error_bound_holds_where_phi_is_subnormal(eps, s):
  """phi(v) = exp(-v^2/2) / sqrt(2 pi) is subnormal (v near 38), so its relative error
  is not rel_p: the series' stated error was up to 170 times too small (the final
  bound held, the error being below TINY); its error adds the subnormal grid's roundings."""
  exact = _exact(eps, s)
  assert analytic_gaussian_delta_bound(eps, s) >= exact
  for value, err in gaussian._evaluations(eps, s):
    assert value - err <= exact <= value + err, (eps, s, value, err)


def test_bound_at_huge_eps_is_an_upper_bound():
  """The 1e-9 tightness holds for eps <= 1e6 only: where a is near 0 at eps near 5e15
  the tails' argument errors (eps s u_r) leave nothing but the bound 1 (the exact
  delta is 0.49999996); still never below the exact delta."""
  eps, s = 4652997904223029.0, 1.0366175894055063e-08
  assert 0.4999999 < _exact(eps, s) <= analytic_gaussian_delta_bound(eps, s) <= 1.0


@pytest.mark.parametrize(
  "eps,delta", [(1e9, 1e-300), (1e10, 1e-300), (1e12, 0.5), (1e15, 0.5)]
)
def test_sigma_at_large_eps(eps, delta):
  """Above eps = 1e6 the arguments' rounding (eps s u_r) loosens the bound: the exact
  delta is 1 - 1.5e-9 of delta at eps = 1e9, 1 - 7e-8 at 1e15. The bisection's lower
  end was fixed at 1e-6, so from eps near 5e11 it returned 1e-6 (at eps = 1e12 the
  exact sigma is 7.1e-7, and the exact delta at 1e-6 is 1e-54286810244, not 0.5)."""
  ratio = _exact(eps, analytic_gaussian_sigma(eps, delta)) / delta
  assert 1 - 1e-6 <= ratio <= 1, ratio
