"""``jaxdp release --query sum|count|vote``: publishable column totals of a query.

One release of the column totals with exact integer noise under a secure accountant
(a ChaCha20 key from the OS): K-norm noise with the query's own ball
(:func:`jaxdp.exact.sum_knorm`, :func:`jaxdp.exact.count_knorm`,
:func:`jaxdp.exact.vote_knorm`), or a baseline (K-norm noise with the l_inf or l_2
ball, or Laplace noise, each with the query's sensitivity); unless ``--noise`` names
one, the one with the smallest expected squared error. Flags and ``--out``
(:mod:`jaxdp.cli.release_out`: the release as JSON) are checked before the data is
read, and every row before anything is charged. Messages about the data
name a row (from 0, a header line not counted) and its line, never its values.
"""

from __future__ import annotations

import json
import math
import re
import sys
from pathlib import Path

import numpy as np

from jaxdp import (
  Accountant,
  CountQueryMechanism,
  SumQueryMechanism,
  VoteQueryMechanism,
  _version,
  raise_if_refused,
  release,
)
from jaxdp.cli import outputs
from jaxdp.cli.parser import UsageError
from jaxdp.cli.release import check_row_count, csv_lines, is_header, run_release
from jaxdp.cli.release_out import MECHANISM, check_out_target, open_out
from jaxdp.exact import MAX_COUNT_D, MAX_SUM_D, MAX_VOTE_D
from jaxdp.reporting import error_bars, moments, noise_law
from jaxdp.reporting.bars import MAX_ENTRIES

FORGETS = (
  "jaxdp: warning: --query keeps no ledger, so nothing remembers this release: "
  "running it again on the same data spends a fresh eps each time."
)

UNSUPPORTED = (  # flags of poset releases that a query release does not take
  ("poset", "--poset"),
  ("ledger", "--ledger"),
)


def check_query_flags(args):
  """Refuses a bad combination of flags, naming them, before anything is read.

  Raises:
    UsageError: as above.
  """
  q = args.query
  for attr, flag in UNSUPPORTED:
    if getattr(args, attr, None):
      raise UsageError(
        f"--query {q} does not take {flag} (a query release reads rows of the query "
        "and keeps no ledger); drop one of the two"
      )
  if args.consistent:
    raise UsageError(
      f"--query {q} does not take --consistent (order-consistency is for poset counts)"
    )
  if args.on_invalid != "raise":
    raise UsageError(f"--query {q} does not take --on-invalid clip (bad rows are refused)")
  noises = _class(q).exact_noises
  if args.noise is not None and args.noise not in noises:
    named = ", ".join(noises[:-1]) + " or " + noises[-1]
    why = (
      f"--noise {args.noise} is the poset ball's"
      if args.noise == "poset"
      else f"the {q} ball has no exact sampler"
    )
    raise UsageError(f"--query {q} takes --noise {named} (exact integer noise); {why}")
  if q == "vote" and args.k is not None:
    raise UsageError("--query vote does not take --k (a vote ranks every candidate)")
  if q != "vote" and args.k is None:
    raise UsageError(f"--query {q} needs --k: the most non-zero entries of one row")


def read_rows(src: str) -> np.ndarray:
  """The rows of a CSV file (UTF-8; a first line of names only is a header).

  Raises:
    UsageError: a missing or unreadable file, no rows, rows of different lengths or
      an entry that is not an integer (naming its row, column and line).
  """
  path = Path(src)
  if not path.is_file():
    raise UsageError(f"--data: no such file: {src}")
  lines = csv_lines(path, src, "rows")
  if lines and is_header(lines[0][1]):
    lines = lines[1:]
  if not lines:
    raise UsageError(f"--data {src}: holds no rows")
  width = len(lines[0][1])
  out = np.zeros((len(lines), width), np.int64)
  for r, (num, line) in enumerate(lines):
    if len(line) != width:
      raise UsageError(
        f"--data {src}: row {r} has {len(line)} columns, row 0 has {width} (line {num})"
      )
    for c, v in enumerate(line):
      v = v.strip()
      if not re.fullmatch(r"-?[0-9]{1,6}", v):
        raise UsageError(
          f"--data {src}: row {r}, column {c}: an entry must be a whole number written "
          f"in digits, e.g. -1, 0 or 2 (line {num})"
        )
      out[r, c] = int(v)
  return out


def _class(query: str):
  return {"sum": SumQueryMechanism, "count": CountQueryMechanism}.get(
    query, VoteQueryMechanism
  )


def _mechanism(args, d: int, noise: str):
  if args.query == "vote":
    return VoteQueryMechanism(d, args.eps, noise=noise, exact=True)
  return _class(args.query)(d, args.k, args.eps, noise=noise, exact=True)


def best_noise(args, d: int) -> str:
  """The exact noise with the smallest expected squared error (data-free): the query
  ball's (d <= 1024) or a baseline."""
  noises = _class(args.query).exact_noises
  if d > {"sum": MAX_SUM_D, "count": MAX_COUNT_D, "vote": MAX_VOTE_D}[args.query]:
    noises = tuple(n for n in noises if n != "ball")
  errors = {
    n: moments.squared_error(noise_law(_mechanism(args, d, n)), d).total for n in noises
  }
  return min(errors, key=errors.get)


def run_release_command(args) -> int:
  """``jaxdp release``: a query's totals with ``--query``, else poset counts."""
  if args.query is not None:
    return run_query_release(args)
  return run_release(args)


def run_query_release(args) -> int:
  """Prints (and with ``--out`` writes as JSON) the integer release of the query's
  column totals, never the key or the data.

  Raises:
    UsageError: a bad flag combination, ``--out`` or file; ValueError: a bad row or
      size (all before anything is charged).
  """
  check_query_flags(args)
  out = None
  if args.out:
    check_out_target(args)
    outputs.check_out_file(args.out, args.overwrite_results)
    out = open_out(args)  # its folder, held open
  try:
    return _run_query(args, out)
  finally:
    if out is not None:
      out.close()


def _run_query(args, target) -> int:
  print(FORGETS, file=sys.stderr)
  rows = read_rows(args.data)
  d = rows.shape[1]
  noise = args.noise or best_noise(args, d)
  mech = _mechanism(args, d, noise)  # sizes checked (k <= d, d >= 2 for a vote)
  check_row_count(args.data, rows, mech.sensitivities()["linf"])
  mech.statistic(rows)  # every row checked before the charge
  if args.error_samples * d > MAX_ENTRIES:
    raise UsageError(f"--error-samples {args.error_samples:,} is too many for {d} totals")
  bars = error_bars(mech, args.level, num_samples=args.error_samples)
  acct = Accountant.create(args.eps, secure=True)
  acct, noisy = release(acct, mech, rows)
  totals = np.asarray(raise_if_refused(acct, noisy)).astype(int).tolist()
  low, high = bars.interval(np.asarray(totals, np.float64))
  intervals = [[math.floor(lo), math.ceil(hi)] for lo, hi in zip(low, high)]
  size = f"d = {d}" + ("" if args.query == "vote" else f", k = {args.k}")
  if target is not None:
    payload = {
      "query": args.query,
      "d": d,
      "k": args.k,
      "eps": args.eps,
      "noise": noise,
      "mechanism": MECHANISM + ", ChaCha20 key from the OS",
      "totals": dict(zip(bars.names, totals)),
      "version": _version.__version__,
      "level": args.level,
      "intervals": dict(zip(bars.names, intervals)),
      "interval_rule": "the noise's interval around each total, rounded outward",
      "error_bars": bars.to_dict(),
    }
    target.write(json.dumps(payload, indent=2))
  print(
    f"eps = {args.eps:g} release of {args.query} query totals ({size}; {noise} noise, "
    "exact integers, safe to publish):"
  )
  print(f"{args.level:g} intervals (rounded outward): {bars.method}")
  for name, t, (lo, hi) in zip(bars.names, totals, intervals):
    print(f"  {name}: {t:>8}   [{lo}, {hi}]")
  return 0
