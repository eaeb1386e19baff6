"""The ``--out`` file of ``jaxdp release``, written through its folder's descriptor.

The folder of ``--out`` is opened once, before anything is read or charged
(:func:`open_out`); every later check and the write itself go through that
descriptor and the file's name in it, never through the path again. The release is
written to a new temporary file in that folder (``O_CREAT | O_EXCL | O_NOFOLLOW``)
and renamed onto the name (``os.replace`` with both descriptors), so a symbolic link
put at the ``--out`` path, or a folder swapped for another one, while the release
runs is never followed: the name is replaced, never the file a link points to.
The files written beside it (:mod:`jaxdp.cli.release_files`) go through the same
folder descriptor (:meth:`OutFile.sibling`), with the same checks.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

from jaxdp.cli.parser import UsageError

__all__ = [
  "MECHANISM",
  "OutFile",
  "check_out_target",
  "guarded",
  "is_release",
  "ledger_files",
  "open_out",
]

MECHANISM = "exact integer K-norm noise (jaxdp.exact)"  # opens every release file


def _entry(path: Path) -> tuple[int, int, str] | None:
  """``(st_dev, st_ino of the folder, name)`` of the directory entry ``path``, or
  None if its folder does not exist."""
  try:
    st = os.stat(path.parent)
  except OSError:
    return None
  return st.st_dev, st.st_ino, path.name


class OutFile:
  """The ``--out`` file as an open folder and a name in it.

  Args:
    out: the ``--out`` value (its folder exists).
    guarded: files ``--out`` must never name (the ledger's files, the data), by
      their directory entry.
    recognise: whether a file's text is one this command wrote (an existing file is
      replaced only then).
    folder: an open descriptor of the folder to use (duplicated), instead of opening
      ``out``'s folder.

  Raises:
    UsageError: the folder cannot be opened, or the name is a guarded file.
  """

  def __init__(self, out: str, guarded, recognise, folder: int | None = None) -> None:
    self.out, self.name = str(out), Path(out).name
    self.guarded, self.recognise = [Path(p) for p in guarded], recognise
    self.fd = -1
    if self.name in ("", ".", ".."):
      raise UsageError(f"--out {out}: name a file")
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    try:
      self.fd = os.open(Path(out).parent, flags) if folder is None else os.dup(folder)
    except OSError as e:
      raise UsageError(f"--out {out}: cannot open its folder ({e.strerror})") from None
    try:
      self.check()
    except BaseException:
      self.close()
      raise

  def sibling(self, name: str, recognise) -> OutFile:
    """The file ``name`` in the same folder (this one's descriptor, duplicated),
    checked as this one is.

    Raises:
      UsageError: as :class:`OutFile`.
    """
    return OutFile(Path(self.out).with_name(name), self.guarded, recognise, self.fd)

  def _where(self) -> tuple[int, int, str]:
    st = os.fstat(self.fd)
    return st.st_dev, st.st_ino, self.name

  def check(self) -> None:
    """Refuses a name that is a guarded file's entry in this folder, or an existing
    entry other than a plain file holding an earlier release (read without
    following a link).

    Raises:
      UsageError: naming ``--out`` and what to do.
    """
    where = self._where()
    if any(_entry(p) == where for p in self.guarded):
      raise UsageError(
        f"--out {self.out} is a file of the ledger or the --data file; write the "
        "release elsewhere"
      )
    try:
      st = os.stat(self.name, dir_fd=self.fd, follow_symlinks=False)
    except FileNotFoundError:
      return
    except OSError as e:
      raise UsageError(f"--out {self.out}: cannot read ({e.strerror})") from None
    if stat.S_ISREG(st.st_mode) and self._holds_release():
      return
    raise UsageError(
      f"--out {self.out}: the file exists and is not a release file written by jaxdp "
      "release (a link, the data, a poset file, a ledger or its key); name a new file, "
      "or remove this one first"
    )

  def _holds_release(self) -> bool:
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
      fd = os.open(self.name, flags, dir_fd=self.fd)
      with os.fdopen(fd, encoding="utf-8") as f:
        return self.recognise(f.read())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
      return False

  def write(self, text: str) -> None:
    """Checks the name again, writes ``text`` to a new file in the folder and
    renames it onto the name.

    Raises:
      UsageError: the checks refuse the name, or the file cannot be written.
    """
    self.check()
    tmp = f".{self.name}.{secrets.token_hex(8)}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
      fd = os.open(tmp, flags | getattr(os, "O_CLOEXEC", 0), 0o644, dir_fd=self.fd)
    except OSError as e:
      raise UsageError(f"--out {self.out}: cannot write ({e.strerror})") from None
    try:
      with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
      os.replace(tmp, self.name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
    except OSError as e:
      try:
        os.unlink(tmp, dir_fd=self.fd)
      except OSError:
        pass
      raise UsageError(f"--out {self.out}: cannot write ({e.strerror})") from None

  def close(self) -> None:
    """Closes the folder's descriptor."""
    if self.fd >= 0:
      os.close(self.fd)
      self.fd = -1


def open_out(args) -> OutFile:
  """The ``--out`` file of ``args`` (after :func:`check_out_target`), its folder
  opened and the name checked through it (see :class:`OutFile`).

  Raises:
    UsageError: as :class:`OutFile`.
  """
  return OutFile(args.out, guarded(args), release_text)


LEDGER_FILES = ("", ".key", "-wal", "-shm", "-journal")  # a ledger and its companions


def ledger_files(ledger) -> list[Path]:
  """The files of the ledger at ``ledger``, existing or not: the database, its key
  (beside the path as given) and sqlite's journals (beside the resolved file, which
  sqlite opens), under both the given and the resolved name."""
  given = str(ledger)
  real = str(_resolved(Path(ledger)))
  return [Path(base + end) for base in dict.fromkeys((given, real)) for end in LEDGER_FILES]


def _resolved(p: Path) -> Path:
  try:
    return p.resolve()
  except (OSError, RuntimeError):  # a loop of links: its own absolute path
    return p.absolute()


def _same_file(a: Path, b: Path) -> bool:
  if _resolved(a) == _resolved(b):
    return True
  try:
    return a.exists() and b.exists() and a.samefile(b)
  except OSError:
    return False


def check_out_target(args):
  """Refuses an ``--out`` that names a file of ``--ledger`` (the database, its key,
  its journals; existing or not, by resolved path and by inode: sqlite makes a
  ``-wal`` and a first use makes the ledger and its key during the release), or an
  existing file other than a release this command wrote (an allowlist: the data,
  the poset file, found by path, symbolic or hard link, would otherwise be
  overwritten). Called before anything is read or charged.

  Raises:
    UsageError: naming ``--out`` and what to do.
  """
  path = Path(args.out)
  ledger = getattr(args, "ledger", None)
  if ledger is not None and any(_same_file(path, f) for f in ledger_files(ledger)):
    raise UsageError(
      f"--out {args.out} is a file of the ledger --ledger {ledger} (the database, its "
      ".key, -wal, -shm or -journal file); write the release elsewhere"
    )
  if not path.exists() or path.is_dir():
    return
  if Path(args.data).exists() and path.samefile(args.data):
    raise UsageError(f"--out {args.out} is the --data file; write the release elsewhere")
  try:
    ours = is_release(json.loads(path.read_text(encoding="utf-8")))
  except (OSError, UnicodeDecodeError, ValueError, RecursionError):
    ours = False
  if not ours:
    raise UsageError(
      f"--out {args.out}: the file exists and is not a release written by jaxdp release "
      "(it could be the data, a poset file, a ledger or its key); name a new file, or "
      "remove this one first"
    )


def is_release(old) -> bool:
  """Whether a file's JSON is a release this command wrote."""
  return isinstance(old, dict) and str(old.get("mechanism", "")).startswith(MECHANISM)


def release_text(text: str) -> bool:
  """Whether a file's text is a release this command wrote.

  Raises:
    ValueError: it is not JSON.
  """
  return is_release(json.loads(text))


def guarded(args) -> list:
  """The files no output of ``args`` may replace: the ledger's and the data."""
  ledger = getattr(args, "ledger", None)
  return ([] if ledger is None else ledger_files(ledger)) + [Path(args.data)]
