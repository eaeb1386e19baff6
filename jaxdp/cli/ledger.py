"""The durable budget of the command line: ``release --ledger`` and ``ledger show``.

``release --ledger FILE --dataset NAME --budget B --eps E`` resumes the dataset's
budget from the ledger (registering it with the data's and the poset's fingerprints
and the budget ``B`` on first use), commits the release's charge, and only then
draws the noise; a release past the budget is refused with exit status 2 and
nothing is printed but the refusal. A ledger that is created (the path is missing)
is announced on stderr; ``--existing-ledger`` refuses to create one. Without
``--ledger`` a release warns that nothing is remembered.
"""

from __future__ import annotations

import os
import sys

from jaxdp import Ledger, ReleaseRefusedError
from jaxdp.cli.ledger_flags import format_head
from jaxdp.cli.parser import UsageError
from jaxdp.ledger import LedgerError
from jaxdp.ledger.identity import check_name

__all__ = ["Book", "NoBook", "open_release", "run_ledger", "shown"]

FORGETS = (
  "jaxdp: warning: no --ledger, so nothing remembers this release: running it again "
  "on the same data spends a fresh eps each time. Pass --ledger FILE --dataset NAME "
  "--budget B to keep a durable budget."
)


class NoBook:
  """A release without a ledger."""

  def charge(self, acct, mech, shape):
    return acct

  def summary(self) -> str | None:
    return None

  def provenance(self) -> dict:
    """The ledger's part of a release's provenance: none."""
    return {
      "dataset": None,
      "data_tag": None,
      "dataset_eps_spent": None,
      "dataset_eps_budget": None,
      "ledger_head": "no ledger",
    }

  def close(self) -> None:
    pass


class Book:
  """A release charged to a dataset of a ledger."""

  def __init__(self, ledger: Ledger, dataset: str, label: str):
    self.ledger, self.dataset, self.label = ledger, dataset, label

  def charge(self, acct, mech, shape):
    """Commits the charge; returns the accountant to release from.

    Raises:
      UsageError: refused (the budget is spent) or the ledger cannot be written.
    """
    try:
      return self.ledger.charge(self.dataset, acct, mech, shape, label=self.label)
    except (ReleaseRefusedError, LedgerError, ValueError) as e:
      raise UsageError(f"--ledger {self.ledger.path}: {e}") from None

  def close(self) -> None:
    self.ledger.close()

  def summary(self) -> str:
    """The dataset's spend, read (and verified) from the ledger: called before the
    release is printed, so a ledger that fails the check prints no answer.

    Raises:
      UsageError: the ledger cannot be read or does not verify.
    """
    s = self._dataset()
    return (
      f"ledger {self.ledger.path}: dataset {s.name!r}: spent {s.spent_eps:g} of eps "
      f"{s.budget['eps']:g}, {s.remaining_eps:g} left; head "
      f"{format_head(self.ledger.head)} (record it; pass it as --expect-head next time)"
    )

  def _dataset(self):
    try:
      (s,) = [d for d in self.ledger.datasets() if d.name == self.dataset]
    except LedgerError as e:
      raise UsageError(f"--ledger {self.ledger.path}: {e}") from None
    return s

  def provenance(self) -> dict:
    """The ledger's part of a release's provenance, read from the ledger: the
    dataset, its data tag (keyed: :func:`jaxdp.ledger.summary.data_tag`), its spend
    and budget, and the head (``SEQ:HASH``, as ``ledger show`` prints it).

    Raises:
      UsageError: the ledger cannot be read or does not verify.
    """
    s = self._dataset()
    return {
      "dataset": s.name,
      "data_tag": s.tag,
      "dataset_eps_spent": float(f"{s.spent_eps:g}"),  # as `ledger show` prints it
      "dataset_eps_budget": s.budget["eps"],
      "ledger_head": format_head(self.ledger.head),
    }


def open_release(args, rows, poset, acct, read=None):
  """The accountant and the book of one ``release``: ``acct`` (a budget of ``--eps``,
  forgotten afterwards, with a warning) without ``--ledger``; with it, the dataset's
  accountant resumed from the ledger. ``rows`` are the rows counted (clipped by
  ``--on-invalid clip``), ``read`` the rows as read: both forms are the dataset's,
  so a Session on the file's rows and a release of rows clipping alike share it.

  Raises:
    UsageError: ``--dataset``/``--budget`` without ``--ledger``, a missing
      ``--dataset``, a first use without ``--budget``, another budget than the
      first use's, other data under the name, or a ledger that cannot be used.
  """
  if args.ledger is None:
    if args.dataset is not None or args.budget is not None:
      raise UsageError("--dataset and --budget go with --ledger FILE")
    print(FORGETS, file=sys.stderr)
    return acct, NoBook()
  if args.dataset is None:
    raise UsageError("--ledger needs --dataset NAME (the dataset's name in the ledger)")
  try:
    check_name(args.dataset)
  except ValueError as e:
    raise UsageError(f"--dataset: {e}") from None
  if args.budget is not None and args.eps > args.budget:
    raise UsageError(
      f"--eps {args.eps:g} is more than the whole --budget {args.budget:g}: one release "
      "cannot cost more than the dataset's budget; lower --eps or raise --budget"
    )
  existed = os.path.lexists(args.ledger)
  if args.budget is None and not existed:
    raise UsageError(
      f"--ledger {args.ledger}: no such file, so dataset {args.dataset!r} is new: its "
      "first use needs --budget B (its total eps); if the ledger was moved, pass its "
      "new path"
    )
  if getattr(args, "existing_ledger", False) and not existed:
    raise UsageError(
      f"--ledger {args.ledger}: no such file, and --existing-ledger forbids creating "
      "one; if the ledger was moved, pass its new path (and its .key file with it)"
    )
  expect = getattr(args, "expect_head", None)
  if expect is not None and not existed:
    raise UsageError(
      f"--ledger {args.ledger}: no such file, and --expect-head {format_head(expect)} "
      "names an entry of an existing ledger; if the ledger was moved, pass its new path"
    )
  # created only where it was missing when checked above (not when another process
  # removed it since: --existing-ledger and --expect-head stay refusals)
  create = not existed and expect is None and not getattr(args, "existing_ledger", False)
  ledger = None
  try:
    ledger = Ledger(args.ledger, expect_head=expect, create=create)
    if args.budget is None and args.dataset not in {d.name for d in ledger.datasets()}:
      raise UsageError(
        f"--ledger {args.ledger}: dataset {args.dataset!r} is new: its first use needs "
        "--budget B (its total eps)"
      )
    also = () if read is None else (read,)  # the rows as read, before a clip
    acct = ledger.accountant(
      args.dataset, rows, args.budget, poset=poset, secure=True, also=also
    )
  except (LedgerError, ValueError, KeyError, UsageError) as e:
    if ledger is not None:
      ledger.close()
    if isinstance(e, UsageError):
      raise
    raise UsageError(f"--ledger {args.ledger}: {e}") from None
  if not existed:
    print(
      f"jaxdp: notice: created a new ledger at {args.ledger} with dataset "
      f"{args.dataset!r}, budget eps {args.budget:g}. If a ledger was moved away from "
      "this path, this release is charged to a fresh budget: pass --existing-ledger "
      "to refuse creating one.",
      file=sys.stderr,
    )
  label = f"jaxdp release --eps {args.eps:g} --noise {args.noise}"
  return acct, Book(ledger, args.dataset, label)


ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}


def shown(text) -> str:
  """``text`` for a terminal, by an allowlist: printable characters as they are,
  every other one (a newline, CR, terminal escape, line separator) escaped as
  ``\\n``, ``\\x1b``, ``\\u2028``; a backslash is doubled, so no stored text can
  forge a line, or hide one, of ``ledger show``."""
  out = []
  for c in str(text):
    if c in ESCAPES:
      out.append(ESCAPES[c])
    elif c.isprintable():
      out.append(c)
    elif ord(c) < 0x100:
      out.append(f"\\x{ord(c):02x}")
    elif ord(c) < 0x10000:
      out.append(f"\\u{ord(c):04x}")
    else:
      out.append(f"\\U{ord(c):08x}")
  return "".join(out)


def run_ledger(args) -> int:
  """``ledger show FILE``: every dataset's budget, spent, remaining and charges."""
  try:
    ledger = Ledger(args.file, read_only=True)
    summaries = ledger.datasets()
    charges = {s.name: ledger.charges(s.name) for s in summaries}
  except LedgerError as e:
    raise UsageError(str(e)) from None
  seq, digest = ledger.head
  say = lambda *lines: print("\n".join(shown(line) for line in lines))
  say(
    f"ledger {args.file}: {len(summaries)} datasets, {seq} entries, head "
    f"{format_head((seq, digest))} (pass it as release --expect-head next time)"
  )
  for s in summaries:
    b = s.budget
    params = "".join(f", {k}={v}" for k, v in b["params"].items() if k != "planned")
    print()
    say(
      f"dataset {s.name!r} (registered {s.registered}, data tag {s.tag}, keyed)",
      f"  budget: eps {b['eps']:g}, delta {b['delta']:g}, {b['rule']}{params}, "
      f"group size {b['group_size']}",
      f"  spent: eps {s.spent_eps:g}, delta {s.spent_delta:g}; remaining: eps "
      f"{s.remaining_eps:g}; {s.state['answered']} releases answered",
    )
    for c in charges[s.name]:
      m = c.mechanism
      say(
        f"  #{c.seq} {c.time} {c.kind}: {m.get('kind')} cost {m.get('cost')} "
        f"units {c.units} {c.label}"
      )
  return 0
