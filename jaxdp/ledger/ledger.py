"""A durable privacy budget: :class:`Ledger`, a record on disk of every dataset's
budget and of every charge, committed before any noise is drawn.

The protocol of a release (:meth:`Ledger.charge`, :mod:`.protocol`): in one
exclusive transaction (``BEGIN IMMEDIATE``), read every entry committed since and
verify it, take the dataset's current state, let the accountant's own rule decide
the charge (the same integer arithmetic as the release that follows), append the
charge and commit with ``synchronous=FULL``; only then is the release run, from an
accountant holding that state, so it charges exactly what was committed. A crash
after the commit loses an answer, never a charge; a refused charge writes nothing
(under a plan, whose position counts refusals, it writes a refusal). Several
processes, or several :class:`Ledger` objects in one process, share one budget.

See the guide *Budgets that persist* for what the ledger protects against and what
it does not.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any

from jaxdp import _checks
from jaxdp.accounting import Accountant, ReleaseRefusedError, plan
from jaxdp.accounting.keys import consumed_on_success
from jaxdp.accounting.releases import mechanism_cost, mechanism_event
from jaxdp.ledger import protocol, records
from jaxdp.ledger.errors import LedgerError, LedgerRollbackError
from jaxdp.ledger.fingerprint import (
  data_forms,
  dataset_fingerprint,
  form_record,
  legacy_rows_fingerprint,
)
from jaxdp.ledger.identity import check_dataset, check_name
from jaxdp.ledger.index import Index, check_head, holds_entry
from jaxdp.ledger.store import Store
from jaxdp.ledger.summary import Charge, DatasetSummary, charge_of, refusal, summarize

__all__ = ["Ledger"]


class Ledger:
  """A durable budget per dataset in a sqlite3 file (see the module docstring).

  Opening verifies the schema and the whole keyed hash chain
  (:mod:`jaxdp.ledger.chain`, under the key in ``<path>.key``,
  :mod:`jaxdp.ledger.keyfile`); every later transaction verifies both again, and
  what other connections appended since. A Ledger belongs to the thread that opened
  it: open one per thread.

  Args:
    path: the ledger file; created (with its schema and its key file) if missing
      and ``create``, unless its key file ``<path>.key`` is there: a key file
      without its database means the database was deleted or moved, and is refused
      (:class:`~jaxdp.ledger.LedgerTamperedError`), never a fresh budget.
    timeout: seconds to wait for another connection's write lock before
      :class:`~jaxdp.ledger.LedgerLockedError`.
    create: create a missing file; False makes a missing ledger an error (a
      deleted or moved ledger is then never taken for a new one).
    read_only: open for reading only (``jaxdp ledger show``); a charge fails.
    expect_head: ``(seq, hash)`` of an entry this ledger must hold (from
      :attr:`head`, kept elsewhere): an older copy of the file put back is then
      refused with :class:`~jaxdp.ledger.LedgerRollbackError`. Without it, only a
      Ledger object that read later entries detects such a copy.
    max_pages: a size limit in database pages (sqlite's ``max_page_count``).
    journal: for a new file, ``"delete"`` (sqlite's rollback journal, the default)
      or ``"wal"`` (a write-ahead log: one fsync per commit instead of several;
      every process must be on the same machine); a file keeps the journal it was
      created with. In WAL mode the ``<path>-wal`` file holds committed charges
      until they are checkpointed (on close): never delete it (a missing one is
      refused while its ``-shm`` file is left, and cannot be detected otherwise).

  Raises:
    LedgerError: the file cannot be opened, is not a ledger, or its hash chain does
      not verify (each a subclass, see :mod:`jaxdp.ledger.errors`).
    ValueError: a bad ``timeout``, ``max_pages`` or ``expect_head`` (``(int, str)``).
  """

  def __init__(
    self,
    path: str | os.PathLike,
    *,
    timeout: float = 5.0,
    create: bool = True,
    read_only: bool = False,
    expect_head: tuple[int, str] | None = None,
    max_pages: int | None = None,
    journal: str = "delete",
  ) -> None:
    timeout = _checks.check_positive(timeout, "timeout")
    expect_head = check_head(expect_head)  # before a file is created
    self._store = Store(
      path,
      timeout=timeout,
      create=create,
      read_only=read_only,
      max_pages=max_pages,
      journal=journal,
    )
    self._index = Index(self._store.ledger_id, self._store.key)
    try:
      with self._index.writing(self._store, write=False) as tx:
        if expect_head is not None and not holds_entry(tx, self._store.key, *expect_head):
          raise LedgerRollbackError(
            f"ledger {path}: it does not hold entry {expect_head[0]} with the expected "
            "hash (expect_head): an older copy of the file, or another file."
          )
    except BaseException:
      self._store.close()
      raise

  # ---------------------------------------------------------------- reading
  @property
  def path(self) -> str:
    return self._store.path

  @property
  def head(self) -> tuple[int, str]:
    """``(seq, hash)`` of the last entry read: keep it elsewhere and pass it back as
    ``expect_head`` to detect an older copy of the file."""
    return self._index.chain.seq, self._index.chain.hash

  def datasets(self) -> list[DatasetSummary]:
    """Every dataset, with its budget, spent and remaining, as of now."""
    self._sync()
    index, key = self._index, self._store.key
    return [
      summarize(n, e, index.states[n], len(index.positions[n]), key)
      for n, e in index.datasets.items()
    ]

  def charges(self, dataset: str) -> list[Charge]:
    """The dataset's entries after its registration, oldest first.

    Raises:
      KeyError: no such dataset.
    """
    with self._index.writing(self._store, write=False) as tx:
      rows = tx.entries_after(self._known(dataset)["seq"])
    key = self._store.key
    return [charge_of(r, key) for r in rows if r[1] == dataset and r[2] != "fingerprint"]

  def committed(self, dataset: str) -> dict:
    """The dataset's state after the last entry this object read or wrote (spent
    units, spent delta units, answered, refusals), without reading the file again.

    Raises:
      KeyError: no such dataset was read.
    """
    self._known(dataset)
    return self._index.states[dataset]

  def _sync(self) -> None:
    with self._index.writing(self._store, write=False):
      pass

  def _known(self, dataset: str) -> dict:
    if dataset not in self._index.datasets:
      raise KeyError(f"ledger {self.path} has no dataset {dataset!r}.")
    return self._index.datasets[dataset]

  # ---------------------------------------------------------------- datasets
  def accountant(
    self,
    dataset: str,
    data: Any,
    eps_budget: float | None = None,
    *,
    poset: Any = None,
    key: Any = None,
    secure: bool = False,
    also: Sequence = (),
    **options: Any,
  ) -> Accountant:
    """The accountant of ``dataset``, resumed from the ledger (registered on first
    use).

    The first use registers the dataset under ``dataset`` with the data's
    fingerprint (:mod:`jaxdp.ledger.fingerprint`; with ``poset``, for poset counts,
    the poset's too) and the budget of ``Accountant.create(eps_budget, **options)``.
    A later use must pass the same data and the same budget, rule and group size
    (or ``eps_budget=None``: the registered ones).

    Args:
      dataset: the dataset's name (1 to 200 printable characters).
      data: the data (its fingerprint is stored, never the data).
      eps_budget: the budget on first use; ``None``: the registered one.
      poset: the poset of poset counts, if any (a use with another poset is charged
        to the same budget, with a warning: the people are the same).
      key: as for :meth:`jaxdp.Accountant.create`, consumed only if the call succeeds.
      secure: as for :meth:`jaxdp.Accountant.create`.
      also: the same data in other forms (as for :meth:`resume`).
      **options: the other options of :meth:`jaxdp.Accountant.create` (not
        ``history``: a ledger keeps charges; ``allow_test_key`` also when resuming).

    Returns:
      An :class:`~jaxdp.Accountant` holding the dataset's spent units and counters.

    Raises:
      DatasetMismatchError: the name is registered with other data, or the data
        under another name.
      BudgetMismatchError: another budget, rule or group size than the registered.
      KeyError: ``eps_budget=None`` for a dataset not registered.
      ValueError: a bad name or budget, or a composition rule a ledger does not
        store (a subclass or another rule than jaxdp's own; before anything is
        written).
      LedgerError: the ledger cannot be read or written.
    """
    check_name(dataset)
    allow = options.get("allow_test_key", False)
    with consumed_on_success(key, secure=secure, allow_test_key=allow) as own:
      if eps_budget is None:
        if extra := sorted(set(options) - {"allow_test_key"}):  # that one: of the key
          raise ValueError(
            f"eps_budget=None takes the registered budget; {', '.join(extra)} "
            "cannot be given with it."
          )
        self._sync()
        budget = self._known(dataset)["budget"]
        acct = records.rebuild(budget, key=own, secure=secure, allow_test_key=allow)
      else:
        acct = Accountant.create(eps_budget, key=own, secure=secure, **options)
      return self.resume(dataset, data, acct, poset=poset, also=also)

  def resume(
    self,
    dataset: str,
    data: Any,
    acct: Accountant,
    *,
    poset: Any = None,
    also: Sequence = (),
  ) -> Accountant:
    """``acct`` at the state of ``dataset``, registered with ``acct``'s budget on
    first use (as :meth:`accountant`, for an accountant made by the caller).

    ``also``: the same data in other forms (``jaxdp release --on-invalid clip``
    passes the rows as read, ``data`` being the clipped rows it counts): the data is
    the dataset if any form is known under its name, and every form is recorded.

    Raises what :meth:`accountant` raises.
    """
    check_name(dataset)
    protocol.check_call(acct, "")
    if acct.history:
      raise ValueError("a ledger's accountant keeps no history: create it with history=0.")
    fp = dataset_fingerprint(data, poset)
    forms = [f for d in (data, *also) for f in data_forms(d)]
    forms = list(dict.fromkeys([fp["data"], *forms]))
    legacy = functools.cache(lambda: legacy_rows_fingerprint(data))
    records.check_rule(acct)  # before anything is written
    record = records.budget_record(acct)
    with self._index.writing(self._store) as tx:
      check_dataset(self._index, self.path, dataset, fp, forms, record, legacy)
      if dataset not in self._index.datasets:
        self._index.append(tx, dataset, "dataset", {"fingerprint": fp, "budget": record})
      for f in forms:  # every form of the data known from now on
        if f not in self._index.by_data:
          body = {"fingerprint": form_record(f, fp["poset"])}
          self._index.append(tx, dataset, "fingerprint", body)
      state = self._index.states[dataset]
    return records.resume(acct, state)

  # ---------------------------------------------------------------- charges
  def charge(
    self, dataset: str, acct: Accountant, mech: Any, shape: tuple = (), *, label: str = ""
  ) -> Accountant:
    """Commits the charge of one release of ``mech`` before it is run.

    The accountant returned holds ``acct``'s key with the ledger's id, the dataset's
    fingerprint, the entry's number and the entry's fresh nonce (128 bits from
    ``os.urandom``, stored in the entry) folded in, so no two entries draw one
    noise, not even after an older copy of the ledger is restored.

    Run the release from the accountant returned, not from ``acct``: it holds the
    dataset's state just before this charge (other processes may have charged
    since ``acct`` was made), so the release charges exactly what was committed.
    Release only ``mech`` from it: a dearer release is not refused there, but its
    accountant then holds a spend never committed, which the next charge made from
    that accountant refuses (:class:`~jaxdp.ledger.LedgerError`); a fresh
    accountant from :meth:`accountant` starts from the committed state and cannot
    tell, so keeping to this is a rule for trusted code. If the release then fails, the charge
    stays (its answer might have been computed).

    Args:
      dataset: the dataset's name (registered by :meth:`accountant`).
      acct: the dataset's accountant (its key and configuration are kept).
      mech: the mechanism to release.
      shape: the shape of the statistic (for the mechanism's ``valid`` check).
      label: free text stored with the charge (printable characters only).

    Returns:
      The accountant to release from.

    Raises:
      ReleaseRefusedError: the charge would take the dataset past its budget
        (nothing was written, except a refusal under a plan).
      BudgetExceededError: one release costs more than the whole budget.
      BudgetMismatchError: ``acct`` has another budget than the dataset.
      KeyError: no such dataset.
      LedgerError: the ledger cannot be read, verified or written.
    """
    protocol.check_call(acct, label)
    eps, delta, valid = mechanism_cost(acct, mech, tuple(shape))
    event = mechanism_event(acct, mech)
    body = {"mechanism": records.describe_mechanism(mech, (eps, delta), event)}
    rows = [(eps, delta, valid, event, body)]
    pre, ok = protocol.commit(self._index, self._store, dataset, acct, rows, label)
    if not ok:
      raise ReleaseRefusedError(self._refusal(dataset))
    return pre

  def charge_many(
    self,
    dataset: str,
    acct: Accountant,
    mechs: Sequence[Any],
    shape: tuple = (),
    *,
    label: str = "",
  ) -> Accountant:
    """Commits the charges of several releases, in order, in one transaction.

    All or nothing: if one of them would be refused, nothing is written. Run the
    releases in the same order from the accountant returned.

    Args:
      dataset: the dataset's name.
      acct: the dataset's accountant.
      mechs: the mechanisms, in the order they will be released.
      shape: the shape of each statistic.
      label: free text stored with each charge.

    Returns:
      The accountant to release from.

    Raises what :meth:`charge` raises.
    """
    protocol.check_call(acct, label)
    rows = []
    for mech in mechs:
      eps, delta, valid = mechanism_cost(acct, mech, tuple(shape))
      event = mechanism_event(acct, mech)
      body = {"mechanism": records.describe_mechanism(mech, (eps, delta), event)}
      rows.append((eps, delta, valid, event, body))
    pre, ok = protocol.commit(self._index, self._store, dataset, acct, rows, label, True)
    if not ok:
      raise ReleaseRefusedError(self._refusal(dataset, planned=len(rows)))
    return pre

  def charge_plan(
    self,
    dataset: str,
    acct: Accountant,
    fn: Callable,
    *args: Any,
    label: str = "",
    **kwargs: Any,
  ) -> Accountant:
    """Commits every release of a planned query function in one transaction.

    Inside the transaction (holding the write lock while ``fn`` is traced), ``fn`` is
    planned (:func:`jaxdp.plan`) against the dataset's current state and each of its
    releases is charged; if one would be refused, nothing is written. What is
    committed is the program traced here: run ``fn`` (jitted, with the same
    arguments) from the accountant returned and it spends exactly what was
    committed, provided it traces to the same program (releases that depend on
    Python state, or a cached trace of another program, do not). Compare
    ``records.state_of`` of the accountant after the run with :meth:`committed`.

    Args:
      dataset: the dataset's name.
      acct: the dataset's accountant.
      fn: the query function (its first argument the accountant).
      *args: its other arguments, as for :func:`jaxdp.plan`.
      label: free text stored with each charge.
      **kwargs: as for :func:`jaxdp.plan`.

    Returns:
      The accountant to run ``fn`` from.

    Raises:
      ReleaseRefusedError: a planned release would be refused (nothing written).

    Otherwise raises what :func:`jaxdp.plan` and :meth:`charge` raise.
    """
    protocol.check_call(acct, label)

    def rows(pre: Accountant) -> list:
      p = plan(fn, pre, *args, **kwargs)
      if p.refused:
        raise ReleaseRefusedError(self._refusal(dataset, planned=len(p.releases)))
      return protocol.plan_rows(p, acct.rule.name)

    pre, ok = protocol.commit(self._index, self._store, dataset, acct, rows, label, True)
    if not ok:  # the plan answered it: cannot happen
      raise LedgerError("a planned release was refused when charged; nothing answered.")
    return pre

  def _refusal(self, dataset: str, planned: int = 0) -> str:
    index = self._index
    s = summarize(dataset, index.datasets[dataset], index.states[dataset], 0)
    return refusal(s, self.path, planned)

  # ---------------------------------------------------------------- file
  def close(self) -> None:
    """Closes the file (every charge is already committed)."""
    self._store.close()

  def __enter__(self) -> Ledger:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  def __repr__(self) -> str:
    return f"Ledger({self.path!r})"
