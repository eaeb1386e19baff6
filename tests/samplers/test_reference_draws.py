"""The same keys give the same draws as the stored reference.

Every entry of the reference file written with this process's XLA emitters
(``tests/helpers/data/reference_draws.npz``, XLA's default emitters, or
``reference_draws_elemental.npz``, the older emitters that ``tests/conftest.py``
selects where XLA has them; both written by ``tests/helpers/reference_draws.py``) is
recomputed in the test process, one group of entries per test, and compared:

- dtype and shape always, and integer and boolean entries byte for byte;
- float entries element by element to ``FLOAT_RTOL`` of the entry's largest
  magnitude. XLA:CPU compiles for the host's processor, and the code it generates for
  transcendental functions and reductions differs between processors (an Intel
  Xeon with AVX-512 and an AMD EPYC give float32 draws that differ by up to about
  2e-5 of their size in a few elements), so bits cannot be compared across machines.
  A change of a draw (other uniforms, another row accepted, another order) moves an
  element by the order of the draw itself, 10^4 times this tolerance.

The two files hold the same entries; integer entries are equal in both and float
entries agree to float32 rounding (the emitters can change a float's last bits, not
a draw).
"""

import os

import jax
import numpy as np
import pytest

from tests.conftest import FAST_EMITTERS
from tests.helpers import reference_draws

# Float entries agree to this fraction of the entry's largest magnitude.
FLOAT_RTOL = 1e-4


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


def assert_same_draws(got, want, name):
  """``got`` is ``want``: integers byte for byte, floats to ``FLOAT_RTOL``."""
  assert got.dtype == want.dtype and got.shape == want.shape, name
  if not np.issubdtype(want.dtype, np.floating):
    assert got.tobytes() == want.tobytes(), name
    return
  assert np.array_equal(np.isfinite(got), np.isfinite(want)), name
  scale = float(np.max(np.abs(want[np.isfinite(want)]), initial=0.0))
  np.testing.assert_allclose(got, want, rtol=0, atol=FLOAT_RTOL * scale, err_msg=name)


@pytest.mark.parametrize("group", list(reference_draws.GROUPS))
def test_same_draws(group, stored):
  with jax.enable_x64(False):
    fresh = reference_draws.group(group)
  assert sorted(fresh) == sorted(reference_draws.ENTRIES[group])
  for name, got in fresh.items():
    assert_same_draws(got, stored[name], name)


@pytest.mark.parametrize(
  "change",
  [
    lambda a: a[::-1].copy(),  # another order
    lambda a: np.where(np.arange(a.size).reshape(a.shape) == 3, -a, a),  # one sign
    lambda a: a * (1 + 3 * FLOAT_RTOL),  # a scale error
  ],
)
def test_a_changed_draw_fails_the_comparison(change, stored):
  want = stored["poset_ball/nhis3"]
  with pytest.raises(AssertionError):
    assert_same_draws(change(want).astype(want.dtype), want, "poset_ball/nhis3")
