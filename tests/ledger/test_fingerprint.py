"""Dataset fingerprints up to the order of the columns: the same people's answers with
the questions in another order are one dataset (one budget), checked against an
exhaustive enumeration of small datasets up to row and column order; and datasets
registered under the first fingerprint scheme (columns in the order given) are still
recognised."""

import itertools
import sqlite3

import numpy as np
import pytest

import jaxdp
from jaxdp.ledger import DatasetMismatchError, records
from jaxdp.ledger.fingerprint import legacy_rows_fingerprint, rows_fingerprint
from jaxdp.ledger.index import Index

RNG = np.random.default_rng(7)
LAP = jaxdp.LaplaceMechanism(0.1)


def _class(m):
  """The dataset up to row and column order, by brute force: the least sorted tuple
  of rows over every order of the columns."""
  return min(
    tuple(sorted(map(tuple, m[:, list(p)].tolist())))
    for p in itertools.permutations(range(m.shape[1]))
  )


@pytest.mark.parametrize("n,k,values", [(3, 3, 2), (3, 2, 3), (2, 4, 2)])
def test_one_fingerprint_exactly_per_dataset_up_to_row_and_column_order(n, k, values):
  """Every n x k matrix of 0..values-1: two have one fingerprint if and only if one
  is the other with its rows and columns reordered."""
  classes, fps = {}, {}
  for cells in itertools.product(range(values), repeat=n * k):
    m = np.array(cells).reshape(n, k)
    c, f = _class(m), rows_fingerprint(m)
    classes.setdefault(c, set()).add(f)
    fps.setdefault(f, set()).add(c)
  assert all(len(s) == 1 for s in classes.values())  # invariant
  assert all(len(s) == 1 for s in fps.values())  # and tells these classes apart


def _cases():
  tied = RNG.permutation(np.repeat([[0, 1, 1, 0], [1, 0, 0, 1]], 8, axis=0))
  floats = RNG.normal(size=(12, 4))
  floats[0, 1], floats[3, 2], floats[5, 0] = np.nan, -0.0, 0.0
  dup = RNG.integers(0, 3, (20, 2))
  return {
    "ints": RNG.integers(0, 4, (30, 4)),
    "tied columns": tied,  # every column has the same counts
    "floats": floats,
    "duplicate columns": np.concatenate([dup, dup], axis=1),
  }


@pytest.mark.parametrize("name", list(_cases()))
def test_every_order_of_columns_and_rows_has_one_fingerprint(name):
  x = _cases()[name]
  want = rows_fingerprint(x)
  for p in itertools.permutations(range(x.shape[1])):
    assert rows_fingerprint(RNG.permutation(x[:, list(p)])) == want, p
  if name != "floats":  # a float copy of integer data, columns reversed
    assert rows_fingerprint(x[:, ::-1].astype(np.float32)) == want
  changed = x.copy()
  changed[0, 0] = 9.5
  assert rows_fingerprint(changed) != want
  assert legacy_rows_fingerprint(x) != legacy_rows_fingerprint(np.roll(x, 1, axis=1))


def test_the_cells_of_a_row_in_any_order_or_shape_are_one_dataset():
  x = RNG.integers(0, 5, (10, 2, 3))
  cells = x.reshape(10, 6)
  assert rows_fingerprint(x) == rows_fingerprint(cells[:, [5, 0, 3, 1, 4, 2]])
  assert rows_fingerprint(x) == rows_fingerprint(x.transpose(0, 2, 1))
  assert rows_fingerprint(x) != rows_fingerprint(cells[:, :5])  # a column dropped


def test_columns_of_equal_counts_are_told_apart_by_the_rows_they_share():
  """Every column holds two ones and the rows hold 2, 2, 1, 1 ones in both, but the
  first has two equal columns: sorting each row's cells alone would mistake one for
  the other; refining the columns by their rows tells them apart."""
  equal = np.array([[1, 1, 0], [1, 1, 0], [0, 0, 1], [0, 0, 1]])
  distinct = np.array([[1, 1, 0], [0, 1, 1], [1, 0, 0], [0, 0, 1]])
  assert _class(equal) != _class(distinct)
  assert rows_fingerprint(equal) != rows_fingerprint(distinct)


def test_columns_the_refinement_cannot_tell_apart_share_a_fingerprint():
  """The documented limit (the safe direction: one budget for two datasets): the
  incidence matrices of an 8-cycle and of two 4-cycles have the same column and row
  statistics at every refinement."""
  cycle = np.array([[0, 0, 1, 1], [0, 1, 0, 1], [1, 0, 1, 0], [1, 1, 0, 0]])
  two = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]])
  assert _class(cycle) != _class(two)
  assert rows_fingerprint(cycle) == rows_fingerprint(two)


def test_the_same_answers_with_the_questions_reordered_get_no_second_budget(tmp_path):
  """The attack: the data's columns permuted, registered under a second name."""
  data = RNG.integers(0, 2, (200, 5)).astype(bool)
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.charge("survey", ledger.accountant("survey", data, 1.0), LAP)
  swapped = data[:, [4, 2, 0, 3, 1]]
  with pytest.raises(DatasetMismatchError, match="already registered as dataset 'survey'"):
    ledger.accountant("survey again", swapped, 1.0)
  again = ledger.accountant("survey", swapped, 1.0)  # resumed: the same budget
  assert records.state_of(again) == ledger.committed("survey")


def test_reordered_questions_with_their_poset_relabelled_share_the_budget(tmp_path):
  """For poset counts column i is question i: the data's fingerprint decides the
  budget, the relabelled poset's own fingerprint differs (a warning, and other
  release keys through the dataset fingerprint)."""
  poset = jaxdp.Poset.nhis(1)
  rows = np.asarray(poset.filters())
  order = np.asarray(poset.order, bool)
  p = RNG.permutation(rows.shape[1])
  relabelled = jaxdp.Poset.from_order(order[np.ix_(p, p)])
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.charge("s", ledger.accountant("s", rows, 1.0, poset=poset), LAP)
  with pytest.warns(UserWarning, match="another poset .* same budget"):
    again = ledger.accountant("s", rows[:, p], 1.0, poset=relabelled)
  assert int(again.answered) == 1
  fp = jaxdp.ledger.dataset_fingerprint
  a, b = fp(rows, poset), fp(rows[:, p], relabelled)
  assert a["data"] == b["data"] and a["poset"] != b["poset"]
  assert a["dataset"] != b["dataset"]


def test_the_first_schemes_fingerprint_is_what_jaxdp_0_1_stored():
  """Digests recorded from jaxdp 0.1's rows_fingerprint."""
  assert legacy_rows_fingerprint(np.arange(10)) == (
    "dd4dc2b6f9e1adf0ffe66ca0315898ecfbaa4af73124f5eac40f65eab39af295"
  )
  x = np.array([[0.5, -0.0], [np.nan, 2.0], [0.5, -1.0]])
  assert legacy_rows_fingerprint(x) == (
    "2927a24de3607ce6be79b86174f17e3490291680e657bcdcc008c20ff5c95f55"
  )
  assert legacy_rows_fingerprint(np.arange(24).reshape(4, 3, 2) % 5) == (
    "ee8ed20aa295d566d2fef9071045c0d0c0b25688d95509b712cc16f04404c3b6"
  )


def test_a_dataset_registered_under_the_first_scheme_is_still_recognised(tmp_path):
  """A registration as jaxdp 0.1 wrote it (no scheme): other data, or the columns
  reordered (the first scheme cannot tell), under its name are refused; the same
  data resumes its budget, is refused under a second name, and its first use
  records its fingerprint of this scheme."""
  path = tmp_path / "l.db"
  data = RNG.integers(0, 3, (50, 3))
  ledger = jaxdp.Ledger(path)
  acct = jaxdp.Accountant.create(1.0)
  old = legacy_rows_fingerprint(data)
  entry = {
    "fingerprint": {"data": old, "poset": None, "dataset": old},
    "budget": records.budget_record(acct),
  }
  store = jaxdp.ledger.store.Store(path)
  index = Index(store.ledger_id, store.key)
  with index.writing(store) as tx:
    index.append(tx, "old", "dataset", entry)
  store.close()
  for other in (data + 1, data[:, ::-1]):  # the first scheme cannot tell the second
    with pytest.raises(DatasetMismatchError, match="with other data"):
      ledger.accountant("old", other, 1.0)
  ledger.charge("old", ledger.accountant("old", data, 1.0), LAP)
  assert ledger.datasets()[0].charges == 1
  with pytest.raises(DatasetMismatchError, match="already registered as dataset 'old'"):
    ledger.accountant("new", data.astype(np.int8), 1.0)
  ledger.accountant("fresh", data + 1, 1.0)  # other data: a dataset of the new scheme
  with pytest.raises(DatasetMismatchError, match="'fresh'"):
    ledger.accountant("fresh too", (data + 1)[:, ::-1], 1.0)
  # the first use recorded the fingerprint of this scheme: reordered columns are now
  # the same data, here and in a ledger opened afresh
  for reader in (ledger, jaxdp.Ledger(path)):
    with pytest.raises(DatasetMismatchError, match="already registered as dataset 'old'"):
      reader.accountant("new", data[:, [2, 0, 1]], 1.0)
    again = reader.accountant("old", data[:, ::-1], 1.0)
    assert records.state_of(again) == reader.committed("old")
    assert [c.kind for c in reader.charges("old")] == ["charge"]
  kinds = [r[0] for r in sqlite3.connect(path).execute("SELECT kind FROM entries")]
  assert kinds == ["dataset", "fingerprint", "charge", "dataset"]


def test_a_recorded_fingerprint_of_another_datasets_data_is_refused(tmp_path):
  """A fingerprint entry binds another form of a dataset's data to it; one naming
  data registered under another dataset (written with the key, not by jaxdp) is
  refused."""
  path = tmp_path / "l.db"
  data = RNG.integers(0, 3, (50, 3))
  ledger = jaxdp.Ledger(path)
  ledger.accountant("d", data, 1.0)
  ledger.accountant("e", data + 1, 1.0)
  store = jaxdp.ledger.store.Store(path)
  index = Index(store.ledger_id, store.key)
  fp = jaxdp.ledger.dataset_fingerprint(data + 1)
  with pytest.raises(jaxdp.ledger.LedgerTamperedError, match="another dataset's data"):
    with index.writing(store) as tx:
      index.append(tx, "d", "fingerprint", {"fingerprint": fp})
  store.close()
