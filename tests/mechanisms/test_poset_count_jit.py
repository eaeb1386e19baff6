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


def _bad_rows(n, not_filters=(), not_binary=()):
  """``n`` filters with rows ``not_filters`` made non-filters (element 1 without the
  element 0 above it) and rows ``not_binary`` holding a 2."""
  rows = np.asarray(_filters(n)).copy()
  for r in not_filters:
    rows[r] = 0.0
    rows[r, 1] = 1.0
  for r in not_binary:
    rows[r, 2] = 2.0
  return rows


@pytest.mark.parametrize(
  "not_filters, not_binary, match",
  [
    ((4998, 4999), (), r"data row 4998 is not a filter of the poset \(2 such rows\)"),
    ((0, 4999), (), r"data row 0 is not a filter of the poset \(2 such rows\)"),
    ((3,), (4000, 4999), r"data must hold 0/1 values; row 4000 does not\."),
  ],
)
def test_traced_bad_rows_are_refused_at_run_time(not_filters, not_binary, match):
  """Rows passed to a jitted function are checked when it runs: the first bad row is
  named wherever it is (a value other than 0/1 first), with the number of rows that
  are not filters; good rows pass."""
  mech = jaxdp.PosetCountMechanism(POSET, 1.0)
  stat = jax.jit(mech.statistic)
  with pytest.raises(Exception, match=match):
    jax.block_until_ready(stat(jnp.asarray(_bad_rows(5000, not_filters, not_binary))))
  np.testing.assert_array_equal(np.asarray(stat(_filters(5000)))[:2], [5000, 2500])
  clip = jax.jit(jaxdp.PosetCountMechanism(POSET, 1.0, on_invalid="clip").statistic)
  np.testing.assert_array_equal(
    np.asarray(clip(jnp.asarray(_bad_rows(6, (1,)))))[:2], [6, 2]
  )
  with pytest.raises(Exception, match=r"0/1 values; row 5 does not"):
    jax.block_until_ready(clip(jnp.asarray(_bad_rows(6, (1,), (5,)))))


def test_traced_bad_rows_under_vmap_name_the_batch_element():
  stat = jax.jit(jax.vmap(jaxdp.PosetCountMechanism(POSET, 1.0).statistic))
  rows = np.stack([_bad_rows(8), _bad_rows(8), _bad_rows(8, (6, 7))])
  with pytest.raises(Exception, match=r"row 6 is not a filter.*\(2 such rows\).*\(2,\)"):
    jax.block_until_ready(stat(jnp.asarray(rows)))
