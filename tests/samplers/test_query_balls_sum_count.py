"""The sum and count balls' samplers and exact moments against independent references:
the Irwin-Hall CDF in rational arithmetic, triangulations of the hull points, the
bounding-box rejection sampler and stated statistical tests with fixed keys."""

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import spatial, stats

import jaxdp
from jaxdp.samplers.count_ball import MAX_MOMENT_D
from jaxdp.samplers.cube_slice import (
  log_slice_volumes,
  rejection_fill,
  shuffle_proposal,
  slice_table,
)
from jaxdp.samplers.norm_ball import MAX_QUERY_D, rejection_points
from jaxdp.samplers.query_draws import narrow_points
from jaxdp.samplers.slice_kernel import (
  MAX_EXPONENTIAL,
  ProposalTable,
  proposal_table,
)
from tests.helpers.slices import two_group_candidates

P_MIN = 1e-4  # every stated test rejects at this p-value


# Compiled once per (ball, size, dtype): called eagerly, every jnp operation of a
# ball's sampler would compile a program of its own.
@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def ball_points(ball, key, m, dtype):
  """``ball.points(key, m, dtype)``, compiled."""
  return ball.points(key, m, dtype)


@functools.partial(jax.jit, static_argnums=(0, 2, 3))
def jit_rejection_points(ball, key, m, dtype):
  """:func:`rejection_points`, compiled."""
  return rejection_points(ball, key, m, dtype)


def irwin_hall(n, s):
  """P(U_1 + ... + U_n <= s) for rational s >= 0, exactly."""
  s = Fraction(s)
  top = min(n, math.floor(s))
  return sum((-1) ** i * math.comb(n, i) * (s - i) ** n for i in range(top + 1)) / (
    math.factorial(n)
  )


def triangulated_moment(points):
  """E[Z Z^T] for Z uniform in the convex hull of ``points``, from a Delaunay
  triangulation: each simplex's exact moment, weighted by its volume."""
  tri = spatial.Delaunay(points)
  dim = points.shape[1]
  total, vol = np.zeros((dim, dim)), 0.0
  for simplex in tri.simplices:
    v = points[simplex]
    size = abs(np.linalg.det(v[1:] - v[0]))
    s = v.sum(axis=0)
    n = dim + 1
    total += size * (v.T @ v + np.outer(s, s)) / (n * (n + 1))
    vol += size
  return total / vol


def chi2_two_sample(a, b):
  """p-value of a chi-square test that two samples of cell labels share one law."""
  cells = np.union1d(a, b)
  table = np.array([[np.sum(x == c) for c in cells] for x in (a, b)])
  return stats.chi2_contingency(table)[1]


def cell_labels(z, bins=4):
  """Each point's cell of a grid of ``bins``^dim cells over [-1, 1]^dim."""
  idx = np.clip(((np.asarray(z) + 1) / 2 * bins).astype(int), 0, bins - 1)
  return idx @ (bins ** np.arange(idx.shape[1]))


def test_slice_volumes_match_irwin_hall():
  for k in range(1, 13):
    got = np.exp(log_slice_volumes(12, k))
    want = [float(irwin_hall(m, k)) for m in range(13)]
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize(
  "ball",
  [
    jaxdp.SumBall(3, 1),
    jaxdp.SumBall(3, 2),
    jaxdp.SumBall(4, 2),
    jaxdp.SumBall(4, 3),
    jaxdp.SumBall(4, 4),
    jaxdp.CountBall(3, 1),
    jaxdp.CountBall(3, 2),
    jaxdp.CountBall(4, 2),
    jaxdp.CountBall(4, 3),
    jaxdp.CountBall(4, 4),
  ],
)
def test_second_moment_matches_triangulation(ball):
  want = triangulated_moment(ball.hull_points())
  np.testing.assert_allclose(ball.second_moment(), want, atol=1e-12)
  assert ball.expected_sq_norm() == pytest.approx(np.trace(want), abs=1e-11)


def test_sum_ball_l1_and_cube_moments():
  """k = 1 is the l_1 ball (E Z_1^2 = 2 / ((d + 1)(d + 2))), k = d the cube (1/3)."""
  d = 7
  assert jaxdp.SumBall(d, 1).second_moment()[0, 0] == pytest.approx(2 / (8 * 9))
  np.testing.assert_allclose(jaxdp.SumBall(d, d).second_moment(), np.eye(d) / 3)


def test_count_ball_second_moment_limit():
  with pytest.raises(ValueError, match=f"d = {MAX_MOMENT_D + 1}"):
    jaxdp.CountBall(MAX_MOMENT_D + 1, 2).second_moment()


@pytest.mark.statistical
@pytest.mark.parametrize(
  "ball", [jaxdp.SumBall(3, 2), jaxdp.CountBall(3, 2), jaxdp.CountBall(4, 2)]
)
def test_points_match_rejection_sampler(ball):
  """Chi-square two-sample test (p > 1e-4) on the cells of a 4^d grid: 20,000 points
  against 20,000 of the bounding-box rejection sampler (an independent algorithm)."""
  n = 20_000
  got = ball_points(ball, jax.random.key(11), n, jnp.float32)
  ref = jit_rejection_points(ball, jax.random.key(12), n, jnp.float32)
  assert chi2_two_sample(cell_labels(got), cell_labels(ref)) > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("d, k", [(6, 2), (12, 5)])
def test_count_ball_orthant_classes(d, k):
  """The number of positive coordinates, 40,000 draws, against the exact class
  weights C(d, j) vol S(j, k) vol S(d - j, k) j! (d - j)! / d! (chi-square, p >
  1e-4). (12, 5) takes the tilted proposal for 11 coordinates, the simplex and the
  cube for others."""
  z = np.asarray(jaxdp.random.count_ball(jax.random.key(21), d, k, (40_000,)))
  counts = np.bincount((z > 0).sum(axis=1), minlength=d + 1)
  w = np.array(
    [
      float(irwin_hall(j, k) * irwin_hall(d - j, k))  # times C(d, j) j!(d-j)!/d! = 1
      for j in range(d + 1)
    ]
  )
  assert np.all(np.count_nonzero(z, axis=1) == d)  # no coordinate exactly 0
  assert stats.chisquare(counts, w / w.sum() * counts.sum()).pvalue > P_MIN


def abs_marginal_cdf(d, k, t):
  """P(|Z_1| <= t) for Z uniform in the sum ball: int_0^t F_{d-1}(k - u) du / F_d(k),
  exactly (the Irwin-Hall CDF integrated term by term)."""
  t = Fraction(t)
  num = sum(
    (-1) ** i * math.comb(d - 1, i) * (Fraction(k - i) ** d - (k - i - t) ** d)
    for i in range(k)
  ) / math.factorial(d)
  return num / irwin_hall(d, k)


@pytest.mark.statistical
@pytest.mark.parametrize("d, k", [(11, 5), (50, 15), (50, 3), (12, 7)])
def test_sum_ball_marginal_and_radius(d, k):
  """40,000 draws: |Z_1| in 20 equal bins against its exact law (chi-square), and
  ||Z||_K^d uniform on [0, 1] (Kolmogorov-Smirnov), each p > 1e-4. (11, 5), (50, 15)
  and (50, 3) take the wrapped simplex (a = 10, 18 and 3), (12, 7) the cube."""
  z = jaxdp.random.sum_ball(jax.random.key(31), d, k, (40_000,))
  edges = [Fraction(i, 20) for i in range(21)]
  cdf = np.array([float(abs_marginal_cdf(d, k, t)) for t in edges])
  counts = np.histogram(np.abs(np.asarray(z[:, 0])), bins=np.linspace(0, 1, 21))[0]
  assert stats.chisquare(counts, np.diff(cdf) * len(z)).pvalue > P_MIN
  norm = np.asarray(jaxdp.SumBall(d, k).norm(z), np.float64)
  assert stats.kstest(norm**d, "uniform").pvalue > P_MIN


@pytest.mark.slow
@pytest.mark.statistical
def test_count_ball_radius_and_moments():
  """CountBall(50, 10) (tilted and simplex proposals), 40,000 draws: all finite and
  in the ball (as test_count_ball_points_lie_in_ball checks at k = 1 and 50), ||Z||_K^d
  uniform (Kolmogorov-Smirnov, p > 1e-4) and E[Z_1^2], E[Z_1 Z_2] within 5 standard
  errors of the exact second moment."""
  d, k = 50, 10
  ball = jaxdp.CountBall(d, k)
  z = jaxdp.random.count_ball(jax.random.key(41), d, k, (40_000,))
  assert bool(jnp.all(jnp.isfinite(z)))
  assert float(jnp.max(ball.norm(z))) <= 1.0
  z = np.asarray(z, float)
  assert stats.kstest(np.asarray(ball.norm(z)) ** d, "uniform").pvalue > P_MIN
  exact = ball.second_moment()
  for a, b in ((0, 0), (0, 1), (3, 7)):
    prod = z[:, a] * z[:, b]
    se = prod.std() / math.sqrt(len(z))
    assert abs(prod.mean() - exact[a, b]) < 5 * se


@pytest.mark.statistical
def test_sum_ball_k1_is_l1_ball_and_k_d_is_cube():
  """SumBall(6, 1) against the l_1 ball's sampler (a different construction) and
  SumBall(6, 6)'s coordinates against U(-1, 1): Kolmogorov-Smirnov, p > 1e-4."""
  a = jaxdp.random.sum_ball(jax.random.key(51), 6, 1, (20_000,))
  b = jaxdp.random.lp_ball(jax.random.key(52), 6, 1, (20_000,))
  for col in (0, 5):
    assert stats.ks_2samp(np.asarray(a[:, col]), np.asarray(b[:, col])).pvalue > P_MIN
  assert stats.ks_2samp(np.abs(a).sum(1), np.abs(b).sum(1)).pvalue > P_MIN
  c = np.asarray(jaxdp.random.sum_ball(jax.random.key(53), 6, 6, (20_000,)))
  assert stats.kstest(c[:, 2], "uniform", args=(-1, 2)).pvalue > P_MIN


# 40,000 points: the kernels of the marginal test (k = 15) and the count ball's radius
# test (k = 10), compiled once for both
@pytest.mark.parametrize("k", [1, 15, 49, 50])
def test_sum_ball_points_lie_in_ball(k):
  z = jaxdp.random.sum_ball(jax.random.key(61), 50, k, (40_000,))
  assert bool(jnp.all(jnp.isfinite(z)))
  assert float(jnp.max(jaxdp.SumBall(50, k).norm(z))) <= 1.0


@pytest.mark.parametrize("k", [1, 50])  # k = 10: test_count_ball_radius_and_moments
def test_count_ball_points_lie_in_ball(k):
  z = jaxdp.random.count_ball(jax.random.key(62), 50, k, (40_000,))
  assert bool(jnp.all(jnp.isfinite(z)))
  assert float(jnp.max(jaxdp.CountBall(50, k).norm(z))) <= 1.0


def test_float64_draws():
  with jax.enable_x64(True):
    for draw, ball in (
      (jaxdp.random.sum_ball, jaxdp.SumBall(5, 2)),
      (jaxdp.random.count_ball, jaxdp.CountBall(5, 2)),
    ):
      z = draw(jax.random.key(71), 5, 2, (200,), jnp.float64)
      assert z.dtype == jnp.float64
      assert float(jnp.max(ball.norm(z))) <= 1.0
      # float64 precision: the values are not float32 numbers
      assert np.mean(np.asarray(z) != np.asarray(z, np.float32)) > 0.9


def test_narrow_dtypes_stay_in_ball_unshrunk():
  """float16 / bfloat16 points lie in the ball, and their mean |z|^2 / d matches the
  exact second moment within 4 standard errors (32,768 rows). Rounding every row
  toward zero fails both: in bfloat16 the sum and count balls' means fall more than
  4 standard errors low, and vote ball points land outside."""
  for dtype in (jnp.float16, jnp.bfloat16):
    for draw, ball, args in (
      (jaxdp.random.sum_ball, jaxdp.SumBall(50, 15), (50, 15)),
      (jaxdp.random.count_ball, jaxdp.CountBall(50, 15), (50, 15)),
      (jaxdp.random.vote_ball, jaxdp.VoteBall(20), (20,)),
    ):
      z = draw(jax.random.key(72), *args, (1 << 15,), dtype)
      assert z.dtype == dtype
      assert float(jnp.max(ball.norm(z.astype(jnp.float32)))) <= 1.0
      per_row = np.mean(np.asarray(z, np.float64) ** 2, axis=1)
      exact = float(np.trace(ball.second_moment())) / ball.dim
      se = np.std(per_row) / np.sqrt(per_row.size)
      assert abs(np.mean(per_row) - exact) < 4 * se, (dtype, ball.name)


class _EdgeInterval:
  """A stand-in ball [-0.3, 0.3] (0.3 is no bfloat16 number) whose points are 0.2999
  or 0.1, each with probability 1/2: 0.2999 rounds to nearest as 0.30078 (outside),
  and toward zero as 0.29883 (inside)."""

  dim = 1

  def points(self, key, m, dtype):
    edge = jax.random.bernoulli(key, 0.5, (m, 1))
    return jnp.where(edge, 0.2999, 0.1).astype(dtype)

  def norm(self, v):
    return jnp.abs(v[..., 0]) / 0.3


def test_narrow_points_redraws_rows_that_round_out():
  """A row that rounding to nearest pushes out of the ball is replaced by a fresh
  draw that rounds inside, never kept shrunk toward zero: of 4,096 bfloat16 rows of
  :class:`_EdgeInterval`, every one is bfloat16(0.1) (shrinking would keep about half
  at 0.29883), while float32 rows keep both values."""
  ball = _EdgeInterval()
  z = jax.jit(lambda k: narrow_points(ball, k, 4096, jnp.float32, jnp.bfloat16))(
    jax.random.key(5)
  )
  assert z.dtype == jnp.bfloat16 and z.shape == (4096, 1)
  np.testing.assert_array_equal(np.asarray(z, np.float32), np.float32(jnp.bfloat16(0.1)))
  wide = narrow_points(ball, jax.random.key(5), 4096, jnp.float32, jnp.float32)
  assert 1500 < int(jnp.sum(wide == np.float32(0.2999))) < 2600


@pytest.mark.parametrize(
  "ball",
  [jaxdp.SumBall(5, 2), pytest.param(jaxdp.CountBall(5, 2), marks=pytest.mark.slow)],
)
def test_vmap_and_jit_give_the_same_draws(ball):
  keys = jax.random.split(jax.random.key(81), 3)
  one = lambda key: ball.points(key, 7, jnp.float32)
  batched = jax.jit(jax.vmap(one))(keys)
  for i in range(3):
    np.testing.assert_array_equal(batched[i], jax.jit(one)(keys[i]))
  assert not np.allclose(batched[0], batched[1])
  # 200,000 vectors: the noise law test's kernel
  noise = lambda key, eps: jaxdp.random.knorm(key, ball, eps, (200_000,))
  np.testing.assert_allclose(
    jax.jit(noise)(keys[0], 0.5), noise(keys[0], 0.5), rtol=1e-6, atol=1e-6
  )


def test_low_acceptance_at_the_largest_dimension_ends():
  """At d = MAX_QUERY_D, k = d / 6 (near the worst k), the wrapped simplex accepts
  above 10%: draws end, inside the ball (no fallback)."""
  d = MAX_QUERY_D
  k = d // 6
  assert math.exp(slice_table(d, k).log_acc[d]) < 0.01  # the tilted proposal's
  assert math.exp(shuffle_proposal(d, k)[2]) > 0.1  # the wrapped simplex's
  z = ball_points(jaxdp.SumBall(d, k), jax.random.key(91), 3, jnp.float32)
  assert float(jnp.max(jaxdp.SumBall(d, k).norm(z))) <= 1.0
  assert bool(jnp.all(jnp.isfinite(z)))


@pytest.mark.slow
def test_count_ball_at_the_largest_dimension_ends():
  """Both slices of a row are retried on their own: at d = MAX_QUERY_D (slice
  acceptances near 1%) a draw ends, inside the ball."""
  ball = jaxdp.CountBall(MAX_QUERY_D, MAX_QUERY_D // 7)
  z = ball_points(ball, jax.random.key(92), 3, jnp.float32)
  assert bool(jnp.all(jnp.isfinite(z)))
  assert float(jnp.max(ball.norm(z))) <= 1.0


def check_uniform_in_slice(x, m, k):
  """x_1 in 20 bins against its exact law on S(m, k) and floor(sum(x)) against the
  Eulerian weights A(m, i), i < k (chi-square, each p > 1e-4)."""
  n = len(x)
  edges = [Fraction(i, 20) for i in range(21)]
  cdf = np.array([float(abs_marginal_cdf(m, k, t)) for t in edges])
  counts = np.histogram(x[:, 0], bins=np.linspace(0, 1, 21))[0]
  assert stats.chisquare(counts, np.diff(cdf) * n).pvalue > P_MIN
  slices = np.bincount(np.floor(x.sum(axis=1)).astype(int), minlength=k)
  euler = np.array([float(irwin_hall(m, i + 1) - irwin_hall(m, i)) for i in range(k)])
  assert stats.chisquare(slices, euler / euler.sum() * n).pvalue > P_MIN


def fill_slices(table, k, sizes, key, d):
  """Rows of two groups, the first ``sizes`` (``(n,)``, static) coordinates and the
  rest, each filled by its first accepted proposal of ``table``."""
  candidates = two_group_candidates(table, k, sizes, d)
  fill = jax.jit(lambda key: rejection_fill(candidates, key, len(sizes), d, 2, jnp.float32))
  return np.asarray(fill(key))


@pytest.mark.statistical
def test_tilted_proposal_is_uniform_in_the_slice():
  """The tilted proposal alone, on S(11, 5) with its host rate (a table that takes it
  for every size): 40,000 points of x_1 and floor(sum(x)) against their exact laws
  (:func:`check_uniform_in_slice`)."""
  m, k, n = 11, 5, 40_000
  lam = slice_table(m, k).lam
  assert lam[m] > 0
  scale = np.where(lam > 0, -np.expm1(-lam), 1.0)
  table = ProposalTable(
    np.zeros(m + 1, np.int64), lam, scale, np.zeros((m + 1, k)), np.zeros(m + 1)
  )
  x = fill_slices(table, k, np.full(n, m), jax.random.key(95), m)
  check_uniform_in_slice(x, m, k)


@pytest.mark.statistical
def test_wrapped_halves_are_uniform_in_their_slices():
  """The count ball's halves: rows of per-row sizes j in {3, 8} and 12 - j, k = 4,
  whose sizes 8 and 9 take the wrapped simplex (a = 10 and 6, gathered per row) and 3
  and 4 the cube; 20,000 rows of each: each wrapped half's x_1 and floor(sum(x))
  against their exact laws (:func:`check_uniform_in_slice`). A wrong a or threshold
  changes the slab weights."""
  d, k, n = 12, 4, 20_000
  table = proposal_table(d, k)
  assert table.a[8] == 10 and table.a[9] == 6 and table.a[3] == table.a[4] == 0
  sizes = np.tile([3, 8], n)
  x = fill_slices(table, k, sizes, jax.random.key(96), d)
  check_uniform_in_slice(x[sizes == 8][:, :8], 8, k)
  check_uniform_in_slice(x[sizes == 3][:, 3:], 9, k)


def test_threshold_window_drops_only_unreachable_slabs():
  """k above the window: every wrapped size keeps its thresholds of the last slabs
  exactly (against :func:`shuffle_proposal`'s, computed on their own) and drops only
  slabs whose threshold is at least MAX_EXPONENTIAL (above every Exp(1) variate of a
  float32 or float64 uniform, 52 log 2)."""
  d, k = 400, 130
  table = proposal_table(d, k)
  width = table.thresholds.shape[1]
  assert width < k and MAX_EXPONENTIAL > 52 * math.log(2)
  wrapped = np.flatnonzero(table.a)
  assert len(wrapped) > 100
  for m in wrapped[::25]:
    a, full, log_acc = shuffle_proposal(int(m), k)
    assert a == table.a[m] and log_acc == pytest.approx(table.log_acc[m], abs=1e-9)
    assert np.all(full[: k - width] >= MAX_EXPONENTIAL)
    kept = np.minimum(full[::-1][:width], MAX_EXPONENTIAL)
    np.testing.assert_allclose(table.thresholds[m], kept, rtol=1e-9, atol=1e-9)


@pytest.mark.statistical
@pytest.mark.parametrize(
  "ball",
  [jaxdp.CountBall(5, 2), jaxdp.CountBall(6, 6), jaxdp.SumBall(5, 2), jaxdp.VoteBall(4)],
  ids=repr,
)
def test_knorm_noise_law(ball):
  """K-norm noise of density prop. to exp(-eps ||y||_K): ||Y||_K ~ Gamma(d, 1 / eps)
  (its density is prop. to r^(d - 1) exp(-eps r); KS) and E[Y Y^T] = (d + 1)(d + 2) /
  eps^2 E[Z Z^T] (the exact second moment; every entry within 5 standard errors).
  The count ball draws its noise from Gamma(j) and Gamma(d - j) variates, not from a
  uniform point times a radius, so this checks that construction against the law
  itself. n = 200,000, eps = 2."""
  d, eps, n = ball.d, 2.0, 200_000
  y = np.asarray(jaxdp.random.knorm(jax.random.key(11), ball, eps, (n,)), np.float64)
  r = np.asarray(ball.norm(y))
  assert stats.kstest(r, stats.gamma(d, scale=1 / eps).cdf).pvalue > P_MIN
  want = (d + 1) * (d + 2) / eps**2 * ball.second_moment()
  prod = y[:, :, None] * y[:, None, :]
  se = prod.std(axis=0) / math.sqrt(n)
  assert np.all(np.abs(prod.mean(axis=0) - want) < 5 * se)
