"""What a ledger's entries say: its datasets, their budgets and their current states,
replayed from the verified hash chain.

Every transaction first reads the entries other connections appended since this
process last looked and verifies them (:class:`~jaxdp.ledger.chain.Chain`): the
check of a charge against the remaining budget always sees every committed charge.
An entry must also continue its dataset's state (its ``before`` state is the state
after the dataset's previous entry), so a charge removed with its hash chain
recomputed still has to account for the states around it. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from jaxdp import _checks
from jaxdp.ledger.chain import Chain, canonical, genesis, link, unsealed
from jaxdp.ledger.errors import LedgerRollbackError, LedgerTamperedError
from jaxdp.ledger.store import Store, Transaction

__all__ = [
  "KINDS",
  "MAX_SEQ",
  "Index",
  "check_head",
  "holds_entry",
  "initial_state",
  "verify_row",
]

# refusal: only where a rule counts them; fingerprint: another fingerprint of a
# dataset's data (of the current scheme, for a dataset registered by jaxdp 0.1; or of
# another form of the data, jaxdp.ledger.fingerprint.data_forms), recorded on use
KINDS = ("dataset", "charge", "refusal", "fingerprint")


def initial_state(budget: dict) -> dict:
  """The state of a dataset with no charge: nothing spent, answered or refused."""
  shape = budget["state_shape"]
  return {
    "spent": [0] * shape[0] if shape else 0,
    "spent_delta": 0,
    "answered": 0,
    "refusals": 0,
  }


class Index:
  """The datasets of one ledger and their states, as far as this process has read.

  Attributes:
    datasets: name -> the body of its registration entry (``fingerprint``,
      ``budget``) with its ``seq`` and ``time``.
    states: name -> its current state (``spent`` units, ``spent_delta`` units,
      ``answered``, ``refusals``).
    by_data: data fingerprint -> the name it is registered under (for a dataset
      registered by jaxdp 0.1, also its fingerprint of the current scheme, from a
      ``fingerprint`` entry).
    positions: name -> the numbers of its charge and refusal entries, in order
      (entry ``positions[name][k - 1]`` holds the state after its ``k``-th).
  """

  def __init__(self, ledger_id: str, key: bytes):
    self.chain = Chain(ledger_id, key)
    self._written: list = []
    self._head, self._last = None, None  # as stored, when last verified
    self.datasets, self.states, self.by_data, self.positions = {}, {}, {}, {}

  # ------------------------------------------------------------------ reading
  def sync(self, tx: Transaction) -> None:
    """Reads and verifies the entries appended since the last sync, after checking
    the head's seal and that the last entry read is still there, unchanged (its
    stored hash the one read, its content matching it).

    The head row and the last entry read are compared with those this index last
    verified (kept as stored); only one that differs is verified again by its keyed
    hash, so a sync that finds nothing new reads two rows and computes no hash.
    Entries before the last one read are verified when a ledger is opened, not at
    every sync: an edit of one of them in between is found by the next open (and by
    :func:`~jaxdp.ledger.protocol.check_lineage`, in the one entry it reads), while
    this index's states, replayed from the entries as verified, decide the charges.

    Raises:
      LedgerRollbackError: the file holds fewer entries than were read before, or
        the last entry read was replaced (an older copy put back).
      LedgerTamperedError: an entry, the last entry read or the head does not
        verify.
    """
    seq = self.chain.seq
    raw, rows = tx.head_row(), tx.entries_from(seq)
    last = rows[0] if seq and rows and rows[0][0] == seq else None
    if raw != self._head:  # moved by another connection, or not verified yet
      head = tx.head()
    elif seq and (last is None or last[6] != self.chain.hash):
      raise unsealed(seq)  # its seal was verified for the hash read, not this one
    else:
      head = (seq, self.chain.hash)
    if head[0] < seq or (seq and (last is None or last[6] != self.chain.hash)):
      raise LedgerRollbackError(
        f"the ledger now ends before entry {seq}, which this process read earlier "
        f"(its head is entry {head[0]}), or entry {seq} was replaced: an older copy "
        "of the file was put back. Nothing is answered; restore the newest copy."
      )
    if last is not None and last != self._last:  # edited in place since (hash kept)
      verify_row(last, self.chain.key)
    for row in rows[1:] if seq else rows:
      self.apply(row)
    if head != (self.chain.seq, self.chain.hash):
      raise LedgerTamperedError(
        f"the ledger's head names entry {head[0]}, but the last entry is "
        f"{self.chain.seq}: entries were deleted or the head was edited."
      )
    self._head = raw

  def apply(self, row, linked: bool = False) -> None:
    """Verifies one entry and applies it (``linked``: an entry this index just
    appended, whose hash :meth:`Chain.extend` does not compute again).

    Raises:
      LedgerTamperedError: it does not continue the chain, or its dataset's state,
        or its body is not what jaxdp writes.
    """
    try:
      self._apply(row, linked)
    except (KeyError, TypeError, AttributeError, IndexError):
      raise LedgerTamperedError(
        f"entry {row[0]} does not hold what a ledger entry holds: it was written by "
        "something else than jaxdp."
      ) from None

  def _apply(self, row, linked: bool) -> None:
    self.chain.extend(row, linked)
    self._last = tuple(row)
    seq, name, kind, time, body = row[:5]
    try:
      entry = json.loads(body)
    except (ValueError, RecursionError):
      raise LedgerTamperedError(f"entry {seq} is not valid JSON.") from None
    if kind == "dataset":
      if name in self.datasets:
        raise LedgerTamperedError(f"entry {seq} registers dataset {name!r} again.")
      self.datasets[name] = dict(entry, seq=seq, time=time)
      self.states[name] = initial_state(entry["budget"])
      self.by_data.setdefault(entry["fingerprint"]["data"], name)
      self.positions[name] = []
      return
    if kind not in KINDS or name not in self.datasets:
      raise LedgerTamperedError(
        f"entry {seq} is a {kind!r} of an unknown dataset {name!r}."
      )
    if kind == "fingerprint":
      data = entry["fingerprint"]["data"]
      if (
        entry["fingerprint"]["scheme"] != 2  # fingerprint.SCHEME (numpy-free here)
        or self.by_data.get(data, name) != name
      ):
        raise LedgerTamperedError(
          f"entry {seq} records a fingerprint for dataset {name!r} of another scheme "
          "or of another dataset's data: jaxdp writes none such."
        )
      self.by_data.setdefault(data, name)
      return
    before, after = entry.get("before"), entry.get("after")
    step = {"charge": "answered", "refusal": "refusals"}[kind]
    if (
      before != self.states[name]
      or not isinstance(after, dict)
      or after.get(step) != before[step] + 1
      or not _monotone(before["spent"], after.get("spent"))
    ):
      raise LedgerTamperedError(
        f"entry {seq} ({kind} of dataset {name!r}) does not continue the dataset's "
        "state: an entry before it was removed or edited."
      )
    self.states[name] = after
    self.positions[name].append(seq)

  # ------------------------------------------------------------------ writing
  def append(self, tx: Transaction, dataset: str, kind: str, body: dict) -> None:
    """Appends an entry in ``tx`` and applies it (undone if the transaction fails,
    see :meth:`writing`)."""
    prev = (self.chain.seq, self.chain.hash)
    row, head = tx.append(prev, dataset, kind, canonical(body))
    self.apply(row, linked=True)
    self._head = head
    self._written.append(row)

  @contextlib.contextmanager
  def writing(self, store: Store, write: bool = True):
    """An exclusive transaction (``BEGIN IMMEDIATE``) that starts with :meth:`sync`;
    if it fails, what it appended is undone in the index (and a sync that failed,
    entirely). What it appended is read back before the commit
    (:meth:`~jaxdp.ledger.store.Transaction.read_back`).

    Yields:
      The :class:`~jaxdp.ledger.store.Transaction`.
    """
    saved = self._saved()
    self._written = []
    try:
      with store.transaction(write=write) as tx:
        self.sync(tx)
        saved = self._saved()  # what others committed stays read
        yield tx
        if self._written:
          tx.read_back(self._written, self._head)
    except BaseException:
      self._restore(saved)
      raise
    finally:
      self._written = []

  def _saved(self):
    return (
      self.chain.seq,
      self.chain.hash,
      dict(self.datasets),
      dict(self.states),
      dict(self.by_data),
      {name: len(seqs) for name, seqs in self.positions.items()},
      self._head,
      self._last,
    )

  def _restore(self, saved) -> None:
    self.chain.seq, self.chain.hash = saved[0], saved[1]
    self.datasets, self.states, self.by_data = (dict(d) for d in saved[2:5])
    self.positions = {n: self.positions[n] for n in saved[5]}
    for name, k in saved[5].items():  # append-only: cut back to the saved length
      del self.positions[name][k:]
    self._head, self._last = saved[6], saved[7]


MAX_SEQ = 2**63 - 1  # the largest entry number sqlite stores (a signed 64-bit integer)


def check_head(head: Any) -> tuple[int, str] | None:
  """A ledger's ``expect_head`` (None or ``(seq, hash)``), or raises naming it (an entry
  number is an integer, never truncated from a float or read from a string or a
  bool).

  Raises:
    ArgTypeError: not a pair of an entry number >= 0 and a string.
  """
  if head is None:
    return None
  ok = isinstance(head, (tuple, list)) and len(head) == 2 and isinstance(head[1], str)
  if ok:
    try:
      return _checks.check_int(head[0], "expect_head's entry", minimum=0), head[1]
    except ValueError:
      pass
  raise _checks.ArgTypeError(
    f"expect_head must be (seq, hash) as Ledger.head gives it: an entry number >= 0 "
    f"and a string; got {head!r:.120}."
  )


def holds_entry(tx: Transaction, key: bytes, seq, digest) -> bool:
  """Whether the file holds entry ``seq`` with hash ``digest`` (a ledger's
  ``expect_head``): entry 0 is the chain's start, the head of an empty ledger
  (:func:`~jaxdp.ledger.chain.genesis` of its key and id), from which every entry
  descends; an entry number sqlite cannot store is not held."""
  seq = int(seq)
  if seq == 0:
    return digest == genesis(key, tx.ledger_id)
  return 0 < seq <= MAX_SEQ and tx.hash_at(seq) == digest


def verify_row(row, key: bytes) -> None:
  """Raises LedgerTamperedError unless a stored row matches its own keyed hash."""
  seq, dataset, kind, time, body, prev, digest = row
  try:
    ok = link(key, prev, seq, dataset, kind, time, body) == digest
  except (TypeError, ValueError):  # a stored value of another type: not jaxdp's
    ok = False
  if not ok:
    raise LedgerTamperedError(f"entry {seq} was edited after the ledger was opened.")


def _monotone(before, after) -> bool:
  """Spent units never decrease (a Rényi order saturates, never drops)."""
  if isinstance(before, list):
    return (
      isinstance(after, list)
      and len(after) == len(before)
      and all(isinstance(a, int) and a >= b for a, b in zip(after, before))
    )
  return isinstance(after, int) and after >= before
