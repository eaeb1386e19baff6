"""The study commands of the command line, run in this process at small sizes."""

import json

import numpy as np
import pytest

from jaxdp.cli import main, outputs


@pytest.mark.slow
def test_poset_study_writes_files(tmp_path, capsys):
  rc = main(
    [
      "poset",
      "--poset",
      "nhis1",
      "--samples",
      "20000",
      "--mechanisms",
      "poset",
      "--insertion-samples",
      "500",
      "--out",
      str(tmp_path),
      "--no-plot",
    ]
  )
  assert rc == 0
  out = capsys.readouterr().out
  assert "nhis1" in out and "exact ratio" in out
  data = json.loads((tmp_path / "poset_nhis1.json").read_text())  # named after input
  assert data["results"][0]["d"] == 4
  assert (tmp_path / "poset_nhis1.csv").exists() and (tmp_path / "poset_nhis1.md").exists()


@pytest.mark.slow
def test_sample_streams_and_structure_reports_empty_groups(tmp_path, capsys):
  out = tmp_path / "z.npy"
  assert (
    main(
      [
        "sample",
        "--poset",
        "nhis1",
        "--samples",
        "1e4",
        "--chunk",
        "3000",
        "--out",
        str(out),
      ]
    )
    == 0
  )
  z = np.load(out)
  assert z.shape == (10_000, 5) and np.isfinite(z).all() and len(np.unique(z[:, 1])) > 9000
  assert (
    main(
      [
        "structure",
        "--posets",
        "5",
        "--samples",
        "100",
        "--insertion-samples",
        "0",
        "--no-plot",
        "--out",
        str(tmp_path),
      ]
    )
    == 0
  )
  captured = capsys.readouterr()
  assert "lower --min-group" in captured.out
  assert "structure.csv" not in captured.err  # no rows: no CSV, and none listed


def test_unwritable_out_is_refused_before_any_work(tmp_path, capsys):
  assert (
    main(
      [
        "poset",
        "--poset",
        "nhis1",
        "--samples",
        "100",
        "--no-plot",
        "--insertion-samples",
        "0",
        "--out",
        "/dev/null/x",
      ]
    )
    == 2
  )
  assert "cannot write" in capsys.readouterr().err
  assert (
    main(["sample", "--poset", "nhis1", "--samples", "100", "--out", str(tmp_path)]) == 2
  )
  assert "is a directory" in capsys.readouterr().err


def test_reads_poset_files(tmp_path, capsys):
  (tmp_path / "p.json").write_text(json.dumps({"d": 3, "edges": [[0, 1], [0, 2]]}))
  (tmp_path / "p.txt").write_text("1 1 1\n0 1 0\n0 0 1\n")
  for f in ("p.json", "p.txt"):
    assert main(["sample", "--poset", str(tmp_path / f), "--samples", "100"]) == 0
  assert "shape (100, 4)" in capsys.readouterr().out


@pytest.mark.parametrize(
  "argv,msg",
  [
    (["poset", "--poset", "nope.json"], "--poset: no such file: nope.json"),
    (["poset", "--poset", "random:x"], "random:D"),
    (["poset", "--poset", "random:4:1:2"], "random:D"),
    (["poset", "--poset", "questionnaire:x"], "questionnaire:D"),
    (["poset", "--poset", "questionnaire:600"], "1 <= D <= 512"),
    (["poset", "--poset", "random:23"], "1 <= D <= 22"),
    (["nhis", "--sections", "4"], "--sections"),
    (["nhis", "--mechanisms", "poset,gauss"], "unknown 'gauss'"),
    (["nhis", "--coordinator", "localhost:1"], "go together"),
  ],
)
def test_bad_options_one_line_error(argv, msg, tmp_path, capsys):
  assert main(argv + ["--no-plot", "--out", str(tmp_path)]) == 2
  err = capsys.readouterr().err.strip()
  assert msg in err and "\n" not in err


def test_bad_poset_files(tmp_path, capsys):
  (tmp_path / "cyc.json").write_text(json.dumps({"d": 2, "edges": [[0, 1], [1, 0]]}))
  (tmp_path / "broken.json").write_text("{oops")
  for f, msg in [("cyc.json", "cycle"), ("broken.json", "invalid JSON")]:
    assert main(["sample", "--poset", str(tmp_path / f)]) == 2
    err = capsys.readouterr().err
    assert msg in err and err.startswith("jaxdp: error: --poset: ")
  assert main(["sample", "--poset", str(tmp_path)]) == 2
  assert "--poset: not a file" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize("command", ["poset", "sample"])
def test_out_inside_results_needs_the_flag(command, tmp_path, capsys, monkeypatch):
  """`--out results/...` rewrote the published (tracked) figures without asking."""
  results = tmp_path / "results"
  (results / "nhis").mkdir(parents=True)
  (results / "nhis" / "poset_nhis1.md").write_text("published\n")
  monkeypatch.setattr(outputs, "RESULTS_DIR", results)
  out = results / "nhis" / ("z.npy" if command == "sample" else "")
  # the sizes of the tests above, whose compiled kernels this process reuses
  argv = [command, "--poset", "nhis1", "--out", str(out)]
  if command == "poset":
    argv += ["--samples", "20000", "--insertion-samples", "0", "--mechanisms", "poset"]
    argv += ["--no-plot"]
  else:
    argv += ["--samples", "1e4", "--chunk", "3000"]
  assert main(argv) == 2
  assert "--overwrite-results" in capsys.readouterr().err
  assert sorted(p.name for p in (results / "nhis").iterdir()) == ["poset_nhis1.md"]
  assert main(argv + ["--overwrite-results"]) == 0
  written = "z.npy" if command == "sample" else "poset_nhis1.json"
  assert (results / "nhis" / written).exists()
