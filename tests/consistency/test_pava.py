"""The batched pool-adjacent-violators paths (chains, trees) against independent
references: scikit-learn's isotonic_regression on chains, the min-max formula
(exhaustive over up-sets) on small trees, scipy's nnls and BVLS on larger ones; all
in float64, to 1e-6 relative. Also ties, constant and huge vectors, batch shapes,
jit, NaN, and which solver each poset structure gets."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import nnls
from sklearn.isotonic import isotonic_regression

import jaxdp
from jaxdp import Poset
from jaxdp.consistency import chain as chain_module
from jaxdp.consistency import constraint_graph, series_parallel, solver, tree
from jaxdp.consistency.chain import chain_order
from jaxdp.consistency.series_parallel import pairwise_size, sp_plan
from tests.consistency.test_consistent import (
  assert_consistent,
  bvls_projection,
  minmax_projection,
)

# The solvers' parts, jitted as jaxdp.consistent runs them (called eagerly, every
# operation of their loops would compile on its own)
chain_isotonic = jax.jit(chain_module.chain_isotonic, static_argnums=(1, 2))
sp_isotonic = jax.jit(series_parallel.sp_isotonic, static_argnums=(1, 2))
scheduled_isotonic = jax.jit(tree.scheduled_isotonic, static_argnums=1)
windowed_isotonic = jax.jit(tree.windowed_isotonic, static_argnums=1)
tree_multipliers = jax.jit(tree.tree_multipliers, static_argnums=3)


def chain(d, seed=None):
  """A chain of d questions, labelled in a random order when ``seed`` is given;
  returns the poset and the vector positions from the top (n) down."""
  top_down = np.arange(d) if seed is None else np.random.default_rng(seed).permutation(d)
  edges = [(int(top_down[k + 1]), int(top_down[k])) for k in range(d - 1)]
  return Poset.from_edges(d, edges), np.r_[0, 1 + top_down]


def random_forest(d, seed):
  """A random recursive forest: each element below a uniform earlier one, or maximal."""
  rng = np.random.default_rng(seed)
  return Poset.from_parents([int(rng.integers(-1, i)) for i in range(d)])


def sklearn_projection(y, positions):
  """Projection onto a chain's counts: scikit-learn's non-increasing isotonic
  regression along the chain (n first), clipped at 0."""
  out = np.empty_like(y)
  for k, v in enumerate(y):
    out[k, positions] = isotonic_regression(v[positions], increasing=False)
  return np.maximum(out, 0.0)


def nnls_projection(y, poset):
  """Projection by scipy's nnls on the dual ``min_{lam >= 0} ||y - A^T lam||``
  (one row of ``A`` per cover pair and per maximal element), clipped at 0."""
  a = constraint_graph(poset).incidence
  return np.array(
    [np.maximum(v - a.T @ nnls(a.T, v, maxiter=50 * a.shape[0])[0], 0) for v in y]
  )


def hard_vectors(rng, batch, dim):
  """Noise around a decreasing profile, with ties (small integers), a constant
  vector, an increasing one (one block) and negative counts."""
  y = np.linspace(8, 0, dim) + 3 * rng.normal(size=(batch, dim))
  y[0] = rng.integers(0, 3, size=dim)  # many ties
  y[1] = 2.5  # constant: already consistent
  y[2] = np.arange(dim)  # increasing: one block
  y[3] = -np.abs(y[3])  # all clipped to 0
  return y


def test_chains_match_scikit_learn():
  rng = np.random.default_rng(0)
  with jax.enable_x64(True):
    for d, seed in ((1, None), (2, None), (3, 1), (7, 2), (40, 3)):
      poset, positions = chain(d, seed)
      y = hard_vectors(rng, 24, d + 1)
      z, cert = jaxdp.consistent(y, poset, method="batched", certificate=True)
      np.testing.assert_allclose(np.asarray(z), sklearn_projection(y, positions), atol=1e-9)
      assert bool(jnp.all(cert.ok)) and float(jnp.max(cert.violation)) == 0.0
      assert_consistent(z, poset)


def test_chain_first_pools_match_scikit_learn():
  """Shapes whose runs pool into the blocks above them at many levels before the
  stack (random walks, saw teeth, alternating values, staircases, ties), in
  float64 against scikit-learn."""
  rng = np.random.default_rng(5)
  d = 60
  t = np.arange(d + 1)
  shapes = [
    np.cumsum(rng.normal(size=(6, d + 1)), axis=1),  # random walks
    np.cumsum(rng.normal(size=(6, d + 1)), axis=1)[:, ::-1],
    np.broadcast_to((t % 7) - 0.1 * t, (2, d + 1)),  # saw teeth on a slope
    np.broadcast_to((t % 5)[::-1] + 0.05 * t, (2, d + 1)),
    np.broadcast_to(np.where(t % 2, 10.0, -10.0) + 0.2 * t, (2, d + 1)),
    np.broadcast_to(np.repeat(np.arange(12)[::-1], 6)[: d + 1] * 1.0, (2, d + 1)),
    rng.integers(0, 4, size=(6, d + 1)).astype(float),  # ties
    rng.normal(size=(6, d + 1)) + np.linspace(-3, 3, d + 1),
  ]
  y = np.concatenate([np.asarray(s, float) for s in shapes])
  with jax.enable_x64(True):
    for seed in (None, 8):
      poset, positions = chain(d, seed)
      for v in (y, -y):
        z, cert = jaxdp.consistent(v, poset, method="batched", certificate=True)
        want = sklearn_projection(v, positions)
        np.testing.assert_allclose(np.asarray(z), want, atol=1e-9)
        assert bool(jnp.all(cert.ok)) and float(jnp.max(cert.violation)) == 0.0


def test_chain_batch_of_many_vectors():
  """A batch of 133 vectors in float32: the loop runs until its slowest vector is
  done, and the vectors done before it keep their result."""
  poset, positions = chain(20, 4)
  rng = np.random.default_rng(4)
  y = hard_vectors(rng, 133, 21).astype(np.float32)
  z, cert = jaxdp.consistent(y, poset, method="batched", certificate=True)
  want = sklearn_projection(y.astype(np.float64), positions)
  np.testing.assert_allclose(np.asarray(z), want, atol=1e-5 * np.abs(y).max())
  assert bool(jnp.all(cert.ok))


def test_the_chain_certificate_summed_in_its_scan_equals_certify():
  """The chain solver sums its certificate in its last scan; on blocks that are not
  the solution (random partitions of the path: block means out of order, so a
  violation, and multipliers of both signs) it gives ``certify``'s numbers for the
  ``w`` and ``lam`` the scan returns; 1e-5 relative (float32 sums in another
  order) or 1e-6 of the field's largest value."""
  from jaxdp.consistency.certificate import certify, from_sums, gap_scale
  from jaxdp.consistency.graph import ConstraintGraph

  rng = np.random.default_rng(7)
  n, b = 9, 6
  path = ConstraintGraph(n, tuple(range(1, n)), tuple(range(n - 1)))  # 0 on top
  y = (rng.normal(size=(b, n)) * 10).astype(np.float32)
  sums, sizes = np.zeros((n, b), np.float32), np.ones((n, b), np.float32)
  below = np.zeros(b, np.int32)
  for v in range(b):  # blocks from the bottom: block j's sum and size on row n - 1 - j
    cuts = np.sort(rng.choice(np.arange(1, n), size=rng.integers(1, n - 1), replace=False))
    edges = np.r_[0, cuts, n]
    for j, (lo, hi) in enumerate(zip(edges[:-1][::-1], edges[1:][::-1])):
      sums[n - 1 - j, v], sizes[n - 1 - j, v] = y[v, lo:hi].sum(), hi - lo
    below[v] = len(edges) - 2
  top = jnp.maximum(1.0, jnp.max(jnp.abs(jnp.asarray(y)), axis=-1))
  inv = gap_scale(top)
  (w, lam), (violation, scaled) = chain_module._expand(
    jnp.asarray(y.T), jnp.asarray(sums), jnp.asarray(sizes), jnp.asarray(below), inv
  )
  got = from_sums(violation, scaled, inv, top, 1e-3)
  want = certify(jnp.asarray(y), w.T, lam[1:].T, path, 1e-3)
  for name, g, v in zip(want._fields, got, want):
    v = np.asarray(v)  # (a partition that is the solution has a gap of rounding)
    atol = 1e-6 * np.max(np.abs(v)) if v.dtype != bool else 0
    np.testing.assert_allclose(np.asarray(g), v, rtol=1e-5, atol=atol, err_msg=name)
  assert float(jnp.max(want.violation)) > 0 and np.sum(np.asarray(want.gap) > 1) >= 4


def test_chain_of_512_and_huge_values():
  poset, positions = chain(512, 4)
  rng = np.random.default_rng(1)
  with jax.enable_x64(True):
    y = hard_vectors(rng, 6, 513)
    y[4] *= 1e12  # huge counts: agreement relative to the scale
    y[5] = 1e15 + rng.integers(0, 1000, size=513)
    z, cert = jaxdp.consistent(y, poset, method="batched", certificate=True)
    ref = sklearn_projection(y, positions)
    scale = np.maximum(1.0, np.abs(y).max(axis=1, keepdims=True))
    assert np.all(np.abs(np.asarray(z) - ref) <= 1e-6 * scale)
    assert bool(jnp.all(cert.ok))


@pytest.mark.parametrize("d", [2, 5, 8])
def test_small_trees_match_the_minmax_formula(d):
  """Both tree forms (the static schedule and the preorder windows), exhaustively
  checked against the min-max formula."""
  rng = np.random.default_rng(d)
  with jax.enable_x64(True):
    for seed in range(2):
      poset = random_forest(d, 10 * d + seed)
      graph = constraint_graph(poset)
      y = hard_vectors(rng, 8, d + 1)
      want = np.array([minmax_projection(v, poset) for v in y])
      for form in (scheduled_isotonic, windowed_isotonic):
        w, _ = form(jnp.asarray(y), graph)
        np.testing.assert_allclose(np.maximum(np.asarray(w), 0), want, atol=1e-9)


def test_forests_match_nnls_and_bvls():
  rng = np.random.default_rng(7)
  with jax.enable_x64(True):
    for poset in (random_forest(60, 1), Poset.nhis(3), Poset.from_edges(30, [])):
      y = hard_vectors(rng, 6, poset.d + 1)
      z, cert = jaxdp.consistent(y, poset, method="batched", certificate=True)
      np.testing.assert_allclose(np.asarray(z), nnls_projection(y, poset), atol=1e-6)
      np.testing.assert_allclose(
        np.asarray(z[4:]), [bvls_projection(v, poset) for v in y[4:]], atol=1e-6
      )
      assert bool(jnp.all(cert.ok))


@pytest.mark.slow
def test_forest_of_512_matches_nnls():
  poset = random_forest(512, 2)
  rng = np.random.default_rng(3)
  with jax.enable_x64(True):
    y = np.linspace(40, 0, 513) + 5 * rng.normal(size=(2, 513))
    z, cert = jaxdp.consistent(y, poset, method="batched", certificate=True)
    np.testing.assert_allclose(np.asarray(z), nnls_projection(y, poset), atol=1e-6)
    assert bool(jnp.all(cert.ok))


def test_structure_picks_the_solver():
  """Chains take the chain path; forests the series-parallel path (bit for bit),
  except where a group would need pairwise tests past FOREST_PAIRWISE_MAX values (a long
  path with side branches): the tree path, whose projection there matches scipy's
  nnls; the tree forms agree with the chain path on a chain."""
  rng = np.random.default_rng(5)
  poset, _ = chain(9, 6)
  graph = constraint_graph(poset)
  y = jnp.asarray(hard_vectors(rng, 16, 10), jnp.float32)
  w, lam, _ = solver.isotonic_batched(y, graph, 1e-4)
  w_chain, lam_chain, _ = chain_isotonic(y, graph, 1e-4)
  np.testing.assert_array_equal(np.asarray(w), np.asarray(w_chain))
  w_tree, label = windowed_isotonic(y, graph)  # a chain is a tree too
  np.testing.assert_allclose(np.asarray(w_tree), np.asarray(w), atol=1e-5)
  lam_tree = tree_multipliers(y, w_tree, label, graph)
  np.testing.assert_allclose(np.asarray(lam_tree), np.asarray(lam_chain), atol=1e-4)
  w_sched, _ = scheduled_isotonic(y, graph)
  np.testing.assert_allclose(np.asarray(w_sched), np.asarray(w), atol=1e-5)
  for poset in (random_forest(40, 8), Poset.nhis(3)):
    forest = constraint_graph(poset)
    assert pairwise_size(sp_plan(forest)) <= solver.FOREST_PAIRWISE_MAX
    yf = jnp.asarray(hard_vectors(rng, 16, forest.dim), jnp.float32)
    w, _, _ = solver.isotonic_batched(yf, forest, 1e-4)
    np.testing.assert_array_equal(
      np.asarray(w), np.asarray(sp_isotonic(yf, forest, 1e-4)[0])
    )
    np.testing.assert_allclose(
      np.asarray(w), np.asarray(windowed_isotonic(yf, forest)[0]), atol=1e-4
    )
  # a path of 40 with a leaf on each node: long series, no single side
  comb = Poset.from_parents([-1] + [max(0, 2 * ((i - 1) // 2)) for i in range(1, 80)])
  graph = constraint_graph(comb)
  assert pairwise_size(sp_plan(graph)) > solver.FOREST_PAIRWISE_MAX
  yc = jnp.asarray(hard_vectors(rng, 16, 81), jnp.float32)
  w, _, _ = solver.isotonic_batched(yc, graph, 1e-4)
  np.testing.assert_array_equal(np.asarray(w), np.asarray(windowed_isotonic(yc, graph)[0]))
  want = nnls_projection(np.asarray(yc, np.float64), comb)  # scipy's, in float64
  np.testing.assert_allclose(np.maximum(np.asarray(w), 0), want, atol=1e-4)
  assert chain_order(constraint_graph(Poset.nhis(3))) is None
  with pytest.raises(ValueError, match="chain poset"):
    chain_isotonic(y, constraint_graph(Poset.from_edges(9, [])), 1e-4)


def test_batch_shapes_jit_and_nan():
  poset = random_forest(12, 3)
  rng = np.random.default_rng(6)
  y = hard_vectors(rng, 24, 13).astype(np.float32)
  z = np.asarray(jaxdp.consistent(y, poset))
  z3 = jaxdp.consistent(y.reshape(2, 12, 13), poset)
  np.testing.assert_array_equal(np.asarray(z3).reshape(24, 13), z)
  jitted = jax.jit(lambda v: jaxdp.consistent(v, poset, certificate=True))
  zj, cert = jitted(y)
  np.testing.assert_array_equal(np.asarray(zj), z)
  assert bool(jnp.all(cert.ok))
  with jax.enable_x64(True):
    np.testing.assert_allclose(
      z, nnls_projection(y.astype(np.float64), poset), atol=2e-5 * 12
    )
  # NaN: a clear error on concrete input; under jit, flagged (the loops still end)
  bad = y.copy()
  bad[5, 4] = np.nan
  with pytest.raises(ValueError, match=r"y must be finite; y\[5, 4\]"):
    jaxdp.consistent(bad, poset)
  zb, cert = jitted(bad)
  assert not bool(cert.ok[5]) and bool(jnp.all(np.delete(np.asarray(cert.ok), 5)))
  chain_poset, _ = chain(12, 7)
  zc, cert = jax.jit(lambda v: jaxdp.consistent(v, chain_poset, certificate=True))(bad)
  assert not bool(cert.ok[5]) and bool(jnp.all(np.delete(np.asarray(cert.ok), 5)))
