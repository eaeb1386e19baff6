"""One dataset, one budget, whichever entry point fingerprints it: the CLI's
``--on-invalid clip`` rows and a Session on the same file; a float64 array in a
Session (which holds float32 with x64 off) and in :meth:`jaxdp.Ledger.accountant`."""

import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.ledger import DatasetMismatchError, fingerprint
from jaxdp.ledger import ledger as ledger_module

LAP = jaxdp.LaplaceMechanism(1.0, 1.0)


def test_a_session_on_the_file_a_clipped_release_counted_is_the_same_dataset(
  tmp_path, capsys, monkeypatch
):
  """The CLI fingerprinted the clipped rows, a Session the raw ones: a second
  budget for the same file under a second name."""
  monkeypatch.setattr(jaxdp.cli.release, "release", _zero_release)
  rows = np.array([[1, 1, 0], [0, 1, 0], [1, 0, 1], [0, 0, 1], [1, 1, 1]], np.int8)
  np.save(tmp_path / "X.npy", rows)
  (tmp_path / "p.json").write_text('{"requires": {"a": [], "b": ["a"], "c": ["a"]}}')
  book = tmp_path / "K.db"
  argv = ["release", "--poset", str(tmp_path / "p.json"), "--data", str(tmp_path / "X.npy")]
  flags = ["--eps", "1", "--on-invalid", "clip", "--ledger", str(book), "--budget", "1"]
  assert main([*argv, *flags, "--dataset", "A"]) == 0
  with pytest.raises(DatasetMismatchError, match="already registered as dataset 'A'"):
    jaxdp.Session(rows, eps_budget=1.0, ledger=jaxdp.Ledger(book), dataset="B")
  with pytest.warns(UserWarning, match="no poset|another poset"):
    s = jaxdp.Session(rows, eps_budget=1.0, ledger=jaxdp.Ledger(book), dataset="A")
  assert s.spent == pytest.approx(1.0)  # the CLI's charge: nothing left
  capsys.readouterr()
  other = rows.copy()
  other[1] = [0, 1, 1]  # another invalid writing: it clips to the same filter
  np.save(tmp_path / "X2.npy", other)
  argv[-1] = str(tmp_path / "X2.npy")
  assert main([*argv, *flags, "--dataset", "A2"]) == 2
  assert "'A'" in capsys.readouterr().err


def test_float64_data_is_one_dataset_in_a_session_and_through_accountant(tmp_path):
  """A Session (x64 off) fingerprinted the float32 it holds, Ledger.accountant the
  float64 given: the same array got a second budget under another name."""
  x = np.random.default_rng(0).uniform(0, 1, 20)
  ledger = jaxdp.Ledger(tmp_path / "Q.db")
  jaxdp.Session(x, eps_budget=1.0, ledger=ledger, dataset="A")
  for arr in (x, x.astype(np.float32)):
    with pytest.raises(DatasetMismatchError, match="already registered as dataset 'A'"):
      ledger.accountant("B", arr, 1.0)
  ledger.charge("A", ledger.accountant("A", x, 1.0), LAP)  # the same budget
  ledger2 = jaxdp.Ledger(tmp_path / "Q2.db")
  ledger2.accountant("A", x.astype(np.float32), 1.0)
  with pytest.raises(DatasetMismatchError, match="already registered as dataset 'A'"):
    jaxdp.Session(x, eps_budget=1.0, ledger=ledger2, dataset="B")


def test_float64_data_registered_exactly_is_still_recognised(tmp_path, monkeypatch):
  """A float64 dataset registered through Ledger.accountant before the rounding
  rule (its fingerprint of the exact float64 values) keeps its one budget."""
  x = np.random.default_rng(1).uniform(0, 1, 20)
  path = tmp_path / "l.db"
  with monkeypatch.context() as m:  # how it was registered: the values as given
    m.setattr(
      ledger_module,
      "dataset_fingerprint",
      lambda d, p: fingerprint.form_record(fingerprint.rows_fingerprint(d), None),
    )
    m.setattr(ledger_module, "data_forms", lambda d: [fingerprint.rows_fingerprint(d)])
    jaxdp.Ledger(path).accountant("old", x, 1.0)
  ledger = jaxdp.Ledger(path)
  with pytest.raises(DatasetMismatchError, match="already registered as dataset 'old'"):
    ledger.accountant("new", x, 1.0)
  ledger.charge("old", ledger.accountant("old", x, 1.0), LAP)
  # its float32 form is recorded by that use (a float32 copy alone could not be
  # told from the exact float64 values it no longer holds)
  with pytest.raises(DatasetMismatchError, match="'old'"):
    jaxdp.Session(x.astype(np.float32), eps_budget=1.0, ledger=ledger, dataset="new")


def _zero_release(acct, mech, rows):
  from jaxdp.accounting.releases import mechanism_cost, mechanism_event, spend

  cost = mechanism_cost(acct, mech, np.shape(rows))
  _, _, acct = spend(acct, *cost, mechanism_event(acct, mech), (mech, rows))
  return acct, np.zeros(1 + np.shape(rows)[1], np.int32)
