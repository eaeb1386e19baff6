"""``jaxdp release --query``: end to end on tiny CSV files, and every bad combination
refused (exit 2) before the data is read or anything is charged."""

import json
import re
from argparse import Namespace

import numpy as np
import pytest

from jaxdp.cli import main
from jaxdp.cli import release_query as cli_query


@pytest.fixture
def untouched(monkeypatch):
  """Fails the test if the data is read or an accountant is created."""

  def refuse(*args, **kwargs):
    raise AssertionError("read or charged")

  monkeypatch.setattr(cli_query, "read_rows", refuse)
  monkeypatch.setattr(cli_query.Accountant, "create", refuse)


def _csv(tmp_path, text, name="rows.csv"):
  path = tmp_path / name
  path.write_text(text)
  return str(path)


def _totals(out):
  return [int(m) for m in re.findall(r"^\s+\w+ \d+:\s+(-?\d+)", out, flags=re.M)]


# Three rows of d = 4 votes and of d = 6 counts and sums: the sizes of
# test_queries_default_to_their_exact_ball_noise's releases (each size compiles its
# own noise and error-bar programs, shared by the two tests)
@pytest.mark.parametrize(
  "query, text, truth",
  [
    ("vote", "a,b,c,d\n0,1,2,3\n2,1,0,3\n1,0,3,2\n", [3, 2, 5, 8]),
    ("count", "1,1,0,0,0,0\n0,1,0,0,0,1\n0,0,0,1,0,0\n", [1, 2, 0, 1, 0, 1]),
    ("sum", "1,-1,0,0,0,0\n0,0,1,0,0,-1\n0,-1,-1,0,0,0\n", [1, -2, 0, 0, 0, -1]),
  ],
)
def test_release_prints_integer_totals_near_the_truth(tmp_path, capsys, query, text, truth):
  k = [] if query == "vote" else ["--k", "2"]
  argv = ["release", "--query", query, *k, "--data", _csv(tmp_path, text), "--eps", "50"]
  assert main(argv + ["--error-samples", "1000"]) == 0
  out = capsys.readouterr().out
  assert "exact integers, safe to publish" in out
  totals = _totals(out)
  assert len(totals) == len(truth)
  # |noise| at eps = 50 (the query ball's noise at scale 1 / 50): below 2 w.p. >
  # 1 - 1e-6 (its 0.999999 intervals from 100,000 simulated vectors are [-1, 1])
  assert np.max(np.abs(np.subtract(totals, truth))) <= 2


@pytest.mark.parametrize(
  "flags, match",
  [
    (["--query", "vote", "--k", "2"], r"--query vote does not take --k"),
    (["--query", "count"], r"--query count needs --k"),
    (["--query", "sum", "--k", "1", "--poset", "nhis1"], r"does not take --poset"),
    (
      ["--query", "count", "--k", "1", "--noise", "poset"],
      r"takes --noise ball, linf, l2 or laplace \(exact integer noise\); --noise poset",
    ),
    (
      ["--query", "sum", "--k", "1", "--noise", "poset"],
      r"--query sum takes --noise ball, linf, l2 or laplace",
    ),
    (["--query", "count", "--k", "1", "--consistent"], r"does not take --consistent"),
    (["--query", "count", "--k", "1", "--on-invalid", "clip"], r"--on-invalid clip"),
    (["--query", "count", "--k", "1", "--ledger", "x.db"], r"does not take --ledger"),
    (["--query", "count", "--k", "1", "--out", "DATA"], r"is the --data file"),
  ],
)
def test_bad_combinations_exit_2_before_reading(tmp_path, capsys, untouched, flags, match):
  data = _csv(tmp_path, "1,0\n")
  flags = [data if f == "DATA" else f for f in flags]
  argv = ["release", *flags, "--data", data, "--eps", "1"]
  assert main(argv) == 2
  assert re.search(match, capsys.readouterr().err)


def test_out_writes_the_release_as_json(tmp_path, capsys):
  out = tmp_path / "rel.json"
  data = _csv(tmp_path, "0,1,2\n2,1,0\n")
  argv = ["release", "--query", "vote", "--data", data, "--eps", "50", "--out", str(out)]
  assert main(argv + ["--error-samples", "1000", "--noise", "linf"]) == 0
  payload = json.loads(out.read_text())
  assert payload["query"] == "vote" and payload["noise"] == "linf"
  totals = list(payload["totals"].values())
  assert np.max(np.abs(np.subtract(totals, [2, 2, 2]))) <= 2
  for (lo, hi), t in zip(payload["intervals"].values(), totals):
    assert lo <= t <= hi
  assert main(argv + ["--error-samples", "1000"]) == 0  # its own release: replaced


def test_queries_default_to_their_exact_ball_noise(tmp_path, capsys):
  """With the smallest expected squared error (sum: d = 6, k = 2; count: d = 6,
  k = 2; vote: d = 4; below the l_inf, l_2 and Laplace baselines), the ball's exact
  noise is the default; --noise ball is refused for poset counts."""
  data = _csv(tmp_path, "1,-1,0,0,0,0\n0,0,1,0,0,0\n0,-1,0,0,1,0\n")
  argv = ["release", "--query", "sum", "--k", "2", "--data", data, "--eps", "50"]
  assert cli_query.best_noise(Namespace(query="sum", k=2, eps=50.0), 6) == "ball"
  assert main(argv + ["--error-samples", "1000"]) == 0
  out = capsys.readouterr().out
  assert "ball noise, exact integers, safe to publish" in out
  assert np.max(np.abs(np.subtract(_totals(out), [1, -2, 1, 0, 1, 0]))) <= 2
  ticks = _csv(tmp_path, "1,1,0,0,0,0\n0,0,1,0,0,0\n0,1,0,0,1,0\n", "ticks.csv")
  argv = ["release", "--query", "count", "--k", "2", "--data", ticks, "--eps", "50"]
  assert cli_query.best_noise(Namespace(query="count", k=2, eps=50.0), 6) == "ball"
  assert main(argv + ["--error-samples", "1000"]) == 0  # the count ball's, likewise
  out = capsys.readouterr().out
  assert "ball noise, exact integers" in out
  assert np.max(np.abs(np.subtract(_totals(out), [1, 2, 1, 0, 1, 0]))) <= 2
  votes = _csv(tmp_path, "0,1,2,3\n3,2,1,0\n1,0,3,2\n", "votes.csv")
  argv = ["release", "--query", "vote", "--data", votes, "--eps", "50"]
  assert main(argv + ["--error-samples", "1000"]) == 0  # the vote ball's, likewise
  out = capsys.readouterr().out
  assert "ball noise, exact integers" in out
  assert np.max(np.abs(np.subtract(_totals(out), [4, 3, 6, 5]))) <= 2
  argv = ["release", "--poset", "nhis1", "--noise", "ball", "--data", data, "--eps", "1"]
  assert main(argv) == 2
  assert "--noise ball is the query's own ball" in capsys.readouterr().err


def test_k_without_query_is_refused(tmp_path, capsys):
  argv = ["release", "--poset", "nhis1", "--k", "2", "--data", "nowhere.csv", "--eps", "1"]
  assert main(argv) == 2
  assert "--k is an option of --query" in capsys.readouterr().err


@pytest.mark.parametrize(
  "query, text, match",
  [
    ("count", "1,1,1\n", r"data row 0 is not a count row .* 3 ones, more than k = 2"),
    ("count", "1,0,0\n0,2,0\n", r"data row 1 is not a count row"),
    ("vote", "0,1,2\n0,0,2\n", r"data row 1 is not a vote row"),
    ("sum", "1,0,0\nnan,0,0\n", r"row 1, column 0: an entry must be a whole number"),
    ("sum", "1,0,0\n0.5,0,0\n", r"row 1, column 0: an entry must be a whole number"),
    ("count", "1,0,0\n1,0\n", r"row 1 has 2 columns, row 0 has 3"),
    ("count", "1\n", r"k must be between 1 and d = 1"),
    ("vote", "0\n", r"d must be >= 2"),
  ],
)
def test_bad_rows_exit_2_before_the_charge(
  tmp_path, capsys, monkeypatch, query, text, match
):
  def refuse(*args, **kwargs):
    raise AssertionError("charged")

  monkeypatch.setattr(cli_query.Accountant, "create", refuse)
  k = [] if query == "vote" else ["--k", "2"]
  argv = ["release", "--query", query, *k, "--data", _csv(tmp_path, text), "--eps", "1"]
  assert main(argv) == 2
  err = capsys.readouterr().err
  assert re.search(match, err), err


def test_advise_query_prints_the_comparison(capsys):
  argv = ["advise", "--query", "count", "--d", "4", "--k", "2", "--eps", "1"]
  assert main(argv + ["--samples", "1000"]) == 0
  out = capsys.readouterr().out
  assert "K-norm, count ball *" in out
  assert re.search(r"Laplace \(l_1\)\s+32\s", out)  # 2 d k^2 / eps^2, exact


@pytest.mark.parametrize(
  "flags, match",
  [
    (["--query", "vote"], r"--query vote needs --d"),
    (["--query", "sum", "--d", "3"], r"--query sum needs --k"),
    (["--query", "vote", "--d", "3", "--k", "1"], r"--query vote does not take --k"),
    (
      ["--query", "count", "--d", "3", "--k", "1", "--poset", "nhis1"],
      r"does not take --poset",
    ),
    ([], r"advise needs --poset .* or --query"),
    (["--poset", "nhis1", "--d", "3"], r"--d and --k are options of --query"),
  ],
)
def test_advise_bad_combinations_exit_2(capsys, flags, match):
  assert main(["advise", *flags, "--eps", "1"]) == 2
  assert re.search(match, capsys.readouterr().err)
