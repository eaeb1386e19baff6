"""The vote ball's exact sampler (jaxdp.samplers.permutohedron) and second moment.

Exact checks: the lattice reduction against brute force over every rounding, the
tiling of the hyperplane by the permutohedron's lattice translates (each point in
exactly one), the second moment against the closed forms at d = 2, 3 and exact
rational arithmetic. Statistical tests use fixed keys and state their test, sample
size and threshold; the independent reference is bounding-box rejection.
"""

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp.samplers.norm_ball import MAX_QUERY_D, rejection_points
from jaxdp.samplers.permutohedron import centred_points, centred_sq_norm, sort_columns
from tests.helpers.exactness import second_moment_zscores

P_MIN = 1e-4  # KS / chi-square p-value threshold for "consistent with exact"
Z_MAX = 5.0  # largest |z| allowed for a second-moment entry


def vote_norm64(z):
  """The vote-ball norm in float64 numpy (independent of VoteBall.norm's jnp code)."""
  z = np.asarray(z, np.float64)
  d = z.shape[-1]
  mean = z.mean(-1, keepdims=True)
  top = np.cumsum(np.sort(z - mean, -1)[:, ::-1], -1)[:, : d - 1]
  s = np.arange(1, d)
  return np.maximum(2 * np.abs(mean[:, 0]) / (d - 1), (top / (s * (d - s) / 2)).max(-1))


def brute_reduction(v):
  """The centred permutohedron point of one column v: the rounding u in {0, 1}^d
  (over all 2^d) whose residual v - u has the least spread, times d, centred."""
  best = min(
    (np.var(v - np.array(u)), tuple(u)) for u in itertools.product((0, 1), repeat=len(v))
  )
  r = v - np.array(best[1])
  return len(v) * (r - r.mean())


# ------------------------------------------------------------------ exact checks
@pytest.mark.parametrize("d", [2, 3, 5, 6])
def test_reduction_is_the_nearest_lattice_point(d):
  """centred_points equals brute force over all 2^d roundings (100 random columns,
  and columns with ties: repeated values, all equal, zeros)."""
  rng = np.random.default_rng(d)
  v = rng.random((d, 100)).astype(np.float32)
  v[:, 90:] = rng.integers(0, 3, (d, 10)) / 4  # many exact ties
  v[:, 99] = 0.5
  got = np.asarray(jax.jit(centred_points)(jnp.asarray(v)))
  for c in range(v.shape[1]):
    want = brute_reduction(v[:, c].astype(np.float64))
    np.testing.assert_allclose(got[:, c], want, atol=2e-5, err_msg=f"column {c}")
    # and it lies in the centred permutohedron
    assert vote_norm64(got[:, c][None])[0] <= 1 + 1e-6


@pytest.mark.parametrize("d", [3, 4])
def test_lattice_translates_tile_the_hyperplane(d):
  """Every point of the hyperplane sum x = 0 lies in exactly one translate of the
  centred permutohedron by L = {d u - (sum u) 1 : u in Z^d} (2000 random points,
  translates from u in {-2..2}^d): P is a fundamental domain of L."""
  rng = np.random.default_rng(10 + d)
  z = rng.uniform(-d, d, (2000, d))
  z -= z.mean(1, keepdims=True)
  u = np.array(list(itertools.product(range(-2, 3), repeat=d)))
  lattice = np.unique(d * u - u.sum(1, keepdims=True), axis=0)  # u, u + 1: one vector
  shifted = (z[:, None, :] - lattice[None]).reshape(-1, d)
  inside = (vote_norm64(shifted) <= 1).reshape(len(z), len(lattice))
  assert np.all(inside.sum(1) == 1)


def test_sort_columns():
  """The bitonic network sorts every column (with ties) like np.sort; it rejects a
  length that is not a power of two."""
  rng = np.random.default_rng(3)
  x = rng.integers(0, 5, (16, 64)).astype(np.float32)
  sort = jax.jit(sort_columns)  # one program (eagerly, every stage compiles its own)
  np.testing.assert_array_equal(np.asarray(sort(jnp.asarray(x))), np.sort(x, 0))
  with pytest.raises(ValueError, match="power-of-two"):
    sort_columns(jnp.zeros((6, 2)))


def exact_sq_norm(d):
  """centred_sq_norm's recursion in exact rationals (volumes V_k = k^(k-2) sqrt(k),
  moments M_k sqrt(k))."""
  vol, mom = {1: Fraction(1)}, {1: Fraction(0)}
  for e in range(2, d + 1):
    w = {k: Fraction(math.comb(e, k) * k * (e - k), 2) for k in range(1, e)}
    vol[e] = sum(w[k] * vol[k] * vol[e - k] for k in w) / (e - 1)
    mom[e] = sum(
      w[k] * (vol[k] * vol[e - k] * Fraction(k * (e - k) * e, 4) + mom[k] * vol[e - k])
      + w[k] * mom[e - k] * vol[k]
      for k in w
    ) / (e + 1)
    assert vol[e] == e ** (e - 2)  # the permutohedron's volume (Cayley)
  return mom[d] / vol[d]


def test_second_moment_exact():
  """E||y_c||^2 is 1/6 for the segment (d = 2) and 5/6 for the hexagon of side
  sqrt(2) (5 R^2 / 12); the float64 recursion matches exact rationals to 1e-13 for
  d <= 14; E[Z Z^T] is symmetric, permutation invariant, with trace
  expected_sq_norm."""
  assert exact_sq_norm(2) == Fraction(1, 6)
  assert exact_sq_norm(3) == Fraction(5, 6)
  for d in range(2, 15):
    assert abs(centred_sq_norm(d) / float(exact_sq_norm(d)) - 1) < 1e-13
  ball = jaxdp.VoteBall(7)
  m = ball.second_moment()
  assert m.dtype == np.float64 and m.shape == (7, 7)
  np.testing.assert_allclose(m, m[np.ix_([3, 1, 0, 6, 2, 5, 4], [3, 1, 0, 6, 2, 5, 4])])
  assert ball.expected_sq_norm() == pytest.approx(np.trace(m))
  # the all-ones direction carries the shift's variance: 1^T M 1 = d^2 (d-1)^2 / 12
  assert np.ones(7) @ m @ np.ones(7) == pytest.approx(49 * 36 / 12)


# ------------------------------------------------------------- statistical checks
@pytest.mark.statistical
@pytest.mark.parametrize("d", [3, 4])
def test_matches_rejection_reference(d):
  """Two-sample chi-square (contingency) against bounding-box rejection over cells
  (coordinate order x norm quartile x sign of the mean), n = 40_000 each, p > 1e-4;
  and the sample second moments of both match second_moment (|z| < 5)."""
  ball = jaxdp.VoteBall(d)
  n = 40_000
  z = np.asarray(jaxdp.random.vote_ball(jax.random.key(20 + d), d, (n,)), np.float64)
  ref = np.asarray(rejection_points(ball, jax.random.key(30 + d), n, jnp.float32))

  def cells(x):
    order = np.argsort(x, 1) @ (d ** np.arange(d))
    quart = np.minimum((vote_norm64(x) ** d * 4).astype(int), 3)
    return (order * 4 + quart) * 2 + (x.mean(1) > 0)

  a, b = cells(z), cells(ref.astype(np.float64))
  keys = np.union1d(a, b)
  table = np.array([[np.sum(a == k) for k in keys], [np.sum(b == k) for k in keys]])
  assert stats.chi2_contingency(table).pvalue > P_MIN
  exact = ball.second_moment()
  for x in (z, ref):
    assert np.abs(second_moment_zscores(x, exact)).max() < Z_MAX


@pytest.mark.statistical
@pytest.mark.parametrize("d", [2, 10, 50])
def test_uniform_in_ball(d):
  """For Z uniform in a d-dimensional body, ||Z||^d ~ U(0, 1); the mean coordinate
  is uniform on [-(d-1)/2, (d-1)/2] (the prism's shift); the d! coordinate orders
  are equally likely (first coordinate's rank: chi-square). KS / chi-square,
  n = 40_000, p > 1e-4; every norm <= 1 + 1e-6."""
  z = np.asarray(jaxdp.random.vote_ball(jax.random.key(40 + d), d, (40_000,)), np.float64)
  norm = vote_norm64(z)
  assert norm.max() <= 1 + 1e-6
  assert stats.kstest(norm**d, "uniform").pvalue > P_MIN
  half = (d - 1) / 2
  assert stats.kstest(z.mean(1), stats.uniform(-half, 2 * half).cdf).pvalue > P_MIN
  rank = np.sum(z < z[:, :1], 1)
  assert stats.chisquare(np.bincount(rank, minlength=d)).pvalue > P_MIN


@pytest.mark.statistical
def test_second_moment_d8():
  """Sample E[Z Z^T] at d = 8 (n = 100_000) against second_moment (|z| < 5), and
  the K-norm noise's: (d+1)(d+2)/eps^2 times it."""
  d, eps = 8, 2.0
  ball = jaxdp.VoteBall(d)
  z = jaxdp.random.vote_ball(jax.random.key(50), d, (100_000,))
  assert np.abs(second_moment_zscores(z, ball.second_moment())).max() < Z_MAX
  y = jaxdp.random.knorm(jax.random.key(51), ball, eps, (100_000,))
  exact = ball.second_moment() * (d + 1) * (d + 2) / eps**2
  assert np.abs(second_moment_zscores(y, exact)).max() < Z_MAX


# ------------------------------------------------------------ transforms, limits
def test_jit_vmap_float64():
  """jit and vmap give the same draws as eager calls (vmap to float rounding of the
  row's largest sums, also when points works in pieces); float64 draws are float64,
  in the ball to 1e-12."""
  key = jax.random.key(60)
  eager = jaxdp.random.vote_ball(key, 5, (7,))
  jitted = jax.jit(lambda k: jaxdp.random.vote_ball(k, 5, (7,)))(key)
  np.testing.assert_array_equal(eager, jitted)
  keys = jax.random.split(key, 3)
  # d = 300: 70 rows are two pieces of 64 (the second overlapping the first)
  for d, rows in ((5, 7), (300, 70)):
    mapped = jax.vmap(lambda k, d=d, rows=rows: jaxdp.random.vote_ball(k, d, (rows,)))
    mapped = mapped(keys)
    for i in range(3):
      want = np.asarray(jaxdp.random.vote_ball(keys[i], d, (rows,)))
      # float32 rounding of sums as large as the largest coordinate (about 85 at
      # d = 300, where one ulp is 7.6e-6), which the two programs may order apart
      atol = 1e-6 * np.abs(want).max()
      np.testing.assert_allclose(mapped[i], want, rtol=1e-6, atol=atol)
  with jax.enable_x64(True):
    z = jaxdp.random.vote_ball(key, 5, (1000,), dtype=jnp.float64)
    assert z.dtype == jnp.float64
    assert vote_norm64(z).max() <= 1 + 1e-12


def test_largest_d():
  """d = MAX_QUERY_D (4096): finite, in the ball; the pieces of points cover every
  row (no row left zero)."""
  d = MAX_QUERY_D
  z = np.asarray(jaxdp.random.vote_ball(jax.random.key(70), d, (130,)), np.float64)
  assert np.isfinite(z).all() and np.all(np.abs(z).sum(1) > 0)
  assert vote_norm64(z).max() <= 1 + 1e-6
  with pytest.raises(ValueError, match="at most 4096"):
    jaxdp.VoteBall(d + 1)
