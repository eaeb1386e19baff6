"""Attacks on the poset constructors and the poset count mechanisms through the
public API: each failed on the code it was written against; a strict xfail stands
for a weakness left open (its reason says the fix)."""

import numpy as np
import pytest

from jaxdp import Poset
from jaxdp.posets import canonical


@pytest.mark.parametrize("edge", [(0.7, 1), (1.9, 0), ("1", 0), (np.float64(0.5), 1)])
def test_from_edges_refuses_non_integer_indices(edge):
  # int() truncated 0.7 to 0 and parsed "1": a mistyped skip rule became another one
  with pytest.raises(ValueError, match=r"edges\[0\]"):
    Poset.from_edges(2, [edge])


@pytest.mark.parametrize("parents", [[1.5, -1], [-1, -1.5], ["1", -1]])
def test_from_parents_refuses_non_integer_parents(parents):
  # int(-1.5) is -1 ("no parent"), int(1.5) is 1: a wrong forest, silently
  with pytest.raises(ValueError, match=r"parents\["):
    Poset.from_parents(parents)


def test_labels_refuse_a_single_string():
  # tuple("xyz") is ("x", "y", "z"): one string was split into one label per character
  with pytest.raises(ValueError, match="labels"):
    Poset.from_edges(3, [(0, 1)], labels="xyz")


def test_from_order_labels_refuse_a_single_string():
  with pytest.raises(ValueError, match="labels"):
    Poset.from_order([[1, 0], [0, 1]], labels="ab")


@pytest.mark.parametrize("reqs", [{"q1", "q2", "q3"}, frozenset({"q1"}), {"q1": 1}])
def test_from_prerequisites_refuses_unordered_prerequisites(reqs):
  # a set's order follows PYTHONHASHSEED: the questions (the data's columns) came out
  # in another order in each process, e.g. ('q4', 'q3', 'q1', 'q2') or ('q4', 'q2', ...)
  with pytest.raises(ValueError, match=r"requires\['q4'\]"):
    Poset.from_prerequisites({"q4": reqs})


@pytest.mark.parametrize(
  "relation, broken",
  [
    (((True, True, False), (True, True, False), (False, False, True)), "antisymmetric"),
    (((True, True, False), (False, True, True), (False, False, True)), "transitive"),
    (((False, False), (False, True)), "reflexive"),
  ],
)
def test_from_key_refuses_bytes_that_are_not_a_partial_order(relation, broken):
  # from_key is public and skipped the order axioms: a cycle p0 <= p1 <= p0 became a
  # Poset that every sampler method accepted and an exact release noised
  with pytest.raises(ValueError, match=broken):
    Poset.from_key(canonical.relation_key(relation))


def test_from_key_of_a_poset_is_that_poset():
  p = Poset.nhis(2)
  assert Poset.from_key(p.key) == p


@pytest.mark.parametrize("labels", ['"xyz"', '{"x": 0, "y": 1, "z": 2}'])
def test_json_labels_must_be_a_list(tmp_path, labels):
  # "labels": "xyz" was read as ("x", "y", "z"), and an object as its keys
  path = tmp_path / "p.json"
  path.write_text('{"d": 3, "edges": [[0, 1]], "labels": ' + labels + "}")
  with pytest.raises(ValueError, match="labels"):
    Poset.load(path)
