"""How jaxdp.consistent converts its input: integers of every width reach the
computation as the nearest float, never wrapped through JAX's 32-bit integers (x64 is
off in the suite), and what cannot be converted faithfully is refused, naming the
entry, its value and what to do."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Poset

CHAIN = Poset.from_edges(2, [(1, 0)])  # y = (n, c_1, c_2) with c_2 <= c_1 <= n
FEASIBLE = [2**32 + 7, 5, 3]  # already consistent: its projection is itself


@pytest.mark.parametrize("method", ["exact", "batched"])
@pytest.mark.parametrize(
  "y",
  [
    np.array(FEASIBLE, np.int64),
    np.array(FEASIBLE, np.uint64),
    FEASIBLE,  # a list of Python ints (numpy makes it int64)
    np.array([2**63 + 2**40, 2**63, 2**62], np.uint64),  # past int64 as well
  ],
  ids=["int64", "uint64", "list", "uint64-past-int64"],
)
def test_wide_integers_are_not_wrapped(y, method):
  """With x64 off JAX stores int64 as int32, which wraps 2**32 + 7 to 7; a feasible
  vector must come back as itself in the float dtype (the float64 input's result)."""
  z = np.asarray(jaxdp.consistent(y, CHAIN, method=method))
  want = np.asarray(y, np.float64).astype(np.float32)
  np.testing.assert_array_equal(z, want)
  np.testing.assert_array_equal(
    z, np.asarray(jaxdp.consistent(np.asarray(y, np.float64), CHAIN, method=method))
  )


def test_wide_integers_with_integer_true_are_refused_as_floats_are():
  limit = jaxdp.consistency.integer_limit()
  for y in (np.array(FEASIBLE, np.int64), np.array(FEASIBLE, np.float64)):
    with pytest.raises(
      ValueError, match=rf"y has a value 4\.29497e\+09 larger than {limit}"
    ):
      jaxdp.consistent(y, CHAIN, integer=True)


def test_wide_integers_are_exact_with_x64():
  with jax.enable_x64(True):
    z = jaxdp.consistent(np.array(FEASIBLE, np.int64), CHAIN, integer=True)
    assert z.dtype == np.int64
    np.testing.assert_array_equal(np.asarray(z), FEASIBLE)


def test_refusal_marks_are_refused_in_any_signed_width():
  """A refused int32 release holds -2**31; stored as int64 it is not int64's minimum,
  but still the mark, not a count (and no wider count is that exact value)."""
  for y in (
    np.array([10, -(2**31), 3], np.int64),
    np.array([10, -(2**31), 3], np.int32),
    np.array([10, np.iinfo(np.int64).min, 3], np.int64),
  ):
    with pytest.raises(ValueError, match=r"y\[1\] = -\d+ is the mark of a refused"):
      jaxdp.consistent(y, CHAIN)


@pytest.mark.parametrize(
  "y",
  [[2**70, 2**69, 2**68], np.array([2**40, 5, 2.5], dtype=object)],
  ids=["past-64-bits", "object-array"],
)
def test_python_numbers_numpy_stores_as_objects_are_floats(y):
  """numpy holds these as an object array: they are the float64 input's values."""
  assert np.asarray(y).dtype == object
  z = np.asarray(jaxdp.consistent(y, CHAIN, method="exact"))
  np.testing.assert_array_equal(
    z, np.asarray(jaxdp.consistent(np.asarray(y, np.float64), CHAIN, method="exact"))
  )
  assert z[0] == np.float32(y[0])


def test_python_integers_past_the_float_range_are_refused():
  with pytest.raises(ValueError, match=r"y\[1\] = 1000000000000000000000\d* is beyond"):
    jaxdp.consistent([1, 10**400, 3], CHAIN)
  with pytest.raises(ValueError, match=r"y\[0\] = 1e\+300 is beyond 3\.4\d*e\+38.*x64"):
    jaxdp.consistent([10**300, 5, 3], CHAIN)


def test_other_dtypes_and_values_are_refused_clearly():
  with pytest.raises(TypeError, match="y must hold real numbers; got dtype bool"):
    jaxdp.consistent(np.array([True, True, False]), CHAIN)
  with pytest.raises(TypeError, match="y must hold real numbers; got dtype object"):
    jaxdp.consistent(np.array([None, 1, 2], dtype=object), CHAIN)
  with pytest.raises(ValueError, match=r"y\[0\] = 1e\+300 is beyond 3\.4\d*e\+38.*x64"):
    jaxdp.consistent(np.array([1e300, 5, 3]), CHAIN)
  with pytest.raises(ValueError, match=r"y must be finite; y\[2\] = inf"):
    jaxdp.consistent(np.array([10.0, 5, np.inf]), CHAIN)
  with pytest.raises(ValueError, match=r"y must be finite; y\[1, 0\] = nan"):
    jaxdp.consistent(np.array([[10.0, 5, 3], [np.nan, 1, 0]]), CHAIN)


@pytest.mark.parametrize("method", ["auto", "batched"])
def test_non_finite_jax_arrays_are_refused_after_the_batched_solve(method):
  """A JAX array already in the float dtype stays on the device (no host copy on
  the certified path); a vector with NaN or inf is refused after the solve with the
  host's message, naming the first bad entry, by either method."""
  y = jnp.asarray(np.array([[10.0, 5, 3], [9.0, 1, 0], [8.0, 2, 1]], np.float32))
  with pytest.raises(ValueError, match=r"y must be finite; y\[1, 0\] = nan \(1 in all\)"):
    jaxdp.consistent(y.at[1, 0].set(jnp.nan), CHAIN, method=method)
  with pytest.raises(ValueError, match=r"y must be finite; y\[2, 2\] = -inf"):
    jaxdp.consistent(y.at[2, 2].set(-jnp.inf), CHAIN, method=method)
  np.testing.assert_array_equal(jaxdp.consistent(y, CHAIN, method=method), y)


def test_error_bars_of_wide_integer_releases_are_not_wrapped():
  """The bootstrap reads the released vector in float64: an int64 vector past int32
  keeps its values (integer=True refuses it past the integer dtype, as above)."""
  mech = jaxdp.PosetCountMechanism(CHAIN, eps=1.0)
  released = np.array([2**32 + 7, 2**32, 3], np.int64)
  bars = jaxdp.consistent_error_bars(released, mech, num_samples=200)
  low, high = bars.interval(released)
  assert np.all(low <= released) and np.all(released <= high)
  assert low[0] > 2**31  # not a wrapped value
  with pytest.raises(ValueError, match="larger than"):
    jaxdp.consistent_error_bars(released, mech, integer=True, num_samples=200)


def test_error_bars_refuse_releases_that_are_not_numbers():
  mech = jaxdp.PosetCountMechanism(CHAIN, eps=1.0)
  for bad in (np.array([True, True, False]), np.array(["9", "5", "3"])):
    with pytest.raises(TypeError, match="released must hold counts"):
      jaxdp.consistent_error_bars(bad, mech, num_samples=200)


BIG = [2**25 + 1, 2**25 + 3, 3]  # c_1 > n: the projection pools them at 2**25 + 2


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_the_exact_path_reads_integers_past_float32_exactly(dtype):
  """float32 holds 2**25 + 1 as 2**25 and 2**25 + 3 as 2**25 + 4; projecting the
  rounded vector gave 2**25 or 2**25 + 4 for the pooled pair (a tie at 2**25 + 2).
  The host path solves the given values in float64: by hand, the violated pair
  (n, c_1) pools at its mean and c_2 = 3 stays."""
  y = np.array(BIG, dtype)
  want = [2**25 + 2, 2**25 + 2, 3]
  np.testing.assert_array_equal(np.asarray(jaxdp.consistent(y, CHAIN, integer=True)), want)
  z = np.asarray(jaxdp.consistent(y, CHAIN))
  np.testing.assert_array_equal(z, np.array(want, np.float64).astype(np.float32))
  batch = np.stack([y, np.array([10, 5, 3], dtype)])  # batched, then the host fallback
  zb = np.asarray(jaxdp.consistent(batch, CHAIN, integer=True, method="auto"))
  assert np.all(np.abs(zb[0] - want) <= 8)  # the float32 solver: within tolerance
  np.testing.assert_array_equal(zb[1], [10, 5, 3])
