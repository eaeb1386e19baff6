"""The floors summary (benchmarks/floors.py): each figure beside its floor, the ratio,
the target and whether it is met, from small hand-made benchmark JSON files."""

import json
from pathlib import Path

import pytest

from tests.helpers.modules import load_script

ROOT = Path(__file__).resolve().parents[2]
CPU = {"cpu": "AMD EPYC", "cpu_count": 2, "backend": "cpu", "devices": ["cpu:cpu"]}
GPU = {"cpu": "Xeon", "cpu_count": 16, "backend": "gpu", "devices": ["gpu:NVIDIA H100"]}


def load(name):
  return load_script(f"benchmarks/{name}.py")


@pytest.fixture(scope="module")
def floors():
  return load("floors")


def write(folder, name, payload, machine=CPU):
  folder.mkdir(exist_ok=True)
  (folder / f"{name}.json").write_text(json.dumps({"machine": machine, **payload}))


def rounds(*walls):
  return {"wall": min(walls), "rounds": [{"wall": w} for w in walls]}


def by_path(summary):
  return {r["path"]: r for r in summary["rows"]}


def test_ledger_ratio_is_the_median_of_in_round_ratios_and_judged_within_2x(
  tmp_path, floors
):
  per = {
    "Session.count, no ledger": rounds(1.0, 1.0, 1.0),
    "delete: floor, one transaction": rounds(1.0, 2.0, 1.0),
    "delete: Ledger.charge": rounds(1.5, 6.0, 1.8),  # in-round 1.5, 3, 1.8
    "delete: Session.count, ledger": rounds(2.0, 9.0, 2.0),  # 1, 3, 1
    "wal: floor, one transaction": rounds(1.0, 1.0, 1.0),
    "wal: Ledger.charge": rounds(2.5, 2.5, 2.0),  # 2.5, 2.5, 2
    "wal: Session.count, ledger": rounds(4.2, 4.2, 4.2),  # 2.1 each
  }
  write(tmp_path, "ledger", {"seconds_per_release": per})
  rows = by_path(floors.summary(tmp_path))
  charge = rows["Ledger.charge, delete journal"]
  assert charge["ratio"] == pytest.approx(1 / 1.8)
  assert charge["rate"] == pytest.approx(1 / 1.5) and charge["floor_rate"] == 1.0
  assert charge["met"] is True and charge["target"] == "within 2x of the floor"
  assert rows["Session.count with the ledger, delete journal"]["ratio"] == 1.0
  assert rows["Ledger.charge, wal journal"]["ratio"] == pytest.approx(0.4)
  assert rows["Ledger.charge, wal journal"]["met"] is False
  wal_count = rows["Session.count with the ledger, wal journal"]
  assert wal_count["ratio"] == pytest.approx(1 / 2.1) and wal_count["met"] is False


def test_ratio_targets_are_met_only_at_or_above_their_bound(tmp_path, floors):
  def ref(d, ratio):
    return {
      "structure": "chain",
      "d": d,
      "jaxdp_path": "chain",
      "batch": 10,
      "jaxdp_vectors_per_s": 100.0 * ratio,
      "reference": "scikit-learn",
      "reference_vectors_per_s": 100.0,
      "ratio": ratio,
    }

  write(tmp_path, "consistency", {"reference_rows": [ref(10, 10.0), ref(20, 9.99)]})
  rows = by_path(floors.summary(tmp_path))
  assert rows["jaxdp.consistent, chain d = 10 (chain)"]["met"] is True
  assert rows["jaxdp.consistent, chain d = 20 (chain)"]["met"] is False
  assert rows["jaxdp.consistent, chain d = 20 (chain)"]["ratio"] == 9.99


def test_samplers_use_the_fast_floor_and_the_sp_target(tmp_path, floors):
  def row(case, seconds, fast):
    return {
      "sampler": "poset_ball",
      "case": case,
      "n": 1000,
      "seconds": seconds,
      "samples_per_s": 1000 / seconds,
      "fast_floor_seconds": fast,
      "x_fast_floor": seconds / fast,
    }

  rows = [row("random (sp)", 3.0, 1.0), row("random (general)", 4.0, 1.0)]
  write(tmp_path, "samplers", {"rows": rows + [row("NHIS 3 sections (forest)", 2, 1)]})
  got = by_path(floors.summary(tmp_path))
  sp = got["poset_ball, random (sp)"]
  assert sp["ratio"] == pytest.approx(1 / 3) and sp["met"] is True
  assert sp["floor_rate"] == 1000 and sp["target"] == "<= 3x the floor's time"
  assert got["poset_ball, random (general)"]["target"] is None
  nhis = got["poset_ball, NHIS 3 sections (forest)"]
  assert nhis["target"].startswith(">= 10^9") and nhis["met"] is None  # on the CPU
  write(tmp_path, "samplers", {"rows": rows + [row("NHIS 3 sections (forest)", 2, 1)]}, GPU)
  assert by_path(floors.summary(tmp_path))[nhis["path"]]["met"] is False  # 500/s


def test_discrete_gaussian_rate_target_and_its_floor(tmp_path, floors):
  dg = {"1": {"exact_chacha20": 2e7}, "sqrt(16.5)": {"exact_chacha20": 5e6}}
  lap = {"exact_chacha20": 1.0, "chacha20_bits_floor": 4e7}
  write(tmp_path, "secure", {"n": 400, "laplace_per_s": lap, "discrete_gaussian": dg})
  rows = by_path(floors.summary(tmp_path))
  one, other = (
    rows["exact discrete Gaussian, sigma 1"],
    rows["exact discrete Gaussian, sigma sqrt(16.5)"],
  )
  assert (one["met"], other["met"]) == (True, False)
  assert one["ratio"] == 0.5 and "Laplace row" in one["floor"] and one["size"] == 100
  write(
    tmp_path,
    "secure",
    {
      "n": 400,
      "laplace_per_s": lap,
      "discrete_gaussian": {**dg, "floor_chacha20_2words": 8e7},
    },
  )
  one = by_path(floors.summary(tmp_path))["exact discrete Gaussian, sigma 1"]
  assert one["ratio"] == 0.25 and "Laplace" not in one["floor"]


def test_a_missing_floor_or_figure_is_listed_not_judged(tmp_path, floors):
  write(
    tmp_path, "reporting", {"rows": [{"poset": "nhis3", "call": "advise", "again_s": 1}]}
  )
  write(
    tmp_path, "montecarlo", {"rows": [{"how": "streamed", "n": 10, "draws_per_s": 5.0}]}
  )
  write(tmp_path, "float_attack", {"rows": []})
  s = floors.summary(tmp_path)
  rows = by_path(s)
  bars = rows["error_bars(mech).interval(y), one release, nhis3"]
  assert bars["rate"] is None and bars["floor"] == "not measured" and bars["met"] is None
  streamed = rows["streamed"]
  assert streamed["floor"] == "not measured" and streamed["ratio"] is None
  assert streamed["target"] is None and streamed["met"] is None
  assert s["without_figures"] == ["float_attack"]
  md = floors.markdown(s)
  assert "| not in these results | not measured | - | - | >= 10,000/s | not judged |" in md
  write(tmp_path, "reporting", {"rows": [{"poset": "nhis3", "releases_per_s": 2e4}]})
  assert floors.summary(tmp_path)["rows"][0]["met"] is True


def test_write_names_the_device_and_each_rows_machine(tmp_path, floors):
  write(tmp_path, "montecarlo", {"rows": [{"how": "streamed", "n": 1, "draws_per_s": 1.0}]})
  write(tmp_path, "float_attack", {"rows": []}, GPU)  # no rate figure, but a device
  write(tmp_path, "session", {"rows": []})
  s = floors.write(tmp_path)
  assert s["device"] == "NVIDIA H100"  # the first file's, without device.json
  assert s["without_figures"] == ["float_attack", "session"]
  (tmp_path / "device.json").write_text(
    json.dumps({"devices": [{"platform": "gpu", "kind": "NVIDIA H200"}]})
  )
  floors.write(tmp_path)
  saved = json.loads((tmp_path / "floors.json").read_text())
  assert saved["device"] == "NVIDIA H200" and len(saved["rows"]) == 1
  assert saved["rows"][0]["machine"] == "AMD EPYC, 2 CPUs, cpu (cpu:cpu)"
  assert saved["rows"][0]["device"] == "cpu"
  assert "Device: NVIDIA H200." in (tmp_path / "floors.md").read_text()


def test_rows_of_two_machines_get_a_machine_column(tmp_path, floors):
  write(tmp_path, "montecarlo", {"rows": [{"how": "a", "n": 1, "draws_per_s": 1.0}]})
  one = floors.markdown(floors.summary(tmp_path))
  assert "Machine: AMD EPYC, 2 CPUs" in one and "| machine |" not in one
  q = {"query": "count", "secure": False, "n": 1, "session_s": 2.0, "direct_s": 1.0}
  write(tmp_path, "session", {"rows": [q]}, GPU)
  two = floors.markdown(floors.summary(tmp_path))
  assert "| machine |" in two and "| Xeon, 16 CPUs, gpu (gpu:NVIDIA H100) |" in two
  assert "| 0.50 |" in two  # the Session's rate over the direct call's


def test_the_benchmarks_page_shows_the_floors(tmp_path):
  run_all = load("run_all")
  write(tmp_path, "montecarlo", {"rows": [{"how": "odd path", "n": 1, "draws_per_s": 1.0}]})
  page = run_all.benchmarks_page(tmp_path)
  section = page.split("## Distance to the floor\n", 1)[1].split("\n## ", 1)[0]
  assert "| montecarlo | odd path |" in section


def test_sp_costs_are_judged_against_the_fast_floor_only(tmp_path, floors):
  old = {"poset": "chain", "scanned_depths": 0, "samples_per_s": 10.0, "x_floor": 2.0}
  new = {**old, "poset": "antichain", "x_fast_floor": 4.0}
  write(tmp_path, "sp_costs", {"compile": [old, new], "chunks": []})
  rows = by_path(floors.summary(tmp_path))
  slow = rows["poset_ball method sp, chain, 0 depths in scans"]
  assert slow["ratio"] == 0.5 and slow["floor_rate"] == 20.0 and slow["met"] is None
  assert "not the fast floor" in slow["floor"]
  fast = rows["poset_ball method sp, antichain, 0 depths in scans"]
  assert fast["ratio"] == 0.25 and fast["floor_rate"] == 40.0 and fast["met"] is False


def test_the_discrete_gaussians_own_run_supersedes_its_rows_in_secure(floors, tmp_path):
  old = {"1": {"exact_chacha20": 1.0e6}}
  new = {"1": {"exact_chacha20": 3.0e7}, "floor_chacha20_2words": 6.0e7}
  write(tmp_path, "secure", {"n": 4, "discrete_gaussian": old})
  before = {(r["benchmark"], r["rate"]) for r in floors.summary(tmp_path)["rows"]}
  write(tmp_path, "secure_dg", {"n": 4, "discrete_gaussian": new})
  after = {(r["benchmark"], r["rate"]) for r in floors.summary(tmp_path)["rows"]}
  assert before == {("secure", 1.0e6)}
  assert after == {("secure_dg", 3.0e7)}
