"""The publishable files `jaxdp release --out rel.json` writes beside it: the table
(rel.csv), the provenance (rel.provenance.json, rel.provenance.csv) and the footnote
(rel.footnote.txt).

The release itself (exact noise, ChaCha20 key) is tested by test_release.py; here a
stand-in adds fixed integer noise (one count is released negative), so that what is
written beside it is checked against values computed here."""

import csv
import io
import json
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main, release_files
from jaxdp.cli import release as cli_release
from jaxdp.cli.ledger_flags import format_head
from jaxdp.ledger import keyfile
from jaxdp.ledger.fingerprint import dataset_fingerprint
from jaxdp.ledger.summary import data_tag

NOISE = np.array([3, -4, 2, -1, 5])
NHIS1 = jaxdp.Poset.nhis(1)
PROVENANCE_FIELDS = {
  "document",
  "date",
  "dataset",
  "data_tag",
  "data_tag_note",
  "poset",
  "poset_fingerprint",
  "mechanism",
  "noise",
  "eps_spent",
  "delta",
  "dataset_eps_spent",
  "dataset_eps_budget",
  "ledger_head",
  "jaxdp_version",
  "key",
  "level",
  "interval_method",
  "interval_rule",
}


@pytest.fixture
def fixed_noise(monkeypatch):
  def fake_release(acct, mech, rows):
    return acct, np.asarray(mech.statistic(rows)) + NOISE

  monkeypatch.setattr(cli_release, "release", fake_release)
  monkeypatch.setattr(cli_release, "raise_if_refused", lambda acct, out: out)


def _rows(n=500):
  filters = np.asarray(NHIS1.filters())
  rows = filters[np.random.default_rng(1).integers(0, len(filters), n)]
  rows[:, 2:] = 0  # q3 and q4 are 0: q3 is released as -1
  return rows[np.asarray([NHIS1.is_filter(r) for r in rows])]


def _csv(path):
  return list(csv.reader(io.StringIO(path.read_text())))


def _argv(data, out, *flags):
  return [
    "release",
    "--poset",
    "nhis1",
    "--data",
    str(data),
    "--eps",
    "0.5",
    "--level",
    "0.9",
    "--error-samples",
    "2000",
    "--out",
    str(out),
    *flags,
  ]


def test_release_writes_a_table_provenance_and_footnote(tmp_path, fixed_noise, capsys):
  """A release wrote only its JSON: no table, no provenance, no footnote."""
  rows = _rows()
  np.save(tmp_path / "a.npy", rows)
  book = tmp_path / "l.db"
  ledger = ["--ledger", str(book), "--dataset", "survey", "--budget", "2"]
  before = datetime.now(timezone.utc).replace(microsecond=0)
  assert (
    main(_argv(tmp_path / "a.npy", tmp_path / "rel.json", "--consistent", *ledger)) == 0
  )
  after = datetime.now(timezone.utc)
  got = json.loads((tmp_path / "rel.json").read_text())
  truth = np.asarray(jaxdp.PosetCountMechanism(NHIS1, 0.5).statistic(rows))
  released = (truth + NOISE).tolist()
  assert released[3] == -1 and list(got["counts"].values()) == released

  # the table: one row per count, the JSON's counts, intervals on the count scale
  header, *table = _csv(tmp_path / "rel.csv")
  assert header[:8] == [
    "label",
    "released",
    "lower",
    "upper",
    "consistent",
    "consistent_lower",
    "consistent_upper",
    "level",
  ]
  assert [r[0] for r in table] == ["respondents", "q1", "q2", "q3", "q4"]
  bars = got["error_bars"]
  for r, c, below, above in zip(table, released, bars["lower"], bars["upper"]):
    assert int(r[1]) == c
    assert [int(r[2]), int(r[3])] == [max(c + int(below), 0), max(c + int(above), 0)]
    assert (
      float(r[7]) == 0.9
      and r[8] == f"{bars['method']}; coverage at least the level (exact)"
    )
    assert int(r[4]) == got["consistent"]["counts"][r[0]]
    assert [int(r[5]), int(r[6])] == got["consistent"]["intervals"][r[0]]
    assert "approximate" in r[9] and "not known" in r[9]
  assert table[3][2] == "0"  # q3: released -1, its interval starts at 0

  # the provenance, as JSON and as CSV
  prov = json.loads((tmp_path / "rel.provenance.json").read_text())
  assert set(prov) == PROVENANCE_FIELDS
  assert prov["jaxdp_version"] == jaxdp.__version__ and prov["eps_spent"] == 0.5
  date = datetime.strptime(prov["date"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
  assert before <= date <= after + timedelta(seconds=1)
  fp = dataset_fingerprint(rows, NHIS1)
  with jaxdp.Ledger(book) as led:
    assert prov["ledger_head"] == format_head(led.head) and led.head[0] > 0
    (summary,) = led.datasets()
  assert prov["data_tag"] == data_tag(keyfile.read(book), fp) == summary.tag
  assert prov["dataset"] == "survey" and prov["poset_fingerprint"] == fp["poset"]
  assert prov["dataset_eps_spent"] == 0.5 and prov["dataset_eps_budget"] == 2
  assert "ChaCha20" in prov["key"] and "no seed" in prov["key"]
  cells = dict(_csv(tmp_path / "rel.provenance.csv"))
  assert cells == {"field": "value", **{k: str(v) for k, v in prov.items()}}

  # the footnote: the level, the noise only, negative counts
  note = " ".join((tmp_path / "rel.footnote.txt").read_text().split())
  assert "at least 90%" in note and "only the noise added for privacy" in note
  assert "sampling error" in note and "raised to 0" in note and "approximate" in note

  # the data's plain fingerprint is published nowhere (anyone could test candidates)
  for f in tmp_path.glob("rel*"):
    assert fp["data"] not in f.read_text() and fp["dataset"] not in f.read_text()
  assert "rel.footnote.txt" in capsys.readouterr().err


def test_without_a_ledger_the_provenance_says_so(tmp_path, fixed_noise):
  np.save(tmp_path / "a.npy", _rows())
  assert main(_argv(tmp_path / "a.npy", tmp_path / "rel")) == 0  # no .json: rel.csv
  prov = json.loads((tmp_path / "rel.provenance.json").read_text())
  assert prov["ledger_head"] == "no ledger" and prov["data_tag"] is None
  assert prov["dataset"] is None and "never published" in prov["data_tag_note"]
  header, *table = _csv(tmp_path / "rel.csv")
  assert len(table) == 5 and all(r[4:7] == ["", "", ""] for r in table)
  assert "consistent" not in (tmp_path / "rel.footnote.txt").read_text()
  # a second release replaces the files the first one wrote
  assert main(_argv(tmp_path / "a.npy", tmp_path / "rel")) == 0


@pytest.mark.parametrize("victim", ["data", "foreign"])
def test_a_file_beside_out_is_replaced_only_if_release_wrote_it(
  tmp_path, fixed_noise, capsys, victim
):
  """`--data answers.csv --out answers.json` would have written the table over the
  data; any other file at a name beside --out is kept too, and nothing is charged."""
  np.savetxt(tmp_path / "answers.csv", _rows(), fmt="%d", delimiter=",")
  if victim == "foreign":
    (tmp_path / "rel.footnote.txt").write_text("our own notes\n")
  out = tmp_path / ("answers.json" if victim == "data" else "rel.json")
  book = tmp_path / "l.db"
  ledger = ["--ledger", str(book), "--dataset", "survey", "--budget", "2"]
  kept = {p: p.read_bytes() for p in tmp_path.iterdir()}
  assert main(_argv(tmp_path / "answers.csv", out, *ledger)) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1 and "Traceback" not in err
  assert (
    "is a file of the ledger or the --data file" in err
    or "not a release file written" in err
  )
  assert {p: p.read_bytes() for p in tmp_path.iterdir()} == kept  # no ledger either


def test_a_label_that_is_a_formula_is_not_one_in_the_csv(tmp_path, fixed_noise):
  """A question label from a poset file (`=HYPERLINK(...)`) was written as is: a
  spreadsheet opening the table runs it."""
  evil = '=HYPERLINK("http://x","y")'
  poset = {"requires": {evil: [], "q2": [evil], "q3": ["q2"], "+q4": [evil]}}
  (tmp_path / "p.json").write_text(json.dumps(poset))
  np.save(tmp_path / "a.npy", _rows())
  argv = _argv(tmp_path / "a.npy", tmp_path / "rel.json")
  argv[argv.index("nhis1")] = str(tmp_path / "p.json")
  assert main(argv) == 0
  labels = [r[0] for r in _csv(tmp_path / "rel.csv")[1:]]
  assert labels == ["respondents", "'" + evil, "q2", "q3", "'+q4"]
  assert int(_csv(tmp_path / "rel.csv")[4][1]) == -1  # a negative count stays a number


def test_a_line_break_in_a_cell_is_quoted_and_the_table_still_recognised():
  """A bare CR in a cell (csv quotes only the line terminator, LF) split the row in
  any CSV reader; a row with a CR or LF in a cell is quoted whole."""
  name = "a\r=1+1"
  payload = {
    "counts": {"respondents": 3, name: 1},
    "intervals": {"respondents": [1, 5], name: [0, 2]},
    "level": 0.9,
    "error_bars": {"method": "exact", "num_samples": 0},
  }
  text = release_files.table(payload)
  rows = list(csv.reader(io.StringIO(text, newline="")))
  assert [r[0] for r in rows] == ["label", "respondents", name]
  assert all(len(r) == len(release_files.TABLE_COLUMNS) for r in rows)
  assert release_files.KINDS["table"][1](text)


@pytest.mark.parametrize(
  "text",
  [
    ",".join(release_files.TABLE_COLUMNS) + "\n",  # the header alone
    ",".join(release_files.TABLE_COLUMNS) + "\nPRECIOUS,not written by jaxdp\n",
    ",".join(release_files.TABLE_COLUMNS) + "\n" + "x," * 9 + "x\n",  # no numbers
  ],
)
def test_a_csv_that_only_begins_with_the_header_is_not_a_table(text):
  assert not release_files.KINDS["table"][1](text)
