"""The series-parallel kernel's static plan: per-depth index arrays of a layout, bands
of repeated structure, and the bottom-up and top-down passes that use them.

Nodes are numbered breadth first, so the nodes at one depth are a contiguous range
and all children of depth l are the nodes at depth l + 1. Every pass works on one
(nodes at depth l, ..., n) block per depth (a few operations per depth: compile
time does not grow with the number of nodes, and no pass copies a whole-tree array).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.samplers.sp_tables import BLOCK, LEAF, PARALLEL, SERIES, SPLayout
from jaxdp.samplers.words import static_index

__all__ = [
  "BAND_MAX_ROWS",
  "BAND_MIN_STEPS",
  "Band",
  "LevelPlan",
  "assemble",
  "bottom_up",
  "find_bands",
  "child_rows",
  "parallel_row",
  "series_row",
  "top_down",
]


class LevelPlan:
  """Static index arrays of a layout, per depth."""

  def __init__(self, layout: SPLayout):
    kind = np.asarray(layout.kind)
    left, right = np.asarray(layout.left), np.asarray(layout.right)
    num = len(kind)
    depth = np.zeros(num, np.int64)
    for v in range(num):  # breadth-first: parents first
      for c in (left[v], right[v]):
        if c >= 0:
          depth[c] = depth[v] + 1
    self.num_levels = int(depth.max()) + 1
    self.start = [int(np.nonzero(depth == lv)[0].min()) for lv in range(self.num_levels)]
    self.stop = [int(np.nonzero(depth == lv)[0].max()) + 1 for lv in range(self.num_levels)]
    assert all(
      (depth[a:b] == lv).all() for lv, (a, b) in enumerate(zip(self.start, self.stop))
    )
    internal = np.nonzero((kind == SERIES) | (kind == PARALLEL))[0]
    self.num_internal = len(internal)
    slot = {int(v): i for i, v in enumerate(internal)}
    parallel = np.nonzero(kind == PARALLEL)[0]
    self.num_parallel = len(parallel)
    self.parallel = parallel  # node ids; row i is par_row i
    par_row = {int(v): i for i, v in enumerate(parallel)}
    block_of = {nid: b for b, (nid, _) in enumerate(layout.blocks)}
    elem_of_leaf = {
      layout.node_of[x]: x for x in range(layout.d) if kind[layout.node_of[x]] == LEAF
    }
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
      info = dict(
        inner=inner,
        inner_loc=inner - a,
        assemble=assemble,
        leaf_elems=np.asarray([elem_of_leaf[v] for v in leaves], np.int64),
        blocks=[block_of[int(v)] for v in blocks],
      )
      if len(inner):
        a2 = self.stop[lv]
        small = np.asarray([layout.small[v] for v in inner])
        # children block (depth lv + 1) = concat(left results, right results)[kid_src]
        kid_src = np.empty(self.stop[lv + 1] - a2, np.int64)
        kid_src[left[inner] - a2] = np.arange(len(inner))
        kid_src[right[inner] - a2] = len(inner) + np.arange(len(inner))
        info.update(
          left_loc=left[inner] - a2,
          right_loc=right[inner] - a2,
          kid_src=kid_src,
          kid_parent=np.concatenate([np.arange(len(inner))] * 2)[kid_src],
          small_left=(small == left[inner]),
          n_ser=int((kind[inner] == SERIES).sum()),
          off=np.asarray([layout.offset[v] for v in inner]),
          wid=np.asarray([layout.width[v] for v in inner]),
          slot=np.asarray([slot[int(v)] for v in inner]),
          par_row=np.asarray(
            [par_row[int(v)] for v in inner if kind[v] == PARALLEL], np.int64
          ),
        )
      self.levels.append(info)
    self.inner_levels = [
      lv for lv in range(self.num_levels) if len(self.levels[lv]["inner"])
    ]
    self.bands = find_bands(self, layout, kind, left, right, slot, par_row)
    self.band_from = {band.a: band for band in self.bands}  # top-down entry
    self.band_to = {band.b - 1: band for band in self.bands}  # bottom-up entry
    self.size = np.asarray(layout.size)
    self.node_of = np.asarray(layout.node_of)
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


class Band:
  """Steps ``a .. b-1`` (each from depth lv to lv + 1) as padded per-step arrays."""

  def __init__(self, plan, layout, kind, left, right, slot, par_row, a, b):
    self.a, self.b = a, b
    rows = [plan.stop[lv] - plan.start[lv] for lv in range(a, b + 1)]
    self.rows = rows
    w = self.w = max(rows)
    steps = b - a
    z = lambda dt=np.int64: np.zeros((steps, w), dt)
    x = dict(
      kind=np.full((steps, w), -1, np.int64),
      left=z(),
      right=z(),
      elem=z(),
      par=z(),
      slot=z(),
      small_left=z(bool),
      off=z(),
      wid=np.ones((steps, w), np.int64),
      parent=z(),
      is_left=z(bool),
    )
    elem_of = {layout.node_of[e]: e for e in range(layout.d)}
    for i, lv in enumerate(range(a, b)):
      s0, s1 = plan.start[lv], plan.start[lv + 1]
      for r in range(rows[i]):
        v = s0 + r
        x["kind"][i, r] = kind[v]
        if kind[v] == LEAF:
          x["elem"][i, r] = elem_of[v]
        else:  # SERIES or PARALLEL (no blocks)
          lc, rc = left[v], right[v]
          x["left"][i, r], x["right"][i, r] = lc - s1, rc - s1
          x["slot"][i, r] = slot[v]
          x["par"][i, r] = par_row.get(v, 0)
          x["small_left"][i, r] = layout.small[v] == lc
          x["off"][i, r], x["wid"][i, r] = layout.offset[v], layout.width[v]
          x["parent"][i, lc - s1], x["parent"][i, rc - s1] = r, r
          x["is_left"][i, lc - s1] = True
    self.widmax = int(x["wid"].max())
    self.xs = x
    # rows of depths a+1 .. b-1 in the stacked (steps * w) output of a top-down pass
    self.unpad = np.concatenate(
      [i * w + np.arange(rows[i + 1]) for i in range(steps - 1)] + [np.zeros(0, np.int64)]
    )

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
    return flat[static_index(self.unpad)]


def find_bands(plan, layout, kind, left, right, slot, par_row):
  """Maximal runs of at least BAND_MIN_STEPS steps whose depths (both ends) are narrow,
  have no blocks, and have internal nodes (so a next depth)."""

  def narrow(lv):
    rows = plan.stop[lv] - plan.start[lv]
    return rows <= BAND_MAX_ROWS and not plan.levels[lv]["blocks"]

  ok = [
    lv + 1 < plan.num_levels
    and len(plan.levels[lv]["inner"]) > 0
    and narrow(lv)
    and narrow(lv + 1)
    for lv in range(plan.num_levels)
  ]
  bands, lv = [], 0
  while lv < plan.num_levels:
    if not ok[lv]:
      lv += 1
      continue
    end = lv
    while end < plan.num_levels and ok[end]:
      end += 1
    if end - lv >= BAND_MIN_STEPS:
      bands.append(Band(plan, layout, kind, left, right, slot, par_row, lv, end))
    lv = end
  return bands


def assemble(info, inner, leaf, blocks):
  """One depth's rows from its internal nodes', leaves' and blocks' rows."""
  parts = [p for p in (inner, leaf, blocks) if p is not None and p.shape[0]]
  rows = jnp.concatenate(parts, axis=0) if len(parts) > 1 else parts[0]
  return rows[static_index(info["assemble"])]


def child_rows(info, left, right):
  """The children depth's rows from per-internal-node left and right rows."""
  return jnp.concatenate([left, right], axis=0)[static_index(info["kid_src"])]


def bottom_up(plan: LevelPlan, vals: list, level, band_body, band_xs=None):
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
    first, ys_of[band.a] = jax.lax.scan(
      band_body(band), band.pad(vals[band.b]), xs, reverse=True
    )
    vals[band.a] = first[: band.rows[0]]
    lv = band.a - 1
  return ys_of


def top_down(plan: LevelPlan, vals: list, level, band_body, band_xs=None):
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
    last, ys = jax.lax.scan(band_body(band), jax.tree_util.tree_map(band.pad, vals[lv]), xs)
    vals[lv + 1] = jax.tree_util.tree_map(band.middle, ys)
    vals[band.b] = jax.tree_util.tree_map(lambda v: v[: band.rows[-1]], last)
    skip = band.b
  return [v for v in vals if v is not None]


def series_row(lower, upper):
  """A series node's row from its children's (rows, 2, 2, n): the lower child's
  times follow the upper one's last; its end is the lower child's, shifted, or
  the upper one's where the lower child has no element of the part."""
  last = lower[:, 0] + upper[:, 0]
  end = jnp.where(lower[:, 1] > 0, upper[:, 0] + lower[:, 1], upper[:, 1])
  return jnp.stack([last, end], axis=1)


def parallel_row(c1, c2, w):
  """A parallel node's merge (:mod:`jaxdp.samplers.sp_kernel`, step 2): children's rows ``c1``,
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
