"""The same keys give the same draws, bit for bit, as the stored reference.

Every entry of ``tests/helpers/data/reference_draws.npz`` (written by
``tests/helpers/reference_draws.py``) is recomputed here and compared byte for byte
(dtype, shape and bits), one group of entries per test (the groups compile
independently, so workers share them out).
"""

import numpy as np
import pytest

from tests.helpers import reference_draws


@pytest.fixture(scope="module")
def stored():
  with np.load(reference_draws.PATH) as f:
    return {name: f[name] for name in f.files}


def test_the_groups_cover_every_stored_entry_once(stored):
  names = [n for entries in reference_draws.ENTRIES.values() for n in entries]
  assert sorted(names) == sorted(stored) and len(set(names)) == len(names)
  assert list(reference_draws.ENTRIES) == list(reference_draws.GROUPS)


@pytest.mark.slow
@pytest.mark.parametrize("group", list(reference_draws.GROUPS))
def test_same_draws_bit_for_bit(group, stored):
  fresh = reference_draws.group(group)
  assert sorted(fresh) == sorted(reference_draws.ENTRIES[group])
  for name, got in fresh.items():
    want = stored[name]
    assert got.dtype == want.dtype and got.shape == want.shape, name
    assert got.tobytes() == want.tobytes(), name
