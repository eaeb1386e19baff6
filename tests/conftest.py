"""Shared fixtures.

The test suite is dominated by XLA compilation (hundreds of small kernels, each run
once), so it compiles with LLVM's optimisation level 0 unless XLA_FLAGS already sets
one: about a third less wall time on 2 cores. Results can differ in the last bits
from the default level (LLVM code generation), so a test that compares runs bit for
bit must give its subprocesses the same flags; benchmarks run at the default level.
"""

import os

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
  ).strip()

import pytest

from tests.helpers import small_posets


@pytest.fixture(scope="session")
def posets():
  return small_posets()
