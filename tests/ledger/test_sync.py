"""What a running Ledger keeps between its transactions (the verified end of the chain
and the states replayed from it), attacked between two charges: the last entry read
edited in place or replaced, an earlier entry edited to vouch for a spend never
committed, another process's charges; and the release key's derivation."""

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.ledger import LedgerError, LedgerTamperedError
from jaxdp.ledger.chain import canonical
from jaxdp.ledger.protocol import release_key

DATA = np.arange(10)
LAP = jaxdp.LaplaceMechanism(0.1)


def _ledger(path, charges=2):
  ledger = jaxdp.Ledger(path)
  acct = ledger.accountant("d", DATA, 1.0)
  for _ in range(charges):
    ledger.charge("d", acct, LAP)
  return ledger, acct


def _rows(path):
  with sqlite3.connect(path) as c:
    return c.execute("SELECT seq, body, hash FROM entries ORDER BY seq").fetchall()


def _edit_body(path, seq, edit):
  """Rewrites entry ``seq``'s body (canonical JSON, as jaxdp writes it), its stored
  hash kept: what someone without the key can do."""
  with sqlite3.connect(path) as c:
    (body,) = c.execute("SELECT body FROM entries WHERE seq = ?", (seq,)).fetchone()
    new = canonical(edit(json.loads(body)))
    assert new != body
    c.execute("UPDATE entries SET body = ? WHERE seq = ?", (new, seq))


def _cheaper(body):
  body["label"] = "edited"
  return body


def test_the_last_entry_read_edited_in_place_is_caught_by_the_next_charge(tmp_path):
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  last = _rows(path)[-1][0]
  _edit_body(path, last, _cheaper)
  with pytest.raises(LedgerTamperedError, match=f"entry {last} was edited"):
    ledger.charge("d", acct, LAP)
  assert _rows(path)[-1][0] == last  # nothing charged


def test_the_last_entry_read_replaced_with_its_hash_is_caught_by_the_next_charge(
  tmp_path,
):
  """Its hash changed: the head's seal, made for the old hash, no longer matches."""
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  last = _rows(path)[-1][0]
  with sqlite3.connect(path) as c:
    c.execute("UPDATE entries SET hash = ? WHERE seq = ?", ("0" * 64, last))
  with pytest.raises(LedgerTamperedError, match=f"head \\(entry {last}\\) does not match"):
    ledger.charge("d", acct, LAP)


@pytest.mark.parametrize("position", [0, 1], ids=["its position", "another entry"])
def test_an_earlier_entry_edited_to_vouch_for_an_uncommitted_spend_is_caught(
  tmp_path, position
):
  """A dearer release than its charge leaves an accountant holding a state the
  ledger never committed. Someone edits an entry (the one at that state's position,
  or another) so that its ``after`` is that state, hoping the next charge from that
  accountant takes it for an earlier state of the dataset: the entry read no longer
  matches its hash."""
  path = tmp_path / "l.db"
  ledger = jaxdp.Ledger(path)
  x = np.arange(10.0)
  acct = ledger.accountant("d", x, 1.0)
  a = ledger.charge("d", acct, LAP)
  a, _ = jaxdp.release(a, jaxdp.LaplaceMechanism(0.5, 1.0), x.sum())  # charged 0.1
  for _ in range(2):  # the edited entry is not the last one read
    ledger.charge("d", acct, LAP)
  forged = jaxdp.ledger.records.state_of(a)
  charges = [seq for seq, body, _ in _rows(path) if '"before"' in body]
  _edit_body(path, charges[position], lambda body: dict(body, after=forged))
  with pytest.raises(LedgerTamperedError, match=f"entry {charges[position]} was edited"):
    ledger.charge("d", a, LAP)
  with pytest.raises(LedgerTamperedError):
    jaxdp.Ledger(path)


def test_an_uncommitted_spend_is_refused_and_every_earlier_state_accepted(tmp_path):
  """The lineage check reads one entry per state: every state the dataset held is
  accepted (accountants kept from before each charge, and after each release), a
  state it never held is refused, and nothing is charged for it."""
  path = tmp_path / "l.db"
  ledger = jaxdp.Ledger(path)
  x = np.arange(10.0)
  acct = ledger.accountant("d", x, 1.0)
  kept = [acct]
  for _ in range(3):
    a = ledger.charge("d", acct, LAP)
    a, _ = jaxdp.release(a, LAP, x.sum())
    kept.append(a)
  for a in kept:
    ledger.charge("d", a, LAP)
  assert ledger.committed("d")["answered"] == 7
  bad = ledger.charge("d", acct, LAP)
  bad, _ = jaxdp.release(bad, jaxdp.LaplaceMechanism(0.2, 1.0), x.sum())
  with pytest.raises(LedgerError, match="never committed"):
    ledger.charge("d", bad, LAP)
  assert ledger.datasets()[0].charges == 8


def test_a_refused_batch_leaves_no_trace_in_the_running_ledger(tmp_path):
  """A charge_many refused at its second charge appended its first to the index
  before the rollback: the index forgets it (the count of charges, the lineage)."""
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path, charges=1)
  with pytest.raises(jaxdp.ReleaseRefusedError):
    ledger.charge_many("d", acct, [jaxdp.LaplaceMechanism(0.5)] * 2)
  assert ledger.datasets()[0].charges == 1
  ledger.charge("d", acct, LAP)
  (summary,) = jaxdp.Ledger(path).datasets()
  assert ledger.datasets()[0].charges == summary.charges == 2


CHILD = """
import sys
import numpy as np
import jaxdp
ledger = jaxdp.Ledger(sys.argv[1])
acct = ledger.accountant("d", np.arange(10), 1.0)
for _ in range(5):
  ledger.charge("d", acct, jaxdp.LaplaceMechanism(0.1))
"""


@pytest.mark.slow
@pytest.mark.subprocess
def test_another_process_charges_between_two_charges_of_this_one(tmp_path):
  """A Ledger open here, another process charging 5 times in between: this one's
  next charge reads and verifies them, and the budget of 10 charges holds across
  both processes."""
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  out = subprocess.run(
    [sys.executable, "-c", CHILD, str(path)],
    capture_output=True,
    text=True,
    timeout=300,
    env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
  )
  assert out.returncode == 0, out.stderr
  ledger.charge("d", acct, LAP)
  assert ledger.committed("d")["answered"] == 8
  ledger.charge("d", acct, LAP)
  ledger.charge("d", acct, LAP)
  with pytest.raises(jaxdp.ReleaseRefusedError):
    ledger.charge("d", acct, LAP)
  assert ledger.datasets()[0].charges == 10


@pytest.mark.parametrize("make", [jax.random.key, jax.random.PRNGKey])
def test_the_release_key_folds_in_the_entrys_digest_word_by_word(make):
  """The key of a charge's release against its definition: the first 128 bits of
  the SHA-256 of the entry's identity, four big-endian words, each folded in by
  ``jax.random.fold_in`` in turn (noise reproducible from the key and the entry)."""
  key = make(5)
  for nonce in ("", "ab" * 16):
    text = b"jaxdp-release-key\x00id\x00fp\x0012"
    digest = hashlib.sha256(text + (b"\x00" + nonce.encode() if nonce else b"")).digest()
    want = key
    for i in range(0, 16, 4):
      want = jax.random.fold_in(want, int.from_bytes(digest[i : i + 4], "big"))
    got = release_key(key, "id", "fp", 12, nonce)
    assert got.dtype == want.dtype
    if jax.dtypes.issubdtype(got.dtype, jax.dtypes.prng_key):
      got, want = jax.random.key_data(got), jax.random.key_data(want)
    np.testing.assert_array_equal(got, want)


def _head_row(path):
  with sqlite3.connect(path) as c:
    return c.execute("SELECT seq, hash FROM head").fetchone()


def test_a_head_put_back_to_the_one_a_ledger_verified_does_not_hide_newer_entries(
  tmp_path,
):
  """A Ledger keeps the head row it verified and skips its seal while the row is
  unchanged. Another Ledger charges; someone then writes the first one's head row
  back (no key needed: it is a stored value): the entry after it is still read, and
  the head that does not name it is refused, nothing charged. Without the edit the
  other Ledger's charge is seen and counted."""
  path = tmp_path / "l.db"
  one, acct = _ledger(path, charges=1)
  two = jaxdp.Ledger(path)
  two.charge("d", two.accountant("d", DATA, 1.0), LAP)
  one.charge("d", acct, LAP)
  assert one.committed("d")["answered"] == 3
  kept = _head_row(path)  # the head `one` verified with its charge
  two.charge("d", acct, LAP)
  with sqlite3.connect(path) as c:
    c.execute("UPDATE head SET seq = ?, hash = ?", kept)
  with pytest.raises(LedgerTamperedError, match=f"names entry {kept[0]}, but the last"):
    one.charge("d", acct, LAP)
  assert _rows(path)[-1][0] == kept[0] + 1  # nothing charged


def test_a_write_a_trigger_changes_is_rolled_back_before_its_commit(tmp_path, monkeypatch):
  """What a charge writes is read back inside its transaction: a trigger that edits
  the new entry (the schema's check disabled, the read-back alone) fails the charge
  and nothing is committed, so the file still verifies once the trigger is gone."""
  path = tmp_path / "l.db"
  ledger, acct = _ledger(path)
  with sqlite3.connect(path) as c:
    c.execute(
      "CREATE TRIGGER t AFTER INSERT ON entries BEGIN UPDATE entries SET "
      "time = 'edited' WHERE seq = NEW.seq; END"
    )
  monkeypatch.setattr(jaxdp.ledger.store, "check_schema", lambda *a: None)
  before = _rows(path)
  with pytest.raises(LedgerTamperedError, match="does not read back"):
    ledger.charge("d", acct, LAP)
  with sqlite3.connect(path) as c:
    c.execute("DROP TRIGGER t")
  assert _rows(path) == before
  monkeypatch.undo()
  assert jaxdp.Ledger(path).committed("d")["answered"] == 2
  ledger.charge("d", acct, LAP)  # the running ledger forgot the rolled-back entry
  assert jaxdp.Ledger(path).committed("d")["answered"] == 3
