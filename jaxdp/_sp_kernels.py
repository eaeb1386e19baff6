"""Exact uniform sampling of the poset ball for series-parallel posets: the kernel.

Tables and the size recursion are in :mod:`jaxdp._sp_tables`. Per sample:

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
   of A's chain of vertices (design note, section 5), and likewise for B. Then
   coordinate j is (end_A - min of the A-times in j's down-set) - (the same for B),
   the root coordinate end_A - end_B, and the point is that vector over
   end_A + end_B: no sort and no O(d^2) masked minimum. The down-set minimum runs
   over the tree: j itself, the lower children of the series nodes above j whose
   upper child holds j, and the block's own down-set inside a block.

Random numbers per sample: 2 Exp(1) per element, one uniform V per parallel node and
part, 2 Exp(1) per block (and 2 at the root, used only for an empty part), each from
52 random bits: one Threefry hash per variate (:func:`jaxdp.threefry.words64`).

The times are computed in float64 (``jax.enable_x64`` inside the kernel; outputs
keep the caller's dtype) from uniforms on the midpoints of 2^52 cells (exact, never
0 or 1) with fdlibm's logarithm (error below 1 ulp), so an order decided at a
parallel node departs from exact only if two times agree to float64 rounding: below
d^2 2^-44 per sample. Size choices compare float32 uniforms with float32 CDFs of
float64 weights, as the other samplers do (relative error below 1e-6 per choice).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._sp_tables import BLOCK, LEAF, PARALLEL, SERIES, SPLayout, SPTables
from jaxdp.threefry import words64


def sp_objects(key, t: SPTables, lay: SPLayout, n: int):
  """``(seq, k)`` as the other samplers: elements in order of addition (A top down,
  then B top down), and |A|."""
  d = lay.d
  draws = _draws(key, t, lay, n)
  in_a = draws["in_a"]
  with jax.enable_x64(True):
    value, root = _times(draws, lay, n)
    # B after A: B's times are offset past A's largest.
    key_ = jnp.where(in_a, value, value + (2.0 * root[0, 0] + 1.0)[None, :])
    order = np.asarray(lay.top_down)
    ids = jnp.broadcast_to(jnp.asarray(order, jnp.int32), (n, d))
    _, seq = jax.lax.sort((key_[ix(order)].T, ids), dimension=1, num_keys=1,
                          is_stable=True)
  return seq, draws["cnt"][0]


def sp_points(key_obj, key_exp, t: SPTables, lay: SPLayout, n: int, dtype):
  """Exactly uniform points of the poset ball, (n, d+1), root first."""
  draws = _draws(key_obj, t, lay, n)
  bits_end = words64(key_exp, (2, n))
  with jax.enable_x64(True):
    value, root = _times(draws, lay, n)
    # a part's end: its root end, or one Exp(1) where the part is empty
    end = _stored(jnp.where(root[1] > 0, root[1], _exponential(bits_end)),
                  bits_end[0][0, 0])                                  # (2, n)
    # The down-set minima only pick which time to subtract, so for float32 output
    # they run in float32 (half the memory traffic): a tie can only swap two times
    # equal to float32 rounding, which moves the output by less than its ulp.
    work = jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32
    value_w, end_w = value.astype(work), end.astype(work)
  low = jnp.minimum(_down_set_min(value_w, draws, t, lay, n), end_w[None])  # (d, 2, n)
  with jax.enable_x64(True):
    low = low.astype(jnp.float64)
    coord = (end[0] - low[:, 0]) - (end[1] - low[:, 1])            # (d, n)
    z = jnp.concatenate([(end[0] - end[1])[None], coord], axis=0) / (end[0] + end[1])
    return z.T.astype(dtype)


def chunk_size(lay: SPLayout, chunk: int) -> int:
  """Samples per chunk: about 2^18 node rows, so a depth's working set stays in
  cache (``benchmarks/sp_costs.py`` compares 2^16, 2^18 and 2^20)."""
  return int(max(256, min(chunk, (1 << 18) // len(lay.kind))))


# ------------------------------------------------------------------ sizes and order
# Nodes are numbered breadth first, so the nodes at one depth are a contiguous range
# and all children of depth l are the nodes at depth l + 1. Every pass works on one
# (nodes at depth l, ..., n) block per depth (a few operations per depth: compile
# time does not grow with the number of nodes, and no pass copies a whole-tree array).
class _Plan:
  """Static index arrays of a layout, per depth."""

  def __init__(self, lay: SPLayout):
    kind = np.asarray(lay.kind)
    left, right = np.asarray(lay.left), np.asarray(lay.right)
    num = len(kind)
    depth = np.zeros(num, np.int64)
    for v in range(num):                       # breadth-first: parents first
      for c in (left[v], right[v]):
        if c >= 0:
          depth[c] = depth[v] + 1
    self.num_levels = int(depth.max()) + 1
    self.start = [int(np.nonzero(depth == lv)[0].min()) for lv in range(self.num_levels)]
    self.stop = [int(np.nonzero(depth == lv)[0].max()) + 1 for lv in range(self.num_levels)]
    assert all((depth[a:b] == lv).all()
               for lv, (a, b) in enumerate(zip(self.start, self.stop)))
    internal = np.nonzero((kind == SERIES) | (kind == PARALLEL))[0]
    self.num_internal = len(internal)
    slot = {int(v): i for i, v in enumerate(internal)}
    parallel = np.nonzero(kind == PARALLEL)[0]
    self.num_parallel = len(parallel)
    self.parallel = parallel                     # node ids; row i is par_row i
    par_row = {int(v): i for i, v in enumerate(parallel)}
    block_of = {nid: b for b, (nid, _) in enumerate(lay.blocks)}
    elem_of_leaf = {lay.node_of[x]: x for x in range(lay.d) if kind[lay.node_of[x]] == LEAF}
    self.levels = []
    for lv in range(self.num_levels):
      a, b = self.start[lv], self.stop[lv]
      ids = np.arange(a, b)
      # internal nodes: the series ones first, then the parallel ones
      inner = np.concatenate([ids[kind[ids] == SERIES], ids[kind[ids] == PARALLEL]])
      leaves = ids[kind[ids] == LEAF]
      blocks = ids[kind[ids] == BLOCK]
      # a level's block of rows = concat(internal, leaves, blocks)[assemble]
      src = np.concatenate([inner, leaves, blocks])
      assemble = np.argsort(src - a)
      info = dict(inner=inner, inner_loc=inner - a, assemble=assemble,
                  leaf_elems=np.asarray([elem_of_leaf[v] for v in leaves], np.int64),
                  blocks=[block_of[int(v)] for v in blocks])
      if len(inner):
        a2 = self.stop[lv]
        small = np.asarray([lay.small[v] for v in inner])
        # children block (depth lv + 1) = concat(left results, right results)[kid_src]
        kid_src = np.empty(self.stop[lv + 1] - a2, np.int64)
        kid_src[left[inner] - a2] = np.arange(len(inner))
        kid_src[right[inner] - a2] = len(inner) + np.arange(len(inner))
        info.update(
            left_loc=left[inner] - a2, right_loc=right[inner] - a2, kid_src=kid_src,
            kid_parent=np.concatenate([np.arange(len(inner))] * 2)[kid_src],
            small_left=(small == left[inner]),
            n_ser=int((kind[inner] == SERIES).sum()),
            off=np.asarray([lay.offset[v] for v in inner]),
            wid=np.asarray([lay.width[v] for v in inner]),
            slot=np.asarray([slot[int(v)] for v in inner]),
            par_row=np.asarray([par_row[int(v)] for v in inner if kind[v] == PARALLEL],
                               np.int64))
      self.levels.append(info)
    self.inner_levels = [lv for lv in range(self.num_levels) if len(self.levels[lv]["inner"])]
    self.bands = _find_bands(self, lay, kind, left, right, slot, par_row)
    self.band_from = {band.a: band for band in self.bands}     # top-down entry
    self.band_to = {band.b - 1: band for band in self.bands}   # bottom-up entry
    self.size = np.asarray(lay.size)
    self.node_of = np.asarray(lay.node_of)
    self.leaf_elems = np.concatenate([info["leaf_elems"] for info in self.levels])


# Deep trees (long alternations of series and parallel nodes, as in a chain of gate
# questions each with its follow-ups) would unroll into one block of operations per
# depth, and compile time grows with the depth. A run of at least BAND_MIN_STEPS
# consecutive narrow depths (at most BAND_MAX_ROWS nodes each, no blocks) is instead
# one ``lax.scan`` per pass, its depths padded to the run's widest: the same
# arithmetic per node (the draws equal the unrolled kernel's bit for bit), compiled
# once. A padded row computes every node kind's arithmetic (a select keeps one), so
# what only parallel nodes need is formed before the passes (``w``). The trade
# (benchmarks/sp_costs.py, 200-element caterpillar, 2-core CPU): first call 5-9 s
# instead of 39-100 s, 0.68-0.90x the unrolled samples/s across runs, so the scans pay
# off below a few million draws per compilation. Runs shorter than 32 depths (at most ~7 s of
# compilation) stay unrolled.
BAND_MIN_STEPS = 32
BAND_MAX_ROWS = 8


class _Band:
  """Steps ``a .. b-1`` (each from depth lv to lv + 1) as padded per-step arrays."""

  def __init__(self, plan, lay, kind, left, right, slot, par_row, a, b):
    self.a, self.b = a, b
    rows = [plan.stop[lv] - plan.start[lv] for lv in range(a, b + 1)]
    self.rows = rows
    w = self.w = max(rows)
    steps = b - a
    z = lambda dt=np.int64: np.zeros((steps, w), dt)
    x = dict(kind=np.full((steps, w), -1, np.int64), left=z(), right=z(), elem=z(),
             par=z(), slot=z(), small_left=z(bool), off=z(),
             wid=np.ones((steps, w), np.int64), parent=z(), is_left=z(bool))
    elem_of = {lay.node_of[e]: e for e in range(lay.d)}
    for i, lv in enumerate(range(a, b)):
      s0, s1 = plan.start[lv], plan.start[lv + 1]
      for r in range(rows[i]):
        v = s0 + r
        x["kind"][i, r] = kind[v]
        if kind[v] == LEAF:
          x["elem"][i, r] = elem_of[v]
        else:                                   # SERIES or PARALLEL (no blocks)
          lc, rc = left[v], right[v]
          x["left"][i, r], x["right"][i, r] = lc - s1, rc - s1
          x["slot"][i, r] = slot[v]
          x["par"][i, r] = par_row.get(v, 0)
          x["small_left"][i, r] = lay.small[v] == lc
          x["off"][i, r], x["wid"][i, r] = lay.offset[v], lay.width[v]
          x["parent"][i, lc - s1], x["parent"][i, rc - s1] = r, r
          x["is_left"][i, lc - s1] = True
    self.widmax = int(x["wid"].max())
    self.xs = x
    # rows of depths a+1 .. b-1 in the stacked (steps * w) output of a top-down pass
    self.unpad = np.concatenate([i * w + np.arange(rows[i + 1]) for i in range(steps - 1)]
                                + [np.zeros(0, np.int64)])

  def arrays(self):
    """The per-step arrays as device arrays (uint32 indices, bool masks)."""
    out = {}
    for k, v in self.xs.items():
      if v.dtype == bool:
        out[k] = jnp.asarray(v)
      elif k in ("kind", "off", "wid"):
        out[k] = jnp.asarray(v, jnp.int32)
      else:
        out[k] = jnp.asarray(v.astype(np.uint32))
    return out

  def pad(self, x):
    """A depth's rows padded to ``w`` (rows first)."""
    extra = self.w - x.shape[0]
    if not extra:
      return x
    return jnp.concatenate([x, jnp.zeros((extra,) + x.shape[1:], x.dtype)], axis=0)

  def middle(self, ys):
    """Depths a+1 .. b-1 from a top-down pass's stacked outputs (steps, w, ...)."""
    flat = ys.reshape((-1,) + ys.shape[2:])
    return flat[ix(self.unpad)]


def _find_bands(plan, lay, kind, left, right, slot, par_row):
  """Maximal runs of at least BAND_MIN_STEPS steps whose depths (both ends) are narrow,
  have no blocks, and have internal nodes (so a next depth)."""
  def narrow(lv):
    rows = plan.stop[lv] - plan.start[lv]
    return rows <= BAND_MAX_ROWS and not plan.levels[lv]["blocks"]

  ok = [lv + 1 < plan.num_levels and len(plan.levels[lv]["inner"]) > 0 and narrow(lv)
        and narrow(lv + 1) for lv in range(plan.num_levels)]
  bands, lv = [], 0
  while lv < plan.num_levels:
    if not ok[lv]:
      lv += 1
      continue
    end = lv
    while end < plan.num_levels and ok[end]:
      end += 1
    if end - lv >= BAND_MIN_STEPS:
      bands.append(_Band(plan, lay, kind, left, right, slot, par_row, lv, end))
    lv = end
  return bands


def _assemble(info, inner, leaf, blocks):
  """One depth's rows from its internal nodes', leaves' and blocks' rows."""
  parts = [p for p in (inner, leaf, blocks) if p is not None and p.shape[0]]
  rows = jnp.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
  return rows[ix(info["assemble"])]


def _kids(info, left, right):
  """The children depth's rows from per-internal-node left and right rows."""
  return jnp.concatenate([left, right], axis=0)[ix(info["kid_src"])]


def _bottom_up(plan: _Plan, vals: list, level, band_body, band_xs=None):
  """Fills ``vals[lv]`` (a depth's rows) from ``vals[lv + 1]``, deepest depth first:
  ``level(lv)`` at unrolled depths, one reversed ``lax.scan`` of
  ``band_body(band)(child_rows, step_arrays) -> (rows, y)`` over each scanned run
  (padded rows; ``band_xs(band)`` gives its step arrays, default ``band.arrays()``).
  Returns each run's stacked ``y`` by its first depth."""
  ys_of = {}
  lv = plan.num_levels - 1
  while lv >= 0:
    band = plan.band_to.get(lv)
    if band is None:
      vals[lv] = level(lv)
      lv -= 1
      continue
    xs = band.arrays() if band_xs is None else band_xs(band)
    first, ys_of[band.a] = jax.lax.scan(band_body(band), band.pad(vals[band.b]), xs,
                                        reverse=True)
    vals[band.a] = first[:band.rows[0]]
    lv = band.a - 1
  return ys_of


def _top_down(plan: _Plan, vals: list, level, band_body, band_xs=None):
  """Fills the depths below ``vals[0]`` top down: ``vals[lv + 1] = level(lv)`` at
  unrolled depths with internal nodes, one ``lax.scan`` of
  ``band_body(band)(rows, step_arrays) -> (child_rows, child_rows)`` over each
  scanned run (``vals`` entries may be pytrees of rows). Returns the rows of every
  node in node order as a list of blocks (one per depth; a run's inner depths as
  one block)."""
  skip = -1
  for lv in plan.inner_levels:
    if lv < skip:
      continue
    band = plan.band_from.get(lv)
    if band is None:
      vals[lv + 1] = level(lv)
      continue
    xs = band.arrays() if band_xs is None else band_xs(band)
    last, ys = jax.lax.scan(band_body(band), jax.tree_util.tree_map(band.pad, vals[lv]),
                            xs)
    vals[lv + 1] = jax.tree_util.tree_map(band.middle, ys)
    vals[band.b] = jax.tree_util.tree_map(lambda v: v[:band.rows[-1]], last)
    skip = band.b
  return [v for v in vals if v is not None]


def _draws(key, t: SPTables, lay: SPLayout, n: int):
  """The discrete choices (sizes, block subsets and extensions) and the random bits
  of the times; outside the x64 scope."""
  d = lay.d
  plan = _Plan(lay)
  k_root, k_split, k_block, k_space, k_par = jax.random.split(key, 5)
  cnt = jnp.concatenate(_sizes(k_root, k_split, t, plan, d, n), axis=0)   # (M, n)
  in_a = jnp.zeros((d, n), bool)
  if len(plan.leaf_elems):
    in_a = in_a.at[plan.leaf_elems].set(cnt[plan.node_of[plan.leaf_elems]] == 1)
  block_seq = []
  kb = jax.random.split(k_block, 2 * max(1, len(lay.blocks)))
  for b, ((nid, elems), bt) in enumerate(zip(lay.blocks, t.blocks)):
    mask, seq_loc = _block_choice(kb[2 * b], kb[2 * b + 1], bt, cnt[nid], len(elems), n)
    bits = ((mask[None, :] >> jnp.arange(len(elems), dtype=jnp.uint32)[:, None]) & 1) == 1
    in_a = in_a.at[np.asarray(elems)].set(bits)
    block_seq.append(seq_loc)
  # 64 random bits per float64 variate, as two 32-bit words drawn outside the x64
  # scope (JAX's generators are traced in the caller's mode); one Threefry hash
  # gives both (jaxdp.threefry.words64).
  k_end, k_v = jax.random.split(k_par)
  par_counts = jnp.zeros((1, 2, n), jnp.int32)   # each parallel node's count in A, B
  if plan.num_parallel:
    a_par = cnt[ix(plan.parallel)]
    size = jnp.asarray(plan.size[plan.parallel], jnp.int32)[:, None]
    par_counts = jnp.stack([a_par, size - a_par], axis=1)                  # (P, 2, n)
  return dict(plan=plan, cnt=cnt, in_a=in_a, block_seq=block_seq, par_counts=par_counts,
              bits_space=words64(k_space, (2, d, n)),         # each element's 2 spacings
              bits_v=words64(k_v, (max(1, plan.num_parallel), 2, n)),
              bits_block_end=words64(k_end, (max(1, len(lay.blocks)), 2, n)))


def _times(draws, lay: SPLayout, n: int):
  """Inside the x64 scope: every element's time at the root (its own part's), (d, n)
  float64, and the root's row: each part's last time and end, (2, 2, n) (an empty
  part's are 0)."""
  plan, cnt, in_a = draws["plan"], draws["cnt"], draws["in_a"]
  f64 = jnp.float64
  # The uniforms and then the variates are stored (``_stored``): the logarithm's
  # division splits its fusion, and both halves would recompute the hash.
  word = draws["bits_space"][0][0, 0, 0]
  u_space, u_v, u_block, m = _stored(tuple(_uniform52(draws[k]) for k in (
      "bits_space", "bits_v", "bits_block_end")) + (draws["par_counts"],), word)
  # V^(1/(m+1)) per parallel node and part (m: the node's count in the part), formed
  # once here, so that a scanned depth computes no transcendental in padded rows.
  w = jnp.exp(_log(u_v) / (m.astype(f64) + 1.0))                   # (P, 2, n)
  spacing = -_log(u_space)                                         # (2, d, n)
  time, extra, w, block_end = _stored((spacing[0], spacing[1], w, -_log(u_block)), word)
  # A node's row, (2, 2, n): [last time, end] x part; an empty part's are 0.
  block_row = []
  for b, ((nid, elems), seq_loc) in enumerate(zip(lay.blocks, draws["block_seq"])):
    local, last_a, last_b = _block_times(time, elems, seq_loc, cnt[nid], n)
    time = time.at[ix(elems)].set(local)
    last = jnp.stack([last_a, last_b])
    filled = jnp.stack([cnt[nid] > 0, cnt[nid] < len(elems)])
    block_row.append(jnp.stack([last, jnp.where(filled, last + block_end[b], 0.0)]))
  # a leaf's row: in its own part, last time = its time, end = one more Exp(1) on
  mine = jnp.stack([in_a, ~in_a], axis=1)                            # (d, 2, n)
  leaf_row = jnp.where(mine[:, None], jnp.stack([time, time + extra], axis=1)[:, :, None],
                       0.0)                                          # (d, 2, 2, n)

  # bottom up: each node's row, and the child -> parent maps
  def up(kids, x):                             # a scanned depth
    cl, cr = kids[x["left"]], kids[x["right"]]
    kind = x["kind"][:, None, None]
    series = kind == SERIES
    pv, s1, s2 = _parallel(cl, cr, w[x["par"]])
    here = jnp.where(series[:, None], _series(cl, cr), jnp.where(
        (kind == PARALLEL)[:, None], pv,
        jnp.where((kind == LEAF)[:, None], leaf_row[x["elem"]], 0.0)))
    one = jnp.ones_like(s1)
    l_scale, r_scale = jnp.where(series, one, s1), jnp.where(series, one, s2)
    l_shift = jnp.where(series, cr[:, 0], 0.0)
    p, is_left = x["parent"], x["is_left"][:, None, None]
    return here, (jnp.where(is_left, l_scale[p], r_scale[p]),
                  jnp.where(is_left, l_shift[p], 0.0))

  maps = [None] * plan.num_levels              # (scale, shift) rows of a depth's nodes

  def level_up(lv):                            # an unrolled depth
    info = plan.levels[lv]
    le = info["leaf_elems"]
    leaf = leaf_row[ix(le)] if len(le) else None
    blk = jnp.stack([block_row[b] for b in info["blocks"]]) if info["blocks"] else None
    inner = None
    if len(info["inner"]):
      kids = top[lv + 1]
      cl, cr = kids[ix(info["left_loc"])], kids[ix(info["right_loc"])]
      k = info["n_ser"]                  # rows [:k] series, [k:] parallel
      # series: the lower (left) child follows the upper one, shifted by its last
      # time; parallel: both children rescaled to the parent's spacing scale
      ones = jnp.ones_like(cl[:k, 0])
      parts, left_scale, left_shift, right_scale = (
          [_series(cl[:k], cr[:k])], [ones], [cr[:k, 0]], [ones])
      if k < len(info["inner"]):
        pv, s1, s2 = _parallel(cl[k:], cr[k:], w[ix(info["par_row"])])
        parts.append(pv)
        left_scale.append(s1)
        left_shift.append(jnp.zeros_like(s1))
        right_scale.append(s2)
      inner = jnp.concatenate(parts)
      maps[lv + 1] = (_kids(info, jnp.concatenate(left_scale), jnp.concatenate(right_scale)),
                      _kids(info, jnp.concatenate(left_shift), jnp.zeros_like(cl[:, 0])))
    return _assemble(info, inner, leaf, blk)

  top = [None] * plan.num_levels
  band_maps = _bottom_up(plan, top, level_up, lambda band: up)

  # top down: root time = c_scale * local time + c_shift
  def down(carry, x):                          # a scanned depth
    scale, shift = carry
    ps, ph = scale[x["parent"]], shift[x["parent"]]
    new = (ps * x["scale"], ps * x["shift"] + ph)
    return new, new

  def level_down(lv):                          # an unrolled depth
    info = plan.levels[lv]
    par = ix(info["inner_loc"][info["kid_parent"]])
    scale, shift = cs[lv]
    sc, sh = maps[lv + 1]
    return scale[par] * sc, scale[par] * sh + shift[par]

  cs = [(jnp.ones((1, 2, n), f64), jnp.zeros((1, 2, n), f64))] + [None] * (
      plan.num_levels - 1)
  cs = _top_down(plan, cs, level_down, lambda band: down, lambda band: dict(
      parent=band.arrays()["parent"], scale=band_maps[band.a][0],
      shift=band_maps[band.a][1]))
  node_scale = jnp.concatenate([c[0] for c in cs], axis=0)[ix(plan.node_of)]  # (d, 2, n)
  node_shift = jnp.concatenate([c[1] for c in cs], axis=0)[ix(plan.node_of)]
  scale = jnp.where(in_a, node_scale[:, 0], node_scale[:, 1])
  shift = jnp.where(in_a, node_shift[:, 0], node_shift[:, 1])
  return scale * time + shift, top[0][0]


def _series(lower, upper):
  """A series node's row from its children's (rows, 2, 2, n): the lower child's
  times follow the upper one's last; its end is the lower child's, shifted, or
  the upper one's where the lower child has no element of the part."""
  last = lower[:, 0] + upper[:, 0]
  end = jnp.where(lower[:, 1] > 0, upper[:, 0] + lower[:, 1], upper[:, 1])
  return jnp.stack([last, end], axis=1)


def _parallel(c1, c2, w):
  """A parallel node's merge (module docstring, step 2): children's rows ``c1``,
  ``c2`` (rows, 2, 2, n) and V^(1/(m+1)) ``w`` (rows, 2, n). Returns the node's row
  and each child's scale (1 where a child has no element of the part: the other
  passes through)."""
  (t1, e1), (t2, e2) = (c1[:, 0], c1[:, 1]), (c2[:, 0], c2[:, 1])
  g = (e1 + e2) * w
  both = (e1 > 0) & (e2 > 0)
  s1 = jnp.where(both, g / e1, 1.0)
  s2 = jnp.where(both, g / e2, 1.0)
  row = jnp.stack([jnp.maximum(t1 * s1, t2 * s2), jnp.where(both, g, e1 + e2)], axis=1)
  return row, s1, s2


def _sizes(k_root, k_split, t: SPTables, plan: _Plan, d: int, n: int):
  """A-count of every node, top down: (rows, n) int32 blocks in node order, one per
  unrolled depth and one per scanned run."""
  u_root = jax.random.uniform(k_root, (n,))
  root = jnp.minimum(jnp.sum(t.root_cdf[None, :] <= u_root[:, None], axis=1),
                     d).astype(jnp.int32)
  out = [root[None, :]] + [None] * (plan.num_levels - 1)
  if not plan.num_internal:
    return out
  u = jax.random.uniform(k_split, (plan.num_internal, n))

  def step(a, x, widmax):                      # a scanned depth
    a_left = _split(t, a, x["off"], x["wid"], x["small_left"], u[x["slot"]], widmax)
    kid = jnp.where(x["is_left"][:, None], a_left[x["parent"]],
                    (a - a_left)[x["parent"]])
    return kid, kid

  def level(lv):                               # an unrolled depth
    info = plan.levels[lv]
    a = out[lv][info["inner_loc"]]                                  # (I, n)
    a_left = _split(t, a, info["off"], info["wid"], info["small_left"],
                    u[info["slot"]], int(info["wid"].max()))
    return _kids(info, a_left, a - a_left)

  return _top_down(plan, out, level,
                   lambda band: lambda a, x: step(a, x, band.widmax))


def _split(t: SPTables, a, off, wid, small_left, u, widmax: int):
  """The left child's A-count for nodes with A-counts ``a`` (rows, n): the smaller
  child's count by inverse CDF from its table row, uniforms ``u`` (rows, n)."""
  j = np.arange(widmax)
  valid = (j[None, :] < wid[:, None])[:, None, :]                 # (I, 1, W)
  idx = off[:, None, None] + a[:, :, None] * wid[:, None, None] + j[None, None, :]
  row = jnp.where(valid, t.split_cdf[jnp.where(valid, idx, 0)], 2.0)
  a_s = jnp.sum(row <= u[:, :, None], axis=2).astype(jnp.int32)
  return jnp.where(small_left[:, None], a_s, a - a_s)


def _block_choice(k_sub, k_ext, bt, a, size: int, n: int):
  """A block's subset (bitmask, (n,) uint32) of size ``a`` with probability
  e(A) e(B) / T[a], and uniform extensions of both parts (local (n, L) sequence)."""
  from jaxdp._poset_kernels import linear_extensions
  u = jax.random.uniform(k_sub, (n,))
  lo, hi = bt.start[a], bt.start[a + 1] - 1       # first index with cdf > u
  for _ in range(math.comb(size, size // 2).bit_length()):
    mid = (lo + hi) // 2
    left = bt.cdf[mid] > u
    hi = jnp.where(left, mid, hi)
    lo = jnp.where(left, lo, mid + 1)
  mask = bt.masks[lo].astype(jnp.uint32)
  v = jax.random.uniform(k_ext, (n, size))
  return mask, linear_extensions(bt.ext, bt.strict_up, mask, a, v, size)


def _block_times(time, elems, seq_loc, a, n):
  """Times of a block's elements, (L, n) (partial sums of their spacings along each
  part's extension), and the last time of each part."""
  s_loc = time[ix(elems)].T                                  # (n, L)
  cs = jnp.cumsum(jnp.take_along_axis(s_loc, seq_loc, axis=1), axis=1)
  last_a = jnp.where(a > 0, jnp.take_along_axis(
      cs, jnp.maximum(a - 1, 0)[:, None], axis=1)[:, 0], 0.0)
  pos = jnp.arange(len(elems))[None, :]
  in_order = jnp.where(pos < a[:, None], cs, cs - last_a[:, None])
  rows = jnp.arange(n)[:, None]
  local = jnp.zeros_like(in_order).at[rows, seq_loc].set(in_order)
  return local.T, last_a, cs[:, -1] - last_a


# ------------------------------------------------------------------ noise
def _down_set_min(value, draws, t: SPTables, lay: SPLayout, n: int):
  """For element j and part p, the smallest root time (``value``, (d, n)) of an
  element of part p below or equal to j (+inf if none), (d, 2, n)."""
  plan, in_a = draws["plan"], draws["in_a"]
  inf = jnp.inf
  own = jnp.stack([jnp.where(in_a, value, inf), jnp.where(in_a, inf, value)], axis=1)
  block_low = [jnp.min(own[ix(elems)], axis=0) for _, elems in lay.blocks]

  def up(kids, x):                             # a scanned depth
    kind = x["kind"][:, None, None]
    inner = jnp.minimum(kids[x["left"]], kids[x["right"]])
    here = jnp.where((kind == SERIES) | (kind == PARALLEL), inner,
                     jnp.where(kind == LEAF, own[x["elem"]], inf))
    return here, kids

  def level_up(lv):                            # an unrolled depth
    info = plan.levels[lv]
    le = info["leaf_elems"]
    leaf = own[ix(le)] if len(le) else None
    blk = jnp.stack([block_low[b] for b in info["blocks"]]) if info["blocks"] else None
    inner = None
    if len(info["inner"]):
      kids = low[lv + 1]
      inner = jnp.minimum(kids[ix(info["left_loc"])], kids[ix(info["right_loc"])])
    return _assemble(info, inner, leaf, blk)

  low = [None] * plan.num_levels                       # min over the node
  band_low = _bottom_up(plan, low, level_up, lambda band: up)

  # min over the rest of the down-set, from above
  def down(b, x):                              # a scanned depth
    lower = x["low"][x["left"]]
    upper = jnp.where((x["kind"] == SERIES)[:, None, None], jnp.minimum(b, lower), b)
    kid = jnp.where(x["is_left"][:, None, None], b[x["parent"]], upper[x["parent"]])
    return kid, kid

  def level_down(lv):                          # an unrolled depth
    info = plan.levels[lv]
    b = below[lv][ix(info["inner_loc"])]
    lower = low[lv + 1][ix(info["left_loc"])]
    k = info["n_ser"]
    upper = jnp.concatenate([jnp.minimum(b[:k], lower[:k]), b[k:]])
    return _kids(info, b, upper)

  below = [jnp.full((1, 2, n), inf)] + [None] * (plan.num_levels - 1)
  below = _top_down(plan, below, level_down, lambda band: down,
                    lambda band: dict(band.arrays(), low=band_low[band.a]))
  first = jnp.minimum(jnp.concatenate(below, axis=0)[ix(plan.node_of)], own)
  for (nid, elems), bt in zip(lay.blocks, t.blocks):
    mine = own[ix(elems)]                                             # (L, 2, n)
    le = jnp.asarray(bt.up)                                           # y <= x
    inner = jnp.min(jnp.where(le[:, :, None, None], mine[:, None], inf), axis=0)
    first = first.at[ix(elems)].set(jnp.minimum(first[ix(elems)], inner))
  return first


# ------------------------------------------------------------------ helpers
def ix(idx):
  """A static index array as uint32. It is non-negative by construction, so JAX
  gathers with it directly: a signed index gets a wrap-around select for negative
  values at each gather, a large share of the operations of a deep tree's kernel)."""
  return jnp.asarray(np.asarray(idx, np.uint32))


def _uniform52(words):
  """Uniform on (0, 1): the midpoint (j + 1/2) 2^-52 of one of 2^52 equal cells, j
  from 52 random bits of two uint32 words ``(hi, lo)``; exact in float64 (so never
  0 or 1). Call in the x64 scope."""
  hi = (words[0] >> 5).astype(jnp.float64)         # 27 bits
  lo = (words[1] >> 7).astype(jnp.float64)         # 25 bits
  return (hi * 33554432.0 + lo) * (1.0 / 4503599627370496.0) + (1.0 / 9007199254740992.0)


def _exponential(words):
  """Exp(1) variates -log(U), U from :func:`_uniform52`: positive and finite (at most
  53 log 2); call in the x64 scope."""
  return -_log(_uniform52(words))


def _stored(tree, word):
  """``tree`` (arrays), computed once and stored before its consumers run.

  XLA:CPU fuses cheap elementwise producers (a Threefry hash, :func:`_log`) into
  every consumer, recomputing them per use: an (n,) variate broadcast over d
  coordinates is hashed d times. ``lax.optimization_barrier`` does not prevent that
  here (a (2, n) variate broadcast over 129 coordinates ran as slowly with one as
  without, and the compiled program holds no barrier); a conditional is a fusion
  boundary. Its predicate ``(word | 1) != 0`` (``word`` any traced uint32 scalar)
  is always true, so the other branch never runs; it differs from the first only so
  that the two are not merged. Under ``vmap`` the conditional becomes a select
  (same values, no boundary).
  """
  return jax.lax.cond((word | np.uint32(1)) != 0, lambda t: t,
                      lambda t: jax.tree_util.tree_map(jnp.negative, t), tree)


# fdlibm's e_log.c (Sun Microsystems, 1993): ln 2 in two parts and the coefficients
# of its minimax polynomial in s^2, s = f / (2 + f).
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
_LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
       2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
       1.479819860511658591e-01)


def _log(x):
  """Natural logarithm of positive normal float64 ``x`` (call in the x64 scope):
  fdlibm's algorithm (error below 1 ulp), written with array operations so that
  XLA vectorises it and fuses it with its neighbours (XLA:CPU's own float64
  ``jnp.log`` was the slower choice in this kernel); ``tests/test_series_parallel.py``
  checks it against mpmath. Zero, negative,
  subnormal and non-finite inputs are outside its domain (the kernel's are in
  [2^-53, 1 - 2^-53]).

  x = 2^k (1 + f) with 1 + f in [sqrt(2)/2, sqrt(2)); log(1 + f) = 2 atanh(s),
  s = f / (2 + f), = f - f^2/2 + s (f^2/2 + R(s^2)).
  """
  bits = jax.lax.bitcast_convert_type(x, jnp.int64)
  # The high word in int32: AVX2 converts int32, not int64, to float64 in vectors.
  high = (bits >> 32).astype(jnp.int32)
  mant = high & 0xFFFFF                            # high 20 bits of the mantissa
  i = (mant + 0x95F64) & 0x100000                  # set where 1.m >= sqrt(2)
  m = jax.lax.bitcast_convert_type(
      ((mant | (i ^ 0x3FF00000)).astype(jnp.int64) << 32) | (bits & 0xFFFFFFFF),
      jnp.float64)                                 # 1 + f, halved where i is set
  k = ((high >> 20) - 1023 + (i >> 20)).astype(jnp.float64)
  f = m - 1.0
  s = f / (2.0 + f)
  z = s * s
  w = z * z
  r = (w * (_LG[1] + w * (_LG[3] + w * _LG[5]))
       + z * (_LG[0] + w * (_LG[2] + w * (_LG[4] + w * _LG[6]))))
  hfsq = 0.5 * f * f
  mid = ((mant - 0x6147A) | (0x6B851 - mant)) > 0  # fdlibm's choice of rearrangement
  return jnp.where(mid, k * _LN2_HI - ((hfsq - (s * (hfsq + r) + k * _LN2_LO)) - f),
                   k * _LN2_HI - ((s * (f - r) - k * _LN2_LO) - f))
