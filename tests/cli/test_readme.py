"""Every command of the README and of docs/guides/cli.md, run at a small size in a scratch
directory (so that the default out/<command>/ lands there).

``--devices``, which needs a fresh interpreter, runs as a ``python -m jaxdp`` subprocess:
the entry point, its exit status and its streams (the README's first command, ``python
-m jaxdp``, runs in-process in tests/cli/test_commands.py). The others run
``jaxdp.cli.main`` in this process (what the command computes and writes is the same;
the kernels this process has compiled are reused)."""

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.cli import studies as cli_studies

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 900  # generous: compilation on a loaded 2-core machine

pytestmark = pytest.mark.slow


def _jaxdp(cwd, *args):
  """``python -m jaxdp ARGS`` in ``cwd``: checks exit status 0; returns the process."""
  env = dict(
    os.environ,
    PYTHONUNBUFFERED="1",
    PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
  )
  r = subprocess.run(
    [sys.executable, "-m", "jaxdp", *args],
    cwd=cwd,
    env=env,
    capture_output=True,
    text=True,
    timeout=TIMEOUT,
  )
  assert r.returncode == 0, r.stderr[-3000:]
  return r


def _jaxdp_here(monkeypatch, capsys, cwd, *args):
  """``jaxdp ARGS`` run in this process in ``cwd``: checks exit status 0; returns the
  captured stdout and stderr."""
  monkeypatch.chdir(cwd)
  rc = main(list(args))
  captured = capsys.readouterr()
  assert rc == 0, captured.err[-3000:]
  return captured


def _results(path):
  return json.loads(Path(path).read_text())


def test_nhis_with_eps_and_mechanisms(tmp_path, monkeypatch, capsys):
  """python -m jaxdp nhis --samples 1e7 --eps 0.5 --mechanisms poset,linf"""
  _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "nhis",
    "--samples",
    "2e3",
    "--eps",
    "0.5",
    "--mechanisms",
    "poset,linf",
    "--sections",
    "1",
    "--insertion-samples",
    "50",
    "--no-plot",
  )
  (row,) = _results(tmp_path / "out" / "nhis" / "nhis.json")["results"]
  assert row["d"] == 4 and row["samples"] == 2000 and 0 < row["exact_ratio"] <= 1
  assert "mse_linf" in row and "mse_poset" in row and "mse_l2" not in row
  assert (tmp_path / "out" / "nhis" / "nhis.md").read_text().count("| nhis1 |") == 1


def test_nhis_with_the_chacha8_generator(tmp_path, monkeypatch, capsys):
  """python -m jaxdp nhis --generator chacha8"""
  _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "nhis",
    "--generator",
    "chacha8",
    "--samples",
    "2e3",
    "--sections",
    "1",
    "--insertion-samples",
    "0",
    "--mechanisms",
    "poset",
    "--no-plot",
  )
  (row,) = _results(tmp_path / "out" / "nhis" / "nhis.json")["results"]
  assert 0 < row["exact_ratio"] <= 1


def test_poset_random_writes_under_out_poset(tmp_path, monkeypatch, capsys):
  """python -m jaxdp poset --poset random:12:7  (writes out/poset/poset_random12.*)

  (scaled down: a random poset of 5 elements, 500 draws)"""
  _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "poset",
    "--poset",
    "random:5:7",
    "--samples",
    "500",
    "--insertion-samples",
    "20",
    "--mechanisms",
    "poset",
    "--no-plot",
  )
  out = tmp_path / "out" / "poset"
  (row,) = _results(out / "poset_random5.json")["results"]
  assert row["d"] == 5 and 0 < row["exact_ratio"] <= 1
  assert (out / "poset_random5.csv").exists() and (out / "poset_random5.md").exists()


def test_dims_into_a_results_folder(tmp_path, monkeypatch, capsys):
  """python -m jaxdp dims --out results/dims --overwrite-results"""
  _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "dims",
    "--out",
    "results/dims",
    "--overwrite-results",
    "--dims",
    "4,5",
    "--posets",
    "2",
    "--samples",
    "500",
    "--insertion-samples",
    "20",
    "--no-plot",
  )
  data = _results(tmp_path / "results" / "dims" / "dims.json")
  assert [g["d"] for g in data["results"]] == [4, 5] and len(data["per_poset"]) == 4
  assert all(0 < g["exact_ratio"] <= 1 and g["posets"] == 2 for g in data["results"])


def test_structure_into_a_results_folder(tmp_path, monkeypatch, capsys):
  """python -m jaxdp structure --out results/structure --overwrite-results"""
  _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "structure",
    "--out",
    "results/structure",
    "--overwrite-results",
    "--d",
    "4",
    "--posets",
    "12",
    "--min-group",
    "1",
    "--samples",
    "500",  # d = 4 and 500 draws a poset: the sampler compiled for the dims command
    "--insertion-samples",
    "0",
    "--no-plot",
  )
  data = _results(tmp_path / "results" / "structure" / "structure.json")
  assert sum(g["posets"] for g in data["results"]["by_depth"]) == 12
  assert len(data["per_poset"]) == 12


def test_the_repositorys_results_are_not_rewritten_without_the_flag(monkeypatch, capsys):
  """python -m jaxdp dims --out results/dims, from the repository: refused, at once."""
  monkeypatch.chdir(ROOT)
  before = {p: p.stat().st_mtime_ns for p in (ROOT / "results").rglob("*")}
  assert main(["dims", "--out", "results/dims"]) == 2
  assert "--overwrite-results" in capsys.readouterr().err
  assert {p: p.stat().st_mtime_ns for p in (ROOT / "results").rglob("*")} == before


def test_sample_a_poset_file_streamed(tmp_path, monkeypatch, capsys):
  """python -m jaxdp sample --poset my_poset.json --samples 1e8 --out z.npy"""
  (tmp_path / "my_poset.json").write_text(
    json.dumps({"requires": {"q1": [], "q2": ["q1"], "q3": ["q1"]}})
  )
  r = _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "sample",
    "--poset",
    "my_poset.json",
    "--samples",
    "1e4",
    "--chunk",
    "4096",
    "--out",
    "z.npy",
  )
  z = np.load(tmp_path / "z.npy")
  assert z.shape == (10_000, 4) and np.isfinite(z).all()
  assert "shape (10000, 4)" in r.out


def test_sample_a_synthetic_questionnaire(tmp_path, monkeypatch, capsys):
  """python -m jaxdp sample --poset questionnaire:300"""
  r = _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "sample",
    "--poset",
    "questionnaire:300",
    "--samples",
    "256",
    "--out",
    "q.npy",
  )
  z = np.load(tmp_path / "q.npy")
  assert z.shape == (256, 301) and np.isfinite(z).all() and np.abs(z).max() <= 1
  assert "shape (256, 301)" in r.out


def test_release_from_a_csv(tmp_path, monkeypatch, capsys):
  """python -m jaxdp release --poset nhis3 --data answers.csv --eps 1 --out rel.json"""
  poset = jaxdp.Poset.nhis(3)
  filters = np.asarray(poset.filters())
  rows = filters[np.random.default_rng(0).integers(0, len(filters), 2000)]
  np.savetxt(
    tmp_path / "answers.csv",
    rows,
    fmt="%d",
    delimiter=",",
    header=",".join(poset.element_names),
    comments="",
  )
  r = _jaxdp_here(
    monkeypatch,
    capsys,
    tmp_path,
    "release",
    "--poset",
    "nhis3",
    "--data",
    "answers.csv",
    "--eps",
    "1",
    "--out",
    "rel.json",
  )
  got = _results(tmp_path / "rel.json")
  assert list(got["counts"]) == ["respondents", *poset.element_names]
  truth = [2000, *rows.sum(0).tolist()]
  assert all(
    isinstance(v, int) and abs(v - t) < 500 for v, t in zip(got["counts"].values(), truth)
  )
  assert "safe to publish" in r.out and "wrote rel.json" in r.err
  beside = ["rel.csv", "rel.provenance.json", "rel.provenance.csv", "rel.footnote.txt"]
  assert all((tmp_path / name).is_file() for name in beside)
  table = (tmp_path / "rel.csv").read_text().splitlines()[1:]
  assert [line.split(",")[:2] for line in table] == [
    [k, str(v)] for k, v in got["counts"].items()
  ]


@pytest.mark.slow
@pytest.mark.subprocess
def test_devices_shards_over_host_devices(tmp_path):
  """python -m jaxdp poset --poset nhis1 --devices 2  (K host devices on a CPU)"""
  _jaxdp(
    tmp_path,
    "poset",
    "--poset",
    "nhis1",
    "--devices",
    "2",
    "--samples",
    "4e3",
    "--insertion-samples",
    "0",
    "--mechanisms",
    "poset",
    "--no-plot",
  )
  assert (
    "(2 device(s))" in _results(tmp_path / "out" / "poset" / "poset_nhis1.json")["machine"]
  )


def _documented_commands():
  """The ``python -m jaxdp ...`` lines of the README's and the CLI guide's bash blocks."""
  out = set()
  for doc in (ROOT / "README.md", ROOT / "docs" / "guides" / "cli.md"):
    text = doc.read_text()
    for block in text.split("```bash")[1:]:
      for line in block.split("```")[0].splitlines():
        line = line.split("#")[0].strip()
        if line.startswith("python -m jaxdp"):
          out.add(" ".join(line.split()))
  return out


def _small_consistency_study(monkeypatch, args, tmp_path):
  """Runs the consistency study command in-process with Laplace noise, one data shape
  and 64 releases per row; returns its rows."""
  small = functools.partial(
    cli_studies.consistency.consistency_study,
    noises=("laplace",),
    shapes=("rare",),
    chunk=64,
  )
  monkeypatch.setattr(cli_studies.consistency, "consistency_study", small)
  assert main([*args, "--out", str(tmp_path), "--no-plot"]) == 0
  (path,) = tmp_path.glob("consistency*.json")
  return json.loads(path.read_text())["results"]


def test_nhis_consistency(tmp_path, monkeypatch):
  """python -m jaxdp nhis --consistency --releases 20000

  (scaled down: section 1, Laplace noise, the rare-follow-up shape, 64 releases)"""
  rows = _small_consistency_study(
    monkeypatch, ["nhis", "--sections", "1", "--consistency", "--releases", "64"], tmp_path
  )
  assert {(r["noise"], r["samples"]) for r in rows} == {("laplace", 64)}
  assert all(r["mse_consistent"] <= r["mse_raw"] for r in rows)


def test_poset_consistency_on_a_questionnaire(tmp_path, monkeypatch):
  """python -m jaxdp poset --poset questionnaire:300 --consistency --eps-grid 0.5,1

  (scaled down: a 20-question synthetic questionnaire, Laplace noise, 64 releases)"""
  args = ["poset", "--poset", "questionnaire:20", "--consistency", "--releases", "64"]
  rows = _small_consistency_study(monkeypatch, [*args, "--eps-grid", "0.5,1"], tmp_path)
  assert sorted(r["eps"] for r in rows) == [0.5, 1.0]
  assert all(len(r["bias_consistent"]) == 21 for r in rows)
  assert all(r["mse_consistent"] <= r["mse_raw"] for r in rows)


def test_every_documented_command_has_a_test():
  """Each command the README or docs/guides/cli.md shows is the first docstring line of
  a test above (so a command added to the docs without a test fails here)."""
  tested = {
    " ".join(f.__doc__.splitlines()[0].split("(")[0].split())
    for name, f in globals().items()
    if name.startswith("test_") and f.__doc__
  }
  tested.add("python -m jaxdp")  # run in-process by tests/cli/test_commands.py
  assert _documented_commands() - tested == set()
