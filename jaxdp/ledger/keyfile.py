"""A ledger's secret key: 32 random bytes in the file ``<ledger>.key`` beside it.

The key is made (:func:`secrets.token_bytes`) when the ledger is created, written to
a temporary file with mode 0600, fsynced and linked into place (so a key file is
either whole or absent) before the database is first used. It keys the hash chain
and seals the head (:mod:`.chain`): without it, entries cannot be rewritten, the
newest ones deleted, or the ledger reset so that it still verifies. A ledger whose
key file is missing is refused (never read as a fresh start). The key file is part
of the ledger: back it up with the database, and keep it as private. Standard
library only.
"""

from __future__ import annotations

import os
import secrets
import uuid
from pathlib import Path

from jaxdp.ledger.errors import LedgerCorruptError, LedgerTamperedError, LedgerWriteError

__all__ = ["KEY_BYTES", "key_path", "make_or_read", "read"]

KEY_BYTES = 32


def key_path(path: str | os.PathLike) -> Path:
  """The key file of the ledger at ``path``."""
  return Path(str(path) + ".key")


def read(path: str | os.PathLike) -> bytes:
  """The key of the existing ledger at ``path``.

  Raises:
    LedgerTamperedError: the key file is missing.
    LedgerCorruptError: it is not a key (another size) or cannot be read.
  """
  kp = key_path(path)
  try:
    key = kp.read_bytes()
  except FileNotFoundError:
    raise LedgerTamperedError(
      f"ledger {path}: its key file {kp} is missing; a ledger without its key is "
      "never read as a fresh budget. Restore the key file (it is part of the ledger)."
    ) from None
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


def make_or_read(path: str | os.PathLike) -> bytes:
  """The key of a ledger about to be created: a new one, or the one another process
  creating the same ledger linked first.

  Raises:
    LedgerWriteError: the key file cannot be written (a missing or read-only folder,
      a full disk).
  """
  try:
    _make(key_path(path))
  except OSError as e:
    raise LedgerWriteError(
      f"ledger {path}: cannot create its key file {key_path(path)} ({e.strerror}); "
      "nothing was created or answered. Make the folder exist and be writable."
    ) from None
  return read(path)


def _make(kp: Path) -> None:
  tmp = kp.with_name(f"{kp.name}.{uuid.uuid4().hex}.tmp")
  fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
  try:
    with os.fdopen(fd, "wb") as f:
      f.write(secrets.token_bytes(KEY_BYTES))
      f.flush()
      os.fsync(f.fileno())
    try:
      os.link(tmp, kp)
    except FileExistsError:
      pass
  finally:
    tmp.unlink(missing_ok=True)
  dfd = os.open(kp.parent, os.O_RDONLY)
  try:
    os.fsync(dfd)
  finally:
    os.close(dfd)
