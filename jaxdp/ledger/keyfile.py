"""A ledger's secret key: 32 random bytes in the file ``<ledger>.key`` beside it.

The key is made (:func:`secrets.token_bytes`) when the ledger is created, written to
a temporary file with mode 0600 and fsynced, and linked into place just after the
database (:mod:`.creation`), so a key file is either whole or absent, and a key file
without its database always means that the database was deleted or moved. It keys
the hash chain and seals the head (:mod:`.chain`): without it, entries cannot be
rewritten, the newest ones deleted, or the ledger reset so that it still verifies.
A ledger whose key file is missing is refused (never read as a fresh start), and so
is a key file whose database is missing (never taken for a new ledger). The key
file is part of the ledger: back it up with the database, and keep it as private.
Standard library only.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from jaxdp.ledger.errors import LedgerCorruptError, LedgerTamperedError, LedgerWriteError

__all__ = ["KEY_BYTES", "key_path", "orphaned", "read", "sync_folder", "write_temporary"]

KEY_BYTES = 32


def key_path(path: str | os.PathLike) -> Path:
  """The key file of the ledger at ``path``."""
  return Path(str(path) + ".key")


def orphaned(path: str | os.PathLike) -> LedgerTamperedError:
  """The error for a key file whose database is missing."""
  return LedgerTamperedError(
    f"ledger {path}: the database is missing but its key file {key_path(path)} "
    "exists, so the database was deleted or moved; it is not created again as a "
    f"fresh budget, and nothing was created. Restore {path} from a backup (with its "
    f"key file). Only if the budget is really to start again, remove {key_path(path)} "
    "deliberately: that resets every dataset's budget, and the agency's own records "
    "must justify it."
  )


def read(path: str | os.PathLike, wait: float = 0.0) -> bytes:
  """The key of the existing ledger at ``path``, waiting up to ``wait`` seconds for
  a key file that is missing (a process creating the ledger links its database
  first, its key file just after).

  Raises:
    LedgerTamperedError: the key file is missing.
    LedgerCorruptError: it is not a key (another size) or cannot be read.
  """
  kp = key_path(path)
  deadline = time.monotonic() + wait
  while True:
    try:
      key = kp.read_bytes()
      break
    except FileNotFoundError:
      if time.monotonic() > deadline:
        raise LedgerTamperedError(
          f"ledger {path}: its key file {kp} is missing; a ledger without its key is "
          "never read as a fresh budget. Restore the key file (it is part of the "
          "ledger)."
        ) from None
      time.sleep(0.01)
    except OSError as e:
      raise LedgerCorruptError(
        f"ledger {path}: cannot read its key file {kp} ({e})."
      ) from None
  if len(key) != KEY_BYTES:
    raise LedgerCorruptError(
      f"ledger {path}: its key file {kp} holds {len(key)} bytes, not {KEY_BYTES}: it "
      "is damaged. Restore it from a backup."
    )
  return key


def write_temporary(path: str | os.PathLike, key: bytes) -> Path:
  """Writes ``key`` to a new temporary file (mode 0600, fsynced) beside the ledger's
  key file; returns its path (for :mod:`.creation` to link into place).

  Raises:
    LedgerWriteError: it cannot be written (a missing or read-only folder, a full
      disk).
  """
  kp = key_path(path)
  tmp = kp.with_name(f"{kp.name}.{uuid.uuid4().hex}.tmp")
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
      f.write(key)
      f.flush()
      os.fsync(f.fileno())
  except OSError as e:
    tmp.unlink(missing_ok=True)
    raise LedgerWriteError(
      f"ledger {path}: cannot create its key file {kp} ({e.strerror}); nothing was "
      "created or answered. Make the folder exist and be writable."
    ) from None
  return tmp


def sync_folder(path: str | os.PathLike) -> None:
  """Fsyncs the folder holding ``path`` (so the links made in it survive a crash)."""
  dfd = os.open(Path(path).parent, os.O_RDONLY)
  try:
    os.fsync(dfd)
  finally:
    os.close(dfd)
