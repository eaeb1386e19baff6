"""Attacks on the ledger's files, keys and printout: ``--out`` swapped for a link
while a release runs, noise after a restored backup, ``--expect-head``, forged
labels, custom composition rules and malformed stored values."""

import json
import shutil
import sqlite3

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main, release_report


@pytest.fixture
def data(tmp_path):
  filters = np.asarray(jaxdp.Poset.nhis(1).filters())
  rows = filters[np.random.default_rng(0).integers(0, len(filters), 50)]
  np.save(tmp_path / "a.npy", rows)
  return tmp_path / "a.npy"


def _release(data, *flags):
  args = ["release", "--poset", "nhis1", "--noise", "laplace", "--data", str(data)]
  return main([*args, *map(str, flags)])


@pytest.mark.parametrize("swap", ["out", "folder"])
def test_out_swapped_for_a_link_to_the_key_while_the_release_runs_leaves_the_key(
  tmp_path, data, capsys, quick_noise, monkeypatch, swap
):
  """The check of ``--out`` ran at the start, the write at the end followed a
  symbolic link put at the path meanwhile: the ledger's key was overwritten."""
  book = tmp_path / "b.db"
  flags = ("--eps", 0.1, "--ledger", book, "--dataset", "s", "--budget", 1)
  assert _release(data, *flags) == 0
  key = (tmp_path / "b.db.key").read_bytes()
  out = tmp_path / "out" / "rel.json"
  report = release_report.report

  def swapping(*a, **k):  # after the charge, before the write
    if swap == "out":
      out.symlink_to(tmp_path / "b.db.key")
    else:
      (tmp_path / "out").rename(tmp_path / "moved")
      (tmp_path / "out").symlink_to(tmp_path)
    return report(*a, **k)

  monkeypatch.setattr(release_report, "report", swapping)
  code = _release(data, *flags, "--out", out)
  assert (tmp_path / "b.db.key").read_bytes() == key
  assert not (tmp_path / "rel.json").exists()
  if swap == "out":
    assert code == 2 and "not a release" in capsys.readouterr().err
  else:  # written into the folder opened at the start
    assert code == 0 and "counts" in json.loads((tmp_path / "moved/rel.json").read_text())
  with jaxdp.Ledger(book, create=False) as ledger:
    assert ledger.datasets()[0].state["answered"] == 2


def _restore(path, backup):
  for end in ("", ".key"):
    shutil.copy(f"{backup}{end}", f"{path}{end}")


AGES = np.arange(40) % 7


def test_a_restored_backup_with_a_fixed_key_draws_fresh_noise(tmp_path):
  """A restored copy repeats the ledger's id and entry numbers: with one fixed key
  the same release drew the same noise, so two neighbouring queries asked before
  and after a restore gave the exact difference of their counts."""
  path, backup = tmp_path / "b.db", tmp_path / "bak.db"
  with jaxdp.Ledger(path) as ledger:
    ledger.accountant("ages", AGES, 1.0)
  _restore(backup, path)
  mech = jaxdp.LaplaceMechanism(0.4, 1.0)

  def ask():
    with jaxdp.Ledger(path) as ledger:
      acct = ledger.accountant("ages", AGES, 1.0, key=jax.random.PRNGKey(0))
      acct = ledger.charge("ages", acct, mech)
      return float(jaxdp.release(acct, mech, 3.0)[1])

  first = ask()
  _restore(path, backup)
  assert ask() != first

  def session():
    with jaxdp.Ledger(path) as ledger:
      s = jaxdp.Session(AGES, 1.0, key=jax.random.PRNGKey(0), ledger=ledger, dataset="ages")
      return float(s.count(lambda a: a > 3, eps=0.4))

  _restore(path, backup)
  first = session()
  _restore(path, backup)
  assert session() != first


def test_each_charge_stores_a_fresh_nonce_and_entries_without_one_still_verify(
  tmp_path, monkeypatch
):
  path = tmp_path / "b.db"
  mech = jaxdp.LaplaceMechanism(0.1, 1.0)
  append = jaxdp.ledger.index.Index.append

  def old_append(self, tx, dataset, kind, body):  # as written before nonces
    return append(self, tx, dataset, kind, {k: v for k, v in body.items() if k != "nonce"})

  with monkeypatch.context() as m:
    m.setattr(jaxdp.ledger.index.Index, "append", old_append)
    with jaxdp.Ledger(path) as ledger:
      ledger.charge("ages", ledger.accountant("ages", AGES, 1.0), mech)
  with jaxdp.Ledger(path, create=False) as ledger:
    ledger.charge("ages", ledger.accountant("ages", AGES), mech)
    ledger.charge("ages", ledger.accountant("ages", AGES), mech)
    assert ledger.datasets()[0].state["answered"] == 3
  con = sqlite3.connect(path)
  bodies = [json.loads(b) for (b,) in con.execute("SELECT body FROM entries")]
  con.close()
  nonces = [b.get("nonce") for b in bodies if "after" in b]
  assert nonces[0] is None and len({n for n in nonces[1:]}) == 2
  assert all(len(bytes.fromhex(n)) == 16 for n in nonces[1:])


def test_expect_head_refuses_a_restored_copy_from_the_command_line(
  tmp_path, data, capsys, quick_noise
):
  """Every run is a new Ledger object: a backup put back (in place) was charged
  again, with no notice; ``--expect-head`` takes the head ``ledger show`` prints."""
  book = tmp_path / "b.db"
  flags = ("--eps", 0.3, "--ledger", book, "--dataset", "s")
  assert _release(data, *flags, "--budget", 1) == 0
  shutil.copy(book, tmp_path / "b.bak")
  capsys.readouterr()
  assert main(["ledger", "show", str(book)]) == 0
  head = capsys.readouterr().out.split(" head ")[1].split()[0]
  with jaxdp.Ledger(book) as ledger:
    assert head == f"{ledger.head[0]}:{ledger.head[1]}"
  assert _release(data, *flags, "--expect-head", head) == 0  # the head itself
  later = capsys.readouterr().err.split("; head ")[1].split()[0]
  assert _release(data, *flags, "--expect-head", head) == 0  # a later descendant
  capsys.readouterr()
  shutil.copyfile(tmp_path / "b.bak", book)  # in place: the older copy put back
  assert _release(data, *flags, "--expect-head", later) == 2
  err = capsys.readouterr().err
  assert "expect_head" in err and len(err.strip().splitlines()) == 1
  with jaxdp.Ledger(book) as ledger:
    assert ledger.datasets()[0].state["answered"] == 1  # nothing charged
  for bad in ("abc", f"x:{'0' * 64}", "3:" + "g" * 64):
    assert _release(data, *flags, "--expect-head", bad) == 2
    assert "SEQ:HASH" in capsys.readouterr().err
  fresh = tmp_path / "none.db"
  assert (
    _release(
      data,
      "--eps",
      0.3,
      "--ledger",
      fresh,
      "--dataset",
      "s",
      "--budget",
      1,
      "--expect-head",
      head,
    )
    == 2
  )
  assert "no such file" in capsys.readouterr().err and not fresh.exists()


FORGE = (
  "\r\x1b[1A\x1b[2K  spent: eps 0.05, delta 0; remaining: eps 0.95; 1 releases answered"
  "\n\x1b[2K  #2 charge: LaplaceMechanism nightly\u2028x"
)


def test_ledger_show_escapes_a_forging_label_and_new_ones_are_refused(
  tmp_path, capsys, monkeypatch
):
  """A label with CR, cursor-up and erase-line escapes made a terminal show a
  forged spend; such a label (stored by an older version) is shown escaped."""
  path = tmp_path / "b.db"
  mech = jaxdp.LaplaceMechanism(0.9, 1.0)
  with jaxdp.Ledger(path) as ledger:
    acct = ledger.accountant("survey", AGES, 1.0)
    with pytest.raises(ValueError, match="label"):
      ledger.charge("survey", acct, mech, label="a\nb")
    with pytest.raises(ValueError, match="label"):
      ledger.charge("survey", acct, mech, label="a\x1b[2Kb")
    assert ledger.datasets()[0].state["answered"] == 0  # nothing written
    check = jaxdp.ledger.protocol.check_call
    monkeypatch.setattr(jaxdp.ledger.protocol, "check_call", lambda a, _: check(a, ""))
    ledger.charge("survey", acct, mech, label=FORGE)
  capsys.readouterr()
  assert main(["ledger", "show", str(path)]) == 0
  out = capsys.readouterr().out
  assert not any(c in out for c in "\r\x1b\u2028")
  assert len(out.splitlines()) == 6  # header, blank, 3 dataset lines, 1 charge
  assert "\\r\\x1b[1A\\x1b[2K  spent: eps 0.05" in out and "\\n\\x1b" in out
  assert "\\u2028x" in out


class _Lax(jaxdp.BasicComposition):
  def allows(self, caps, spent, spent_delta, answered, ce, cd):
    return jax.numpy.bool_(True)


class _Sub(jaxdp.BasicComposition):
  pass


@pytest.mark.parametrize("rule", [_Lax, _Sub])
def test_a_custom_composition_rule_is_refused_before_anything_is_written(tmp_path, rule):
  """A BasicComposition subclass was committed, after which the whole ledger's
  summary (``ledger show``, ``Ledger.datasets``) failed for good."""
  path = tmp_path / "a.db"
  with jaxdp.Ledger(path) as ledger:
    ledger.accountant("other", np.arange(9), 1.0)
    head = ledger.head
    acct = jaxdp.Accountant.create(1.0, composition=rule())
    with pytest.raises(ValueError, match=f"composition '{rule.__name__}'"):
      ledger.resume("a", AGES, acct)
    with pytest.raises(ValueError, match="composition"):
      ledger.charge("other", acct, jaxdp.LaplaceMechanism(0.1, 1.0))
    assert ledger.head == head  # nothing written
  with jaxdp.Ledger(path, create=False) as ledger:
    assert [d.name for d in ledger.datasets()] == ["other"]


@pytest.mark.parametrize(
  "edit",
  [
    "UPDATE entries SET hash = 'not hex' WHERE seq = (SELECT max(seq) FROM entries)",
    f"UPDATE entries SET hash = '{'zz' * 32}' WHERE seq = 1",
    "UPDATE entries SET prev = 'xyz' WHERE seq = 2",
    "UPDATE entries SET prev = x'00ff' WHERE seq = 2",
    "UPDATE head SET hash = 'not hex'",
    "UPDATE meta SET value = 7 WHERE key = 'id'",
  ],
)
def test_a_malformed_stored_value_is_the_ledgers_corruption_error(tmp_path, capsys, edit):
  """A hand-edited hash that is not hex raised a bare ValueError, which
  ``except LedgerError`` missed, and ``ledger show`` printed fromhex's message."""
  path = tmp_path / "b.db"
  with jaxdp.Ledger(path) as ledger:
    ledger.charge("d", ledger.accountant("d", AGES, 1.0), jaxdp.LaplaceMechanism(0.1, 1.0))
  con = sqlite3.connect(path)
  con.execute(edit)
  con.commit()
  con.close()
  with pytest.raises(jaxdp.ledger.LedgerCorruptError):
    jaxdp.Ledger(path, create=False)
  capsys.readouterr()
  assert main(["ledger", "show", str(path)]) == 2
  err = capsys.readouterr().err
  assert len(err.strip().splitlines()) == 1 and "fromhex" not in err
