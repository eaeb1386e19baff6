"""The exact samplers under ``vmap`` inside ``jit``.

The kernels compute in float64/int64 inside ``jax.enable_x64``; an enclosing ``jit``
lowers them with the caller's 32-bit default dtypes, so a primitive whose lowering
builds arrays of the default integer dtype (``argmax``, behind ``jnp.select``) fails
to lower there. Small shapes, threefry keys and one compilation per form keep these
cheap: l_2 noise is checked value for value, the other samplers lower.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import exact

POSET = jaxdp.Poset.nhis(1)  # d = 4: the ranks path, and the tree path on request
ROWS = np.asarray(POSET.filters(), np.int8)  # every filter once: valid rows
KEYS = jax.random.split(jax.random.key(7), 3)


def _count(noise):
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, noise=noise, exact=True)
  return lambda k: mech.randomize(k, ROWS)


def _discrete_gaussian(k):
  mech = jaxdp.DiscreteGaussianMechanism(1.0, 1e-6)
  return mech.randomize(k, jnp.array([3, 5, 8]))


def test_jit_vmap_exact_l2_randomize_equals_the_per_key_loop():
  """jit(vmap) of the exact l_2 count release (which failed to lower) gives, for each
  of 3 keys, the integers that key gives alone; the 3 differ."""
  f = _count("l2")
  loop = np.stack([np.asarray(f(k)) for k in KEYS])
  assert loop.dtype == np.int32 and loop.shape == (3, POSET.d + 1)
  assert len({row.tobytes() for row in loop}) == 3  # one key's draw not broadcast
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(f))(KEYS)), loop)


CASES = {
  "poset_ranks": _count("poset"),
  "poset_tree": lambda k: exact.poset_knorm(k, POSET, 4.0, path="tree"),
  "linf": _count("linf"),
  "laplace": _count("laplace"),
  "discrete_gaussian": _discrete_gaussian,
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_other_exact_samplers_lower_under_jit_vmap(name):
  """Each lowers under an enclosing jit (its values under vmap are the per-key
  loop's, as for l_2; the batched kernels are not compiled here)."""
  assert exact.poset_path(POSET) == "ranks"
  lowered = jax.jit(jax.vmap(CASES[name])).trace(KEYS).lower()
  assert "func.func" in lowered.as_text()
