"""DP-SGD accounting (Poisson-subsampled Gaussian) against dp_accounting 0.6 and an
independent mpmath integration of the Rényi divergence.

Reference facts these tests rely on:
* RDP: dp_accounting's per-order values are exact at integer orders (the same
  binomial sum). At fractional orders its two-series sum adds the *absolute* values of
  the terms (``_log_comb`` uses ``gammaln``, which drops the sign of the negative
  binomial coefficients past the order), so it is an upper bound that can be far off
  (+167% at q = 0.1, sigma = 5, order 1.25) or give up (``inf`` after 1000 terms);
  there the reference is 30-digit mpmath quadrature of E[(1 - q + q L)^a].
* PLD: both sides connect the dots on the same grid; h = 1e-3 here (about 10x faster
  than dp_accounting's default 1e-4, which the slow test uses).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import PldAccounting, RdpAccounting, dpsgd_epsilon, subsampled_gaussian_rdp
from jaxdp.composition import renyi
from jaxdp.composition.dpsgd import MAX_STEPS
from jaxdp.composition.gaussian import analytic_gaussian_delta
from jaxdp.composition.pld import PLD
from jaxdp.composition.subsampled_pld import subsampled_gaussian_pld

dp_accounting = pytest.importorskip("dp_accounting")
mp = pytest.importorskip("mpmath")
rdp_lib = pytest.importorskip("dp_accounting.rdp.rdp_privacy_accountant")

DELTA = 1e-5
QS, SIGMAS = (0.001, 0.01, 0.1), (0.6, 1.0, 2.0, 5.0)
INTS = (2.0, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0, 12.0, 16.0, 20.0, 32.0, 64.0, 128.0, 256.0)
FRACS = (1.25, 1.5, 2.5, 10.5)
ORDERS = tuple(sorted(INTS + FRACS))


def reference_rdp(q, sigma, alpha, dps=30):
  """RDP at order alpha by mpmath quadrature of E_{N(0, s^2)}[(1 - q + q L)^alpha]."""
  with mp.workdps(dps):
    q, s, a = mp.mpf(q), mp.mpf(sigma), mp.mpf(alpha)
    z0 = s * s * mp.log(1 / q - 1) + mp.mpf(1) / 2  # the integrand's kink in scale

    def f(z):
      return mp.npdf(z, 0, s) * ((1 - q) + q * mp.exp((2 * z - 1) / (2 * s * s))) ** a

    total = mp.quad(f, [-mp.inf, -10 * s, 0, z0, 10 * s + a, mp.inf])
    return float(mp.log(total) / (a - 1))


def dp_accounting_rdp_epsilon(q, sigma, steps, orders):
  acc = dp_accounting.rdp.RdpAccountant(list(orders))
  event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
  acc.compose(event, steps)
  return acc.get_epsilon(DELTA)


# ------------------------------------------------------------------ per-order RDP
@pytest.mark.parametrize("q", QS + (0.5,))
@pytest.mark.parametrize("sigma", SIGMAS)
def test_integer_orders_match_dp_accounting(q, sigma):
  ours = subsampled_gaussian_rdp(q, sigma, INTS)
  theirs = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, INTS)
  np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
  "q, sigma, alpha",
  [(0.001, 0.6, 1.25), (0.001, 5.0, 1.5), (0.01, 1.0, 2.5), (0.1, 1.0, 1.25),
   (0.1, 5.0, 10.5), (0.5, 5.0, 1.5), (0.1, 0.6, 3.0), (0.001, 2.0, 10.0),
   (0.01, 50.0, 1.5), (0.1, 100.0, 2.5)],
)  # fmt: skip
def test_orders_match_mpmath_quadrature(q, sigma, alpha):
  (ours,) = subsampled_gaussian_rdp(q, sigma, [alpha])
  want = reference_rdp(q, sigma, alpha)
  assert ours == pytest.approx(want, rel=1e-8)
  assert ours >= want * (1 - 1e-12)


@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_fractional_orders_never_above_dp_accounting(q, sigma):
  """dp_accounting's fractional figures sum |terms|: an upper bound on ours."""
  ours = subsampled_gaussian_rdp(q, sigma, FRACS)
  theirs = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, FRACS)
  assert np.all(ours <= theirs * (1 + 1e-9))


def test_dp_accounting_fractional_orders_are_loose_where_stated():
  (ours,) = subsampled_gaussian_rdp(0.1, 5.0, [1.25])
  want = reference_rdp(0.1, 5.0, 1.25)
  (theirs,) = rdp_lib._compute_rdp_poisson_subsampled_gaussian(0.1, 5.0, [1.25])
  assert ours == pytest.approx(want, rel=1e-8)
  assert theirs > 2.5 * want


def test_special_cases():
  a = np.asarray(ORDERS)
  assert np.all(subsampled_gaussian_rdp(0.0, 1.0, ORDERS) == 0)
  assert np.all(subsampled_gaussian_rdp(0.3, math.inf, ORDERS) == 0)
  np.testing.assert_allclose(subsampled_gaussian_rdp(1.0, 2.0, ORDERS), a / 8, rtol=1e-15)
  # Near q = 1 the figure approaches the unsampled Gaussian's from below.
  near = subsampled_gaussian_rdp(1 - 1e-9, 2.0, ORDERS)
  assert np.all(near <= a / 8 * (1 + 1e-9)) and np.all(near >= a / 8 * (1 - 1e-6))
  # Monotone in q and in 1 / sigma.
  assert np.all(np.diff([subsampled_gaussian_rdp(q, 1.0, ORDERS) for q in QS], axis=0) > 0)


# ------------------------------------------------------------------ eps(delta) by RDP
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_rdp_epsilon_matches_dp_accounting(q, sigma):
  """Within 1% of dp_accounting's RdpAccountant at the same orders, for T up to
  10000. With the fractional orders ours is never larger; it is smaller only where
  dp_accounting's fractional figure is loose (checked against mpmath above), so the
  1% comparison uses integer orders plus the fractional orders where the two agree."""
  acc, ints = RdpAccounting(ORDERS), RdpAccounting(INTS)
  ours_frac = subsampled_gaussian_rdp(q, sigma, FRACS)
  theirs_frac = rdp_lib._compute_rdp_poisson_subsampled_gaussian(q, sigma, FRACS)
  agree = tuple(a for a, x, y in zip(FRACS, ours_frac, theirs_frac) if y <= x * (1 + 1e-6))
  for steps in (1, 100, 1000, 10000):
    mine, theirs = (
      acc.epsilon(q, sigma, steps, DELTA),
      dp_accounting_rdp_epsilon(q, sigma, steps, ORDERS),
    )
    assert mine <= theirs * (1 + 1e-9), (steps, mine, theirs)
    orders = tuple(sorted(INTS + agree))
    mine = RdpAccounting(orders).epsilon(q, sigma, steps, DELTA)
    assert mine == pytest.approx(
      dp_accounting_rdp_epsilon(q, sigma, steps, orders), rel=0.01
    )
    mine = ints.epsilon(q, sigma, steps, DELTA)
    assert mine == pytest.approx(dp_accounting_rdp_epsilon(q, sigma, steps, INTS), rel=0.01)


def test_rdp_epsilon_conversion_is_dp_accountings():
  rdp = np.asarray([0.3, 0.1, 0.05, 0.9])
  orders = (1.5, 2.0, 8.0, 32.0)
  theirs, _ = rdp_lib.compute_epsilon(orders, rdp, DELTA)
  assert renyi.rdp_epsilon(rdp, orders, DELTA) == pytest.approx(theirs, rel=1e-12)


# ------------------------------------------------------------------ traced (jit) figures
@pytest.fixture(scope="module")
def traced_rdp():
  return jax.jit(jax.vmap(lambda q, s: subsampled_gaussian_rdp(q, s, ORDERS)))


def test_traced_figures_are_upper_bounds_within_stated_rounding(traced_rdp):
  """Traced float32 figures are >= the host float64 ones (accurate to 1e-8 against
  mpmath above) and at most 2% above them for q <= 0.5, sigma <= 5 (0.03% where the
  figure is large; most of the excess is at orders below 2 with sigma = 5)."""
  grid = [(q, s) for q in QS + (0.5, 0.037) for s in SIGMAS + (0.8, 3.3)]
  qs, ss = (np.asarray(v, np.float32) for v in zip(*grid))
  got = np.asarray(traced_rdp(qs, ss), np.float64)
  for (q, s), row in zip(zip(qs, ss), got):  # the host figure at the float32 inputs
    want = subsampled_gaussian_rdp(float(q), float(s), ORDERS)
    assert np.all(row >= want), (q, s, row / want - 1)
    assert np.all(row <= want * 1.02), (q, s, row / want - 1)
    assert np.all(row[np.asarray(ORDERS) >= 2] <= want[np.asarray(ORDERS) >= 2] * 1.003)


def test_traced_figures_are_upper_bounds_at_random_points(traced_rdp):
  """30 points (the shape the grid test compiled) with q log-uniform in [1e-5, 0.9]
  and sigma log-uniform in [0.3, 30], fixed seed. Above sigma = 5 with q > 0.5 the
  fractional orders below 2 are loosest (13% at q = 0.79, sigma = 16.6, order 1.25)."""
  rng = np.random.default_rng(7)
  qs = np.exp(rng.uniform(np.log(1e-5), np.log(0.9), 30)).astype(np.float32)
  ss = np.exp(rng.uniform(np.log(0.3), np.log(30.0), 30)).astype(np.float32)
  got = np.asarray(traced_rdp(qs, ss), np.float64)
  for q, s, row in zip(qs, ss, got):
    want = subsampled_gaussian_rdp(float(q), float(s), ORDERS)
    assert np.all(row >= want), (q, s, row / want - 1)
    assert np.all(row <= want * 1.25), (q, s, row / want - 1)
    assert np.all(row[2:] <= want[2:] * 1.07), (q, s, row / want - 1)  # orders >= 2


def test_traced_bad_inputs_cost_infinity(traced_rdp):
  a = np.asarray(ORDERS)
  bad = [(np.nan, 1.0), (-0.1, 1.0), (1.5, 1.0), (0.1, np.nan), (0.1, 0.0), (0.1, -1.0),
         (0.1, 1e-3), (np.inf, 1.0), (0.1, -np.inf)]  # fmt: skip
  good = [(0.0, 1.0), (0.2, np.inf), (1.0, 2.0)]
  qs, ss = (jnp.asarray(v, jnp.float32) for v in zip(*(bad + good)))
  got = np.asarray(traced_rdp(qs, ss))
  assert np.all(got[: len(bad)] == np.inf)
  assert np.all(got[len(bad)] == 0) and np.all(got[len(bad) + 1] == 0)
  assert np.all(got[-1] >= a / 8) and np.all(got[-1] <= a / 8 * (1 + 2**-11))


def test_tiny_costs_round_up_not_to_zero(traced_rdp):
  q, s = np.float32(1e-30), np.float32(50.0)
  got = np.asarray(traced_rdp(jnp.asarray([q]), jnp.asarray([s])))[0]
  want = subsampled_gaussian_rdp(float(q), float(s), ORDERS)
  assert np.all(want > 0) and np.all(got >= want)


def test_fractional_orders_capped_by_the_integer_chord():
  """At huge sigma the series cancels; the convexity chord keeps the figure sound
  and within 2x of a q^2 (e^(1/s^2) - 1) / 2, its small-q limit."""
  q, s = 1e-6, 1e6
  rdp = dict(zip(ORDERS, subsampled_gaussian_rdp(q, s, ORDERS)))
  assert 0.5 * rdp[1.5] <= 0.5 * rdp[2.0] * 1  # (a - 1) RDP_a <= chord of log A
  limit = 1.5 * q * q * math.expm1(1 / s**2) / 2
  assert limit * (1 - 1e-6) <= rdp[1.5] <= 2 * limit


def test_traced_sum_converts_inside_jit():
  acc = RdpAccounting(ORDERS)

  @jax.jit
  def eps_after(q, s):
    return renyi.rdp_epsilon(1000 * acc.step_rdp(q, s), acc.orders, DELTA)

  want = acc.epsilon(0.01, 1.0, 1000, DELTA)
  got = float(eps_after(0.01, 1.0))
  assert want <= got <= want * 1.003


# ------------------------------------------------------------------ bad input (host)
@pytest.mark.parametrize(
  "q, sigma, name",
  [(math.nan, 1.0, "q"), (-0.1, 1.0, "q"), (1.5, 1.0, "q"), (math.inf, 1.0, "q"),
   (0.1, math.nan, "noise_multiplier"), (0.1, 0.0, "noise_multiplier"),
   (0.1, -1.0, "noise_multiplier"), (0.1, 1e-3, "noise_multiplier"),
   ("0.1", 1.0, "q"), (0.1, None, "noise_multiplier")],
)  # fmt: skip
def test_bad_sampling_parameters_raise_naming_them(q, sigma, name):
  with pytest.raises(ValueError, match=name):
    subsampled_gaussian_rdp(q, sigma, ORDERS)
  with pytest.raises(ValueError, match=name):
    subsampled_gaussian_pld(q, sigma, 1e-3)


@pytest.mark.parametrize(
  "orders", [(1.0,), (0.5, 2.0), (math.nan,), (), (2.0, math.inf), (2.0, 1e9)]
)
def test_bad_orders_raise(orders):
  with pytest.raises(ValueError, match="orders"):
    subsampled_gaussian_rdp(0.1, 1.0, orders)


def test_bad_policy_arguments_raise():
  with pytest.raises(ValueError, match="h"):
    PldAccounting(h=0.0)
  with pytest.raises(ValueError, match="h = 1e-09 needs"):
    PldAccounting(h=1e-9).epsilon(0.01, 1.0, 10, DELTA)
  with pytest.raises(ValueError, match="accountant"):
    dpsgd_epsilon(0.01, 1.0, 10, DELTA, accountant="pld")
  with pytest.raises(ValueError, match="steps"):
    RdpAccounting().epsilon(0.01, 1.0, -1, DELTA)
  with pytest.raises(ValueError, match="delta"):
    PldAccounting(h=1e-3).epsilon(0.01, 1.0, 10, 0.0)
  with pytest.raises(ValueError, match="eps"):
    RdpAccounting().max_steps(0.01, 1.0, math.nan, DELTA)


# ------------------------------------------------------------------ PLD
def exact_delta(q, sigma, eps, remove):
  """delta(eps) of one step from the normal distribution function (mpmath)."""
  with mp.workdps(30):
    q, s, e = mp.mpf(q), mp.mpf(sigma), mp.mpf(eps)
    # Loss of the remove direction at x: log(1 - q + q exp((2x - 1) / (2 s^2))).
    if remove:  # P(L > eps) - e^eps Q(L > eps), L > eps iff x > x_e
      x = s * s * mp.log((mp.exp(e) - (1 - q)) / q) + mp.mpf(1) / 2
      tail0, tail1 = mp.ncdf(-x / s), mp.ncdf(-(x - 1) / s)
      return float((1 - q) * tail0 + q * tail1 - mp.exp(e) * tail0)
    # add: -loss > eps iff x < x_e with loss(x_e) = -eps (none if e^-eps <= 1 - q)
    if mp.exp(-e) <= 1 - q:
      return 0.0
    x = s * s * mp.log((mp.exp(-e) - (1 - q)) / q) + mp.mpf(1) / 2
    return float(
      mp.ncdf(x / s) - mp.exp(e) * ((1 - q) * mp.ncdf(x / s) + q * mp.ncdf((x - 1) / s))
    )


@pytest.mark.parametrize("q, sigma", [(0.01, 0.8), (0.1, 2.0), (0.5, 1.0)])
def test_one_step_pld_dominates_the_exact_profile(q, sigma):
  h = 1e-3
  pair = subsampled_gaussian_pld(q, sigma, h)
  for eps in (0.0, 0.01, 0.1, 0.5, 1.0, 2.0):
    for pld, remove in ((pair.remove, True), (pair.add, False)):
      want = exact_delta(q, sigma, eps, remove)
      got = pld.delta(eps)
      assert got >= want - 1e-15, (eps, remove, got, want)
      assert got <= want + 2 * h * max(want, 1e-12) + 1e-12, (eps, remove, got, want)


def dp_accounting_pld_epsilon(q, sigma, steps, h):
  acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=h)
  event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))
  acc.compose(event, steps)
  return acc.get_epsilon(DELTA)


@pytest.mark.parametrize("q, sigma", [(0.01, 1.0), (0.1, 2.0), (0.001, 0.6)])
def test_pld_epsilon_matches_dp_accounting(q, sigma):
  acc = PldAccounting(h=1e-3)
  for steps in (1, 100, 1000):
    want = dp_accounting_pld_epsilon(q, sigma, steps, 1e-3)
    assert acc.epsilon(q, sigma, steps, DELTA) == pytest.approx(want, rel=0.005)


@pytest.mark.slow
@pytest.mark.parametrize("q", QS)
@pytest.mark.parametrize("sigma", SIGMAS)
def test_pld_epsilon_matches_dp_accounting_grid(q, sigma):
  acc = PldAccounting(h=1e-3)
  for steps in (1, 100, 1000):
    want = dp_accounting_pld_epsilon(q, sigma, steps, 1e-3)
    assert acc.epsilon(q, sigma, steps, DELTA) == pytest.approx(want, rel=0.005)


@pytest.mark.slow
def test_pld_epsilon_matches_dp_accounting_at_its_default_grid():
  acc = PldAccounting(h=1e-4)
  for q, sigma, steps in ((0.01, 1.0, 1000), (0.001, 0.6, 10000)):
    want = dp_accounting_pld_epsilon(q, sigma, steps, 1e-4)
    assert acc.epsilon(q, sigma, steps, DELTA) == pytest.approx(want, rel=0.005)


def test_pld_is_tighter_than_rdp():
  for q, sigma in ((0.01, 1.0), (0.1, 2.0)):
    pld = dpsgd_epsilon(q, sigma, 100, DELTA, accountant=PldAccounting(h=1e-3))
    assert pld < dpsgd_epsilon(q, sigma, 100, DELTA)


# ------------------------------------------------------------------ max_steps
@pytest.mark.parametrize("policy", [RdpAccounting(ORDERS), PldAccounting(h=1e-3)])
def test_max_steps_is_the_last_step_within_budget(policy):
  q, sigma, eps = 0.01, 1.0, 1.0
  steps = policy.max_steps(q, sigma, eps, DELTA)
  assert steps > 1
  assert policy.epsilon(q, sigma, steps, DELTA) <= eps
  assert policy.epsilon(q, sigma, steps + 1, DELTA) > eps


@pytest.mark.parametrize("policy", [RdpAccounting(ORDERS), PldAccounting(h=1e-3)])
def test_max_steps_edges(policy):
  assert policy.max_steps(0.0, 1.0, 1.0, DELTA) == MAX_STEPS
  assert policy.max_steps(0.5, 0.6, 0.01, DELTA) == 0
  assert policy.epsilon(0.01, 1.0, 0, DELTA) == 0.0


def test_unsampled_step_is_the_gaussian_mechanism():
  """q = 1: the PLD's delta(eps) is at least the analytic Gaussian's (Balle & Wang
  2018, Theorem 8) and within the grid's rounding of it; the RDP is alpha / (2 s^2)."""
  sigma, h = 1.3, 1e-3
  pair = subsampled_gaussian_pld(1.0, sigma, h)
  for eps in (0.0, 0.2, 1.0, 2.5):
    want = analytic_gaussian_delta(eps, sigma)
    for pld in pair:
      assert want - 1e-15 <= pld.delta(eps) <= want * (1 + 2 * h) + 1e-12


def test_concrete_jax_scalars_take_the_host_path():
  got = subsampled_gaussian_rdp(jnp.float32(0.25), jnp.asarray(2.0), ORDERS)
  assert isinstance(got, np.ndarray) and got.dtype == np.float64
  np.testing.assert_allclose(got, subsampled_gaussian_rdp(0.25, 2.0, ORDERS), rtol=1e-15)


def test_host_side_accounting_refuses_traced_values():
  @jax.jit
  def traced(q):
    return RdpAccounting(ORDERS).epsilon(q, 1.0, 10, DELTA)

  with pytest.raises(ValueError, match="q must be a concrete number"):
    traced(0.01)
  with pytest.raises(ValueError, match="noise_multiplier must be a concrete"):
    jax.jit(lambda s: subsampled_gaussian_pld(0.01, s, 1e-3))(1.0)


def test_pld_epsilon_past_exp_overflow():
  """Losses above log(float max) ~ 709 once made PLD.epsilon raise OverflowError."""
  far = PLD(np.array([1 - 1e-3, 1e-3]), 0, 800.0)
  # Exact: 800 + log(0.99); e^-800 underflows, so the loss counts in full: 800.
  assert 800 + math.log1p(-1e-2) <= far.epsilon(1e-5) <= 800
