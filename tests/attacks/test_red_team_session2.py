"""A hostile analyst's second look at ``Session``, with the public API only.

Each test is a way the analyst, who controls only the queries (the row functions,
the mechanism objects and their parameters), got more than the budget allows or
learnt something outside the noisy answers. Each failed on the code it was written
against.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import KNormMechanism, LaplaceMechanism, Session, UnsafeQueryError

BIG = float(np.finfo(np.float32).max)


# ------------------------------------------------------ forged mechanism parts
def _shadowed_sum_ball():
  """A SumBall whose instance attributes shadow its norm: every row has norm 0, so
  no row is clipped (the noise is still the ball's, at scale sensitivity / eps)."""
  ball = jaxdp.SumBall(3, 1)
  object.__setattr__(ball, "norm", lambda v: jnp.zeros(jnp.shape(v)[:-1]))
  object.__setattr__(ball, "bounding_box", lambda: 1e30)
  return KNormMechanism(ball, 1.0)


def _lp_ball_below_one():
  """An LpBall whose p was set to 0.5 after construction: ||.||_0.5 is no norm (no
  triangle inequality), so K-norm noise in it loses up to 2 eps, not eps."""
  ball = jaxdp.LpBall(3, 1.0)
  object.__setattr__(ball, "p", 0.5)
  return KNormMechanism(ball, 1.0)


def _non_plain_noise():
  """A str subclass whose comparisons a caller controls (it can tell the accountant
  one noise, by ``rdp_cost``, and the sampler another)."""

  class Noise(str):
    __hash__ = str.__hash__

    def __eq__(self, other):
      return str.__eq__(self, other)

  return jaxdp.PosetCountMechanism(_chain(), 1.0, noise=Noise("poset"))


def _chain():
  return jaxdp.Poset.from_edges(3, [(0, 1), (1, 2)])


def _not_a_partial_order():
  """A poset whose relation was replaced by one that is not a partial order (not
  reflexive): the session's filter clipping then passes every row."""
  poset = _chain()
  no = (False, False, False)
  object.__setattr__(poset, "relation", (no, no, no))
  return jaxdp.PosetCountMechanism(poset, 1.0)


@pytest.mark.parametrize(
  "forged",
  [_shadowed_sum_ball, _lp_ball_below_one, _non_plain_noise, _not_a_partial_order],
  ids=["ball-norm-shadowed", "lp-ball-p-0.5", "str-subclass-noise", "relation"],
)
def test_forged_mechanism_parts_are_refused_before_anything_is_spent(forged):
  """Before: a non-secure session checked only the exact *type* of a mechanism's ball
  and poset. A SumBall with ``norm`` and ``bounding_box`` set on the instance
  (``object.__setattr__``) passed, its rows were clipped by the forged norm (never),
  and a row of 1e6 was released as about 1e6 at eps 1 (noise scale 1). An LpBall
  whose p was set to 0.5 (no norm) was charged eps and answered; a relation
  replaced after construction, or a str subclass as an option, passed as well. Now
  the session refuses a mechanism, ball or poset holding anything its constructor
  would not have stored (an instance attribute beyond its fields, a field that is not
  a plain value, a relation that is not a partial order), before anything is spent."""
  data = np.zeros((8, 3), np.float32)
  data[0] = [1e6, 0, 0]
  s = Session(data, eps_budget=10.0, key=jax.random.key(0))
  with pytest.raises((TypeError, ValueError)) as info:
    s.release(forged())
  assert not isinstance(info.value, UnsafeQueryError)  # an argument error, not the data's
  assert s.spent == 0 and s.answered == 0


def test_a_ball_changed_after_the_release_does_not_change_the_next():
  """The session works on its own copy of the ball, built by its constructor: a ball
  the analyst changes in place after a release (``object.__setattr__(ball, "k", 0)``)
  is checked again at the next one and refused with the constructor's message.
  Before, the changed ball reached the traced program, which failed inside with
  "zero-size array to reduction operation maximum", naming no argument."""
  s = Session(np.zeros((8, 3), np.float32), eps_budget=10.0, key=jax.random.key(1))
  ball = jaxdp.SumBall(3, 1)
  mech = KNormMechanism(ball, 1.0)
  s.release(mech)
  object.__setattr__(ball, "k", 0)
  with pytest.raises(ValueError, match="k must be >= 1"):
    s.release(mech)
  assert s.answered == 1


def test_a_relation_replaced_after_a_release_is_checked_again():
  """A poset answered once and then given a relation that is not a partial order
  (``object.__setattr__``) is refused at the next query: the session reuses the poset
  it built only for the very relation object it checked (a tuple of tuples of bools,
  which cannot change). Before, the replaced relation was used as it was."""
  s = Session(np.zeros((8, 3), np.int32), eps_budget=10.0, key=jax.random.key(8))
  poset = _chain()
  s.poset_counts(poset, 1.0)
  no = (False, False, False)
  object.__setattr__(poset, "relation", (no, no, no))
  with pytest.raises(ValueError):
    s.poset_counts(poset, 1.0)
  assert s.answered == 1


# ------------------------------------------------------ float sums past the range
def test_a_float_total_past_float32_does_not_fail_on_the_data():
  """Before: each chunk's float statistic is clipped to float32's range, but the
  compensated sum of two chunks of +3.4e38 overflowed to inf and its correction term
  to inf - inf = NaN; the Laplace mechanism's finite check then failed at run time
  *on the held data only*. With a compiled release reused from the cache the error
  came out as a ValueError quoting "data at index (0,) is not finite", nothing
  charged and the key not marked used: a free, repeatable, deterministic bit (are
  two chunks' totals past the range?), and the next release reused the key. Now the
  total saturates at float32's largest value as it is summed, and both neighbours
  are answered, each charged eps."""
  outs = []
  for ones in ([0], [0, 1024]):  # one big row, or one in each of two chunks
    data = np.zeros(2048, np.float32)
    data[ones] = 1.0
    s = Session(data, eps_budget=10.0, key=jax.random.key(2))
    outs.append(s.release(LaplaceMechanism(1.0, BIG), lambda r: r * BIG))
    assert s.answered == 1 and s.refusals == 0
    assert s.spent == pytest.approx(1.0, rel=1e-5)
  assert not np.isnan(outs[1])


@pytest.mark.parametrize("with_ledger", [False, True])
def test_a_run_time_error_of_any_type_is_charged_and_says_nothing(
  monkeypatch, tmp_path, with_ledger
):
  """Before: only a RuntimeError raised while running on the held data was charged
  and replaced by the one fixed error. A host check's ValueError (JAX re-raises a
  callback's own exception type from a cached program, as the float-overflow test
  above showed) came out with its text ("data at index (0,) ...", naming what the
  data did), nothing charged and the key not marked used, so the retry was free and
  drew the same noise. Now the release's trace runs first (its errors are free and
  decided from the query alone), and any error of the run on the data is charged
  with the fixed message (with a ledger too, which kept the charge while the session
  did not, out of step with it)."""
  from jaxdp import session_rows

  def failing(*a):
    raise ValueError("data at index (3,) is not finite")

  ledger = jaxdp.Ledger(tmp_path / "l.db") if with_ledger else None
  s = Session(
    np.zeros(8, np.float32),
    eps_budget=10.0,
    key=None if with_ledger else jax.random.key(3),
    ledger=ledger,
    dataset="d" if with_ledger else None,
  )
  monkeypatch.setattr(session_rows, "run_on", failing)
  with pytest.raises(UnsafeQueryError) as info:
    s.release(LaplaceMechanism(0.5, 1.0))
  assert str(info.value) == session_rows.DATA_FAILED
  assert s.answered == 1 and s.spent == pytest.approx(0.5, rel=1e-5)
  monkeypatch.undo()
  s.release(LaplaceMechanism(0.5, 1.0))  # usable, with a fresh key
  assert s.answered == 2
  if with_ledger:  # in step with the ledger, which holds both charges
    assert ledger.datasets()[0].charges == 2


def test_an_error_of_the_release_trace_is_still_free():
  """The other side: an exact scale past the sampler's limit (eps too small) is an
  argument error, raised before anything is drawn and not charged."""
  s = Session(np.zeros(8, np.int32), eps_budget=10.0, key=jax.random.key(4))
  with pytest.raises(ValueError, match="scale"):
    s.release(LaplaceMechanism(1e-7, 1.0, exact=True), lambda r: r)
  assert s.answered == 0 and s.spent == 0


# ------------------------------------------------------ exact l_2 row checks
@pytest.mark.parametrize("mech", ["knorm-l2", "discrete-gaussian"])
def test_an_exact_l2_row_just_past_the_bound_is_not_kept(mech):
  """Before: an exact release's integer rows were checked against an l_2 bound by a
  float64 sum of squares, which rounds: the row (2**27, 1), of squared norm
  2**54 + 1, summed to 2**54 and passed the bound 2**27, so one person moved the
  statistic by more than the sensitivity the exact noise is scaled for (by a
  relative 2**-55; more entries of 1 add more). Now the sum of squares is compared
  exactly while it is below 2**53, and past it a row within float64's rounding of
  the bound counts as 0, never as kept. (eps 1000: the noise is about 2**17, far
  below the row's 2**27.)"""
  bound = 2.0**27
  if mech == "knorm-l2":
    m = KNormMechanism(jaxdp.LpBall(2, 2.0), 1000.0, bound, exact=True)
  else:
    m = jaxdp.DiscreteGaussianMechanism(1e10, 1e-6, bound)  # sigma within 2047
  s = Session(np.array([[2**27, 1]], np.int32), 2e10, delta_budget=1e-5)
  out = s.release(m)
  assert np.all(np.abs(out) < 2**24), out  # the row counted as 0


def test_an_exact_l2_row_on_the_bound_is_kept():
  """The other side: a row whose squared norm equals the bound's exactly (below
  2**53) is kept, (3, 4) at bound 5."""
  m = KNormMechanism(jaxdp.LpBall(2, 2.0), 1000.0, 5.0, exact=True)
  s = Session(np.array([[3, 4]] * 64, np.int32), 2000.0, key=jax.random.key(5))
  out = s.release(m)
  assert np.all(np.abs(out - [192, 256]) < 50), out


def test_the_exact_l2_check_against_integer_arithmetic():
  """``l2_within`` against Python's exact integers, on rows from 3 to 2**40 per entry
  and bounds on, just below and between the rows' norms: never a row past the bound
  kept, and below 2**53 every row within it kept."""
  import math
  from fractions import Fraction

  from jaxdp.mechanisms.statistics import l2_within

  rng = np.random.default_rng(7)
  with jax.enable_x64(True):
    for mag in (3, 2**20, 2**26, 2**27, 2**40):
      rows = rng.integers(-mag, mag + 1, size=(64, 3), dtype=np.int64)
      rows[:8, 1:] = rng.integers(-3, 4, size=(8, 2))  # a big entry and small ones
      sq = [sum(int(v) ** 2 for v in r) for r in rows]
      for bound in (
        math.sqrt(sq[0]),
        float(math.isqrt(sq[1])),
        math.nextafter(math.sqrt(sq[2]), 0.0),
      ):
        kept = np.asarray(l2_within(jnp.asarray(rows), bound))
        b2 = Fraction(bound) ** 2
        assert not any(k and s > b2 for k, s in zip(kept, sq))
        assert all(k for k, s in zip(kept, sq) if s <= b2 and s < 2**53)


# ------------------------------------------------------ row indices past 2**31
@pytest.mark.parametrize(
  "start, n, want", [(0, 2**31 + 100, 1024), (0, 2**32 + 5, 1024), (2**32, 2**32 + 5, 5)]
)
def test_rows_past_int32_indices_are_masked_by_their_true_index(start, n, want):
  """Before: with x64 on (a session may hold up to 2**53 rows), a block's row
  indices were ``start + arange(size, dtype=int32)`` compared with ``n``, both taken
  as int32: at n = 2**31 + 100 every row of the first 2**31 compared with a
  negative n and was dropped (0 of 1024 valid), and neighbouring datasets of
  2**31 - 1 and 2**31 rows counted about 2**31 and 0. Now the indices are in the
  default integer dtype (int64 with x64)."""
  from jaxdp import session_rows

  with jax.enable_x64(True):
    row = jax.ShapeDtypeStruct((), jnp.float32)
    q = session_rows.block_query(
      lambda rows, valid: jnp.sum(valid.astype(jnp.int32)),
      lambda acct, stat: stat,
      1024,
      row,
      (),
    )
    (total,), bad = q.step(q.zero, jnp.zeros((1024,), jnp.float32), start, n)
  assert int(total) == want and not bool(bad)


# ------------------------------------------------------ the checked-program cache
def test_a_new_jitted_row_function_is_never_answered_with_an_old_program():
  """Before: a jitted row function (a JAX callable) was fingerprinted by ``id``
  alone, and the cache of checked programs kept only that number, not the function.
  A loop ``s.count(jax.jit(lambda a, t=t: a < t), eps)`` freed each function, the
  next one could get the same address, and was answered with the first one's
  program: counts of 100 and 100 for thresholds 100 and 500, another query than the
  one asked, silently. Now the fingerprint holds the function (compared by
  identity), so its address cannot be reused while the cache remembers it: the
  function stays alive after the caller drops it, and a function made afterwards at
  any address is traced afresh."""
  import gc
  import weakref

  s = Session(np.arange(1000), 1e6, key=jax.random.key(6))
  first = jax.jit(lambda a: a < 100)
  assert round(s.count(first, eps=1000.0)) == 100
  alive = weakref.ref(first)
  del first
  gc.collect()
  assert alive() is not None  # held by the cache: its id cannot be reused
  got = []
  for t in (500, 900):
    f = jax.jit(lambda a, t=t: a < t)
    got.append(round(s.count(f, eps=1000.0)))
    del f
  assert got == [500, 900]
