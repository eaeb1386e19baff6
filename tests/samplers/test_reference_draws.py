"""The same keys give the same draws, bit for bit, as the stored reference.

Every entry of ``tests/helpers/data/reference_draws.npz`` (written by
``tests/helpers/reference_draws.py``) is recomputed here and compared byte for byte
(dtype, shape and bits).
"""

import numpy as np
import pytest

from tests.helpers import reference_draws


@pytest.mark.slow
def test_same_draws_bit_for_bit():
  stored = np.load(reference_draws.PATH)
  fresh = reference_draws.draws()
  assert sorted(fresh) == sorted(stored.files)
  for name in stored.files:
    want, got = stored[name], fresh[name]
    assert got.dtype == want.dtype and got.shape == want.shape, name
    assert got.tobytes() == want.tobytes(), name
