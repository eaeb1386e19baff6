"""Attacks on jit compilations shared through forged static arguments.

``jax.jit`` finds a compiled program by its static arguments' ``hash`` and ``==``
(and, for a pytree argument, its static fields'), at the top level only: an object
whose default dataclass ``==`` compares a field replaced (``object.__setattr__``) by
a subclass claiming the honest value, or that ignores an instance attribute
shadowing one of its methods, or a tuple of such values, shares the honest object's
compiled program. Whatever the forger's object computed while JAX traced it (less
noise, another budget check, another constraint graph) then runs for every honest
caller. The objects that key process-wide compilations and caches compare their
fields' types (into tuples too) and refuse to equal an instance with attributes of
its own (:class:`~jaxdp._identity.FieldIdentity`).
"""

import collections
import contextlib
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import montecarlo
from jaxdp._identity import FieldIdentity
from jaxdp.consistency import ConstraintGraph, constraint_graph, solver
from jaxdp.consistency.chain import chain_order
from jaxdp.consistency.series_parallel import sp_plan
from jaxdp.experiments import studies
from tests.helpers.forged import claiming


def test_field_identity_types_tuples_and_refuses_instance_attributes():
  honest = jaxdp.SumBall(6, 2)
  shadowed = jaxdp.SumBall(6, 2)
  object.__setattr__(shadowed, "knorm_points", honest.knorm_points)
  assert shadowed != honest and honest == jaxdp.SumBall(6, 2)
  g = constraint_graph(jaxdp.Poset.from_edges(3, [(0, 1)]))
  forged = ConstraintGraph(g.dim, (claiming(2, g.lo[0]),) + g.lo[1:], g.hi)
  assert isinstance(g, FieldIdentity) and forged != g
  assert {g: 1}.get(forged) is None  # a cache keyed by g does not answer the forger
  assert g == ConstraintGraph(g.dim, g.lo, g.hi)


def test_field_identity_types_the_elements_of_a_named_tuple():
  """A named tuple field (a tuple subclass) is compared element by element with
  their types too, as a plain tuple is."""
  pair = collections.namedtuple("Pair", "a b")

  @dataclasses.dataclass(frozen=True, eq=False)
  class Holder(FieldIdentity):
    pair: tuple

  forged = Holder(pair(claiming(1, 5), 2))
  assert forged != Holder(pair(5, 2)) and {Holder(pair(5, 2)): 1}.get(forged) is None
  assert Holder(pair(5, 2)) == Holder(pair(5, 2)) != Holder((5, 2))


def test_a_ball_with_a_shadowed_method_leaves_honest_knorm_noise_alone():
  """A SumBall(6, 2) whose ``knorm_points`` (an instance attribute set with
  ``object.__setattr__``) returns zeros compared equal to an honest one, so its
  compilation of the sampler (the ball is a static argument) drew zero K-norm
  noise for every later honest caller."""
  forged = jaxdp.SumBall(6, 2)
  object.__setattr__(forged, "knorm_points", lambda k, m, dt: jnp.zeros((m, 6), dt))
  jax.block_until_ready(jaxdp.random.knorm(jax.random.key(0), forged, 1.0, (2,)))
  honest = jaxdp.random.knorm(jax.random.key(1), jaxdp.SumBall(6, 2), 1.0, (2,))
  assert np.all(np.asarray(honest) != 0)


def _release(acct, eps=0.6):
  return jaxdp.release(acct, jaxdp.LaplaceMechanism(eps=eps), jnp.float32(1.0))


def test_a_rule_with_a_shadowed_allows_keeps_an_honest_budget():
  """The rule is a static argument of the compiled charge: a forger's bound
  BasicComposition whose ``allows`` always says yes compared equal to every honest
  accountant's rule of the same budget, secure ones included, which then answered
  past its budget."""
  forged = jaxdp.Accountant.create(1.0, key=jax.random.key(3))
  object.__setattr__(forged.rule, "allows", lambda *a: jnp.bool_(True))
  _release(forged)
  honest = jaxdp.Accountant.create(1.0, key=jax.random.key(4))
  honest, _ = _release(honest)
  with pytest.raises(jaxdp.ReleaseRefusedError):
    _release(honest)
  key = jaxdp.random.secure_key(bytes(32))  # a secure accountant: the same charge
  secure = jaxdp.Accountant.create(1.0, secure=True, key=key, allow_test_key=True)
  exact = jaxdp.LaplaceMechanism(eps=0.6, exact=True)
  secure, _ = jaxdp.release(secure, exact, jnp.int32(1))
  with pytest.raises(jaxdp.ReleaseRefusedError):
    jaxdp.release(secure, exact, jnp.int32(1))


def test_a_forged_unit_exponent_does_not_undercharge_an_honest_accountant():
  """A forger's accountant of eps_budget 1024 (unit 2^-20) whose unit exponent
  claims to be -30 (the unit of a budget of 1) and whose rule's recorded budget
  claims to be 1.0 had the honest accountant's capacity, exponents and rule: the
  honest accountant's charge was compiled with the unit 2^-20, 1024 times too
  small a charge (5 releases of eps 0.6 under a budget of 1)."""
  forged = jaxdp.Accountant.create(1024.0, key=jax.random.key(5))
  assert forged.unit_exponent == -20
  rule = forged.rule
  object.__setattr__(rule, "bound", (claiming(1024.0, 1.0),) + rule.bound[1:])
  object.__setattr__(forged, "unit_exponent", claiming(-20, -30))
  _release(forged)
  honest = jaxdp.Accountant.create(1.0, key=jax.random.key(6))
  honest, _ = _release(honest)
  assert abs(float(honest.spent_eps) - 0.6) < 1e-6
  with pytest.raises(jaxdp.ReleaseRefusedError):
    _release(honest)


def test_a_forged_training_plan_leaves_honest_dp_sgd_noise_alone():
  """The training plan is a static field of the state the compiled DP-SGD step
  takes: a forger's plan whose noise multiplier claims to be 1.1 but is 1e-9 made
  every honest run of the same plan add noise of standard deviation 1e-11."""
  kw = dict(
    sampling_rate=0.01,
    dataset_size=10_000,
    eps_budget=1.0,
    delta=1e-5,
    accounting=jaxdp.RdpAccounting(),
  )
  forger = jaxdp.training.dp_aggregate(1.0, 1.1, key=jax.random.key(7), **kw)
  state = forger.init(None)
  object.__setattr__(state.plan, "noise_multiplier", claiming(1e-9, 1.1))
  grads = {"w": jnp.zeros((4, 3))}
  jax.block_until_ready(forger.update(grads, state)[0])
  honest = jaxdp.training.dp_aggregate(1.0, 1.1, key=jax.random.key(8), **kw)
  out, _ = honest.update(grads, honest.init(None))
  assert np.max(np.abs(np.asarray(out["w"]))) > 1e-4  # sd 1.1 / 100


def test_a_forged_constraint_graph_does_not_certify_an_honest_wrong_projection():
  """A ConstraintGraph whose first edge's upper node claims to be 3 but is 0 (the
  poset without q0 <= q2) compared equal to the honest graph: the batched solver
  compiled for it (the graph is a static argument), and the host plans cached for
  it, returned inconsistent counts, certified, to every honest caller."""
  poset = jaxdp.Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)])
  g = constraint_graph(poset)
  y = np.array([[10.0, 9.0, 1.0, 7.0, 2.0]], np.float32)  # c_0 = 9 > c_2 = 7
  forged = ConstraintGraph(g.dim, g.lo, (claiming(0, g.hi[0]),) + g.hi[1:])
  for use in (sp_plan, chain_order, lambda g: solver.isotonic_batched(y, g, 1e-6)):
    with contextlib.suppress(Exception):  # what it computes is the forger's concern
      jax.block_until_ready(use(forged))
  want = jaxdp.consistent(y, poset, method="exact")
  z, cert = jax.jit(lambda y: jaxdp.consistent(y, poset, certificate=True))(y)
  np.testing.assert_allclose(np.asarray(z), np.asarray(want), atol=1e-4)
  assert float(z[0, 1]) == pytest.approx(8.0, abs=1e-4)


def test_a_forged_study_statistic_leaves_honest_studies_alone():
  """montecarlo caches its compiled chunk function by the draw's and statistic's
  values: the studies' statistic ``_SquaredNorm(1, d / 3)`` with a scale that
  claims to be d / 3 but is 10^9 made every honest ``norm_ratio`` of that poset
  about 10^-9 (the exact ratio is of order 1)."""
  poset = jaxdp.Poset.from_edges(3, [(0, 1)])
  forged = studies._SquaredNorm(1, claiming(1e9, poset.d / 3.0))
  draw = studies._PosetBallDraw(poset)
  montecarlo.estimate(jax.random.key(9), draw, forged, 256, chunk_size=256)
  ratio, _ = studies.norm_ratio(jax.random.key(10), poset, 256)
  assert 0.1 < ratio < 10


def test_a_forged_ledger_accountant_cannot_spend_past_the_datasets_budget(tmp_path):
  """The ledger kept each accountant's budget record in a process-wide dict keyed by
  its rule, budgets and exponents compared by value: a ledger accountant of the
  dataset's budget 1 whose eps_budget, unit exponent and rule's recorded budget
  claim 1 but are those of a budget of 1024 found the honest record (filed by an
  honest charge), passed the ledger's budget check and charged 6 x 0.5 eps, in
  units 1024 times too small, against a dataset budget of 1."""
  data = np.array([[1, 0], [0, 1], [1, 1]])
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.charge("d", ledger.accountant("d", data, 1.0), jaxdp.LaplaceMechanism(0.1))
  forged = ledger.accountant("d", data, 1.0)
  rule = forged.rule
  object.__setattr__(rule, "bound", (claiming(1024.0, 1.0),) + rule.bound[1:])
  object.__setattr__(forged, "eps_budget", claiming(1024.0, 1.0))
  object.__setattr__(forged, "unit_exponent", claiming(-20, -30))
  charged = 0
  for _ in range(6):
    try:
      forged = ledger.charge("d", forged, jaxdp.LaplaceMechanism(0.5))
    except (ValueError, jaxdp.BudgetExceededError):  # BudgetMismatchError included
      break
    charged += 1
  assert 0.1 + 0.5 * charged <= 1.0
  ledger.close()


def test_a_graph_changed_in_place_leaves_the_kept_graph_alone():
  """``constraint_graph`` returned the graph kept for the relation: a caller who
  replaced its upper node of the first edge (``object.__setattr__``) changed the
  graph every later ``jaxdp.consistent`` of an equal poset solved on."""
  poset = jaxdp.Poset.from_edges(4, [(0, 2), (1, 3), (1, 2)])
  mine = constraint_graph(poset)
  dim, lo, hi = mine.dim, mine.lo, mine.hi
  object.__setattr__(mine, "hi", (0,) + hi[1:])
  kept = constraint_graph(poset)
  assert (kept.dim, kept.lo, kept.hi) == (dim, lo, hi)
