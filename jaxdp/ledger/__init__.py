"""A durable privacy budget on sqlite3: :class:`Ledger`.

Modules: :mod:`.ledger` (the :class:`Ledger`), :mod:`.protocol` (deciding and
appending charges in one transaction), :mod:`.store` (the sqlite file, its schema
and transactions), :mod:`.chain` (the keyed hash chain over the entries),
:mod:`.keyfile` (the ledger's secret key beside it), :mod:`.creation` (a new
ledger's database, then its key file), :mod:`.index`
(the datasets and states replayed from the entries), :mod:`.identity` (dataset
names and fingerprints, checked together), :mod:`.fingerprint` (dataset
fingerprints), :mod:`.records` (budget records and states of accountants),
:mod:`.summary` (what a ledger reports), :mod:`.link` (a :class:`~jaxdp.Session`'s
use of a ledger) and :mod:`.errors`.
"""

from jaxdp.ledger.errors import (
  BudgetMismatchError,
  DatasetMismatchError,
  LedgerCorruptError,
  LedgerError,
  LedgerLockedError,
  LedgerRollbackError,
  LedgerTamperedError,
  LedgerWriteError,
)
from jaxdp.ledger.fingerprint import (
  array_fingerprint,
  dataset_fingerprint,
  rows_fingerprint,
)
from jaxdp.ledger.ledger import Ledger
from jaxdp.ledger.summary import Charge, DatasetSummary

__all__ = [
  "BudgetMismatchError",
  "Charge",
  "DatasetMismatchError",
  "DatasetSummary",
  "Ledger",
  "LedgerCorruptError",
  "LedgerError",
  "LedgerLockedError",
  "LedgerRollbackError",
  "LedgerTamperedError",
  "LedgerWriteError",
  "array_fingerprint",
  "dataset_fingerprint",
  "rows_fingerprint",
]
