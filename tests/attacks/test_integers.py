"""Attacks on integer (and wide float) inputs with x64 off, the default.

JAX stores int64 as int32 and uint64 as uint32 with x64 off, so converting first and
checking after sees wrapped values: 2**31 became -2**31 (sensitivity 1 became 2**31),
2**32 + 5 became 5. And a 0-d array has no index for ``np.argwhere`` to find, so the
checks that refused arrays let scalars through. Each test fails when the check runs
after the conversion, or skips 0-d inputs.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import (
  Accountant,
  DiscreteGaussianMechanism,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  Poset,
  Session,
  ZCDPGaussianMechanism,
)
from jaxdp.cli import main as cli_main
from jaxdp.samplers.exact_tables import exact_tables
from jaxdp.samplers.exact_tree_tables import exact_tree_tables
from jaxdp.samplers.exact_wide_tables import exact_wide_tables
from jaxdp.samplers.subsets import extension_counts

with jax.enable_x64(True):
  _JAX_INT64 = jnp.array([2**31], jnp.int64)  # a JAX int64 array, used with x64 off


def _digits(v) -> str:
  return str(int(np.asarray(v).reshape(-1)[0]))


# ------------------------------------------------------------------ exact statistics
EXACT_OUT_OF_RANGE = {
  "int64 2**31 (wrapped to -2**31)": np.array([2**31], np.int64),
  "int64 2**31 - 1 (clipped to 2**30)": np.array([2**31 - 1], np.int64),
  "int32 2**30 + 1 (clipped)": np.array([2**30 + 1], np.int32),
  "int64 -2**31 - 1 (wrapped to 2**31 - 1)": np.array([-(2**31) - 1], np.int64),
  "uint64 2**32 + 5 (wrapped to 5)": np.array([2**32 + 5], np.uint64),
  "uint64 2**63": np.array([2**63], np.uint64),
  "Python int 2**31": 2**31,
  "Python int 2**32 + 5": 2**32 + 5,
  "numpy int64 scalar": np.int64(2**40),
  "0-d JAX int32": jnp.int32(2**30 + 1),
  "JAX int64 array": _JAX_INT64,
  "Python int beyond 64 bits": [2**70],
}


@pytest.mark.parametrize(
  "value", EXACT_OUT_OF_RANGE.values(), ids=EXACT_OUT_OF_RANGE.keys()
)
def test_exact_statistic_beyond_its_range_is_refused_not_wrapped_or_clipped(value):
  """An exact release's statistic is an int32 within +-2**30. Outside it, 2**31 and
  2**31 - 1 (neighbours) came out 2**31 apart (one wrapped, one clipped), 2**32 + 5
  came out as 5, and 2**30 + 1 was silently clipped. Now every such value, of any
  width and shape, is a ValueError naming it."""
  mech = LaplaceMechanism(1e6, exact=True)
  with pytest.raises(ValueError) as e:
    mech.randomize(jax.random.key(0), value)
  assert _digits(value) in str(e.value)


@pytest.mark.parametrize(
  "mech",
  [
    DiscreteGaussianMechanism(1.0, 1e-5),
    KNormMechanism(LpBall(1, np.inf), 1e6, exact=True),
  ],
  ids=["discrete_gaussian", "linf_knorm"],
)
def test_other_exact_mechanisms_refuse_int64_beyond_int32(mech):
  with pytest.raises(ValueError, match="2147483648"):
    mech.randomize(jax.random.key(0), np.array([2**31], np.int64))


def test_exact_statistic_limit_is_2_30_in_every_width():
  """+-2**30 in int64 (and uint64) are in range: released as themselves plus noise
  of scale 1e-6 (0 with probability 1 - 1e-400000); one more is refused."""
  mech = LaplaceMechanism(1e6, exact=True)
  got = mech.randomize(jax.random.key(1), np.array([2**30, -(2**30), 7], np.int64))
  np.testing.assert_array_equal(np.asarray(got), [2**30, -(2**30), 7])
  got = mech.randomize(jax.random.key(1), np.array([2**30], np.uint64))
  np.testing.assert_array_equal(np.asarray(got), [2**30])
  for dtype in (np.int64, np.uint64):
    with pytest.raises(ValueError, match="1073741825"):
      mech.randomize(jax.random.key(1), np.array([2**30 + 1], dtype))


def test_exact_grid_statistic_is_snapped_before_float32_rounds_it():
  """A float64 statistic on a grid was rounded to float32 before snapping: at 2**19
  float32's spacing is 64 units of grid 2**-10, so 2**19 + 31 units became 2**19 and
  the noise (scaled for a snapping error of half a unit) was added to a statistic
  moved by 31 units. Test: 2000 entries of 2**19 + 31 units, sensitivity 1 unit,
  eps = 2001 / 2, so each entry gets exactly rounded Laplace(2) noise N. The output
  (float32, spacing 64 units) is 2**19 + 64 units iff N >= 2: probability
  0.5 exp(-1.5 / 2) = 0.236 (sd 0.0095 over 2000); snapped after rounding, iff
  N > 32 (probability 6e-8). Accept a fraction in (0.18, 0.29)."""
  g = 2.0**-10
  mech = LaplaceMechanism(2001 / 2, g, exact=True, grid=g)
  out = np.asarray(mech.randomize(jax.random.key(2), np.full(2000, 2.0**19 + 31 * g)))
  frac = np.mean(out == 2.0**19 + 64 * g)
  assert 0.18 < frac < 0.29, frac


def test_exact_grid_statistic_beyond_the_range_is_refused():
  mech = LaplaceMechanism(1e6, exact=True, grid=2.0**-10)
  with pytest.raises(ValueError, match="2097152"):
    mech.randomize(jax.random.key(0), 2.0**21)  # 2**31 units


# ------------------------------------------------------------------ float statistics
FLOAT_ROUNDED = {
  "Python int": 2**24 + 1,
  "numpy int64 scalar": np.int64(2**24 + 1),
  "numpy int32 scalar": np.int32(2**24 + 1),
  "0-d numpy array": np.array(2**24 + 1),
  "0-d JAX int32": jnp.int32(2**24 + 1),
  "numpy uint32 scalar": np.uint32(2**24 + 1),
  "int64 2**32 + 1 (wrapped to 1)": np.array([2**32 + 1], np.int64),
  "uint64 2**32 + 1 (wrapped to 1)": np.array([2**32 + 1], np.uint64),
}


@pytest.mark.parametrize(
  "mech",
  [LaplaceMechanism(1e6), GaussianMechanism(0.5, 1e-5), ZCDPGaussianMechanism(1e-6)],
  ids=["laplace", "gaussian", "zcdp_gaussian"],
)
@pytest.mark.parametrize("value", FLOAT_ROUNDED.values(), ids=FLOAT_ROUNDED.keys())
def test_float_statistic_refuses_integers_float32_would_round_at_any_shape(mech, value):
  """float32 holds integers exactly up to 2**24 = 16,777,216. Arrays beyond it were
  refused, but 0-d values (Python ints, numpy and JAX scalars) were rounded
  (16777217 -> 16777216), and int64 2**32 + 1 wrapped to 1 and was released as 1."""
  with pytest.raises(ValueError, match="16,777,216") as e:
    mech.randomize(jax.random.key(0), value)
  assert _digits(value) in str(e.value)


@pytest.mark.parametrize(
  "value",
  [np.array([2.0**24 + 1]), 2.0**24 + 1, np.float64(3e7), np.array([[0.5, -3e7]])],
  ids=["array", "Python float", "numpy scalar", "2-D"],
)
def test_float64_statistic_beyond_float32_exact_range_is_refused(value):
  """With x64 off a float64 statistic is cast to float32. Beyond 2**24 float32 cannot
  hold neighbouring integers (16777217.0 became 16777216.0), so a count or sum given
  as float64 could move by more than its sensitivity: refused like the integers.
  (Below 2**24 the cast rounds by less than half a float32 spacing, the precision of
  the float32 output itself.)"""
  with pytest.raises(ValueError, match="16,777,216"):
    LaplaceMechanism(1.0).randomize(jax.random.key(0), value)


def test_float64_statistic_limit_is_2_24():
  """Up to 2**24 a float64 statistic is released (noise of scale 1e-6); beyond, not."""
  out = LaplaceMechanism(1e6).randomize(jax.random.key(0), np.array([0.1, -(2.0**24)]))
  np.testing.assert_allclose(np.asarray(out), [0.1, -(2.0**24)], atol=1e-4)
  with pytest.raises(ValueError, match="16777218"):
    LaplaceMechanism(1e6).randomize(jax.random.key(0), np.array([0.1, 2.0**24 + 2]))


@pytest.mark.parametrize(
  "value",
  [np.array([1e39]), 1e39, np.float64(np.nan), float("inf"), np.array(np.nan)],
  ids=[
    "float64 overflow",
    "Python float overflow",
    "0-d NaN",
    "Python inf",
    "0-d array NaN",
  ],
)
def test_non_finite_statistics_are_refused_at_any_shape(value):
  """NaN data is refused (it would look like a refusal while the budget is spent),
  but a 0-d NaN slipped through, and float64 1e39 became float32 infinity."""
  with pytest.raises(ValueError, match="non-finite|infinite"):
    LaplaceMechanism(1.0).randomize(jax.random.key(0), value)


# ------------------------------------------------------------------ sessions and files
@pytest.mark.parametrize(
  "data",
  [np.array([2**32 + 5, 3]), np.array([2**32 + 5, 3], np.uint64), [2**40, 3], _JAX_INT64],
  ids=["int64", "uint64", "Python ints", "JAX int64"],
)
def test_session_refuses_data_jax_would_wrap_when_created(data):
  """Session(np.array([2**32 + 5])) stored 5: a count of rows > 10 answered 0 for 1.
  The data is checked once, by its owner, when the session is created (before any
  analyst query, so the error discloses nothing to an analyst)."""
  with pytest.raises(ValueError, match=_digits(data)):
    Session(data, 1.0)


def test_session_keeps_int64_data_within_int32_and_refuses_one_more():
  s = Session(np.array([2**31 - 1, 3], np.int64), 100.0, key=jax.random.key(4))
  assert abs(s.count(lambda v: v > 10, 50.0) - 1) < 0.5  # P(|Laplace(0.02)| > 0.5) = e^-25
  with pytest.raises(ValueError, match="2147483648"):
    Session(np.array([2**31, 3], np.int64), 100.0)


def _nhis1_csv(tmp_path, value):
  row = np.asarray(Poset.nhis(1).filters())[-1].astype(object)  # the full filter: 1s
  row[1] = value
  path = tmp_path / "answers.csv"
  path.write_text(",".join(str(int(v)) for v in row) + "\n")
  return path


@pytest.mark.parametrize("value", [2**32 + 1, 2**70], ids=["int64", "beyond int64"])
def test_cli_release_refuses_answers_that_would_wrap(tmp_path, capsys, value):
  """`jaxdp release` read the CSV as int64: the answer 4294967297 wrapped to 1 and
  counted as a yes; 2**70 raised an OverflowError traceback. Both are now a one-line
  error (exit status 2) naming the value or the file."""
  path = _nhis1_csv(tmp_path, value)
  assert cli_main(["release", "--poset", "nhis1", "--data", str(path), "--eps", "1"]) == 2
  err = capsys.readouterr().err
  assert "jaxdp: error" in err and (str(value) in err or str(path) in err)


# ------------------------------------------------------------------ parts and shapes
@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
@pytest.mark.parametrize("exact", [False, True])
def test_part_index_beyond_int32_drops_the_row_instead_of_wrapping(dtype, exact):
  """A part index of 2**32 + 1 is outside [0, 2), so its row is dropped; converted to
  int32 first it wrapped to 1 and the row was counted in part 1 (2 for 1). Noise of
  scale 1e-6."""
  acct = Accountant.create(1e7, key=jax.random.key(5))
  rows = np.ones(3, np.int32 if exact else np.float32)
  part = np.array([0, 2**32 + 1, 1], dtype)
  _, out = jaxdp.release_partitioned(
    acct, LaplaceMechanism(1e6, exact=exact), rows, part, 2
  )
  np.testing.assert_allclose(np.asarray(out, np.float64), [1, 1], atol=1e-3)


@pytest.mark.parametrize(
  "draw",
  [
    lambda k, n: jaxdp.random.lp_ball(k, 1, 2.0, (n,)),
    lambda k, n: jaxdp.random.knorm(k, LpBall(2, np.inf), 1.0, (n,)),
    lambda k, n: jaxdp.random.poset_ball(k, Poset.nhis(1), (n,)),
  ],
  ids=["lp_ball", "knorm", "poset_ball"],
)
def test_noise_batches_beyond_int32_offsets_are_refused(draw):
  """K-norm and ball samples are written chunk by chunk at offset i * chunk, an
  int32 with x64 off: beyond 2**31 samples the last offset wrapped to -2**31, the
  write was clamped to offset 0, and the last rows kept the buffer's zeros (no
  noise). (Traced only: the arrays would take 8 GiB.)"""
  with pytest.raises(ValueError, match="2,147,483,653"):
    jax.eval_shape(lambda k: draw(k, 2**31 + 5), jax.random.key(0))


def test_cached_exact_tables_are_read_only():
  """The exact samplers' cached host tables are shared by every later release: an
  in-place edit by caller code would change the law of every draw after it."""
  fence = jaxdp.Poset.from_edges(
    7, [(i, i + 1) if i % 2 == 0 else (i + 1, i) for i in range(6)], name="fence7"
  )
  tree = jaxdp.Poset.from_edges(3, [(0, 1), (0, 2)])
  for tables in (
    exact_tables(fence)[0],
    exact_wide_tables(fence)[0],
    exact_tree_tables(tree)[0],
    extension_counts(fence),
  ):
    leaves = [x for x in jax.tree_util.tree_leaves(tables) if isinstance(x, np.ndarray)]
    assert leaves
    for leaf in leaves:
      with pytest.raises(ValueError, match="read-only"):
        leaf.reshape(-1)[:1] = 0
