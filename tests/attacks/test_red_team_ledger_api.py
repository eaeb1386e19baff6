"""Red-team attacks on the `jaxdp.Ledger` library API (not the CLI): batches,
`expect_head`, `max_pages`, release keys and dataset fingerprints."""

import dataclasses

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.ledger.fingerprint import data_forms

DATA = np.array([[1, 0], [0, 1], [1, 1]])
LAP = jaxdp.LaplaceMechanism(0.25)


def test_an_empty_batch_is_refused_not_given_a_repeatable_release_key(tmp_path):
  """charge_many([]) wrote nothing and returned an accountant whose key folded in
  the next entry's number with no nonce: two empty batches gave two accountants
  with one key (the same noise), neither charged. An empty batch is bad input."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.accountant("d", DATA, 1.0)
  for empty in ([], ()):
    with pytest.raises(ValueError, match="mechs must hold at least one mechanism"):
      ledger.charge_many("d", acct, empty)
  one = ledger.charge_many("d", acct, iter([LAP]))  # an iterable is read once
  assert ledger.datasets()[0].charges == 1
  assert ledger.committed("d")["answered"] == 1 and one is not acct


@pytest.mark.parametrize(
  "make",
  [
    lambda s, h: (s + 0.5, h),  # int() truncated it to the real entry: accepted
    lambda s, h: (True, h),
    lambda s, h: (str(s), h),
    lambda s, h: (None, None),
    lambda s, h: (s, h.encode()),
    lambda s, h: (s,),
    lambda s, h: f"{s}:{h}",
    lambda s, h: (-1, h),
  ],
)
def test_a_malformed_expect_head_is_refused_naming_it(tmp_path, make):
  """`expect_head=(2.5, h)` was read as entry 2 (int() truncates) and accepted,
  `True` as entry 1, and `(None, None)` raised a bare TypeError from int(): a
  malformed head is a caller's error, refused with a message naming expect_head."""
  path = tmp_path / "l.db"
  with jaxdp.Ledger(path) as ledger:
    ledger.charge("d", ledger.accountant("d", DATA, 1.0), LAP)
    seq, digest = ledger.head
  head = make(seq, digest)
  with pytest.raises((TypeError, ValueError), match="expect_head must be"):
    jaxdp.Ledger(path, expect_head=head)
  jaxdp.Ledger(path, expect_head=(np.int64(seq), digest)).close()  # a NumPy int is fine


def test_a_float_copy_of_uint64_data_past_int64_is_the_same_data():
  """The module promises a float copy of integer data one fingerprint. A uint64
  column holding 2**63 (exact in float32 and float64) and its float copies had two
  (integral floats mapped to int64 only below 2**63), so a copy registered under a
  second name with a second budget."""
  x = np.array([2**63, 1, 2**64 - 2**40], np.uint64)
  for copy in (x.astype(np.float64), x.astype(np.float32)):
    assert set(data_forms(x)) & set(data_forms(copy))


def test_the_release_keys_of_two_charges_from_one_accountant_differ(tmp_path):
  """One accountant (or a dataclasses.replace copy) charged twice: each charge
  folds in its own entry and nonce, so the two releases draw different noise."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.accountant("d", DATA, 1.0)
  one = ledger.charge("d", acct, LAP)
  two = ledger.charge("d", dataclasses.replace(acct), LAP)
  assert not np.array_equal(jax.random.key_data(one.key), jax.random.key_data(two.key))


@pytest.mark.parametrize("pages", [0, -1, True, 1.5, "9"])
def test_a_bad_max_pages_is_refused_before_a_file_is_created(tmp_path, pages):
  """`max_pages=0` or `-1` was passed to sqlite, which ignores it (no limit at
  all), `1.5` and `True` were read as 1: a size limit is a positive integer."""
  with pytest.raises(ValueError, match="max_pages must be"):
    jaxdp.Ledger(tmp_path / "l.db", max_pages=pages)
  assert not (tmp_path / "l.db").exists()
