"""The hash chain over a ledger's entries (tamper evidence against casual edits).

Each entry stores ``hash = SHA-256(previous hash || canonical bytes of the entry)``;
the first entry's previous hash is the genesis hash of the ledger's random id, and
the ledger's head row names the last entry's number and hash. Editing, deleting,
inserting or reordering an entry, or deleting the last one, breaks the chain or the
head. It does not stop someone who can run this code (they can recompute every
hash), nor a whole older copy of the file put back (every copy verifies): see the
ledger guide. Standard library only.
"""

from __future__ import annotations

import hashlib
import json

from jaxdp.ledger.errors import LedgerTamperedError

__all__ = ["canonical", "genesis", "link", "Chain"]


def canonical(obj) -> str:
  """The canonical JSON text of ``obj`` (sorted keys, no spaces, no NaN)."""
  return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def genesis(ledger_id: str) -> str:
  """The previous hash of a ledger's first entry."""
  return hashlib.sha256(b"jaxdp-ledger\x00" + ledger_id.encode()).hexdigest()


def link(prev: str, seq: int, dataset: str, kind: str, time: str, body: str) -> str:
  """The hash of entry ``seq`` after ``prev``."""
  head = canonical([seq, dataset, kind, time]).encode()
  return hashlib.sha256(bytes.fromhex(prev) + head + b"\n" + body.encode()).hexdigest()


class Chain:
  """The verified end of a chain: the last entry's number and hash."""

  def __init__(self, ledger_id: str):
    self.seq, self.hash = 0, genesis(ledger_id)

  def extend(self, row) -> None:
    """Verifies one stored entry ``(seq, dataset, kind, time, body, prev, hash)``
    as the next one.

    Raises:
      LedgerTamperedError: naming the entry and what does not match.
    """
    seq, dataset, kind, time, body, prev, digest = row
    if seq != self.seq + 1:
      raise LedgerTamperedError(
        f"entry {self.seq + 1} is missing (the next stored entry is {seq}): an "
        "entry was deleted or renumbered."
      )
    if prev != self.hash:
      raise LedgerTamperedError(
        f"entry {seq} does not follow entry {self.seq} (its previous hash differs): "
        "an entry was edited, deleted or reordered."
      )
    if link(prev, seq, dataset, kind, time, body) != digest:
      raise LedgerTamperedError(
        f"entry {seq} ({kind} of dataset {dataset!r}) does not match its hash: it "
        "was edited after it was written."
      )
    self.seq, self.hash = seq, digest
