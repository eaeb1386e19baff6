"""The chain path of ``jaxdp.consistent`` at the edges of its dtypes: narrow floats,
long runs of ties in float32, huge counts, and counts whose sums overflow."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Poset


def identity_chain(d):
  """A chain whose nodes, from the top down, are 1, 2, ..., d (after n)."""
  return Poset.from_edges(d, [(k + 1, k) for k in range(d - 1)])


@pytest.mark.parametrize("dtype", [np.float16, jnp.bfloat16])
def test_chain_accepts_narrow_floats(dtype):
  """float16 and bfloat16 counts are projected on a chain in their own dtype, as on
  forests."""
  poset = identity_chain(3)
  y = np.array([[6.0, 3.0, 4.0, 1.0], [5.0, 5.0, 2.0, 3.0]], dtype)
  z = jaxdp.consistent(y, poset, method="batched")
  assert z.dtype == y.dtype
  np.testing.assert_allclose(
    np.asarray(z, np.float32), [[6.0, 3.5, 3.5, 1.0], [5.0, 5.0, 2.5, 2.5]], atol=1e-2
  )


def test_float32_constant_vector_on_a_long_chain_is_certified():
  """A constant vector is its own projection; on a chain of 512 in float32 its 513
  ties make one run, whose compensated sum keeps the mean: the vector comes back
  and is certified (a plain float32 sum of the run moves it, and leaves its
  distance bound above the tolerance)."""
  poset = identity_chain(512)
  y = np.full((1, 513), 1.2576826, np.float32)
  z, cert = jax.jit(lambda v: jaxdp.consistent(v, poset, certificate=True))(y)
  np.testing.assert_allclose(np.asarray(z), y, rtol=1e-6)
  assert bool(cert.ok[0]), (float(cert.distance_bound[0]), float(cert.tolerance[0]))


def test_float32_huge_counts_are_certified():
  """Counts of 1e30 in float32 are projected correctly and certified: the gap's
  squares are summed over a power of two near max|y| squared, so the distance bound
  stays finite (the gap itself, in counts squared, is past float32's range)."""
  poset = identity_chain(3)
  y = np.array([[1e30, 2e30, 0.5e30, 1e30]], np.float32)
  z, cert = jax.jit(lambda v: jaxdp.consistent(v, poset, certificate=True))(y)
  np.testing.assert_allclose(np.asarray(z), [[1.5e30, 1.5e30, 0.75e30, 0.75e30]], rtol=1e-6)
  assert np.isfinite(float(cert.distance_bound[0])) and bool(cert.ok[0])


def test_counts_whose_sums_overflow_are_refused():
  """Concrete counts past the dtype's largest value over the d + 1 counts of a
  vector are refused, naming the entry: block sums of such counts overflow (to inf
  in float32's batched solver; the exact path's float64 sums raise OverflowError)."""
  poset = identity_chain(3)
  y = np.array([[3e38, 3e38, 3e38, 3e38]], np.float32)  # already consistent
  with pytest.raises(ValueError, match=r"y\[0, 0\] = .* rescale the counts"):
    jaxdp.consistent(y, poset, method="batched")
  with jax.enable_x64(True):
    y = np.array([1.0, 1.0, 1.7e308, 1.7e308])  # the last two must pool
    with pytest.raises(ValueError, match=r"y\[2\] = .* rescale the counts"):
      jaxdp.consistent(y, poset)
    z = jaxdp.consistent(y / 8, poset)  # within the limit: solved
    assert np.all(np.isfinite(np.asarray(z)))
