"""The flags of a durable budget: ``release --ledger/--dataset/--budget`` and the
``ledger show`` command (added to the parser by :func:`jaxdp.cli.parser.build_parser`,
which passes its own argparse types, so this module imports nothing of the parser).
"""

from __future__ import annotations

import argparse

__all__ = [
  "MAX_BUDGET",
  "MIN_BUDGET",
  "add_ledger_command",
  "add_release_flags",
  "format_head",
  "head_flag",
]

MIN_BUDGET, MAX_BUDGET = 1e-6, 1e6

NO_LEDGER = (
  "default: none, and then nothing is remembered: every release spends a fresh "
  "budget, however often it runs on the same data (a warning says so)"
)


def format_head(head: tuple[int, str]) -> str:
  """A ledger's head ``(seq, hash)`` (:attr:`jaxdp.Ledger.head`) as ``SEQ:HASH``,
  the form ``ledger show`` prints and ``--expect-head`` takes."""
  return f"{int(head[0])}:{head[1]}"


def head_flag(text: str) -> tuple[int, str]:
  """``SEQ:HASH`` (as :func:`format_head` writes it) as ``(seq, hash)``, the
  ``expect_head`` of :class:`jaxdp.Ledger`.

  Raises:
    argparse.ArgumentTypeError: not an entry number and 64 lowercase hex digits.
  """
  seq, _, digest = str(text).partition(":")
  if (
    not (seq.isascii() and seq.isdigit())
    or len(digest) != 64
    or any(c not in "0123456789abcdef" for c in digest)
  ):
    raise argparse.ArgumentTypeError(
      f"expected SEQ:HASH as `jaxdp ledger show` prints the head (an entry number, "
      f"a colon and 64 lowercase hex digits); got {text[:80]!r}"
    )
  return int(seq), digest


def add_release_flags(p: argparse.ArgumentParser, number_flag, path_flag) -> None:
  """``--ledger FILE [--existing-ledger] --dataset NAME --budget B`` for
  ``release``."""
  p.add_argument(
    "--ledger",
    default=None,
    type=path_flag,
    help="a ledger file (sqlite3, created if missing) that records the release's "
    "charge before the noise is drawn and refuses it once the dataset's budget is "
    f"spent ({NO_LEDGER})",
  )
  p.add_argument(
    "--existing-ledger",
    action="store_true",
    help="refuse to create --ledger if it is missing (a moved or deleted ledger is "
    "then an error, never a fresh budget); default: created, with a notice on stderr",
  )
  p.add_argument(
    "--expect-head",
    default=None,
    type=head_flag,
    metavar="SEQ:HASH",
    help="the head of --ledger as `jaxdp ledger show` printed it after the last "
    "release (kept elsewhere): refuse the release unless the ledger holds that entry "
    "(it is the head, or later entries descend from it), so a restored older copy "
    "is an error; default: not checked",
  )
  p.add_argument(
    "--dataset",
    default=None,
    help="the dataset's name in --ledger (its data's fingerprint is checked: other "
    "data under this name, or this data under another name, is refused)",
  )
  p.add_argument(
    "--budget",
    type=number_flag(MIN_BUDGET, MAX_BUDGET),
    default=None,
    help="the dataset's total eps in --ledger, 1e-06 to 1e+06: fixed by its first use "
    "(needed then); a different one later is an error",
  )


def add_ledger_command(sub, path_flag) -> None:
  """``ledger show FILE``."""
  p = sub.add_parser(
    "ledger",
    help="inspect a ledger of durable budgets",
    description="Inspect a ledger file of --ledger releases (opened read-only; its "
    "hash chain is verified).",
  )
  commands = p.add_subparsers(dest="ledger_command", parser_class=type(p), required=True)
  show = commands.add_parser(
    "show", help="each dataset's budget, spent and remaining, and its charges"
  )
  show.add_argument("file", type=path_flag, help="the ledger file")
  for q in (p, show):
    q.add_argument("--devices", type=int, default=None, help=argparse.SUPPRESS)
