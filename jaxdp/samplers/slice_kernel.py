"""Proposals for uniform points of the cube slices S(m, k) = {x in [0, 1]^m : sum(x) <=
k}, m = 0, ..., d, on coordinate groups of per-row sizes (the sum ball's one group
of d, the count ball's two complementary halves), in one dense kernel.

For each size m the host picks the proposal of :mod:`jaxdp.samplers.cube_slice` that
accepts most (:func:`proposal_table`): the cube (m <= k), the tilted exponentials,
or the wrapped simplex frac(a D) with its best a (the scaled simplex is its a = k).
A row gathers its group's parameters by size, so the count ball's halves use the
wrapped simplex as the sum ball does.

Every proposal's density on the cube is a function of sum(x) (the wrapped simplex's
of the slab floor(sum(x))), and its acceptance, a comparison of a fresh Exp(1)
variate with a threshold of sum(x), corrects it to the uniform law of S(m, k); a
table for the cone measure (``cone``) may instead take the wrapped simplex of
:func:`~jaxdp.samplers.cube_slice.shell_proposal`, whose threshold is that of
floor(sum(x)) less that of floor(k g(x)), with g(x) = max(max(x), sum(x) / k), or
the folded cube of :func:`~jaxdp.samplers.cube_slice.fold_proposal` (x = 1 - u for
uniform u whose sum exceeds k, the threshold log 2 when sum(x) <= m - k < k g(x)).

The wrapped simplex's thresholds grow with k - 1 - floor(sum(x)); the table keeps
the last ``WINDOW`` slabs below k and rejects the others. A slab is left out only when
its threshold is at least ``MAX_EXPONENTIAL``, above every Exp(1) variate
-log(1 - u) that a float32 or float64 uniform u in [0, 1) yields (at most 52 log 2 <
37): that slab is never accepted either way, so the window changes no draw. A size
whose thresholds do not fit the window takes the better of the tilted exponentials
and the cube instead.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache
from jaxdp.samplers.cube_slice import (
  fold_proposal,
  shell_proposal,
  slice_table,
  wrapped_proposal,
)
from jaxdp.samplers.words import paired_words, unit_floats

__all__ = [
  "MAX_EXPONENTIAL",
  "WINDOW",
  "ProposalTable",
  "group_reduce",
  "proposal_table",
  "slice_proposals",
  "uniforms",
]

# The wrapped simplex's thresholds kept per size: slabs k - WINDOW, ..., k - 1.
WINDOW = 128
# Above every Exp(1) variate from a float32 or float64 uniform in [0, 1).
MAX_EXPONENTIAL = 40.0
LOG_2 = math.log(2.0)  # the folded cube's threshold (an Exp(1) variate above: 1/2)


class ProposalTable(NamedTuple):
  """Host arrays (read-only) indexed by the size m = 0..d: ``a`` (the wrapped
  simplex's a, 0 for the tilted exponentials or the cube), ``lam`` (the tilted rate,
  0 for the cube), ``scale`` (1 - exp(-lam), the fraction of [0, 1) whose uniforms
  map to Exp(lam) truncated to [0, 1]; 1 when lam = 0 or a > 0), ``thresholds``
  (``(d + 1, width)``: column c the wrapped simplex's threshold of the slab k - 1 - c;
  ``MAX_EXPONENTIAL`` where it is at least that), ``log_acc`` (log acceptance) and
  ``shell`` (bool, or None for none: the wrapped simplex of
  :func:`~jaxdp.samplers.cube_slice.shell_proposal`, for the cone measure only, its
  thresholds kept whole) and ``fold`` (bool, or None for none: the cube folded by
  its complement, :func:`~jaxdp.samplers.cube_slice.fold_proposal`, for the cone
  measure only; ``a`` and ``lam`` 0 as for the cube)."""

  a: np.ndarray
  lam: np.ndarray
  scale: np.ndarray
  thresholds: np.ndarray
  log_acc: np.ndarray
  shell: np.ndarray | None = None
  fold: np.ndarray | None = None


@value_cache(maxsize=64)
def proposal_table(d: int, k: int, cone: bool = False) -> ProposalTable:
  """The proposal of each S(m, k), m = 0..d, that accepts most (see the module
  docstring); with ``cone``, for a point whose direction x / g(x) follows the cone
  measure of S(m, k) (its radius g(x) not uniform's), which the wrapped simplex of
  :func:`~jaxdp.samplers.cube_slice.shell_proposal` (k <= ``WINDOW``) and, near
  m = 2 k, the folded cube of :func:`~jaxdp.samplers.cube_slice.fold_proposal`
  accept more often."""
  tilt = slice_table(d, k)
  width = min(k, WINDOW)
  a = np.zeros(d + 1, np.int64)
  lam = np.zeros(d + 1)
  thresholds = np.full((d + 1, width), MAX_EXPONENTIAL)
  log_acc = np.zeros(d + 1)
  shell = np.zeros(d + 1, bool)
  fold = np.zeros(d + 1, bool)
  for m in range(k + 1, d + 1):  # m <= k: the cube, always accepted
    lam[m], log_acc[m] = tilt.lam[m], tilt.log_acc[m]
    wrap_a, thr, wrap_acc = wrapped_proposal(m, k, tilt.logvol[m])
    fits = k <= width or thr[k - 1 - width] >= MAX_EXPONENTIAL
    if wrap_acc >= tilt.log_acc[m] and fits:  # (the scaled simplex is a = k)
      a[m], lam[m], log_acc[m] = wrap_a, 0.0, wrap_acc
      thresholds[m] = np.minimum(thr[::-1][:width], MAX_EXPONENTIAL)
    if cone and k <= width:
      shell_a, thr, shell_acc = shell_proposal(m, k, tilt.logvol[m])
      if shell_acc > log_acc[m]:
        a[m], lam[m], log_acc[m], shell[m] = shell_a, 0.0, shell_acc, True
        thresholds[m] = thr[::-1]  # differences are compared: none is clipped
    if cone:
      fold_acc = fold_proposal(m, k, tilt.logvol[m])
      if fold_acc > log_acc[m]:
        a[m], lam[m], log_acc[m], shell[m], fold[m] = 0, 0.0, fold_acc, False, True
        thresholds[m] = MAX_EXPONENTIAL  # no wrapped simplex's thresholds to keep
  scale = np.where((a > 0) | (lam == 0), 1.0, -np.expm1(-lam))
  out = ProposalTable(a, lam, scale, thresholds, log_acc, shell, fold)
  for arr in out:
    arr.setflags(write=False)  # shared by every caller of the cache
  return out


def slice_proposals(u, extra, pos, sizes, table: ProposalTable, k: int):
  """Proposals in S(m, k) on one or two complementary coordinate groups of each row.

  Args:
    u: ``(n, d)`` uniforms in [0, 1), one per coordinate, multiples of 2^-p with p
      at most the dtype's mantissa bits (as :func:`uniforms` and
      ``jax.random.uniform`` make them), so that 1 - u is exact.
    extra: ``(n, 2 g)`` such uniforms, two per group (the wrapped simplex's extra
      spacing and the acceptance exponential).
    pos: ``(n, d)`` bool, the first group (the second is its complement), or None
      for one group of all d coordinates.
    sizes: each group's size: ``(n,)`` int arrays, or ints (one group: ``(d,)``).
    table: :func:`proposal_table` ``(d, k)``.
    k: the bound on the sum.

  Returns:
    ``(x, ok, g)``: ``x`` ``(n, d)`` the proposals (each group's coordinates a
    uniform point of its S(m, k) when accepted; with a ``table`` for the cone
    measure, a point whose direction x / g(x) follows it), ``ok`` and ``g`` tuples
    of ``(n,)`` arrays: each group's acceptance and its norm g(x) = max(max(x),
    sum(x) / k) (0 for an empty group).
  """
  dtype = u.dtype
  groups = 1 if pos is None else 2
  width = table.thresholds.shape[1]
  if all(isinstance(size, int) for size in sizes):  # the rows of static sizes only
    rows = {size: i for i, size in enumerate(sorted(set(sizes)))}
    flat_thr = jnp.asarray(table.thresholds[sorted(rows)].reshape(-1), dtype)
    offsets = [rows[size] * width for size in sizes]
  else:
    flat_thr = jnp.asarray(table.thresholds.reshape(-1), dtype)
    offsets = [size * width for size in sizes]
  has_shell = table.shell is not None and bool(np.any(table.shell))
  has_fold = table.fold is not None and bool(np.any(table.fold))
  par = []  # per group: (a, lam, scale, cube, wrap, shell, fold), arrays or scalars
  for size in sizes:
    if isinstance(size, int):
      wrap_a, lam, scale = (float(t[size]) for t in (table.a, table.lam, table.scale))
      shell = has_shell and bool(table.shell[size])
      fold = has_fold and bool(table.fold[size])
    else:
      wrap_a, lam, scale = (jnp.asarray(t, dtype)[size] for t in table[:3])
      shell = jnp.asarray(table.shell)[size] if has_shell else False
      fold = jnp.asarray(table.fold)[size] if has_fold else False
    cube = (wrap_a == 0) & (lam == 0)
    par.append((wrap_a, lam, scale, cube, wrap_a > 0, shell, fold))

  def per_coordinate(i):  # a per-group parameter broadcast over the coordinates
    if groups == 1:
      return par[0][i] if isinstance(par[0][i], (bool, float)) else par[0][i][:, None]
    return jnp.where(pos, par[0][i][:, None], par[1][i][:, None])

  # 1 - u is exact (u on the uniforms' grid), and XLA:CPU's log is faster than its
  # log1p; a tilted row's u * scale is not exact, so it takes log1p
  if np.all(table.scale == 1):
    e = -jnp.log(1.0 - u)
  else:
    e = -jnp.log1p(-u * per_coordinate(2))
  wrapped = any(not isinstance(p[4], bool) or p[4] for p in par)
  folded = has_fold and any(not isinstance(p[6], bool) or p[6] for p in par)
  # the wrapped simplex's totals of e and the folded cube's sums of u, in one pass
  summed = group_reduce([e] * wrapped + [u] * folded, pos, [jnp.add] * (wrapped + folded))
  if folded:  # 1 - u (exact) for a folded group whose uniforms sum above k
    flips = [p[6] & (total > k) for p, total in zip(par, summed[-1])]
    flip = (
      flips[0][:, None] if groups == 1 else jnp.where(pos, *(f[:, None] for f in flips))
    )
    u = jnp.where(flip, 1.0 - u, u)
  totals = summed[0] if wrapped else None
  e_extra = -jnp.log(1.0 - extra)
  factors = []
  for g in range(groups):
    wrap_a, lam, _, cube, wrap, _, _ = par[g]
    tilted = 1 / jnp.where(cube | wrap, 1.0, lam)
    if isinstance(wrap, bool) and not wrap:  # a static size without a wrapped simplex
      factors.append(tilted)
    else:
      factors.append(jnp.where(wrap, wrap_a / (totals[g] + e_extra[:, 2 * g]), tilted))
  factors = [f if isinstance(f, float) else jnp.reshape(f, (-1, 1)) for f in factors]
  y = e * (factors[0] if groups == 1 else jnp.where(pos, *factors))
  x = jnp.where(per_coordinate(3), u, jnp.where(per_coordinate(4), y - jnp.floor(y), y))
  sums, bigs = group_reduce([x, x], pos, [jnp.add, jnp.maximum])
  oks, norms = [], []
  for g, size in enumerate(sizes):
    wrap_a, lam, _, _, wrap, shell, fold = par[g]
    s, big = sums[g], bigs[g]
    col = k - 1 - jnp.floor(s).astype(jnp.int32)  # the slab's column (wrapped)
    thr = flat_thr[offsets[g] + jnp.clip(col, 0, width - 1)]
    thr = jnp.where(col < width, thr, jnp.inf)
    if not isinstance(shell, bool) or shell:
      # the column of floor(k g(x)) = max(floor(sum(x)), floor(k max(x)))
      col_g = jnp.minimum(col, k - 1 - jnp.floor(k * big).astype(jnp.int32))
      least = flat_thr[offsets[g] + jnp.clip(col_g, 0, width - 1)]
      thr = thr - jnp.where(shell, least, 0)
    t = jnp.where(wrap, thr, lam * (k - s))
    if not isinstance(fold, bool) or fold:  # h / f = 1/2 when sum <= m - k < k g(x)
      t = jnp.where(fold & (s <= size - k) & (k * big > size - k), LOG_2, t)
    oks.append((big <= 1) & (s <= k) & (e_extra[:, 2 * g + 1] >= t))
    norms.append(jnp.maximum(big, s / k))
  return x, tuple(oks), tuple(norms)


def group_reduce(arrays, pos, ops):
  """Each ``ops[i]`` (``jnp.add`` or ``jnp.maximum``) over each row of
  ``arrays[i]`` (non-negative, ``(n, d)``), on the coordinates in ``pos`` and on the
  rest (or on all when ``pos`` is None), in one pass: per array, a tuple of ``(n,)``
  arrays, one per group."""
  if not arrays:
    return []
  zero = jnp.zeros((), arrays[0].dtype)
  per = 1 if pos is None else 2
  operands, flat_ops = [], []
  for x, op in zip(arrays, ops):
    operands += [x] if pos is None else [jnp.where(pos, x, zero), jnp.where(pos, zero, x)]
    flat_ops += [op] * per

  def combine(a, b):
    return tuple(op(u, v) for op, u, v in zip(flat_ops, a, b))

  out = jax.lax.reduce(tuple(operands), (zero,) * len(operands), combine, (1,))
  return [tuple(out[i * per : (i + 1) * per]) for i in range(len(arrays))]


def uniforms(key, shape, dtype):
  """Uniforms in [0, 1) of ``shape`` ``(n, w)``, as ``jax.random.uniform`` makes them
  from random 32-bit words; in float32 the words come two to a Threefry hash
  (:func:`~jaxdp.samplers.words.paired_words`: the high words fill the first half of
  the columns, the low words the rest), and each keeps 23 bits."""
  if dtype != jnp.float32:
    return jax.random.uniform(key, shape, dtype)
  n, w = shape
  hi, lo = paired_words(key, (n, -(-w // 2)))
  return jnp.concatenate([unit_floats(hi), unit_floats(lo)], axis=1)[:, :w]
