"""Resetting a ledger by deleting or replacing some of its files: the database
deleted with its key file left (refused: never a fresh budget), the key file deleted
or replaced, the database emptied or swapped for another ledger's, and processes
creating one new ledger at once (none may take another's fresh key file for a
deleted database)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.ledger import (
  LedgerCorruptError,
  LedgerError,
  LedgerRollbackError,
  LedgerTamperedError,
)
from jaxdp.ledger.keyfile import key_path

DATA = np.arange(10)
LAP = jaxdp.LaplaceMechanism(0.1)
CHILD = Path(__file__).resolve().parents[1] / "helpers" / "ledger_child.py"


def _spent(path, journal="delete", charges=3):
  with jaxdp.Ledger(path, journal=journal) as ledger:
    acct = ledger.accountant("d", DATA, 1.0)
    for _ in range(charges):
      ledger.charge("d", acct, LAP)
    return ledger.head


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_deleting_only_the_database_is_refused_not_a_fresh_budget(tmp_path, journal):
  path = tmp_path / "l.db"
  _spent(path, journal)
  path.unlink()
  for options in ({}, {"create": False}, {"read_only": True}):
    with pytest.raises(LedgerError) as e:
      jaxdp.Ledger(path, **options)
    text = str(e.value)
    assert str(path) in text and str(key_path(path)) in text
    assert "deleted or moved" in text and "backup" in text and "reset" in text
    assert not path.exists()  # nothing created
  assert sorted(os.listdir(tmp_path)) == ["l.db.key"]  # no temporary file left
  key_path(path).unlink()  # the deliberate reset the message describes
  with jaxdp.Ledger(path) as fresh:
    assert fresh.datasets() == []


def test_the_command_line_refuses_a_deleted_database(tmp_path, capsys):
  path = tmp_path / "l.db"
  _spent(path)
  path.unlink()
  assert main(["ledger", "show", str(path)]) == 2
  assert "deleted or moved" in capsys.readouterr().err


def test_the_key_file_deleted_or_replaced_is_refused_whatever_else_is_left(tmp_path):
  path, key = tmp_path / "l.db", key_path(tmp_path / "l.db")
  _spent(path)
  original = key.read_bytes()
  key.unlink()
  with pytest.raises(LedgerTamperedError, match="key file .* is missing"):
    jaxdp.Ledger(path, timeout=0.05)
  assert not key.exists()  # not made again
  other = tmp_path / "other.db"
  _spent(other, charges=0)
  shutil.copy(key_path(other), key)  # a real key, of another ledger
  with pytest.raises(LedgerTamperedError, match="seal"):
    jaxdp.Ledger(path)
  key.write_bytes(original)
  assert jaxdp.Ledger(path).datasets()[0].charges == 3


def test_an_emptied_database_is_refused_with_or_without_its_key_file(tmp_path):
  path = tmp_path / "l.db"
  _spent(path)
  path.write_bytes(b"")
  with pytest.raises(LedgerCorruptError, match="empty"):
    jaxdp.Ledger(path, timeout=0.05)
  key_path(path).unlink()
  with pytest.raises(LedgerCorruptError, match="empty"):
    jaxdp.Ledger(path, timeout=0.05)
  assert path.stat().st_size == 0


def test_another_ledgers_database_is_refused_and_with_its_key_only_by_expect_head(
  tmp_path,
):
  """Another ledger's database under this one's key does not verify. Another
  ledger's database and key file together are a whole other ledger, which verifies
  on its own: only the head kept elsewhere (expect_head) or an open Ledger object
  tells it from this one (as for an older copy put back, see the trust model)."""
  path, other = tmp_path / "l.db", tmp_path / "other.db"
  head = _spent(path)
  _spent(other, charges=1)
  open_ledger = jaxdp.Ledger(path)
  shutil.copy(other, path.with_name("swap"))
  os.replace(path.with_name("swap"), path)
  with pytest.raises(LedgerTamperedError, match="seal"):
    jaxdp.Ledger(path)
  shutil.copy(key_path(other), key_path(path))
  assert jaxdp.Ledger(path).datasets()[0].charges == 1  # verifies on its own
  with pytest.raises(LedgerRollbackError, match="expect_head"):
    jaxdp.Ledger(path, expect_head=head)
  with pytest.raises(LedgerError, match="replaced"):
    open_ledger.datasets()


@pytest.mark.subprocess
def test_processes_creating_one_new_ledger_at_once_share_one_id_and_key(tmp_path):
  """10 rounds of 4 processes opening one new ledger at the same moment: each opens
  it (no process reads another's new key file as a deleted database) and all read
  one ledger id and one key; each round makes one ledger."""
  out = subprocess.run(
    [sys.executable, str(CHILD), "create", str(tmp_path / "c.db"), "10", "4"],
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert out.returncode == 0, out.stderr
  assert json.loads(out.stdout) == {"rounds": 10, "workers": 4, "ledgers": 10}
  assert not [f for f in os.listdir(tmp_path) if f.endswith(".tmp")]
