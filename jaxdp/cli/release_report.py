"""What ``jaxdp release`` publishes beside the counts: each count's interval, the
order-consistent counts with theirs (``--consistent``), the poset and the version.

Every interval is stated on the count scale (:func:`count_interval`). The raw
intervals come from the mechanism's noise law (:func:`jaxdp.error_bars`, no
data, computed before the release); the consistent counts and their approximate
intervals are postprocessing of the released vector (:func:`jaxdp.consistent`,
:func:`jaxdp.consistent_error_bars`).
"""

from __future__ import annotations

import math

import numpy as np

from jaxdp import _version
from jaxdp.cli.parser import UsageError
from jaxdp.consistency import consistent
from jaxdp.posets import Poset
from jaxdp.reporting import ErrorBars, consistent_error_bars, error_bars, quantiles
from jaxdp.reporting.bars import MAX_ENTRIES

COUNT_NAME = "respondents"  # the first count's name: the number of rows


def raw_bars(args, mech) -> ErrorBars:
  """The raw release's error bars, and the simulations' size checked: before the
  release and its charge (they read no data), so that no error comes after the budget
  is spent."""
  limit = MAX_ENTRIES // mech.dim
  if args.error_samples > limit:
    raise UsageError(
      f"--error-samples {args.error_samples:,} is too many for {mech.dim} counts (the "
      f"simulation holds every draw); at most {limit:,}"
    )
  if getattr(args, "consistent", False):  # the bootstrap's replicates, checked now
    tails = (1 - args.level) / 2, (1 + args.level) / 2
    quantiles.check_ranks(args.error_samples, args.level, *tails)
  return error_bars(mech, args.level, num_samples=args.error_samples)


def poset_record(poset: Poset) -> dict:
  """The poset as ``Poset.load`` reads it back: each question's direct prerequisites."""
  names = poset.element_names
  cover = np.asarray(poset.cover_matrix)
  return {
    "d": poset.d,
    "requires": {
      names[i]: [names[j] for j in np.nonzero(cover[i])[0]] for i in range(poset.d)
    },
  }


INTERVAL_RULE = (
  "on the count scale: the lower end raised to 0 (a count is never negative) and "
  "both ends rounded outward to whole numbers; an interval that covers the true "
  "count still does, so the coverage is kept"
)


def count_interval(low: float, high: float) -> list[int]:
  """``[max(floor(low), 0), max(ceil(high), 0)]``: an interval of a count on the
  count scale. A true count ``x`` is a nonnegative integer, so ``low <= x <= high``
  implies ``max(floor(low), 0) <= x <= max(ceil(high), 0)``: the interval covers
  ``x`` whenever the one given does, and its coverage is at least theirs."""
  return [max(math.floor(low), 0), max(math.ceil(high), 0)]


def _intervals(names, counts, bars: ErrorBars) -> dict:
  low, high = bars.interval(np.asarray(counts, dtype=np.float64))
  return {n: count_interval(lo, hi) for n, lo, hi in zip(names, low, high)}


def report(args, mech, counts, bars: ErrorBars) -> tuple[dict, list[str]]:
  """``(json_fields, printed_lines)`` for a release of ``counts``."""
  names = [COUNT_NAME, *mech.poset.element_names]
  fields = {
    "version": _version.__version__,
    "poset_requires": poset_record(mech.poset),
    "level": args.level,
    "intervals": _intervals(names, counts, bars),
    "interval_rule": INTERVAL_RULE,
    "error_bars": bars.to_dict(),
  }
  width = max(len(n) for n in names)
  lines = [f"{args.level:g} intervals: {bars.method}"]
  for n, c, (lo, hi) in zip(names, counts, fields["intervals"].values()):
    lines.append(f"  {n:>{width}}: {c:>8}   [{lo:g}, {hi:g}]")
  if args.consistent:
    z = np.asarray(consistent(np.asarray(counts, np.float64), mech.poset, integer=True))
    z = [int(v) for v in np.rint(z)]
    cbars = consistent_error_bars(
      z, mech, args.level, integer=True, num_samples=args.error_samples
    )
    fields["consistent"] = {
      "counts": dict(zip(names, z)),
      "intervals": _intervals(names, z, cbars),
      "error_bars": approximate_bars_record(cbars),
    }
    lines.append(
      f"order-consistent counts (jaxdp.consistent, integers); approximate "
      f"{args.level:g} intervals, coverage not guaranteed ({cbars.method}):"
    )
    for n, c, (lo, hi) in zip(names, z, fields["consistent"]["intervals"].values()):
      lines.append(f"  {n:>{width}}: {c:>8}   [{lo:g}, {hi:g}]")
  return fields, lines


BOOTSTRAP_NOTE = (
  "approximate intervals: a parametric bootstrap around the consistent counts; their "
  "coverage is not known and can fall well below the nominal level near the constraints"
)


def approximate_bars_record(bars: ErrorBars) -> dict:
  """The JSON record of bootstrap error bars: the nominal level, flagged approximate
  (no ``coverage``: the actual coverage is not known)."""
  record = bars.to_dict()
  record.pop("coverage")
  record["nominal_level"] = bars.level
  record["approximate"] = True
  record["note"] = BOOTSTRAP_NOTE
  return record
