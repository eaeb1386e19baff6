"""Poisson batches and per-example gradients."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxdp.training import max_batch_size, per_example_grads, poisson_batch


@pytest.mark.parametrize("n,q", [(1797, 0.1), (60000, 0.004), (50, 0.5), (10, 0.999)])
def test_max_batch_size_overflows_with_probability_at_most_2_pow_minus_64(n, q):
  b = max_batch_size(n, q)
  assert b <= n
  assert b == n or stats.binom.sf(b, n, q) <= 2.0**-64  # independent: scipy's tail
  # and not wastefully large: the Chernoff bound costs a few standard deviations
  assert b <= n * q + 12 * np.sqrt(n * q * (1 - q)) + 12


@pytest.mark.statistical
def test_poisson_batch_includes_each_example_with_probability_q():
  """2000 batches of n = 100 at q = 0.1: each example's inclusion count is
  Binomial(2000, 0.1); a chi-square test over the 100 examples (fixed key, p > 1e-4)
  and the total against its binomial 5-sigma band."""
  n, q, reps = 100, 0.1, 2000
  keys = jax.random.split(jax.random.key(11), reps)
  idx, mask = jax.jit(jax.vmap(lambda k: poisson_batch(k, n, q)))(keys)
  idx, mask = np.asarray(idx), np.asarray(mask)
  assert (np.diff(mask.astype(int), axis=1) <= 0).all()  # the sampled ones first
  assert (np.diff(idx, axis=1)[mask[:, 1:]] > 0).all()  # distinct, increasing
  assert (idx < n).all()
  counts = np.bincount(idx[mask], minlength=n).astype(float)
  total = counts.sum()
  assert abs(total - n * reps * q) < 5 * np.sqrt(n * reps * q * (1 - q))
  expected = reps * q
  chi2 = ((counts - expected) ** 2 / (expected * (1 - q))).sum()
  assert stats.chi2.sf(chi2, n) > 1e-4


def test_poisson_batch_refuses_a_padded_size_that_can_overflow():
  need = max_batch_size(1797, 0.1)
  with pytest.raises(ValueError, match=f"max_batch >= {need}"):
    poisson_batch(jax.random.key(0), 1797, 0.1, max_batch=200)
  with pytest.raises(ValueError, match="sampling_rate"):
    poisson_batch(jax.random.key(0), 1797, 1.5)


def test_per_example_grads_match_one_grad_per_example_and_mask_zeroes():
  def loss(params, x, y):
    return (jnp.dot(params["w"], x) + params["b"] - y) ** 2

  params = {"w": jnp.arange(3.0), "b": jnp.float32(0.5)}
  x = jnp.arange(12.0).reshape(4, 3) / 10
  y = jnp.array([1.0, -1.0, 2.0, 0.0])
  got = per_example_grads(loss)(params, x, y, mask=None)
  for i in range(4):
    one = jax.grad(loss)(params, x[i], y[i])
    np.testing.assert_allclose(got["w"][i], one["w"], rtol=1e-6)
    np.testing.assert_allclose(got["b"][i], one["b"], rtol=1e-6)
  x = x.at[2, 0].set(jnp.nan)  # a padded example's NaN does not get through
  mask = jnp.array([True, False, False, True])
  masked = per_example_grads(loss)(params, x, y, mask=mask)
  assert (np.asarray(masked["w"])[1:3] == 0).all() and np.isfinite(masked["w"]).all()
  np.testing.assert_array_equal(masked["w"][0], got["w"][0])
  with pytest.raises(ValueError, match="mask"):
    per_example_grads(loss)(params, x, y, mask=jnp.ones(3, bool))
