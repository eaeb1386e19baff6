"""The minimum-trace ellipse of the query and poset balls: containment of every hull
point (exact enumeration), optimality (a weak-duality certificate), the closed forms
against the numerical optimiser, and the reference figures."""

import itertools
import math

import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import CountBall, LpBall, Poset, PosetBall, SumBall, VoteBall, ellipse
from jaxdp.samplers.ellipse import (
  MARGIN,
  MAX_ELLIPSE_FILTERS,
  has_ellipse,
  optimal_design,
  poset_filters,
  trace_lower_bound,
)

CHAIN = Poset.from_parents([-1, 0, 1])
ANTICHAIN = Poset.from_parents([-1, -1, -1])
NHIS = Poset.nhis(1)
N_POSET = Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)])  # an induced N: not a forest

QUERY_BALLS = [
  SumBall(4, 1),
  SumBall(4, 2),
  SumBall(5, 5),
  CountBall(1, 1),
  CountBall(5, 1),
  CountBall(5, 2),
  CountBall(6, 3),
  CountBall(6, 5),  # k > d / 2: the design mixes two orbits
  CountBall(7, 7),
  VoteBall(2),
  VoteBall(3),
  VoteBall(5),
]
POSET_BALLS = [PosetBall(p) for p in (CHAIN, ANTICHAIN, NHIS, N_POSET)]


def hull(ball) -> np.ndarray:
  """Points whose convex hull is the ball, listed independently of the ellipse code
  for posets: +-(1, 1_F) over Poset.filters()."""
  if isinstance(ball, PosetBall):
    f = np.asarray(ball.poset.filters(), np.float64)
    v = np.concatenate([np.ones((f.shape[0], 1)), f], axis=1)
    return np.concatenate([v, -v])
  return ball.hull_points()


def gauge_sq(a: np.ndarray, v: np.ndarray) -> np.ndarray:
  """v^T A^-1 v per row, by a linear solve with the dense matrix (not the ellipse's
  own method)."""
  return np.einsum("ij,ji->i", v, np.linalg.solve(a, v.T))


@pytest.mark.parametrize("ball", QUERY_BALLS + POSET_BALLS, ids=repr)
def test_every_hull_point_is_inside_and_some_touch(ball):
  ell = ellipse(ball)
  g = gauge_sq(ell.matrix(), hull(ball))
  assert g.max() <= 1.0 / (1 + MARGIN) * (1 + 1e-12)
  assert g.max() >= 1.0 - 1e-5  # not loose: the ellipse touches the ball
  np.testing.assert_allclose(ell.gauge_sq(hull(ball)), g, rtol=1e-9)
  assert np.all(ell.contains(hull(ball)))
  assert not np.any(ell.contains(1.001 * hull(ball)[np.argmax(g)][None]))


@pytest.mark.parametrize("ball", QUERY_BALLS + POSET_BALLS, ids=repr)
def test_trace_is_within_the_duality_certificate(ball):
  """Any lam gives tr(A) >= (tr M(lam)^(1/2))^2 for every ellipse A containing the
  ball; the optimiser's lam (DESIGN_TOL 1e-5) certifies ours within 2e-5 (MARGIN is
  ~1e-6)."""
  points = hull(ball)
  lam, c = optimal_design(points)
  assert c <= 1 + 1e-5
  lower = trace_lower_bound(points, lam)
  assert lower <= ellipse(ball).trace <= lower * (1 + 2e-5)


def test_the_certificate_can_fail():
  """The spherical Gaussian's ellipse (the ball of the largest vertex norm) contains
  the vote ball but is far from the certificate; a random lam's bound is lower."""
  ball = VoteBall(5)
  points = hull(ball)
  lam, _ = optimal_design(points)
  sphere = ball.dim * ball.radius() ** 2
  assert sphere > 1.2 * trace_lower_bound(points, lam)
  rng = np.random.default_rng(0)
  for _ in range(5):
    r = rng.dirichlet(np.ones(points.shape[0]))
    assert trace_lower_bound(points, r) <= ellipse(ball).trace


@pytest.mark.parametrize("ball", QUERY_BALLS, ids=repr)
def test_closed_forms_match_the_numerical_optimum(ball):
  points = hull(ball)
  lam, _ = optimal_design(points)
  m = (points.T * lam) @ points
  w, q = np.linalg.eigh(m)
  half = np.sqrt(np.maximum(w, 0))
  a = (q * (half * half.sum())) @ q.T
  a *= np.max(gauge_sq(a, points))  # scaled to contain the points
  closed = ellipse(ball).matrix()
  np.testing.assert_allclose(np.trace(closed), np.trace(a), rtol=2e-5)
  np.testing.assert_allclose(closed, a, atol=2e-3 * np.trace(a) / ball.dim)


def test_the_papers_count_ellipse_fails_past_half():
  """All design weight on j = k (Joseph & Yu, Theorem 8.9, stated for k <= d / 2)
  gives an ellipse that misses vertices when k > d / 2; ours contains them."""
  d, k = 6, 5
  v1, v2 = k / math.sqrt(d), math.sqrt(k * (d - k) / d)
  total = v1 + v2 * math.sqrt(d - 1)
  along, across = total * v1, total * v2 / math.sqrt(d - 1)
  p = np.full((d, d), 1.0 / d)
  a = along * p + across * (np.eye(d) - p)
  points = hull(CountBall(d, k))
  assert np.max(gauge_sq(a, points)) > 1.05
  assert np.max(gauge_sq(ellipse(CountBall(d, k)).matrix(), points)) <= 1


# google-research k_norm/ellipse_norm_compare.py (Joseph & Yu's code for the paper):
# compare_count_norms(d, k) and compare_vote_norms(d), the ratio of the ellipse's
# expected squared norm to the l_2 ball's of radius sqrt(k) / the vote ball's radius,
# evaluated once from its formulas.
REFERENCE_COUNT = {
  (2, 1): 0.9999999999999999,
  (6, 2): 0.9624752955742645,
  (6, 3): 0.8726779962499649,
  (10, 3): 0.9349545416973504,
  (20, 5): 0.9137458608817689,
  (50, 25): 0.64,
  (100, 1): 1.0,
  (100, 10): 0.9516992462263972,
}
REFERENCE_VOTE = {
  2: 1.0000000000000002,
  4: 0.8435339299507948,
  5: 0.7771236166328255,
  10: 0.6036898095728539,
  50: 0.3897164700941002,
  100: 0.3452905840888135,
}


def _ratio(ball):
  return ellipse(ball).trace / (1 + MARGIN) / (ball.dim * ball.radius() ** 2)


@pytest.mark.parametrize("dk", sorted(REFERENCE_COUNT))
def test_count_ratio_matches_the_reference(dk):
  assert _ratio(CountBall(*dk)) == pytest.approx(REFERENCE_COUNT[dk], rel=1e-12)


@pytest.mark.parametrize("d", sorted(REFERENCE_VOTE))
def test_vote_ratio_matches_the_reference(d):
  assert _ratio(VoteBall(d)) == pytest.approx(REFERENCE_VOTE[d], rel=1e-12)


def test_vote_50_is_039_of_the_spherical_error():
  assert _ratio(VoteBall(50)) == pytest.approx(0.39, abs=0.005)


def test_sum_ball_is_the_sphere_of_radius_sqrt_k():
  ell = ellipse(SumBall(7, 3))
  np.testing.assert_allclose(ell.matrix(), 3 * (1 + MARGIN) * np.eye(7), rtol=1e-15)


def test_count_past_half_beats_the_best_single_orbit():
  """For k > d / 2 the optimal design mixes orbits: its trace is below every ellipse
  built on one orbit j and scaled to contain all of them."""
  d, k = 9, 8
  points = hull(CountBall(d, k))
  best_single = math.inf
  for j in range(1, k + 1):
    x = np.zeros(d)
    x[:j] = 1
    pts = np.array([np.roll(x, s) for s in range(d)])
    m = pts.T @ pts / d
    w, q = np.linalg.eigh(m)
    half = np.sqrt(np.maximum(w, 0))
    a = (q * (half * half.sum())) @ q.T
    best_single = min(best_single, np.trace(a) * np.max(gauge_sq(a, points)))
  assert ellipse(CountBall(d, k)).trace < best_single * (1 - 1e-4)


@pytest.mark.parametrize("poset", [CHAIN, ANTICHAIN, NHIS, N_POSET, Poset.nhis(2)])
def test_poset_filters_match_the_enumeration(poset):
  ours = {tuple(r) for r in poset_filters(poset).astype(int).tolist()}
  assert ours == {tuple(r) for r in np.asarray(poset.filters()).tolist()}
  assert len(ours) == poset_filters(poset).shape[0]


def test_too_many_filters_is_refused_by_name():
  big = Poset.from_parents([-1] * 14)  # 2^14 filters
  assert 2**14 > MAX_ELLIPSE_FILTERS
  assert not has_ellipse(PosetBall(big))
  with pytest.raises(ValueError, match="MAX_ELLIPSE_FILTERS = 8192"):
    ellipse(PosetBall(big))
  assert has_ellipse(PosetBall(Poset.from_parents([-1] * 13)))


def test_unsupported_ball_is_a_type_error():
  with pytest.raises(TypeError, match="jaxdp.SumBall.*LpBall"):
    ellipse(LpBall(3, 2))
  with pytest.raises(TypeError, match="ball must be"):
    ellipse("vote")
  with pytest.raises(TypeError, match="ball must be"):
    ellipse([VoteBall(3)])  # unhashable: still the clear error
  assert not has_ellipse(LpBall(3, 2))


def test_a_ball_subclass_is_refused():
  """A subclass may change the set (here a vote ball claiming twice the scores):
  the closed form would not contain it, so only the exact classes are accepted."""

  class Doubled(VoteBall):
    def hull_points(self):
      return 2 * super().hull_points()

  with pytest.raises(TypeError, match="not a subclass"):
    ellipse(Doubled(3))
  assert not has_ellipse(Doubled(3))


@pytest.mark.parametrize("ball", [CountBall(6, 5), VoteBall(4), PosetBall(NHIS)], ids=repr)
def test_apply_root_is_the_square_root(ball):
  ell = ellipse(ball)
  r = np.asarray(ell.apply_root(jnp.eye(ball.dim, dtype=jnp.float32)), np.float64)
  np.testing.assert_allclose(r @ r.T, ell.matrix(), rtol=1e-5, atol=1e-5 * ell.trace)
  np.testing.assert_allclose(ell.diagonal(), np.diag(ell.matrix()), rtol=1e-12)


def test_poset_ellipse_is_invariant_under_relabelling():
  """The same poset with its elements permuted gives the permuted ellipse (the
  optimum is unique up to the optimiser's tolerance)."""
  perm = [2, 0, 3, 1]
  order = np.asarray(N_POSET.order)
  edges = [
    (perm[i], perm[j])
    for i, j in itertools.product(range(4), repeat=2)
    if i != j and order[i, j]
  ]
  other = Poset.from_edges(4, edges)
  a, b = ellipse(PosetBall(N_POSET)).matrix(), ellipse(PosetBall(other)).matrix()
  full = [0] + [1 + p for p in perm]
  moved = np.empty_like(a)
  moved[np.ix_(full, full)] = a
  np.testing.assert_allclose(moved, b, atol=1e-4 * np.trace(a))
