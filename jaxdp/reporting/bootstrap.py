"""Error bars for an order-consistent release, by a parametric bootstrap.

A consistent release ``z = consistent(x + noise)`` is a nonlinear function of the
noise *and of the true counts x* (near a constraint, e.g. a rare follow-up whose count
is near 0, the projection pulls values inward), so no interval for it follows from the
noise law alone. :func:`consistent_error_bars` simulates the release around the
published vector: it takes ``z`` as the truth, draws fresh noise from the mechanism's
law, projects ``z + noise`` and reports per-coordinate percentile intervals of the
projected values, clipped at 0 (no count is negative). These are **approximate**
intervals: their coverage is close to the level where ``z`` is close to ``x`` relative
to the noise, and can fall short of it near the constraints. The bootstrap reads only
the published vector: it is postprocessing and costs no budget.

References:
  B. Efron, R. Tibshirani, "An Introduction to the Bootstrap" (1993), Chapter 13
  (percentile intervals), Section 6.5 (the parametric bootstrap).
"""

from __future__ import annotations

import numbers

import jax
import numpy as np

from jaxdp import _checks
from jaxdp.consistency import check_integer_range, consistent, constraint_graph, default_tol
from jaxdp.mechanisms import PosetCountMechanism
from jaxdp.reporting import quantiles, simulate
from jaxdp.reporting.bars import ErrorBars, check_level, check_samples
from jaxdp.reporting.laws import noise_law
from jaxdp.typing import ArrayLike, KeyArray

__all__ = ["MIN_LEVEL", "check_released", "consistent_error_bars"]

MIN_LEVEL = 0.5  # the narrowest bootstrap interval served


def consistent_error_bars(
  released: ArrayLike,
  mechanism: PosetCountMechanism,
  level: float = 0.95,
  *,
  integer: bool = False,
  key: KeyArray | None = None,
  num_samples: int = 4_000,
) -> ErrorBars:
  """Approximate per-coordinate intervals for an order-consistent release.

  Args:
    released: the published consistent vector ``(n, c_1, ..., c_d)`` (the output of
      :func:`jaxdp.consistent` on the mechanism's release), shape ``(d + 1,)``.
    mechanism: the :class:`~jaxdp.PosetCountMechanism` that made the raw release.
    level: the nominal probability of each interval, in [0.5, 1).
    integer: the release was projected with ``integer=True`` (so is each bootstrap
      replicate, and the noise is rounded as an exact mechanism's is).
    key: the simulation's PRNG key (default: a fixed public key). Never a key a
      release used.
    num_samples: bootstrap replicates (at least 100).

  Returns:
    :class:`~jaxdp.reporting.ErrorBars` with ``method`` naming the bootstrap; the
    intervals are ``bars.interval(released)`` and always hold ``released``
    (``lower <= 0 <= upper``). ``coverage`` holds the nominal level
    (the actual coverage is not known), ``mc_error`` the 95% order-statistic
    half-width of the wider end.

  Raises:
    TypeError: ``mechanism`` is not a PosetCountMechanism, ``released`` not numbers
      (bool or strings).
    ValueError: a vector of the wrong shape, non-finite or negative values, not
      consistent (beyond the float32 tolerance of :func:`jaxdp.consistent`), not
      integral or past :func:`jaxdp.consistency.integer_limit` with
      ``integer=True``; a bad level, key or sample count (too few replicates for
      the level: the upper end's confidence rank past the largest replicate).
  """
  if not isinstance(mechanism, PosetCountMechanism):
    raise _checks.ArgTypeError(
      "mechanism must be the jaxdp.PosetCountMechanism of the release; got "
      f"{type(mechanism).__name__}."
    )
  level = check_level(level)
  if level < MIN_LEVEL:
    raise ValueError(
      f"level must be at least {MIN_LEVEL} for a bootstrap interval (narrower ones "
      f"shrink to the median of the replicates and carry no information); got {level!r}."
    )
  if not isinstance(integer, bool):
    raise _checks.ArgTypeError(f"integer must be True or False; got {integer!r}.")
  n = check_samples(num_samples, mechanism.dim)
  poset = mechanism.poset
  kind = np.asarray(released).dtype
  if kind == np.object_ and not all(  # Python ints past int64: numbers, not text
    isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))
    for v in np.asarray(released).flat
  ):
    kind = np.dtype(str)
  if kind == np.bool_ or not (np.issubdtype(kind, np.number) or kind == np.object_):
    raise _checks.ArgTypeError(
      f"released must hold counts (the output of jaxdp.consistent); got dtype {kind}."
    )
  integer_input = np.issubdtype(kind, np.signedinteger)
  if integer_input and _checks.holds_invalid(released):  # as NaN marks a float one
    raise ValueError(
      "released holds its dtype's minimum, the mark of a refused exact release; it "
      "cannot be bootstrapped."
    )
  z = np.asarray(released, dtype=np.float64)
  if z.shape != (mechanism.dim,):
    raise ValueError(
      f"released must have shape ({mechanism.dim},) (respondents, then one count per "
      f"question of {poset!r}); got {z.shape}."
    )
  if not np.all(np.isfinite(z)):
    raise ValueError("released must be finite (a refused release cannot be bootstrapped).")
  law = noise_law(mechanism)
  check_released(z, poset, law.names, integer)
  quantiles.check_ranks(n, level, (1 - level) / 2, (1 + level) / 2)  # both ends
  noise = simulate.noise_draws(simulate.simulation_key(key), law, n)
  if integer or law.rounded:
    noise = np.rint(noise)
  # in float64: float32 rounds z + noise to ulps of the counts (64 at 10^9), which
  # would swallow noise of a few counts
  with jax.enable_x64(True):
    reps = np.asarray(consistent(z + noise, poset, integer=integer), dtype=np.float64)
  lo_q, hi_q = (1 - level) / 2, (1 + level) / 2
  j_lo, lo_a, lo_b = quantiles.order_ranks(n, lo_q)
  j_hi, hi_a, hi_b = quantiles.order_ranks(n, hi_q)
  part = np.partition(reps, sorted({j_lo, lo_a, lo_b, j_hi, hi_a, hi_b}), axis=0)
  low = np.maximum(part[j_lo], 0.0)
  high = np.maximum(part[j_hi], low)
  err = np.maximum(part[lo_b] - part[lo_a], part[hi_b] - part[hi_a]) / 2
  method = (
    f"approximate: parametric bootstrap percentile intervals, {n:,} replicates of "
    f"{law.describe()} added to the published consistent vector and projected again"
  )
  # the published value always lies in its interval (percentile ends of replicates
  # can cross it near the constraints or after rounding)
  return ErrorBars(
    np.minimum(low - z, 0.0),
    np.maximum(high - z, 0.0),
    level,
    np.full(z.shape, level),
    err,
    method,
    n,
    law.names,
    None,
  )


def check_released(z: np.ndarray, poset, names, integer: bool) -> None:
  """Refuse a ``released`` vector no consistent release can be: a negative value, an
  order constraint broken by more than the float32 tolerance of
  :func:`jaxdp.consistent` (``1e-4 max(1, max|z|)``), or, with ``integer``, a
  non-integral value or one past the integer dtype."""
  slack = default_tol(np.float32) * max(1.0, float(np.max(np.abs(z))))
  if np.any(z < -slack):
    i = int(np.argmin(z))
    raise ValueError(
      f"released must be >= 0 (a consistent release); {names[i]} = {z[i]:g}. Pass the "
      "output of jaxdp.consistent."
    )
  graph = constraint_graph(poset)
  lo, hi = np.asarray(graph.lo), np.asarray(graph.hi)
  excess = z[lo] - z[hi]
  if excess.size and excess.max() > slack:
    e = int(np.argmax(excess))
    raise ValueError(
      f"released is not consistent: {names[lo[e]]} = {z[lo[e]]:g} exceeds "
      f"{names[hi[e]]} = {z[hi[e]]:g}, which bounds it (by more than the tolerance "
      f"{slack:.3g}). Pass the output of jaxdp.consistent."
    )
  if integer:
    frac = np.nonzero(z != np.round(z))[0]
    if frac.size:
      i = int(frac[0])
      raise ValueError(
        f"released must be integers with integer=True; {names[i]} = {z[i]:g}. Pass the "
        "output of jaxdp.consistent(..., integer=True), or integer=False."
      )
    check_integer_range(z, "released")
