"""A :class:`jaxdp.PosetCountMechanism` whose rows are closed over by a jitted
function: the rows are concrete, so they are checked on the host, as outside jit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp

POSET = jaxdp.Poset.nhis(1)


def _filters(n):
  """n rows, each the all-ones filter or the empty one."""
  return jnp.asarray((np.arange(n) % 2)[:, None] * np.ones((1, POSET.d)), jnp.float32)


@pytest.mark.parametrize("exact", [False, True])
def test_closed_over_rows_release_as_outside_jit(exact):
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, exact=exact)
  rows, key = _filters(6), jax.random.key(4)
  jitted = jax.jit(lambda k: mech.randomize(k, rows))(key)
  np.testing.assert_array_equal(np.asarray(jitted), np.asarray(mech.randomize(key, rows)))


def test_closed_over_part_statistics_match_outside_jit():
  mech = jaxdp.PosetCountMechanism(POSET, 1.0)
  rows, part = _filters(6), jnp.arange(6) % 3
  jitted = jax.jit(lambda: mech.part_statistics(rows, part, 3))()
  np.testing.assert_array_equal(
    np.asarray(jitted), np.asarray(mech.part_statistics(rows, part, 3))
  )


@pytest.mark.parametrize(
  "bad, match",
  [
    (2.0, r"data must hold 0/1 values; row 1 does not \(column 0\)"),
    (None, r"data row 1 is not a filter of the poset \(1 such rows\)"),
  ],
)
def test_closed_over_bad_rows_raise_the_outside_message(bad, match):
  rows = np.asarray(_filters(4)).copy()
  if bad is None:  # element 1 without element 0 above it: not a filter
    rows[1] = 0.0
    rows[1, 1] = 1.0
    assert not POSET.is_filter(rows[1])
  else:
    rows[1, 0] = bad
  rows = jnp.asarray(rows)
  mech = jaxdp.PosetCountMechanism(POSET, 1.0)
  with pytest.raises(ValueError, match=match):
    mech.randomize(jax.random.key(0), rows)
  with pytest.raises(ValueError, match=match):
    jax.jit(lambda k: mech.randomize(k, rows))(jax.random.key(0))
