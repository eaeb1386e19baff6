"""jaxdp.Ledger: exact resumed state for every rule, dataset identity, budgets fixed
by the first use, refusals that write nothing, several ledger objects on one file,
and a jitted run's plan committed before it runs."""

import dataclasses
import sqlite3

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp.ledger import BudgetMismatchError, DatasetMismatchError, LedgerError, records

DATA = np.arange(12, dtype=np.int64).reshape(6, 2)
X = jnp.zeros(())
LAP, GAU = jaxdp.LaplaceMechanism(0.3), jaxdp.GaussianMechanism(0.5, 1e-6)


def _entries(path):
  with sqlite3.connect(path) as c:
    return c.execute("SELECT count(*) FROM entries").fetchone()[0]


def _leaves(acct, refusals=False):
  out = [
    np.asarray(acct.spent_units),
    np.asarray(acct.spent_delta_units),
    int(acct.answered),
  ]
  return out + [int(acct.refusals)] if refusals else out


def _same(a, b, refusals=False):
  for x, y in zip(_leaves(a, refusals), _leaves(b, refusals)):
    np.testing.assert_array_equal(x, y)
    assert np.asarray(x).dtype == np.asarray(y).dtype or np.ndim(x) == 0


def _planned_rule():
  def fn(acct, x):
    acct, _ = jaxdp.release(acct, jaxdp.LaplaceMechanism(0.5), x)
    acct, _ = jaxdp.release(acct, jaxdp.LaplaceMechanism(0.5), x)
    return acct, x

  p = jaxdp.plan(fn, jaxdp.Accountant.create(1.0, key=jax.random.key(2)), X)
  return {"composition": jaxdp.PlannedComposition(p)}


L15, L50 = jaxdp.LaplaceMechanism(0.15), jaxdp.LaplaceMechanism(0.5)
RULES = {  # each sequence has a refusal, and a release answered after it
  "basic": (dict(delta_budget=1e-5), [LAP, GAU, LAP, LAP, LAP, L15]),
  "advanced": (
    dict(composition="advanced", max_releases=3, delta_prime=1e-6, delta_budget=1e-5),
    [LAP, L15, LAP, LAP],
  ),
  "zcdp": (dict(composition="zcdp", delta_budget=1e-6), [L15, GAU, L15, GAU]),
  "rdp": (dict(composition="rdp", delta_budget=1e-6, orders=(2, 8, 32)), [L50, L50, GAU]),
  "planned": (None, [jaxdp.LaplaceMechanism(0.9), jaxdp.LaplaceMechanism(0.4), LAP]),
}


@pytest.mark.parametrize("name", list(RULES))
def test_a_resumed_accountant_is_bit_identical_under_every_rule(tmp_path, name):
  """Releases through the ledger spend exactly what a plain accountant spends (the
  same refusals), and an accountant resumed from the file holds the same integer
  units and counters, also after a refusal (a plan's position counts it)."""
  options, mechs = RULES[name]
  options = _planned_rule() if options is None else options
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  plain = jaxdp.Accountant.create(
    1.0, key=jax.random.key(0), on_refusal=jaxdp.FillOnRefusal(), **options
  )
  acct = ledger.accountant("d", DATA, 1.0, key=jax.random.key(1), **options)
  refused = 0
  for mech in mechs:
    plain, _ = jaxdp.release(plain, mech, X)
    try:
      acct = ledger.charge("d", acct, mech)
    except jaxdp.ReleaseRefusedError:
      refused += 1
      assert not bool(plain.last_answered)
      continue
    acct, _ = jaxdp.release(acct, mech, X)
    assert bool(acct.last_answered) and bool(plain.last_answered)
    _same(acct, plain)
  assert refused >= 1 and int(plain.refusals) == refused
  again = jaxdp.Ledger(tmp_path / "l.db").accountant("d", DATA, 1.0, **options)
  _same(again, plain, refusals=name == "planned")
  for a, b in zip(again.remaining(), plain.remaining()):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  rebuilt = jaxdp.Ledger(tmp_path / "l.db").accountant("d", DATA)  # the stored budget
  assert records.budget_record(rebuilt) == records.budget_record(plain)
  _same(rebuilt, plain, refusals=name == "planned")


def test_the_same_name_with_other_data_is_refused_with_a_message_free_of_the_data(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("d", DATA, 1.0)
  n = _entries(tmp_path / "l.db")
  messages = []
  for other in (DATA + 1, np.append(DATA, 0), DATA * 7):
    with pytest.raises(DatasetMismatchError, match="registered .* with other data") as e:
      ledger.accountant("d", other, 1.0)
    messages.append(str(e.value))
  assert len(set(messages)) == 1  # nothing in the text depends on the data
  fp = jaxdp.ledger.rows_fingerprint(DATA + 1)
  text = messages[0].replace(str(tmp_path), "PATH")
  assert fp[:8] not in text and not any(c.isdigit() for c in text)  # no shape, no hash
  assert _entries(tmp_path / "l.db") == n


def test_the_same_data_under_a_second_name_is_refused_whatever_its_dtype(tmp_path):
  """A second name would be a second budget for the same people; int32, bool, a JAX
  array: the same values have one fingerprint."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("first", DATA, 1.0)
  for copy in (DATA.astype(np.int32), jnp.asarray(DATA.astype(np.int32))):
    with pytest.raises(DatasetMismatchError, match="already registered as dataset 'first'"):
      ledger.accountant("second", copy, 1.0)
  bits = np.array([True, False, True])
  ledger.accountant("bits", bits, 1.0)
  with pytest.raises(DatasetMismatchError, match="'bits'"):
    ledger.accountant("ints", bits.astype(np.uint8), 1.0)
  assert {d.name for d in ledger.datasets()} == {"first", "bits"}


@pytest.mark.parametrize(
  "copy",
  [
    lambda x: x.astype(np.float32),  # a float copy of integer data
    lambda x: x[..., None],  # a trailing unit axis: (n, k, 1)
    lambda x: x[::-1].copy(),  # the rows in another order
    lambda x: np.random.default_rng(0).permutation(x),
  ],
  ids=["float", "column", "reversed", "shuffled"],
)
def test_a_copy_in_another_dtype_layout_or_row_order_is_the_same_data(tmp_path, copy):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("first", DATA, 1.0)
  with pytest.raises(DatasetMismatchError, match="already registered as dataset 'first'"):
    ledger.accountant("second", copy(DATA), 1.0)


def test_floats_canonicalise_zero_and_nan_and_rows_sort_as_rows():
  fp = jaxdp.ledger.rows_fingerprint
  x = np.array([[0.5, -0.0], [np.nan, 2.0], [0.5, -1.0]])
  y = np.array([[0.5, -1.0], [-np.nan, 2.0], [0.5, 0.0]], np.float32)  # reordered
  assert fp(x) == fp(y) == fp(x[:, :, None])
  assert fp(x) == fp(x[:, ::-1])  # the same columns in another order
  assert fp(x) != fp(np.array([[0.5, -1.0], [0.5, 2.0], [np.nan, 0.0]]))  # cells moved
  assert fp(np.arange(4.0)) != fp(np.arange(4.0) + 0.5)
  assert fp(np.arange(4.0)) == fp(np.arange(4)) != fp(np.arange(5))


def test_another_poset_is_charged_to_the_same_budget_with_a_warning(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  rows = np.asarray(jaxdp.Poset.nhis(1).filters())
  acct = ledger.accountant("s", rows, 1.0, poset=jaxdp.Poset.nhis(1))
  ledger.charge("s", acct, LAP)
  d = rows.shape[1]
  with pytest.warns(UserWarning, match="another poset .* same budget"):
    again = ledger.accountant(
      "s", rows, 1.0, poset=jaxdp.Poset.from_order(np.eye(d, dtype=bool))
    )
  assert records.state_of(again) == ledger.committed("s") and int(again.answered) == 1


@pytest.mark.parametrize(
  "change",
  [
    dict(eps_budget=2.0),
    dict(eps_budget=1.0 + 2**-40),
    dict(group_size=2),
    dict(composition="zcdp", delta_budget=1e-6),
    dict(delta_budget=1e-7),
  ],
)
def test_a_budget_other_than_the_first_use_is_an_error_and_writes_nothing(tmp_path, change):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.charge("d", ledger.accountant("d", DATA, 1.0), LAP)
  n = _entries(tmp_path / "l.db")
  kw = dict(eps_budget=1.0) | change
  with pytest.raises(BudgetMismatchError, match="fixed by its first use"):
    ledger.accountant("d", DATA, kw.pop("eps_budget"), **kw)
  other = jaxdp.Accountant.create(2.0)
  with pytest.raises(BudgetMismatchError):
    ledger.charge("d", other, LAP)
  assert _entries(tmp_path / "l.db") == n
  assert records.state_of(ledger.accountant("d", DATA, 1.0)) == ledger.committed("d")


@pytest.mark.parametrize("eps", [float("nan"), -1.0, 0.0, float("inf"), 1e300, 2.0**61])
def test_a_bad_budget_is_refused_before_the_ledger_is_written(tmp_path, eps):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  with pytest.raises(ValueError, match="eps_budget"):
    ledger.accountant("d", DATA, eps)
  assert _entries(tmp_path / "l.db") == 0 and ledger.datasets() == []


def test_a_refused_or_oversized_charge_writes_nothing(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.accountant("d", DATA, 1.0)
  ledger.charge("d", acct, jaxdp.LaplaceMechanism(0.9))
  n = _entries(tmp_path / "l.db")
  with pytest.raises(jaxdp.ReleaseRefusedError, match=r"0.9 of eps 1 spent"):
    ledger.charge("d", acct, jaxdp.LaplaceMechanism(0.2))
  with pytest.raises(jaxdp.BudgetExceededError):
    ledger.charge("d", acct, jaxdp.LaplaceMechanism(1e30))
  assert _entries(tmp_path / "l.db") == n
  ledger.charge("d", acct, jaxdp.LaplaceMechanism(0.05))  # a smaller one still fits


def test_a_stale_accountant_is_refused_before_anything_is_charged(tmp_path):
  """Its release would raise StaleAccountantError after the charge was committed."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.charge("d", ledger.accountant("d", DATA, 1.0), LAP)
  jaxdp.release(acct, LAP, X)
  with pytest.raises(jaxdp.StaleAccountantError):
    ledger.charge("d", acct, LAP)
  assert ledger.datasets()[0].charges == 1


def test_two_ledger_objects_in_one_process_share_one_budget(tmp_path):
  """Each charge reads the other's commits inside its own exclusive transaction: a
  ledger that kept its state in memory would answer twice the budget."""
  one, two = jaxdp.Ledger(tmp_path / "l.db"), jaxdp.Ledger(tmp_path / "l.db")
  a, b = one.accountant("d", DATA, 1.0), two.accountant("d", DATA, 1.0)
  answered, refusals = 0, []
  for _ in range(6):
    for ledger, acct in ((one, a), (two, b)):
      try:
        ledger.charge("d", acct, jaxdp.LaplaceMechanism(0.25))
        answered += 1
      except jaxdp.ReleaseRefusedError as e:
        refusals.append(str(e))
  assert answered == 4 and all("(1 of eps 1 spent" in m for m in refusals)
  assert one.datasets()[0].state == two.datasets()[0].state
  assert two.datasets()[0].charges == 4


def test_a_charge_inside_a_jax_transformation_is_refused(tmp_path):
  """Traced once, a charge would be made once for a program that runs many times."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.accountant("d", DATA, 1.0)
  with pytest.raises(LedgerError, match="outside JAX transformations"):
    jax.jit(lambda x: ledger.charge("d", acct, LAP) and x)(1.0)
  assert _entries(tmp_path / "l.db") == 1


def _program(acct, x):
  for eps in (0.2, 0.1, 0.3):
    acct, _ = jaxdp.release(acct, jaxdp.LaplaceMechanism(eps), x)
  return acct, x


def test_a_jitted_run_is_committed_by_its_plan_before_it_runs(tmp_path):
  """charge_plan plans the program against the ledger's state and commits its
  releases in one transaction; the jitted run from the accountant it returns then
  spends exactly what was committed. A plan that does not fit writes nothing."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.accountant("d", DATA, 1.0)
  run = jax.jit(_program)
  pre = ledger.charge_plan("d", acct, _program, X, label="nightly")
  after, _ = run(pre, X)
  assert records.state_of(after) == ledger.committed("d")
  assert [c.label for c in ledger.charges("d")] == ["nightly"] * 3
  with pytest.raises(jaxdp.ReleaseRefusedError, match="3 planned releases"):
    ledger.charge_plan("d", dataclasses.replace(after), _program, X)
  assert ledger.datasets()[0].charges == 3


def test_a_batch_of_charges_is_all_or_nothing(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  acct = ledger.accountant("d", DATA, 1.0)
  acct = ledger.charge_many("d", acct, [LAP, LAP])
  for _ in range(2):
    acct, _ = jaxdp.release(acct, LAP, X)
  assert records.state_of(acct) == ledger.committed("d")
  with pytest.raises(jaxdp.ReleaseRefusedError, match="2 planned releases"):
    ledger.charge_many("d", acct, [LAP, LAP])  # the first fits, the second does not
  assert ledger.datasets()[0].charges == 2


@pytest.mark.parametrize("name", ["", "a\nb", "x" * 201, 7, None])
def test_a_bad_dataset_name_is_refused_before_the_ledger_is_written(tmp_path, name):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  with pytest.raises(ValueError, match="dataset must be"):
    ledger.accountant(name, DATA, 1.0)
  assert _entries(tmp_path / "l.db") == 0


def test_a_write_ahead_log_ledger_keeps_its_journal_and_shares_its_budget(tmp_path):
  path = tmp_path / "l.db"
  one = jaxdp.Ledger(path, journal="wal")
  two = jaxdp.Ledger(path)  # an existing file keeps the journal it was created with
  with sqlite3.connect(path) as c:
    assert c.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
  a, b = one.accountant("d", DATA, 1.0), two.accountant("d", DATA, 1.0)
  one.charge("d", a, jaxdp.LaplaceMechanism(0.6))
  with pytest.raises(jaxdp.ReleaseRefusedError):
    two.charge("d", b, jaxdp.LaplaceMechanism(0.6))
  with pytest.raises(ValueError, match="journal"):
    jaxdp.Ledger(tmp_path / "other.db", journal="memory")
