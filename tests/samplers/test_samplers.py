"""Exactness, shapes and errors of the poset-ball, l_p-ball, K-norm and Laplace samplers.

Statistical tests use fixed keys (deterministic) and state their test, sample size and
threshold. Exactness is checked against exact enumeration of the triangulation's
objects; the published insertion sampler is run through the same tests and must fail.
"""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import optimize, stats

import jaxdp
from jaxdp import LpBall, Poset, PosetBall
from jaxdp.experiments import baselines
from jaxdp.samplers import chunks, dispatch, forest, general, subsets
from tests.helpers.exactness import (
  chi_square_uniform_pvalue,
  lp_norm,
  object_index,
  optimized,
  second_moment_zscores,
)

P_MIN = 1e-4  # chi-square / KS p-value threshold for "consistent with exact"
Z_MAX = 5.0  # largest |z| allowed for a second-moment entry
FOREST_NAMES = ["a<c,b", "nhis1", "chain4", "antichain3"]
# posets whose forest kernel runs far longer at XLA's level 0 than compiling it with
# optimisations takes (a chain of 6): their large forest draws are compiled optimised
SLOW_FOREST = {"random6"}


def _methods(poset):
  return (["forest"] if poset.is_forest else []) + ["sp", "general"]


def _noise_methods(poset):
  """For the noise's second moments: the series-parallel sampler (its own sort-free
  noise) and one of the samplers sharing the chain construction (their object laws
  are each checked by the frequency test)."""
  return ["forest" if poset.is_forest else "general", "sp"]


# ------------------------------------------------------------- exact enumeration
def test_enumeration_counts_match_formula(posets):
  # N(P) = sum_A e(A) e(P \ A) = 32 for NHIS's first section (q1 above q2 above q3,
  # and q1 above q4).
  assert jaxdp.enumerate_objects(posets["nhis1"])[0].shape[0] == 32
  for name, p in posets.items():
    seq, _ = jaxdp.enumerate_objects(p)
    assert seq.shape[0] == round(PosetBall(p).num_objects()), name
    assert (
      len({(tuple(s), int(k)) for s, k in zip(*jaxdp.enumerate_objects(p))}) == seq.shape[0]
    )


def test_nhis1_exact_norm_ratio():
  m = jaxdp.exact_second_moment(Poset.nhis(1))
  assert np.trace(m[1:, 1:]) / (4 / 3) == pytest.approx(0.40625, abs=1e-12)


def test_exact_volume_matches_convex_hull():
  # vol(K) = 2 N(P) / D! (the triangulation into N(P) pairs of simplices), checked with
  # scipy's convex hull.
  from scipy.spatial import ConvexHull

  for p in [
    Poset.nhis(1),
    Poset.from_edges(3, [(1, 0)]),
    Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)]),
  ]:
    f = p.filters().astype(float)
    pts = np.concatenate([np.c_[np.ones(len(f)), f], -np.c_[np.ones(len(f)), f]])
    vol = ConvexHull(pts).volume
    assert vol == pytest.approx(2 * PosetBall(p).num_objects() / math.factorial(p.d + 1))


# ------------------------------------------------------------- object frequencies
@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize(
  "name", ["a<c,b", "nhis1", "diamond", "chain4", "antichain3", "random6", "N-shape"]
)
def test_object_frequencies_uniform(posets, name):
  """Chi-square of sampled object counts vs uniform over all N(P) objects.

  Sample size max(100_000, 60 N); pass if p > 1e-4. Every algorithm that applies.
  """
  p = posets[name]
  ref = jaxdp.enumerate_objects(p)
  num = ref[0].shape[0]
  n = max(100_000, 60 * num)
  for i, method in enumerate(_methods(p)):
    draw = lambda key, method=method: dispatch.sample_objects(key, p, method, n)
    if method == "forest" and name in SLOW_FOREST:
      seq, k = optimized(draw, jax.random.key(100 + i))
    else:
      seq, k = draw(jax.random.key(100 + i))
    idx = object_index(np.asarray(seq), np.asarray(k), *ref)
    assert (idx >= 0).all(), f"{method} produced an object outside the triangulation"
    pval = chi_square_uniform_pvalue(idx, num)
    assert pval > P_MIN, f"{name}/{method}: chi-square p = {pval:.2e}"


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["a<c,b", "nhis1"])
def test_published_insertion_sampler_fails_the_same_test(posets, name):
  """The same chi-square test (n = 100_000) rejects the published sampler (p < 1e-10)."""
  p = posets[name]
  probs = baselines.insertion_object_probabilities(p)
  assert min(probs.values()) != max(probs.values())  # provably not uniform
  ref = jaxdp.enumerate_objects(p)
  seq, k = baselines.insertion_objects(np.random.default_rng(0), p, 100_000)
  pval = chi_square_uniform_pvalue(object_index(seq, k, *ref), ref[0].shape[0])
  assert pval < 1e-10


def test_insertion_probabilities_match_hand_computation(posets):
  # a < c, b free, inserted b, a, c: 4 objects at 1/12 and 12 at 1/18.
  probs = sorted(baselines.insertion_object_probabilities(posets["a<c,b"]).values())
  assert baselines.insertion_order(posets["a<c,b"]) == [2, 1, 0]
  assert probs.count(probs[-1]) == 4 and float(probs[-1]) == pytest.approx(1 / 12)
  assert probs.count(probs[0]) == 12 and float(probs[0]) == pytest.approx(1 / 18)


def test_categorical_is_the_inverse_cdf():
  """The general sampler's choice of the next element (``_categorical``): on a grid of
  G = 2^16 uniforms each index i is chosen for G w_i / sum(w) of them, +-2 (interval
  ends and float32 rounding); never an index with w_i = 0; u just below 1 gives a
  valid index in the last 1e-6 of the mass. Weights span 18
  orders of magnitude, as the extension counts do at d = 20."""
  rng = np.random.default_rng(0)
  d, grid = 20, 1 << 16
  w = np.where(rng.random((8, d)) < 0.4, 10.0 ** rng.uniform(0, 18, (8, d)), 0.0)
  w[:, 7] = 1e18  # every row has a valid index
  w[0] = [1.0 if i in (3, 11) else 0.0 for i in range(d)]
  w = w.astype(np.float32)
  u = ((np.arange(grid) + 0.5) / grid).astype(np.float32)
  pick = jax.jit(
    lambda wr, uu: subsets.categorical(
      jnp.broadcast_to(wr, (uu.shape[0], d)), uu, jnp.broadcast_to(wr > 0, (uu.shape[0], d))
    )
  )
  for row in w:
    x = np.asarray(pick(row, u))
    assert np.all(row[x] > 0)
    counts = np.bincount(x, minlength=d)
    expected = grid * row.astype(np.float64) / row.astype(np.float64).sum()
    assert np.abs(counts - expected).max() <= 2, (counts, expected)
    last = int(np.asarray(pick(row, np.float32([np.nextafter(np.float32(1), 0)])))[0])
    cum = np.cumsum(row.astype(np.float64))
    assert row[last] > 0 and cum[last] >= (1 - 1e-6) * cum[-1]


# ------------------------------------------------------------- second moments
@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("name", ["a<c,b", "nhis1", "diamond", "random6", "N-shape"])
def test_second_moment_matches_exact(posets, name):
  """z-scores of the sample E[Z Z^T] (n = 200_000) vs exact; all |z| < 5."""
  p = posets[name]
  exact = jaxdp.exact_second_moment(p)
  for i, method in enumerate(_noise_methods(p)):
    draw = lambda key, method=method: jaxdp.random.poset_ball(
      key, p, (200_000,), method=method
    )
    if method == "forest" and name in SLOW_FOREST:
      z = optimized(draw, jax.random.key(200 + i))
    else:
      z = draw(jax.random.key(200 + i))
    zs = second_moment_zscores(z, exact)
    assert np.abs(zs).max() < Z_MAX, f"{name}/{method}: max |z| = {np.abs(zs).max():.1f}"


@pytest.mark.slow
def test_forest_and_general_agree_on_nhis2():
  """Two-sample z-scores of E[Z Z^T] between the algorithms on NHIS (d = 11), n = 200_000
  each; all |z| < 5 (66 entries)."""
  p = Poset.nhis(2)
  za = np.asarray(
    jaxdp.random.poset_ball(jax.random.key(1), p, (200_000,), method="forest"), np.float64
  )
  zb = np.asarray(
    jaxdp.random.poset_ball(jax.random.key(2), p, (200_000,), method="general"), np.float64
  )
  iu = np.triu_indices(p.d + 1)
  pa, pb = za[:, iu[0]] * za[:, iu[1]], zb[:, iu[0]] * zb[:, iu[1]]
  se = np.sqrt(pa.var(0) / len(pa) + pb.var(0) / len(pb))
  assert np.abs((pa.mean(0) - pb.mean(0)) / se).max() < Z_MAX


@pytest.mark.slow
@pytest.mark.statistical
def test_points_lie_in_the_ball_and_radial_law():
  """||Z||_K is <= 1 and ||Z||_K^D ~ Uniform(0, 1) (KS, n = 200,000: the kernel of
  test_second_moment_matches_exact[a<c,b], this poset, p > 1e-4); for K-norm noise
  Y = R Z, eps ||Y||_K = (eps R) ||Z||_K ~ Gamma(D + 1) Beta(D, 1) = Gamma(D), the
  radial law of density exp(-eps ||y||_K) (KS, n = 600, p > 1e-4). ||.||_K is the
  largest n . y / h over the facets {x : n . x = h} of scipy's convex hull of the
  vertices +-(1, F), checked against linear programming (the least total weight of
  vertices that sum to y) on 40 points of each."""
  from scipy.spatial import ConvexHull

  p = Poset.from_edges(3, [(1, 0)])
  f = p.filters().astype(float)
  verts = np.concatenate([np.c_[np.ones(len(f)), f], -np.c_[np.ones(len(f)), f]])
  dim = p.d + 1
  facets = ConvexHull(verts).equations  # n . x + c <= 0 inside, c < 0

  def knorm_of(y):
    return np.max(y @ facets[:, :-1].T / -facets[:, -1], axis=1)

  def knorm_by_lp(y):
    res = optimize.linprog(
      np.ones(len(verts)), A_eq=verts.T, b_eq=y, bounds=(0, None), method="highs"
    )
    return res.fun

  z = np.asarray(jaxdp.random.poset_ball(jax.random.key(3), p, (200_000,)), np.float64)
  eps = 0.7
  y = np.asarray(
    jaxdp.random.knorm(jax.random.key(4), PosetBall(p), eps, (600,)), np.float64
  )
  for pts in (z[:600], y):
    lp = np.array([knorm_by_lp(v) for v in pts[::15]])
    np.testing.assert_allclose(knorm_of(pts[::15]), lp, rtol=1e-6, atol=1e-9)
  r = knorm_of(z)
  assert r.max() <= 1 + 1e-6
  assert stats.kstest(r**dim, "uniform").pvalue > P_MIN
  ry = knorm_of(y) * eps
  assert stats.kstest(ry, stats.gamma(dim).cdf).pvalue > P_MIN


@pytest.mark.statistical
def test_knorm_second_moment_scales():
  """E[Y Y^T] = (D+1)(D+2)/eps^2 E[Z Z^T] for NHIS one section (n = 200_000, |z| < 5)."""
  p = Poset.nhis(1)
  eps = 0.5
  dim = p.d + 1
  exact = jaxdp.exact_second_moment(p) * (dim + 1) * (dim + 2) / eps**2
  y = jaxdp.random.knorm(jax.random.key(5), PosetBall(p), eps, (200_000,))
  assert np.abs(second_moment_zscores(y, exact)).max() < Z_MAX


# ------------------------------------------------------------- l_p balls, Laplace
@pytest.mark.statistical
@pytest.mark.parametrize("p", [1.0, 2.0, math.inf, 3.0])
def test_lp_ball_uniform(p):
  """Uniform in B_p^d: ||Z||_p^d ~ U(0,1) (KS, n = 50_000, p > 1e-4) and each
  coordinate's sign is balanced (binomial z < 5)."""
  d = 5
  z = np.asarray(jaxdp.random.lp_ball(jax.random.key(7), d, p, (50_000,)), np.float64)
  norm = (
    np.max(np.abs(z), axis=1)
    if p == math.inf
    else np.sum(np.abs(z) ** p, axis=1) ** (1 / p)
  )
  assert norm.max() <= 1 + 1e-6
  assert stats.kstest(norm**d, "uniform").pvalue > P_MIN
  pos = (z > 0).mean(axis=0)
  assert np.all(np.abs(pos - 0.5) / np.sqrt(0.25 / len(z)) < Z_MAX)
  if p in (1.0, 2.0, math.inf):
    sq = (z**2).sum(1)
    se = sq.std() / np.sqrt(len(sq))
    assert abs(sq.mean() - LpBall(d, p).expected_sq_norm()) < Z_MAX * se


@pytest.mark.statistical
@pytest.mark.parametrize("p", [10.0, 100.0, 1000.0])
def test_lp_ball_at_large_p_is_uniform_with_no_exact_zeros(p):
  """At large p a generalized normal built as Gamma(1/p)^(1/p) underflows to 0 (a
  Gamma(0.01) variate is below 1e-38 with probability 0.42), and jax.random.ball
  released exact zeros that often: K-norm noise of 0 publishes the statistic itself.
  In d = 1 the ball is [-1, 1] for every p: the points are U(-1, 1) and the K-norm
  noise Laplace(1 / eps) (KS, n = 50,000, p > 1e-4), none exactly 0; in d = 3,
  ||Z||_p^3 ~ U(0, 1) (KS)."""
  n = 50_000
  z = np.asarray(jaxdp.random.lp_ball(jax.random.key(31), 1, p, (n,)))[:, 0]
  assert not np.any(z == 0)
  assert stats.kstest(z, stats.uniform(-1, 2).cdf).pvalue > P_MIN
  y = np.asarray(jaxdp.random.knorm(jax.random.key(32), LpBall(1, p), 2.0, (n,)))[:, 0]
  assert not np.any(y == 0)
  assert stats.kstest(y, stats.laplace(scale=0.5).cdf).pvalue > P_MIN
  z3 = jaxdp.random.lp_ball(jax.random.key(33), 3, p, (n,))
  assert not np.any(np.asarray(z3) == 0)
  norm = lp_norm(z3, p)
  assert norm.max() <= 1 + 1e-6
  assert stats.kstest(norm**3, "uniform").pvalue > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("p", [3.0, 10.0])
def test_lp_ball_in_the_plane_matches_rejection_sampling(p):
  """d = 2 against an independent reference: numpy points uniform in the square,
  kept when inside the l_p ball (rejection sampling). Two-sample chi-square on a
  12 x 12 grid, n = 40,000 each, p > 1e-4."""
  n, bins = 40_000, np.linspace(-1, 1, 13)
  z = np.asarray(jaxdp.random.lp_ball(jax.random.key(34), 2, p, (n,)), np.float64)
  rng = np.random.default_rng(34)
  ref = np.zeros((0, 2))
  while len(ref) < n:
    c = rng.uniform(-1, 1, (2 * n, 2))
    ref = np.concatenate([ref, c[np.sum(np.abs(c) ** p, axis=1) <= 1]])
  ref = ref[:n]
  h1 = np.histogram2d(z[:, 0], z[:, 1], [bins, bins])[0].ravel()
  h2 = np.histogram2d(ref[:, 0], ref[:, 1], [bins, bins])[0].ravel()
  keep = h1 + h2 > 0
  assert stats.chi2_contingency(np.stack([h1[keep], h2[keep]])).pvalue > P_MIN


@pytest.mark.statistical
@pytest.mark.parametrize("p", [1.0, 2.0, math.inf])
def test_knorm_lp_radius_law(p):
  """eps ||Y||_p ~ Gamma(d), the radial law of density exp(-eps ||y||_p) (KS,
  n = 50_000, p > 1e-4)."""
  d, eps = 4, 2.0
  y = np.asarray(
    jaxdp.random.knorm(jax.random.key(8), LpBall(d, p), eps, (50_000,)), np.float64
  )
  norm = np.max(np.abs(y), 1) if p == math.inf else np.sum(np.abs(y) ** p, 1) ** (1 / p)
  assert stats.kstest(eps * norm, stats.gamma(d).cdf).pvalue > P_MIN


@pytest.mark.statistical
def test_laplace_and_gaussian_laws():
  """Laplace(scale) and N(0, scale^2) against their CDFs (KS, n = 100_000, p > 1e-4),
  also with a broadcast array of scales (each column its own scale)."""
  x = np.asarray(jaxdp.random.laplace(jax.random.key(9), (100_000,), scale=2.5), np.float64)
  assert stats.kstest(x, stats.laplace(scale=2.5).cdf).pvalue > P_MIN
  g = np.asarray(
    jaxdp.random.gaussian(jax.random.key(10), (100_000, 2), scale=jnp.array([0.5, 3.0])),
    np.float64,
  )
  assert stats.kstest(g[:, 0], stats.norm(scale=0.5).cdf).pvalue > P_MIN
  assert stats.kstest(g[:, 1], stats.norm(scale=3.0).cdf).pvalue > P_MIN


def test_noise_signatures_follow_jax_random():
  key = jax.random.key(0)
  np.testing.assert_array_equal(
    jaxdp.random.laplace(key, (3,), jnp.float32), jax.random.laplace(key, (3,), jnp.float32)
  )
  np.testing.assert_array_equal(
    jaxdp.random.gaussian(key, (3,)), jax.random.normal(key, (3,))
  )
  with pytest.raises(ValueError, match="does not broadcast"):
    jaxdp.random.laplace(key, (3,), scale=jnp.ones(2))
  with pytest.raises(ValueError, match="scale"):
    jaxdp.random.gaussian(key, (2,), scale=np.array([1.0, -1.0]))
  if not jax.config.jax_enable_x64:
    with pytest.warns(UserWarning, match="float64 is not available"):
      jaxdp.random.laplace(key, (2,), jnp.float64)


# ------------------------------------------------------------- shapes, dtypes, jit
@pytest.mark.slow
@pytest.mark.parametrize("shape", [(), (6,), (2, 3)])  # n = 6 twice: one kernel
def test_shapes_and_jit(shape):
  p = Poset.nhis(1)
  out = jaxdp.random.poset_ball(jax.random.key(0), p, shape)
  chex.assert_shape(out, (*shape, 5))
  jitted = jax.jit(lambda k: jaxdp.random.knorm(k, PosetBall(p), 1.0, shape))
  chex.assert_shape(jitted(jax.random.key(0)), (*shape, 5))
  chex.assert_shape(jaxdp.random.lp_ball(jax.random.key(0), 4, 2, shape), (*shape, 4))
  chex.assert_shape(jaxdp.random.laplace(jax.random.key(0), shape), shape)


@pytest.mark.slow
def test_jit_equals_eager_and_vmap_over_keys():
  p = Poset.nhis(2)
  key = jax.random.key(11)
  eager = jaxdp.random.poset_ball(key, p, (7,))
  traced = jax.jit(lambda k: jaxdp.random.poset_ball(k, p, (7,)))(key)
  chex.assert_trees_all_close(eager, traced)
  keys = jax.random.split(key, 4)
  batched = jax.vmap(lambda k: jaxdp.random.knorm(k, PosetBall(p), 1.0))(keys)
  chex.assert_shape(batched, (4, 12))
  chex.assert_tree_all_finite(batched)


def test_large_batch_is_chunked_and_reproducible():
  p = Poset.nhis(1)
  n = 200_000  # test_second_moment_matches_exact's kernel
  assert n > jaxdp.random.CHUNK and n % jaxdp.random.CHUNK  # several chunks, one partial
  a = jaxdp.random.poset_ball(jax.random.key(12), p, (n,))
  b = jaxdp.random.poset_ball(jax.random.key(12), p, (n,))
  chex.assert_trees_all_equal(a, b)
  assert len(np.unique(np.asarray(a), axis=0)) == n  # no chunk repeats another


def test_a_chunked_draw_is_in_the_program_once():
  """The chunk loop holds one copy of the draw's program (two copies compile twice:
  an unrolled 200-depth series-parallel kernel takes about a minute once)."""
  fn = lambda k, m: jnp.sin(jax.random.uniform(k, (m, 2)))
  jaxpr = jax.make_jaxpr(
    lambda k: chunks.chunked(fn, k, 3 * jaxdp.random.CHUNK + 1, (2,), jnp.float32)
  )(jax.random.key(0))
  assert str(jaxpr).count(" sin ") == 1


@pytest.mark.slow
@pytest.mark.parametrize("draw", ["poset", "linf"])
def test_large_batch_needs_one_chunk_beyond_the_output(draw):
  """XLA's compiled temporaries for a batch that is not a multiple of the chunk do not
  grow with the batch beyond the chunks' keys (8 bytes each): one chunk's working
  memory beyond the output, at 8 and at 16 chunks (stacking padded chunks and
  slicing kept a second, padded copy of the output)."""

  def temp(n):
    if draw == "poset":
      f = jax.jit(lambda k: jaxdp.random.poset_ball(k, Poset.nhis(1), (n,)))
    else:
      f = jax.jit(lambda k: jaxdp.random.knorm(k, LpBall(16, np.inf), 1.0, (n,)))
    return f.lower(jax.random.key(0)).compile().memory_analysis().temp_size_in_bytes

  assert temp(16 * jaxdp.random.CHUNK + 5) - temp(8 * jaxdp.random.CHUNK + 5) <= 1024


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16, jnp.float16])
def test_dtypes(dtype):
  out = jaxdp.random.knorm(jax.random.key(0), PosetBall(Poset.nhis(1)), 1.0, (3,), dtype)
  assert out.dtype == dtype
  assert jaxdp.random.lp_ball(jax.random.key(0), 3, 1, (2,), dtype).dtype == dtype


def test_typed_and_legacy_keys():
  p = Poset.nhis(1)  # (6,): test_shapes_and_jit's kernel
  a = jaxdp.random.poset_ball(jax.random.PRNGKey(0), p, (6,))
  b = jaxdp.random.poset_ball(jax.random.key(0), p, (6,))
  chex.assert_trees_all_close(a, b)


def test_traced_bad_eps_gives_nan_not_weaker_noise():
  f = jax.jit(
    lambda e: jaxdp.random.knorm(jax.random.key(0), PosetBall(Poset.nhis(1)), e, (2,))
  )
  assert np.isnan(np.asarray(f(-1.0))).all()
  assert np.isnan(np.asarray(f(jnp.inf))).all()
  assert np.isfinite(np.asarray(f(1.0))).all()


# ------------------------------------------------------------- bad input
@pytest.mark.parametrize("eps", [0.0, -1.0, float("nan"), float("inf"), "1", None])
def test_bad_eps(eps):
  with pytest.raises(ValueError, match="eps"):
    jaxdp.random.knorm(jax.random.key(0), PosetBall(Poset.nhis(1)), eps)


@pytest.mark.parametrize("eps", [5e-324, 1e-40, 1e39])
def test_eps_outside_normal_float32_is_refused(eps):
  """knorm scales in float32: eps = 5e-324 passed the positivity check, became 0
  there and the noise infinite (1e-40: a subnormal, flushed; 1e39: inf, zero noise).
  Refused up front, as the mechanisms do, for poset and l_p balls."""
  for ball in (PosetBall(Poset.nhis(1)), LpBall(4, math.inf)):
    with pytest.raises(ValueError, match=r"eps must be between .* \(a normal float32"):
      jaxdp.random.knorm(jax.random.key(0), ball, eps, (4,))


def test_bad_scale():
  with pytest.raises(ValueError, match="scale"):
    jaxdp.random.laplace(jax.random.key(0), scale=0.0)


def test_batched_key_rejected():
  keys = jax.random.split(jax.random.key(0), 3)
  with pytest.raises(ValueError, match="single PRNG key"):
    jaxdp.random.poset_ball(keys, Poset.nhis(1))
  with pytest.raises(ValueError, match="single PRNG key"):
    jaxdp.random.laplace(jax.random.split(jax.random.PRNGKey(0), 3))
  with pytest.raises(ValueError, match="PRNG key"):
    jaxdp.random.laplace(123)


def test_int_dtype_rejected():
  with pytest.raises(ValueError, match="floating dtype"):
    jaxdp.random.poset_ball(jax.random.key(0), Poset.nhis(1), (2,), jnp.int32)


def test_bad_shape_rejected():
  with pytest.raises(ValueError, match="shape"):
    jaxdp.random.lp_ball(jax.random.key(0), 3, 2, (-1,))


def test_general_sampler_size_limit():
  # a fence a1 < b1 > a2 < b2 ...: neither a forest nor series-parallel
  d = general.GENERAL_MAX_D + 1
  big = Poset.from_edges(
    d, [(i, i + 1) if i % 2 == 0 else (i + 1, i) for i in range(d - 1)]
  )
  assert not big.is_forest
  with pytest.raises(ValueError, match=f"d <= {general.GENERAL_MAX_D}"):
    jaxdp.random.poset_ball(jax.random.key(0), big)
  with pytest.raises(ValueError, match="d <= "):
    PosetBall(Poset.from_edges(general.GENERAL_MAX_D + 1, []), "general")


def test_forest_method_needs_forest():
  with pytest.raises(ValueError, match="forest"):
    PosetBall(Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)]), "forest")
  with pytest.raises(ValueError, match="method"):
    PosetBall(Poset.nhis(1), "fast")


@pytest.mark.slow
def test_auto_takes_forest_up_to_d16_then_sp_and_forest_runs_at_d30():
  # "auto" follows benchmarks/samplers.py: forest sampler up to d = 16, series-parallel
  # above; d = 30 is beyond the general sampler (d <= 22), the forest sampler runs it.
  small = Poset.from_parents([-1] + [i // 2 for i in range(15)])
  p = Poset.from_parents([-1] + [i // 2 for i in range(29)])
  assert PosetBall(small).resolved_method == "forest"
  assert PosetBall(p).resolved_method == "sp"
  assert PosetBall(Poset.nhis(3)).resolved_method == "forest"
  z = jaxdp.random.poset_ball(jax.random.key(0), p, (1000,), method="forest")
  chex.assert_shape(z, (1000, 31))
  assert np.abs(np.asarray(z)).max() <= 1.0


def test_bad_ball():
  with pytest.raises(ValueError, match="p must be"):
    LpBall(3, 0.5)
  with pytest.raises(ValueError, match="ball must be"):
    jaxdp.random.knorm(jax.random.key(0), "l2", 1.0)


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["a<c,b", "nhis1", "chain4"])
def test_forest_two_word_key_path_is_uniform(posets, name, monkeypatch):
  """Forests with d > 32 use two-word keys; select that path on small forests (a
  static argument, so no compilation cache can hide it) and run the object-frequency
  chi-square (n = 100_000, p > 1e-4)."""
  p = posets[name]
  ref = jaxdp.enumerate_objects(p)
  seq, k = dispatch.sample_objects(jax.random.key(300), p, "forest", 100_000, key_words=2)
  calls, pairs = [], forest._heap_order_pairs
  monkeypatch.setattr(forest, "_heap_order_pairs", lambda *a: calls.append(1) or pairs(*a))
  tables = jax.tree_util.tree_map(jnp.asarray, forest.forest_tables(p))
  jax.make_jaxpr(
    lambda key: dispatch.objects(  # a fresh trace: no cache
      key, tables, p.d, forest.forest_layout(p), 8, key_words=2
    )
  )(jax.random.key(0))
  assert calls  # key_words=2 does select the two-word path
  idx = object_index(np.asarray(seq), np.asarray(k), *ref)
  assert (idx >= 0).all()
  assert chi_square_uniform_pvalue(idx, ref[0].shape[0]) > P_MIN


@pytest.mark.slow
def test_posets_of_one_size_share_one_compilation():
  """Tables are data: only d and the forest layout are static, so new posets of the
  same size (general) or the same forest shape do not recompile the kernel."""
  from jaxdp import random as dprandom

  posets = [Poset.random(jax.random.key(i), 7) for i in range(5)]
  before = dprandom._poset_kernel._cache_size()
  for i, p in enumerate(posets):
    dprandom.poset_ball(jax.random.key(i), p, (123,), method="general")
  assert dprandom._poset_kernel._cache_size() - before == 1
  # two forests of one shape (a root with two children), elements labelled apart
  f1, f2 = Poset.from_parents([-1, 0, 0]), Poset.from_parents([1, -1, 1])
  assert forest.forest_layout(f1) == forest.forest_layout(f2)
  before = dprandom._poset_kernel._cache_size()
  z1 = dprandom.poset_ball(jax.random.key(0), f1, (5000,))
  z2 = dprandom.poset_ball(jax.random.key(0), f2, (5000,))
  assert dprandom._poset_kernel._cache_size() - before == 1
  # same random numbers, relabelled poset: the draws are the same up to relabelling
  # (element 0 of f1 is element 1 of f2)
  np.testing.assert_array_equal(
    np.asarray(z1)[:, [0, 1, 2, 3]], np.asarray(z2)[:, [0, 2, 1, 3]]
  )


@pytest.mark.statistical
@pytest.mark.parametrize("a,slots", [(3, None), (17, None), (17, 1), (2, None)])
def test_gamma_radius_is_gamma(a, slots):
  """Marsaglia-Tsang with exact replacement of rejected variates: Kolmogorov-Smirnov
  against scipy's Gamma(a) CDF, 200,000 draws, p > 1e-4; slots=1 forces the branch
  that replaces every rejection (about 340 here) from the full-size buffer."""
  from scipy import stats

  g = jax.jit(lambda k: jaxdp.random.gamma_radius(k, a, 200_000, jnp.float32, slots=slots))(
    jax.random.key(a)
  )
  assert stats.kstest(np.asarray(g, np.float64), stats.gamma(a).cdf).pvalue > 1e-4
