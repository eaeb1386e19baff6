"""Error bars: exact quantiles against independent references (scipy, mpmath), and
coverage over simulated releases."""

import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import integrate, special, stats

import jaxdp
from jaxdp.reporting import moments, noise_law, poset_law, quantiles, simulate

LEVELS = (0.5, 0.9, 0.95, 0.99)


@pytest.mark.parametrize("level", LEVELS)
def test_laplace_and_gaussian_quantiles_match_scipy(level):
  lap = jaxdp.error_bars(jaxdp.LaplaceMechanism(0.7, 3.0), level)
  assert lap.exact and lap.upper == pytest.approx(
    stats.laplace.ppf((1 + level) / 2, scale=3.0 / 0.7), rel=1e-12
  )
  assert lap.lower == -lap.upper
  gauss = jaxdp.GaussianMechanism(0.5, 1e-5)
  bars = jaxdp.error_bars(gauss, level)
  assert bars.upper == pytest.approx(
    stats.norm.ppf((1 + level) / 2) * gauss.sigma, rel=1e-10
  )
  # the l_1 K-norm mechanism is i.i.d. Laplace(sensitivity / eps)
  l1 = jaxdp.error_bars(jaxdp.KNormMechanism(jaxdp.LpBall(3, 1), 2.0, 5.0), level)
  assert l1.upper.shape == (3,)
  assert l1.upper == pytest.approx(stats.laplace.ppf((1 + level) / 2, scale=2.5), rel=1e-12)


@pytest.mark.parametrize("dim", [1, 5, 40])
def test_linf_knorm_distribution_function_matches_quadrature(dim):
  """F(t) = E min(1, t / R), R ~ Gamma(D + 1, b): scipy quadrature of the mixture."""
  law = noise_law(jaxdp.KNormMechanism(jaxdp.LpBall(dim, math.inf), 0.5))
  gamma = stats.gamma(dim + 1, scale=law.scale)
  for t in np.array([0.3, 1.0, 3.0]) * law.scale * dim:
    want = gamma.cdf(t) + integrate.quad(lambda r: t / r * gamma.pdf(r), t, np.inf)[0]
    assert quantiles.abs_cdf(law, t) == pytest.approx(want, abs=1e-9)
  bars = jaxdp.error_bars(jaxdp.KNormMechanism(jaxdp.LpBall(dim, math.inf), 0.5), 0.95)
  assert quantiles.abs_cdf(law, float(bars.upper[0])) == pytest.approx(0.95, abs=1e-10)


def _rounded_laplace_coverage(b, t):
  """P(|round(L)| <= t) = P(|L| < t + 1/2), at 50 digits."""
  with mpmath.workdps(50):
    return 1 - mpmath.exp(-(mpmath.mpf(t) + 0.5) / mpmath.mpf(b))


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("eps", [0.05, 1.0, 3.0])
def test_exact_laplace_interval_is_the_smallest_integer_one(level, eps):
  mech = jaxdp.LaplaceMechanism(eps, exact=True)
  bars = jaxdp.error_bars(mech, level)
  t = int(bars.upper)
  b = noise_law(mech).scale
  assert bars.upper == t and bars.lower == -t
  assert float(_rounded_laplace_coverage(b, t)) == pytest.approx(float(bars.coverage))
  assert _rounded_laplace_coverage(b, t) >= level
  assert t == 0 or _rounded_laplace_coverage(b, t - 1) < level


@pytest.mark.parametrize("level", (0.5, 0.95))
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_discrete_gaussian_interval_from_its_pmf(level, eps):
  mech = jaxdp.DiscreteGaussianMechanism(eps, 1e-6)
  bars = jaxdp.error_bars(mech, level)
  s2 = mpmath.mpf(jaxdp.exact.sigma_quarters(mech.sigma)) / 4

  def cov(t):
    with mpmath.workdps(40):
      w = lambda k: mpmath.exp(-(mpmath.mpf(k) ** 2) / (2 * s2))
      total = mpmath.nsum(w, [-mpmath.inf, mpmath.inf])
      return mpmath.fsum(w(k) for k in range(-t, t + 1)) / total

  t = int(bars.upper)
  assert cov(t) >= level > cov(t - 1)
  assert float(cov(t)) == pytest.approx(float(bars.coverage), abs=1e-12)


def test_exact_poset_ball_interval_is_the_smallest_integer_one():
  """Integer noise round(Y): P(|round(Y_i)| <= t) = P(|Y_i| < t + 1/2) from the
  enumerated law, and t - 1 falls short."""
  mech = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 0.5, exact=True)
  bars = jaxdp.error_bars(mech)
  law = noise_law(mech)
  for i, t in enumerate(bars.upper.astype(int)):
    assert bars.coverage[i] == quantiles.abs_cdf(law, t + 0.5, i) >= 0.95
    assert quantiles.abs_cdf(law, t - 0.5, i) < 0.95


def test_exact_knorm_linf_interval_is_the_smallest_integer_one():
  mech = jaxdp.KNormMechanism(jaxdp.LpBall(6, math.inf), 0.3, exact=True)
  bars = jaxdp.error_bars(mech)
  law = noise_law(mech)
  t = int(bars.upper[0])
  assert quantiles.abs_cdf(law, t + 0.5) >= 0.95 > quantiles.abs_cdf(law, t - 0.5)


def _within(hits, n, p, extra_var=0.0, z=4.0):
  """Binomial test, normal approximation: |hits / n - p| <= z sd."""
  return np.abs(hits / n - p) <= z * np.sqrt(p * (1 - p) / n + extra_var)


@jax.jit
def _releases(key, x):
  """10^4 raw releases of true counts x by each mechanism of the coverage test."""
  k = jax.random.split(key, 2)
  xs = jnp.broadcast_to(x, (10_000, x.shape[0]))
  return (
    jaxdp.KNormMechanism(jaxdp.PosetBall(jaxdp.Poset.nhis(1)), 0.5).randomize(k[0], xs),
    jaxdp.LaplaceMechanism(0.5, 5.0).randomize(k[1], xs),
  )


@pytest.mark.statistical
def test_raw_intervals_cover_the_true_counts_at_their_level(monkeypatch):
  """Over 10^4 simulated releases (fixed key) each coordinate's 95% interval covers
  the true count with the stated probability: a binomial test at 4 standard
  deviations per coordinate (15 coordinates: family-wise false alarm below 1e-3),
  the Monte Carlo bars' own quantile error added to the variance. The poset ball's
  bars are exact (enumerated) and, forced, Monte Carlo. A one-sided
  quantile (coverage 0.90) or a 10% too narrow interval fails it (checked below).
  The same draws check :func:`jaxdp.reporting.squared_error` against the samplers."""
  poset = jaxdp.Poset.nhis(1)
  x = np.array([3000, 2500, 1700, 900, 1300])
  mechs = [jaxdp.PosetCountMechanism(poset, 0.5), jaxdp.LaplaceMechanism(0.5, 5.0)]
  released = _releases(jax.random.key(2026), jnp.asarray(x, jnp.float32))
  bars_of = [jaxdp.error_bars(m, 0.95, shape=(5,)) for m in mechs]
  assert all(b.exact for b in bars_of)  # NHIS-1's poset ball is enumerated
  monkeypatch.setattr(poset_law, "ENUMERATE_MAX_OBJECTS", 10)  # and as if large:
  bars_of.append(jaxdp.error_bars(mechs[0], 0.95, num_samples=100_000))
  for bars, y in zip(bars_of, [*released, released[0]]):
    lo, hi = bars.interval(np.asarray(y))
    hits = np.sum((lo <= x) & (x <= hi), axis=0)
    extra = 0.95 * 0.05 / bars.num_samples if bars.num_samples else 0.0
    assert np.all(_within(hits, 10_000, bars.coverage, extra)), (bars.method, hits)
    narrow = np.sum(np.abs(np.asarray(y) - x) <= 0.9 * bars.upper, axis=0)
    assert not np.any(_within(narrow, 10_000, bars.coverage, extra)), bars.method
  monkeypatch.undo()
  # the same draws check the advice's expected squared errors (4.5 standard errors)
  for mech, y in zip(mechs, released):
    want = moments.squared_error(noise_law(mech, (5,)), 5).per_coordinate
    e2 = (np.asarray(y, np.float64) - x) ** 2
    assert np.all(np.abs(e2.mean(0) - want) <= 4.5 * e2.std(0) / 100), mech


def test_large_poset_balls_get_monte_carlo_bars_with_a_stated_error(monkeypatch):
  monkeypatch.setattr(poset_law, "ENUMERATE_MAX_OBJECTS", 10)  # NHIS-1 as if large
  mech = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 1.0)
  bars = jaxdp.error_bars(mech, 0.9, num_samples=50_000)
  assert not bars.exact and bars.num_samples == 50_000
  assert bars.names == ("respondents", "q1", "q2", "q3", "q4")
  assert np.all(bars.mc_error > 0) and np.all(bars.mc_error < 0.03 * bars.upper)
  assert "Monte Carlo" in bars.method and "Monte Carlo" in str(bars)
  again = jaxdp.error_bars(mech, 0.9, num_samples=50_000)  # the public default key
  np.testing.assert_array_equal(bars.upper, again.upper)
  monkeypatch.undo()
  exact = jaxdp.error_bars(mech, 0.9)
  assert exact.exact and np.all(np.abs(bars.upper - exact.upper) <= 4 * bars.mc_error)


def test_gamma_difference_tail_matches_numerical_integration():
  """P(G_a - G_c > x) = E[P(G_a > x + G_c)]: scipy's regularized incomplete gamma
  integrated against the Gamma(c) density (Simpson's rule, 40,001 points)."""
  y = np.linspace(0.0, 80.0, 40_001)
  for a, c in [(1, 0), (0, 2), (1, 1), (3, 2), (2, 5), (6, 6), (12, 3)]:
    for x in (0.0, 0.5, 2.0, 7.0):
      if c == 0:
        want = special.gammaincc(a, x)
      elif a == 0:
        want = 0.0
      else:
        want = integrate.simpson(special.gammaincc(a, x + y) * stats.gamma.pdf(y, c), x=y)
      assert poset_law.difference_tail(a, c, x) == pytest.approx(want, abs=1e-9), (a, c, x)


def test_exact_laplace_on_a_grid_needs_the_shape():
  mech = jaxdp.LaplaceMechanism(1.0, exact=True, grid=0.25)
  with pytest.raises(ValueError, match="shape is needed"):
    jaxdp.error_bars(mech)
  bars = jaxdp.error_bars(mech, shape=(3,))
  # scale in grid units: (1 / 0.25 + 3 slack) / eps; offsets back in statistic units
  t_units = math.ceil(-7 * math.log(0.05) - 0.5)
  assert bars.upper == pytest.approx(0.25 * t_units, abs=0.25)


@pytest.mark.parametrize(
  "kwargs, match",
  [
    ({"level": 0.0}, "level must be strictly between 0 and 1"),
    ({"level": 1.0}, "level must be strictly between 0 and 1"),
    ({"level": float("nan")}, "level must be strictly between 0 and 1"),
    ({"level": True}, "level must be strictly between 0 and 1"),
    ({"level": "95%"}, "level must be a number"),
    ({"num_samples": 10}, "num_samples must be >= 100"),
    ({"key": 3}, "key must be a PRNG key"),
  ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
  mech = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 1.0)
  with pytest.raises(ValueError, match=match):
    jaxdp.error_bars(mech, **kwargs)


def test_unsupported_or_traced_mechanisms_are_refused():
  with pytest.raises(TypeError, match="mechanism must be a PosetCountMechanism"):
    jaxdp.error_bars("laplace")

  @jax.jit
  def traced(eps):
    jaxdp.error_bars(jaxdp.LaplaceMechanism(eps))
    return eps

  with pytest.raises(ValueError, match="static parameters; eps"):
    traced(1.0)


def test_interval_checks_the_released_shape():
  bars = jaxdp.error_bars(jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 1.0, noise="linf"))
  with pytest.raises(ValueError, match="last dimension 5"):
    bars.interval(np.zeros(4))
  lo, hi = bars.interval(np.arange(5.0))
  np.testing.assert_allclose(hi - lo, 2 * bars.upper)


def test_rebuilt_mechanisms_with_bad_leaves_are_refused():
  """A mechanism rebuilt by jax.tree_util skips its constructor: a negative eps would
  give a negative scale (and a search that never ends)."""
  mech = jaxdp.KNormMechanism(jaxdp.LpBall(3, math.inf), 1.0)
  leaves, tree = jax.tree_util.tree_flatten(mech)  # (eps, sensitivity)
  bad = jax.tree_util.tree_unflatten(tree, [-leaves[0], leaves[1]])
  with pytest.raises(ValueError, match="noise scale must be a finite number > 0"):
    jaxdp.error_bars(bad)


def test_simulations_that_would_not_fit_in_memory_are_refused_before_drawing():
  mech = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 1.0)
  with pytest.raises(ValueError, match="num_samples must be at most 13,421,772 for 5"):
    jaxdp.error_bars(mech, num_samples=10**8)


def test_bars_are_kept_per_law_level_samples_and_key(monkeypatch):
  """Asking again for a mechanism's Monte Carlo bars (once per release, say) reuses
  them (each caller gets its own copy); a different key, level, sample count or eps
  simulates afresh; the arrays cannot be changed in place."""
  monkeypatch.setattr(poset_law, "ENUMERATE_MAX_OBJECTS", 10)  # NHIS-1 as if large
  calls = []
  draws = simulate.noise_draws
  monkeypatch.setattr(simulate, "noise_draws", lambda *a: calls.append(a) or draws(*a))
  mech = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 0.7)
  first = jaxdp.error_bars(mech, 0.9, num_samples=1_000, key=jax.random.key(5))
  assert len(calls) == 1 and not first.exact
  same = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 0.7)  # an equal mechanism
  again = jaxdp.error_bars(same, 0.9, num_samples=1_000, key=jax.random.key(5))
  assert len(calls) == 1 and again is not first  # kept, handed out as a new copy
  for name in ("lower", "upper", "coverage", "mc_error"):
    np.testing.assert_array_equal(getattr(again, name), getattr(first, name))
    assert not np.shares_memory(getattr(again, name), getattr(first, name))
  other_key = jaxdp.error_bars(mech, 0.9, num_samples=1_000, key=jax.random.key(6))
  assert len(calls) == 2 and np.any(other_key.upper != first.upper)
  jaxdp.error_bars(mech, 0.8, num_samples=1_000, key=jax.random.key(5))
  jaxdp.error_bars(mech, 0.9, num_samples=1_001, key=jax.random.key(5))
  bigger = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 1.4)
  half = jaxdp.error_bars(bigger, 0.9, num_samples=1_000, key=jax.random.key(5))
  assert len(calls) == 5
  np.testing.assert_allclose(half.upper, first.upper / 2, rtol=1e-6)  # same draws
  for name in ("lower", "upper", "coverage", "mc_error"):
    with pytest.raises(ValueError, match="read-only"):
      getattr(first, name)[0] = 0.0
  monkeypatch.undo()  # NHIS-1 enumerable again: exact bars, not the cached ones
  assert jaxdp.error_bars(mech, 0.9, num_samples=1_000, key=jax.random.key(5)).exact
