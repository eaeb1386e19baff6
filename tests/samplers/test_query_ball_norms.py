"""The query balls' norms against an independent reference: the gauge of the convex
hull of their hull points, min sum(lam) s.t. H^T lam = v, lam >= 0, by linear
programming (scipy's HiGHS)."""

import math

import numpy as np
import pytest
from scipy.optimize import linprog

import jaxdp

BALLS = [
  jaxdp.SumBall(4, 1),
  jaxdp.SumBall(4, 2),
  jaxdp.SumBall(3, 3),
  jaxdp.CountBall(4, 1),
  jaxdp.CountBall(4, 2),
  jaxdp.CountBall(3, 3),
  jaxdp.VoteBall(2),
  jaxdp.VoteBall(3),
  jaxdp.VoteBall(4),
]


def lp_gauge(hull, v):
  res = linprog(np.ones(len(hull)), A_eq=hull.T, b_eq=v, bounds=(0, None), method="highs")
  return res.fun if res.status == 0 else math.inf


@pytest.mark.parametrize("ball", BALLS, ids=repr)
def test_norm_is_the_gauge_of_the_hull(ball):
  rng = np.random.default_rng(7)
  hull = ball.hull_points()
  r = ball.bounding_box()
  # random points, and points near the boundary (hull points scaled by 0.999..1.001)
  pts = list(rng.uniform(-1.3 * r, 1.3 * r, (150, ball.dim)))
  pts += [h * s for h in hull[:30] for s in (0.999, 1.001)]
  for v in pts:
    assert float(ball.norm(v)) == pytest.approx(lp_gauge(hull, v), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("ball", BALLS, ids=repr)
def test_radius_and_box(ball):
  hull = ball.hull_points()
  assert ball.radius() == pytest.approx(np.max(np.linalg.norm(hull, axis=1)))
  assert ball.bounding_box() == pytest.approx(np.max(np.abs(hull)))


@pytest.mark.parametrize(
  "make, bad",
  [
    (lambda: jaxdp.SumBall(3, 4), "k must be between 1 and d = 3"),
    (lambda: jaxdp.CountBall(3, 0), "k must be >= 1"),
    (lambda: jaxdp.VoteBall(1), "d must be >= 2"),
    (lambda: jaxdp.SumBall(5000, 1), "d must be at most"),
  ],
)
def test_bad_sizes_are_refused(make, bad):
  with pytest.raises(ValueError, match=bad):
    make()


def test_non_integer_sizes_are_refused():
  with pytest.raises(TypeError, match="k must be an integer"):
    jaxdp.SumBall(3, 1.5)
  with pytest.raises(TypeError, match="d must be an integer"):
    jaxdp.VoteBall(True)
