"""A ledger that cannot be trusted or written refuses, with its own error, and never
reads as a fresh budget: edited, deleted or inserted entries (the hash chain), an
older copy put back, a damaged, empty or foreign file, a lock held past the timeout,
a read-only file and a full disk."""

import os
import shutil
import sqlite3
import threading

import numpy as np
import pytest

import jaxdp
from jaxdp.accounting import budget
from jaxdp.ledger import (
  LedgerCorruptError,
  LedgerError,
  LedgerLockedError,
  LedgerRollbackError,
  LedgerTamperedError,
  LedgerWriteError,
)

DATA = np.arange(10)
LAP = jaxdp.LaplaceMechanism(0.1)
U = budget.charge_host(0.1, budget.unit_exponent(1.0), positive=True)[1]  # its units


def _ledger(path, charges=3):
  ledger = jaxdp.Ledger(path)
  acct = ledger.accountant("d", DATA, 1.0)
  for _ in range(charges):
    ledger.charge("d", acct, LAP)
  return ledger, acct


def _sql(path, *statements):
  with sqlite3.connect(path) as c:
    for s in statements:
      c.execute(s)


def _spent(path):
  (s,) = jaxdp.Ledger(path).datasets()
  return s.state["spent"]


EDITS = {
  "a charge made cheaper": "UPDATE entries SET body = replace(body, "
  f"'\"units\":{U}', '\"units\":1') WHERE seq = 3",
  "a budget raised": "UPDATE entries SET body = replace(body, '\"eps\":1.0', "
  "'\"eps\":9.0') WHERE seq = 1",
  "a charge deleted": "DELETE FROM entries WHERE seq = 2",
  "the last charge deleted": "DELETE FROM entries WHERE seq = 4",
  "every charge deleted": "DELETE FROM entries WHERE seq > 1",
  "the head deleted": "DELETE FROM head",
  "the head moved back": "UPDATE head SET seq = 3, hash = (SELECT hash FROM entries "
  "WHERE seq = 3)",
  "two charges swapped": "UPDATE entries SET seq = -seq WHERE seq IN (2, 3)",
  "a charge relabelled": "UPDATE entries SET dataset = 'e' WHERE seq = 4",
}


SEEN_WHILE_OPEN = (
  "the last charge deleted",
  "every charge deleted",
  "the head deleted",
  "the head moved back",
)


@pytest.mark.parametrize("edit", list(EDITS))
def test_an_edited_or_deleted_entry_is_detected_when_the_ledger_opens(tmp_path, edit):
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  before = sqlite3.connect(path).execute("SELECT * FROM entries, head").fetchall()
  _sql(path, EDITS[edit])
  assert sqlite3.connect(path).execute("SELECT * FROM entries, head").fetchall() != before
  with pytest.raises(LedgerTamperedError):
    jaxdp.Ledger(path)
  if edit in SEEN_WHILE_OPEN:  # the tail and the head are read by every transaction
    with pytest.raises(LedgerTamperedError):
      ledger.charge("d", acct, LAP)


def test_an_entry_rewritten_with_a_recomputed_hash_breaks_the_next_link(tmp_path):
  """Someone who recomputes one entry's hash with the key (but not every later one) is
  caught."""
  path = tmp_path / "l.db"
  _ledger(path)
  with sqlite3.connect(path) as c:
    row = list(c.execute("SELECT * FROM entries WHERE seq = 2").fetchone())
    row[4] = row[4].replace(f'"units":{U}', '"units":1')
    assert f'"units":{U}' not in row[4]
    key = jaxdp.ledger.keyfile.read(path)
    row[6] = jaxdp.ledger.chain.link(key, row[5], *row[:5])
    c.execute("UPDATE entries SET body = ?, hash = ? WHERE seq = 2", (row[4], row[6]))
  with pytest.raises(LedgerTamperedError, match="entry 3 does not follow entry 2"):
    jaxdp.Ledger(path)


def test_an_older_copy_put_back_is_caught_by_a_running_ledger_and_by_expect_head(tmp_path):
  """A copy verifies on its own (what cannot be detected from the file alone), but a
  process that saw later entries refuses it, and so does an open that names a head
  kept elsewhere."""
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path, charges=1)
  shutil.copy(path, tmp_path / "old.db")
  ledger.charge("d", acct, LAP)
  ledger.charge("d", acct, LAP)
  head = ledger.head
  shutil.copy(tmp_path / "old.db", path)
  with pytest.raises(LedgerRollbackError):
    ledger.charge("d", acct, LAP)
  assert _spent(path) < 3 * U  # the copy alone verifies: a rollback
  with pytest.raises(LedgerRollbackError):
    jaxdp.Ledger(path, expect_head=head)
  other = jaxdp.Ledger(path)  # re-grown past the old head with other entries
  for _ in range(3):
    other.charge("d", acct, LAP)
  with pytest.raises(LedgerRollbackError, match="replaced"):
    ledger.charge("d", acct, LAP)


@pytest.mark.parametrize(
  "damage", ["garbage", "empty", "truncated", "foreign database", "missing"]
)
def test_a_damaged_empty_foreign_or_missing_file_is_an_error_not_a_fresh_ledger(
  tmp_path, damage
):
  path = tmp_path / "l.db"
  _ledger(path)
  data = path.read_bytes()
  if damage == "garbage":
    path.write_bytes(b"\x00not a ledger" * 500)
  elif damage == "empty":
    path.write_bytes(b"")
  elif damage == "truncated":
    path.write_bytes(data[: len(data) // 2])
  elif damage == "foreign database":
    path.unlink()
    _sql(path, "CREATE TABLE t (x)")
  else:
    path.unlink()
  with pytest.raises(LedgerError) as e:
    jaxdp.Ledger(path, create=damage != "missing", timeout=0.05)
  assert isinstance(e.value, LedgerCorruptError) or damage == "missing"
  assert str(path) in str(e.value)
  assert damage == "missing" or path.stat().st_size == len(path.read_bytes())


def test_a_lock_held_past_the_timeout_is_an_error_and_nothing_is_charged(tmp_path):
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path, charges=1)
  ledger = jaxdp.Ledger(path, timeout=0.05)
  holder = sqlite3.connect(path, isolation_level=None)
  holder.execute("BEGIN IMMEDIATE")
  with pytest.raises(LedgerLockedError, match="more than 0.05 s"):
    ledger.charge("d", acct, LAP)
  with pytest.raises(LedgerLockedError):
    jaxdp.Session(DATA, 1.0, ledger=ledger, dataset="d")
  holder.execute("ROLLBACK")
  assert _spent(path) == U
  ledger.charge("d", acct, LAP)  # the lock released: the ledger works again
  assert _spent(path) == 2 * U


def test_a_read_only_ledger_refuses_to_charge(tmp_path):
  path = tmp_path / "l.db"
  _, acct = _ledger(path, charges=1)
  ledger = jaxdp.Ledger(path, read_only=True)
  with pytest.raises(LedgerWriteError, match="read-only"):
    ledger.charge("d", acct, LAP)
  assert ledger.datasets()[0].state["spent"] == U


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through file permissions")
@pytest.mark.parametrize("what", ["file", "folder"])
def test_a_read_only_file_or_folder_refuses_to_charge(tmp_path, what):
  path = tmp_path / "dir" / "l.db"
  path.parent.mkdir()
  _, acct = _ledger(path, charges=1)
  target = path if what == "file" else path.parent
  target.chmod(0o555 if what == "folder" else 0o444)
  try:
    with pytest.raises(LedgerWriteError):
      jaxdp.Ledger(path).charge("d", acct, LAP)
  finally:
    target.chmod(0o755)
  assert _spent(path) == U


def test_a_full_disk_refuses_the_charge_and_keeps_the_ledger(tmp_path):
  """The size limit (sqlite's max_page_count) stands in for a full disk: the charge
  is not committed, nothing is answered, and the ledger still verifies."""
  path = tmp_path / "l.db"
  _, acct = _ledger(path, charges=1)
  with sqlite3.connect(path) as c:
    pages = c.execute("PRAGMA page_count").fetchone()[0]
  ledger = jaxdp.Ledger(path, max_pages=pages)
  label = "x" * 9000  # an entry larger than the free space of the last page
  with pytest.raises(LedgerWriteError, match="full"):
    ledger.charge("d", acct, LAP, label=label)
  assert _spent(path) == U
  assert jaxdp.Ledger(path).charge("d", acct, LAP) is not None  # room again


def test_a_closed_ledger_another_thread_and_a_replaced_file_have_clear_errors(tmp_path):
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path, charges=1)
  errors = []
  thread = threading.Thread(target=lambda: errors.append(_error(ledger.charge, acct)))
  thread.start()
  thread.join()
  assert type(errors[0]) is LedgerError and "one Ledger per thread" in str(errors[0])
  other, _ = _ledger(tmp_path / "other.db", charges=0)
  other.close()
  os.replace(tmp_path / "other.db", path)  # mv other.db l.db
  e = _error(ledger.charge, acct)
  assert type(e) is LedgerError and "replaced" in str(e) and "read-only" not in str(e)
  ledger.close()
  ledger.close()  # closing twice is harmless
  e = _error(ledger.charge, acct)
  assert type(e) is LedgerError and "the ledger is closed" in str(e)


def _error(charge, acct):
  try:
    charge("d", acct, LAP)
  except LedgerError as e:
    return e
  raise AssertionError("no error")
