"""The ``--out`` file of ``jaxdp release``, written through its folder's descriptor.

The folder of ``--out`` is opened once, before anything is read or charged
(:func:`open_out`); every later check and the write itself go through that
descriptor and the file's name in it, never through the path again. The release is
written to a new temporary file in that folder (``O_CREAT | O_EXCL | O_NOFOLLOW``)
and renamed onto the name (``os.replace`` with both descriptors), so a symbolic link
put at the ``--out`` path, or a folder swapped for another one, while the release
runs is never followed: the name is replaced, never the file a link points to.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from pathlib import Path

from jaxdp.cli.parser import UsageError

__all__ = ["OutFile", "open_out"]


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
    is_release: whether a file's text is a release this command wrote.

  Raises:
    UsageError: the folder cannot be opened, or the name is a guarded file.
  """

  def __init__(self, out: str, guarded, is_release) -> None:
    self.out, self.name = str(out), Path(out).name
    self.guarded, self.is_release = [Path(p) for p in guarded], is_release
    if self.name in ("", ".", ".."):
      raise UsageError(f"--out {out}: name a file")
    flags = os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
    try:
      self.fd = os.open(Path(out).parent, flags)
    except OSError as e:
      raise UsageError(f"--out {out}: cannot open its folder ({e.strerror})") from None
    try:
      self.check()
    except BaseException:
      self.close()
      raise

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
      f"--out {self.out}: the file exists and is not a release written by jaxdp "
      "release (a link, the data, a poset file, a ledger or its key); name a new "
      "file, or remove this one first"
    )

  def _holds_release(self) -> bool:
    flags = os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
    try:
      fd = os.open(self.name, flags, dir_fd=self.fd)
      with os.fdopen(fd, encoding="utf-8") as f:
        return self.is_release(json.loads(f.read()))
    except (OSError, UnicodeDecodeError, ValueError):
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


def open_out(out: str, guarded, is_release) -> OutFile:
  """The ``--out`` file, its folder opened and checked (see :class:`OutFile`).

  Raises:
    UsageError: as :class:`OutFile`.
  """
  return OutFile(out, guarded, is_release)
