"""Attacks on the host tables cached per poset, and on a poset changed after creation.

The samplers' tables are cached per poset and shared by every later release in the
process. A poset whose cached properties (``parents``, ``cover_matrix``) or whose
relation were forged with ``object.__setattr__``, used once in a non-secure release,
filled those caches with another poset's tables under the key of every *equal* poset,
so a later secure release by another caller drew from the wrong law. A relation
changed in place after a secure accountant had checked the poset kept passing the
check, with cached properties of the old relation. Each test checks the tables an
honest poset gets against an independent count (brute-force enumeration), or that
the changed poset is refused.
"""

import itertools
import math

import numpy as np
import pytest

from jaxdp import KNormMechanism, Poset, PosetBall, PosetCountMechanism
from jaxdp.consistency.graph import constraint_graph
from jaxdp.exact.samplers import poset_path
from jaxdp.mechanisms import publishable_problem
from jaxdp.samplers import dispatch
from jaxdp.samplers.exact_tables import exact_tables

# Posets used by no other test, so that no honest use fills the caches first.
TREE = (-1, 0, 0, 1, 1, 2)  # parents of a 6-element tree
CHAIN = (-1, 0, 1, 2, 3, 4)  # a 6-element chain: the forged parents
FENCE = [(0, 1), (2, 1), (2, 3), (4, 3), (4, 5)]  # a 6-element zigzag, not a forest


def _num_objects(order: np.ndarray) -> int:
  """N(P) = sum over subsets S of e(S) e(P \\ S), by brute-force enumeration."""
  d = len(order)

  def e(elems):
    return sum(
      all(not order[b, a] for i, a in enumerate(p) for b in p[i + 1 :])
      for p in itertools.permutations(elems)
    )

  return sum(
    e(s) * e(tuple(x for x in range(d) if x not in s))
    for k in range(d + 1)
    for s in itertools.combinations(range(d), k)
  )


def _cover(order: np.ndarray) -> set:
  """The cover edges (i, j), p_j covering p_i, from the order by definition."""
  d = len(order)
  return {
    (i, j)
    for i, j in itertools.product(range(d), repeat=2)
    if i != j
    and order[i, j]
    and not any(order[i, k] and order[k, j] for k in range(d) if k not in (i, j))
  }


def test_forged_parents_do_not_poison_the_tables_of_an_equal_poset():
  """A forest whose ``parents`` were forged into a chain's, used first: the forest
  tables were the chain's, cached for every equal forest."""
  forged = Poset.from_parents(TREE)
  object.__setattr__(forged, "parents", CHAIN)
  try:  # a non-secure caller's release prepares its tables first
    dispatch.tables_and_layout(forged, "auto")
  except Exception:
    pass
  honest = Poset.from_parents(TREE)
  assert dispatch.resolve_method(honest, "auto") == "forest"
  assert dispatch.num_objects(honest) == pytest.approx(
    _num_objects(honest.order), rel=1e-12
  )


def test_forged_cover_matrix_does_not_poison_the_constraint_graph():
  """A forged ``cover_matrix`` (the chain's) used first: the constraint graph cached
  for every equal poset, which the consistency projection and the bootstrap read."""
  forged = Poset.from_edges(6, FENCE)
  chain = Poset.from_parents(CHAIN)
  object.__setattr__(forged, "cover_matrix", chain.cover_matrix)
  try:
    constraint_graph(forged)
  except Exception:
    pass
  honest = Poset.from_edges(6, FENCE)
  graph = constraint_graph(honest)
  edges = {(lo - 1, hi - 1) for lo, hi in zip(graph.lo, graph.hi) if hi > 0}
  assert {e for e in edges if e[1] < 6} == _cover(honest.order)


class _Liar(tuple):
  """A relation that says it equals (and hashes as) another poset's."""

  target: tuple = ()

  def __eq__(self, other):
    return True

  def __ne__(self, other):
    return False

  def __hash__(self):
    return hash(type(self).target)


def test_a_relation_that_lies_about_equality_does_not_poison_an_equal_poset():
  """A poset built on a tuple subclass whose ``==`` says True and whose hash is the
  honest relation's: its order matrix was cached as the honest poset's, so a later
  secure release of the honest poset checked rows and drew objects of the chain."""
  honest_edges = [(0, 1), (2, 1), (2, 3)]
  chain = Poset.from_parents((-1, 0, 1, 2))
  _Liar.target = Poset.from_edges(4, honest_edges).relation
  try:
    forged = Poset(_Liar(chain.relation))
    forged.order  # noqa: B018 - a non-secure caller reads it first
    poset_path(forged)
  except Exception:
    pass
  honest = Poset.from_edges(4, honest_edges)
  reference = np.eye(4, dtype=bool)
  for i, j in honest_edges:
    reference[i, j] = True
  np.testing.assert_array_equal(honest.order, reference)
  assert publishable_problem(PosetCountMechanism(honest, 1.0, exact=True)) is None
  assert exact_tables(honest)[1] == _num_objects(reference)


def test_the_relation_is_stored_canonically():
  """Python bools in plain tuples, whatever the constructor was given: equality and
  hashing are then those of the relation."""
  p = Poset(_Liar(((1, 0), (0, 1))))
  assert type(p.relation) is tuple and all(type(r) is tuple for r in p.relation)
  assert all(type(v) is bool for r in p.relation for v in r)
  assert p != Poset.from_parents((-1, 0))


def test_a_relation_changed_in_place_is_refused_by_a_secure_accountant():
  """A poset checked once, then its relation replaced by another poset's: the check
  remembered the cached properties of the old relation and passed again."""
  p = Poset.from_edges(5, [(0, 1), (1, 2), (3, 4)])
  other = Poset.from_edges(5, [(0, 4), (1, 4), (2, 4), (3, 4)])
  mechs = (
    PosetCountMechanism(p, 1.0, exact=True),
    KNormMechanism(PosetBall(p), 1.0, exact=True),
  )
  p.parents, p.cover_matrix  # noqa: B018 - cached on the object
  for mech in mechs:
    assert publishable_problem(mech) is None
  object.__setattr__(p, "relation", other.relation)
  for mech in mechs:
    problem = publishable_problem(mech)
    assert problem is not None and "poset" in problem
  try:  # the changed poset in a non-secure release
    dispatch.tables_and_layout(p, "auto")
  except Exception:
    pass
  again = Poset.from_edges(5, [(0, 4), (1, 4), (2, 4), (3, 4)])
  assert dispatch.num_objects(again) == pytest.approx(_num_objects(again.order), rel=1e-12)
  assert math.isclose(
    dispatch.num_objects(Poset.from_edges(5, [(0, 1), (1, 2), (3, 4)])),
    _num_objects(Poset.from_edges(5, [(0, 1), (1, 2), (3, 4)]).order),
    rel_tol=1e-12,
  )


def test_a_relation_replaced_by_a_liar_is_refused():
  """``object.__setattr__`` of a relation that is not a tuple of tuples of bools
  (here one lying about equality): refused by a secure accountant."""
  p = Poset.from_parents((-1, 0, 0))
  mech = PosetCountMechanism(p, 1.0, exact=True)
  assert publishable_problem(mech) is None
  _Liar.target = p.relation
  object.__setattr__(p, "relation", _Liar(Poset.from_parents((-1, 0, 1)).relation))
  problem = publishable_problem(mech)
  assert problem is not None and "relation" in problem
