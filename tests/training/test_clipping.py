"""Per-example clipping: exact against a float64 reference, and the float hazards
(underflow, overflow, NaN) that would let an example through unclipped."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp.training import clip_per_example, per_example_norms

C = 1.5


def _grads(scales, seed=0):
  rng = np.random.default_rng(seed)
  b = len(scales)
  s = np.asarray(scales, np.float64)
  return {
    "w": (rng.standard_normal((b, 3, 4)) * s[:, None, None] / 4).astype(np.float32),
    "b": (rng.standard_normal((b, 4)) * s[:, None] / 2).astype(np.float32),
  }


def _row_norms(tree):
  flat = [np.asarray(x, np.float64).reshape(x.shape[0], -1) for x in tree.values()]
  return np.sqrt(sum((f**2).sum(axis=1) for f in flat))


def test_matches_float64_reference_and_leaves_small_examples_untouched():
  g = _grads([0.01, 0.5, 1.0, 3.0, 10.0, 1e3])
  out = jax.jit(clip_per_example, static_argnums=1)(g, C)
  norms = _row_norms(g)
  factor = np.minimum(1.0, C / norms)  # up to the documented margin (~1e-6 here)
  for name in g:
    want = np.asarray(g[name], np.float64) * factor.reshape(
      (-1,) + (1,) * (g[name].ndim - 1)
    )
    np.testing.assert_allclose(np.asarray(out[name]), want, rtol=1e-5, atol=0)
  below = norms <= C
  assert below.any() and (~below).any()
  for name in g:  # an example inside the ball passes bit for bit
    np.testing.assert_array_equal(np.asarray(out[name])[below], g[name][below])
  assert (_row_norms(out) <= C).all()
  np.testing.assert_allclose(np.asarray(per_example_norms(g)[0]), norms, rtol=1e-6)


@pytest.mark.parametrize("scale,c", [(4e-20, 2.0**-60), (1e20, 2.0**60)])
def test_norm_neither_underflows_nor_overflows(scale, c):
  """Squares of 4e-20 are subnormal (or flushed to 0) in float32 and of 1e20 are
  inf: a naive norm would pass the first unclipped and drop the second (C / inf = 0).
  800 entries, so the tiny example's norm is above the smallest allowed C."""
  rng = np.random.default_rng(1)
  g = {"a": (rng.standard_normal((2, 800)) * scale).astype(np.float32)}
  norms = _row_norms(g)
  assert (norms > c).all()
  np.testing.assert_allclose(np.asarray(per_example_norms(g)[0]), norms, rtol=1e-5)
  clipped = _row_norms(clip_per_example(g, c))
  assert (clipped <= c).all() and (clipped >= c * (1 - 1e-4)).all(), clipped / c


def test_clip_norm_outside_the_allowed_range_is_refused():
  for c in (2.0**-61, 2.0**61, 0.0, float("nan")):
    with pytest.raises(ValueError, match="l2_norm_clip"):
      clip_per_example({"a": jnp.ones((2, 3))}, c)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_an_example_with_a_non_finite_entry_contributes_zero(bad):
  g = _grads([1.0, 5.0, 0.5])
  g["b"][1, 2] = bad
  out = clip_per_example(g, C)
  for name in g:
    x = np.asarray(out[name])
    assert np.isfinite(x).all()
    assert (x[1] == 0).all()  # every leaf of that example, not just the bad entry
  ref = clip_per_example({k: np.delete(v, 1, axis=0) for k, v in g.items()}, C)
  for name in g:
    np.testing.assert_array_equal(np.delete(np.asarray(out[name]), 1, axis=0), ref[name])


def test_rejects_leaves_without_a_common_batch_axis():
  with pytest.raises(ValueError, match="leading batch axis"):
    clip_per_example({"a": jnp.zeros((3, 2)), "b": jnp.zeros((4,))}, C)
  with pytest.raises(ValueError, match="floating"):
    clip_per_example({"a": jnp.zeros((3, 2), jnp.int32)}, C)
