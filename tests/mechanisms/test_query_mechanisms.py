"""The sum, count and vote query mechanisms: sensitivities by brute force, row checks
(on the host and at run time under jit), clipping into a query ball, error bars'
coverage, and the secure allowlist."""

import functools
import itertools
import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.optimize

import jaxdp
from jaxdp import (
  CountBall,
  CountQueryMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  SumBall,
  SumQueryMechanism,
  VoteBall,
  VoteQueryMechanism,
)

NOISES = ("ball", "linf", "l2", "laplace")


def _domain(query, d, k):
  """Every row a person may contribute (sum: entries on a grid of [-1, 1])."""
  if query == "vote":
    return np.array(list(itertools.permutations(range(d))), float)
  values = (-1.0, -0.5, 0.0, 0.5, 1.0) if query == "sum" else (0.0, 1.0)
  rows = np.array(list(itertools.product(values, repeat=d)))
  return rows[(rows != 0).sum(axis=1) <= k]


def _mech(query, d, k, noise, **kw):
  if query == "vote":
    return VoteQueryMechanism(d, 1.0, noise=noise, **kw)
  cls = SumQueryMechanism if query == "sum" else CountQueryMechanism
  return cls(d, k, 1.0, noise=noise, **kw)


def _noise_norm(inner, v):
  """The norm the inner mechanism's sensitivity is stated in, in numpy (the query
  balls' own norms by their definitions, independent of the library's)."""
  if isinstance(inner, LaplaceMechanism):
    return np.abs(v).sum(axis=-1)
  ball = inner.ball
  if isinstance(ball, LpBall):
    return np.linalg.norm(v, ord=ball.p, axis=-1)
  return np.asarray(ball.norm(v))


# the stated sensitivities, written out (sum, count: 1, sqrt(k), k; vote: d - 1,
# sqrt((d - 1) d (2d - 1) / 6), d (d - 1) / 2)
def _stated(query, d, k, noise):
  if noise == "ball":
    return 1.0
  if query == "vote":
    return {
      "linf": d - 1,
      "l2": math.sqrt(sum(i * i for i in range(d))),
      "laplace": d * (d - 1) / 2,
    }[noise]
  return {"linf": 1.0, "l2": math.sqrt(k), "laplace": float(k)}[noise]


@pytest.mark.parametrize(
  "query, d, k",
  [
    ("sum", 3, 2),
    ("sum", 4, 1),
    ("count", 4, 2),
    ("count", 3, 3),
    ("vote", 3, None),
    ("vote", 4, None),
  ],
)
@pytest.mark.parametrize("noise", NOISES)
def test_every_neighbour_moves_the_statistic_within_the_sensitivity_and_one_attains_it(
  query, d, k, noise
):
  mech = _mech(query, d, k, noise)
  inner = mech.inner
  sens = float(inner.sensitivity)
  assert sens == pytest.approx(_stated(query, d, k, noise), rel=1e-15)
  rows = _domain(query, d, k)
  # add/remove one row: the statistic moves by that row, checked on the mechanism
  base = rows[:: max(1, len(rows) // 5)]
  stat = np.asarray(mech.statistic(base))
  for r in rows:
    moved = np.asarray(mech.statistic(np.concatenate([base, r[None]]))) - stat
    np.testing.assert_allclose(moved, r, atol=1e-6)
  norms = _noise_norm(inner, rows)
  assert np.all(norms <= sens * (1 + 1e-6))
  assert np.max(norms) == pytest.approx(sens, rel=1e-6)


def _gauge(points, v):
  """min t with v = sum_i w_i p_i, w >= 0, sum w = t: the gauge of conv(points),
  by linear programming (independent of the library's closed-form norms)."""
  res = scipy.optimize.linprog(
    np.ones(len(points)), A_eq=points.T, b_eq=v, bounds=(0, None), method="highs"
  )
  assert res.status == 0
  return res.fun


@pytest.mark.parametrize(
  "ball, query, k",
  [(SumBall(4, 2), "sum", 2), (CountBall(4, 2), "count", 2), (VoteBall(4), "vote", None)],
)
def test_ball_norm_is_the_gauge_of_the_rows_hull(ball, query, k):
  """The query ball is conv(+-rows): its norm equals that hull's gauge (an LP over
  the rows enumerated here) at random points, so sensitivity 1 in it is exact."""
  rows = _domain(query, 4, k)
  points = np.concatenate([rows, -rows])
  v = np.random.default_rng(0).normal(size=(20, 4)) * 2
  got = np.asarray(ball.norm(jnp.asarray(v, jnp.float32)), np.float64)
  want = np.array([_gauge(points, x) for x in v])
  np.testing.assert_allclose(got, want, rtol=1e-5)


@functools.cache
def _jit_randomize(query):
  """``jax.jit(mech.randomize)`` of the row tests' mechanism (``_mech(query, 3, 2,
  "ball")``, rows traced): one jitted function per query, so that its cases (rows of
  one shape and dtype) share one compiled program."""
  return jax.jit(_mech(query, 3, 2, "ball").randomize)


@pytest.mark.parametrize(
  "query, rows, match",
  [
    (
      "sum",
      [[0.5, 0, 0], [1, 1, 1]],
      r"row 1 is not a sum row \(1 such rows\): it has 3 non-zero",
    ),
    ("sum", [[0, 0, 0], [0, 1.5, 0]], r"row 1 .* column 1 is not a number in \[-1, 1\]"),
    ("sum", [[0, 0, 0], [0, np.nan, 0]], r"row 1 .* column 1 is not a number"),
    (
      "count",
      [[1, 0, 0], [0, 2, 0]],
      r"row 1 is not a count row .* column 1 is not 0 or 1",
    ),
    (
      "count",
      [[1, 1, 1], [1, 1, 1]],
      r"row 0 is not a count row \(2 such rows\): it has 3 ones, more than k = 2",
    ),
    ("vote", [[0, 1, 2], [0, 1, 1]], r"row 1 is not a vote row"),
    ("vote", [[0, 1, 2], [0, 1, 2.5]], r"row 1 is not a vote row"),
    ("vote", [[0, 1, 2], [1, 2, 3]], r"row 1 is not a vote row"),
  ],
)
def test_bad_rows_are_refused_on_the_host_and_under_jit(query, rows, match):
  mech = _mech(query, 3, 2, "ball")
  rows = np.asarray(rows, float)
  with pytest.raises(ValueError, match=match):
    mech.randomize(jax.random.key(0), rows)
  with pytest.raises(ValueError, match=match):  # closed over: checked on the host
    jax.jit(lambda k: mech.randomize(k, rows))(jax.random.key(0))
  first = re.search(r"row (\d)", match).group(1)  # the first bad row, named at run time
  with pytest.raises(Exception, match=rf"data row {first} is not a {query} row"):
    _jit_randomize(query)(jax.random.key(0), jnp.asarray(rows)).block_until_ready()


def test_traced_good_rows_release_as_on_the_host():
  mech = VoteQueryMechanism(3, 1.0)
  rows = jnp.asarray([[0, 1, 2], [2, 0, 1]])
  key = jax.random.key(3)
  np.testing.assert_array_equal(
    np.asarray(jax.jit(mech.randomize)(key, rows)), np.asarray(mech.randomize(key, rows))
  )


@pytest.mark.parametrize(
  "make, match",
  [
    (lambda: CountQueryMechanism(3, 4, 1.0), r"k must be between 1 and d = 3"),
    (lambda: SumQueryMechanism(3, 0, 1.0), r"k"),
    (lambda: VoteQueryMechanism(1, 1.0), r"d must be >= 2"),
    (lambda: CountQueryMechanism(3, 2, 1.0, noise="poset"), r"noise must be one of"),
    (
      lambda: KNormMechanism(CountBall(1025, 2), 1.0, exact=True),
      r"exact count ball noise is available for d <= 1024",
    ),
    (lambda: CountQueryMechanism(3, 2, -1.0), r"eps"),
    (lambda: CountQueryMechanism(3, 2.5, 1.0), r"k"),
  ],
)
def test_bad_parameters_are_refused(make, match):
  with pytest.raises((ValueError, TypeError), match=match):
    make()


@pytest.mark.parametrize("shape", [(4,), (2, 4), (2, 3, 3), (3, 2)])
def test_wrong_shapes_are_refused(shape):
  mech = CountQueryMechanism(3, 2, 1.0)
  with pytest.raises(ValueError, match=r"data must have shape \(n, 3\)"):
    mech.statistic(np.zeros(shape))


def test_traced_d_is_refused_and_traced_eps_is_a_leaf():
  with pytest.raises(TypeError):
    jax.jit(lambda d: CountQueryMechanism(d, 1, 1.0))(3)
  rows = np.array([[1, 0, 0], [0, 1, 0]])

  def noisy(eps):
    mech = CountQueryMechanism(3, 1, eps, noise="linf")
    return mech.randomize(jax.random.key(0), rows)

  assert np.all(np.isfinite(np.asarray(jax.jit(noisy)(1.0))))
  assert np.all(np.isnan(np.asarray(jax.jit(noisy)(-1.0))))  # never weaker noise


def test_too_many_integer_rows_for_exact_sums_are_refused():
  mech = VoteQueryMechanism(3, 1.0)
  if jax.config.jax_enable_x64:
    pytest.skip("float64 sums")
  rows = np.tile(np.array([[0, 1, 2]], np.int8), (2**23 + 1, 1))
  with pytest.raises(ValueError, match=r"rows of entries up to 2: their sums can exceed"):
    mech.statistic(rows)


def test_clipping_into_a_query_ball_keeps_sensitivity_one():
  ball = CountBall(3, 2)
  mech = KNormMechanism(ball, 1.0)
  rows = jnp.asarray(
    [[1, 1, 1], [3, 0, 0], [-1, 1, 0], [3e38, -3e38, 1e38], [0.2, 0.2, 0], [0, 0, 0]],
    jnp.float32,
  )
  part = jnp.arange(6)
  clipped = np.asarray(mech.part_statistics(rows, part, 6), np.float64)
  norms = np.asarray(ball.norm(clipped))
  assert np.all(norms <= 1 + 1e-6)
  np.testing.assert_allclose(norms[:4], 1.0, rtol=1e-6)  # scaled to the sphere
  np.testing.assert_allclose(clipped[4], [0.2, 0.2, 0], rtol=1e-6)  # inside: kept
  np.testing.assert_allclose(clipped[1], [1, 0, 0], rtol=1e-6)


def test_l2_clipping_of_a_row_near_float32_max():
  """1 / 3e38 is subnormal in float32 (flushed to 0 by XLA): the row's norm must not
  vanish with it."""
  mech = KNormMechanism(LpBall(3, 2.0), 1.0)
  out = np.asarray(
    mech.part_statistics(jnp.asarray([[1e38, 2e38, -3e38]]), jnp.zeros(1, int), 1)
  )
  assert np.linalg.norm(out) <= 1 + 1e-6


def test_error_bars_cover_at_their_level():
  """Bars from the noise law (simulated with the ball sampler on the host side)
  against releases drawn by the mechanism: 4,000 releases, coverage within 4
  binomial standard errors plus the bars' Monte Carlo error."""
  rows = np.array([[0, 1, 2], [2, 1, 0], [1, 2, 0]])
  for mech in (VoteQueryMechanism(3, 1.0), SumQueryMechanism(3, 2, 2.0, noise="l2")):
    bars = jaxdp.error_bars(mech, 0.9, num_samples=20_000, key=jax.random.key(11))
    x = np.asarray(mech.statistic(rows if mech.kind == "vote" else rows / 2.0))
    data = rows if mech.kind == "vote" else rows / 2.0
    keys = jax.random.split(jax.random.key(12), 4000)
    y = np.asarray(jax.jit(jax.vmap(lambda k: mech.randomize(k, data)))(keys))
    low, high = bars.interval(y)
    covered = ((low <= x) & (x <= high)).mean(axis=0)
    tol = 4 * math.sqrt(0.9 * 0.1 / 4000) + 0.01
    np.testing.assert_allclose(covered, 0.9, atol=tol)


def test_exact_baselines_are_publishable_and_release_integers():
  acct = jaxdp.Accountant.create(3.0, secure=True)
  rows = np.array([[0, 1, 2], [2, 1, 0]])
  for noise in ("linf", "l2", "laplace"):
    mech = VoteQueryMechanism(3, 1.0, noise=noise, exact=True)
    assert jaxdp.is_publishable(mech)
    acct, y = jaxdp.release(acct, mech, rows)
    assert np.asarray(y).dtype == np.int32
  assert not jaxdp.is_publishable(VoteQueryMechanism(3, 1.0))
  bad = CountQueryMechanism(3, 2, 1.0, noise="linf", exact=True)
  object.__setattr__(bad, "noise", "poset")  # no query has poset noise
  assert "no exact sampler" in jaxdp.publishable_problem(bad)
  count = CountQueryMechanism(3, 2, 1.0, noise="linf", exact=True)
  object.__setattr__(count, "noise", "ball")  # the count ball's is exact
  assert jaxdp.is_publishable(count)
  vote = VoteQueryMechanism(3, 1.0, noise="linf", exact=True)
  object.__setattr__(vote, "noise", "ball")  # the vote ball's is exact
  assert jaxdp.is_publishable(vote)


def test_exact_sum_rows_must_be_integers():
  mech = SumQueryMechanism(3, 2, 1.0, noise="laplace", exact=True)
  with pytest.raises(ValueError, match=r"row 0 .* column 0 is not an integer"):
    mech.statistic(np.array([[0.5, 0, 0]]))
  assert np.asarray(mech.statistic(np.array([[1, -1, 0], [0, -1, 0]]))).tolist() == [
    1,
    -2,
    0,
  ]


def test_part_statistics_are_the_column_sums_by_part():
  mech = CountQueryMechanism(3, 2, 1.0)
  rows = np.array([[1, 1, 0], [0, 1, 0], [0, 0, 1], [1, 0, 1]])
  out = np.asarray(mech.part_statistics(rows, np.array([0, 1, 0, 5]), 2))
  np.testing.assert_array_equal(out, [[1, 1, 1], [0, 1, 0]])  # part 5: dropped


def test_release_partitioned_takes_query_mechanisms_and_query_balls():
  acct = jaxdp.Accountant.create(2.0)
  rows = np.array([[0, 1, 2], [2, 1, 0], [1, 0, 2]])
  part = np.array([0, 1, 1])
  acct, out = jaxdp.release_partitioned(acct, VoteQueryMechanism(3, 1.0), rows, part, 2)
  assert out.shape == (2, 3) and np.all(np.isfinite(np.asarray(out)))
  mech = KNormMechanism(VoteBall(3), 1.0)
  acct, out = jaxdp.release_partitioned(acct, mech, rows * 5.0, part, 2)
  assert out.shape == (2, 3)
  assert float(acct.spent_eps) == pytest.approx(2.0)


def test_bad_traced_rows_under_vmap_name_the_batch_element():
  mech = CountQueryMechanism(3, 1, 1.0)
  good = np.array([[1, 0, 0], [0, 1, 0]])
  bad = np.array([[1, 0, 0], [1, 1, 0]])
  batch = jnp.asarray(np.stack([good, bad]))
  keys = jax.random.split(jax.random.key(0), 2)
  with pytest.raises(
    Exception,
    match=r"data row 1 is not a count row \(1 such rows\) \(batch element \(1,\)\)",
  ):
    jax.jit(jax.vmap(mech.randomize))(keys, batch).block_until_ready()


def test_a_session_clips_with_the_ball_and_refuses_the_row_checking_mechanisms():
  rows = np.array([[1.0, 1.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
  session = jaxdp.Session(rows, eps_budget=2.0)
  out = session.release(KNormMechanism(CountBall(3, 2), 1.0))
  assert np.shape(out) == (3,)
  # its rows are refused by name, which a Session never does: not on its allowlist
  with pytest.raises(TypeError, match="mech must be one of jaxdp's mechanisms"):
    session.release(CountQueryMechanism(3, 2, 1.0))
  assert session.spent == pytest.approx(1.0)  # the refusal spent nothing
