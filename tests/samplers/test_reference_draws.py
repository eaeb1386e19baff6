"""The same keys give the same draws, bit for bit, as the stored reference.

Every entry of ``tests/helpers/data/reference_draws.npz`` (written by
``tests/helpers/reference_draws.py``) is recomputed and compared byte for byte (dtype,
shape and bits), one group of entries per test. The draws are recomputed in one
subprocess with the suite's XLA_FLAGS less the emitter flag that ``tests/conftest.py``
adds (``FAST_EMITTERS``): the reference was written with XLA's default emitters,
whose floats can differ from the older emitters' in the last bits.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import FAST_EMITTERS
from tests.helpers import reference_draws

ROOT = Path(__file__).resolve().parents[2]


def _load(path):
  with np.load(path) as f:
    return {name: f[name] for name in f.files}


@pytest.fixture(scope="module")
def stored():
  return _load(reference_draws.PATH)


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
  out = tmp_path_factory.mktemp("reference") / "draws.npz"
  flags = os.environ.get("XLA_FLAGS", "").split()
  env = dict(os.environ, XLA_FLAGS=" ".join(f for f in flags if f != FAST_EMITTERS))
  run = subprocess.run(
    [sys.executable, "-m", "tests.helpers.reference_draws", "--out", str(out)],
    cwd=ROOT,
    env=env,
    capture_output=True,
    text=True,
  )
  assert run.returncode == 0, run.stderr[-4000:]
  return _load(out)


def test_the_groups_cover_every_stored_entry_once(stored):
  names = [n for entries in reference_draws.ENTRIES.values() for n in entries]
  assert sorted(names) == sorted(stored) and len(set(names)) == len(names)
  assert list(reference_draws.ENTRIES) == list(reference_draws.GROUPS)


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize("group", list(reference_draws.GROUPS))
def test_same_draws_bit_for_bit(group, stored, fresh):
  assert sorted(fresh) == sorted(stored)
  for name in reference_draws.ENTRIES[group]:
    got, want = fresh[name], stored[name]
    assert got.dtype == want.dtype and got.shape == want.shape, name
    assert got.tobytes() == want.tobytes(), name
