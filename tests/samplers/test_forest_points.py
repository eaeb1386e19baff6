"""The forest kernel's points and K-norm noise (heap keys as values, two Gamma
variates: :mod:`jaxdp.samplers.forest_points`) and the Gamma sampler with a shape per
variate, against exact references: fourth moments by enumeration of the objects, and
scipy's Gamma CDF."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import Poset
from jaxdp.samplers import forest, forest_points, gamma, simplex_vertices

Z_MAX = 5.0


def _dirichlet_weights4(m):
  """W[a, b, c, e] = E[w_a w_b w_c w_e] for Dirichlet(1, ..., 1) weights on m
  vertices: prod_i (n_i)! / (m (m+1) (m+2) (m+3)), n_i the multiplicity of i."""
  w = np.zeros((m,) * 4)
  for idx in itertools.product(range(m), repeat=4):
    w[idx] = np.prod([math.factorial(idx.count(i)) for i in set(idx)])
  return w / (m * (m + 1) * (m + 2) * (m + 3))


def _exact_fourth_moment(poset):
  """E[Z_a Z_b Z_c Z_e] for Z uniform in the poset ball, by enumerating the objects
  (equal-volume simplices; odd moments vanish, the ball being symmetric)."""
  seq, k = jaxdp.enumerate_objects(poset)
  dim = poset.d + 1
  total = np.zeros((dim,) * 4)
  w = _dirichlet_weights4(dim + 1)
  for s, kk in zip(seq, k):
    v = simplex_vertices(poset, s, int(kk))
    total += np.einsum("abce,ai,bj,ck,el->ijkl", w, v, v, v, v)
  return total / len(seq)


def _fourth_moment_zscores(z, exact):
  z = np.asarray(z, np.float64)
  out = []
  for a, b, c, e in itertools.combinations_with_replacement(range(z.shape[1]), 4):
    p = z[:, a] * z[:, b] * z[:, c] * z[:, e]
    out.append((p.mean() - exact[a, b, c, e]) / (p.std(ddof=1) / np.sqrt(len(p))))
  return np.array(out)


@pytest.fixture(scope="module")
def forest_kernel():
  """One jitted kernel per key width for NHIS's first section (a forest, d = 4)."""
  p = Poset.nhis(1)
  tables = jax.tree_util.tree_map(jnp.asarray, forest.forest_tables(p))
  layout = forest.forest_layout(p)

  def make(words):
    def f(key, n):
      k1, k2 = jax.random.split(key)
      return forest_points.forest_noise(k1, k2, tables, layout, n, jnp.float32, words)

    return jax.jit(f, static_argnums=1)

  return p, {1: make(1), 2: make(2)}


@pytest.mark.statistical
@pytest.mark.parametrize("key_words", [1, 2])
def test_forest_points_fourth_moments_match_enumeration(forest_kernel, key_words):
  """z-scores of the sample E[Z_a Z_b Z_c Z_e] (n = 200,000, all 70 entries) against
  the exact moments of the uniform law on NHIS's first section, |z| < 5, for one- and
  two-word heap keys; and the noise's radius y / Z = G_A + G_B is Gamma(d + 2) (KS,
  p > 1e-4)."""
  p, kernels = forest_kernel
  y, r = kernels[key_words](jax.random.key(30 + key_words), 200_000)
  y, r = np.asarray(y, np.float64), np.asarray(r, np.float64)
  zs = _fourth_moment_zscores(y / r[:, None], _exact_fourth_moment(p))
  assert np.abs(zs).max() < Z_MAX, zs
  assert stats.kstest(r, stats.gamma(p.d + 2).cdf).pvalue > 1e-4


@pytest.mark.statistical
def test_forest_noise_is_radius_times_uniform_point(forest_kernel):
  """K-norm noise Y = R Z: E[Y Y^T] = (D+1)(D+2) E[Z Z^T] (D = d + 1; n = 200,000,
  |z| < 5), and the radius R is independent of the direction: the correlation of R
  with Z_0 and with ||Z||_2^2 is below 4 / sqrt(n)."""
  p, kernels = forest_kernel
  y, r = kernels[1](jax.random.key(40), 200_000)
  y, r = np.asarray(y, np.float64), np.asarray(r, np.float64)
  dim = p.d + 1
  exact = jaxdp.exact_second_moment(p) * (dim + 1) * (dim + 2)
  iu = np.triu_indices(dim)
  prods = y[:, iu[0]] * y[:, iu[1]]
  zs = (prods.mean(0) - exact[iu]) / (prods.std(0, ddof=1) / np.sqrt(len(y)))
  assert np.abs(zs).max() < Z_MAX, zs
  z = y / r[:, None]
  for stat in (z[:, 0], np.sum(z * z, axis=1)):
    assert abs(np.corrcoef(r, stat)[0, 1]) < 4 / np.sqrt(len(r))


@pytest.mark.statistical
@pytest.mark.parametrize("slots", [None, 8])
def test_gamma_shapes_is_gamma_per_shape(slots):
  """Gamma(a_i) with a shape per variate (a = 1, 2, 5, 16 interleaved, 20,000 each):
  Kolmogorov-Smirnov against scipy's Gamma(a) CDF per shape, p > 1e-4; slots=8 forces
  the branch that replaces every rejection from the full-size buffer."""
  shapes = jnp.tile(jnp.array([1, 2, 5, 16], jnp.int32), 20_000).reshape(2, -1)
  g = jax.jit(lambda k: gamma.gamma_shapes(k, shapes, 16, jnp.float32, slots=slots))(
    jax.random.key(50)
  )
  g, a = np.asarray(g, np.float64).ravel(), np.asarray(shapes).ravel()
  assert g.shape == a.shape and np.all(g > 0)
  for shape in (1, 2, 5, 16):
    assert stats.kstest(g[a == shape], stats.gamma(shape).cdf).pvalue > 1e-4, shape
