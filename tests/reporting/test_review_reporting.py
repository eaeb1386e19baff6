"""Review of the release products: advice's Monte Carlo errors, against independent
replications (fixed keys, stated sizes and thresholds)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import montecarlo
from jaxdp.experiments import studies

REPS = 40  # independent replications (fixed keys 0 .. REPS - 1)


def test_advice_total_stderr_matches_replications():
  """The raw total's standard error of a simulated poset ball covers the spread of
  the total over independent keys: the coordinates' squared errors come from the
  same draws and are correlated, so their standard errors do not add in quadrature.

  The empirical sd of REPS = 40 totals has relative sd about 1 / sqrt(78) = 0.11;
  a reported standard error below 0.7 of it is more than 2.7 of those below.
  """
  poset = jaxdp.Poset.nhis(2)  # 11 questions: too many simplices to enumerate
  totals, reported = [], []
  for seed in range(REPS):
    advice = jaxdp.advise(
      poset, 1.0, consistency=False, num_samples=200, key=jax.random.key(seed)
    )
    option = advice.option("poset")
    assert option.method.startswith("Monte Carlo")
    totals.append(option.total)
    reported.append(option.total_stderr)
  empirical = float(np.std(totals, ddof=1))
  assert float(np.median(reported)) >= 0.7 * empirical, (np.median(reported), empirical)


@pytest.mark.parametrize("integer", [False, True])
def test_consistent_error_bars_keep_their_width_at_a_billion_respondents(integer):
  """Far from the constraints the projection moves nothing, so the bootstrap
  intervals of a survey of 10^9 respondents (below integer_limit) are those of the
  same survey at 10^4, and within one count of the raw exact bars. The replicates
  must be projected in float64: float32 rounds 10^9 + noise to multiples of 64."""
  poset = jaxdp.Poset.nhis(1)
  mech = jaxdp.PosetCountMechanism(poset, 1.0, exact=True)
  raw = jaxdp.error_bars(mech, 0.9)
  widths = []
  for n in (10**4, 10**9):
    z = jaxdp.reporting.default_counts(poset, n)  # each count half of its gate's: far apart
    bars = jaxdp.consistent_error_bars(
      z, mech, 0.9, integer=integer, num_samples=2000, key=jax.random.key(5)
    )
    widths.append(np.stack([bars.lower, bars.upper]))
  np.testing.assert_array_equal(widths[1], widths[0])
  np.testing.assert_allclose(widths[1], np.stack([raw.lower, raw.upper]), atol=1.0)


def test_error_bars_of_a_grid_laplace_cover_the_unsnapped_statistic():
  """An exact Laplace mechanism on a grid releases snap(x) + noise: snapping moves x
  by up to half a grid step, and the bars must cover the true x, not snap(x)
  (error_bars: "covers the true x_i with probability coverage_i, at least level").

  x = 0.124 per entry sits just below half of grid 0.25; 100,000 releases of 3
  entries (fixed keys); one-sided binomial test of coverage >= stated at 1e-6.
  """
  mech = jaxdp.LaplaceMechanism(1.0, 2.0, exact=True, grid=0.25)
  bars = jaxdp.error_bars(mech, 0.9, shape=(3,))
  x = jnp.full((3,), 0.124, jnp.float32)
  keys = jax.random.split(jax.random.key(3), 100_000)
  y = np.asarray(jax.vmap(lambda k: mech.randomize(k, x))(keys), np.float64)
  low, high = bars.interval(y)
  hits = (low <= 0.124) & (0.124 <= high)
  assert float(np.min(bars.coverage)) >= 0.9
  p = stats.binomtest(
    int(hits.sum()), hits.size, float(np.min(bars.coverage)), alternative="less"
  )
  assert p.pvalue > 1e-6, (hits.mean(), bars.coverage)


def test_poset_study_insertion_draws_follow_the_study_key():
  """Two studies with different keys (``--seed``) make independent draws, the
  insertion sampler's included: equal ratios from 200 draws each would mean the same
  draws (the insertion sampler was seeded with 0 whatever the key)."""
  rows = [
    studies.poset_study(
      jax.random.key(seed),
      jaxdp.Poset.nhis(1),
      num_samples=256,
      insertion_samples=200,
      noises=(),
    )
    for seed in (0, 1)
  ]
  assert rows[0]["exact_ratio"] != rows[1]["exact_ratio"]
  assert rows[0]["insertion_ratio"] != rows[1]["insertion_ratio"]


def _normal64(key, m):
  return jax.random.normal(key, (m,), jnp.float64)


def _offset(x):
  return 1e8 + x  # float32 rounds 1e8 + x to multiples of 8


def test_montecarlo_keeps_a_float64_statistic_in_float64():
  """estimate promises float64 means, variances and standard errors: a float64
  statistic (x64 on) with sd 1 around 10^8 must not be cast to float32, which
  rounds every value to 10^8 and reports variance 0. 2^16 draws: the sample
  variance of N(0, 1) has relative sd sqrt(2 / 2^16) = 0.0055; the bounds are 18 of
  those."""
  with jax.enable_x64(True):
    est = montecarlo.estimate(
      jax.random.key(0), _normal64, _offset, 1 << 16, chunk_size=1 << 14
    )
  assert 0.9 < float(est.var) < 1.1, est
  assert abs(float(est.mean) - 1e8) < 5 * float(est.stderr), est


@pytest.mark.parametrize("mark", ["int", "nan"])
def test_interval_refuses_a_refused_release(mark):
  """A refused release holds its dtype's mark (int32's minimum for an exact release,
  NaN for a float one); intervals around it mean nothing and must be refused, as
  consistent_error_bars refuses it, not returned as numbers around -2^31."""
  poset = jaxdp.Poset.nhis(1)
  mech = jaxdp.PosetCountMechanism(poset, 1.0, exact=True)
  bars = jaxdp.error_bars(mech, 0.9)
  if mark == "int":
    refused = np.full(mech.dim, np.iinfo(np.int32).min, np.int32)
  else:
    refused = np.array([10.0, 5.0, np.nan, 3.0, 2.0])
  with pytest.raises(ValueError, match="released"):
    bars.interval(refused)


@pytest.mark.parametrize("shape", [(-3,), (2.5,), (True,), 3, "3"])
def test_error_bars_refuse_a_shape_no_statistic_has(shape):
  """The grid Laplace's noise scale grows with the number of entries; a negative or
  fractional shape gave narrower bars (upper 3.125 for (-3,) against 6.375 for (3,))
  and an int an unclear TypeError: each must be a ValueError naming shape."""
  mech = jaxdp.LaplaceMechanism(1.0, 2.0, exact=True, grid=0.25)
  with pytest.raises(ValueError, match="shape"):
    jaxdp.error_bars(mech, 0.9, shape=shape)
