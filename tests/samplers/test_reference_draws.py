"""The same keys give the same draws, bit for bit, as the stored reference.

Every entry of the reference file written with this process's XLA emitters
(``tests/helpers/data/reference_draws.npz``, XLA's default emitters, or
``reference_draws_elemental.npz``, the older emitters that ``tests/conftest.py``
selects where XLA has them; both written by ``tests/helpers/reference_draws.py``) is
recomputed in the test process and compared byte for byte (dtype, shape and bits),
one group of entries per test. The two files hold the same entries; integer entries
are equal in both and float entries agree to float32 rounding (the emitters can
change a float's last bits, not a draw).
"""

import os

import jax
import numpy as np
import pytest

from tests.conftest import FAST_EMITTERS
from tests.helpers import reference_draws


def _load(path):
  with np.load(path) as f:
    return {name: f[name] for name in f.files}


@pytest.fixture(scope="module")
def stored():
  return _load(reference_draws.path_for(os.environ.get("XLA_FLAGS", "")))


def test_the_groups_cover_every_stored_entry_once(stored):
  names = [n for entries in reference_draws.ENTRIES.values() for n in entries]
  assert sorted(names) == sorted(stored) and len(set(names)) == len(names)
  assert list(reference_draws.ENTRIES) == list(reference_draws.GROUPS)
  assert reference_draws.ELEMENTAL == FAST_EMITTERS  # the file the suite's flags pick


def test_the_two_emitters_files_hold_the_same_draws():
  default = _load(reference_draws.PATH)
  elemental = _load(reference_draws.ELEMENTAL_PATH)
  assert sorted(default) == sorted(elemental)
  for name, want in default.items():
    got = elemental[name]
    assert got.dtype == want.dtype and got.shape == want.shape, name
    if np.issubdtype(want.dtype, np.floating):
      np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=name)
    else:
      assert got.tobytes() == want.tobytes(), name


@pytest.mark.parametrize("group", list(reference_draws.GROUPS))
def test_same_draws_bit_for_bit(group, stored):
  with jax.enable_x64(False):
    fresh = reference_draws.group(group)
  assert sorted(fresh) == sorted(reference_draws.ENTRIES[group])
  for name, got in fresh.items():
    want = stored[name]
    assert got.dtype == want.dtype and got.shape == want.shape, name
    assert got.tobytes() == want.tobytes(), name
