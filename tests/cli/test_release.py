"""`jaxdp release`: checks before the budget is spent, and messages that name a row and
the rule it breaks, never the row's values."""

import json

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main, outputs
from jaxdp.cli import release as cli_release
from jaxdp.experiments.questionnaire import synthetic_questionnaire


def _answers(n=3000, seed=0):
  filters = np.asarray(jaxdp.Poset.nhis(1).filters())
  return filters[np.random.default_rng(seed).integers(0, len(filters), n)]


def _err(capsys, *hide):
  """stderr, checked to be one line, with the given paths removed."""
  err = capsys.readouterr().err.strip()
  assert "\n" not in err, err
  for h in hide:
    err = err.replace(str(h), "PATH")
  return err


def _refuse_release(*args, **kwargs):
  raise AssertionError("the release ran")


@pytest.fixture
def no_release(monkeypatch):
  """Fails the test if the budget is touched (an accountant is created)."""

  def refuse(*args, **kwargs):
    raise AssertionError("the accountant was created")

  monkeypatch.setattr(cli_release.Accountant, "create", refuse)


@pytest.mark.slow
def test_release_publishes_exact_integer_counts(tmp_path, capsys):
  """Integer counts near the truth (|noise| < 40 at eps = 2), JSON written."""
  rows = _answers()
  np.save(tmp_path / "a.npy", rows)
  out = tmp_path / "sub" / "rel.json"
  assert (
    main(
      [
        "release",
        "--poset",
        "nhis1",
        "--data",
        str(tmp_path / "a.npy"),
        "--eps",
        "2",
        "--out",
        str(out),
      ]
    )
    == 0
  )
  got = json.loads(out.read_text())["counts"]
  truth = [3000] + rows.sum(0).tolist()
  assert list(got) == ["respondents", "q1", "q2", "q3", "q4"]
  assert all(isinstance(v, int) for v in got.values())
  assert all(abs(g - t) < 40 for g, t in zip(got.values(), truth))


@pytest.mark.parametrize("out", ["/dev/null/rel.json", "{tmp}"])
def test_unwritable_out_is_refused_before_the_data_is_read(
  tmp_path, capsys, no_release, monkeypatch, out
):
  """`--out` was written only after the release had spent the budget."""
  out = out.format(tmp=tmp_path)  # a path under a file, or a directory
  np.save(tmp_path / "a.npy", _answers(50))

  def read(*args):
    raise AssertionError("the data was read")

  monkeypatch.setattr(cli_release, "load_rows", read)
  assert (
    main(
      [
        "release",
        "--poset",
        "nhis1",
        "--data",
        str(tmp_path / "a.npy"),
        "--eps",
        "1",
        "--out",
        out,
      ]
    )
    == 2
  )
  assert f"--out {out}: " in _err(capsys)


def test_not_a_filter_names_the_row_the_rule_and_the_flag(tmp_path, capsys, no_release):
  """The hint named the Python argument (on_invalid='clip') and the message echoed
  the row's answers."""
  rows = _answers(40)
  rows[17] = [0, 1, 1, 0]  # q2 without q1
  path = tmp_path / "a.csv"
  np.savetxt(path, rows, fmt="%d", delimiter=",", header="q1,q2,q3,q4", comments="")
  assert main(["release", "--poset", "nhis1", "--data", str(path), "--eps", "1"]) == 2
  err = _err(capsys, path)
  assert "such rows" not in err
  assert "row 17 is not a filter" in err and "'q2' is 1 but 'q1', which it requires" in err
  assert "--on-invalid clip" in err and "on_invalid" not in err
  assert "[0, 1, 1, 0]" not in err and "0, 1, 1, 0" not in err and "0,1,1,0" not in err


@pytest.mark.slow
def test_clip_releases_what_raise_refuses(tmp_path):
  rows = _answers(40)
  rows[3] = [0, 1, 0, 0]
  np.save(tmp_path / "a.npy", rows)
  out = tmp_path / "rel.json"
  assert (
    main(
      [
        "release",
        "--poset",
        "nhis1",
        "--data",
        str(tmp_path / "a.npy"),
        "--eps",
        "1",
        "--on-invalid",
        "clip",
        "--out",
        str(out),
      ]
    )
    == 0
  )
  assert json.loads(out.read_text())["eps"] == 1.0


@pytest.mark.parametrize("suffix", [".csv", ".npy"])
def test_an_answer_other_than_0_and_1_is_named_by_row_and_column(
  tmp_path, capsys, no_release, suffix
):
  rows = _answers(10).astype(np.int64)
  rows[4] = [1, 1, 98765, 0]
  path = tmp_path / f"a{suffix}"
  if suffix == ".npy":
    np.save(path, rows)
  else:
    np.savetxt(path, rows, fmt="%d", delimiter=",")
  assert main(["release", "--poset", "nhis1", "--data", str(path), "--eps", "1"]) == 2
  err = _err(capsys, path)
  assert "row 4, column 2: an answer must be 0 or 1" in err and "98765" not in err


def test_missing_files_are_named(tmp_path, capsys, no_release):
  np.save(tmp_path / "a.npy", _answers(10))
  missing = tmp_path / "nope.json"
  assert (
    main(
      ["release", "--poset", str(missing), "--data", str(tmp_path / "a.npy"), "--eps", "1"]
    )
    == 2
  )
  assert f"--poset: no such file: {missing}" in _err(capsys)
  assert (
    main(["release", "--poset", "nhis1", "--data", str(tmp_path / "no.csv"), "--eps", "1"])
    == 2
  )
  assert f"--data: no such file: {tmp_path / 'no.csv'}" in _err(capsys)


def test_wrong_columns_and_empty_data(tmp_path, capsys, no_release):
  rows = _answers(10)
  np.savetxt(tmp_path / "bad.csv", rows[:, :3], fmt="%d", delimiter=",")
  (tmp_path / "empty.csv").write_text("q1,q2,q3,q4\n")
  assert (
    main(["release", "--poset", "nhis1", "--data", str(tmp_path / "bad.csv"), "--eps", "1"])
    == 2
  )
  assert "expected 4 columns" in _err(capsys)
  assert (
    main(
      ["release", "--poset", "nhis1", "--data", str(tmp_path / "empty.csv"), "--eps", "1"]
    )
    == 2
  )
  assert "holds no rows" in _err(capsys)


def test_out_inside_results_needs_the_flag(tmp_path, capsys, monkeypatch):
  results = tmp_path / "results"
  results.mkdir()
  monkeypatch.setattr(outputs, "RESULTS_DIR", results)
  np.save(tmp_path / "a.npy", _answers(50))
  argv = [
    "release",
    "--poset",
    "nhis1",
    "--data",
    str(tmp_path / "a.npy"),
    "--eps",
    "1",
    "--out",
    str(results / "rel.json"),
  ]
  assert main(argv) == 2
  assert "--overwrite-results" in _err(capsys) and not (results / "rel.json").exists()
  assert main(argv + ["--overwrite-results"]) == 0
  assert (results / "rel.json").exists()


def test_out_may_not_overwrite_the_data(tmp_path, capsys, no_release):
  """``--out answers.csv --data answers.csv`` replaced the data with the release."""
  data = tmp_path / "answers.csv"
  np.savetxt(data, _answers(20), fmt="%d", delimiter=",")
  before = data.read_bytes()
  argv = ["release", "--poset", "nhis1", "--data", str(data), "--eps", "1", "--out"]
  assert main([*argv, str(data)]) == 2
  assert "is the --data file" in _err(capsys)
  assert data.read_bytes() == before


@pytest.mark.slow
def test_release_of_a_300_question_questionnaire_from_a_csv(tmp_path):
  """A 300-question synthetic questionnaire (series-parallel, not a forest, far
  beyond the integer-rank path) written as a poset file, 2000 answers as a CSV with
  a header: released end to end, every count an integer near the truth (|noise| <
  2000 at eps = 1: the K-norm noise has scale sensitivity / eps = 1 per vertex).
  The intervals, which this test does not check, are simulated from the fewest noise
  vectors the command allows (1,000: one compiled chunk of poset-ball points)."""
  q = synthetic_questionnaire(0, 300)
  order = np.asarray(q.order)
  names = [f"q{i}" for i in range(300)]
  spec = {"order": order.astype(int).tolist(), "labels": names}
  (tmp_path / "q300.json").write_text(json.dumps(spec))
  rows = order[np.random.default_rng(1).integers(0, 300, 2000)].astype(int)  # up-sets
  header = ",".join(names)
  np.savetxt(tmp_path / "a.csv", rows, fmt="%d", delimiter=",", header=header, comments="")
  out = tmp_path / "rel.json"
  args = ["release", "--poset", str(tmp_path / "q300.json"), "--data"]
  args += [str(tmp_path / "a.csv"), "--eps", "1", "--error-samples", "1000"]
  assert main([*args, "--out", str(out)]) == 0
  got = list(json.loads(out.read_text())["counts"].values())
  truth = [2000] + rows.sum(0).tolist()
  assert len(got) == 301 and all(isinstance(v, int) for v in got)
  assert all(abs(g - t) < 2000 for g, t in zip(got, truth))
  assert sum(g != t for g, t in zip(got, truth)) > 250  # noise on (almost) every count


@pytest.mark.parametrize("target", ["ledger", "key", "hard link", "symlink", "poset"])
def test_out_may_not_overwrite_any_file_but_a_release(tmp_path, capsys, no_release, target):
  """``--out`` could name the ledger, its key file or a hard link to the data (only
  the data's own path was refused), and the release JSON replaced it."""
  data = tmp_path / "answers.csv"
  np.savetxt(data, _answers(20), fmt="%d", delimiter=",")
  victim = {
    "ledger": tmp_path / "l.db",
    "key": tmp_path / "l.db.key",
    "poset": tmp_path / "p.json",
  }.get(target, tmp_path / "link.csv")
  if target == "hard link":
    victim.hardlink_to(data)
  elif target == "symlink":
    victim.symlink_to(data)
  else:
    victim.write_bytes(b"SQLite format 3\x00" if target == "ledger" else b'{"d": 1}')
  before = victim.read_bytes()
  argv = ["release", "--poset", "nhis1", "--data", str(data), "--eps", "1"]
  assert main([*argv, "--out", str(victim)]) == 2
  err = _err(capsys, victim, data)
  assert "--out PATH" in err and ("is not a release" in err or "is the --data" in err)
  assert victim.read_bytes() == before and data.exists()


def test_out_may_overwrite_an_earlier_release(tmp_path, monkeypatch):
  monkeypatch.setattr(cli_release, "release", lambda acct, mech, rows: (acct, None))
  monkeypatch.setattr(cli_release, "raise_if_refused", lambda acct, out: np.zeros(5))
  data = tmp_path / "a.npy"
  np.save(data, _answers(20))
  out = tmp_path / "rel.json"
  argv = ["release", "--poset", "nhis1", "--data", str(data), "--eps", "1", "--out"]
  assert main([*argv, str(out)]) == 0
  first = json.loads(out.read_text())
  assert first["mechanism"].startswith("exact integer K-norm noise")
  assert main([*argv, str(out)]) == 0


def test_a_wrong_npy_shape_does_not_show_the_row_count(tmp_path, capsys, no_release):
  for shape in [(137, 5), (137, 4, 1)]:
    np.save(tmp_path / "a.npy", np.zeros(shape, np.int8))
    argv = ["release", "--poset", "nhis1", "--data", str(tmp_path / "a.npy"), "--eps", "1"]
    assert main(argv) == 2
    err = _err(capsys, tmp_path / "a.npy")
    assert "137" not in err and "expected a 2-D array of 4 columns" in err


def test_a_misspelt_prerequisite_is_one_line_error_and_charges_nothing(
  tmp_path, capsys, monkeypatch
):
  """The misspelt name was a new question: the release spent the budget on the wrong
  poset (and the data had one column too few). The ledger's dataset keeps its head."""
  monkeypatch.setattr(cli_release, "release", _refuse_release)
  (tmp_path / "p.json").write_text(
    '{"requires": {\n "q1": [],\n "q2": ["q1"],\n "q3": ["q2"],\n "q4": ["q11"]\n}}'
  )
  np.save(tmp_path / "a.npy", _answers(20))
  book = tmp_path / "l.db"
  with jaxdp.Ledger(book) as ledger:
    ledger.accountant("survey", _answers(20), 1.0, poset=jaxdp.Poset.nhis(1))
    head = ledger.head
  argv = ["release", "--poset", str(tmp_path / "p.json"), "--data", str(tmp_path / "a.npy")]
  flags = ["--eps", "1", "--ledger", str(book), "--dataset", "survey"]
  assert main([*argv, *flags]) == 2
  err = _err(capsys, tmp_path / "p.json")
  assert err.startswith("jaxdp: error: --poset: PATH: line 5: 'q11', a prerequisite of")
  assert "did you mean 'q1'?" in err and "Traceback" not in err
  with jaxdp.Ledger(book) as ledger:
    assert ledger.head == head and ledger.datasets()[0].charges == 0


def test_release_without_poset_is_an_error_listing_the_built_in_posets(
  tmp_path, capsys, no_release
):
  """--poset defaulted to nhis3: data of another questionnaire with 15 columns was
  released as NHIS-3's counts."""
  np.save(tmp_path / "a.npy", np.zeros((20, 15), np.int8))
  assert main(["release", "--data", str(tmp_path / "a.npy"), "--eps", "1"]) == 2
  err = _err(capsys)
  assert "release needs --poset" in err and "nhis1, nhis2, nhis3" in err
  assert "no default" in err
