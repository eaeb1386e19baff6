"""advise for sum, count and vote queries: the baselines' closed forms, worked out
independently, and the query balls' Monte Carlo errors against balls they equal."""

import jax
import numpy as np
import pytest

import jaxdp


def test_baselines_match_their_closed_forms():
  """E||Y||^2 at eps = 2: Laplace 2 d (s_1 / eps)^2; K-norm l_inf (d + 1)(d + 2) d / 3
  (s / eps)^2; K-norm l_2 (d + 1) d (s / eps)^2 (E||Z||^2 = d / 3 and d / (d + 2))."""
  for ball, s1, sinf, s2sq in [
    (jaxdp.CountBall(4, 2), 2, 1, 2),
    (jaxdp.VoteBall(3), 3, 2, 5),
    (jaxdp.SumBall(3, 2), 2, 1, 2),
  ]:
    d = ball.dim
    advice = jaxdp.advise(ball, 2.0, num_samples=2_000)
    assert advice.option("laplace").total == pytest.approx(2 * d * s1**2 / 4)
    assert advice.option("linf").total == pytest.approx(
      (d + 1) * (d + 2) * d / 3 * sinf**2 / 4
    )
    assert advice.option("l2").total == pytest.approx((d + 1) * d * s2sq / 4)
    assert "gaussian" not in [o.noise for o in advice.options]


@pytest.mark.parametrize(
  "ball, same",
  [(jaxdp.SumBall(3, 1), "laplace"), (jaxdp.SumBall(3, 3), "linf")],
)
def test_query_ball_error_matches_the_ball_it_equals(ball, same):
  """SumBall(d, 1) is the l_1 ball (K-norm noise: i.i.d. Laplace) and SumBall(d, d)
  the cube: their errors must agree with the closed forms, within 4 standard errors
  where the ball's is Monte Carlo (20,000 points, fixed key), to rounding where the
  ball has an exact second moment."""
  advice = jaxdp.advise(ball, 1.0, key=jax.random.key(5), num_samples=20_000)
  got, exact = advice.option("ball"), advice.option(same)
  tol = 4 * got.total_stderr if got.total_stderr else 1e-9 * exact.total
  assert abs(got.total - exact.total) <= tol


def test_the_count_ball_is_recommended_and_gaussian_needs_delta():
  advice = jaxdp.advise(jaxdp.CountBall(4, 2), 1.0, 1e-6, num_samples=2_000)
  assert advice.recommended == "ball"
  assert advice.option("gaussian").mechanism.sensitivity == pytest.approx(np.sqrt(2))
  assert "count ball" in str(advice)
  assert advice.to_dict()["recommended"] == "ball"


def test_bad_arguments_are_refused():
  with pytest.raises(ValueError, match="assumed_counts is for poset counts"):
    jaxdp.advise(jaxdp.VoteBall(3), 1.0, assumed_counts=[1, 2, 3])
  with pytest.raises(TypeError, match="poset must be a jaxdp.Poset or a query ball"):
    jaxdp.advise(jaxdp.LpBall(3, 2.0), 1.0)
  with pytest.raises(ValueError, match="delta"):
    jaxdp.advise(jaxdp.VoteBall(3), 1.0, 1.5)
  with pytest.raises(ValueError, match="num_samples"):
    jaxdp.advise(jaxdp.VoteBall(3), 1.0, num_samples=10)


def test_at_delta_the_elliptic_gaussian_is_compared():
  # vote, d = 50: the elliptic Gaussian's squared error over the spherical one's is
  # (w1 + sqrt(d - 1) w2)^2 / (d * r^2) with w1 = sqrt(d) (d - 1) / 2, w2 = sqrt(d (d^2
  # - 1) / 12) and r^2 = (d - 1) d (2d - 1) / 6 (Joseph & Yu 2024, Theorem 9.10; both
  # have the same sigma, the spherical one with l_2 sensitivity r)
  d = 50
  w1, w2 = np.sqrt(d) * (d - 1) / 2, np.sqrt(d * (d**2 - 1) / 12)
  ratio = (w1 + np.sqrt(d - 1) * w2) ** 2 / (d * (d - 1) * d * (2 * d - 1) / 6)
  advice = jaxdp.advise(jaxdp.VoteBall(d), 1.0, 1e-6)
  got = advice.option("elliptic").total / advice.option("gaussian").total
  assert got == pytest.approx(ratio * (1 + 2**-20), rel=1e-9)  # widened by 2^-20
  assert 0.385 < ratio < 0.395
  assert advice.recommended == "elliptic"
  assert "elliptic" not in [o.noise for o in jaxdp.advise(jaxdp.VoteBall(d), 1.0).options]
