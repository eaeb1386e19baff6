"""The series-parallel kernel's first pass: |A| at the root and, top down, the A-count
of every node's smaller child (inverse CDF, one look-up row per node); a block draws
its subset of the given size and uniform linear extensions of both parts inside it."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.samplers.sp_plan import LevelPlan, child_rows, top_down
from jaxdp.samplers.sp_tables import SPTables
from jaxdp.samplers.subsets import linear_extensions
from jaxdp.samplers.words import static_index

__all__ = ["block_choice", "block_times", "sizes", "spare_uniforms", "split_count"]


def spare_uniforms(words, m: int):
  """``m`` float32 uniforms per sample on the grid of ``jax.random.uniform`` (23
  random bits, [0, 1)) from the bits :func:`jaxdp.samplers.words.uniform52` leaves
  unused: 12 of each 64-bit word (the low 5 of ``hi``, the low 7 of ``lo``), two
  words per uniform. ``words``: stored packed uint64 words (or ``(hi, lo)`` uint32)
  of shape (2, L, n) with m <= L; returns (m, n). The bits of
  a random word are independent, so these uniforms are independent of the variates
  the other 52 bits make."""
  if isinstance(words, tuple):  # 32-bit operations only
    hi, lo = (w[:, :m] for w in words)
    spare = ((hi & np.uint32(31)) << np.uint32(7)) | (lo & np.uint32(127))  # 12 bits
  else:
    with jax.enable_x64(True):
      w = words[:, :m]
      spare = (((w >> np.uint64(25)) & np.uint64(31 << 7)) | (w & np.uint64(127))).astype(
        jnp.uint32
      )
  bits23 = ((spare[0] << np.uint32(12)) | spare[1]) >> np.uint32(1)
  return bits23.astype(jnp.float32) * np.float32(2.0**-23)


def sizes(u_root, u, tables: SPTables, plan: LevelPlan, d: int, n: int):
  """A-count of every node, top down: (rows, n) int32 blocks in node order, one per
  unrolled depth and one per scanned run. ``u_root`` (n,) and ``u``
  (internal nodes, n): stored uniforms (each is read by a row of CDF entries)."""
  root = jnp.minimum(
    jnp.sum(tables.root_cdf[None, :] <= u_root[:, None], axis=1), d
  ).astype(jnp.int32)
  out = [root[None, :]] + [None] * (plan.num_levels - 1)
  if not plan.num_internal:
    return out

  def step(a, x, widmax):  # a scanned depth
    a_left = split_count(
      tables, a, x["off"], x["wid"], x["small_left"], u[x["slot"]], widmax
    )
    kid = jnp.where(x["is_left"][:, None], a_left[x["parent"]], (a - a_left)[x["parent"]])
    return kid, kid

  def level(lv):  # an unrolled depth
    info = plan.levels[lv]
    a = out[lv][info["inner_loc"]]  # (I, n)
    a_left = split_count(
      tables,
      a,
      info["off"],
      info["wid"],
      info["small_left"],
      u[info["slot"]],
      int(info["wid"].max()),
    )
    return child_rows(info, a_left, a - a_left)

  return top_down(plan, out, level, lambda band: lambda a, x: step(a, x, band.widmax))


def split_count(tables: SPTables, a, off, wid, small_left, u, widmax: int):
  """The left child's A-count for nodes with A-counts ``a`` (rows, n): the smaller
  child's count by inverse CDF from its table row, uniforms ``u`` (rows, n)."""
  wid = jnp.asarray(wid, jnp.int32)[:, None]
  start = jnp.asarray(off, jnp.int32)[:, None] + a * wid  # (I, n)
  # Each row as one window of ``widmax`` entries (one index per row, not per entry;
  # the table's padding keeps the last row's window in bounds), masked to its width.
  row = jax.lax.gather(
    tables.split_cdf,
    start.astype(jnp.uint32)[..., None],
    jax.lax.GatherDimensionNumbers(
      offset_dims=(2,), collapsed_slice_dims=(), start_index_map=(0,)
    ),
    slice_sizes=(widmax,),
    mode=jax.lax.GatherScatterMode.CLIP,
  )  # (I, n, W)
  valid = np.arange(widmax)[None, None, :] < wid[:, :, None]
  row = jnp.where(valid, row, 2.0)
  a_s = jnp.sum(row <= u[:, :, None], axis=2).astype(jnp.int32)
  return jnp.where(small_left[:, None], a_s, a - a_s)


def block_choice(k_sub, k_ext, bt, a, size: int, n: int):
  """A block's subset (bitmask, (n,) uint32) of size ``a`` with probability
  e(A) e(B) / T[a], and uniform extensions of both parts (local (n, L) sequence)."""
  u = jax.random.uniform(k_sub, (n,))
  lo, hi = bt.start[a], bt.start[a + 1] - 1  # first index with cdf > u
  for _ in range(math.comb(size, size // 2).bit_length()):
    mid = (lo + hi) // 2
    left = bt.cdf[mid] > u
    hi = jnp.where(left, mid, hi)
    lo = jnp.where(left, lo, mid + 1)
  mask = bt.masks[lo].astype(jnp.uint32)
  v = jax.random.uniform(k_ext, (n, size))
  return mask, linear_extensions(bt.ext, bt.strict_up, mask, a, v, size)


def block_times(time, elems, seq_loc, a, n):
  """Times of a block's elements, (L, n) (partial sums of their spacings along each
  part's extension), and the last time of each part."""
  s_loc = time[static_index(elems)].T  # (n, L)
  cs = jnp.cumsum(jnp.take_along_axis(s_loc, seq_loc, axis=1), axis=1)
  last_a = jnp.where(
    a > 0, jnp.take_along_axis(cs, jnp.maximum(a - 1, 0)[:, None], axis=1)[:, 0], 0.0
  )
  pos = jnp.arange(len(elems))[None, :]
  in_order = jnp.where(pos < a[:, None], cs, cs - last_a[:, None])
  rows = jnp.arange(n)[:, None]
  local = jnp.zeros_like(in_order).at[rows, seq_loc].set(in_order)
  return local.T, last_a, cs[:, -1] - last_a
