"""Attacks on a ledger file with the sqlite3 command line's powers (no key): triggers
that swallow charges, truncation with the head reset, a missing key file."""

import hashlib
import os
import shutil
import sqlite3

import numpy as np
import pytest

import jaxdp
from jaxdp.ledger import LedgerTamperedError

DATA = np.arange(10)
LAP = jaxdp.LaplaceMechanism(0.1)

SWALLOW = (
  "CREATE TRIGGER t1 BEFORE INSERT ON entries BEGIN SELECT RAISE(IGNORE); END",
  "CREATE TRIGGER t2 BEFORE UPDATE ON head BEGIN SELECT RAISE(IGNORE); END",
)


def _sql(path, *statements):
  with sqlite3.connect(path) as c:
    for s in statements:
      c.execute(s)


def _ledger(path, charges=2):
  ledger = jaxdp.Ledger(path)
  acct = ledger.accountant("d", DATA, 1.0)
  for _ in range(charges):
    ledger.charge("d", acct, LAP)
  return ledger, acct


@pytest.mark.parametrize(
  "objects",
  [
    SWALLOW,
    ("CREATE VIEW v AS SELECT * FROM entries",),
    ("CREATE INDEX i ON entries (dataset)",),
    ("CREATE TABLE extra (x)",),
  ],
  ids=["triggers", "view", "index", "table"],
)
def test_an_object_that_is_not_the_ledgers_is_refused_on_open_and_in_a_charge(
  tmp_path, objects
):
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  _sql(path, *objects)  # while the ledger is open: the charge's transaction checks
  with pytest.raises(LedgerTamperedError, match="schema"):
    ledger.charge("d", acct, LAP)
  with pytest.raises(LedgerTamperedError, match="schema"):
    jaxdp.Ledger(path)


def test_a_trigger_that_drops_a_charge_is_caught_by_the_read_back(tmp_path, monkeypatch):
  """Triggers that drop the new entry and the head's move, with the schema's check
  disabled (the second line of defence alone): the read-back after the commit fails,
  so no accountant to release from is returned."""
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  _sql(path, *SWALLOW)
  monkeypatch.setattr(jaxdp.ledger.store, "check_schema", lambda *a: None)
  with pytest.raises(LedgerTamperedError, match="does not read back"):
    ledger.charge("d", acct, LAP)


def _seal_of(path):
  return sqlite3.connect(path).execute("SELECT seq, hash FROM head").fetchone()


def test_deleting_the_newest_entries_and_resetting_the_head_is_caught(tmp_path):
  """Truncation with the head set to the new last entry's stored hash (an unkeyed
  chain accepts it), or a full reset to a genesis head, does not verify."""
  path = tmp_path / "l.db"
  ledger, _ = _ledger(path, charges=3)
  ledger.close()
  (ledger_id,) = sqlite3.connect(path).execute("SELECT value FROM meta WHERE key='id'")
  _sql(
    path,
    "DELETE FROM entries WHERE seq = (SELECT max(seq) FROM entries)",
    "UPDATE head SET seq = (SELECT max(seq) FROM entries), "
    "hash = (SELECT hash FROM entries ORDER BY seq DESC LIMIT 1)",
  )
  with pytest.raises(LedgerTamperedError, match="seal"):
    jaxdp.Ledger(path)
  genesis = hashlib.sha256(b"jaxdp-ledger\x00" + ledger_id[0].encode()).hexdigest()
  _sql(path, "DELETE FROM entries", f"UPDATE head SET seq = 0, hash = '{genesis}'")
  with pytest.raises(LedgerTamperedError, match="seal"):
    jaxdp.Ledger(path)


def test_a_missing_key_file_is_refused_and_never_a_fresh_start(tmp_path):
  path = tmp_path / "l.db"
  _ledger(path)[0].close()
  key = jaxdp.ledger.keyfile.key_path(path)
  assert key.stat().st_mode & 0o777 == 0o600 and len(key.read_bytes()) == 32
  key.rename(tmp_path / "elsewhere")
  with pytest.raises(LedgerTamperedError, match="key file"):
    jaxdp.Ledger(path)
  assert not key.exists()  # not recreated
  (tmp_path / "elsewhere").write_bytes(bytes(32))  # another key
  key.write_bytes(bytes(32))
  with pytest.raises(LedgerTamperedError):
    jaxdp.Ledger(path)


def test_a_write_ahead_log_deleted_after_a_crash_is_refused(tmp_path):
  """The files of a WAL ledger whose process died (copied while it is open) with
  the -wal file left out would open with less spent."""
  path = tmp_path / "l.db"
  ledger = jaxdp.Ledger(path, journal="wal")
  acct = ledger.accountant("d", DATA, 1.0)
  ledger.charge("d", acct, LAP)
  for keep_wal in (True, False):
    image = tmp_path / f"image{keep_wal}"
    image.mkdir()
    for suffix in ("", ".key", "-shm") + (("-wal",) if keep_wal else ()):
      shutil.copy(f"{path}{suffix}", f"{image / 'l.db'}{suffix}")
    if keep_wal:
      assert jaxdp.Ledger(image / "l.db").datasets()[0].charges == 1
    else:
      with pytest.raises(LedgerTamperedError, match="write-ahead log"):
        jaxdp.Ledger(image / "l.db")
  ledger.close()  # the last connection: sqlite checkpoints and removes -wal, -shm
  assert not os.path.exists(f"{path}-wal")
  assert jaxdp.Ledger(path).datasets()[0].charges == 1


def test_a_key_file_that_cannot_be_written_is_a_write_error(tmp_path):
  with pytest.raises(jaxdp.ledger.LedgerWriteError, match="key file"):
    jaxdp.Ledger(tmp_path / "no folder" / "l.db")


def test_a_dearer_release_than_the_charge_is_caught_at_the_next_charge(tmp_path):
  """``charge(cheap)`` then ``release(dear)`` from the accountant returned, again
  and again: eps 0.9 spent per round, 0.01 recorded. The accountant then holds a
  spend the ledger never committed, and the next charge refuses it."""
  ledger = jaxdp.Ledger(tmp_path / "C.db")
  x = np.arange(10.0)
  acct = ledger.accountant("ds", x, 1.0)
  cheap, dear = jaxdp.LaplaceMechanism(0.01, 1.0), jaxdp.LaplaceMechanism(0.9, 1.0)
  a = ledger.charge("ds", acct, cheap)
  a, _ = jaxdp.release(a, dear, x.sum())
  with pytest.raises(jaxdp.ledger.LedgerError, match="never committed"):
    ledger.charge("ds", a, cheap)
  assert ledger.datasets()[0].charges == 1  # nothing more was charged
  # the honest ways stay open: the accountant after its charged release, an older
  # one (made before that charge), and one resumed from the ledger
  b = ledger.charge("ds", acct, cheap)
  b, _ = jaxdp.release(b, cheap, x.sum())
  for ok in (b, acct, ledger.accountant("ds", x, 1.0)):
    ledger.charge("ds", ok, cheap)
