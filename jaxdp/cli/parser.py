"""The argument parser of ``jaxdp``: its commands, flags and their checks.

Every numeric flag is checked while the command line is parsed, before any data is
read or any work starts: a value that is not an integer where one is expected, or
that lies outside the flag's range (shown in ``--help``), is a one-line error naming
the flag, the value and the range. Flags must be spelled in full (no prefixes).
"""

from __future__ import annotations

import argparse
import math
import re

from jaxdp.cli import report_flags
from jaxdp.cli.argparser import Parser
from jaxdp.cli.ledger_flags import add_ledger_command, add_release_flags
from jaxdp.cli.query_flags import add_query_flags
from jaxdp.samplers.general import GENERAL_MAX_D

NOISES = ("poset", "linf", "l2", "laplace")
RELEASE_NOISES = ("poset", "ball", "linf", "l2", "laplace")
GENERATORS = ("threefry", "rbg", "chacha8")  # jaxdp.random.GENERATORS
SECTIONS = (1, 2, 3)

MAX_SAMPLES = 10**12  # ~10^4 s of exact draws on one fast device
MAX_INSERTION_SAMPLES = 10**7  # the published sampler is sequential numpy
MAX_POSETS = 10**6
MAX_CHUNK = 1 << 24  # points held in memory at once by `sample`
MAX_DEVICES = 1 << 16
MIN_EPS, MAX_EPS = 1e-6, 1e3
SEED_RANGE = (-(2**31), 2**31 - 1)  # jaxdp.random.study_key's range

BUILT_IN_POSETS = ("nhis1", "nhis2", "nhis3")  # the NHIS sections, Poset.nhis(k)
POSET_HELP = (
  f"{'|'.join(BUILT_IN_POSETS)}, random:D[:SEED] (D <= {GENERAL_MAX_D}), "
  "questionnaire:D[:SEED] (D <= 512), or a JSON/text file"
)
POSET_REQUIRED = (
  "release needs --poset: the poset of the questionnaire the data answers, one of "
  f"the built-in NHIS sections {', '.join(BUILT_IN_POSETS)}, random:D[:SEED], "
  "questionnaire:D[:SEED], or a JSON/text poset file (there is no default)"
)
OUT_RULE = (
  "An --out inside the repository's results/ folder (the published figures) "
  "is refused unless --overwrite-results is given."
)


class UsageError(Exception):
  """A bad option or input file: printed as one line, exit status 2."""


def _number_text(v) -> str:
  """``10^12`` for a large power of ten, ``16,777,216`` or ``1e-06`` otherwise."""
  if isinstance(v, float):
    return f"{v:g}"
  k = len(str(abs(v))) - 1
  return f"10^{k}" if k >= 6 and abs(v) == 10**k else f"{v:,}"


def _range_text(low, high, kind: str) -> str:
  return f"{kind} from {_number_text(low)} to {_number_text(high)}"


# ASCII only, nothing around it: Python's int() and float() also take " 1", full-width
# digits and "1_0" (= 10), and a typo must not become a ten times larger eps.
_INTEGER = re.compile(r"[+-]?[0-9]{1,3}(?:_[0-9]{3})+|[+-]?[0-9]+")
_NUMBER = re.compile(
  r"[+-]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf|infinity|nan)", re.I
)


def _parse_integer(text: str):
  """An integer written as 1000000, 1_000_000 (groups of three) or 1e6 (but not 2.5);
  None if not one."""
  if _INTEGER.fullmatch(text):
    return int(text)
  if not _NUMBER.fullmatch(text):
    return None
  v = float(text)
  return int(v) if math.isfinite(v) and v.is_integer() else None


def integer_flag(low: int, high: int):
  """An argparse type: an integer in ``[low, high]``.

  Args:
    low: the smallest value allowed.
    high: the largest value allowed.

  Returns:
    A function from the flag's text to its value; it raises
    ``argparse.ArgumentTypeError`` (argparse prefixes the flag's name) otherwise.
  """
  allowed = _range_text(low, high, "an integer")

  def parse(text):
    v = _parse_integer(text)
    if v is None:
      raise argparse.ArgumentTypeError(f"{text!r} is not an integer; expected {allowed}")
    if not low <= v <= high:
      raise argparse.ArgumentTypeError(f"{text} is out of range; expected {allowed}")
    return v

  return parse


def number_flag(low: float, high: float):
  """An argparse type: a finite number in ``[low, high]`` (see :func:`integer_flag`)."""
  allowed = _range_text(low, high, "a number")

  def parse(text):
    if not _NUMBER.fullmatch(text):
      raise argparse.ArgumentTypeError(f"{text!r} is not a number; expected {allowed}")
    v = float(text)
    if not (math.isfinite(v) and low <= v <= high):
      raise argparse.ArgumentTypeError(f"{text} is out of range; expected {allowed}")
    return v

  return parse


def path_flag(text: str) -> str:
  """An argparse type: a non-empty path (``--out ""`` would silently write nothing)."""
  if not text.strip():
    raise argparse.ArgumentTypeError("an empty path; name a file or folder")
  return text


def integer_list_flag(low: int, high: int):
  """An argparse type: a non-empty comma list of integers, each in ``[low, high]``."""
  one = integer_flag(low, high)

  def parse(text):
    vals = [one(v.strip()) for v in text.split(",") if v.strip()]
    if not vals:
      raise argparse.ArgumentTypeError(
        f"{text!r} is empty; expected a comma list of {_range_text(low, high, 'integers')}"
      )
    return vals

  return parse


def noise_list(text: str) -> list:
  """An argparse type: a comma list from :data:`NOISES` (empty: none)."""
  vals = [v.strip() for v in text.split(",") if v.strip()]
  bad = [v for v in vals if v not in NOISES]
  if bad:
    raise argparse.ArgumentTypeError(f"unknown {bad[0]!r}; choose from {','.join(NOISES)}")
  return vals


def eps_list(text: str) -> list:
  """An argparse type: a non-empty comma list of eps values."""
  if not (vals := [EPS(v.strip()) for v in text.split(",") if v.strip()]):
    raise argparse.ArgumentTypeError(f"{text!r} is empty; expected a comma list of eps")
  return vals


SAMPLES = integer_flag(1, MAX_SAMPLES)
RELEASES = integer_flag(2, 10**8)
INSERTION_SAMPLES = integer_flag(0, MAX_INSERTION_SAMPLES)
POSETS = integer_flag(1, MAX_POSETS)
RANDOM_D = integer_flag(1, GENERAL_MAX_D)
DEVICES = integer_flag(1, MAX_DEVICES)
SEED = integer_flag(*SEED_RANGE)
EPS = number_flag(MIN_EPS, MAX_EPS)
CHUNK = integer_flag(1, MAX_CHUNK)


def _common(p, samples: int, out: str):
  """The flags every study command shares."""
  p.add_argument(
    "--samples",
    type=SAMPLES,
    default=samples,
    help="exact-sampler draws per poset, 1 to 10^12 (1e6 and 1_000_000 work)",
  )
  p.add_argument("--out", default=out, type=path_flag, help="output directory. " + OUT_RULE)
  p.add_argument(
    "--overwrite-results",
    action="store_true",
    help="allow an --out inside the repository's results/ folder",
  )
  p.add_argument(
    "--devices",
    type=DEVICES,
    default=None,
    help="number of devices to shard over (on CPU, that many host devices "
    "are created; default: all local devices)",
  )
  p.add_argument(
    "--seed", type=SEED, default=0, help="PRNG seed of the study, -2^31 to 2^31 - 1"
  )
  p.add_argument(
    "--coordinator",
    default=None,
    help="HOST:PORT of process 0, to run one study over several processes "
    "or hosts (jax.distributed; with --num-processes and --process-id)",
  )
  p.add_argument(
    "--num-processes",
    type=integer_flag(1, MAX_DEVICES),
    default=None,
    help=f"processes in the run, 1 to {MAX_DEVICES:,}",
  )
  p.add_argument(
    "--process-id",
    type=integer_flag(0, MAX_DEVICES - 1),
    default=None,
    help="this process's index, 0 .. N-1",
  )
  p.add_argument(
    "--generator",
    choices=GENERATORS,
    default="threefry",
    help="PRNG of the study (threefry is the fastest on CPU)",
  )
  p.add_argument("--no-plot", action="store_true", help="skip PNG plots")


def _insertion(p, default: int, what: str):
  p.add_argument(
    "--insertion-samples",
    type=INSERTION_SAMPLES,
    default=default,
    help=f"{what} from the published insertion sampler, 0 to 10^7 (0: skip)",
  )


def _one_poset_study(p, name: str):
  _common(p, 1_000_000, f"out/{name}")
  if name == "nhis":
    p.add_argument(
      "--sections",
      type=integer_list_flag(1, 3),
      default=list(SECTIONS),
      help="comma list from 1,2,3 (default: 1,2,3)",
    )
  else:
    p.add_argument("--poset", required=True, help=POSET_HELP)
  _insertion(p, 20_000, "draws")
  p.add_argument(
    "--eps",
    type=EPS,
    default=1.0,
    help="eps of the count mechanisms whose MSE is estimated, 1e-06 to 1000",
  )
  p.add_argument(
    "--mechanisms",
    type=noise_list,
    default=list(NOISES),
    help=f"comma list from {','.join(NOISES)}; empty: none (default: all)",
  )
  p.add_argument(
    "--consistency",
    action="store_true",
    help="instead: raw vs order-consistent release (jaxdp.consistent), MSE and bias "
    "for poset, linf, laplace and gaussian noise on three data shapes",
  )
  p.add_argument(
    "--releases",
    type=RELEASES,
    default=20_000,
    help="with --consistency: simulated releases per combination, 2 to 10^8",
  )
  p.add_argument(
    "--eps-grid",
    type=eps_list,
    default=[0.1, 0.5, 1.0, 2.0],
    help="with --consistency: comma list of eps (default 0.1,0.5,1,2)",
  )


def build_parser(epilog: str = "") -> Parser:
  """The ``jaxdp`` parser; ``args.command`` names the command (``None``: bare ``jaxdp``,
  which runs ``nhis`` with its defaults).

  Args:
    epilog: text shown at the end of ``jaxdp --help``.

  Returns:
    The parser.
  """
  ap = Parser(
    prog="jaxdp", description="Exact poset-ball DP noise: utility studies.", epilog=epilog
  )
  sub = ap.add_subparsers(dest="command", parser_class=Parser)

  nhis = sub.add_parser("nhis", help="NHIS posets (Figure 4)")
  _one_poset_study(nhis, "nhis")
  # bare `jaxdp`: the nhis study with every one of its defaults
  ap.set_defaults(**{a.dest: a.default for a in nhis._actions if a.dest != "help"})
  _one_poset_study(sub.add_parser("poset", help="one poset"), "poset")

  p = sub.add_parser("dims", help="random posets by dimension (Figure 2)")
  _common(p, 20_000, "out/dims")
  p.add_argument(
    "--dims",
    type=integer_list_flag(1, GENERAL_MAX_D),
    default=[4, 6, 8, 10, 12],
    help=f"comma list of dimensions d, each 1 to {GENERAL_MAX_D} (default: 4,6,8,10,12)",
  )
  p.add_argument("--posets", type=POSETS, default=20, help="random posets per d, 1 to 10^6")
  _insertion(p, 1_000, "draws per poset")

  p = sub.add_parser("structure", help="random posets by depth and edges (Figure 3)")
  _common(p, 2_000, "out/structure")
  p.add_argument("--d", type=RANDOM_D, default=10, help=f"dimension, 1 to {GENERAL_MAX_D}")
  p.add_argument("--posets", type=POSETS, default=5000, help="random posets, 1 to 10^6")
  p.add_argument(
    "--min-group",
    type=POSETS,
    default=100,
    help="drop groups with fewer posets (as the paper does), 1 to 10^6",
  )
  _insertion(p, 200, "draws per poset")

  p = sub.add_parser("sample", help="draw poset-ball points (streamed to a .npy file)")
  p.add_argument("--poset", default="nhis3", help=POSET_HELP)
  p.add_argument(
    "--samples", type=SAMPLES, default=1_000_000, help="points to draw, 1 to 10^12"
  )
  p.add_argument(
    "--out",
    default=None,
    help="write the points to this .npy file, chunk by chunk (default: only "
    "summarise). " + OUT_RULE,
  )
  p.add_argument(
    "--overwrite-results",
    action="store_true",
    help="allow an --out inside the repository's results/ folder",
  )
  p.add_argument(
    "--chunk",
    type=CHUNK,
    default=1 << 20,
    help="points per chunk (bounds memory), 1 to 2^24",
  )
  p.add_argument("--seed", type=SEED, default=0, help="PRNG seed, -2^31 to 2^31 - 1")
  p.add_argument(
    "--generator",
    choices=GENERATORS,
    default="threefry",
    help="PRNG (threefry is the fastest on CPU)",
  )
  p.add_argument(
    "--devices", type=DEVICES, default=None, help="number of host devices to create (CPU)"
  )

  p = sub.add_parser(
    "release",
    help="publishable counts of 0/1 survey answers (exact noise, ChaCha20 key)",
    description="Releases (respondents, yes-count per question) once, safe to publish: "
    "exact integer noise (the exact rounding of the ideal mechanism's "
    "noise) from a ChaCha20 key drawn from the OS. Costs --eps. --out is "
    "checked before the data is read. " + OUT_RULE,
  )
  p.add_argument(
    "--poset", default=None, help="required (no default): the data's poset: " + POSET_HELP
  )
  p.add_argument(
    "--data",
    required=True,
    help="answers: .npy (n, d) or CSV (UTF-8) with d 0/1 columns; its first line is "
    "a header only if every field is a question name (starting with a letter, not a "
    "number, NaN, True or yes) or one of the poset's element names, else it is data; "
    "a header must name each of the poset's questions once, in any order, and "
    "columns are read by those names; errors name rows from 0, the header not "
    "counted, and their line",
  )
  p.add_argument("--eps", type=EPS, required=True, help="privacy parameter, 1e-06 to 1000")
  p.add_argument(
    "--noise",
    choices=RELEASE_NOISES,
    default=None,
    help="K-norm noise with the poset ball (most accurate; the default with --poset), "
    "with the query's own ball (--query), the l_inf or l_2 ball, or Laplace (with "
    "--query, unless given: the exact noise with the smallest expected squared error)",
  )
  add_query_flags(p, integer_flag)
  p.add_argument(
    "--on-invalid",
    choices=("raise", "clip"),
    default="raise",
    help="rows that are not filters: refuse, or clip to the largest filter",
  )
  p.add_argument(
    "--out",
    default=None,
    type=path_flag,
    help="also write the release as JSON to this file (not the --data file), and "
    "beside it, for --out rel.json, the table rel.csv, the provenance "
    "rel.provenance.json and rel.provenance.csv, and rel.footnote.txt. " + OUT_RULE,
  )
  p.add_argument(
    "--overwrite-results",
    action="store_true",
    help="allow an --out inside the repository's results/ folder",
  )
  add_release_flags(p, number_flag, path_flag)
  p.add_argument("--devices", type=DEVICES, default=None, help=argparse.SUPPRESS)
  add_ledger_command(sub, path_flag)
  report_flags.add(sub, p, number_flag, integer_flag, EPS, SEED, POSET_HELP, DEVICES)
  return ap
