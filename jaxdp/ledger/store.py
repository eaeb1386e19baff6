"""A ledger's sqlite3 file: its schema, its settings and its transactions.

Settings: a rollback journal (or, chosen when the file is created, a write-ahead
log) with ``PRAGMA synchronous=FULL`` (a committed transaction survives a process
crash and a power loss), a busy timeout, and ``BEGIN IMMEDIATE`` for every
transaction that may write, so the read of the remaining budget, the check and the
write of the charge hold the write lock together. Every sqlite error becomes one of
:mod:`.errors`, with the file's path and what to do. The schema is an allowlist,
checked in every transaction: ``meta`` (format and the ledger's random id),
``entries`` (the append-only log, see :mod:`.chain`) and ``head`` (the last entry's
number and seal), nothing else. What a transaction writes is read back before it
commits. A new ledger is made by :mod:`.creation` (its database, then its key in
:mod:`.keyfile`). Standard library only.
"""

from __future__ import annotations

import contextlib
import datetime
import hmac
import os
import sqlite3
import threading
import time
from pathlib import Path

from jaxdp import _checks
from jaxdp.ledger import chain, creation, keyfile
from jaxdp.ledger.creation import FORMAT
from jaxdp.ledger.errors import (
  LedgerCorruptError,
  LedgerError,
  LedgerLockedError,
  LedgerTamperedError,
  LedgerWriteError,
)

__all__ = ["FORMAT", "JOURNALS", "Store", "Transaction"]

JOURNALS = ("delete", "wal")


def _schema_of(conn: sqlite3.Connection) -> list:
  return conn.execute(
    "SELECT type, name, tbl_name, sql FROM sqlite_master ORDER BY type, name, tbl_name, sql"
  ).fetchall()


def _expected_schema() -> list:
  conn = sqlite3.connect(":memory:")
  for statement in creation.SCHEMA_SQL:
    conn.execute(statement)
  out = _schema_of(conn)
  conn.close()
  return out


SCHEMA = _expected_schema()  # the only objects a ledger's file may hold


def check_schema(conn: sqlite3.Connection, path: str) -> None:
  """Raises unless the file holds exactly the ledger's tables and indexes (an
  allowlist: name, type and SQL text), so no trigger or view can change a charge.

  Raises:
    LedgerTamperedError: naming the first object that is not the ledger's.
  """
  found = _schema_of(conn)
  if found != SCHEMA:
    extra = [r for r in found if r not in SCHEMA] or [r for r in SCHEMA if r not in found]
    kind, name = extra[0][0], extra[0][1]
    raise LedgerTamperedError(
      f"ledger {path}: its schema is not a ledger's ({kind} {name!r} is added, missing "
      "or changed): a trigger, view or edited table could change or drop charges. "
      "Nothing is answered; restore the file from a backup."
    )


def translate(error: sqlite3.Error, path: str, timeout: float) -> LedgerError:
  """The ledger error for a sqlite error (its text, not the data, decides)."""
  text = str(error).lower()
  if "locked" in text or "busy" in text:
    return LedgerLockedError(
      f"ledger {path}: another process held its write lock for more than "
      f"{timeout:g} s; nothing was charged or answered. Try again, or raise the "
      "timeout (Ledger(path, timeout=...))."
    )
  if "readonly" in text or "read-only" in text:
    return LedgerWriteError(
      f"ledger {path}: the file or its folder is read-only (or the ledger was opened "
      "read-only), so nothing can be written and nothing is answered. Make both "
      "writable by this process (a ledger left by a crashed process needs write "
      "access once, to roll back its unfinished transaction)."
    )
  if "full" in text:
    return LedgerWriteError(
      f"ledger {path}: the disk or the ledger's size limit is full, so the charge "
      "was not written and nothing is answered. Free space and try again."
    )
  if "not a database" in text or "malformed" in text or "corrupt" in text:
    return LedgerCorruptError(
      f"ledger {path}: the file is damaged or is not a database ({error}); it is "
      "not read as an empty ledger. Restore it from a backup."
    )
  if "unable to open" in text:
    return LedgerWriteError(f"ledger {path}: cannot open the file ({error}).")
  if "disk i/o" in text or isinstance(error, sqlite3.OperationalError):
    return LedgerWriteError(
      f"ledger {path}: {error}; the transaction was not committed and nothing is answered."
    )
  return LedgerCorruptError(f"ledger {path}: {type(error).__name__}: {error}.")


def _filled(path: Path, wait: float) -> bool:
  """Whether the file holds something, waiting up to ``wait`` seconds for a process
  that is creating it (sqlite makes an empty file before the first commit)."""
  deadline = time.monotonic() + wait
  while path.stat().st_size == 0:
    if time.monotonic() > deadline:
      return False
    time.sleep(0.01)
  return True


def _check_wal(path: Path) -> bool:
  """Whether the existing file is in WAL mode; if so, refuses a missing ``-wal`` file
  after an unclean shutdown (its ``-shm`` file left, which sqlite removes only after
  the ``-wal`` on a clean close).

  Raises:
    LedgerTamperedError: the ``-shm`` file is there and the ``-wal`` file is not.
  """
  with open(path, "rb") as f:
    header = f.read(100)
  if len(header) < 20 or header[18] != 2:  # the file format's WAL mark
    return False
  wal, shm = Path(f"{path}-wal"), Path(f"{path}-shm")
  for _ in range(3):  # a connection closing removes -wal, then -shm
    if wal.exists() or not shm.exists():
      return True
    time.sleep(0.02)
  raise LedgerTamperedError(
    f"ledger {path}: its write-ahead log {wal} is missing after an unclean shutdown "
    f"({shm} is left): it holds committed charges, so the file alone would show too "
    "little spent. Nothing is answered; restore the -wal file (never delete it)."
  )


def now() -> str:
  """The time of an entry: UTC, ISO 8601, microseconds."""
  return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


class Transaction:
  """The reads and the append of one transaction."""

  def __init__(self, conn: sqlite3.Connection, ledger_id: str, key: bytes):
    self._conn, self.ledger_id, self._key = conn, ledger_id, key

  def head_row(self) -> tuple:
    """The head row as stored, ``(seq, seal)``, unverified (LedgerTamperedError if
    it is missing)."""
    rows = self._conn.execute("SELECT seq, hash FROM head WHERE id = 1").fetchall()
    if len(rows) != 1:
      raise LedgerTamperedError("the ledger's head row is missing: it was deleted.")
    return tuple(rows[0])

  def head(self) -> tuple[int, str]:
    """``(seq, hash)`` of the last entry (``(0, genesis)`` for an empty ledger), its
    seal verified.

    Raises:
      LedgerTamperedError: the head row is missing, or its seal does not match.
    """
    seq, stored = self.head_row()
    digest = chain.genesis(self._key, self.ledger_id) if seq == 0 else self.hash_at(seq)
    if (
      not isinstance(seq, int)
      or digest is None
      or not hmac.compare_digest(chain.seal(self._key, seq, digest), str(stored))
    ):
      raise chain.unsealed(seq)
    return seq, digest

  def hash_at(self, seq: int) -> str | None:
    """The stored hash of entry ``seq`` (None if there is none)."""
    row = self._conn.execute("SELECT hash FROM entries WHERE seq = ?", (seq,)).fetchone()
    return None if row is None else str(row[0])

  def row_at(self, seq: int) -> tuple | None:
    """Entry ``seq`` as :meth:`entries_after` returns it (None if there is none)."""
    return self._conn.execute(
      "SELECT seq, dataset, kind, time, body, prev, hash FROM entries WHERE seq = ?",
      (seq,),
    ).fetchone()

  def entries_after(self, seq: int) -> list:
    """The entries after ``seq``, in order: ``(seq, dataset, kind, time, body, prev,
    hash)``."""
    return self.entries_from(seq + 1)

  def entries_from(self, seq: int) -> list:
    """Entry ``seq`` and the entries after it, in order (as :meth:`entries_after`)."""
    return self._conn.execute(
      "SELECT seq, dataset, kind, time, body, prev, hash FROM entries WHERE seq >= ? "
      "ORDER BY seq",
      (seq,),
    ).fetchall()

  def append(self, prev: tuple[int, str], dataset: str, kind: str, body: str) -> tuple:
    """Appends the entry after ``prev = (seq, hash)`` and moves the head to it.

    Returns:
      ``(row, head)``: the stored row, as :meth:`entries_after` returns it, and the
      head row as stored (:meth:`head_row`).
    """
    seq, time = prev[0] + 1, now()
    digest = chain.link(self._key, prev[1], seq, dataset, kind, time, body)
    row = (seq, dataset, kind, time, body, prev[1], digest)
    head = (seq, chain.seal(self._key, seq, digest))
    self._conn.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    self._conn.execute("UPDATE head SET seq = ?, hash = ? WHERE id = 1", head)
    return row, head

  def read_back(self, rows: list, head: tuple) -> None:
    """Checks, before the commit, that the entries from the first of ``rows`` (this
    transaction's, which holds the write lock) are exactly ``rows`` and the head row
    is ``head``: a trigger that drops, changes or adds an entry or keeps the head
    from moving is caught, and the transaction rolled back.

    Raises:
      LedgerTamperedError: they do not read back; nothing is committed or answered.
    """
    found = self._conn.execute(
      "SELECT e.seq, e.dataset, e.kind, e.time, e.body, e.prev, e.hash, h.seq, h.hash "
      "FROM entries AS e, head AS h WHERE e.seq >= ? AND h.id = 1 ORDER BY e.seq",
      (rows[0][0],),
    ).fetchall()
    if found != [(*row, *head) for row in rows]:
      raise LedgerTamperedError(
        f"entry {rows[-1][0]} was written but does not read back (the file dropped or "
        "changed it): nothing was committed or answered. Restore the file from a "
        "backup."
      )


class Store:
  """One connection to a ledger file.

  Args:
    path: the file. A missing file is created (when ``create``, by
      :mod:`.creation`) unless its key file is there (a deleted database, refused)
      or the path is a symbolic link to a missing file (refused);
      an existing file must be a jaxdp ledger (an empty or foreign file is refused,
      never initialised) with its key file.
    timeout: seconds to wait for another connection's write lock.
    create: create the file if it is missing.
    read_only: open without write access (every transaction that writes fails).
    max_pages: a size limit, in database pages (sqlite's ``max_page_count``).
    journal: for a new file, ``"delete"`` (a rollback journal) or ``"wal"`` (a
      write-ahead log: one fsync per commit instead of several, for processes on
      one machine; its ``-wal`` file holds committed charges and must never be
      deleted); an existing file keeps the journal it was created with.

  Raises:
    LedgerError: a missing file (``create=False``), a key file without its file, a
      file without its key file, an empty or foreign file, or an error of sqlite
      (see :func:`translate`).
  """

  def __init__(
    self,
    path: str | os.PathLike,
    *,
    timeout: float = 5.0,
    create: bool = True,
    read_only: bool = False,
    max_pages: int | None = None,
    journal: str = "delete",
  ):
    if journal not in JOURNALS:
      raise ValueError(f"journal must be one of {JOURNALS}; got {journal!r}.")
    if max_pages is not None:  # sqlite ignores a limit <= 0 silently
      max_pages = _checks.check_int(max_pages, "max_pages", minimum=1)
    self.path, self.timeout = str(path), float(timeout)
    p = Path(path)
    key_there = keyfile.key_path(p).exists()  # first: a key is linked after its file
    exists = p.exists()
    if key_there and not exists:
      raise keyfile.orphaned(path)
    if not exists and p.is_symlink():
      raise LedgerError(
        f"ledger {path}: a symbolic link to a missing file; a ledger is not created "
        "through a link. Point the link at the ledger, or remove it."
      )
    if exists and not p.is_file():
      raise LedgerError(f"ledger {path}: not a file.")
    if not exists and (read_only or not create):
      raise LedgerError(
        f"ledger {path}: no such file (a ledger is created only by a writable "
        "Ledger(path, create=True)); a missing ledger is never read as an empty one."
      )
    self.key = b""
    self._thread, self._file_id = threading.get_ident(), None
    try:
      if not exists:
        creation.create(p, journal)  # or another process created it first
      if not _filled(p, min(self.timeout, 2.0)):
        raise LedgerCorruptError(
          f"ledger {path}: the file is empty; a ledger is created only where no file "
          "exists, so an emptied ledger is never read as a fresh budget. Restore it "
          "from a backup."
        )
      self.wal = _check_wal(p)
      uri = p.resolve().as_uri() + ("?mode=ro" if read_only else "?mode=rw")
      self._conn = sqlite3.connect(
        uri, uri=True, timeout=self.timeout, isolation_level=None
      )
      self._conn.execute("PRAGMA synchronous=FULL")
      if max_pages is not None:
        self._conn.execute(f"PRAGMA max_page_count={int(max_pages)}")
      ledger_id = self._setup()
      self.key = keyfile.read(p, wait=min(self.timeout, 1.0))
      self.ledger_id = ledger_id
      st = os.stat(self.path)
      self._file_id = (st.st_dev, st.st_ino)
    except sqlite3.Error as e:
      raise translate(e, self.path, self.timeout) from None

  def _setup(self) -> str:
    """The ledger's id, once its format is checked."""
    meta = self._meta()
    if meta.get("format") != FORMAT or not isinstance(meta.get("id"), str):
      raise LedgerCorruptError(
        f"ledger {self.path}: not a jaxdp ledger (format {meta.get('format')!r}, "
        f"expected {FORMAT!r})."
      )
    return meta["id"]

  def _meta(self) -> dict:
    try:
      return dict(self._conn.execute("SELECT key, value FROM meta").fetchall())
    except sqlite3.OperationalError as e:
      if "no such table" in str(e):
        raise LedgerCorruptError(
          f"ledger {self.path}: a database, but not a jaxdp ledger (no meta table)."
        ) from None
      raise

  @contextlib.contextmanager
  def transaction(self, write: bool = True):
    """``BEGIN IMMEDIATE`` (``DEFERRED`` for a read) ... ``COMMIT``, rolled back on
    any error; sqlite errors become ledger errors.

    Yields:
      The :class:`Transaction`.
    """
    conn = self._conn
    self._check_usable()
    try:
      conn.execute("BEGIN IMMEDIATE" if write else "BEGIN DEFERRED")
    except sqlite3.Error as e:
      raise translate(e, self.path, self.timeout) from None
    try:
      if hasattr(self, "ledger_id"):  # set up: every later transaction checks
        check_schema(conn, self.path)
      yield Transaction(conn, getattr(self, "ledger_id", ""), self.key)
    except BaseException as e:
      with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")
      if isinstance(e, sqlite3.Error):
        raise translate(e, self.path, self.timeout) from None
      raise
    try:
      conn.execute("COMMIT")
    except sqlite3.Error as e:
      with contextlib.suppress(sqlite3.Error):
        conn.execute("ROLLBACK")
      raise translate(e, self.path, self.timeout) from None

  def _check_usable(self) -> None:
    """Raises a clear LedgerError for a closed store, another thread, or a file
    replaced or moved since it was opened (sqlite would call it read-only)."""
    if self.closed:
      raise LedgerError(f"ledger {self.path}: the ledger is closed; open it again.")
    if threading.get_ident() != self._thread:
      raise LedgerError(
        f"ledger {self.path}: a Ledger was used from another thread than the one that "
        "opened it; open one Ledger per thread (they share the budget through the file)."
      )
    try:
      st = os.stat(self.path)
      same = self._file_id in (None, (st.st_dev, st.st_ino))
    except OSError:
      same = False
    if not same:
      raise LedgerError(
        f"ledger {self.path}: the file was replaced, moved or deleted since this Ledger "
        "opened it; nothing is charged or answered. Open the ledger again (and find out "
        "why it changed)."
      )

  @property
  def closed(self) -> bool:
    return self._conn is None

  def close(self) -> None:
    """Closes the connection; in WAL mode, first copies the committed charges from
    the ``-wal`` file into the main file (a checkpoint; best effort: another
    connection may hold it back)."""
    if self._conn is None:
      return
    with contextlib.suppress(sqlite3.Error):
      if self.wal and threading.get_ident() == self._thread:
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    with contextlib.suppress(sqlite3.Error):
      self._conn.close()
    self._conn = None
