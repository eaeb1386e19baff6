"""Attacks on the poset constructors and the poset count mechanisms through the
public API: each failed on the code it was written against; a strict xfail stands
for a weakness left open (its reason says the fix)."""

import numpy as np
import pytest

from jaxdp import Poset


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
