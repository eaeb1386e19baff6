"""The exact series-parallel path against independent references: the min-max
formula (exhaustive over up-sets) on small random series-parallel posets, scipy's
nnls on the dual on larger ones (diamonds side by side, a questionnaire); its
multipliers as a flow (``y - w = A^T lam``, zero off the blocks); ties, constant,
reversed and negative vectors, batches past the chunk size, NaN, and which posets
take it."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Poset
from jaxdp.consistency import constraint_graph, series_parallel, solver
from jaxdp.consistency.series_parallel import CHUNK, sp_plan
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from tests.consistency.test_consistent import minmax_projection
from tests.consistency.test_pava import hard_vectors, nnls_projection

# jitted as jaxdp.consistent runs it (eagerly, each operation compiles on its own)
sp_isotonic = jax.jit(series_parallel.sp_isotonic, static_argnums=(1, 2))


def random_sp(d, seed):
  """A random series-parallel poset on d elements (random series and parallel
  compositions of random splits), as relation pairs ``(lower, upper)``."""
  rng = np.random.default_rng(seed)
  edges = []

  def build(elems):
    if len(elems) == 1:
      return
    cut = int(rng.integers(1, len(elems)))
    low, high = elems[:cut], elems[cut:]
    build(low)
    build(high)
    if rng.random() < 0.5:  # series: all of low below all of high
      edges.extend((a, b) for a in low for b in high)

  build(list(rng.permutation(d)))
  return Poset.from_edges(d, edges)


def diamonds(d):
  out = []
  for k in range(0, d - 3, 4):
    out += [(k, k + 1), (k, k + 2), (k + 1, k + 3), (k + 2, k + 3)]
  return Poset.from_edges(d, out)


def reversed_and_tied(rng, batch, dim):
  y = hard_vectors(rng, batch, dim)
  y[4] = np.arange(dim)[::-1]  # already consistent (n largest)
  y[5] = 0.0  # all equal
  return y


@pytest.mark.parametrize("seed", range(4))
def test_small_random_posets_match_the_minmax_formula(seed):
  poset = random_sp(7, seed)
  graph = constraint_graph(poset)
  assert not graph.is_tree or seed  # the first is no forest: the path is exercised
  rng = np.random.default_rng(seed)
  with jax.enable_x64(True):
    y = reversed_and_tied(rng, 8, 8)
    w, lam, cert = sp_isotonic(jnp.asarray(y), graph, 1e-8)
    want = np.array([minmax_projection(v, poset) for v in y])
    np.testing.assert_allclose(np.maximum(np.asarray(w), 0), want, atol=1e-9)
    assert bool(jnp.all(cert.ok))
    # the multipliers are a flow on tight edges: y - w = A^T lam, lam >= 0
    a = graph.incidence
    lam = np.asarray(lam)
    assert np.all(lam >= 0)
    np.testing.assert_allclose(lam @ a, y - np.asarray(w), atol=1e-9)
    assert np.all(lam[np.abs(np.asarray(w) @ a.T) > 0] == 0)


def test_larger_posets_match_nnls():
  rng = np.random.default_rng(1)
  with jax.enable_x64(True):
    for poset in (diamonds(30), synthetic_questionnaire(0, 40), random_sp(24, 9)):
      assert sp_plan(constraint_graph(poset)) is not None
      y = reversed_and_tied(rng, 8, poset.d + 1)
      z, cert = jaxdp.consistent(y, poset, method="batched", certificate=True)
      exact = jaxdp.consistent(y, poset, method="exact")  # minimum cuts, on the host
      np.testing.assert_allclose(np.asarray(z), np.asarray(exact), atol=1e-9)
      # nnls stops short on the row of ties; the others agree with it too
      np.testing.assert_allclose(
        np.asarray(z[1:]), nnls_projection(y[1:], poset), atol=1e-7
      )
      assert bool(jnp.all(cert.ok))


def test_float32_batches_past_the_chunk_and_nan():
  poset = diamonds(16)
  rng = np.random.default_rng(2)
  y = (np.linspace(30, 0, 17) + 4 * rng.normal(size=(CHUNK + 3, 17))).astype(np.float32)
  jitted = jax.jit(lambda v: jaxdp.consistent(v, poset, certificate=True))
  z, cert = jitted(y)
  assert bool(jnp.all(cert.ok))
  with jax.enable_x64(True):
    want = nnls_projection(y.astype(np.float64), poset)
  np.testing.assert_allclose(np.asarray(z), want, atol=1e-6 * 40)
  bad = y.copy()
  bad[CHUNK + 1, 3] = np.nan
  with pytest.raises(ValueError, match=r"y must be finite; y\[129, 3\]"):
    jaxdp.consistent(bad, poset)
  _, cert = jitted(bad)  # under jit: flagged, and the Newton loops still end
  ok = np.asarray(cert.ok)
  assert not ok[CHUNK + 1] and ok.sum() == CHUNK + 2


def test_which_posets_take_it():
  """Series-parallel posets that are no forest take this path (bit for bit); an
  induced N (not series-parallel) keeps the dual solver, which agrees with nnls."""
  rng = np.random.default_rng(3)
  poset = synthetic_questionnaire(1, 30)
  graph = constraint_graph(poset)
  y = jnp.asarray(hard_vectors(rng, 16, 31), jnp.float32)
  w, _, _ = solver.isotonic_batched(y, graph, 1e-4)
  np.testing.assert_array_equal(np.asarray(w), np.asarray(sp_isotonic(y, graph, 1e-4)[0]))
  w_dual, _, _ = solver.isotonic_batched(y, graph, 1e-4, tree_path=False)
  np.testing.assert_allclose(np.asarray(w_dual), np.asarray(w), atol=1e-3)
  n_poset = Poset.from_edges(4, [(0, 1), (2, 1), (2, 3)])  # a < b > c < d
  n_graph = constraint_graph(n_poset)
  assert sp_plan(n_graph) is None
  with pytest.raises(ValueError, match="series-parallel poset"):
    sp_isotonic(jnp.zeros((2, 5)), n_graph, 1e-4)
  with jax.enable_x64(True):
    yn = reversed_and_tied(rng, 8, 5)
    z = jaxdp.consistent(yn, n_poset, method="batched")
    np.testing.assert_allclose(
      np.asarray(z[1:]), nnls_projection(yn[1:], n_poset), atol=1e-6
    )
