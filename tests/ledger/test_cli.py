"""``jaxdp release --ledger`` records every release and refuses once the budget is
spent; ``jaxdp ledger show`` prints it; without a ledger a release warns that
nothing is remembered."""

import json
import sqlite3

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main


@pytest.fixture
def data(tmp_path):
  filters = np.asarray(jaxdp.Poset.nhis(1).filters())
  rows = filters[np.random.default_rng(0).integers(0, len(filters), 300)]
  np.save(tmp_path / "a.npy", rows)
  return tmp_path / "a.npy"


def _release(data, *flags):
  return main(
    [
      "release",
      "--poset",
      "nhis1",
      "--noise",
      "laplace",
      "--data",
      str(data),
      *map(str, flags),
    ]
  )


def test_release_records_every_release_and_refuses_once_the_budget_is_spent(
  tmp_path, data, capsys, quick_noise
):
  book = tmp_path / "l.db"
  flags = ("--eps", 0.4, "--ledger", book, "--dataset", "survey")
  assert _release(data, *flags, "--budget", 1) == 0
  assert "spent 0.4 of eps 1, 0.6 left" in capsys.readouterr().err
  assert _release(data, *flags) == 0  # the budget is the ledger's
  out = tmp_path / "third.json"
  assert _release(data, *flags, "--budget", 1, "--out", out) == 2
  err = capsys.readouterr().err
  assert "refused" in err and "0.8 of eps 1 spent" in err and not out.exists()
  assert _release(data, *flags, "--budget", 2) == 2
  assert "another budget" in capsys.readouterr().err
  assert _release(data, *flags[:4], "--dataset", "copy", "--budget", 1) == 2
  assert "already registered as dataset 'survey'" in capsys.readouterr().err
  (s,) = jaxdp.Ledger(book).datasets()
  assert s.charges == 2 and s.fingerprint["poset"] is not None
  assert main(["ledger", "show", str(book)]) == 0
  shown = capsys.readouterr().out
  assert "dataset 'survey'" in shown and "budget: eps 1" in shown
  assert "spent: eps 0.8" in shown and "remaining: eps 0.2" in shown
  assert shown.count("PosetCountMechanism cost [0.4, 0.0]") == 2


def test_release_flags_go_together_and_a_new_dataset_needs_a_budget(tmp_path, data, capsys):
  assert _release(data, "--eps", 1, "--dataset", "x") == 2
  assert "--dataset and --budget go with --ledger" in capsys.readouterr().err
  assert _release(data, "--eps", 1, "--ledger", tmp_path / "l.db") == 2
  assert "--ledger needs --dataset" in capsys.readouterr().err
  assert _release(data, "--eps", 1, "--ledger", tmp_path / "l.db", "--dataset", "x") == 2
  assert "first use needs --budget" in capsys.readouterr().err
  assert _release(data, "--eps", 1, "--budget", "nan") == 2
  assert jaxdp.Ledger(tmp_path / "l.db").datasets() == []


def test_release_without_a_ledger_warns_that_nothing_is_remembered(
  data, capsys, monkeypatch
):
  monkeypatch.setattr(jaxdp.cli.release, "release", _no_release)
  with pytest.raises(_Stop):
    _release(data, "--eps", 1)
  assert "no --ledger, so nothing remembers this release" in capsys.readouterr().err


def test_the_help_states_the_default(capsys):
  assert main(["release", "--help"]) == 0
  text = " ".join(capsys.readouterr().out.split())
  assert "default: none, and then nothing is remembered" in text


def test_ledger_show_refuses_a_damaged_ledger(tmp_path, capsys):
  (tmp_path / "l.db").write_bytes(b"garbage" * 100)
  assert main(["ledger", "show", str(tmp_path / "l.db")]) == 2
  assert "damaged" in capsys.readouterr().err
  assert main(["ledger", "show", str(tmp_path / "none.db")]) == 2
  assert json.dumps("no such file")[1:-1] in capsys.readouterr().err


class _Stop(Exception):
  pass


def _no_release(*args, **kwargs):
  raise _Stop


def test_release_answers_nothing_when_triggers_swallow_the_charge(
  tmp_path, data, capsys, quick_noise
):
  """Triggers that drop the entry and the head's update: refused before the release
  (the schema's allowlist), nothing printed on stdout."""
  book = tmp_path / "l.db"
  flags = ("--eps", 0.4, "--ledger", book, "--dataset", "survey")
  assert _release(data, *flags, "--budget", 1) == 0
  capsys.readouterr()
  with sqlite3.connect(book) as c:
    c.execute("CREATE TRIGGER t1 BEFORE INSERT ON entries BEGIN SELECT RAISE(IGNORE); END")
    c.execute("CREATE TRIGGER t2 BEFORE UPDATE ON head BEGIN SELECT RAISE(IGNORE); END")
  assert _release(data, *flags) == 2
  out = capsys.readouterr()
  assert out.out == "" and "schema" in out.err


def test_rows_that_clip_alike_are_one_dataset_in_the_ledger(
  tmp_path, data, capsys, quick_noise
):
  """An invalid row written another way (it clips to the same filter) made a new
  fingerprint, so the same released counts got a second budget under a new name."""
  book = tmp_path / "l.db"
  flags = ("--eps", 0.5, "--ledger", book, "--on-invalid", "clip")
  assert _release(data, *flags, "--dataset", "s1", "--budget", 1) == 0
  rows = np.load(data)
  zero = int(np.nonzero(~rows.any(axis=1))[0][0])
  rows[zero] = [0, 1, 1, 0]  # not a filter of nhis1: it clips to the empty filter
  np.save(tmp_path / "clip.npy", rows)
  capsys.readouterr()
  assert _release(tmp_path / "clip.npy", *flags, "--dataset", "s1b", "--budget", 1) == 2
  assert "s1" in capsys.readouterr().err
  assert [d.name for d in jaxdp.Ledger(book).datasets()] == ["s1"]


@pytest.mark.parametrize("companion", ["-wal", "", ".key", "-shm", "-journal", "link"])
def test_out_may_not_name_a_file_of_the_ledger_even_before_it_exists(
  tmp_path, data, capsys, quick_noise, companion
):
  """``--out W.db-wal`` (a WAL ledger closed cleanly, so no such file yet) replaced
  the log holding the committed charge: every release was answered and the ledger
  showed no entries. On a first use ``--out N.db`` or ``N.db.key`` overwrote the
  new ledger or its key after the charge. Refused before anything is charged."""
  book = tmp_path / "W.db"
  jaxdp.Ledger(book, journal="wal").close()
  before = jaxdp.Ledger(book).head
  out = tmp_path / f"W.db{companion}"
  if companion == "link":  # a symbolic link to the log-to-be
    out = tmp_path / "out.json"
    out.symlink_to(tmp_path / "W.db-wal")
  flags = ("--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1)
  assert _release(data, *flags, "--out", out) == 2
  assert "is a file of the ledger" in capsys.readouterr().err
  assert jaxdp.Ledger(book).head == before  # nothing charged
  fresh = tmp_path / "N.db"  # a first use: the ledger and its key do not exist yet
  for name in ("N.db", "N.db.key"):
    assert (
      _release(data, *flags[:2], "--ledger", fresh, *flags[4:], "--out", tmp_path / name)
      == 2
    )
    assert not fresh.exists()


def test_the_ledger_is_closed_before_out_is_written(tmp_path, data, capsys, quick_noise):
  """Six releases of eps 0.5 on a budget of 1 with a WAL ledger: two answered."""
  book = tmp_path / "W.db"
  jaxdp.Ledger(book, journal="wal").close()
  flags = ("--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1)
  codes = [_release(data, *flags, "--out", tmp_path / f"r{i}.json") for i in range(4)]
  assert codes == [0, 0, 2, 2]
  assert not (tmp_path / "W.db-wal").exists() or (tmp_path / "W.db-wal").stat().st_size == 0
  (s,) = jaxdp.Ledger(book, read_only=True).datasets()
  assert s.charges == 2


def test_ledger_show_prints_no_plain_digest_of_the_data(
  tmp_path, data, capsys, quick_noise
):
  """``ledger show`` printed 16 hex digits of the data's plain SHA-256: a small
  dataset was recovered by hashing every candidate. It prints a keyed tag."""
  book = tmp_path / "l.db"
  assert (
    _release(data, "--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1) == 0
  )
  capsys.readouterr()
  assert main(["ledger", "show", str(book)]) == 0
  shown = capsys.readouterr().out
  (s,) = jaxdp.Ledger(book).datasets()
  plain = [v for v in s.fingerprint.values() if isinstance(v, str)]
  plain += [jaxdp.ledger.dataset_fingerprint(np.load(data))["data"]]
  assert not any(v[:8] in shown for v in plain)
  assert f"data tag {s.tag}" in shown and len(s.tag) == 16
  other = tmp_path / "m.db"  # another ledger (another key): another tag, same data
  assert (
    _release(data, "--eps", 0.5, "--ledger", other, "--dataset", "s", "--budget", 1) == 0
  )
  assert jaxdp.Ledger(other).datasets()[0].tag != s.tag


def test_a_new_ledger_is_announced_and_existing_ledger_refuses_one(
  tmp_path, data, capsys, quick_noise
):
  """The ledger files moved away: the next release silently started a fresh budget."""
  book = tmp_path / "G.db"
  flags = ("--eps", 1, "--ledger", book, "--dataset", "s", "--budget", 1)
  assert _release(data, *flags) == 0
  assert f"created a new ledger at {book}" in capsys.readouterr().err
  assert _release(data, *flags) == 2  # spent
  assert "created a new ledger" not in capsys.readouterr().err
  book.rename(tmp_path / "M.db")
  (tmp_path / "G.db.key").rename(tmp_path / "M.db.key")
  assert _release(data, *flags, "--existing-ledger") == 2
  assert "--existing-ledger forbids creating" in capsys.readouterr().err
  assert not book.exists()
  assert _release(data, *flags) == 0  # the documented default: created
  assert f"created a new ledger at {book} with dataset 's'" in capsys.readouterr().err


def test_a_dangling_symlink_as_ledger_is_a_one_line_error(tmp_path, data, capsys):
  (tmp_path / "L.db").symlink_to(tmp_path / "nonexist.db")
  flags = ("--eps", 1, "--ledger", tmp_path / "L.db", "--dataset", "s", "--budget", 1)
  assert _release(data, *flags) == 2
  err = capsys.readouterr().err
  assert "a symbolic link to a missing file" in err and "Traceback" not in err
  assert not (tmp_path / "nonexist.db").exists()
