"""Shared test helpers: the small posets every exactness test runs on, statistical
oracles (:mod:`tests.helpers.exactness`) and the reference draws
(:mod:`tests.helpers.reference_draws`)."""

import jax

from jaxdp import Poset

__all__ = ["small_posets"]


def small_posets():
  """The small posets every exactness test runs on (name -> Poset)."""
  return {
    # a < c with b free, labelled c=0, a=1, b=2 so the insertion sampler handles
    # b before a (inserting b, a, c): the case where it is provably not uniform.
    "a<c,b": Poset.from_edges(3, [(1, 0)]),
    "nhis1": Poset.nhis(1),
    "diamond": Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)]),
    "chain4": Poset.from_edges(4, [(0, 1), (1, 2), (2, 3)]),
    "antichain3": Poset.from_edges(3, []),
    "random6": Poset.random(jax.random.key(6), 6),
    "N-shape": Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)]),
    # a diamond with a fifth element below its top: not a forest, not a lattice
    "diamond5": Poset.from_edges(5, [(0, 1), (0, 2), (1, 3), (2, 3), (4, 3)]),
  }
