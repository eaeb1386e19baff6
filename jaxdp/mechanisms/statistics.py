"""Statistics and per-part statistics: exact float statistics and counts, part indices,
clipped part sums, and integer grid units for exact releases."""

from __future__ import annotations

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, _data_checks, exact
from jaxdp.exact.refine import raise_if
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.norm_ball import NormBall
from jaxdp.samplers.sum_ball import SumBall

SATURATION = 2**31 - 1  # B: the largest |output| of a saturating exact release
WIDE_CLIP = SATURATION + exact.LIMIT  # C: beyond it, stat + noise saturates either way
# the one exact mechanism that snaps real values (the others have no grid option)
SNAP_HINT = (
  "LaplaceMechanism(..., exact=True, grid=2.0**-k) snaps real values to a grid (in "
  "a Session: sum(..., grid=2.0**-k)); the other exact mechanisms take integers only."
)


def float_statistic(data, name="data"):
  """A statistic as the default float dtype: no float16, NaN or silent rounding.

  Concrete integers, and floats the cast narrows (float64 with x64 off), must lie
  within the float's exact integer range (+-2**24 for float32), whatever their
  width or shape: beyond it neighbouring integers round together or apart, and the
  sensitivity no longer holds.
  """
  float_dtype = jnp.result_type(float)
  x = _data_checks.check_data(
    data,
    name,
    limit=_data_checks.exact_limit(float_dtype),
    reason=_data_checks.float_reason(float_dtype),
  )
  return _data_checks.as_exact_float(x, name)


def exact_counts(counts, n: int, ok, *, with_n: bool = True):
  """Counts of n 0/1 rows (default float dtype), refusing n beyond its exact range.

  Checked before any sum is used: with n within the range every partial sum is an
  integer the dtype holds, so the sums are exact.
  """
  float_dtype = jnp.result_type(float)
  limit = _data_checks.exact_limit(float_dtype)
  if n > limit:
    raise ValueError(
      f"data has {n:,} rows, more than {limit:,}: counts that large are not exact "
      f"in {jnp.dtype(float_dtype)} (noise would be added to a rounded count). "
      "Enable x64 (jax.config.update('jax_enable_x64', True)) or split the data."
    )
  if with_n:
    counts = jnp.concatenate([jnp.full((1,), n, counts.dtype), counts])
  return jnp.where(ok, counts, jnp.nan)  # NaN: a failed run-time check


def part_index(part, n: int, num_parts: int):
  """The part index of each row as a JAX integer array.

  Indices outside ``[0, num_parts)`` drop their row. A concrete index of a dtype that
  JAX narrows (int64 or uint64 with x64 off) is mapped to -1 there on the host, in
  its own dtype, before the conversion, which would wrap 2**32 + 1 into part 1.
  """
  if not hasattr(part, "dtype"):
    part = np.asarray(part)
  if part.shape != (n,) or not jnp.issubdtype(part.dtype, jnp.integer):
    raise ValueError(
      f"part must be an integer array of shape ({n},), one part index "
      f"per row; got {part.dtype}{tuple(part.shape)}."
    )
  target = jax.dtypes.canonicalize_dtype(part.dtype)
  if _checks.is_concrete(part) and target != part.dtype:
    host = np.asarray(part)
    keep = (host >= 0) & (host < num_parts)
    part = np.where(keep, np.where(keep, host, 0).astype(np.int64), -1)
    part = part.astype(jax.dtypes.canonicalize_dtype(np.int64))
  return jnp.asarray(part)


def part_sums(x, part, num_parts: int):
  """Sums of the rows of ``x`` by part (rows whose part is outside
  ``[0, num_parts)`` are dropped): a masked reduction for one part (a scatter-add
  is several times slower on the CPU), ``segment_sum`` otherwise."""
  if num_parts == 1:
    return jnp.sum(jnp.where((part == 0)[:, None], x, 0), axis=0, dtype=x.dtype)[None]
  return jax.ops.segment_sum(x, part, num_parts)


def clipped_part_sums(rows, part, num_parts: int, p, bound: float):
  """Per-part sums of rows, each row first scaled into the ball of radius bound.

  ``p`` is an l_p ball's p or a query ball (:class:`~jaxdp.NormBall`, whose own
  norm is used). Scaling a row into the ball bounds what one person adds to one
  part's sum, so the sum's sensitivity in that norm is ``bound`` whatever the rows
  hold (sums in the default float dtype).
  """
  x = _data_checks.check_data(rows, "rows")
  if (
    not jnp.issubdtype(x.dtype, jnp.floating)
    and _checks.is_concrete(bound)
    and x.shape[0] * bound > _data_checks.exact_limit(jnp.result_type(float))
  ):
    raise ValueError(
      f"rows: {x.shape[0]:,} integer contributions of up to {bound:g} each can add "
      f"up to more than {_data_checks.exact_limit(jnp.result_type(float)):,}, beyond the "
      "exact range of the default float dtype. Enable x64 or split the data."
    )
  x = x.astype(jnp.result_type(float))
  x = jnp.where(jnp.isfinite(x), x, 0.0)  # a non-finite contribution counts as 0
  scalar = x.ndim == 1
  if scalar:
    x = x[:, None]
  if x.ndim != 2:
    raise ValueError(f"rows must have shape (n,) or (n, k); got {tuple(x.shape)}.")
  part = part_index(part, x.shape[0], num_parts)
  if isinstance(p, NormBall) and x.shape[1] != p.dim:
    raise ValueError(
      f"rows must have {p.dim} columns (the {p.name}'s dimension); got shape "
      f"{tuple(x.shape)}."
    )
  big = float(jnp.finfo(x.dtype).max)
  with jax.enable_x64(True):  # norms, scaling and sums in float64 (see row_norms)
    x64 = x.astype(jnp.float64)
    norm = row_norms(x64, p)
    # a NaN norm (an overflow inside it) scales the row to 0, never leaves it whole
    factor = jnp.where(norm <= bound, 1.0, bound / jnp.where(norm > bound, norm, jnp.inf))
    sums = part_sums(x64 * factor[:, None], part, num_parts)  # (1-Lipschitz: the
    sums = jnp.clip(sums, -big, big).astype(x.dtype)  # sensitivity holds)
  return sums[:, 0] if scalar else sums


def row_norms(x, p):
  """Each row's norm (an l_p ball's p, or a query ball's own norm), at least its
  l_inf norm over the ball's bounding box (every norm here is), so no rounding,
  underflow or flush to zero lets a large row pass as small.

  Taken in float64 (x64 on) for float32 rows: ``1 / 3e38`` is subnormal in float32,
  which XLA flushes to 0, so scaling by it would zero the row's norm.
  """
  magnitude = jnp.abs(x)
  top = jnp.max(magnitude, axis=1)
  if isinstance(p, NormBall):
    return jnp.maximum(p.norm(x), top / p.bounding_box())
  if p == math.inf:
    return top
  if p == 1:
    return jnp.maximum(jnp.sum(magnitude, axis=1), top)
  # scaled by the largest entry, so that no row's norm underflows to 0 (|x|^p of a
  # small entry is 0 at large p; a row of norm 0 would pass unclipped)
  unit = magnitude / jnp.where(top > 0, top, 1.0)[:, None]
  return jnp.maximum(top * jnp.sum(unit**p, axis=1) ** (1.0 / p), top)


def grid_units(data, grid, *, wide: bool = False):
  """The statistic in int32 grid units, and the snapping slack in units.

  ``grid`` None: ``data`` must have an integer dtype (no snapping, slack 0).
  Otherwise real data is snapped to the nearest multiple of ``grid`` (exact: grid
  is a power of two), each entry moving by at most half a unit, so neighbouring
  statistics differ by at most ``sensitivity / grid + m`` units in l_1 (slack m,
  the number of entries).

  A concrete statistic is checked and snapped on the host, in its own dtype (a
  float64 one is not rounded to float32 first: that could move it by many units):
  beyond +-2^30 units it is an error, since clipping it silently would hide a
  mistake. A traced one is clipped to +-2^30 units (an error there would depend on
  the data, e.g. inside :func:`jaxdp.release_partitioned`), which leaves room for the
  noise in int32. Coordinatewise clipping is 1-Lipschitz in every l_p norm, so it
  keeps an l_p sensitivity, but not in the poset-ball norm (clipping (1, F) to
  (0, F) doubles it): with ``wide`` (``grid`` None only) a traced statistic is
  returned unclipped, in its own integer dtype, for :func:`saturating_add`.
  """
  if not hasattr(data, "dtype"):
    data = np.asarray(data)
  if grid is None and not jnp.issubdtype(data.dtype, jnp.integer) and data.dtype != object:
    _data_checks.check_data(data)  # a dtype error first
    raise ValueError(
      f"exact=True needs an integer statistic (counts); got dtype {data.dtype}. Cast "
      f"counts to an integer dtype; {SNAP_HINT}"
    )
  if wide:  # clipping would not keep a poset- or vote-ball sensitivity
    too_big = (
      "the largest |statistic| an exact poset- or vote-ball release takes from the host. "
      "Split the data, or compute the statistic under jax.jit, where the release "
      "saturates at +-(2**31 - 1) after the noise (postprocessing)."
    )
  else:
    too_big = (
      "the largest |statistic| an exact release holds (int32, with room for "
      "the noise). Clip it yourself if that is meant (clipping keeps the "
      "sensitivity), or use a coarser unit" + (" or grid." if grid else ".")
    )
  if grid is None:
    x = _data_checks.check_data(data, limit=exact.LIMIT, reason=too_big)
    if wide:
      return x, 0
    return _checks.clip_integers(x, exact.LIMIT).astype(jnp.int32), 0
  x = _data_checks.check_data(data)
  if _checks.is_concrete(x):
    host = np.asarray(data).astype(np.float64)  # exact for every value check_data passes
    units = np.round(host / grid)  # exact: grid is a power of two
    i = _data_checks.first_index(np.abs(units) > exact.LIMIT)
    if i is not None:
      raise ValueError(
        f"data{'' if i == () else f' at index {i}'} is {host[i]}, {units[i]:.0f} "
        f"units of grid {grid!r}, beyond {exact.LIMIT:,} = 2**30 units, {too_big}"
      )
    return jnp.asarray(units.astype(np.int32)), math.prod(x.shape)
  xf = _data_checks.as_exact_float(x)
  xf = jnp.where(jnp.isnan(xf), 0.0, xf)  # NaN: see defined_entries; +-inf clip below
  units = jnp.clip(jnp.round(xf / grid), -exact.LIMIT, exact.LIMIT)
  return units.astype(jnp.int32), math.prod(x.shape)


def defined_entries(data):
  """Where a traced real statistic is not NaN, for an exact release on a grid.

  Snapping is monotone on the extended reals: +-inf clip to +-2^30 units like the
  largest finite values (:func:`grid_units`), so a statistic that overflows on one
  dataset is released as its neighbour's clipped one. NaN has no place in that
  order. As for every other bad value of the data, a concrete NaN is refused
  before anything is drawn (:func:`jaxdp._data_checks.check_data`); a traced one
  makes the computation fail at run time (a host check, run only when some entry is
  NaN), and those entries are the invalid fill (NaN, never a release of 0) should
  the error be swallowed. The budget, decided from the parameters only, is charged.

  Returns:
    True for concrete or non-float data; else a traced bool array of its shape.
  """
  return checked_entries(
    data,
    jnp.isnan,
    "is NaN: an exact release on a grid has no grid point for NaN (+-inf clip to "
    "+-2**30 units like the largest finite values)",
  )


def finite_entries(data):
  """Where a traced statistic of a float (not exact) release is finite.

  As for every other bad value of the data, a concrete NaN or infinity is refused
  before anything is drawn (:func:`jaxdp._data_checks.check_data`); a traced one makes
  the computation fail at run time (a host check, run only when some entry is not
  finite), and those entries are the invalid fill (NaN) should the error be
  swallowed: never an answer. The budget, decided from the parameters only, is
  charged by a run that completes.

  Returns:
    True for concrete data; else a traced bool array of its shape.
  """
  return checked_entries(
    data,
    lambda x: ~jnp.isfinite(x),
    "is not finite: NaN or infinite data would flow into the output and look like "
    "a refusal",
  )


def checked_entries(data, is_bad, reason):
  """``~is_bad(data)`` for traced float data, failing at run time (naming the first
  bad entry and ``reason``) when any entry is bad; True for concrete or non-float
  data, which :func:`jaxdp._data_checks.check_data` checks eagerly."""
  if _checks.is_concrete(data) or not jnp.issubdtype(jnp.result_type(data), jnp.floating):
    return True
  bad = is_bad(data)

  def error(bad_):
    i = np.unravel_index(int(np.argmax(bad_.ravel())), bad_.shape)
    where = "" if bad_.ndim == 0 else f" at index {tuple(int(j) for j in i)}"
    return ValueError(
      f"data{where} {reason}. Compute the statistic so that it is always finite "
      "(e.g. jnp.nan_to_num with a value the sensitivity allows)."
    )

  return raise_if(bad, error) & ~bad


def saturating_add(stat, noise):
  """``sat_B(stat + noise)`` in int32, exact for any integer ``stat``: the sum clipped
  to +-B, B = :data:`SATURATION` = 2^31 - 1 (never int32's minimum, the sentinel).

  The clip comes after the noise, so it is postprocessing and keeps any sensitivity
  (clipping the statistic first is not 1-Lipschitz in the poset-ball norm). With
  ``|noise| <= 2^30`` (:data:`jaxdp.exact.LIMIT`: every exact sampler's noise), ``stat``
  may first be clipped to +-C, C = :data:`WIDE_CLIP` = B + 2^30, in its own dtype:
  beyond C, ``stat + noise`` lies beyond B with the sign of ``stat`` either way. The
  sum is then taken in int64.
  """
  with jax.enable_x64(True):
    x = _checks.clip_integers(jnp.asarray(stat), WIDE_CLIP).astype(jnp.int64)
    y = x + jnp.asarray(noise).astype(jnp.int64)
    bound = jnp.asarray(SATURATION, jnp.int64)
    return jnp.clip(y, -bound, bound).astype(jnp.int32)


def as_int_counts(counts, *, wide: bool = False):
  """Exact float counts (NaN after a failed run-time check) as integers (the dtype's
  minimum for NaN).

  Without ``wide``: int32, clipped to +-2^30 (1-Lipschitz in every l_p norm, so an
  l_p sensitivity holds). With ``wide`` (for poset-ball and vote-ball noise, whose
  norms clipping does not keep): JAX's default integer, clipped only to +-:data:`WIDE_CLIP` with x64
  (int64), which :func:`saturating_add` releases exactly as the unclipped counts;
  without x64 the float32 counts are at most 2^24 (:func:`exact_counts`), so no clip
  binds.
  """
  ok = jnp.isfinite(counts)
  dtype, limit = jnp.int32, exact.LIMIT
  if wide and jax.dtypes.canonicalize_dtype(np.int64) == np.int64:
    dtype, limit = jnp.int64, WIDE_CLIP
  c = jnp.clip(jnp.where(ok, counts, 0), -limit, limit).astype(dtype)
  return _checks.mark_invalid(ok, c)


def integer_part_sums(
  rows, part, num_parts: int, bound, p: float | SumBall | CountBall = 1
):
  """Per-part int32 sums of integer rows; rows of l_p norm (p = 1, 2 or inf), sum-ball
  norm (``p`` a :class:`~jaxdp.SumBall`: max(||x||_inf, ||x||_1 / k), compared
  exactly as ||x||_inf <= bound and ||x||_1 <= floor(k bound)) or count-ball norm
  (``p`` a :class:`~jaxdp.CountBall`: g(x+) + g(x-), g that max; its four sums of
  one term of each g compared, times k, with floor(bound) or floor(k bound)) above
  ``bound`` count as 0.

  The sums are taken in int64 and clipped to +-2^30 (1-Lipschitz in every l_p norm,
  so the sensitivity holds): no row count can overflow them or raise an error that
  would reveal it.
  """
  x = _data_checks.check_data(rows, "rows")
  if not (jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_):
    raise ValueError(
      f"rows: an exact release without a grid sums integer contributions; got dtype "
      f"{x.dtype}. Return integers (or booleans) per row; {SNAP_HINT}"
    )
  scalar = x.ndim == 1
  x2 = x[:, None] if scalar else x
  if x2.ndim != 2:
    raise ValueError(f"rows must have shape (n,) or (n, k); got {tuple(x.shape)}.")
  part = part_index(part, x.shape[0], num_parts)
  with jax.enable_x64(True):
    # every norm here is at least ||x||_inf, so an entry beyond floor(bound) fails
    # the row, clipped to floor(bound) + 1 or not; the clip keeps every sum below
    # 2^63 (no wrap can pass a row), and for a huge bound the clipped row is both
    # checked and summed
    # (bound may be traced; NaN or negative: cap 1, and every row fails anyway)
    b = jnp.asarray(bound, jnp.float64)
    cap = jnp.minimum(jnp.floor(jnp.where(b >= 0, b, 0)), 2.0**40).astype(jnp.int64) + 1
    x2 = jnp.clip(x2.astype(jnp.int64), -cap, cap)
    if isinstance(p, (SumBall, CountBall)) and x2.shape[1] != p.d:
      raise ValueError(f"rows must have {p.d} columns (the {p.name}'s); got {x.shape}.")
    if isinstance(p, CountBall):
      keep = count_norm_within(x2, p.k, bound)
    elif isinstance(p, SumBall):
      top = math.floor(Fraction(float(bound)) * p.k)  # exact: no rounding of k * bound
      keep = jnp.max(jnp.abs(x2), axis=1, initial=0) <= bound
      keep = keep & (jnp.sum(jnp.abs(x2), axis=1) <= top)
    elif p == 1:
      keep = jnp.sum(jnp.abs(x2), axis=1) <= bound
    elif p == math.inf:
      keep = jnp.max(jnp.abs(x2), axis=1, initial=0) <= bound
    else:  # l_2: the sum of squares against bound^2 (see l2_within)
      keep = l2_within(x2, bound)
    sums = part_sums(jnp.where(keep[:, None], x2, 0), part, num_parts)
    sums = jnp.clip(sums, -exact.LIMIT, exact.LIMIT).astype(jnp.int32)
  return sums[:, 0] if scalar else sums


def l2_within(x, bound) -> jax.Array:
  """Whether each int64 row x (entries at most 2^41 in magnitude) has l_2 norm at
  most ``bound``, never True for a row above it. The float64 sum of squares is
  exact while it is below 2^53 (every partial sum is then an integer below 2^53),
  and is compared exactly with bound^2 there; past 2^53 it may round down, so it
  must stay below bound^2 by its rounding's largest relative error, (d + 1) 2^-52:
  a row that close to the bound counts as 0 (the safe side)."""
  b2 = Fraction(float(bound)) ** 2
  sq = jnp.sum(x.astype(jnp.float64) ** 2, axis=1)
  exact_sum = sq < 2.0**53
  below = float(math.floor(b2))  # sq is an integer there: sq <= b2 iff sq <= floor
  slack = 1.0 + (x.shape[1] + 1) * 2.0**-52
  rounded = jnp.where(exact_sum, sq, sq * slack)  # an upper bound of the true sum
  limit = jnp.where(exact_sum, below, math.nextafter(float(b2), 0.0))
  return rounded <= limit


def count_norm_within(x, k: int, bound) -> jax.Array:
  """Whether each int64 row x has count-ball norm g(x+) + g(x-) <= bound, exactly:
  with M, S the max and sum of x+ (m, s of x-), max(M, S / k) + max(m, s / k) <= b
  iff M + m <= floor(b), k M + s <= floor(k b), S + k m <= floor(k b) and
  S + s <= floor(k b) (integers on the left). Entries must be at most 2^40 in
  magnitude (:func:`integer_part_sums` clips them first), so no sum wraps."""
  top = math.floor(Fraction(float(bound)) * k)  # exact: no rounding of k * bound
  low = math.floor(Fraction(float(bound)))
  xp, xn = jnp.maximum(x, 0), jnp.maximum(-x, 0)
  mp, mn = jnp.max(xp, axis=1, initial=0), jnp.max(xn, axis=1, initial=0)
  sp, sn = jnp.sum(xp, axis=1), jnp.sum(xn, axis=1)
  return (mp + mn <= low) & (k * mp + sn <= top) & (sp + k * mn <= top) & (sp + sn <= top)
