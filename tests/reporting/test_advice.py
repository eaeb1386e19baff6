"""jaxdp.advise: the closed forms against independent formulas and Monte Carlo, the
recommendation where the answer is known, and bad arguments."""

import json
import math

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.experiments.studies import exact_mse
from jaxdp.reporting import moments, noise_law, poset_law
from jaxdp.reporting.advice import default_counts


def _chain(d):
  return jaxdp.Poset.from_edges(d, [(i + 1, i) for i in range(d - 1)])


def _antichain(d):
  return jaxdp.Poset.from_edges(d, [])


def _antichain_moment(d):
  """E[Z_i^2] for Z uniform in an antichain's poset ball, by hand: the ball is the
  image of the cube [-1, 1]^(d+1) under (t, u) -> (t, (u + t) / 2) (its vertices
  +-(1, 1_S) for every S), so E[Z_0^2] = 1/3 and E[Z_i^2] = (1/3 + 1/3) / 4."""
  return np.r_[1 / 3, np.full(d, 1 / 6)]


def _chain_moment(d):
  """E[Z_i^2] for a chain's poset ball, by hand: in differences w_i = z_i - z_(i+1)
  its vertices +-(1, .., 1, 0, .., 0) become +-e_k, so the ball is the image of the
  l_1 ball (E[W W^T] = 2 I / ((D + 1)(D + 2))) under the summing matrix."""
  dim = d + 1
  return 2.0 * (dim - np.arange(dim)) / ((dim + 1) * (dim + 2))


@pytest.fixture(scope="module")
def nhis1():
  return jaxdp.advise(jaxdp.Poset.nhis(1), 0.5, 1e-6, num_samples=2000)


def test_closed_forms_match_the_studies_and_independent_formulas(nhis1):
  poset, eps, dim = jaxdp.Poset.nhis(1), 0.5, 5
  for noise in ("linf", "l2", "laplace"):
    assert nhis1.option(noise).total == pytest.approx(
      exact_mse(poset, eps, noise), rel=1e-12
    )
  moment = np.trace(jaxdp.exact_second_moment(poset))
  assert nhis1.option("poset").total == pytest.approx(
    exact_mse(poset, eps, "poset", moment)
  )
  assert nhis1.option("poset").method.startswith("exact")
  sigma = jaxdp.GaussianMechanism(eps, 1e-6, math.sqrt(dim), calibration="analytic").sigma
  np.testing.assert_allclose(nhis1.option("gaussian").per_coordinate, sigma**2)
  np.testing.assert_allclose(nhis1.option("laplace").per_coordinate, 2 * (dim / eps) ** 2)


def test_chain_moment_matches_the_hand_formula():
  got = moments.squared_error(noise_law(jaxdp.PosetCountMechanism(_chain(5), 0.5)), 6)
  np.testing.assert_allclose(
    got.per_coordinate, 7 * 8 / 0.25 * _chain_moment(5), rtol=1e-12
  )


def test_antichain_moment_matches_the_hand_formula():
  got = moments.squared_error(noise_law(jaxdp.PosetCountMechanism(_antichain(4), 1.0)), 5)
  assert got.method.startswith("exact")
  np.testing.assert_allclose(got.per_coordinate, 42 * _antichain_moment(4), rtol=1e-12)


@pytest.mark.statistical
def test_monte_carlo_moment_matches_the_enumerated_one(monkeypatch):
  """A poset ball too large to enumerate takes the mean of Z_i^2 over exactly uniform
  points: on NHIS-1 (forced) it agrees with the enumeration, 4.5 standard errors per
  coordinate (fixed key)."""
  law = noise_law(jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 2.0))
  exact = moments.squared_error(law, 5)
  monkeypatch.setattr(poset_law, "ENUMERATE_MAX_OBJECTS", 10)
  mc = moments.squared_error(law, 5, key=jax.random.key(3), num_samples=8192)
  assert mc.method.startswith("Monte Carlo") and np.all(mc.stderr > 0)
  assert np.all(np.abs(mc.per_coordinate - exact.per_coordinate) <= 4.5 * mc.stderr)


@pytest.mark.parametrize(
  "poset, delta, best",
  [
    # D = 5, eps = 1: l_inf 70; a chain's poset ball 42 * 5 / 7 = 30, an antichain's
    # 42 (1/3 + 4/6) = 42; Gaussian 25 sigma^2 with sigma = 1.333 at delta = 0.05
    # (44.4), 1.086 at delta = 0.1 (29.5), 4.4 at delta = 1e-6; elliptic Gaussian
    # sigma^2 tr(A), tr(A) = 9.36 for the chain (16.6 at delta = 0.05), 11.66 for the
    # antichain (13.7 at delta = 0.1, 226 at delta = 1e-6)
    (_chain(4), 0.0, "poset"),
    (_chain(4), 0.05, "elliptic"),
    (_antichain(4), 0.1, "elliptic"),
    (_antichain(4), 1e-6, "poset"),
    (_antichain(4), 0.0, "poset"),
    (jaxdp.Poset.nhis(1), 0.0, "poset"),
  ],
)
def test_recommendation_where_the_answer_is_known(poset, delta, best):
  got = jaxdp.advise(poset, 1.0, delta, consistency=False)
  assert got.recommended_consistent is None and "not simulated" in str(got)
  assert got.recommended == best
  assert [o.total for o in got.options] == sorted(o.total for o in got.options)
  assert ("gaussian" in [o.noise for o in got.options]) == (delta > 0)
  assert ("elliptic" in [o.noise for o in got.options]) == (delta > 0)


def test_figure4_ordering_on_nhis(nhis1):
  """Joseph, Ribero & Yu, Figure 4: on NHIS the poset ball beats l_inf, which beats
  the l_2 ball and Laplace (per-coordinate too)."""
  order = [o.noise for o in nhis1.options if o.noise not in ("gaussian", "elliptic")]
  assert order == ["poset", "linf", "l2", "laplace"]
  assert np.all(nhis1.option("poset").per_coordinate < nhis1.option("linf").per_coordinate)


def test_consistency_column_and_outputs(nhis1):
  for o in nhis1.options:  # projection never moves farther from feasible counts
    assert o.consistent_total <= o.total + 4 * (o.total_stderr + o.consistent_total_stderr)
  text = str(nhis1)
  assert "recommended: K-norm, poset ball" in text and "10,000 respondents" in text
  data = json.loads(json.dumps(nhis1.to_dict()))
  assert data["recommended"] == "poset" and len(data["options"]) == 6
  assert list(data["assumed_counts"]) == ["respondents", "q1", "q2", "q3", "q4"]


def test_default_counts_are_feasible_and_halve_with_each_requirement():
  x = jaxdp.reporting.default_counts(_chain(3), 800)
  np.testing.assert_array_equal(x, [800, 400, 200, 100])


@pytest.mark.parametrize(
  "args, kwargs, err, match",
  [
    (("nhis1", 1.0), {}, TypeError, "poset must be a jaxdp.Poset"),
    ((None, 0.0), {}, ValueError, "eps"),
    ((None, float("nan")), {}, ValueError, "eps"),
    ((None, 1.0, -0.1), {}, ValueError, "delta must be a number in"),
    ((None, 1.0, 1.0), {}, ValueError, "delta must be a number in"),
    ((None, 1.0, "1e-6"), {}, ValueError, "delta must be a number in"),
    ((None, 1.0), {"assumed_counts": [1, 2]}, ValueError, r"shape \(5,\)"),
    ((None, 1.0), {"assumed_counts": [10, 5, 6, 1, 1]}, ValueError, "q2 requires q1"),
    ((None, 1.0), {"assumed_counts": [10, 11, 6, 1, 1]}, ValueError, "q1 exceeds"),
    ((None, 1.0), {"assumed_counts": [10, -1, 0, 0, 0]}, ValueError, ">= 0"),
    ((None, 1.0), {"num_samples": 5}, ValueError, "num_samples must be >= 100"),
    ((None, 1.0), {"consistency": 1}, TypeError, "consistency must be True or False"),
  ],
)
def test_bad_arguments(args, kwargs, err, match):
  if args[0] is None:
    args = (jaxdp.Poset.nhis(1), *args[1:])
  with pytest.raises(err, match=match):
    jaxdp.advise(*args, **kwargs)


@pytest.mark.parametrize("respondents", [1e8, 1e12])
def test_consistency_column_is_exact_at_large_counts(respondents):
  # Far from the constraints the projection changes nothing, so the error after it
  # equals the raw error; float32 sums of 1e12 counts and noise of order 1 do not.
  x = default_counts(_chain(3), respondents)
  adv = jaxdp.advise(_chain(3), 1.0, assumed_counts=x, num_samples=2000)
  for o in adv.options:
    se = math.hypot(o.total_stderr, o.consistent_total_stderr)
    assert abs(o.consistent_total - o.total) <= 4 * se, (
      o.noise,
      o.consistent_total,
      o.total,
    )
  # the float64 simulation leaves the float32 path as it was (cached schedules too)
  y = np.asarray(x, np.float32) + np.float32([[0, 1, -1, 2], [0, -2, 3, 1]])
  z = np.asarray(jaxdp.consistent(y, _chain(3), method="batched"))
  assert z.dtype == np.float32 and np.all(np.diff(z, axis=1) <= 0)
