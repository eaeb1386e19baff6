"""Attacks on the invalid-output sentinel and on a secure accountant's static state.

A bad traced parameter (a scale the exact sampler cannot take, NaN, a subnormal eps,
...) must make the release refused: nothing spent, ``last_answered`` False, the
refusal fill (NaN, or the int dtype's minimum) as output, never the statistic added
to a sampler's fill. A secure accountant must keep a ChaCha20 key and exact
mechanisms whatever is swapped into it through ``dataclasses.replace`` or
``jax.tree_util``. Each attack uses the public API only.
"""

import dataclasses
import functools
import math

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
  PosetBall,
  PosetCountMechanism,
  ZCDPGaussianMechanism,
  release,
)
from jaxdp.accounting.refusal import FillOnRefusal

INT_MIN = int(np.iinfo(np.int32).min)
# float32 values (what a traced parameter is): zero, subnormals, negative, infinite, NaN
BAD = [0.0, 1e-45, 1e-39, -1.0, -np.inf, np.inf, np.nan]
# an exact sampler's scale beyond exact.MAX_SCALE = 2^20 (eps = 1e-9: the reported
# attack, which released int32 min + the statistic)
EXACT_EPS = BAD + [1e-9, 1e-7]
EXACT_SENS = BAD + [1e7, 1e30]
FLOAT_SENS = BAD + [3e38]  # sensitivity / eps overflows float32
POSET = Poset.from_edges(3, [(1, 0)])
INTS = jnp.array([1234, -77, 5], jnp.int32)
INTS4 = jnp.array([1234, -77, 5, 9], jnp.int32)
FLOATS = jnp.array([1234.5, -77.25, 5.0], jnp.float32)
FLOATS4 = jnp.array([1234.5, -77.25, 5.0, 9.0], jnp.float32)
ROWS = jnp.array([[0, 0, 0], [1, 1, 1], [1, 1, 1]], jnp.int32)  # filters of POSET


def _secure(budget=10.0, **kw):
  return Accountant.create(budget, secure=True, **kw, on_refusal=FillOnRefusal())


def _plain(budget=10.0, **kw):
  return Accountant.create(budget, key=jax.random.key(0), **kw, on_refusal=FillOnRefusal())


def _batch(acct, n):
  """n accountants with their own keys (a batch, as jax.vmap returns it)."""
  return jax.vmap(lambda k: dataclasses.replace(acct, key=k))(jax.random.split(acct.key, n))


# family: (mechanism from its parameters, the parameters' good values). The cases of a
# family share one compiled program (their parameters are all traced there).
FAMILIES = {
  "laplace-exact": (
    lambda eps, sensitivity: LaplaceMechanism(eps, sensitivity, exact=True),
    dict(eps=0.5, sensitivity=1.0),
  ),
  "laplace-grid": (
    lambda eps, sensitivity: LaplaceMechanism(eps, sensitivity, exact=True, grid=2.0**-4),
    dict(eps=0.5, sensitivity=1.0),
  ),
  "laplace-float": (
    lambda eps, sensitivity: LaplaceMechanism(eps, sensitivity),
    dict(eps=0.5, sensitivity=1.0),
  ),
  "knorm-poset-exact": (
    lambda eps, sensitivity: KNormMechanism(PosetBall(POSET), eps, sensitivity, exact=True),
    dict(eps=0.5, sensitivity=1.0),
  ),
  "knorm-l1-exact": (
    lambda eps: KNormMechanism(LpBall(3, 1), eps, exact=True),
    dict(eps=0.5),
  ),
  "knorm-linf-exact": (
    lambda eps, sensitivity: KNormMechanism(
      LpBall(3, math.inf), eps, sensitivity, exact=True
    ),
    dict(eps=0.5, sensitivity=1.0),
  ),
  "knorm-poset-float": (lambda eps: KNormMechanism(PosetBall(POSET), eps), dict(eps=0.5)),
  "knorm-l1-float": (lambda eps: KNormMechanism(LpBall(3, 1), eps), dict(eps=0.5)),
  "knorm-linf-float": (
    lambda sensitivity: KNormMechanism(LpBall(3, math.inf), 0.5, sensitivity),
    dict(sensitivity=1.0),
  ),
  "knorm-l2-float": (
    lambda eps, sensitivity: KNormMechanism(LpBall(3, 2), eps, sensitivity),
    dict(eps=0.5, sensitivity=1.0),
  ),
  "gaussian": (
    lambda eps, delta, sensitivity: GaussianMechanism(eps, delta, sensitivity),
    dict(eps=0.5, delta=1e-5, sensitivity=1.0),
  ),
  "zcdp": (
    lambda sigma, sensitivity: ZCDPGaussianMechanism(sigma, sensitivity),
    dict(sigma=2.0, sensitivity=1.0),
  ),
  "poset-count-exact-poset": (
    lambda eps: PosetCountMechanism(POSET, eps, exact=True),
    dict(eps=0.5),
  ),
  "poset-count-exact-linf": (
    lambda eps: PosetCountMechanism(POSET, eps, noise="linf", exact=True),
    dict(eps=0.5),
  ),
  "poset-count-exact-laplace": (
    lambda eps: PosetCountMechanism(POSET, eps, noise="laplace", exact=True),
    dict(eps=0.5),
  ),
  "poset-count-float-l2": (
    lambda eps: PosetCountMechanism(POSET, eps, noise="l2"),
    dict(eps=0.5),
  ),
  "poset-count-float-poset": (lambda eps: PosetCountMechanism(POSET, eps), dict(eps=0.5)),
}

# name: (family, the traced parameter, accountant, data, bad values, good value)
CASES = {
  "laplace-exact-eps": ("laplace-exact", "eps", _secure, INTS, EXACT_EPS, 0.5),
  "laplace-exact-sensitivity": (
    "laplace-exact",
    "sensitivity",
    _secure,
    INTS,
    EXACT_SENS,
    2.0,
  ),
  "laplace-grid-eps": ("laplace-grid", "eps", _secure, FLOATS, EXACT_EPS, 0.5),
  "laplace-grid-sensitivity": (
    "laplace-grid",
    "sensitivity",
    _secure,
    FLOATS,
    BAD + [1e5, 1e30],
    1.0,
  ),
  "laplace-float-eps": ("laplace-float", "eps", _plain, FLOATS, BAD, 0.5),
  "laplace-float-sensitivity": (
    "laplace-float",
    "sensitivity",
    _plain,
    FLOATS,
    FLOAT_SENS,
    1.0,
  ),
  "knorm-poset-exact-eps": ("knorm-poset-exact", "eps", _secure, INTS4, EXACT_EPS, 0.5),
  "knorm-poset-exact-sensitivity": (
    "knorm-poset-exact",
    "sensitivity",
    _secure,
    INTS4,
    EXACT_SENS,
    1.0,
  ),
  "knorm-l1-exact-eps": ("knorm-l1-exact", "eps", _secure, INTS, EXACT_EPS, 0.5),
  "knorm-linf-exact-eps": ("knorm-linf-exact", "eps", _secure, INTS, EXACT_EPS, 0.5),
  "knorm-linf-exact-sensitivity": (
    "knorm-linf-exact",
    "sensitivity",
    _secure,
    INTS,
    EXACT_SENS,
    1.0,
  ),
  "knorm-poset-float-eps": ("knorm-poset-float", "eps", _plain, FLOATS4, BAD, 0.5),
  "knorm-l1-float-eps": ("knorm-l1-float", "eps", _plain, FLOATS, BAD, 0.5),
  "knorm-linf-float-sensitivity": (
    "knorm-linf-float",
    "sensitivity",
    _plain,
    FLOATS,
    FLOAT_SENS,
    1.0,
  ),
  "knorm-l2-float-eps": ("knorm-l2-float", "eps", _plain, FLOATS, BAD, 0.5),
  "knorm-l2-float-sensitivity": (
    "knorm-l2-float",
    "sensitivity",
    _plain,
    FLOATS,
    FLOAT_SENS,
    1.0,
  ),
  # the classical calibration needs eps < 1
  "gaussian-eps": (
    "gaussian",
    "eps",
    lambda: _plain(delta_budget=1e-3),
    FLOATS,
    BAD + [1.0, 1.5],
    0.5,
  ),
  "gaussian-delta": (
    "gaussian",
    "delta",
    lambda: _plain(delta_budget=0.5),
    FLOATS,
    BAD + [1.0, 2.0],
    1e-5,
  ),
  "gaussian-sensitivity": (
    "gaussian",
    "sensitivity",
    lambda: _plain(delta_budget=1e-3),
    FLOATS,
    FLOAT_SENS,
    2.0,
  ),
  "zcdp-sigma": (
    "zcdp",
    "sigma",
    lambda: _plain(composition="zcdp", delta_budget=1e-6),
    FLOATS,
    BAD,
    2.0,
  ),
  "zcdp-sensitivity": (
    "zcdp",
    "sensitivity",
    lambda: _plain(composition="zcdp", delta_budget=1e-6),
    FLOATS,
    BAD,
    1.0,
  ),
  **{
    name: (name, "eps", acct, ROWS, EXACT_EPS if "exact" in name else BAD, 0.5)
    for name, acct in (
      ("poset-count-exact-poset", _secure),
      ("poset-count-exact-linf", _secure),
      ("poset-count-exact-laplace", _secure),
      ("poset-count-float-l2", _plain),
      ("poset-count-float-poset", _plain),
    )
  },
}


def _maker(name):
  """The case's mechanism from its traced parameter, the others static (their good
  values)."""
  family, param = CASES[name][:2]
  make, good = FAMILIES[family]
  return lambda p: make(**{**good, param: p})


def _fill(out):
  out = np.asarray(out)
  return out == INT_MIN if np.issubdtype(out.dtype, np.integer) else np.isnan(out)


def _assert_refused(acct, out, lanes):
  """Refused on ``lanes``: nothing spent, the flag and counter set, the exact fill."""
  assert np.all(np.asarray(acct.answered)[lanes] == 0)
  assert np.all(np.asarray(acct.refusals)[lanes] == 1)
  assert not np.any(np.asarray(acct.last_answered)[lanes])
  assert np.all(np.asarray(acct.spent_units)[lanes] == 0)
  assert np.all(np.asarray(acct.spent_delta_units)[lanes] == 0)
  assert np.all(_fill(out)[lanes]), np.asarray(out)[lanes]


def _assert_answered(acct, out, lane):
  assert int(acct.answered[lane]) == 1 and bool(acct.last_answered[lane])
  assert np.all(np.asarray(acct.spent_units)[lane] > 0)
  assert not np.any(_fill(out)[lane]) and np.all(np.isfinite(np.asarray(out)[lane]))


LANES = 1 + max(len(case[4]) for case in CASES.values())


@functools.partial(jax.jit, static_argnums=4)
def _release_lanes(accts, params, keys, data, family):
  """A release and a standalone ``randomize`` per lane (vmapped): the mechanism of
  ``family`` from the lane's parameters (all traced)."""
  make = FAMILIES[family][0]

  def lane(a, p, k):
    mech = make(**p)
    a, out = release(a, mech, data)
    return a, out, mech.randomize(k, data)

  return jax.vmap(lane)(accts, params, keys)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_a_bad_traced_parameter_is_refused_under_jit_and_vmap(name):
  """One jitted, vmapped call over a batch of accountants, keys and mechanisms: every
  bad lane is refused with nothing spent and outputs exactly the fill (never the fill
  plus the statistic), and so does a standalone ``randomize``; the good lane (last)
  is answered. Every parameter of the mechanism is traced, the others at their good
  values in every lane (the cases of a family share one compiled program; the scan
  test below keeps the others static)."""
  family, param, new_acct, data, bad, good = CASES[name]
  # LANES lanes in every case (one program per family): the bad values, repeated
  values = jnp.asarray([*bad, *bad][: LANES - 1] + [good], jnp.float32)
  n = LANES
  keys = jax.random.split(jax.random.key(7), n)
  params = {
    k: values if k == param else jnp.full(n, v, jnp.float32)
    for k, v in FAMILIES[family][1].items()
  }
  acct, out, alone = _release_lanes(_batch(new_acct(), n), params, keys, data, family)
  lanes = np.arange(n - 1)
  _assert_refused(acct, out, lanes)
  assert np.all(_fill(alone)[lanes]), np.asarray(alone)[lanes]
  _assert_answered(acct, out, n - 1)
  assert not np.any(_fill(alone)[n - 1])


def test_the_reported_attack_is_refused():
  f = jax.jit(
    lambda a, e: release(
      a, dataclasses.replace(LaplaceMechanism(0.5, exact=True), eps=e), jnp.int32(1234)
    )
  )
  acct, out = f(_secure(1.0), 1e-9)
  assert int(out) == INT_MIN  # not int32 min + 1234
  assert float(acct.spent_eps) == 0.0 and int(acct.spent_units) == 0
  assert not bool(acct.last_answered) and int(acct.refusals) == 1


@pytest.mark.parametrize("composition", ["basic", "advanced", "zcdp", "rdp", "planned"])
def test_a_bad_traced_eps_is_refused_under_every_composition(composition):
  """Under the planned rule eps = 1e-9 fits a planned Laplace(0.5) row, and under the
  filters its tiny cost fits: the release must still be refused."""
  kw = dict(
    basic={},
    advanced=dict(max_releases=4, delta_budget=1e-6, delta_prime=1e-7),
    zcdp=dict(delta_budget=1e-6),
    rdp=dict(delta_budget=1e-6),
  )
  mech = lambda e: LaplaceMechanism(e, exact=True)
  if composition == "planned":
    template = _secure(10.0)
    plan = jaxdp.plan(lambda a: release(a, mech(0.5), INTS)[0], template)
    acct = _secure(10.0, composition="planned", plan=plan)
  else:
    acct = _secure(10.0, composition=composition, **kw.get(composition, {}))
  values = jnp.asarray(EXACT_EPS + [0.5], jnp.float32)
  n = len(values)
  run = jax.jit(jax.vmap(lambda a, e: release(a, mech(e), INTS)))
  after, out = run(_batch(acct, n), values)
  _assert_refused(after, out, np.arange(n - 1))
  assert int(after.answered[-1]) == 1


@pytest.mark.slow
@pytest.mark.parametrize(
  "name",
  ["laplace-exact-eps", "knorm-poset-exact-sensitivity", "gaussian-eps", "zcdp-sigma"],
)
def test_a_bad_traced_parameter_is_refused_in_a_scan(name):
  """lax.scan threading one accountant through every value: only the good releases
  are answered and charged (as much as the same releases without the bad ones)."""
  _, _, new_acct, data, bad, good = CASES[name]
  make = _maker(name)
  values = jnp.asarray([good] + bad + [good], jnp.float32)

  @jax.jit
  def run(a, ps, data):
    return jax.lax.scan(lambda a, p: release(a, make(p), data), a, ps)

  after, outs = run(new_acct(), values, data)
  control, _ = run(new_acct(), jnp.asarray([good, good], jnp.float32), data)
  assert int(after.answered) == 2 and int(after.refusals) == len(bad)
  assert np.array_equal(np.asarray(after.spent_units), np.asarray(control.spent_units))
  assert int(after.spent_delta_units) == int(control.spent_delta_units)
  assert np.all(_fill(outs[1:-1]))
  assert not np.any(_fill(outs[0])) and not np.any(_fill(outs[-1]))


def test_partitioned_and_parallel_releases_refuse_a_bad_traced_parameter():
  rows = jnp.array([3, 1, 4, 1, 5], jnp.int32)
  part = jnp.array([0, 1, 0, 1, 2], jnp.int32)

  @jax.jit
  def run(a, e):
    m = LaplaceMechanism(e, sensitivity=5.0, exact=True)
    a, parts = jaxdp.release_partitioned(a, m, rows, part, 3)
    a, pair = jaxdp.release_parallel_unchecked(
      a, [(LaplaceMechanism(0.5, exact=True), INTS), (m, INTS[:2])]
    )
    return a, parts, pair

  # not secure: a secure accountant refuses release_parallel_unchecked
  acct, parts, pair = run(_plain(), jnp.float32(1e-9))
  assert int(acct.answered) == 0 and int(acct.refusals) == 2
  assert int(acct.spent_units) == 0
  assert np.all(np.asarray(parts) == INT_MIN)
  assert all(np.all(np.asarray(o) == INT_MIN) for o in pair)
  acct, parts, pair = run(_plain(), jnp.float32(0.5))
  assert int(acct.answered) == 2 and not np.any(np.asarray(parts) == INT_MIN)


def test_discrete_gaussian_parameters_cannot_be_traced_or_rebuilt_out_of_range():
  """Its sigma and integer tables are set on the host: a traced parameter is a clear
  error at trace time, and a leaf out of range swapped in by jax.tree_util (which
  skips the constructor) is an error before anything is spent."""
  mech = DiscreteGaussianMechanism(1.0, 1e-6)
  acct = _secure(10.0, composition="zcdp", delta_budget=1e-6)
  with pytest.raises(ValueError, match="static eps, delta and sensitivity"):
    jax.jit(lambda a, m: release(a, m, INTS))(acct, mech)
  with pytest.raises(ValueError, match="static eps, delta and sensitivity"):
    jax.jit(lambda a, e: release(a, dataclasses.replace(mech, eps=e), INTS))(acct, 1.0)
  with pytest.raises(ValueError, match="need sigma = inf"):  # rho underflows to 0
    DiscreteGaussianMechanism(1e-9, 1e-6)
  leaves, treedef = jax.tree_util.tree_flatten(mech)
  for i, bad in [(0, 1e-9), (0, 0.0), (1, 1.0), (1, np.nan), (2, 0.0), (2, 1e30)]:
    swapped = jax.tree_util.tree_unflatten(treedef, leaves[:i] + [bad] + leaves[i + 1 :])
    with pytest.raises(ValueError, match="must be in"):
      release(acct, swapped, INTS)
    with pytest.raises(ValueError, match="must be in"):
      swapped.randomize(jax.random.key(0), INTS)
  acct, out = release(acct, mech, INTS)  # the same accountant: nothing was spent
  assert int(acct.answered) == 1


# ------------------------------------------------------------------ static state
def _weak_keys():
  return {
    "threefry": jax.random.key(0),
    "raw": jax.random.PRNGKey(0),
    "chacha8": jaxdp.random.study_key(0, "chacha8"),
    "rbg": jaxdp.random.study_key(0, "rbg"),
  }


@pytest.mark.parametrize("kind", ["threefry", "raw", "chacha8", "rbg"])
def test_a_secure_accountant_refuses_a_weak_key_swapped_in(kind):
  """dataclasses.replace, tree_unflatten and tree_map can put any key into a secure
  accountant; every release checks it (jit, vmap) before anything is spent."""
  acct = _secure(1.0)
  weak = _weak_keys()[kind]
  leaves, treedef = jax.tree_util.tree_flatten(acct)
  i = next(j for j, x in enumerate(leaves) if x is acct.key)
  swapped = [
    dataclasses.replace(acct, key=weak),
    jax.tree_util.tree_unflatten(treedef, leaves[:i] + [weak] + leaves[i + 1 :]),
    jax.tree_util.tree_map(lambda x: weak if x is acct.key else x, acct),
  ]
  mech = LaplaceMechanism(0.5, exact=True)
  match = "secure .* not a ChaCha20 key"
  for a in swapped:
    assert a.secure
    with pytest.raises(ValueError, match=match):
      release(a, mech, INTS)
    with pytest.raises(ValueError, match=match):
      jax.jit(lambda a: release(a, mech, INTS))(a)
    with pytest.raises(ValueError, match=match):
      jaxdp.release_partitioned(a, mech, INTS, jnp.zeros(3, jnp.int32), 1)
    with pytest.raises(ValueError, match="secure .* refuses release_parallel_unchecked"):
      jaxdp.release_parallel_unchecked(a, [(mech, INTS)])
  if kind != "raw":
    batch = jax.vmap(lambda k: dataclasses.replace(acct, key=k))(jax.random.split(weak, 2))
    with pytest.raises(ValueError, match=match):
      jax.vmap(lambda a: release(a, mech, INTS))(batch)
  acct, out = release(acct, mech, INTS)  # the untouched accountant still releases
  assert int(acct.answered) == 1


def _rebuilt(mech, **static):
  """``mech`` with static fields replaced through its treedef (no constructor)."""
  leaves, treedef = jax.tree_util.tree_flatten(mech)
  cls, aux = treedef.node_data()
  children = {p[0].name for p, _ in jax.tree_util.tree_flatten_with_path(mech)[0]}
  names = [f.name for f in dataclasses.fields(cls) if f.name not in children]
  aux = tuple(static.get(n, v) for n, v in zip(names, aux))
  children = [jax.tree_util.tree_structure(0.0)] * len(leaves)
  made = jax.tree_util.PyTreeDef.from_node_data_and_children(
    jax.tree_util.default_registry, (cls, aux), children
  )
  return jax.tree_util.tree_unflatten(made, leaves)


def test_static_options_swapped_through_the_treedef_are_checked_at_release():
  """A treedef carries the static fields; rebuilding a mechanism from a doctored one
  skips the constructor. exact=True on a ball without an exact sampler (once the
  l_2 ball) drew l_1-calibrated Laplace noise (weaker than its sensitivity needs)
  and a secure accountant answered it; an unknown count noise was drawn as Laplace;
  a grid that is not a power of two rounds when snapping; an unknown on_invalid
  counted rows that are not filters."""
  l3 = _rebuilt(KNormMechanism(LpBall(3, math.inf), 1.0, exact=True), ball=LpBall(3, 3))
  assert l3.exact and l3.ball == LpBall(3, 3)
  grid = _rebuilt(LaplaceMechanism(1.0, exact=True, grid=0.25), grid=0.3)
  counts = _rebuilt(PosetCountMechanism(POSET, 1.0, noise="linf", exact=True), noise="l3")
  # on_invalid="skip" counted a row that is not a filter (outside the poset ball)
  skip = _rebuilt(PosetCountMechanism(POSET, 1.0, exact=True), on_invalid="skip")
  not_a_filter = jnp.array([[0, 1, 0], [1, 0, 0]], jnp.int32)
  acct = _secure(10.0)
  for mech, data, match in [
    (l3, INTS, "exact=True is available"),
    (grid, FLOATS, "grid must be a power of two"),
    (counts, ROWS, "noise must be one of"),
    (skip, not_a_filter, "on_invalid must be"),
  ]:
    with pytest.raises(ValueError, match=match):
      release(acct, mech, data)
    with pytest.raises(ValueError, match=match):
      mech.randomize(jax.random.key(0), data)
  acct, _ = release(acct, LaplaceMechanism(1.0, exact=True), INTS)
  assert int(acct.answered) == 1


@pytest.mark.parametrize("secure", [True, False])
def test_a_zero_sensitivity_swapped_in_by_tree_unflatten_is_an_error(secure):
  """tree_unflatten(treedef, [eps, 0.0]) skips the constructor: the noise scale was 0
  and the raw statistic was released (1234 exactly), charged eps."""
  mech = LaplaceMechanism(0.5, exact=secure)
  leaves, treedef = jax.tree_util.tree_flatten(mech)
  data = INTS if secure else FLOATS
  acct = _secure(1.0) if secure else _plain(1.0)
  for leaf in ([0.5, 0.0], [0.5, -1.0], [0.5, 1e-300], [np.float32(1e-40), 1.0]):
    swapped = jax.tree_util.tree_unflatten(treedef, leaf)
    with pytest.raises(ValueError, match=r"(sensitivity|eps) must be in"):
      release(acct, swapped, data)
    with pytest.raises(ValueError, match=r"(sensitivity|eps) must be in"):
      swapped.randomize(jax.random.key(0), data)
  acct, _ = release(acct, mech, data)
  assert int(acct.answered) == 1
