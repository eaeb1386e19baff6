"""A Session with a ledger: the budget resumes across sessions and processes, each
charge is committed before its release runs, a release that fails keeps its
charge, and no error depends on the data."""

import sqlite3

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import session_rows
from jaxdp.ledger import LedgerLockedError

DATA = np.arange(40)


def _below(v):
  return v < 20


def test_a_session_resumes_the_spent_budget_and_refuses_once_it_is_spent(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  first = jaxdp.Session(DATA, 1.0, ledger=ledger, dataset="d")
  first.count(_below, eps=0.4)
  second = jaxdp.Session(DATA, 1.0, ledger=jaxdp.Ledger(tmp_path / "l.db"), dataset="d")
  assert second.spent == first.spent > 0 and second.answered == 1
  second.count(_below, eps=0.4)
  with pytest.raises(jaxdp.ReleaseRefusedError, match="Nothing was spent"):
    first.count(_below, eps=0.4)  # the first session reads the second's charge
  assert ledger.datasets()[0].charges == 2


def test_each_charge_is_committed_before_the_release_runs(tmp_path, monkeypatch):
  """While the jitted release runs, another connection already reads its charge."""
  path = tmp_path / "l.db"
  seen = []
  real = session_rows.run_on

  def run_and_look(*a):
    seen.append(jaxdp.Ledger(path, read_only=True).datasets()[0].charges)
    return real(*a)

  monkeypatch.setattr(session_rows, "run_on", run_and_look)
  s = jaxdp.Session(DATA, 1.0, ledger=jaxdp.Ledger(path), dataset="d")
  s.count(_below, eps=0.1)
  s.count(_below, eps=0.2)
  assert seen == [1, 2]


def test_a_release_that_fails_after_its_charge_keeps_the_charge(tmp_path, monkeypatch):
  """The answer might have been computed: the charge stays (in the session and the
  ledger), the error is one fixed text, and the next session resumes with it."""
  path = tmp_path / "l.db"

  def failing(*a):
    raise RuntimeError("the device failed after allocating 4321 bytes")

  s = jaxdp.Session(DATA, 1.0, ledger=jaxdp.Ledger(path), dataset="d")
  monkeypatch.setattr(session_rows, "run_on", failing)
  with pytest.raises(jaxdp.UnsafeQueryError, match="charged") as info:
    s.count(_below, eps=0.3)
  assert str(info.value) == session_rows.DATA_FAILED
  monkeypatch.undo()
  assert s.answered == 1 and abs(s.spent - 0.3) < 1e-6
  s.count(_below, eps=0.1)  # the session stays usable and in step with the ledger
  again = jaxdp.Session(DATA, 1.0, ledger=jaxdp.Ledger(path), dataset="d")
  assert again.answered == 2 and abs(again.spent - 0.4) < 1e-6


def test_a_locked_ledger_answers_nothing(tmp_path):
  path = tmp_path / "l.db"
  s = jaxdp.Session(DATA, 1.0, ledger=jaxdp.Ledger(path, timeout=0.05), dataset="d")
  holder = sqlite3.connect(path, isolation_level=None)
  holder.execute("BEGIN IMMEDIATE")
  with pytest.raises(LedgerLockedError):
    s.count(_below, eps=0.1)
  holder.execute("ROLLBACK")
  assert s.answered == 0 and jaxdp.Ledger(path).datasets()[0].charges == 0
  s.count(_below, eps=0.1)
  assert s.answered == 1


def test_refusals_do_not_depend_on_the_data(tmp_path):
  """Two sessions on different data and the same queries get the same errors (their
  dataset names apart)."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  messages = []
  for name, data in (("a", DATA), ("b", DATA[::-1] * 3 + 1)):
    s = jaxdp.Session(data, 1.0, ledger=ledger, dataset=name)
    s.count(_below, eps=0.6)
    with pytest.raises(jaxdp.ReleaseRefusedError) as e:
      s.count(_below, eps=0.6)
    messages.append(str(e.value).replace(f"'{name}'", "NAME"))
  assert messages[0] == messages[1]


def test_ledger_and_dataset_go_together(tmp_path):
  with pytest.raises(ValueError, match="go together"):
    jaxdp.Session(DATA, 1.0, dataset="d")
  with pytest.raises(ValueError, match="go together"):
    jaxdp.Session(DATA, 1.0, ledger=jaxdp.Ledger(tmp_path / "l.db"))
  with pytest.raises(TypeError, match="jaxdp.Ledger"):
    jaxdp.Session(DATA, 1.0, ledger=str(tmp_path / "l.db"), dataset="d")


def test_a_fixed_key_never_draws_the_same_noise_for_two_ledger_entries(tmp_path):
  """A fixed key and a restart (a new Ledger on the file): ``x > 65`` and ``x > 64``
  on data without a 65 have one true count, so equal answers would mean equal noise
  (and with a 65 the difference would be its count). Without a ledger the draws of a
  fixed key stay as they are."""
  ages = np.array([20, 30, 64, 70, 80])
  path = tmp_path / "l.db"

  def ask(threshold, ledger):
    kw = dict(ledger=jaxdp.Ledger(path), dataset="ages") if ledger else {}
    s = jaxdp.Session(ages, 1.0, key=jax.random.PRNGKey(0), **kw)
    return float(s.count(lambda a: a > threshold, eps=0.1))

  assert ask(65, False) == ask(64, False)
  assert ask(65, True) != ask(64, True)


def test_a_fixed_key_charged_twice_gets_two_release_keys(tmp_path):
  keys = []
  for _ in range(2):  # as after a restart: a new key object with the same bits
    ledger = jaxdp.Ledger(tmp_path / "l.db")
    acct = ledger.accountant("d", DATA, 1.0, key=jax.random.key(3))
    keys.append(ledger.charge("d", acct, jaxdp.LaplaceMechanism(0.1)).key)
  data = [np.asarray(jax.random.key_data(x)) for x in (jax.random.key(3), *keys)]
  assert not (data[0] == data[1]).all() and not (data[1] == data[2]).all()
