"""Shared fixtures.

The test suite is dominated by XLA compilation (hundreds of small kernels, each run
once), so unless XLA_FLAGS already sets an optimisation level it compiles with
LLVM's optimisation level 0, without LLVM's expensive passes (about a third less
wall time on 2 cores) and, where the installed XLA still has them, with XLA:CPU's
older elemental emitters instead of its fusion emitters (``FAST_EMITTERS``: backend
compilation about a third faster, the suite about 40% shorter; a short subprocess
checks first that XLA accepts the flag, which it would otherwise reject fatally),
and with each program's LLVM module generated in one piece (``SERIAL_CODEGEN``: XLA
splits it into up to 32 parts for parallel code generation by default, which two
workers on two cores only pay for; backend compilation about a sixth faster; checked
the same way). The program XLA compiles is the same; the code generated for it
differs, so floats can differ in the last bits (transcendental functions, mostly)
from the default configuration. A test that compares runs bit for bit must give its
subprocesses the same flags; the reference draws
(``tests/samplers/test_reference_draws.py``) are stored once per emitter and
compared with the file of the flags in use; benchmarks run with XLA's defaults.

The run also shares one persistent compilation cache (a temporary directory, removed
at the end, unless JAX_COMPILATION_CACHE_DIR names one) between the pytest-xdist
workers and the subprocesses the tests start (the command line, examples), which
compile many of the same kernels. The cache key covers the program, the XLA flags and
the backend, so a hit is the executable that compiling would have produced.
"""

import atexit
import os
import shutil
import subprocess
import sys
import tempfile

FAST_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
SERIAL_CODEGEN = "--xla_cpu_parallel_codegen_split_count=1"


def _accepted(flag):
  """Whether XLA starts with ``flag`` in XLA_FLAGS (it aborts on an unknown flag)."""
  env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flag}".strip())
  probe = "import jax; jax.jit(lambda x: x + 1)(1.0).block_until_ready()"
  try:
    run = subprocess.run(
      [sys.executable, "-c", probe], env=env, capture_output=True, timeout=300
    )
  except (OSError, subprocess.SubprocessError):
    return False
  return run.returncode == 0


if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  # set once by the first process (the xdist controller); workers and subprocesses
  # inherit XLA_FLAGS
  fast = " --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
  for flag in (FAST_EMITTERS, SERIAL_CODEGEN):
    if _accepted(flag):
      fast += " " + flag
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + fast).strip()

if not os.environ.get("JAX_COMPILATION_CACHE_DIR"):
  # set once by the first process (the xdist controller); workers and subprocesses
  # inherit it, and the process that made the directory removes it at exit
  _cache = tempfile.mkdtemp(prefix="jaxdp-test-jit-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _cache
  atexit.register(shutil.rmtree, _cache, ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402 (after XLA_FLAGS)
import pytest  # noqa: E402

from tests.helpers import small_posets  # noqa: E402

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


# The slowest files of a run, slowest first (their measured wall time on 2 cores, 10
# to 85 s each). pytest-xdist hands out whole files in collection order (`--dist
# loadfile`), so these go first and the many short files fill in at the end: a run
# does not end with one worker busy on a long file while the other waits.
SLOWEST_FILES = (
  "tests/exact/test_exact_count_ball.py",
  "tests/docs/test_docs.py",
  "tests/exact/test_exact_tree.py",
  "tests/exact/test_exact_sum_ball.py",
  "tests/experiments/test_studies.py",
  "tests/samplers/test_samplers.py",
  "tests/samplers/test_series_parallel.py",
  "tests/exact/test_exact.py",
  "tests/cli/test_readme.py",
  "tests/samplers/test_query_balls_sum_count.py",
  "tests/consistency/test_pava.py",
  "tests/accounting/test_tight_accounting.py",
  "tests/exact/test_exact_forest.py",
  "tests/cli/test_release.py",
  "tests/cli/test_release_query.py",
  "tests/samplers/test_reference_draws.py",
  "tests/attacks/test_parameters.py",
  "tests/exact/test_exact_wide.py",
  "tests/samplers/test_vote_ball.py",
)


def pytest_collection_modifyitems(config, items):
  """Runs :data:`SLOWEST_FILES` first, in that order; every other file after them,
  in collection order (a stable sort: the tests of a file keep their order)."""
  del config
  rank = {path: i for i, path in enumerate(SLOWEST_FILES)}
  items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], len(rank)))
