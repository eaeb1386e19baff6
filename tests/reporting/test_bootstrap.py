"""consistent_error_bars: the parametric bootstrap around a consistent release."""

import jax
import numpy as np
import pytest

import jaxdp

POSET = jaxdp.Poset.nhis(1)  # q2 and q4 require q1, q3 requires q2


def test_far_from_the_constraints_the_bootstrap_is_the_noise_law():
  """Counts far apart (relative to the noise) are never moved by the projection, so
  the bootstrap's percentile intervals are the noise law's quantiles: they agree
  with error_bars within both Monte Carlo errors (5 of them, fixed keys)."""
  mech = jaxdp.PosetCountMechanism(POSET, 1.0)
  z = np.array([10_000.0, 8000, 5000, 2000, 4000])
  boot = jaxdp.consistent_error_bars(z, mech, 0.9, key=jax.random.key(1), num_samples=2000)
  raw = jaxdp.error_bars(mech, 0.9, key=jax.random.key(2), num_samples=20_000)
  tol = 5 * (boot.mc_error + raw.mc_error)
  assert np.all(np.abs(boot.upper - raw.upper) <= tol)
  assert np.all(np.abs(boot.lower - raw.lower) <= tol)
  assert "approximate" in boot.method and "bootstrap" in boot.method
  assert boot.names == ("respondents", "q1", "q2", "q3", "q4")


def test_near_zero_the_interval_is_clipped_and_holds_the_released_value():
  """A rare follow-up released at 0: no count is negative, so the interval starts at
  0 and is one-sided (the projection pushes replicates up)."""
  mech = jaxdp.PosetCountMechanism(POSET, 0.5, exact=True)
  z = np.array([500, 300, 40, 0, 100])
  bars = jaxdp.consistent_error_bars(z, mech, integer=True, num_samples=2000)
  low, high = bars.interval(z)
  assert low[3] == 0 and high[3] > 0
  assert np.all(low <= z) and np.all(z <= high) and np.all(low >= 0)
  np.testing.assert_array_equal(low, np.round(low))  # integer replicates
  np.testing.assert_array_equal(high, np.round(high))


@pytest.mark.parametrize(
  "args, kwargs, err, match",
  [
    (([1.0, 2.0], None), {}, ValueError, r"released must have shape \(5,\)"),
    (([np.nan, 1, 1, 1, 1], None), {}, ValueError, "released must be finite"),
    (([5, 1, 1, 1, 1], "laplace"), {}, TypeError, "PosetCountMechanism of the release"),
    (([5, 1, 1, 1, 1], None), {"integer": 1}, TypeError, "integer must be True or False"),
    (([5, 1, 1, 1, 1], None), {"level": 1.2}, ValueError, "level must be strictly"),
    (([5, 1, 1, 1, 1], None), {"num_samples": 1}, ValueError, "num_samples must be"),
    (([5, 1, 1, 1, 1], None), {"level": 1e-300}, ValueError, "level must be at least 0.5"),
    (([5, 1, 4, 1, 1], None), {}, ValueError, "released is not consistent: q2 = 4 exceeds"),
    (([5, 6, 1, 1, 1], None), {}, ValueError, "q1 = 6 exceeds respondents = 5"),
    (([5, 1, -1, 0, 1], None), {}, ValueError, "released must be >= 0.*q2 = -1"),
    (([5, 1, 0.5, 0, 1], None), {"integer": True}, ValueError, "integers.*q2 = 0.5"),
    (([3e9, 1, 1, 0, 1], None), {"integer": True}, ValueError, "released has a value 3e"),
  ],
)
def test_bad_arguments(args, kwargs, err, match):
  released, mech = args
  mech = jaxdp.PosetCountMechanism(POSET, 1.0) if mech is None else mech
  with pytest.raises(err, match=match):
    jaxdp.consistent_error_bars(released, mech, **kwargs)


def test_the_published_value_lies_in_its_interval():
  """All counts equal on a chain (every constraint tight): the projection pushes the
  respondent count's replicates up, so at level 0.5 both its percentile ends lie
  above the released value (fixed default key); the interval must still hold it."""
  chain = jaxdp.Poset.from_edges(5, [(i + 1, i) for i in range(4)])
  mech = jaxdp.PosetCountMechanism(chain, 1.0, noise="laplace")
  bars = jaxdp.consistent_error_bars(np.full(6, 20.0), mech, 0.5, num_samples=200)
  assert np.all(bars.lower <= 0) and np.all(bars.upper >= 0)
  assert bars.lower[0] == 0 and np.all(bars.upper > 0)
