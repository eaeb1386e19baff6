"""The publishable files ``jaxdp release --out`` writes beside its JSON.

``--out rel.json`` (or ``--out rel``) also writes, in the same folder:

- ``rel.csv``: the table, one row per count (the respondents, then each question):
  the label, the released count and its interval, the consistent count and its
  interval (with ``--consistent``, else empty), the level and how each interval was
  computed;
- ``rel.provenance.json`` and ``rel.provenance.csv``: when and how the release was
  made (the date in UTC, the dataset, its keyed data tag, the poset's fingerprint,
  the mechanism, the eps spent, the ledger's head, the jaxdp version and where the
  noise's key came from);
- ``rel.footnote.txt``: a footnote in plain words: what an interval means, its
  level, that it reflects the noise added for privacy only, and how negative values
  are handled.

Every file is built from the release's JSON record (the counts and intervals are
the ones it holds) and written through ``--out``'s folder, with its checks
(:meth:`jaxdp.cli.release_out.OutFile.sibling`): an existing file is replaced only
if its text shows that this command wrote it. A CSV cell of text that a spreadsheet
would run as a formula (starting with ``=``, ``+``, ``-``, ``@``) gets a leading
``'``: a question label comes from the poset file, which anyone may have written.

The plain fingerprint of the data is never published: a SHA-256 of a small dataset
is found by hashing every candidate (a neighbour's row tested against it), which no
privacy guarantee survives. With ``--ledger`` the provenance holds the data's tag
instead (:func:`jaxdp.ledger.summary.data_tag`, keyed by the ledger's secret key, as
``jaxdp ledger show`` prints it).
"""

from __future__ import annotations

import csv
import io
import json
import textwrap
from datetime import datetime, timezone

from jaxdp.cli.release_out import OutFile
from jaxdp.ledger.fingerprint import poset_fingerprint

__all__ = ["KINDS", "TABLE_COLUMNS", "eps_text", "file_names", "open_beside", "texts"]

TABLE_COLUMNS = (
  "label",
  "released",
  "lower",
  "upper",
  "consistent",
  "consistent_lower",
  "consistent_upper",
  "level",
  "method",
  "consistent_method",
)
PROVENANCE = "jaxdp release provenance"  # the document's name, first in both forms
FOOTNOTE_TITLE = "About these counts"
FOOTNOTE_OPENING = FOOTNOTE_TITLE + "\n\nThe counts were published with differential"
WIDTH = 80  # the footnote's line length
KEY_STATEMENT = (
  "the noise was drawn from a ChaCha20 stream whose 256-bit key was read from the "
  "operating system's random generator (Python's secrets module) for this release "
  "alone: no seed was given, and the key was neither stored nor printed"
)
NO_TAG = (
  "no --ledger: no data tag (the data's plain fingerprint is never published: anyone "
  "could test candidate datasets against it)"
)
TAG_NOTE = (
  "HMAC-SHA256, under the ledger's secret key, of the data's fingerprint, as `jaxdp "
  "ledger show` prints it: it identifies the data to whoever holds the ledger, and "
  "without the key no one can test a candidate dataset against it"
)


def _is_provenance_json(text: str) -> bool:
  obj = json.loads(text)
  return isinstance(obj, dict) and obj.get("document") == PROVENANCE


def _write(rows) -> str:
  """CSV text, a row holding a line break or carriage return in a cell quoted whole
  (the csv module quotes only the line terminator's characters, here \\n)."""
  buf = io.StringIO(newline="")
  plain = csv.writer(buf, lineterminator="\n")
  quoted = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_ALL)
  for r in rows:
    breaks = any(isinstance(v, str) and ("\r" in v or "\n" in v) for v in r)
    (quoted if breaks else plain).writerow(r)
  return buf.getvalue()


NUMBER_COLUMNS = (1, 2, 3, 7)  # released, lower, upper, level: always numbers


def _is_table(text: str) -> bool:
  """Whether ``text`` is a table this command wrote: the header, then at least one
  row, every row of exactly the table's columns, numbers where the table has
  numbers, and written exactly as this module writes CSV (not merely a file that
  begins with the header)."""
  try:
    rows = list(csv.reader(io.StringIO(text, newline="")))
    for r in rows[1:]:
      for i in NUMBER_COLUMNS:
        float(r[i])
  except (csv.Error, ValueError, IndexError):
    return False
  return (
    len(rows) > 1
    and tuple(rows[0]) == TABLE_COLUMNS
    and all(len(r) == len(TABLE_COLUMNS) for r in rows)
    and _write(rows) == text
  )


# each file: (its name after --out's stem, whether a file's text is one of them)
KINDS = {
  "table": (".csv", _is_table),
  "provenance_json": (".provenance.json", _is_provenance_json),
  "provenance_csv": (
    ".provenance.csv",
    lambda text: text.startswith(f"field,value\ndocument,{PROVENANCE}\n"),
  ),
  "footnote": (".footnote.txt", lambda text: text.startswith(FOOTNOTE_OPENING)),
}


def file_names(out_name: str) -> dict[str, str]:
  """The name of each file beside ``--out``: its name without ``.json``, then the
  kind's ending (``rel.json``: ``rel.csv``, ``rel.provenance.json``, ...)."""
  stem = out_name.removesuffix(".json") or out_name
  return {kind: stem + end for kind, (end, _) in KINDS.items()}


def open_beside(out: OutFile) -> dict[str, OutFile]:
  """Each file beside ``out``, its name checked in ``out``'s folder (before anything
  is read or charged).

  Raises:
    UsageError: a name that is a guarded file, or an existing file that is not one
      this command wrote (every file opened so far is closed).
  """
  files: dict[str, OutFile] = {}
  try:
    for kind, name in file_names(out.name).items():
      files[kind] = out.sibling(name, KINDS[kind][1])
  except BaseException:
    for f in files.values():
      f.close()
    raise
  return files


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")  # a spreadsheet reads a formula


def _cell(v):
  """A CSV cell: text that a spreadsheet would run as a formula (a question label or
  dataset name such as ``=HYPERLINK(...)``) gets a leading ``'``; numbers as they are."""
  return "'" + v if isinstance(v, str) and v.startswith(FORMULA_STARTS) else v


def _csv(rows) -> str:
  return _write([[_cell(v) for v in r] for r in rows])


def _methods(payload: dict) -> tuple[str, str]:
  """The ``method`` and ``consistent_method`` cells: how each interval was computed
  and what its level means (the rule of the ends is in the footnote and provenance)."""
  bars = payload["error_bars"]
  how = "exact" if bars["num_samples"] == 0 else "up to its Monte Carlo error"
  raw = f"{bars['method']}; coverage at least the level ({how})"
  cons = payload.get("consistent")
  if cons is None:
    return raw, ""
  note = "coverage not known: it can fall below the level near the constraints"
  return raw, f"{cons['error_bars']['method']}; {note}"


def table(payload: dict) -> str:
  """The CSV table of a release's record: one row per count."""
  method, cmethod = _methods(payload)
  cons = payload.get("consistent")
  rows = [TABLE_COLUMNS]
  for name, count in payload["counts"].items():
    lo, hi = payload["intervals"][name]
    both = (
      ["", "", ""] if cons is None else [cons["counts"][name], *cons["intervals"][name]]
    )
    rows.append([name, count, lo, hi, *both, payload["level"], method, cmethod])
  return _csv(rows)


def provenance(payload: dict, poset, record: dict, when: datetime) -> dict:
  """The provenance block of a release.

  Args:
    payload: the release's JSON record.
    poset: its poset.
    record: the ledger's part (:meth:`jaxdp.cli.ledger.Book.provenance`).
    when: the time of the release.
  """
  return {
    "document": PROVENANCE,
    "date": when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "dataset": record["dataset"],
    "data_tag": record["data_tag"],
    "data_tag_note": NO_TAG if record["data_tag"] is None else TAG_NOTE,
    "poset": payload["poset"],
    "poset_fingerprint": poset_fingerprint(poset),
    "mechanism": payload["mechanism"],
    "noise": payload["noise"],
    "eps_spent": payload["eps"],
    "delta": 0,
    "dataset_eps_spent": record["dataset_eps_spent"],
    "dataset_eps_budget": record["dataset_eps_budget"],
    "ledger_head": record["ledger_head"],
    "jaxdp_version": payload["version"],
    "key": KEY_STATEMENT,
    "level": payload["level"],
    "interval_method": payload["error_bars"]["method"],
    "interval_rule": payload["interval_rule"],
  }


def eps_text(eps: float) -> str:
  """``eps`` as ``:g`` writes it (``1``, ``0.5``) where that is its exact value, else
  in full (``0.1234564``, not ``0.123456``): a published eps is never rounded down."""
  short = f"{eps:g}"
  return short if float(short) == eps else repr(float(eps))


def footnote(payload: dict) -> str:
  """The footnote, in plain words, for a release's record."""
  level = f"{100 * payload['level']:g}%"
  bars = payload["error_bars"]
  how = (
    "computed exactly from the known distribution of the noise"
    if bars["num_samples"] == 0
    else f"estimated by simulating {bars['num_samples']:,} draws of the noise, with "
    "the ends chosen beyond the estimate's own error"
  )
  paragraphs = [
    FOOTNOTE_TITLE,
    f"The counts were published with differential privacy (eps = {eps_text(payload['eps'])}, "
    f"jaxdp {payload['version']}): random whole-number noise was added to each true "
    "count before publication, so a published count differs from the true count by "
    "a random amount.",
    f"Each interval contains the true count with probability at least {level} "
    f"(the level), {how}. The intervals reflect only the noise added for privacy: "
    "they do not include sampling error, nonresponse or any other error of the "
    "survey. Each interval holds at this level on its own: the chance that every "
    "interval contains its true count at once is lower.",
    "A small true count can be published as a negative number, or its interval can "
    "reach below zero: that is the noise. A count is never negative, so each "
    "interval's lower end is raised to 0, and both ends are rounded outward to "
    "whole numbers; an interval that contained the true count still contains it, "
    f"so the {level} still holds. Negative counts are published as released: "
    "changing them would bias the counts.",
  ]
  if "consistent" in payload:
    paragraphs.append(
      "The consistent counts were adjusted after the release so that they agree "
      "with the questionnaire's skip logic (no follow-up count above the count of "
      "the question it follows, none below 0); the adjustment uses only the "
      "published counts and costs no privacy. Their intervals are approximate (a "
      "simulation around the consistent counts): how often they contain the true "
      f"count is not known, and it can be below {level} for counts near 0 or near "
      "the count of the question they follow."
    )
  return "\n\n".join(textwrap.fill(text, WIDTH) for text in paragraphs) + "\n"


def texts(payload: dict, poset, record: dict, when: datetime) -> dict[str, str]:
  """The text of each file beside ``--out`` (see :data:`KINDS`)."""
  prov = provenance(payload, poset, record, when)
  cells = [["field", "value"]] + [[k, "" if v is None else v] for k, v in prov.items()]
  return {
    "table": table(payload),
    "provenance_json": json.dumps(prov, indent=2) + "\n",
    "provenance_csv": _csv(cells),
    "footnote": footnote(payload),
  }
