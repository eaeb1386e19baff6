"""``jaxdp release``: publishable counts of 0/1 survey answers.

One release of (respondents, yes-count per question) by the exact mechanism (integer
K-norm noise, :mod:`jaxdp.exact`) under a secure accountant (a ChaCha20 key from the
OS). Everything that can be checked is checked before the budget is spent: that
``--poset`` is given, ``--out`` and the files beside it
(:mod:`jaxdp.cli.release_files`), then the poset, then every row of the data.
Messages about the data name a row (counting from 0, a header line not counted), its
line in the file and the rule it breaks, never its values; a header, which names the
questions and holds no answers, is quoted.
"""

from __future__ import annotations

import csv
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import jax.numpy as jnp
import numpy as np

from jaxdp import Accountant, Poset, PosetCountMechanism, raise_if_refused, release
from jaxdp._data_checks import exact_limit
from jaxdp.cli import outputs, release_files, release_report
from jaxdp.cli.inputs import load_poset
from jaxdp.cli.ledger import open_release
from jaxdp.cli.parser import POSET_REQUIRED, UsageError
from jaxdp.cli.release_out import MECHANISM, check_out_target, open_out

# words that spreadsheets and parsers read as values, not as question names
VALUE_WORDS = frozenset(
  {"true", "false", "yes", "no", "y", "n", "t", "f", "nan", "na", "n/a", "none", "null"}
)

HEADER_RULE = (
  "a first line is a header only if every field is a question name (starting with "
  "a letter, not a number or a word such as NaN, True or yes) or one of the poset's "
  "element names"
)

ANSWERS = ("0", "1")
NPY_KINDS = "biuf"  # .npy answers: booleans, signed and unsigned integers, floats
SHOWN_NAMES = 8  # names listed in an error before "and N more"


def is_name(field: str) -> bool:
  """Whether a CSV field is a question name: it starts with a letter and is not a
  number (``float`` reads ``inf``, ``nan``, ``1e5``) or a value word (``True``, ``yes``)."""
  v = field.strip()
  if not v or not v[0].isalpha() or v.lower() in VALUE_WORDS:
    return False
  try:
    float(v)
  except ValueError:
    return True
  return False


def is_header(fields: list[str], names=()) -> bool:
  """The header rule (:data:`HEADER_RULE`): an allowlist, so a first row of data
  (``1.0,0,0,0``, ``nan,...``, ``True,...``, ``0,1,...``) is never taken for a
  header."""
  stripped = [v.strip() for v in fields]
  if all(v in ANSWERS for v in stripped):
    return False
  return all(is_name(v) or v in names for v in stripped)


def header_columns(fields: list[str], names, width: int, src: str, num: int) -> list[int]:
  """The file column of each question, by the header's names.

  The header must have one field per column of the data (``width``: the first data
  row's count, which the row checks report anyway) and per question, and name each
  question exactly once, in any order. Only the header, which is not data, is
  quoted.

  Raises:
    UsageError: naming the three counts, or the unknown, repeated and missing names.
  """
  found = [v.strip() for v in fields]
  if not len(found) == width == len(names):
    plural = "" if len(found) == 1 else "s"
    raise UsageError(
      f"--data {src}: the header (line {num}) has {len(found)} field{plural}, the data "
      f"{width} columns, the poset {len(names)} questions; a header names each "
      "column once, separated by commas"
    )
  unknown = [v for v in dict.fromkeys(found) if v not in names]
  repeated = [v for v in dict.fromkeys(found) if v in names and found.count(v) > 1]
  missing = [v for v in names if v not in found]
  if unknown or repeated or missing:
    parts = [
      f"{what}: {_listed(vs)}"
      for what, vs in (("unknown", unknown), ("repeated", repeated), ("missing", missing))
      if vs
    ]
    raise UsageError(
      f"--data {src}: the header (line {num}) must name each of the {len(names)} "
      f"questions once, in any order; {'; '.join(parts)} (the questions are "
      f"{_listed(names)})"
    )
  return [found.index(v) for v in names]


def _listed(values) -> str:
  values = list(values)
  shown = ", ".join(repr(v) for v in values[:SHOWN_NAMES])
  more = len(values) - SHOWN_NAMES
  return shown + (f" and {more} more" if more > 0 else "")


def csv_lines(path: Path, src: str, what: str) -> list[tuple[int, list[str]]]:
  """``(line number, fields)`` of each line of a CSV file (UTF-8, a byte order mark
  ignored), without the blank lines at its end.

  Raises:
    UsageError: the file cannot be read as CSV (naming ``what`` it should hold).
  """
  try:
    with open(path, newline="", encoding="utf-8-sig") as f:
      reader = csv.reader(f)
      lines = [(reader.line_num, r) for r in reader]
  except (OSError, UnicodeDecodeError, csv.Error) as e:
    raise UsageError(f"--data {src}: cannot read {what} ({type(e).__name__})") from None
  while lines and not lines[-1][1]:
    lines.pop()
  return lines


def _read_csv(path: Path, src: str, names) -> np.ndarray:
  """The 0/1 rows of a CSV file (UTF-8, a byte order mark ignored; a header line
  by :func:`is_header`, its columns by :func:`header_columns`)."""
  if all(v.strip() in ANSWERS for v in names):
    raise UsageError(
      f"--data {src}: the question names {_listed(names)} are answers, so a header "
      "of them cannot be told from a row of data; rename the questions or pass a .npy "
      "array"
    )
  d = len(names)
  lines = csv_lines(path, src, "0/1 rows")
  blank = next((num for num, r in lines if not r), None)
  if blank is not None:
    raise UsageError(
      f"--data {src}: line {blank} is blank; every line before the last row must be a "
      "header or a row of answers (remove the blank lines, or fill in the row)"
    )
  header = bool(lines) and is_header(lines[0][1], names)
  columns = list(range(d))
  if header:
    (num, fields), lines = lines[0], lines[1:]
    width = len(lines[0][1]) if lines else d
    columns = header_columns(fields, names, width, src, num)
  for r, (num, line) in enumerate(lines):
    if len(line) != d:
      raise UsageError(
        f"--data {src}: expected {d} columns (one 0/1 answer per "
        f"question); row {r} has {len(line)} (line {num})"
      )
    for c, v in enumerate(line):
      if v.strip() not in ANSWERS:
        hint = "" if header or r else f"; {HEADER_RULE}, so this one is data"
        raise UsageError(
          f"--data {src}: row {r}, column {c}: an answer must be 0 or 1, written as "
          f"that digit alone (line {num} of the file{hint})"
        )
  if not lines:
    raise UsageError(f"--data {src}: holds no rows")
  return np.array([[int(line[c]) for c in columns] for _, line in lines], dtype=np.int64)


def load_rows(src: str, d: int, names=()) -> np.ndarray:
  """0/1 answers: a ``.npy`` array ``(n, d)`` or a CSV with ``d`` columns.

  A CSV file is read as UTF-8 (a byte order mark, as spreadsheets write, is
  ignored). Its first line is a header only by :func:`is_header`; any other first
  line is data and is checked like every row. A header has one field per column and
  names each question exactly once, in any order: each column is read as the
  question its header field names (:func:`header_columns`).

  Args:
    src: the ``--data`` file.
    d: the number of questions.
    names: the questions' names in the poset's order (its element names; default
      ``p0, p1, ...``, a poset's names when none were given).

  Returns:
    The rows, each entry 0 or 1, one column per question in the poset's order.

  Raises:
    UsageError: a missing or unreadable file, a wrong shape, a header that does not
      name each question once, or an answer other than 0 and 1 (naming its row and
      column, not its value).
  """
  names = tuple(names) or tuple(f"p{i}" for i in range(d))
  if len(names) != d:
    raise ValueError(f"names must be {d} question names; got {len(names)}.")
  path = Path(src)
  if not path.is_file():
    raise UsageError(f"--data: no such file: {src}")
  if path.suffix != ".npy":
    return _read_csv(path, src, names)
  try:
    rows = np.load(path, allow_pickle=False)
  except (ValueError, OSError) as e:
    raise UsageError(
      f"--data {src}: cannot read a .npy array ({type(e).__name__})"
    ) from None
  if not isinstance(rows, np.ndarray):  # np.load opens a zip archive whatever its name
    raise UsageError(f"--data {src}: an .npz archive, not a .npy array")
  if rows.ndim != 2 or rows.shape[1] != d:
    got = f"{rows.shape[1]} columns" if rows.ndim == 2 else f"{rows.ndim} dimensions"
    raise UsageError(
      f"--data {src}: expected a 2-D array of {d} columns (one 0/1 answer per "
      f"question); got {got}"  # never the shape: its first entry is the row count
    )
  if not len(rows):
    raise UsageError(f"--data {src}: holds no rows")
  if rows.dtype.kind not in NPY_KINDS:  # an allowlist: complex 1 + 0j equals 1
    raise UsageError(
      f"--data {src}: expected 0/1 answers as booleans, integers or floats; got dtype "
      f"{rows.dtype}"
    )
  off = np.argwhere((rows != 0) & (rows != 1))
  if off.size:
    r, c = (int(i) for i in off[0])
    raise UsageError(f"--data {src}: row {r}, column {c}: an answer must be 0 or 1")
  return rows.astype(np.int8)  # 0/1 exactly: no dtype the release refuses after the charge


def _unmet(poset: Poset, x: np.ndarray) -> np.ndarray:
  """``[r, i]``: row r answers i with 1 but an element above i (p_i <= p_j) with 0."""
  missing = (~x).astype(np.int64) @ np.asarray(poset.order, np.int64).T
  return x & (missing > 0)


def check_filters(src: str, poset: Poset, rows: np.ndarray):
  """Refuses rows that are not filters of ``poset`` (``--on-invalid raise``).

  Raises:
    UsageError: naming the first such row, the rule it breaks and ``--on-invalid clip``.
  """
  x = np.asarray(rows).astype(bool)
  bad = np.nonzero(_unmet(poset, x).any(axis=1))[0]
  if bad.size:
    r = int(bad[0])
    raise UsageError(
      f"--data {src}: row {r} is not a filter of the poset: "
      f"{poset.explain_violation(x[r])}. Fix the data, or pass --on-invalid clip to "
      "replace each row by the largest filter it contains."
    )


def largest_filters(poset: Poset, rows: np.ndarray) -> np.ndarray:
  """Each row replaced by the largest filter of ``poset`` it contains (what
  ``on_invalid="clip"`` releases): an answer stays 1 only if every answer it requires
  is 1. The ledger fingerprints these rows, so rows that clip alike are one dataset."""
  x = np.asarray(rows).astype(bool)
  return (x & ~_unmet(poset, x)).astype(rows.dtype)


def run_release(args) -> int:
  """Prints and writes the integer release, never the key or the data.

  Raises:
    UsageError: no ``--poset`` (a release of the wrong poset's counts would spend the
      budget), or any check before the budget is spent.
  """
  if args.poset is None:
    raise UsageError(POSET_REQUIRED)
  if getattr(args, "k", None) is not None:
    raise UsageError("--k is an option of --query sum and --query count")
  if args.noise == "ball":
    raise UsageError("--noise ball is the query's own ball, for --query sum, count or vote")
  if args.noise is None:
    args.noise = "poset"
  out, beside = None, {}
  if args.out:
    check_out_target(args)
    outputs.check_out_file(args.out, args.overwrite_results)
    out = open_out(args)  # its folder, held open
  try:
    beside = {} if out is None else release_files.open_beside(out)
    return _run(args, out, beside)
  finally:
    for f in [out, *beside.values()]:
      if f is not None:
        f.close()


def check_count_names(src: str, poset: Poset) -> None:
  """Refuses a poset with a question named as the count of rows
  (:data:`~jaxdp.cli.release_report.COUNT_NAME`): the release's files key each count
  by its name, so one of the two counts would be dropped.

  Raises:
    UsageError: naming the question and what to do.
  """
  if release_report.COUNT_NAME in poset.element_names:
    raise UsageError(
      f"--poset {src}: a question is named {release_report.COUNT_NAME!r}, the "
      "name of the count of rows in the release; rename the question"
    )


def check_row_count(src: str, rows: np.ndarray, top: int = 1) -> None:
  """Refuses more rows than keep every total of entries up to ``top`` within the
  exact integers of the float dtype (the mechanisms' own limit, as
  :func:`jaxdp.mechanisms.statistics.exact_counts` applies it), before anything is
  charged: the release would refuse them later, with the number of rows in its
  message.

  Raises:
    UsageError: naming the limit, never the number of rows.
  """
  dtype = jnp.result_type(float)
  limit = exact_limit(dtype)
  if rows.shape[0] * top > limit:
    per_row = "" if top == 1 else f" of entries up to {top}"
    raise UsageError(
      f"--data {src}: more rows than keep the totals{per_row} within {limit:,}, the "
      f"integers that {dtype} holds exactly; split the data"
    )


def _run(args, target, beside) -> int:
  poset = load_poset(args.poset)
  check_count_names(args.poset, poset)
  read = load_rows(args.data, poset.d, poset.element_names)
  if args.on_invalid == "raise":
    check_filters(args.data, poset, read)
    rows = read
  else:
    rows = largest_filters(poset, read)  # the rows the release counts
  check_row_count(args.data, rows)
  mech = PosetCountMechanism(
    poset, args.eps, noise=args.noise, exact=True, on_invalid=args.on_invalid
  )
  bars = release_report.raw_bars(args, mech)  # the noise law only: before the ledger
  acct = Accountant.create(args.eps, secure=True)
  acct, book = open_release(args, rows, poset, acct, read)  # --ledger: the dataset's budget
  acct = book.charge(acct, mech, rows.shape)  # committed before the noise is drawn
  acct, noisy = release(acct, mech, rows)
  counts = np.asarray(raise_if_refused(acct, noisy)).astype(int).tolist()
  when = datetime.now(timezone.utc)
  note, record = book.summary(), book.provenance()  # read back before any output
  book.close()  # its files settled (a WAL checkpointed) before --out is written
  names = [release_report.COUNT_NAME, *poset.element_names]
  payload = {
    "poset": repr(poset),
    "eps": args.eps,
    "noise": args.noise,
    "mechanism": MECHANISM + ", ChaCha20 key from the OS",
    "counts": dict(zip(names, counts)),
  }
  fields, lines = release_report.report(args, mech, counts, bars)
  payload.update(fields)
  if target is not None:  # through the folder opened at the start, never the path
    for kind, text in release_files.texts(payload, poset, record, when).items():
      beside[kind].write(text)
    target.write(json.dumps(payload, indent=2))
  print(
    f"eps = {release_files.eps_text(args.eps)} release of {poset!r} counts "
    f"({args.noise} noise, exact integers, safe to publish):"
  )
  print("\n".join(lines))
  if args.out:
    written = ", ".join([args.out, *(f.out for f in beside.values())])
    print(f"wrote {written}", file=sys.stderr)
  if note:
    print(note, file=sys.stderr)
  return 0
