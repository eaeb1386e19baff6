"""Shared fixtures.

The test suite is dominated by XLA compilation (hundreds of small kernels, each run
once), so it compiles with LLVM's optimisation level 0 unless XLA_FLAGS already sets
one: about a third less wall time on 2 cores. Results can differ in the last bits
from the default level (LLVM code generation), so a test that compares runs bit for
bit must give its subprocesses the same flags; benchmarks run at the default level.
"""

import os

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "")
                             + " --xla_backend_optimization_level=0").strip()

import jax
import pytest

from jaxdp import Poset


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
  }


@pytest.fixture(scope="session")
def posets():
  return small_posets()
