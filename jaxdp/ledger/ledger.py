"""A durable privacy budget: :class:`Ledger`, a record on disk of every dataset's
budget and of every charge, committed before any noise is drawn.

The protocol of a release (:meth:`Ledger.charge`): in one exclusive transaction
(``BEGIN IMMEDIATE``), read every entry committed since, verify it, take the
dataset's current state, let the accountant's own rule decide the charge (the same
integer arithmetic as the release that follows), append the charge and commit with
``synchronous=FULL``; only then is the release run, from an accountant holding that
state, so it charges exactly what was committed. A crash after the commit loses an
answer, never a charge; a refused charge writes nothing (under a plan, whose
position counts refusals, it writes a refusal). Several processes, or several
:class:`Ledger` objects in one process, share one budget.

See the guide *Budgets that persist* for what the ledger protects against and what
it does not.
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
from jax.extend import core as jex_core

from jaxdp import _checks
from jaxdp.accounting import (
  Accountant,
  Plan,
  ReleaseRefusedError,
  budget,
  plan,
)
from jaxdp.accounting.releases import mechanism_cost, mechanism_event
from jaxdp.accounting.rules import bound_rule
from jaxdp.ledger import records
from jaxdp.ledger.errors import (
  DatasetMismatchError,
  LedgerError,
  LedgerRollbackError,
)
from jaxdp.ledger.fingerprint import dataset_fingerprint
from jaxdp.ledger.index import Index, verify_row
from jaxdp.ledger.store import Store

__all__ = ["Ledger", "DatasetSummary", "Charge"]

_EVAL_TRACE = type(jex_core.find_top_trace(()))
MAX_NAME = 200


class DatasetSummary(NamedTuple):
  """One dataset of a ledger: its budget, what is spent and what is left.

  ``spent_eps`` and ``remaining_eps`` are the accountant's figures
  (:attr:`jaxdp.Accountant.spent_eps`, :meth:`jaxdp.Accountant.remaining`);
  ``budget`` is the stored record (rule, parameters, units), ``state`` the spent
  units and counters."""

  name: str
  registered: str
  fingerprint: dict
  budget: dict
  state: dict
  charges: int
  spent_eps: float
  spent_delta: float
  remaining_eps: float


class Charge(NamedTuple):
  """One entry of a dataset: a charge (or, under a plan, a refusal)."""

  seq: int
  time: str
  kind: str
  mechanism: dict
  units: Any
  delta_units: int
  label: str
  after: dict


class Ledger:
  """A durable budget per dataset in a sqlite3 file (see the module docstring).

  Args:
    path: the ledger file; created (with its schema) if missing and ``create``.
    timeout: seconds to wait for another process's write lock before
      :class:`~jaxdp.ledger.LedgerLockedError`.
    create: create a missing file; False makes a missing ledger an error (a
      deleted or moved ledger is then never taken for a new one).
    read_only: open for reading only (``jaxdp ledger show``); a charge fails.
    expect_head: ``(seq, hash)`` of an entry this ledger must hold (from
      :attr:`head`, logged elsewhere): an older copy of the file put back is then
      refused with :class:`~jaxdp.ledger.LedgerRollbackError`.
    max_pages: a size limit in database pages (sqlite's ``max_page_count``).

  Raises:
    LedgerError: the file cannot be opened, is not a ledger, or its hash chain does
      not verify (each a subclass, see :mod:`jaxdp.ledger.errors`).
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
  ) -> None:
    timeout = _checks.check_positive(timeout, "timeout")
    self._store = Store(
      path, timeout=timeout, create=create, read_only=read_only, max_pages=max_pages
    )
    self._index = Index(self._store.ledger_id)
    try:
      with self._index.writing(self._store, write=False) as tx:
        if expect_head is not None:
          seq, digest = expect_head
          if tx.hash_at(int(seq)) != digest:
            raise LedgerRollbackError(
              f"ledger {path}: it does not hold entry {seq} with the expected hash "
              "(expect_head): an older copy of the file, or another file."
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
    """``(seq, hash)`` of the last entry read: log it elsewhere and pass it back as
    ``expect_head`` to detect an older copy of the file."""
    return self._index.chain.seq, self._index.chain.hash

  def datasets(self) -> list[DatasetSummary]:
    """Every dataset, with its budget, spent and remaining, as of now."""
    with self._index.writing(self._store, write=False):
      names = list(self._index.datasets)
    return [self._summary(n) for n in names]

  def charges(self, dataset: str) -> list[Charge]:
    """The dataset's entries after its registration, oldest first.

    Raises:
      KeyError: no such dataset.
    """
    self._known(dataset)
    with self._index.writing(self._store, write=False) as tx:
      rows = [r for r in tx.entries_after(0) if r[1] == dataset and r[2] != "dataset"]
    out = []
    for row in rows:
      verify_row(row)
      body = records_body(row)
      out.append(
        Charge(
          row[0],
          row[3],
          row[2],
          body.get("mechanism", {}),
          body.get("units"),
          body.get("delta_units", 0),
          body.get("label", ""),
          body["after"],
        )
      )
    return out

  def _summary(self, name: str) -> DatasetSummary:
    entry, state = self._index.datasets[name], self._index.states[name]
    acct = records.resume(records.rebuild(entry["budget"]), state)
    remaining = float(np.asarray(acct.remaining()[0]))
    return DatasetSummary(
      name,
      entry["time"],
      entry["fingerprint"],
      entry["budget"],
      state,
      self._index.counts[name],
      float(acct.spent_eps),
      float(acct.spent_delta),
      remaining,
    )

  def _known(self, dataset: str) -> None:
    with self._index.writing(self._store, write=False):
      if dataset not in self._index.datasets:
        raise KeyError(f"ledger {self.path} has no dataset {dataset!r}.")

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
    **options: Any,
  ) -> Accountant:
    """The accountant of ``dataset``, resumed from the ledger (registered on first
    use).

    The first use registers the dataset under ``dataset`` with the data's
    fingerprint (:mod:`jaxdp.ledger.fingerprint`; with ``poset``, for poset counts,
    the poset's too) and the budget of ``Accountant.create(eps_budget, **options)``.
    A later use must pass the same data and the same budget, rule and group size
    (or ``eps_budget=None``: the ledger's).

    Args:
      dataset: the dataset's name (1 to 200 printable characters).
      data: the data (its fingerprint is stored, never the data).
      eps_budget: the budget on first use; ``None``: the registered one.
      poset: the poset of poset counts, if any (a use with another poset is charged
        to the same budget, with a warning: the people are the same).
      key: as for :meth:`jaxdp.Accountant.create`.
      secure: as for :meth:`jaxdp.Accountant.create`.
      **options: the other options of :meth:`jaxdp.Accountant.create` (not
        ``history``: a ledger keeps charges, not an accountant's log).

    Returns:
      An :class:`~jaxdp.Accountant` holding the dataset's spent units and counters.

    Raises:
      DatasetMismatchError: the name is registered with other data, or the data
        under another name.
      BudgetMismatchError: another budget, rule or group size than the registered.
      ValueError: a bad name or budget (before the ledger is touched).
      LedgerError: the ledger cannot be read or written.
    """
    self._check_name(dataset)
    if eps_budget is None:
      if options:
        raise ValueError(
          f"eps_budget=None takes the registered budget; {', '.join(options)} "
          "cannot be given with it."
        )
      self._known(dataset)
      acct = records.rebuild(
        self._index.datasets[dataset]["budget"], key=key, secure=secure
      )
    else:
      acct = Accountant.create(eps_budget, key=key, secure=secure, **options)
    return self.resume(dataset, data, acct, poset=poset)

  def resume(
    self, dataset: str, data: Any, acct: Accountant, *, poset: Any = None
  ) -> Accountant:
    """``acct`` at the state of ``dataset``, registered with ``acct``'s budget on first
    use (as :meth:`accountant`, for an accountant made by the caller).

    Raises:
      As :meth:`accountant`.
    """
    self._check_name(dataset)
    if not isinstance(acct, Accountant):
      raise _checks.ArgTypeError(
        f"acct must be a jaxdp.Accountant; got {type(acct).__name__}."
      )
    if acct.history:
      raise ValueError("a ledger's accountant keeps no history: create it with history=0.")
    fp = dataset_fingerprint(data, poset)
    record = records.budget_record(acct)
    with self._index.writing(self._store) as tx:
      self._check_dataset(dataset, fp, record)
      if dataset not in self._index.datasets:
        self._index.append(tx, dataset, "dataset", {"fingerprint": fp, "budget": record})
      state = self._index.states[dataset]
    return records.resume(acct, state)

  def committed(self, dataset: str) -> dict:
    """The dataset's state after the last entry this ledger object read or wrote
    (spent units, spent delta units, answered, refusals), without reading the file
    again.

    Raises:
      KeyError: no such dataset was read.
    """
    return self._index.states[dataset]

  def _check_name(self, dataset: Any) -> None:
    if not (isinstance(dataset, str) and 0 < len(dataset) <= MAX_NAME):
      raise _checks.ArgTypeError(
        f"dataset must be a name of 1 to {MAX_NAME} characters; got {dataset!r:.80}."
      )
    if not dataset.isprintable():
      raise ValueError(f"dataset must be printable; got {dataset!r:.80}.")

  def _check_dataset(self, dataset: str, fp: dict, record: dict) -> None:
    known = self._index.datasets.get(dataset)
    other = self._index.by_data.get(fp["data"])
    if known is None:
      if other is not None:
        raise DatasetMismatchError(
          f"this data is already registered as dataset {other!r} in ledger "
          f"{self.path}: the same data under a second name would get a second budget. "
          f"Use the name {other!r}."
        )
      return
    if known["fingerprint"]["data"] != fp["data"]:
      raise DatasetMismatchError(
        f"dataset {dataset!r} is registered in ledger {self.path} with other data "
        "(the fingerprints of dtype, shape and values differ): a name is one "
        "dataset. Use a new name for new data."
      )
    if known["fingerprint"]["poset"] != fp["poset"]:
      warnings.warn(
        f"dataset {dataset!r} was registered with "
        f"{'another poset' if fp['poset'] else 'a poset'} than this use's; its "
        "releases are charged to the same budget (the same people).",
        stacklevel=3,
      )
    records.check_budget(known["budget"], record, dataset)

  # ---------------------------------------------------------------- charges
  def charge(
    self, dataset: str, acct: Accountant, mech: Any, shape: tuple = (), *, label: str = ""
  ) -> Accountant:
    """Commits the charge of one release of ``mech`` before it is run.

    Run the release from the accountant returned (not from ``acct``): it holds the
    dataset's state just before this charge (other processes may have charged
    since ``acct`` was made), so the release charges exactly what was committed.

    Args:
      dataset: the dataset's name (registered by :meth:`accountant`).
      acct: the dataset's accountant (its key and configuration are kept).
      mech: the mechanism to release.
      shape: the shape of the statistic (the mechanism's ``valid`` check).
      label: free text stored with the charge.

    Returns:
      The accountant to release from.

    Raises:
      ReleaseRefusedError: the charge would take the dataset past its budget
        (nothing was written, except a refusal under a plan).
      BudgetExceededError: one release costs more than the whole budget.
      BudgetMismatchError: ``acct`` has another budget than the dataset.
      LedgerError: the ledger cannot be read, verified or written.
    """
    self._check_call(dataset, acct, label)
    eps, delta, valid = mechanism_cost(acct, mech, tuple(shape))
    event = mechanism_event(acct, mech)
    body = {"mechanism": records.describe_mechanism(mech, (eps, delta), event)}
    pre, ok = self._commit(dataset, acct, [(eps, delta, valid, event, body)], label)
    if not ok:
      raise ReleaseRefusedError(self._refusal(dataset))
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

    Inside the transaction, ``fn`` is planned (:func:`jaxdp.plan`) against the
    dataset's current state and every release is charged; run ``fn`` (jitted) from
    the accountant returned, with the same arguments, and it spends exactly what
    was committed.

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
      As :func:`jaxdp.plan` and :meth:`charge`.
    """
    self._check_call(dataset, acct, label)
    currency = {"zcdp": "rho", "rdp": "rdp"}.get(acct.rule.name, "eps")

    def rows(pre: Accountant) -> list:
      p: Plan = plan(fn, pre, *args, **kwargs)
      if p.refused:
        raise ReleaseRefusedError(self._refusal(dataset, planned=len(p.releases)))
      out = []
      for r in p.releases:
        cost = np.asarray(r.rdp) if currency == "rdp" else getattr(r, currency)
        d = 0.0 if currency != "eps" else r.delta
        desc = {"kind": "planned release", "params": {}, "cost": records.jsonable(cost)}
        out.append((cost, d, True, r.event, {"mechanism": dict(desc, event=r.event)}))
      return out

    pre, ok = self._commit(dataset, acct, rows, label)
    if not ok:
      raise LedgerError("a planned release was refused when charged; nothing written.")
    return pre

  def _check_call(self, dataset: str, acct: Accountant, label: str) -> None:
    if type(jex_core.find_top_trace(())) is not _EVAL_TRACE:
      raise LedgerError(
        "a ledger charges only outside JAX transformations (jit, vmap, ...): a "
        "charge made while tracing would be made once for every run of the program."
      )
    if not isinstance(acct, Accountant):
      raise _checks.ArgTypeError(
        f"acct must be a jaxdp.Accountant; got {type(acct).__name__}."
      )
    if not isinstance(label, str) or len(label) > 10_000:
      raise _checks.ArgTypeError("label must be a string of at most 10,000 characters.")

  def _commit(self, dataset, acct, rows, label):
    """One exclusive transaction: the charges of ``rows`` (or a function of the
    accountant at the current state giving them), each decided by the rule.

    Returns:
      ``(accountant at the state before, answered)``.
    """
    rule = bound_rule(acct)
    record = records.budget_record(acct)
    with self._index.writing(self._store) as tx:
      if dataset not in self._index.datasets:
        raise KeyError(f"ledger {self.path} has no dataset {dataset!r}.")
      records.check_budget(self._index.datasets[dataset]["budget"], record, dataset)
      state = self._index.states[dataset]
      pre = records.resume(acct, state)
      todo = rows(pre) if callable(rows) else rows
      cur = pre
      for eps, delta, valid, event, body in todo:
        ok, _, after = rule.spend(cur, eps, delta, valid, event)
        before, cur = records.state_of(cur), after
        ok = bool(ok)
        if not ok and rule.name not in records.POSITIONAL:
          return pre, False  # rolled back: nothing written
        units = _units(eps, acct.unit_exponent, rule.name)
        _, delta_units = budget.charge_host(delta, acct.delta_unit_exponent, positive=False)
        body = dict(
          body,
          before=before,
          after=records.state_of(after),
          units=units,
          delta_units=int(delta_units),
          label=label,
        )
        self._index.append(tx, dataset, "charge" if ok else "refusal", body)
        if not ok:
          break
    return pre, ok

  def _refusal(self, dataset: str, planned: int = 0) -> str:
    s = self._summary(dataset)
    what = f"{planned} planned releases" if planned else "this release"
    return (
      f"refused: {what} would take dataset {dataset!r} past its budget "
      f"({s.spent_eps:g} of eps {s.budget['eps']:g} spent, in ledger {self.path}). "
      "Nothing was spent."
    )

  def close(self) -> None:
    """Closes the file (every charge is already committed)."""
    self._store.close()

  def __enter__(self) -> Ledger:
    return self

  def __exit__(self, *exc: Any) -> None:
    self.close()

  def __repr__(self) -> str:
    return f"Ledger({self.path!r})"


def _units(cost, exponent, rule_name):
  """The rule's integer units of a cost (one per order under the Rényi filter)."""
  if rule_name in records.POSITIONAL:
    return None
  _, units = budget.charge_host(cost, exponent, positive=True)
  return records.jsonable(units)


def records_body(row) -> dict:
  """The JSON body of a stored entry."""
  return json.loads(row[4])
