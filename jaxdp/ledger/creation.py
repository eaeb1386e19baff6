"""A new ledger's files: the database built whole in a temporary file and linked
into place, then its key file (:mod:`.keyfile`) linked beside it.

The order makes a deleted database detectable: a key file is linked only after its
database, so a key file without its database is never a ledger being created; it is
a database deleted or moved, and :class:`~jaxdp.ledger.store.Store` refuses it. A
database without its key file is, for the moment between the two links, a ledger
being created: an opener waits briefly for the key (:func:`.keyfile.read`) before
refusing it. Two processes creating one ledger at once race to link their
databases: the first wins, the other discards its files and opens the winner's, so
both use one ledger id and one key. A database is never visible empty or half
written. Standard library only.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
import uuid
from pathlib import Path

from jaxdp.ledger import chain, keyfile

__all__ = ["FORMAT", "SCHEMA_SQL", "create"]

FORMAT = "jaxdp-ledger 2"

SCHEMA_SQL = (
  "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
  "CREATE TABLE IF NOT EXISTS entries (seq INTEGER PRIMARY KEY, dataset TEXT NOT NULL, "
  "kind TEXT NOT NULL, time TEXT NOT NULL, body TEXT NOT NULL, prev TEXT NOT NULL, "
  "hash TEXT NOT NULL)",
  "CREATE TABLE IF NOT EXISTS head (id INTEGER PRIMARY KEY CHECK (id = 1), "
  "seq INTEGER NOT NULL, hash TEXT NOT NULL)",
)


def _build(tmp: Path, key: bytes, journal: str) -> None:
  """A complete empty ledger (schema, format, a random id, the sealed genesis head)
  in ``tmp``, closed and fsynced."""
  conn = sqlite3.connect(tmp, isolation_level=None)
  try:
    conn.execute(f"PRAGMA journal_mode={journal.upper()}")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("BEGIN IMMEDIATE")
    for statement in SCHEMA_SQL:
      conn.execute(statement)
    ledger_id = uuid.uuid4().hex
    conn.executemany(
      "INSERT INTO meta VALUES (?, ?)", (("format", FORMAT), ("id", ledger_id))
    )
    seal = chain.seal(key, 0, chain.genesis(key, ledger_id))
    conn.execute("INSERT INTO head VALUES (1, 0, ?)", (seal,))
    conn.execute("COMMIT")
  finally:
    conn.close()
  fd = os.open(tmp, os.O_RDONLY)
  try:
    os.fsync(fd)
  finally:
    os.close(fd)


def create(path: Path, journal: str) -> bool:
  """Creates the ledger at ``path`` (its database, then its key file), unless
  another process links a database there first.

  Returns:
    Whether this call created it (False: another process did; open that one).

  Raises:
    LedgerWriteError: the folder cannot be written.
    LedgerTamperedError: a key file appeared beside the new database before its own
      key was linked (written by something else than this code); the new database is
      removed again.
    sqlite3.Error: sqlite failed to build the database (the caller translates it).
  """
  key = secrets.token_bytes(keyfile.KEY_BYTES)
  tmp_key = keyfile.write_temporary(path, key)
  tmp = path.with_name(f"{path.name}.{uuid.uuid4().hex}.tmp")
  try:
    _build(tmp, key, journal)
    try:
      os.link(tmp, path)
    except FileExistsError:
      return False
    try:
      os.link(tmp_key, keyfile.key_path(path))
    except FileExistsError:
      if os.path.samefile(tmp, path):
        path.unlink()
      raise keyfile.orphaned(path) from None
    keyfile.sync_folder(path)
    return True
  finally:
    tmp.unlink(missing_ok=True)
    tmp_key.unlink(missing_ok=True)
