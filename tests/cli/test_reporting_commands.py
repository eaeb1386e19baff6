"""`jaxdp advise`, and the intervals and consistent counts `jaxdp release` publishes."""

import json

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.cli import release as cli_release


def test_advise_prints_a_table_and_json(capsys):
  argv = ["advise", "--poset", "nhis1", "--eps", "0.5", "--samples", "2000"]
  assert main(argv) == 0
  out = capsys.readouterr().out
  assert "recommended: K-norm, poset ball" in out and "after consistency" in out
  assert main([*argv, "--delta", "1e-6", "--json"]) == 0
  data = json.loads(capsys.readouterr().out)
  assert data["eps"] == 0.5 and data["delta"] == 1e-6 and data["recommended"] == "poset"
  assert {o["noise"] for o in data["options"]} == {
    "poset",
    "linf",
    "l2",
    "laplace",
    "gaussian",
    "elliptic",
  }
  assert data["assumed_counts"]["respondents"] == 10_000


@pytest.mark.parametrize(
  "argv, flag",
  [
    (["advise", "--poset", "nhis1", "--eps", "1", "--delta", "0.7"], "--delta"),
    (["advise", "--poset", "nhis1", "--eps", "1", "--samples", "5"], "--samples"),
    (["advise", "--poset", "nhis1"], "--eps"),
    (["advise", "--poset", "nhis1", "--eps", "1", "--delt", "0"], "--delt"),
    (["release", "--data", "a.csv", "--eps", "1", "--level", "1.5"], "--level"),
    (["release", "--data", "a.csv", "--eps", "1", "--level", "95"], "--level"),
    (
      ["release", "--data", "a.csv", "--eps", "1", "--error-samples", "10"],
      "--error-samples",
    ),
  ],
)
def test_bad_flags_are_one_line_errors_naming_the_flag(argv, flag, capsys):
  assert main(argv) == 2
  err = capsys.readouterr().err.strip()
  assert flag in err and "\n" not in err


def _constraints_hold(poset, z):
  order = np.asarray(poset.order)
  c = np.asarray(z[1:])
  return (
    np.all(c >= 0) and np.all(c <= z[0]) and not np.any(order & (c[:, None] > c[None, :]))
  )


def test_release_publishes_intervals_consistent_counts_poset_and_version(
  tmp_path, capsys, monkeypatch
):
  """The release itself (exact noise, ChaCha20 key) is tested by test_release.py and
  test_readme.py; here a stand-in adds fixed integer noise, so that only what is
  published beside the counts is checked (and the exact sampler is not compiled)."""
  noise = np.array([3, -4, 2, -1, 5])

  def fake_release(acct, mech, rows):
    return acct, np.asarray(mech.statistic(rows)) + noise

  monkeypatch.setattr(cli_release, "release", fake_release)
  monkeypatch.setattr(cli_release, "raise_if_refused", lambda acct, out: out)
  filters = np.asarray(jaxdp.Poset.nhis(1).filters())
  rows = filters[np.random.default_rng(1).integers(0, len(filters), 500)]
  rows[:, 2:] = 0  # a rare follow-up: counts near 0, where the projection matters
  np.save(
    tmp_path / "a.npy", rows[np.asarray([jaxdp.Poset.nhis(1).is_filter(r) for r in rows])]
  )
  out = tmp_path / "rel.json"
  argv = ["release", "--poset", "nhis1", "--data", str(tmp_path / "a.npy"), "--eps", "0.5"]
  flags = ["--level", "0.9", "--consistent", "--error-samples", "2000"]
  assert main([*argv, *flags, "--out", str(out)]) == 0
  printed = capsys.readouterr().out
  assert "0.9 intervals" in printed and "order-consistent counts" in printed
  got = json.loads(out.read_text())
  assert got["version"] == jaxdp.__version__ and got["level"] == 0.9 and got["eps"] == 0.5
  poset_file = tmp_path / "poset.json"
  poset_file.write_text(json.dumps(got["poset_requires"]))
  assert jaxdp.Poset.load(poset_file) == jaxdp.Poset.nhis(1)
  names = list(got["counts"])
  offsets = zip(got["error_bars"]["lower"], got["error_bars"]["upper"])
  for name, (below, above) in zip(names, offsets):
    # on the count scale: the lower end raised to 0 (q3's count is -1), whole numbers
    c = got["counts"][name]
    assert got["intervals"][name] == [max(c + below, 0), max(c + above, 0)]
    assert all(type(v) is int for v in got["intervals"][name])
  assert "exact quantiles" in got["error_bars"]["method"]  # NHIS-1 is enumerated
  assert got["error_bars"]["num_samples"] == 0
  truth = np.asarray(
    jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 0.5).statistic(
      np.load(tmp_path / "a.npy")
    )
  )
  assert [got["counts"][n] for n in names] == (truth + noise).tolist()
  cons = got["consistent"]
  z = [cons["counts"][n] for n in names]
  assert all(isinstance(v, int) for v in z) and _constraints_hold(jaxdp.Poset.nhis(1), z)
  assert "approximate" in cons["error_bars"]["method"]
  # the bootstrap's level is nominal, not a coverage (which can fall far below it)
  assert "coverage" not in cons["error_bars"] and cons["error_bars"]["approximate"] is True
  assert (
    cons["error_bars"]["nominal_level"] == 0.9 and "not known" in cons["error_bars"]["note"]
  )
  assert "approximate 0.9 intervals" in printed
  assert got["error_bars"]["coverage"]  # the raw release's exact coverage stays
  assert cons["error_bars"]["num_samples"] == 2000
  for name in names:
    lo, hi = cons["intervals"][name]
    assert 0 <= lo <= cons["counts"][name] <= hi


def _refused_before_the_release(tmp_path, capsys, monkeypatch, poset, d, *options):
  """Runs ``jaxdp release`` on zero answers of ``poset`` (``d`` questions) with
  ``options``, its release replaced by a failure; checks that it exits with status 2
  without releasing, and returns its stderr."""

  def refuse(*args, **kwargs):
    raise AssertionError("the release ran")

  monkeypatch.setattr(cli_release, "release", refuse)
  np.save(tmp_path / "a.npy", np.zeros((20, d), np.int8))
  argv = ["release", "--poset", poset, "--data", str(tmp_path / "a.npy"), "--eps", "1"]
  assert main([*argv, *options]) == 2
  return capsys.readouterr().err


def test_too_many_error_samples_are_refused_before_the_release(
  tmp_path, capsys, monkeypatch
):
  """The simulation's size is checked before the release (and any ledger charge):
  an error after it would lose a release whose budget is spent."""
  err = _refused_before_the_release(
    tmp_path, capsys, monkeypatch, "nhis3", 15, "--consistent", "--error-samples", "1e7"
  )
  assert "--error-samples 10,000,000 is too many for 16 counts" in err


def test_too_few_bootstrap_replicates_are_refused_before_the_release(
  tmp_path, capsys, monkeypatch
):
  """With the bootstrap's check, ``--consistent --level 0.9999`` and the default
  20,000 replicates would fail after the release (its budget spent): the command
  refuses it before."""
  err = _refused_before_the_release(
    tmp_path, capsys, monkeypatch, "nhis1", 4, "--consistent", "--level", "0.9999"
  )
  assert "num_samples = 20,000" in err
