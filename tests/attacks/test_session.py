"""Attacks on a Session by a hostile analyst with the public API only.

Each test is a way an analyst got more than the budget allows from a ``Session``:
an error that tells the row count, a row function that sees the whole batch, a copy
that rewinds the budget. Every one failed before the session traced row functions on
one abstract row against an allowlist, decided every error from public parameters,
and refused copies.
"""

import copy
import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.extend import core as jex_core
from jax.interpreters import batching, mlir

import jaxdp
from jaxdp import LaplaceMechanism, Session, UnsafeQueryError


def _outcome(fn):
  """``("ok", None)`` or ``(exception type name, message)``."""
  try:
    fn()
  except Exception as e:
    return type(e).__name__, str(e)
  return "ok", None


# ------------------------------------------------------------------ errors and n
@pytest.mark.parametrize("secure", [False, True])
def test_a_huge_bound_does_not_tell_the_row_count(secure):
  """Before: ``sum(lambda a: a > 0, bound=1e30)`` raised a ValueError quoting
  "1,000 integer contributions" (the exact n, nothing spent). Now both datasets
  are answered; the sum of n ones is within 60 of n at eps 0.5 (Laplace scale 2;
  the secure grid's snapping adds at most one unit to the scale)."""
  grid = 2.0**20 if secure else None
  bound = 2.0**30 if secure else 1e30
  for n in (1000, 1001):
    s = Session(
      np.arange(n), 10.0, key=None if secure else jax.random.key(n), secure=secure
    )
    out = s.sum(lambda a: a >= 0, eps=0.5, bound=bound, grid=grid)
    assert np.isfinite(out)
    if not secure:  # bound 1e30: the noise is huge, but no error
      continue
    assert s.answered == 1


@pytest.mark.slow
def test_bisection_on_the_row_count_sees_only_refusals():
  """Before: after spending 0.6 of 1.0, ``sum(bool_fn, eps=0.5, bound=2**24 / m)``
  gave ValueError when n > m and ReleaseRefusedError when n <= m: n by bisection
  in 20 free queries. Now every m gives the same refusal on 999 and on 1001 rows."""
  seen = set()
  for n in (999, 1001):
    s = Session(np.arange(n), 1.0, key=jax.random.key(0))
    s.count(lambda a: a > 5, eps=0.6)
    for m in (500, 1000, 2000):
      kind, msg = _outcome(lambda: s.sum(lambda a: a > 0, eps=0.5, bound=2**24 / m))
      seen.add((m, kind, msg))
    assert s.refusals == 3 and s.answered == 1
  assert {k for _, k, _ in seen} == {"ReleaseRefusedError"}
  assert len(seen) == 3  # one outcome per m, the same on both datasets


def test_too_many_rows_is_the_data_holders_error_at_creation():
  """The release dtype's exact range is a property of the data: checked when the
  session is created, never by a query (whose error would tell the analyst)."""
  limit = 2**24
  rows = jax.ShapeDtypeStruct((limit + 1,), jnp.int8)
  with pytest.raises(ValueError, match="more than 16,777,216"):
    Session(jnp.zeros(rows.shape, rows.dtype), 1.0)


# ------------------------------------------------------------------ batch-level code
def _batch_peeker():
  """A row function whose vmap rule sees every row: 'is anyone 37?' for each row."""

  @jax.custom_batching.custom_vmap
  def f(x):
    return x == 37

  @f.def_vmap
  def rule(axis_size, in_batched, x):
    return jnp.broadcast_to(jnp.any(x == 37), x.shape), True

  return f


def _named_add():
  """A primitive of the analyst's own, named like lax.add, whose batching rule
  broadcasts row 7's value to every row."""
  p = jex_core.Primitive("add")
  p.def_impl(lambda x: x)
  p.def_abstract_eval(lambda x: x)
  mlir.register_lowering(p, lambda ctx, x: [x])
  batching.primitive_batchers[p] = lambda args, dims: (
    jnp.broadcast_to(args[0][7], args[0].shape),
    dims[0],
  )
  return lambda v: p.bind(v) == 37


def test_a_custom_vmap_row_function_is_refused():
  """Before: ``count`` of the batch peeker was about n if anyone was 37, about 0
  otherwise (1013.7 on 1000 rows). Now it is refused before anything is spent."""
  s = Session(np.arange(1000), 1.0, key=jax.random.key(0))
  with pytest.raises(UnsafeQueryError, match="custom_vmap_call"):
    s.count(_batch_peeker(), eps=0.1)
  with pytest.raises(UnsafeQueryError, match="custom_vmap_call"):
    s.histogram(lambda v: _batch_peeker()(v).astype(jnp.int32), 2, eps=0.1)
  assert s.answered == 0 and s.refusals == 0 and s.spent == 0


def test_a_primitive_named_like_an_allowed_one_is_refused():
  """The allowlist holds primitive objects, not names."""
  s = Session(np.arange(1000), 1.0, key=jax.random.key(0))
  with pytest.raises(UnsafeQueryError, match="'add'"):
    s.count(_named_add(), eps=0.1)
  assert s.answered == 0


@pytest.mark.parametrize(
  "name, fn",
  [
    ("while", lambda v: jax.lax.while_loop(lambda c: c < v, lambda c: c + 1, 0) > 3),
    (
      "pure_callback",
      lambda v: jax.pure_callback(lambda x: x, jax.ShapeDtypeStruct((), jnp.int32), v) > 3,
    ),
    ("random_seed", lambda v: jax.random.bits(jax.random.key(0)) > v.astype(jnp.uint32)),
    ("debug_print", lambda v: (jax.debug.print("{}", v), v > 3)[1]),
    (
      "while",
      lambda v: (
        jax.lax.cond(
          v > 3, lambda: jax.lax.while_loop(lambda c: c < 2, lambda c: c + 1, v), lambda: v
        )
        > 0
      ),
    ),  # nested in a branch
  ],
)
def test_constructs_outside_the_allowlist_are_refused(name, fn):
  s = Session(np.arange(100), 1.0, key=jax.random.key(0))
  with pytest.raises(UnsafeQueryError, match=repr(name)):
    s.count(fn, eps=0.1)
  assert s.answered == 0 and s.spent == 0


def test_row_local_jax_code_is_accepted_and_correct():
  """What the allowlist lets through acts row by row: custom_jvp functions
  (jax.nn.relu), cond, fixed-length loops, jit, sorting and reductions within a row.
  Each count is checked against numpy at eps 2 (Laplace scale 0.5: |noise| < 12
  with probability 1 - 4e-11 for each of the four counts)."""
  rows = np.random.default_rng(0).integers(-5, 6, size=(500, 3))
  s = Session(rows, 100.0, key=jax.random.key(1))
  queries = {
    "relu": (lambda r: jax.nn.relu(r).sum() > 4, (np.maximum(rows, 0).sum(1) > 4)),
    "cond": (
      lambda r: jax.lax.cond(r[0] > 0, lambda: r[1] > 0, lambda: r[2] > 0),
      np.where(rows[:, 0] > 0, rows[:, 1] > 0, rows[:, 2] > 0),
    ),
    "loop": (
      lambda r: jax.lax.fori_loop(0, 3, lambda i, c: c + r[i], 0) > 0,
      rows.sum(1) > 0,
    ),
    "jit sort": (lambda r: jax.jit(jnp.sort)(r)[1] > 0, np.sort(rows, 1)[:, 1] > 0),
  }
  for name, (fn, truth) in queries.items():
    assert abs(s.count(fn, eps=2.0) - truth.sum()) < 12, name


def test_mechanism_parts_must_be_jaxdps_own_classes():
  """A Poset subclass could answer differently to the clipping and to the noise;
  a session accepts only the classes themselves."""

  class Lying(jaxdp.Poset):
    pass

  s = Session(np.ones((10, 4), np.int32), 1.0, key=jax.random.key(0))
  lying = Lying(jaxdp.Poset.nhis(1).relation)
  with pytest.raises(TypeError, match="not a subclass"):
    s.poset_counts(lying, 0.5)
  with pytest.raises(TypeError, match="not a subclass"):
    s.release(
      jaxdp.KNormMechanism(jaxdp.PosetBall(lying), 0.5),
      lambda r: jnp.concatenate([jnp.ones(1, r.dtype), r]),
    )
  assert s.answered == 0


# ------------------------------------------------------------------ copies
@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_a_session_cannot_be_copied_or_pickled(how):
  """Before: a deep copy or a pickle gave two sessions with the same key
  (``y2 - y1 == q2 - q1`` exactly, 1.8 spent against 1.0; a pickle restored
  spent = 0)."""
  s = Session(np.arange(100), 1.0, key=jax.random.key(0))
  s.count(lambda v: v < 10, eps=0.5)
  clone = {
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
    "pickle": lambda x: pickle.loads(pickle.dumps(x)),
  }[how]
  with pytest.raises(TypeError, match="cannot be copied or pickled"):
    clone(s)
  assert s.answered == 1  # the original is unharmed and goes on
  s.count(lambda v: v < 20, eps=0.4)
  assert s.answered == 2


# ------------------------------------------------------------------ property
_DATA = np.random.default_rng(5).integers(0, 100, size=200)
_NEIGHBOUR = np.append(_DATA, 37)  # one more person


@st.composite
def _queries(draw):
  """A Session query drawn from the public API: kind, parameters (tiny, huge and
  out-of-range values included) and a row function."""
  kind = draw(st.sampled_from(["count", "sum", "histogram", "poset", "release"]))
  eps = draw(
    st.sampled_from([1e-45, 1e-9, 0.05, 0.5, 3.0, 1e30, float("inf"), float("nan"), -1.0])
  )
  threshold = draw(st.integers(-5, 120))
  bound = draw(st.sampled_from([1e-30, 0.5, 3.0, 2.0**24, 1e30, float("inf"), 0.0]))
  grid = draw(st.sampled_from([None, 2.0**-6, 2.0**20, 0.3]))
  bins = draw(st.sampled_from([1, 3, 2**20]))
  return kind, eps, threshold, bound, grid, bins


def _ask(s, q):
  kind, eps, t, bound, grid, bins = q
  if kind == "count":
    return s.count(lambda v: v < t, eps)
  if kind == "sum":
    return s.sum(lambda v: jnp.where(v < t, v * 1e20, -v), eps, bound=bound, grid=grid)
  if kind == "histogram":
    return s.histogram(lambda v: (v - t) // 10, bins, eps)
  if kind == "poset":
    return s.poset_counts(
      jaxdp.Poset.nhis(1),
      eps,
      columns=lambda v: jnp.stack([v > t, v > t + 10, v > t + 20, v % 7 == 0]).astype(
        jnp.int32
      ),
    )
  return s.release(jaxdp.GaussianMechanism(min(eps, 0.9), 1e-6, bound), lambda v: v)


@pytest.mark.slow
@settings(
  max_examples=40,
  deadline=None,
  derandomize=True,
  suppress_health_check=[HealthCheck.too_slow],
)
@given(st.lists(_queries(), min_size=1, max_size=4), st.booleans())
def test_nothing_a_session_raises_depends_on_the_data(queries, secure):
  """Property: the same sequence of queries on neighbouring datasets (one person
  added) raises the same exception type with the same message at every step, or
  none on both; whatever is raised, the counters move alike."""
  sessions = [Session(d, 4.0, secure=secure) for d in (_DATA, _NEIGHBOUR)]
  for q in queries:
    outcomes = [_outcome(lambda s=s: _ask(s, q)) for s in sessions]
    assert outcomes[0] == outcomes[1], q
    assert [(s.answered, s.refusals, s.spent) for s in sessions][0] == [
      (s.answered, s.refusals, s.spent) for s in sessions
    ][1]


THRESHOLD = 10


def test_a_reused_check_never_answers_another_function():
  """Checked programs are reused by fingerprint (code, closure, defaults, named
  globals): functions that differ in any of these get their own program. Counts at
  eps 5 (Laplace scale 0.2; |noise| < 6 with probability 1 - 1e-13 each)."""
  global THRESHOLD
  s = Session(np.arange(100), 100.0, key=jax.random.key(2))
  for t in (10, 90):  # the same code, another closure value
    assert abs(s.count(lambda v: v < t, eps=5.0) - t) < 6
  for t in (20, 70):  # another global value
    THRESHOLD = t
    assert abs(s.count(lambda v: v < THRESHOLD, eps=5.0) - t) < 6
  bounds = [30]  # a mutable default: no fingerprint, traced every time

  def below(v, b=bounds):
    return v < b[0]

  assert abs(s.count(below, eps=5.0) - 30) < 6
  bounds[0] = 60
  assert abs(s.count(below, eps=5.0) - 60) < 6


# ------------------------------------------------------------------ outer transformations
@pytest.mark.parametrize("how", ["make_jaxpr", "jit", "eval_shape", "vmap", "grad"])
def test_a_query_inside_a_jax_transformation_is_refused(how):
  """Before: ``jax.make_jaxpr`` around a query (its error swallowed) returned every
  row of the data, and the key, as constants of the caller's jaxpr, for nothing; a
  query under ``jax.grad`` charged eps and then failed. Now a query made inside any
  transformation is refused before anything is read, and the session goes on."""
  data = np.random.default_rng(1).integers(18, 90, size=(100, 3)).astype(np.int32)
  s = Session(data, 1.0, key=jax.random.key(0))
  errors = []

  def f(x):
    try:
      s.sum(lambda v: v[0] * 1.0, 0.1, bound=100.0)
    except UnsafeQueryError as e:
      errors.append(e)
    return x * 1.0

  wrap = {
    "make_jaxpr": lambda: jax.make_jaxpr(f)(1.0),
    "jit": lambda: jax.jit(f)(1.0),
    "eval_shape": lambda: jax.eval_shape(f, 1.0),
    "vmap": lambda: jax.vmap(f)(jnp.ones(2)),
    "grad": lambda: jax.grad(f)(1.0),
  }[how]
  out = wrap()
  assert errors and "outside JAX transformations" in str(errors[0])
  if how == "make_jaxpr":
    assert not any(np.shape(c) == data.shape for c in out.consts)
  assert s.answered == 0 and s.spent == 0
  assert np.isfinite(s.sum(lambda v: v[0] * 1.0, 0.1, bound=100.0))  # still usable


@pytest.mark.parametrize("query", ["poset columns", "matrix rows", "vector count"])
def test_shape_errors_do_not_quote_the_row_count(query):
  """Before: a ``columns`` function of the wrong shape or a rank-2 contribution
  raised "got (1000,)" / "got (1000, 4, 4)": the exact n for free. Now the error
  is the same on 1000 and on 1001 rows, and nothing is spent."""
  poset = jaxdp.Poset.nhis(1)
  ask = {
    "poset columns": lambda s: s.poset_counts(poset, 0.5, columns=lambda r: r[0]),
    "matrix rows": lambda s: s.release(LaplaceMechanism(0.5), lambda r: jnp.outer(r, r)),
    "vector count": lambda s: s.count(lambda r: r > 0, 0.5),
  }[query]
  seen = []
  for n in (1000, 1001):
    s = Session(np.zeros((n, 4), np.float32), 1.0, key=jax.random.key(0))
    seen.append(_outcome(lambda: ask(s)))
    assert (s.spent, s.answered, s.refusals) == (0.0, 0, 0)
  assert seen[0] == seen[1] and seen[0][0] != "ok"
  assert "1000" not in seen[0][1] and "1001" not in seen[0][1]


def test_secure_integer_sums_clip_each_value_to_the_bound():
  """A secure sum of integer values clips each to [-bound, bound], as documented
  (before, values above the bound counted as 0: 1000 fives summed with bound 3 came
  out about 0, not 3000). Exact Laplace of scale 3/1: |noise| < 60 w.p. 1 - 2e-9."""
  s = Session(np.full(1000, 5, np.int32), 10.0, secure=True)
  assert abs(s.sum(lambda v: v, 1.0, bound=3) - 3000) < 60
  assert abs(s.sum(lambda v: -v, 1.0, bound=3) + 3000) < 60


def test_parameters_are_read_before_the_analysts_code_runs():
  """A grid (or a bin count) given as a numpy array that the row function mutates
  while it is traced must not change the release: parameters are taken as Python
  numbers when the query is made. A grid turned into 0.3 (not a power of two) or
  a negative value would otherwise reach the snapping."""
  for new in (0.3, -(2.0**-6), float("nan"), 2.0**30):
    grid = np.array(2.0**-6)

    def value(v, new=new):
      grid[...] = new
      return v

    s = Session(np.full(1000, 0.4, np.float32), 10.0, secure=True)
    out = s.sum(value, 1.0, bound=1.0, grid=grid)  # 1000 x 0.4 on the grid 1/64
    assert abs(out - 400) < 60 and out * 64 == round(out * 64)


ZERO = 0.0


def test_the_fingerprint_tells_minus_zero_from_zero():
  """0.0 == -0.0 and both hash alike: a fingerprint by value reused the program of
  1 / (x * 0.0) < 0 for 1 / (x * -0.0) < 0 (about 0 rows instead of all 100).
  Counts at eps 20 (Laplace scale 0.05: |noise| < 2 w.p. 1 - 4e-18)."""
  global ZERO
  s = Session(np.arange(100, dtype=np.float32), 100.0, key=jax.random.key(3))
  for z, truth in ((0.0, 0), (-0.0, 100), (0.0, 0)):
    ZERO = z
    assert abs(s.count(lambda r: 1.0 / ((r * 0.0 + 1.0) * ZERO) < 0, eps=20.0) - truth) < 2


def test_a_huge_number_of_parts_is_refused_before_compiling():
  """``histogram(num_bins=2**40)`` hung (a noise array of 2^40 entries)."""
  s = Session(np.arange(10), 1.0, key=jax.random.key(0))
  with pytest.raises(ValueError, match="num_bins must be at most"):
    s.histogram(lambda v: v % 3, 2**40, eps=0.1)
  with pytest.raises(ValueError, match="num_parts must be at most"):
    jaxdp.release_partitioned(
      jaxdp.Accountant.create(1.0, key=jax.random.key(1)),
      LaplaceMechanism(0.1),
      jnp.ones(10),
      jnp.zeros(10, jnp.int32),
      2**25,
    )
  assert s.answered == 0


def test_a_bad_number_of_bins_is_named_as_num_bins():
  """``histogram(f, num_bins=True)`` said ``num_parts must be an integer``, naming an
  argument the caller never passed."""
  s = Session(np.arange(10), 1.0, key=jax.random.key(0))
  for bad in (True, 2.5, 0):
    with pytest.raises(ValueError, match=f"num_bins must be .*{bad!r}"):
      s.histogram(lambda v: v % 3, bad, eps=0.1)
  assert s.answered == 0 and s.spent == 0


def test_the_secure_sums_clip_past_2_30_is_documented():
  """A secure Session.sum of integers totalling past 2**30 was released as about
  2**30 with nothing saying so (an error there would depend on the data)."""
  import pathlib

  doc = " ".join(jaxdp.Session.sum.__doc__.split())
  assert "clipped to +-2**30 units" in doc and "rows * bound / grid" in doc
  guide = pathlib.Path(__file__).parents[2] / "docs" / "guides" / "publishing.md"
  assert "`Session.sum` in a secure session" in " ".join(guide.read_text().split())
