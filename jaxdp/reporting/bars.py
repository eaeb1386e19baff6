"""Error bars of a release: per-coordinate intervals from the mechanism's noise law.

The noise of an additive mechanism does not depend on the data, so its error bars are
a function of the mechanism alone: :func:`error_bars` takes no data, reads none and
spends no budget. Applied to a release ``y = x + noise`` the interval
``[y + lower, y + upper]`` covers the true ``x_i`` with probability ``coverage_i``
(at least ``level``) over the mechanism's randomness.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

import jax
import numpy as np

from jaxdp import _checks
from jaxdp.reporting import quantiles, simulate
from jaxdp.reporting.laws import NoiseLaw, noise_law
from jaxdp.typing import ArrayLike, KeyArray

__all__ = [
  "CACHE_SIZE",
  "MAX_ENTRIES",
  "ErrorBars",
  "check_level",
  "check_samples",
  "error_bars",
  "format_table",
]

MAX_ENTRIES = 1 << 26  # simulated noise entries held at once (512 MiB in float64)
CACHE_SIZE = 64  # error bars kept, least recently used dropped first
_CACHE: collections.OrderedDict = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()


@dataclasses.dataclass(frozen=True)
class ErrorBars:
  """Per-coordinate intervals for a release: ``[released + lower, released + upper]``.

  Attributes:
    lower: offsets (<= 0) to add to the released value, one per coordinate (a
      scalar for i.i.d. noise on a statistic of any shape).
    upper: offsets (>= 0), likewise.
    level: the level asked for (e.g. 0.95).
    coverage: the probability that each interval covers the true value: ``level``
      for real noise with exact quantiles; the actual, larger probability for integer
      noise (the interval's ends are integers); for an exact mechanism on a grid, a
      lower bound (the ends are widened by half a grid step, the most snapping moves
      an entry; exact for a statistic on the grid); an estimate for Monte Carlo bars.
    mc_error: the Monte Carlo error of each offset (half-width of a 95% confidence
      interval; 0 for exact bars).
    method: how the offsets were computed.
    num_samples: simulated noise vectors (0 for exact bars).
    names: one label per coordinate, where known.
    law: the noise law the bars describe (None for bootstrap bars).
  """

  lower: np.ndarray
  upper: np.ndarray
  level: float
  coverage: np.ndarray
  mc_error: np.ndarray
  method: str
  num_samples: int = 0
  names: tuple[str, ...] = ()
  law: NoiseLaw | None = None

  @property
  def exact(self) -> bool:
    """Whether the offsets are exact quantiles (no Monte Carlo error)."""
    return self.num_samples == 0

  def interval(self, released: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)``: the intervals around a released vector (postprocessing).

    Args:
      released: the released values (any array of the statistic's shape).

    Returns:
      Two float64 arrays of ``released``'s shape.

    Raises:
      TypeError: ``released`` not real numbers (bools, strings).
      ValueError: a shape that does not match the bars' coordinates, or ``released``
        holding NaN, an infinity, or its signed integer dtype's minimum or int32's
        (a refused release, also when stored wider).
    """
    raw = np.asarray(released)
    if not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
      raise _checks.ArgTypeError(
        f"released must hold the released numbers; got dtype {raw.dtype}."
      )
    wide_mark = np.issubdtype(raw.dtype, np.signedinteger) and raw.dtype.itemsize > 4
    if (
      _checks.holds_invalid(raw)
      or (wide_mark and np.any(raw == np.iinfo(np.int32).min))
      or np.any(np.isinf(raw))
    ):
      raise ValueError(
        "released holds NaN, an infinity or an integer dtype's minimum (its own or "
        "int32's), the mark of a refused release: it has no interval. Check the "
        "release first (jaxdp.raise_if_refused)."
      )
    y = raw.astype(np.float64)
    if np.ndim(self.lower) and y.shape[-1:] != np.shape(self.lower):
      raise ValueError(
        f"released must have last dimension {np.size(self.lower)} (one value per "
        f"coordinate of these error bars); got shape {y.shape}."
      )
    return y + self.lower, y + self.upper

  def to_dict(self) -> dict:
    """A JSON-serialisable summary (lists of floats)."""
    return {
      "level": self.level,
      "method": self.method,
      "lower": np.asarray(self.lower).tolist(),
      "upper": np.asarray(self.upper).tolist(),
      "coverage": np.asarray(self.coverage).tolist(),
      "mc_error": np.asarray(self.mc_error).tolist(),
      "num_samples": self.num_samples,
    }

  def __str__(self) -> str:
    names = self.names or tuple(f"[{i}]" for i in range(np.size(self.lower)))
    rows = [
      (name, f"{lo:+.6g}", f"{hi:+.6g}", f"{cov:.4f}", f"{err:.2g}")
      for name, lo, hi, cov, err in zip(
        names,
        *(np.broadcast_to(a, (len(names),)) for a in self._arrays()),
      )
    ]
    head = f"{self.level:.4g} error bars: {self.method}"
    return head + "\n" + format_table(("", "lower", "upper", "coverage", "mc error"), rows)

  def _arrays(self):
    return self.lower, self.upper, self.coverage, self.mc_error


def format_table(header, rows) -> str:
  """A plain text table, columns right-aligned (the first left-aligned)."""
  cols = list(zip(header, *rows)) if rows else [(h,) for h in header]
  widths = [max(len(str(v)) for v in col) for col in cols]
  lines = []
  for row in (header, *rows):
    cells = [
      str(v).ljust(w) if i == 0 else str(v).rjust(w)
      for i, (v, w) in enumerate(zip(row, widths))
    ]
    lines.append("  ".join(cells).rstrip())
  return "\n".join(lines)


def check_level(level) -> float:
  """``level`` as a float strictly between 0 and 1, else a ValueError naming it."""
  try:
    if isinstance(level, (str, bytes)):  # float("0.95") would read a string
      raise TypeError
    value = float(level)
  except (TypeError, ValueError):
    raise _checks.ArgTypeError(
      f"level must be a number in (0, 1); got {level!r}."
    ) from None
  if isinstance(level, bool) or not 0.0 < value < 1.0:
    raise ValueError(f"level must be strictly between 0 and 1 (e.g. 0.95); got {level!r}.")
  return value


def check_samples(num_samples: int, dim: int, minimum: int = 100) -> int:
  """``num_samples`` as an int, at least ``minimum`` and with ``num_samples * dim``
  at most :data:`MAX_ENTRIES` (simulations hold every draw), else a ValueError."""
  n = _checks.check_int(num_samples, "num_samples", minimum=minimum)
  if n * dim > MAX_ENTRIES:
    raise ValueError(
      f"num_samples must be at most {MAX_ENTRIES // dim:,} for {dim} coordinates (the "
      f"simulation holds num_samples x {dim} values); got {n:,}."
    )
  return n


def error_bars(
  mechanism: Any,
  level: float = 0.95,
  *,
  shape: tuple[int, ...] | None = None,
  key: KeyArray | None = None,
  num_samples: int | None = None,
) -> ErrorBars:
  """Per-coordinate error bars of ``mechanism``'s releases at ``level``.

  A function of the mechanism alone: no data is read and nothing is spent, so the bars
  can be computed (and published) before or after the release. Exact quantiles for
  Laplace (and l_1 K-norm) noise, Gaussian noise, the discrete Gaussian, l_inf K-norm
  noise, the poset ball of a poset small enough to enumerate, and the exact rounding
  of each; Monte Carlo quantiles of simulated noise for larger poset balls and the
  l_2 ball, with their error (see :mod:`jaxdp.reporting.quantiles`).

  Args:
    mechanism: a count or additive mechanism with static parameters
      (:func:`jaxdp.reporting.noise_law` lists them).
    level: the probability that an interval covers its true value, in (0, 1).
    shape: the statistic's shape (checked whenever given; only an exact Laplace
      mechanism on a grid needs it).
    key: the simulation's PRNG key (Monte Carlo bars only; default: a fixed public
      key, so bars are reproducible). Never pass a key a release used.
    num_samples: simulated noise vectors for Monte Carlo bars (at least 100; default
      200,000, fewer for a large poset: at most 2^23 simulated values, at least 20,000
      vectors (fewer past 3,355 coordinates, to stay within MAX_ENTRIES); 27,869 for
      300 questions).

  Returns:
    :class:`ErrorBars`; ``bars.interval(released)`` gives the intervals. The bars
    are kept (the :data:`CACHE_SIZE` most recently used, keyed by the noise law,
    level, sample count and the key's bits), so asking again for the same
    mechanism's bars, once per release say, costs no simulation. Each call returns
    its own object with its own read-only copies of the arrays: the kept bars never
    leave this module, so no caller can change another's.

  Raises:
    TypeError: an unsupported mechanism.
    ValueError: a bad level, key or sample count (Monte Carlo bars: too few draws
      for the level, :func:`~jaxdp.reporting.quantiles.check_ranks`), or traced
      parameters.
  """
  level = check_level(level)
  law = noise_law(mechanism, shape)
  dim = law.dim or 1
  if num_samples is None:  # never past MAX_ENTRIES: a law with thousands of coordinates
    num_samples = min(200_000, max(min(20_000, MAX_ENTRIES // dim), (1 << 23) // dim))
  n = check_samples(num_samples, dim)
  if key is not None:
    key = simulate.simulation_key(key)
  closed = quantiles.has_closed_form(law)
  if not closed:
    quantiles.check_ranks(n, level)
  cache_key = (law, closed, level, n, _key_identity(key))
  with _CACHE_LOCK:
    bars = _CACHE.get(cache_key)
    if bars is not None:
      _CACHE.move_to_end(cache_key)
      return _read_only(bars)
  bars = _compute(law, closed, level, n, simulate.simulation_key(key))  # stays here
  with _CACHE_LOCK:
    _CACHE[cache_key] = bars
    while len(_CACHE) > CACHE_SIZE:
      _CACHE.popitem(last=False)
  return _read_only(bars)


def _key_identity(key) -> tuple | None:
  """What fixes a key's draws: its generator and its bits (None: the default key)."""
  if key is None:
    return None
  if jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key):
    impl, bits = str(jax.random.key_impl(key)), jax.random.key_data(key)
  else:
    impl, bits = "raw", key
  bits = np.asarray(bits)
  return impl, bits.dtype.str, bits.shape, bits.tobytes()


def _read_only(bars: ErrorBars) -> ErrorBars:
  """``bars`` with read-only copies of its arrays (a new object each time)."""
  arrays = {}
  for field in ("lower", "upper", "coverage", "mc_error"):
    arrays[field] = np.array(getattr(bars, field), dtype=np.float64)
    arrays[field].flags.writeable = False
  return dataclasses.replace(bars, **arrays)


def _compute(law: NoiseLaw, closed: bool, level: float, n: int, key) -> ErrorBars:
  """The error bars of ``law`` at ``level``: exact where ``closed``, else from ``n``
  simulated draws."""
  if closed:
    t, coverage = quantiles.exact_half_width(law, level)
    dims = () if law.dim is None else (law.dim,)
    # an entry snapped to a grid moved by at most law.snap: widen each end by it, so
    # the interval covers the statistic whenever the noise is within t
    t, coverage = np.full(dims, t * law.unit + law.snap), np.full(dims, coverage)
    integer = " (integer ends)" if law.family == "discrete_gaussian" else ""
    return ErrorBars(
      -t,
      t,
      level,
      coverage,
      np.zeros(dims),
      f"exact quantiles of {law.describe()}{integer}",
      0,
      law.names,
      law,
    )
  draws = simulate.noise_draws(key, law, n)
  t, coverage, err = quantiles.mc_half_width(np.abs(draws), level, law.rounded)
  method = (
    f"Monte Carlo quantiles of {law.describe()} from {n:,} simulated noise vectors "
    "(mc error: 95% order-statistic half-width)"
  )
  return ErrorBars(-t, t, level, coverage, err, method, n, law.names, law)
