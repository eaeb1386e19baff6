"""The errors of a :class:`~jaxdp.Ledger`: each one means nothing was answered.

None of them resets a budget: a ledger that cannot be read, verified or written
refuses every release until an operator repairs it (or restores a backup, see the
guide). Standard library only, like :mod:`.chain`, :mod:`.store` and :mod:`.index`.
"""

from __future__ import annotations

__all__ = [
  "LedgerError",
  "LedgerCorruptError",
  "LedgerTamperedError",
  "LedgerRollbackError",
  "LedgerLockedError",
  "LedgerWriteError",
  "DatasetMismatchError",
  "BudgetMismatchError",
]


class LedgerError(RuntimeError):
  """The ledger cannot be used as it is; nothing was charged or answered."""


class LedgerCorruptError(LedgerError):
  """The file is not a readable jaxdp ledger (not a database, a damaged page, an
  empty file, an unknown format)."""


class LedgerTamperedError(LedgerCorruptError):
  """The hash chain over the entries does not verify: an entry was edited, deleted,
  inserted or reordered, or the head no longer names the last entry."""


class LedgerRollbackError(LedgerTamperedError):
  """The file holds fewer entries than this process (or ``expect_head``) has seen:
  an older copy was put back."""


class LedgerLockedError(LedgerError):
  """Another connection held the ledger's write lock for longer than the timeout."""


class LedgerWriteError(LedgerError):
  """The charge could not be written (a read-only file or folder, a full disk or
  quota, an I/O error): it was not committed, so nothing is answered."""


class DatasetMismatchError(LedgerError, ValueError):
  """The same name with other data, or the same data under a second name."""


class BudgetMismatchError(LedgerError, ValueError):
  """A budget, composition rule or group size other than the dataset's first use."""
