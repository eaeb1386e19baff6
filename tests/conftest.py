"""Shared fixtures.

The test suite is dominated by XLA compilation (hundreds of small kernels, each run
once), so it compiles with LLVM's optimisation level 0 and without LLVM's expensive
passes unless XLA_FLAGS already sets a level: about a third less wall time on 2
cores. Results can differ in the last bits from the default level (LLVM code
generation), so a test that compares runs bit for bit must give its subprocesses the
same flags; benchmarks run at the default level.

The run also shares one persistent compilation cache (a temporary directory, removed
at the end, unless JAX_COMPILATION_CACHE_DIR names one) between the pytest-xdist
workers and the subprocesses the tests start (the command line, examples), which
compile many of the same kernels. The cache key covers the program, the XLA flags and
the backend, so a hit is the executable that compiling would have produced.
"""

import atexit
import os
import shutil
import tempfile

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "")
    + " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
  ).strip()

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  # set once by the first process (the xdist controller); workers and subprocesses
  # inherit it, and the process that made the directory removes it at exit
  _cache = tempfile.mkdtemp(prefix="jaxdp-test-jit-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax
import pytest

from tests.helpers import small_posets

jax.config.update("jax_compilation_cache_dir", os.environ["JAX_COMPILATION_CACHE_DIR"])
jax.config.update(
  "jax_persistent_cache_min_compile_time_secs",
  float(os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]),
)
jax.config.update(
  "jax_persistent_cache_min_entry_size_bytes",
  int(os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"]),
)


@pytest.fixture(scope="session")
def posets():
  return small_posets()
