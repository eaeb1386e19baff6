"""How a checked query becomes a jitted, budgeted release for a :class:`~jaxdp.Session`:
each mechanism's contributions are prepared from public information only (clipped,
snapped to a grid, made filters), and each checked program compiles once."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp

from jaxdp import _checks, _data_checks, exact, session_rows
from jaxdp.accounting import guard
from jaxdp.accounting.releases import (
  mechanism_cost,
  mechanism_event,
  release_part_statistics,
  spend,
)
from jaxdp.mechanisms import LaplaceMechanism, PosetCountMechanism, is_publishable
from jaxdp.rowwise import LRU

__all__ = [
  "COMPILED",
  "compiled",
  "contributions",
  "grid_row_units",
  "prepared",
  "sanitized",
]

COMPILED = LRU(256)  # (checked programs, mechanism, parts) -> jitted query


def contributions(mech, aval):
  """How contributions of type ``aval`` are prepared for ``mech`` (decided from
  public information only): ``(mechanism to release, preparation, output unit)``."""
  if isinstance(mech, PosetCountMechanism):
    # never raise on (or print) a row: answers other than 1 count as 0, and each
    # row is replaced by the largest filter it contains (row-wise, stable)
    return dataclasses.replace(mech, on_invalid="clip"), ("poset",), None
  if isinstance(mech, LaplaceMechanism) and mech.exact and mech.grid is not None:
    entries = math.prod(aval.shape)
    units = min(math.floor(mech.sensitivity / mech.grid + entries / 2), exact.LIMIT)
    return (
      LaplaceMechanism(mech.eps, float(max(units, 1)), exact=True),
      ("grid", float(mech.sensitivity), float(mech.grid)),
      mech.grid,
    )
  if is_publishable(mech) and (
    jnp.issubdtype(aval.dtype, jnp.integer) or aval.dtype == jnp.bool_
  ):
    # summed exactly (int64, then clipped); a scalar is first clipped to the bound
    bound = math.floor(mech.sensitivity) if aval.shape == () else None
    return mech, ("integer", bound), None
  return mech, ("float",), None


def compiled(mech, rows_q, by_q, num_parts, preparation, row, consts):
  """The block and release programs for this checked program and mechanism on rows
  of type ``row`` (cached; see :mod:`jaxdp.session_rows`).

  Raises:
    ValueError, TypeError: as the mechanism's ``part_statistics`` on a chunk of
      stand-in rows (decided from the program and the row's shape and dtype).
  """
  leaves, treedef = jax.tree_util.tree_flatten(mech)
  cache_key = (
    rows_q.program if rows_q else None,
    by_q.program if by_q else None,
    treedef,
    tuple((type(v), v) for v in leaves),
    num_parts,
    preparation,
    row.shape,
    str(row.dtype),
    jnp.dtype(jnp.result_type(float)).name,
  )
  run = COMPILED.get(cache_key)
  if run is not None:
    return run

  def statistic(rows, valid, rows_consts, by_consts):
    contrib = rows_q.apply(rows_consts, rows) if rows_q else rows
    contrib = prepared(contrib, preparation)
    part = by_q.apply(by_consts, rows) if by_q else jnp.zeros(rows.shape[:1], jnp.int32)
    part = session_rows.kept_parts(part, valid, num_parts)
    return mech.part_statistics(contrib, part, num_parts)

  shape = rows_q.out.shape if rows_q else row.shape
  c = session_rows.chunk_rows(mech, preparation)
  run = session_rows.block_query(
    statistic,
    lambda acct, stat: release_part_statistics(acct, mech, stat, shape),
    c,
    row,
    consts,
    release_key=(cache_key[2:4], shape, cache_key[-1]),
  )
  return COMPILED.put(cache_key, run)


def prepared(x, preparation):
  """Contributions that no data value can turn into an error or an overflow."""
  kind = preparation[0]
  if kind == "poset":
    return x == 1
  if kind == "integer":
    bound = preparation[1]
    return x if bound is None or x.dtype == jnp.bool_ else _checks.clip_integers(x, bound)
  if kind == "grid":
    return grid_row_units(x, *preparation[1:])
  return sanitized(x)


def sanitized(x):
  """Float contributions: non-finite values become 0, booleans 0/1 and integers are
  clipped to the float's exact range (all row-wise)."""
  f = jnp.result_type(float)
  if jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(f)
    return jnp.where(jnp.isfinite(x), x, 0.0)
  if x.dtype == jnp.bool_:
    return x.astype(f)
  limit = _data_checks.exact_limit(f)
  return _checks.clip_integers(x, limit).astype(f)


def grid_row_units(x, bound: float, grid: float):
  """Each row's contribution clipped to l_1 norm ``bound`` and snapped to the grid,
  as int32 grid units (computed in float64: exact for the clipping of a scalar and
  for the snapping; a vector row that rounding takes past the sensitivity counts
  as 0 when summed)."""
  with jax.enable_x64(True):
    v = jnp.asarray(x).astype(jnp.float64)
    v = jnp.where(jnp.isfinite(v), v, 0.0)
    v = v.reshape(v.shape[0], -1)
    if v.shape[1] == 1:  # a scalar: clipped exactly
      v = jnp.clip(v, -bound, bound)
    else:
      norm = jnp.sum(jnp.abs(v), axis=1, keepdims=True)
      v = jnp.where(norm > bound, v * (bound / jnp.where(norm > 0, norm, 1.0)), v)
    units = jnp.clip(jnp.round(v / grid), -exact.LIMIT, exact.LIMIT).astype(jnp.int32)
  return units.reshape(x.shape)


def charged(acct, mech, shape, link):
  """A session's accountant after its release failed while running on the held data
  (an exact sampler's host refinement refusing its noise, with probability below
  2^-128 within :func:`jaxdp.exact.max_scale`, the machine out of memory, or any
  check of the data at run time, whatever the error's type): the release may have
  drawn, so it is charged and its key marked used, and a retry is neither free nor
  the same draw. Errors of the release's trace come first, uncharged
  (:func:`jaxdp.session_rows.traced`)."""
  cost = mechanism_cost(acct, mech, shape)
  _, _, after = spend(acct, *cost, mechanism_event(acct, mech), ())
  guard.mark_used(acct.key)
  return link.settle(after)
