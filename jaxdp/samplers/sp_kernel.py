"""Exact uniform sampling of the poset ball for series-parallel posets: the kernel.

Tables and the size recursion are in :mod:`jaxdp.samplers.sp_tables`. Per sample:

1. *Sizes.* |A| from the root's table, then top down the A-count of the smaller child
   of every binary node (inverse CDF, one look-up row per node); a block draws its
   subset A of the given size (binary search within the size group) and uniform
   linear extensions of A and B inside it by the subset recursion.
2. *Uniform linear extensions of A and of B without a sort per node.* Every node
   carries, for each part with m > 0 elements in it, times t_1 < ... < t_m (one per
   element of the part, in the order of a uniform extension of the node's part) and
   an end E > t_m such that (t_1, ..., t_m, E) are partial sums of m + 1 iid Exp(1)
   spacings, independent of that order (an empty part carries t = E = 0, so E > 0
   says the part is not empty). A leaf's time is one Exp(1) and its end one more. A
   series node concatenates: its lower child's times and end are shifted by the
   upper child's last time (top down, the upper child comes first); the upper child's
   last spacing E_u - t_u is dropped (if the lower child is empty in the part, the
   node's end is the upper child's). A parallel node must interleave uniformly:
   dividing each child's times by its end E_i gives the order statistics of m_i iid
   uniforms, independent of E_i (Renyi's representation), so the merged values are
   m iid uniforms whose labels form a uniformly random interleaving independent of
   the values; multiplying by an independent Gamma(m + 1) = (E_1 + E_2) * V^(1/(m+1))
   (V uniform; a Gamma(m + 2) times an independent Beta(m + 1, 1)) restores the
   spacing representation for the parent, whose end is that Gamma(m + 1) (if one
   child is empty in the part, the other passes through). A block's times are
   partial sums of spacings along its extension, its end one more Exp(1). The maps
   are affine and increasing; composed top down they give every element its time
   at the root. The order of the root times is the object (``sp_objects`` sorts
   them; ties are broken by a fixed linear extension of P, so comparable elements
   are always in order).
3. *Noise without the order.* At the root the k + 1 spacings of A's times and end
   (``end_A - t_k`` last; a fresh Exp(1) for ``end_A`` when A is empty) are iid
   Exp(1) and independent of the object, so they can serve as the Dirichlet weights
   of A's chain of vertices (the triangulation of :mod:`jaxdp.samplers`), and likewise for B. Then
   coordinate j is (end_A - min of the A-times in j's down-set) - (the same for B),
   the root coordinate end_A - end_B, and the point is that vector over
   end_A + end_B: no sort and no O(d^2) masked minimum. The down-set minimum runs
   over the tree: j itself, the lower children of the series nodes above j whose
   upper child holds j, and the block's own down-set inside a block.

Random numbers per sample: 2 Exp(1) per element, one uniform V per parallel node and
part, 2 Exp(1) per block (and 2 at the root, used only for an empty part), each from
52 random bits: one Threefry hash per variate (:func:`jaxdp.prng.threefry.words64`), its
words stored once (:func:`jaxdp.samplers.words.word_pairs`). The size choices'
float32 uniforms (23 bits; one at the root and one per internal node, at most d) are
made from the other 12 bits of the elements' spacing words, two words each
(:func:`jaxdp.samplers.sp_sizes.spare_uniforms`): distinct bits of random words, so
independent of the spacings and of each other, and no hash of their own.

Memory traffic, not arithmetic, bounds the kernel on a CPU, so the passes store only
each node's row (bottom up) and each node's map (top down): a child's map is formed
top down from its parent's map and the stored rows (a parallel node's end is the g
that rescales its children), and an element's root time from its depth's maps, with
no whole-tree copy.

The times are computed in float64 (``jax.enable_x64`` inside the kernel; outputs
keep the caller's dtype) from uniforms on the midpoints of 2^52 cells (exact, never
0 or 1) with fdlibm's logarithm (error below 1 ulp), so an order decided at a
parallel node departs from exact only if two times agree to float64 rounding: below
d^2 2^-44 per sample. Size choices compare float32 uniforms with float32 CDFs of
float64 weights, as the other samplers do (each option's probability off by less
than 2^-22 in absolute terms).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.prng.threefry import words64
from jaxdp.samplers.sp_plan import (
  LevelPlan,
  assemble,
  bottom_up,
  child_rows,
  parallel_row,
  series_row,
  top_down,
)
from jaxdp.samplers.sp_sizes import block_choice, block_times, sizes, spare_uniforms
from jaxdp.samplers.sp_tables import LEAF, PARALLEL, SERIES, SPLayout, SPTables
from jaxdp.samplers.words import (
  exp_nonpositive,
  exponential,
  log_normal,
  static_index,
  stored_call,
  uniform52,
  word_pairs,
)
from jaxdp.typing import DTypeLike, KeyArray

__all__ = ["chunk_size", "sp_objects", "sp_points"]


def sp_objects(
  key: KeyArray, tables: SPTables, layout: SPLayout, n: int
) -> tuple[jax.Array, jax.Array]:
  """``(seq, k)`` as the other samplers: elements in order of addition (A top down,
  then B top down), and |A|."""
  d = layout.d
  draws = _draws(key, tables, layout, n)
  in_a = draws["in_a"]
  with jax.enable_x64(True):
    value, root = _times(draws, layout, n)
    # B after A: B's times are offset past A's largest.
    sort_key = jnp.where(in_a, value, value + (2.0 * root[0, 0] + 1.0)[None, :])
    order = np.asarray(layout.top_down)
    ids = jnp.broadcast_to(jnp.asarray(order, jnp.int32), (n, d))
    _, seq = jax.lax.sort(
      (sort_key[static_index(order)].T, ids), dimension=1, num_keys=1, is_stable=True
    )
  return seq, draws["cnt"][0]


def sp_points(
  key_obj: KeyArray,
  key_exp: KeyArray,
  tables: SPTables,
  layout: SPLayout,
  n: int,
  dtype: DTypeLike,
) -> jax.Array:
  """Exactly uniform points of the poset ball, (n, d+1), root first."""
  draws = _draws(key_obj, tables, layout, n)
  bits_end = words64(key_exp, (2, n))
  with jax.enable_x64(True):
    value, root = _times(draws, layout, n)
    # a part's end: its root end, or one Exp(1) where the part is empty
    end = stored_call(
      lambda r, b: jnp.where(r > 0, r, exponential(b)),
      (root[1], bits_end),
      bits_end[0][0, 0],
    )  # (2, n)
    # The down-set minima only pick which time to subtract, so for float32 output
    # they run in float32 (half the memory traffic): a tie can only swap two times
    # equal to float32 rounding, which moves the output by less than its ulp.
    work = jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32
    value_w, end_w = value.astype(work), end.astype(work)
  low = jnp.minimum(
    _down_set_min(value_w, draws, tables, layout, n), end_w[None]
  )  # (d, 2, n)

  def finish(low, end):
    low = low.astype(jnp.float64)
    coord = (end[0] - low[:, 0]) - (end[1] - low[:, 1])  # (d, n)
    z = jnp.concatenate([(end[0] - end[1])[None], coord], axis=0) / (end[0] + end[1])
    return z.astype(dtype)

  with jax.enable_x64(True):
    # stored sample-last, then transposed by a plain copy (not strided arithmetic)
    return stored_call(finish, (low, end), bits_end[0][0, 0]).T


def chunk_size(layout: SPLayout, chunk: int) -> int:
  """Samples per chunk: about 2^18 node rows, so a depth's working set stays in
  cache (``benchmarks/sp_costs.py`` compares 2^16, 2^18 and 2^20)."""
  return int(max(256, min(chunk, (1 << 18) // len(layout.kind))))


def _draws(key, tables: SPTables, layout: SPLayout, n: int):
  """The discrete choices (sizes, block subsets and extensions) and the random bits
  of the times; outside the x64 scope."""
  d = layout.d
  plan = LevelPlan(layout)
  k_block, k_space, k_par = jax.random.split(key, 3)
  # Each element's 2 spacings take 52 bits of one (stored) hash each; the size
  # choices' uniforms (root and internal nodes, at most d) the other 12 bits of two.
  bits_space = word_pairs(k_space, (2, d, n))
  u = stored_call(
    lambda b: spare_uniforms(b, plan.num_internal + 1),
    (bits_space,),
    bits_space[1][0, 0, 0],
  )
  cnt = jnp.concatenate(sizes(u[0], u[1:], tables, plan, d, n), axis=0)  # (M, n)
  # in_a gathered from the leaves' and blocks' rows (XLA:CPU scatters serially)
  parts, src = [], []
  if len(plan.leaf_elems):
    parts.append(cnt[static_index(plan.node_of[plan.leaf_elems])] == 1)
    src.append(plan.leaf_elems)
  block_seq = []
  kb = jax.random.split(k_block, 2 * max(1, len(layout.blocks)))
  for b, ((nid, elems), bt) in enumerate(zip(layout.blocks, tables.blocks)):
    mask, seq_loc = block_choice(kb[2 * b], kb[2 * b + 1], bt, cnt[nid], len(elems), n)
    parts.append(
      ((mask[None, :] >> jnp.arange(len(elems), dtype=jnp.uint32)[:, None]) & 1) == 1
    )
    src.append(np.asarray(elems))
    block_seq.append(seq_loc)
  in_a = jnp.concatenate(parts, axis=0)[static_index(np.argsort(np.concatenate(src)))]
  # 64 random bits per float64 variate, as two 32-bit words drawn outside the x64
  # scope (JAX's generators are traced in the caller's mode); one Threefry hash
  # gives both (jaxdp.threefry.words64).
  k_end, k_v = jax.random.split(k_par)
  par_counts = jnp.zeros((1, 2, n), jnp.int32)  # each parallel node's count in A, B
  if plan.num_parallel:
    a_par = cnt[static_index(plan.parallel)]
    size = jnp.asarray(plan.size[plan.parallel], jnp.int32)[:, None]
    par_counts = jnp.stack([a_par, size - a_par], axis=1)  # (P, 2, n)
  return dict(
    plan=plan,
    cnt=cnt,
    in_a=in_a,
    block_seq=block_seq,
    par_counts=par_counts,
    bits_space=bits_space,
    bits_v=word_pairs(k_v, (max(1, plan.num_parallel), 2, n)),
    bits_block_end=word_pairs(k_end, (max(1, len(layout.blocks)), 2, n)),
  )


def _times(draws, layout: SPLayout, n: int):
  """Inside the x64 scope: every element's time at the root (its own part's), (d, n)
  float64, and the root's row: each part's last time and end, (2, 2, n) (an empty
  part's are 0)."""
  plan, cnt, in_a = draws["plan"], draws["cnt"], draws["in_a"]
  f64 = jnp.float64
  # The words (``word_pairs``) and the variates (``stored_call``) are stored once.
  word = draws["bits_space"][1][0, 0, 0]

  def variates(bits_space, bits_v, bits_block_end, m):
    # V^(1/(m+1)) per parallel node and part (m: the node's count in the part),
    # formed once here, so that a scanned depth computes no transcendental in
    # padded rows.
    w = exp_nonpositive(log_normal(uniform52(bits_v)) / (m.astype(f64) + 1.0))  # (P, 2, n)
    # one logarithm per spacing array (one of both, read by two slices, ran as 3 fusions)
    time, extra = (-log_normal(uniform52(tuple(b[i] for b in bits_space))) for i in (0, 1))
    return time, extra, w, -log_normal(uniform52(bits_block_end))

  args = tuple(draws[k] for k in ("bits_space", "bits_v", "bits_block_end", "par_counts"))
  time, extra, w, block_end = stored_call(variates, args, word)
  # A node's row, (2, 2, n): [last time, end] x part; an empty part's are 0.
  block_row = []
  for b, ((nid, elems), seq_loc) in enumerate(zip(layout.blocks, draws["block_seq"])):
    local, last_a, last_b = block_times(time, elems, seq_loc, cnt[nid], n)
    time = time.at[static_index(elems)].set(local)
    last = jnp.stack([last_a, last_b])
    filled = jnp.stack([cnt[nid] > 0, cnt[nid] < len(elems)])
    block_row.append(jnp.stack([last, jnp.where(filled, last + block_end[b], 0.0)]))
  # a leaf's row: in its own part, last time = its time, end = one more Exp(1) on
  mine = jnp.stack([in_a, ~in_a], axis=1)  # (d, 2, n)
  leaf_row = jnp.where(
    mine[:, None], jnp.stack([time, time + extra], axis=1)[:, :, None], 0.0
  )  # (d, 2, 2, n)

  # bottom up: each node's row, and the child -> parent maps
  def up(kids, x):  # a scanned depth
    cl, cr = kids[x["left"]], kids[x["right"]]
    kind = x["kind"][:, None, None]
    series = kind == SERIES
    pv, s1, s2 = parallel_row(cl, cr, w[x["par"]])
    here = jnp.where(
      series[:, None],
      series_row(cl, cr),
      jnp.where(
        (kind == PARALLEL)[:, None],
        pv,
        jnp.where((kind == LEAF)[:, None], leaf_row[x["elem"]], 0.0),
      ),
    )
    one = jnp.ones_like(s1)
    l_scale, r_scale = jnp.where(series, one, s1), jnp.where(series, one, s2)
    l_shift = jnp.where(series, cr[:, 0], 0.0)
    p, is_left = x["parent"], x["is_left"][:, None, None]
    return here, (
      jnp.where(is_left, l_scale[p], r_scale[p]),
      jnp.where(is_left, l_shift[p], 0.0),
    )

  def level_up(lv):  # an unrolled depth
    info = plan.levels[lv]
    le = info["leaf_elems"]
    leaf = leaf_row[static_index(le)] if len(le) else None
    blk = jnp.stack([block_row[b] for b in info["blocks"]]) if info["blocks"] else None
    inner = None
    if len(info["inner"]):
      kids = top[lv + 1]
      cl, cr = kids[static_index(info["left_loc"])], kids[static_index(info["right_loc"])]
      k = info["n_ser"]  # rows [:k] series, [k:] parallel
      parts = [series_row(cl[:k], cr[:k])]
      if k < len(info["inner"]):
        parts.append(parallel_row(cl[k:], cr[k:], w[static_index(info["par_row"])])[0])
      inner = jnp.concatenate(parts)
    return assemble(info, inner, leaf, blk)

  top = [None] * plan.num_levels
  band_maps = bottom_up(plan, top, level_up, lambda band: up)

  # top down: root time = c_scale * local time + c_shift
  def down(carry, x):  # a scanned depth
    scale, shift = carry
    ps, ph = scale[x["parent"]], shift[x["parent"]]
    new = (ps * x["scale"], ps * x["shift"] + ph)
    return new, new

  def level_down(lv):  # an unrolled depth
    # The children's maps from the stored rows (not stored themselves): series, the
    # lower (left) child follows the upper one, shifted by its last time; parallel,
    # both children rescaled to the parent's spacing scale (``parallel_row``'s scales,
    # the parent's end being g where both children are filled).
    info = plan.levels[lv]
    inner = info["inner_loc"]
    scale, shift = cs[lv]
    ps, ph = scale[static_index(inner)], shift[static_index(inner)]
    kids = top[lv + 1]
    k = info["n_ser"]  # rows [:k] series, [k:] parallel
    cr_last = kids[static_index(info["right_loc"][:k]), 0]
    l_scale, r_scale = [ps[:k]], [ps[:k]]
    l_shift = [ps[:k] * cr_last + ph[:k]]
    if k < len(inner):
      e1 = kids[static_index(info["left_loc"][k:]), 1]
      e2 = kids[static_index(info["right_loc"][k:]), 1]
      g = top[lv][static_index(inner[k:]), 1]
      both = (e1 > 0) & (e2 > 0)
      l_scale.append(ps[k:] * jnp.where(both, g / e1, 1.0))
      r_scale.append(ps[k:] * jnp.where(both, g / e2, 1.0))
      l_shift.append(ph[k:])
    return (
      child_rows(info, jnp.concatenate(l_scale), jnp.concatenate(r_scale)),
      child_rows(info, jnp.concatenate(l_shift), ph),
    )

  cs = [(jnp.ones((1, 2, n), f64), jnp.zeros((1, 2, n), f64))] + [None] * (
    plan.num_levels - 1
  )
  cs = top_down(
    plan,
    cs,
    level_down,
    lambda band: down,
    lambda band: dict(
      parent=band.arrays()["parent"], scale=band_maps[band.a][0], shift=band_maps[band.a][1]
    ),
  )
  # each element's root time, from its node's block of rows (no whole-tree copy of
  # the maps), in element order
  node_of = np.asarray(plan.node_of)
  parts, order, start = [], [], 0
  for scale, shift in cs:
    stop = start + scale.shape[0]
    elems = np.nonzero((node_of >= start) & (node_of < stop))[0]
    if len(elems):
      e, r = static_index(elems), static_index(node_of[elems] - start)
      t = time[e]
      parts.append(
        jnp.where(in_a[e], scale[r, 0] * t + shift[r, 0], scale[r, 1] * t + shift[r, 1])
      )
      order.append(elems)
    start = stop
  value = jnp.concatenate(parts)[static_index(np.argsort(np.concatenate(order)))]
  return value, top[0][0]


def _down_set_min(value, draws, tables: SPTables, layout: SPLayout, n: int):
  """For element j and part p, the smallest root time (``value``, (d, n)) of an
  element of part p below or equal to j (+inf if none), (d, 2, n)."""
  plan, in_a = draws["plan"], draws["in_a"]
  inf = jnp.inf
  own = jnp.stack([jnp.where(in_a, value, inf), jnp.where(in_a, inf, value)], axis=1)
  block_low = [jnp.min(own[static_index(elems)], axis=0) for _, elems in layout.blocks]

  def up(kids, x):  # a scanned depth
    kind = x["kind"][:, None, None]
    inner = jnp.minimum(kids[x["left"]], kids[x["right"]])
    here = jnp.where(
      (kind == SERIES) | (kind == PARALLEL),
      inner,
      jnp.where(kind == LEAF, own[x["elem"]], inf),
    )
    return here, kids

  def level_up(lv):  # an unrolled depth
    info = plan.levels[lv]
    le = info["leaf_elems"]
    leaf = own[static_index(le)] if len(le) else None
    blk = jnp.stack([block_low[b] for b in info["blocks"]]) if info["blocks"] else None
    inner = None
    if len(info["inner"]):
      kids = low[lv + 1]
      inner = jnp.minimum(
        kids[static_index(info["left_loc"])], kids[static_index(info["right_loc"])]
      )
    return assemble(info, inner, leaf, blk)

  low = [None] * plan.num_levels  # min over the node
  band_low = bottom_up(plan, low, level_up, lambda band: up)

  # min over the rest of the down-set, from above
  def down(b, x):  # a scanned depth
    lower = x["low"][x["left"]]
    upper = jnp.where((x["kind"] == SERIES)[:, None, None], jnp.minimum(b, lower), b)
    kid = jnp.where(x["is_left"][:, None, None], b[x["parent"]], upper[x["parent"]])
    return kid, kid

  def level_down(lv):  # an unrolled depth
    info = plan.levels[lv]
    b = below[lv][static_index(info["inner_loc"])]
    lower = low[lv + 1][static_index(info["left_loc"])]
    k = info["n_ser"]
    upper = jnp.concatenate([jnp.minimum(b[:k], lower[:k]), b[k:]])
    return child_rows(info, b, upper)

  below = [jnp.full((1, 2, n), inf)] + [None] * (plan.num_levels - 1)
  below = top_down(
    plan,
    below,
    level_down,
    lambda band: down,
    lambda band: dict(band.arrays(), low=band_low[band.a]),
  )
  first = jnp.minimum(jnp.concatenate(below, axis=0)[static_index(plan.node_of)], own)
  for (_, elems), bt in zip(layout.blocks, tables.blocks):
    mine = own[static_index(elems)]  # (L, 2, n)
    le = jnp.asarray(bt.up)  # y <= x
    inner = jnp.min(jnp.where(le[:, :, None, None], mine[:, None], inf), axis=0)
    first = first.at[static_index(elems)].set(
      jnp.minimum(first[static_index(elems)], inner)
    )
  return first
