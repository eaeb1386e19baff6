"""A secure accountant accepts jaxdp's own exact mechanisms only, by exact class and
validated fields: never a mechanism because it says it is exact.

Each attack uses the public API only; before the allowlist, every one of them was
answered (a float Gaussian that calls itself exact released float noise, and a
Laplace subclass without noise released the statistic itself, eps charged).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp
import pytest

import jaxdp
from jaxdp import (
  Accountant,
  CountBall,
  DiscreteGaussianMechanism,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  Poset,
  PosetBall,
  PosetCountMechanism,
  SumBall,
  SumQueryMechanism,
  VoteQueryMechanism,
  ZCDPGaussianMechanism,
  release,
)
from jaxdp.accounting.releases import mechanism_cost
from jaxdp.mechanisms import EXACT_COUNT_NOISES, is_publishable, publishable_problem

POSET = Poset.from_edges(3, [(1, 0)])
INTS = jnp.array([1234, -77, 5], jnp.int32)


class ExactGaussian(GaussianMechanism):
  exact = True  # float Gaussian noise that calls itself exact


class NoNoise(LaplaceMechanism):
  def randomize(self, key, data):
    return jnp.asarray(data)


class MyBall(PosetBall):
  pass


class MyPoset(Poset):
  pass


def _flagged_gaussian():
  g = GaussianMechanism(0.5, 1e-5)
  object.__setattr__(g, "exact", True)
  return g


def _shadowed_randomize():
  m = LaplaceMechanism(0.5, exact=True)
  object.__setattr__(m, "randomize", lambda key, data: jnp.asarray(data))
  return m


def _flagged_discrete_gaussian():
  m = DiscreteGaussianMechanism(1.0, 1e-6)
  object.__setattr__(m, "norm", 0.0)  # a class attribute shadowed on the instance
  return m


def _flagged_l3():
  m = KNormMechanism(LpBall(3, 3.0), 0.5)
  object.__setattr__(m, "exact", True)
  return m


def _forged_parents():
  p = Poset.from_edges(3, [(1, 0)])
  object.__setattr__(p, "parents", (-1, -1, -1))  # a cached property, forged
  return KNormMechanism(PosetBall(p), 0.5, exact=True)


class LyingFloat(float):
  """Shows 1.0 (its stored value, what numpy and the charge read) but converts to
  50.0 for float(): the noise would be drawn for eps = 50 while eps = 1 is charged."""

  def __float__(self):
    return 50.0


def _forged_field(make, field):
  def forged():
    mech = make()
    object.__setattr__(mech, field, LyingFloat(getattr(mech, field)))
    return mech

  return forged


# name: (mechanism, the type named in the error[, the option check that refuses it])
FORGED = {
  "gaussian-subclass-exact": (lambda: ExactGaussian(0.5, 1e-5), "ExactGaussian"),
  "laplace-subclass-no-noise": (lambda: NoNoise(0.5, exact=True), "NoNoise"),
  "gaussian-flag-set": (_flagged_gaussian, "GaussianMechanism"),
  "laplace-randomize-shadowed": (_shadowed_randomize, "LaplaceMechanism"),
  "discrete-gaussian-attribute": (_flagged_discrete_gaussian, "DiscreteGaussian"),
  "knorm-l3-flag-set": (_flagged_l3, "KNormMechanism", "exact=True is available for"),
  "knorm-ball-subclass": (
    lambda: KNormMechanism(MyBall(POSET), 0.5, exact=True),
    "KNormMechanism",
  ),
  "knorm-poset-subclass": (
    lambda: KNormMechanism(PosetBall(MyPoset(POSET.relation)), 0.5, exact=True),
    "KNormMechanism",
  ),
  "knorm-poset-cache-forged": (_forged_parents, "KNormMechanism"),
  "laplace-eps-lying-float": (
    _forged_field(lambda: LaplaceMechanism(1.0, exact=True), "eps"),
    "LaplaceMechanism",
  ),
  "knorm-sum-ball-eps-lying-float": (
    _forged_field(lambda: KNormMechanism(SumBall(3, 2), 1.0, exact=True), "eps"),
    "KNormMechanism",
  ),
  "knorm-count-ball-sensitivity-lying-float": (
    _forged_field(lambda: KNormMechanism(CountBall(3, 2), 1.0, exact=True), "sensitivity"),
    "KNormMechanism",
  ),
  "discrete-gaussian-eps-lying-float": (
    _forged_field(lambda: DiscreteGaussianMechanism(1.0, 1e-6), "eps"),
    "DiscreteGaussian",
  ),
  "poset-count-poset-subclass": (
    lambda: PosetCountMechanism(MyPoset(POSET.relation), 0.5, exact=True),
    "PosetCountMechanism",
  ),
}


def _data(mech):
  if isinstance(mech, PosetCountMechanism):
    return jnp.array([[0, 0, 0], [1, 1, 1]], jnp.int32)
  if isinstance(mech, KNormMechanism) and isinstance(mech.ball, PosetBall):
    return jnp.array([2, 1, 1, 0], jnp.int32)
  return INTS


@pytest.mark.parametrize("name", sorted(FORGED))
def test_a_secure_accountant_refuses_a_mechanism_that_only_says_it_is_exact(name):
  """Eagerly, under jit, partitioned and planned: a ValueError naming the mechanism's
  type and the publishable classes (parallel: refused whatever the mechanism),
  before anything is spent."""
  make, type_name, *own_check = FORGED[name]  # or the mechanism's own option check
  mech, acct = make(), Accountant.create(10.0, delta_budget=1e-3, secure=True)
  data = _data(mech)
  match = f"secure .*refuses {type_name}.*publishable are instances of exactly"
  match = own_check[0] if own_check else match
  runs = {
    "release": lambda: release(acct, mech, data),
    "jit": lambda: jax.jit(lambda a, x: release(a, mech, x))(acct, data),
    "parallel": lambda: jaxdp.release_parallel_unchecked(acct, [(mech, data)]),
    "plan": lambda: jaxdp.plan(lambda a, x: release(a, mech, x), acct, data),
  }
  if not isinstance(mech, PosetCountMechanism) and data.ndim == 1:
    rows, part = data[None], jnp.zeros((1,), jnp.int32)
    runs["partitioned"] = lambda: jaxdp.release_partitioned(acct, mech, rows, part, 1)
  for what, run in runs.items():
    # release_parallel_unchecked is refused by a secure accountant before its mechanisms
    expect = "refuses release_parallel_unchecked" if what == "parallel" else match
    with pytest.raises(ValueError, match=expect):
      run()
  assert int(acct.answered) == 0 and int(acct.spent_units) == 0
  assert not is_publishable(mech)


class LyingInt(int):
  def __index__(self):
    return 1


@pytest.mark.parametrize("query", ["sum-eps", "vote-eps", "sum-ball-k"])
def test_a_lying_field_of_an_exact_query_mechanism_is_refused_before_any_spend(query):
  """A field set after construction to a subclass of float or int (one value to the
  charge, another to the noise) is refused by the allowlist of plain field types."""
  if query == "sum-ball-k":
    mech = KNormMechanism(SumBall(3, 2), 1.0, exact=True)
    object.__setattr__(mech.ball, "k", LyingInt(2))
    field, data = "KNormMechanism.ball.k holds a LyingInt", INTS
  else:
    make = SumQueryMechanism if query == "sum-eps" else VoteQueryMechanism
    mech = make(3, 2, 1.0, exact=True) if query == "sum-eps" else make(3, 1.0, exact=True)
    object.__setattr__(mech, "eps", LyingFloat(1.0))
    name = type(mech).__name__
    field = f"{name}.eps holds a LyingFloat"
    data = jnp.array([[1, 0, -1], [0, 1, 0]] if query == "sum-eps" else [[0, 1, 2]])
  assert field in publishable_problem(mech)
  acct = Accountant.create(10.0, secure=True)
  with pytest.raises(ValueError, match=field):
    release(acct, mech, data)
  assert int(acct.answered) == 0 and int(acct.spent_units) == 0


def test_the_reported_attacks_are_refused():
  """The review's two releases: a float32 Gaussian answer and the statistic 1234
  itself; both were answered with eps charged."""
  acct = Accountant.create(10.0, delta_budget=1e-3, secure=True)
  with pytest.raises(
    ValueError, match="ExactGaussian .a subclass of GaussianMechanism. is not"
  ):
    release(acct, ExactGaussian(0.5, 1e-5), jnp.float32(3.0))
  acct = Accountant.create(10.0, secure=True)
  with pytest.raises(ValueError, match="NoNoise is a subclass of LaplaceMechanism"):
    release(acct, NoNoise(0.5, exact=True), jnp.int32(1234))
  assert int(acct.answered) == 0 and int(acct.spent_units) == 0


def _poset_counts(noise):
  return PosetCountMechanism(POSET, 0.5, noise=noise, exact=True)


PUBLISHABLE = [
  LaplaceMechanism(0.5, exact=True),
  LaplaceMechanism(0.5, 2.0, exact=True, grid=2.0**-4),
  KNormMechanism(PosetBall(POSET), 0.5, exact=True),
  *(KNormMechanism(LpBall(3, p), 0.5, exact=True) for p in (1, 2, math.inf)),
  KNormMechanism(CountBall(3, 2), 0.5, exact=True),
  *(_poset_counts(noise) for noise in EXACT_COUNT_NOISES),
  DiscreteGaussianMechanism(1.0, 1e-6),
]
NOT_PUBLISHABLE = [
  LaplaceMechanism(0.5),
  GaussianMechanism(0.5, 1e-5),
  ZCDPGaussianMechanism(1.0),
  KNormMechanism(PosetBall(POSET), 0.5),
  KNormMechanism(LpBall(3, 2), 0.5),
  KNormMechanism(CountBall(3, 2), 0.5),
  PosetCountMechanism(POSET, 0.5),
  "LaplaceMechanism",
]


def test_the_allowlist_holds_every_exact_configuration_and_nothing_else():
  """Every exact configuration is accepted (a pytree round trip and
  dataclasses.replace included) and charged by a secure accountant, every float one
  refused with a reason naming its type."""
  acct = Accountant.create(10.0, delta_budget=1e-3, secure=True)
  for mech in PUBLISHABLE:
    eps, _, valid = mechanism_cost(acct, mech, _data(mech).shape)
    assert eps > 0 and valid is True
    leaves, treedef = jax.tree_util.tree_flatten(mech)
    for m in (mech, jax.tree_util.tree_unflatten(treedef, leaves)):
      assert publishable_problem(m) is None, (mech, publishable_problem(m))
    assert is_publishable(dataclasses.replace(mech))
  poset = POSET
  assert (poset.parents, poset.cover_matrix.shape, poset.depth) == ((-1, 0, -1), (3, 3), 2)
  assert is_publishable(KNormMechanism(PosetBall(poset), 0.5, exact=True))
  for mech in NOT_PUBLISHABLE:
    problem = publishable_problem(mech)
    assert problem is not None and type(mech).__qualname__ in problem
