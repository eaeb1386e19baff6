"""The keyed hash chain over a ledger's entries, and the sealed head.

Each entry stores ``hash = HMAC-SHA256(key, previous hash || canonical bytes of the
entry)`` under the ledger's secret key (:mod:`.keyfile`); the first entry's previous
hash is the genesis value of the ledger's random id, and the head row holds the last
entry's number and a seal, an HMAC of that number and hash in a domain of its own (so
no value that would seal an earlier head is stored in the file). Editing, deleting,
inserting or reordering entries, deleting the newest ones and resealing the head, or
resetting the ledger then needs the key. It does not stop someone who can read the
key file and run this code, nor a whole older copy of the files put back (every copy
verifies): see the ledger guide. Standard library only.
"""

from __future__ import annotations

import hashlib
import hmac
import json

from jaxdp.ledger.errors import LedgerTamperedError

__all__ = ["canonical", "genesis", "link", "seal", "unsealed", "Chain"]


def canonical(obj) -> str:
  """The canonical JSON text of ``obj`` (sorted keys, no spaces, no NaN)."""
  return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def _mac(key: bytes, domain: bytes, *parts: bytes) -> str:
  h = hmac.new(key, domain + b"\x00", hashlib.sha256)
  for p in parts:
    h.update(len(p).to_bytes(8, "big") + p)
  return h.hexdigest()


def _hex(value, what: str) -> bytes:
  """The bytes of a stored hash, or LedgerTamperedError if it is not one (a
  malformed stored value is the ledger's error, never a bare ValueError)."""
  try:
    if isinstance(value, str) and len(value) == 64:
      return bytes.fromhex(value)
  except ValueError:
    pass
  raise LedgerTamperedError(
    f"{what} is not a hash jaxdp writes (64 hex digits): it was edited."
  )


def genesis(key: bytes, ledger_id: str) -> str:
  """The previous hash of a ledger's first entry."""
  return _mac(key, b"jaxdp-ledger-genesis", ledger_id.encode())


def link(
  key: bytes, prev: str, seq: int, dataset: str, kind: str, time: str, body: str
) -> str:
  """The keyed hash of entry ``seq`` after ``prev``.

  Raises:
    LedgerTamperedError: ``prev`` is not a stored hash, or ``body`` not text.
  """
  head = canonical([seq, dataset, kind, time]).encode()
  prev_bytes = _hex(prev, f"the previous hash of entry {seq}")
  if not isinstance(body, str):
    raise LedgerTamperedError(f"entry {seq}'s body is not text: it was edited.")
  return _mac(key, b"jaxdp-ledger-entry", prev_bytes, head, body.encode())


def seal(key: bytes, seq: int, digest: str) -> str:
  """The head's seal of ``(seq, hash of entry seq)``.

  Raises:
    LedgerTamperedError: ``digest`` is not a stored hash.
  """
  digest_bytes = _hex(digest, f"the hash of entry {seq}")
  return _mac(key, b"jaxdp-ledger-head", str(int(seq)).encode(), digest_bytes)


def unsealed(seq) -> LedgerTamperedError:
  """The error for a head whose seal does not match entry ``seq``'s stored hash."""
  return LedgerTamperedError(
    f"the ledger's head (entry {seq}) does not match its seal: the head was edited or "
    "entries were deleted."
  )


class Chain:
  """The verified end of a chain: the last entry's number and hash."""

  def __init__(self, ledger_id: str, key: bytes):
    self.key = key
    self.seq, self.hash = 0, genesis(key, ledger_id)

  def extend(self, row, linked: bool = False) -> None:
    """Verifies one stored entry ``(seq, dataset, kind, time, body, prev, hash)``
    as the next one.

    Args:
      linked: the row is the one :func:`link` just made after this chain's end (an
        append of this process): its number and previous hash are checked, its
        hash is not computed again.

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
    _hex(digest, f"the hash of entry {seq}")
    if not linked and not hmac.compare_digest(
      link(self.key, prev, seq, dataset, kind, time, body), digest
    ):
      raise LedgerTamperedError(
        f"entry {seq} ({kind} of dataset {dataset!r}) does not match its hash: it "
        "was edited after it was written."
      )
    self.seq, self.hash = seq, digest
