"""Command line: ``python -m jaxdp`` (or ``jaxdp``) runs utility studies and releases.

  jaxdp                      the NHIS study (same as ``jaxdp nhis``)
  jaxdp nhis                 NHIS posets with 1, 2 and 3 sections (paper, Figure 4)
  jaxdp poset --poset SRC    one poset: nhis1|nhis2|nhis3, random:D[:SEED],
                             questionnaire:D[:SEED], or a file
  jaxdp dims                 random posets by dimension (Figure 2)
  jaxdp structure            random posets of fixed d by depth and edges (Figure 3)
  jaxdp sample --poset SRC   draw poset-ball points and print their E||Z||^2
  jaxdp release --poset SRC --data FILE --eps E [--level L] [--consistent]
                             publishable counts with intervals: exact integer noise,
                             ChaCha20 key (add --ledger FILE --dataset NAME --budget B
                             for a budget that persists; default: none, nothing
                             remembered)
  jaxdp release --query sum|count|vote [--k K] --data FILE --eps E [--noise N]
                             a query's column totals (exact baseline noise)
  jaxdp ledger show FILE     each dataset's budget, spent, remaining and charges
  jaxdp advise --poset SRC --eps E [--delta D]
  jaxdp advise --query sum|count|vote --d D [--k K] --eps E [--delta D]
                             which noise to use: each one's expected squared error

A poset file is JSON ({"order": [[0/1, ...], ...]}, {"d": D, "edges": [[i, j], ...]}
with (i, j) meaning p_i < p_j, i.e. "i requires j", or {"requires": {"q1": [],
"q2": ["q1"]}}, every question a key), or text: a square 0/1 order matrix, one row
per line, or "d D" then "i j" edge lines. See jaxdp.Poset.load.

release --out rel.json also writes rel.csv (the table), rel.provenance.json and
rel.provenance.csv, and rel.footnote.txt beside it.

Outputs go to out/<command>/ by default (an ignored folder), named after the command or
the poset. An --out inside the repository's results/ folder (the published figures) is
refused unless --overwrite-results is given. Bad flags, files and data are a one-line
error and exit status 2; every number is checked against the range its --help shows.
"""

from __future__ import annotations

import sys

from jaxdp.cli.advise import run_advise
from jaxdp.cli.devices import join_processes, request_host_devices
from jaxdp.cli.ledger import run_ledger
from jaxdp.cli.parser import UsageError, build_parser
from jaxdp.cli.release_query import run_release_command
from jaxdp.cli.studies import run_dims, run_poset_study, run_sample, run_structure

__all__ = ["main", "UsageError", "build_parser"]

COMMANDS = {
  "nhis": run_poset_study,
  "poset": run_poset_study,
  "dims": run_dims,
  "structure": run_structure,
  "sample": run_sample,
  "release": run_release_command,
  "ledger": run_ledger,
  "advise": run_advise,
}


def _fail(message) -> int:
  print("jaxdp: error: " + " ".join(str(message).split()), file=sys.stderr)
  return 2


def main(argv=None) -> int:
  """Runs ``jaxdp`` with ``argv`` (default: ``sys.argv[1:]``).

  Args:
    argv: the arguments, without the program's name.

  Returns:
    The exit status: 0, or 2 for a bad flag, file or data (a one-line message on
    stderr). Anything else (a bug) propagates, with its traceback.
  """
  try:
    args = build_parser(__doc__.split("\n\n", 1)[1]).parse_args(argv)
  except SystemExit as e:  # argparse printed the help, or a one-line error
    return e.code if isinstance(e.code, int) else 0 if e.code is None else 2
  if args.command is None:  # bare `jaxdp`: the nhis study, with its defaults
    args.command = "nhis"
  try:
    request_host_devices(args.devices)
    join_processes(args)
    return COMMANDS[args.command](args) or 0
  except UsageError as e:
    return _fail(e)
  except ValueError as e:  # the library's validation of user input
    return _fail(e)
