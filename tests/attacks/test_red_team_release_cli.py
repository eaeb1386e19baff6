"""Attacks on the publishing path, ``jaxdp release`` with its ledger, through its
inputs (the data file, the poset file, the flags): each test asserts a guarantee the
command-line and ledger guides state, and failed on the code it was written against.

The releases run in-process (``jaxdp.cli.main``) with Laplace noise, whose exact
sampler compiles fastest."""

import json
import os

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.cli import release_query as cli_query


def _nhis1_rows(n=60):
  filters = np.asarray(jaxdp.Poset.nhis(1).filters())
  return filters[np.random.default_rng(0).integers(0, len(filters), n)]


def _release(data, *flags, poset="nhis1"):
  return main(
    [
      "release",
      "--poset",
      str(poset),
      "--noise",
      "laplace",
      "--data",
      str(data),
      *map(str, flags),
    ]
  )


def _charges(book) -> int:
  with jaxdp.Ledger(book, create=False) as ledger:
    return sum(s.state["answered"] for s in ledger.datasets())


def test_npy_answers_in_float16_are_checked_before_the_charge(tmp_path, capsys):
  """A .npy of 0/1 answers in float16 passed every check of the command line, was
  charged to the ledger, and only then refused by the release (float16 cannot hold
  counts): exit status 2 with eps 0.5 spent and nothing answered. The guide: every
  data row is checked before any budget is spent."""
  np.save(tmp_path / "a.npy", _nhis1_rows().astype(np.float16))
  book = tmp_path / "l.db"
  rc = _release(
    tmp_path / "a.npy", "--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1
  )
  err = capsys.readouterr().err
  charged = _charges(book) if book.exists() else 0
  assert (rc, charged) in ((0, 1), (2, 0)), (rc, charged, err)


def test_npy_answers_in_complex_are_a_one_line_error(tmp_path, capsys):
  """0/1 answers stored as complex numbers passed the command line's check (a
  complex 1 + 0j equals 1) and the ledger's fingerprint raised a TypeError: a
  traceback (an internal error) after the ledger was created, instead of a one-line
  error, exit status 2, before anything is read into the ledger."""
  np.save(tmp_path / "a.npy", _nhis1_rows().astype(np.complex64))
  book = tmp_path / "l.db"
  rc = _release(
    tmp_path / "a.npy", "--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1
  )
  assert rc == 2
  assert "complex" in capsys.readouterr().err
  assert not book.exists()


@pytest.mark.parametrize(
  "flags",
  [
    ("--eps", 0.5, "--dataset", "s"),  # a new dataset without --budget
    ("--eps", 0.5, "--dataset", "", "--budget", 1),  # not a dataset name
    ("--eps", 1e-6, "--dataset", "s", "--budget", 1),  # no exact noise that wide
    ("--eps", 2, "--dataset", "s", "--budget", 1),  # one release above the budget
  ],
  ids=["no-budget", "empty-name", "eps-too-small", "eps-above-budget"],
)
def test_a_refused_release_creates_no_ledger(tmp_path, capsys, flags):
  """A release refused before its charge still created the missing --ledger (its
  database and key file, and with a valid name the dataset): the next release then
  found an existing file and printed no notice, although the guide makes the notice
  "the sign that this release starts a fresh budget" (the ledger's files moved
  away)."""
  np.save(tmp_path / "a.npy", _nhis1_rows())
  book = tmp_path / "l.db"
  args = ("--ledger", book, *flags)
  if "--eps" in args and 1e-6 in args:
    args = ("--noise", "l2", *args)  # after --noise laplace: the last one counts
  assert _release(tmp_path / "a.npy", *args) == 2
  capsys.readouterr()
  assert not book.exists() and not (tmp_path / "l.db.key").exists()
  ok = ("--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1)
  assert _release(tmp_path / "a.npy", *ok) == 0
  assert f"created a new ledger at {book}" in capsys.readouterr().err


def test_a_question_named_respondents_keeps_every_count(tmp_path, capsys):
  """A poset file whose question is named ``respondents`` (the name of the count of
  rows): the release's JSON and table were dicts keyed by name, so the released
  number of respondents was dropped and the question's count published under its
  name; the printed intervals were shifted onto the wrong counts. Refuse such a
  poset, or keep every count."""
  poset = tmp_path / "p.json"
  poset.write_text(json.dumps({"requires": {"respondents": [], "b": ["respondents"]}}))
  (tmp_path / "a.csv").write_text("1,1\n" * 5 + "1,0\n" * 3 + "0,0\n" * 2)
  out = tmp_path / "rel.json"
  rc = _release(tmp_path / "a.csv", "--eps", 1, "--out", out, poset=poset)
  capsys.readouterr()
  if rc == 0:
    assert len(json.loads(out.read_text())["counts"]) == 3
    assert len((tmp_path / "rel.csv").read_text().splitlines()) == 4
  else:
    assert rc == 2 and not out.exists()


def test_more_rows_than_exact_counts_are_refused_before_the_charge(tmp_path, capsys):
  """2^24 + 1 rows (float32 counts are exact up to 2^24): the ledger charged the
  release, then the release refused it with an error that printed the exact number
  of rows, 16,777,217, an unnoised statistic of the data, which the guide says no
  error names. Refused before the charge, naming the limit only."""
  n = 2**24 + 1
  np.save(tmp_path / "a.npy", np.ones((n, 1), bool))
  poset = tmp_path / "one.json"
  poset.write_text(json.dumps({"requires": {"q": []}}))
  book = tmp_path / "l.db"
  flags = ("--eps", 1, "--ledger", book, "--dataset", "s", "--budget", 2)
  assert _release(tmp_path / "a.npy", *flags, poset=poset) == 2
  err = capsys.readouterr().err
  assert f"{n:,}" not in err and str(n) not in err
  assert not book.exists() or _charges(book) == 0


@pytest.mark.parametrize("edge", ["[0, 1.5]", "[0.9, 1]", '["0", "1"]', "[false, true]"])
def test_a_json_edge_that_is_not_a_pair_of_integers_is_refused(tmp_path, capsys, edge):
  """``{"d": 2, "edges": [[0, 1.5]]}``: each index went through ``int()``, which
  truncates 1.5 to 1 and reads "0" and true as numbers, so a malformed poset file
  was released as another questionnaire's skip logic. The text form and ``d``
  already take integers only."""
  poset = tmp_path / "p.json"
  poset.write_text(f'{{"d": 2, "edges": [{edge}]}}')
  (tmp_path / "a.csv").write_text("1,1\n0,1\n0,0\n")
  assert _release(tmp_path / "a.csv", "--eps", 1, poset=poset) == 2
  out = capsys.readouterr()
  assert out.out == "" and "edges[0]" in out.err


@pytest.mark.parametrize("flag", ["--existing-ledger", "--expect-head"])
def test_a_ledger_moved_after_the_check_is_never_created(
  tmp_path, capsys, monkeypatch, flag
):
  """The command line checked that --ledger exists, then opened it with
  ``Ledger(path)``, which creates a missing file: a ledger moved away between the
  two (another process, simulated here by the check finding it) was silently
  replaced by a fresh budget despite --existing-ledger or --expect-head."""
  np.save(tmp_path / "a.npy", _nhis1_rows())
  book = tmp_path / "l.db"
  monkeypatch.setattr(os.path, "lexists", lambda p: True)  # the check saw it
  extra = [flag] if flag == "--existing-ledger" else [flag, "1:" + "0" * 64]
  flags = ("--eps", 0.5, "--ledger", book, "--dataset", "s", "--budget", 1, *extra)
  assert _release(tmp_path / "a.npy", *flags) == 2
  capsys.readouterr()
  assert not book.exists()


def test_an_npz_archive_named_npy_is_a_one_line_error(tmp_path, capsys):
  """``np.load`` opens a zip archive whatever its name and returns an ``NpzFile``,
  which has no ``ndim``: an AttributeError traceback, an internal error, instead of
  the one-line error the guide promises for a bad file."""
  np.savez(tmp_path / "a.npz", a=_nhis1_rows())
  (tmp_path / "a.npz").rename(tmp_path / "a.npy")
  assert _release(tmp_path / "a.npy", "--eps", 1) == 2
  assert ".npy" in capsys.readouterr().err


def test_a_query_release_says_that_nothing_remembers_it(tmp_path, capsys):
  """The ledger guide: without a ledger "every `jaxdp release` spends a fresh eps,
  however often it runs on the same file. It says so on stderr." A release with
  --query (which takes no ledger) said nothing."""
  (tmp_path / "c.csv").write_text("1,0,1\n0,0,1\n1,0,0\n")
  flags = ("--query", "count", "--k", 2, "--noise", "laplace", "--eps", 1)
  assert main(["release", "--data", str(tmp_path / "c.csv"), *map(str, flags)]) == 0
  assert "nothing remembers this release" in capsys.readouterr().err


def test_the_footnote_never_states_less_eps_than_was_spent(tmp_path, capsys):
  """The footnote wrote eps with ``:g`` (six digits): a release at eps = 0.1234564
  was published as "eps = 0.123456", a stronger guarantee than the one given."""
  np.save(tmp_path / "a.npy", _nhis1_rows())
  out = tmp_path / "rel.json"
  assert _release(tmp_path / "a.npy", "--eps", "0.1234564", "--out", out) == 0
  capsys.readouterr()
  text = " ".join((tmp_path / "rel.footnote.txt").read_text().split())
  stated = float(text.split("(eps = ", 1)[1].split(",", 1)[0])
  assert stated >= 0.1234564


def test_an_expect_head_beyond_sqlite_integers_is_a_one_line_error(tmp_path, capsys):
  """``--expect-head`` takes any run of digits as the entry number; one past 2^63
  reached sqlite as a query parameter and raised OverflowError, a traceback instead
  of the one-line refusal of a head the ledger does not hold."""
  np.save(tmp_path / "a.npy", _nhis1_rows())
  book = tmp_path / "l.db"
  jaxdp.Ledger(book).close()
  head = "9" * 25 + ":" + "0" * 64
  flags = ("--eps", 1, "--ledger", book, "--dataset", "s", "--budget", 1)
  assert _release(tmp_path / "a.npy", *flags, "--expect-head", head) == 2
  assert "expect" in capsys.readouterr().err


def test_a_query_release_never_names_its_number_of_rows(tmp_path, capsys, monkeypatch):
  """2^24 + 1 count rows: the row check before the release raised the library's
  "data has 16,777,217 rows ...", the exact number of rows in the error text. The
  rows come from a stand-in for the CSV reader (parsing 2^24 lines takes long)."""
  n = 2**24 + 1
  monkeypatch.setattr(cli_query, "read_rows", lambda src: np.ones((n, 1), np.int64))
  flags = ("--query", "count", "--k", 1, "--noise", "laplace", "--eps", 1)
  assert main(["release", "--data", str(tmp_path / "c.csv"), *map(str, flags)]) == 2
  err = capsys.readouterr().err
  assert f"{n:,}" not in err and str(n) not in err


def test_the_head_of_an_empty_ledger_is_an_expect_head_it_holds(tmp_path, capsys):
  """``jaxdp ledger show`` prints an empty ledger's head as ``0:HASH`` and says to
  pass it as ``--expect-head``; ``Ledger(path, expect_head=(0, HASH))`` looked for
  an entry 0, which no ledger stores, and refused the ledger it came from."""
  book = tmp_path / "l.db"
  with jaxdp.Ledger(book) as ledger:
    head = ledger.head
  jaxdp.Ledger(book, expect_head=head).close()
  with pytest.raises(jaxdp.ledger.LedgerRollbackError):
    jaxdp.Ledger(book, expect_head=(0, "0" * 64))
