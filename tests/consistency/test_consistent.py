"""jaxdp.consistent against independent references: the min-max formula of isotonic
regression (exact, by enumerating up-sets), scipy's BVLS on the dual, the KKT
conditions written out from the poset's order, non-expansiveness and idempotence."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import lsq_linear

import jaxdp
from jaxdp import Poset
from jaxdp.consistency import constraint_graph, exact, solver
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from tests.helpers import small_posets

POSETS = small_posets()
POSETS["nhis3"] = Poset.nhis(3)


def extended_order(poset):
  """``ext[a][b]``: ``z_a <= z_b`` is required (node 0 = n, above every question)."""
  d = poset.d
  ext = np.zeros((d + 1, d + 1), bool)
  ext[0, 0] = True
  ext[1:, 0] = True
  ext[1:, 1:] = poset.order
  return ext


def minmax_projection(y, poset):
  """Robertson, Wright & Dykstra (1988), Theorem 1.4.4: the isotonic regression is
  ``w_i = max_{U up-set, i in U} min_{L down-set, i in L} mean(y[U & L])``; clipping
  it at 0 gives the projection with the lower bound."""
  ext = Poset.from_order(extended_order(poset))
  ups = ext.filters().astype(bool)
  downs = ~ups
  w = np.empty(len(y))
  for i in range(len(y)):
    best = -np.inf
    for u in ups[ups[:, i]]:
      inner = min(y[u & lo].mean() for lo in downs[downs[:, i]])
      best = max(best, inner)
    w[i] = best
  return np.maximum(w, 0.0)


def bvls_projection(y, poset):
  """scipy's bounded-variable least squares (an exact active-set method) on the dual:
  ``min_{lam >= 0} ||y - G^T lam||`` with one row of ``G`` per Hasse-diagram pair
  (``z_lo - z_hi``), per maximal element (``z_q - n``) and per lower bound
  (``-z_i``); the projection is ``y - G^T lam``."""
  d = poset.d
  cover = np.zeros((d + 1, d + 1), bool)
  cover[1:, 1:] = poset.cover_matrix
  cover[1:, 0] = ~poset.cover_matrix.any(axis=1)
  pairs = np.argwhere(cover)
  g = np.zeros((len(pairs), d + 1))
  g[np.arange(len(pairs)), pairs[:, 0]] = 1.0
  g[np.arange(len(pairs)), pairs[:, 1]] -= 1.0
  g = np.concatenate([g, -np.eye(d + 1)])
  res = lsq_linear(g.T, y, bounds=(0, np.inf), method="bvls", tol=1e-12)
  assert res.success, res.message
  return y - g.T @ res.x


def assert_consistent(z, poset, atol=0.0):
  z = np.asarray(z, np.float64).reshape(-1, poset.d + 1)
  ext = extended_order(poset)
  a, b = np.nonzero(ext)
  assert np.all(z[:, a] <= z[:, b] + atol)
  assert np.all(z >= -atol)


def noisy(seed, poset, batch, scale=3.0):
  rng = np.random.default_rng(seed)
  base = rng.integers(0, 6, size=(batch, 1)) * np.linspace(1, 0, poset.d + 1)
  return base + scale * rng.normal(size=(batch, poset.d + 1))


@pytest.mark.parametrize("name", sorted(POSETS))
def test_exact_path_matches_minmax_formula_and_kkt(name):
  poset = POSETS[name]
  ys = noisy(1, poset, 12)
  graph = constraint_graph(poset)
  for y in ys:
    z, cert = jaxdp.consistent(y, poset, method="exact", certificate=True)
    if poset.d <= 8:
      np.testing.assert_allclose(np.asarray(z), minmax_projection(y, poset), atol=1e-5)
    assert_consistent(z, poset)
    assert bool(cert.ok) and float(cert.violation) == 0.0
    # KKT of the isotonic part, written from the host algorithm's multipliers
    w, lam = exact.isotonic_host(y, graph)
    assert np.all(lam >= 0)
    a = graph.incidence
    np.testing.assert_allclose(y - w, a.T @ lam, atol=1e-9)
    assert np.all((lam == 0) | (np.abs(a @ w) <= 1e-12))  # complementary slackness
    assert np.all(a @ w <= 1e-12)


def test_exact_path_on_a_questionnaire_matches_bvls():
  poset = synthetic_questionnaire(3, 40)
  assert not poset.is_forest
  for y in noisy(2, poset, 2, scale=5.0):
    z = jaxdp.consistent(y, poset, method="exact")
    np.testing.assert_allclose(np.asarray(z), bvls_projection(y, poset), atol=2e-4)


BATCH_POSETS = ("nhis3", "diamond5")


@pytest.mark.parametrize("name", BATCH_POSETS)
def test_batched_equals_exact_and_is_certified(name):
  poset = POSETS[name]
  ys = noisy(4, poset, 64).astype(np.float32)
  zb, cert = jaxdp.consistent(ys, poset, method="batched", certificate=True)
  assert cert.ok.shape == (64,)
  assert_consistent(zb, poset)
  for k in range(0, 64, 8):
    ze = jaxdp.consistent(ys[k].astype(np.float64), poset, method="exact")
    np.testing.assert_allclose(np.asarray(zb[k]), np.asarray(ze), atol=2e-4)
  assert float(jnp.mean(cert.ok)) >= 0.9  # the rest go to the exact path under "auto"
  if poset.is_forest:  # the dual solver on the same tree agrees with the tree path
    graph = constraint_graph(poset)
    w, _, c2 = solver.isotonic_batched(jnp.asarray(ys), graph, 1e-4, tree_path=False)
    np.testing.assert_allclose(np.maximum(np.asarray(w), 0), np.asarray(zb), atol=2e-3)
    assert float(jnp.mean(c2.ok)) >= 0.9
  z_auto, c_auto = jaxdp.consistent(ys, poset, certificate=True)
  assert bool(jnp.all(c_auto.ok))
  # leading axes: the same vectors, reshaped
  z3 = jaxdp.consistent(ys.reshape(4, 16, -1), poset)
  np.testing.assert_array_equal(np.asarray(z3).reshape(64, -1), np.asarray(z_auto))


def test_never_farther_from_feasible_truth_and_idempotent():
  poset = Poset.nhis(3)
  rng = np.random.default_rng(5)
  # feasible x: column sums of filters (every row closed upward)
  truths = []
  for _ in range(8):
    m = rng.integers(1, 50)
    rows = np.zeros((m, poset.d), bool)
    for r in range(m):
      seed = rng.random(poset.d) < 0.3
      rows[r] = np.any(seed[:, None] & poset.order, axis=0)  # the up-set it generates
    truths.append(np.concatenate([[m], rows.sum(0)]).astype(np.float64))
  x = np.repeat(np.array(truths), 32, axis=0)
  y = x + 8.0 * rng.normal(size=x.shape)
  z = np.asarray(jaxdp.consistent(y.astype(np.float32), poset), np.float64)
  assert np.all(np.linalg.norm(z - x, axis=1) <= np.linalg.norm(y - x, axis=1) + 1e-3)
  xs = np.array(truths, np.float32)
  np.testing.assert_array_equal(np.asarray(jaxdp.consistent(xs, poset)), xs)
  np.testing.assert_array_equal(np.asarray(jaxdp.consistent(xs[0], poset)), xs[0])


def test_integer_option_is_consistent_rounding():
  poset = POSETS["diamond5"]
  ys = noisy(8, poset, 64).astype(np.float32)  # the shape of an earlier test: no compile
  zi = jaxdp.consistent(ys, poset, integer=True)
  assert jnp.issubdtype(zi.dtype, jnp.integer)
  assert_consistent(zi, poset)
  np.testing.assert_array_equal(
    np.asarray(zi), np.round(np.asarray(jaxdp.consistent(ys, poset)))
  )


def test_under_jit_and_vmap():
  poset = POSETS["nhis1"]
  ys = noisy(9, poset, 8).astype(np.float32)
  direct = jaxdp.consistent(ys, poset, method="exact")  # the host path: no compilation
  jitted = jax.jit(lambda v: jaxdp.consistent(v, poset, certificate=True))
  z, cert = jitted(ys)
  mapped = jax.vmap(lambda v: jaxdp.consistent(v, poset, method="batched"))(ys)
  np.testing.assert_allclose(np.asarray(z), np.asarray(direct), atol=1e-5)
  np.testing.assert_allclose(np.asarray(mapped), np.asarray(direct), atol=1e-5)
  assert bool(jnp.all(cert.ok))
  # under jit a NaN cannot be refused: it must not come back certified
  bad = ys.copy()
  bad[3, 2] = np.nan
  z, cert = jitted(bad)
  assert not bool(cert.ok[3]) and bool(jnp.all(cert.ok[:3]))
  assert np.isnan(np.asarray(z[3])).any()


def test_bad_input_names_the_argument():
  poset = POSETS["nhis1"]
  y = np.ones(5)
  with pytest.raises(ValueError, match=r"y must have shape \(\.\.\., 5\).*\(4,\)"):
    jaxdp.consistent(y[:4], poset)
  for bad in (np.nan, np.inf, -np.inf):
    v = y.copy()
    v[3] = bad
    with pytest.raises(ValueError, match=r"y must be finite; y\[3\]"):
      jaxdp.consistent(v, poset)
  with pytest.raises(TypeError, match="poset must be a jaxdp.Poset"):
    jaxdp.consistent(y, [[1]])
  with pytest.raises(TypeError, match="y must hold real numbers"):
    jaxdp.consistent(np.array(["a"] * 5), poset)
  with pytest.raises(ValueError, match="method must be one of"):
    jaxdp.consistent(y, poset, method="fast")
  with pytest.raises(ValueError, match="tol must be"):
    jaxdp.consistent(y, poset, tol=0.0)
  with pytest.raises(ValueError, match="method='exact'.*concrete"):
    jax.jit(lambda v: jaxdp.consistent(v, poset, method="exact"))(y)


def test_integer_option_refuses_or_flags_counts_past_int32():
  chain = Poset.from_edges(3, [(1, 0), (2, 1)])
  ys = np.array(
    [[3e9, 1e9, 2, 5], [1e10, 1e10, 1e10, 1e10], [np.nan, 1, 1, 1], [10, 5, 2, 1]],
    np.float32,
  )
  z, cert = jax.jit(lambda v: jaxdp.consistent(v, chain, integer=True, certificate=True))(
    ys
  )
  np.testing.assert_array_equal(np.asarray(cert.ok), [False, False, False, True])
  np.testing.assert_array_equal(np.asarray(z[3]), [10, 5, 2, 1])
  limit = np.iinfo(np.asarray(z).dtype).max
  with pytest.raises(ValueError, match=rf"y has a value 3e\+09 larger than {limit}"):
    jaxdp.consistent(ys[0], chain, integer=True)
  np.testing.assert_array_equal(  # in range: still served
    np.asarray(jaxdp.consistent(np.array([2.0e9, 1, 1, 1]), chain, integer=True)),
    [2_000_000_000, 1, 1, 1],
  )


def test_integer_rounding_can_end_farther_but_within_half_per_count():
  """The documented limit of the guarantee: the projection is never farther from the
  truth, its rounding can be (x = (1, 1), y = (0, 1) -> (0, 0)), by at most 1/2 a
  coordinate."""
  one = Poset.from_edges(1, [])
  x, y = np.array([1.0, 1.0]), np.array([0.0, 1.0])
  zi = np.asarray(jaxdp.consistent(y, one, integer=True))
  z = np.asarray(jaxdp.consistent(y, one))
  np.testing.assert_array_equal(zi, [0, 0])
  assert np.linalg.norm(z - x) <= np.linalg.norm(y - x) < np.linalg.norm(zi - x)
  assert np.max(np.abs(zi - z)) <= 0.5
