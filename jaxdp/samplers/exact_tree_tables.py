"""Exact host tables of the decomposition-tree sampler of :mod:`jaxdp.exact.tree`:
every probability of a series-parallel poset's object choice as an exact integer.

The tree is the binary decomposition of :mod:`jaxdp.samplers.sp_tables` (series and
parallel nodes split in halves; ``left`` is the lower child of a series node; prime
pieces of at most ``BLOCK_MAX_D`` elements are blocks). With T_v[a] the number of
objects of node v whose part A has a elements (Python integers, any number of
digits), the root draws |A| with probability T_P[a] / N(P) and each internal node
with count a draws its smaller child's count s with probability
``w(s, a - s) / T_v[a]`` (the summands of the size recursion). Each such choice
is stored as its cumulative probabilities ``c_i`` rounded *down* to
``CHOICE_WORDS`` 64-bit words (``floor(c_i 2^192)``, computed from exact integers;
1 is stored as ``2^192 - 1``): the device compares a uniform's leading words with
them, exactly (see :mod:`jaxdp.exact.tree`).

Blocks keep int64 tables (every count of a block of L <= 16 elements is below
2^61): an exactly uniform rank below T_block[a] picks the subset (cumulative
weights e(A) e(B) within the size group) and the extensions of both parts.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from jaxdp._checks import read_only
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.sp_tables import (
  BLOCK,
  LEAF,
  PARALLEL,
  SERIES,
  build_tree,
  check_supported,
)
from jaxdp.samplers.subsets import extension_counts, object_weights

__all__ = [
  "CHOICE_WORDS",
  "TreeBlock",
  "TreeLayout",
  "TreeTables",
  "exact_tree_tables",
  "exact_num_objects",
  "exact_size_table",
]

CHOICE_WORDS = 3  # 64-bit words of each cumulative probability (192 bits)
_FULL = (1 << (64 * CHOICE_WORDS)) - 1


class TreeBlock(NamedTuple):
  """int64 tables of one prime block (local element order = its elements)."""

  masks: np.ndarray  # (2^L,) int32: subsets grouped by size, ascending
  cum: np.ndarray  # (2^L,) int64: inclusive cumulative e(A) e(B) within each group
  weight: np.ndarray  # (2^L,) int64: e(A) e(B) in the same order
  start: np.ndarray  # (L + 2,) int32: first index of each size group
  total: np.ndarray  # (L + 1,) int64: T_block[a]
  ext: np.ndarray  # (2^L,) int64: e(S)
  strict_up: np.ndarray  # (L,) uint32: local bitmask of {y : x < y}
  up: np.ndarray  # (L, L) bool: x <= y


class TreeTables(NamedTuple):
  """Device tables (jit arguments: posets of one layout share a compilation)."""

  thresholds: np.ndarray  # (CHOICE_WORDS, R) uint64: rows of floor(c_i 2^192)
  first: np.ndarray  # (R,) uint32: their first 32 bits (the first pass's table)
  waves: np.ndarray  # (waves, W, 6) int32: the choices, parents' waves first, as
  # node (V: the dummy, count 0), small child, other child (V + 1: a sink), row
  # offset, row width, index of its uniform (-1: padding)
  kind: np.ndarray  # (V,) int32
  left: np.ndarray  # (V,) int32 (-1: none)
  right: np.ndarray  # (V,) int32
  size: np.ndarray  # (V,) int32
  slot: np.ndarray  # (V,) int32: first slot of a group's interleaving, -1 for the
  # nodes that are not the top of a group (a maximal run of parallel nodes)
  slot_node: np.ndarray  # (slots,) int32: the group (its top node) of each slot
  member: np.ndarray  # (C, 3) int32: the groups' members (their children, left to
  # right), group by group: node, its group's top, flat index of the group's first
  anc: np.ndarray  # (H, d) int32: ancestors of each element, its node first (-1 past
  # the root)
  up: np.ndarray  # (d, d) bool: x <= y
  blocks: tuple  # TreeBlock per block


class TreeLayout(NamedTuple):
  """The static shape of the tables (hashable: a static argument)."""

  d: int
  num_nodes: int
  num_choices: int  # the root's and one per internal node
  search: int  # binary-search iterations: bit length of the widest row
  runs: tuple  # (first wave, end, iterations): consecutive waves searched alike
  slots: int  # sum of the groups' sizes
  members: int  # C
  labels: int  # bit length of the largest number of members of a group
  groups: tuple  # per group, in slot order: (first slot, size)
  blocks: tuple  # per block: (node id, elements)
  depths: tuple  # first node id of each depth (breadth first: ids grow with depth)


class _Node:
  __slots__ = ("kind", "elems", "left", "right", "t", "id", "block")

  def __init__(self, kind, elems, left=None, right=None, t=None, block=None):
    self.kind, self.elems, self.left, self.right = kind, elems, left, right
    self.t, self.block = t, block


def exact_tree_tables(poset: Poset) -> tuple[TreeTables, TreeLayout]:
  """``(tables, layout)`` of the exact decomposition-tree sampler.

  Raises:
    ValueError: the poset is not series-parallel with prime pieces of at most
      ``BLOCK_MAX_D`` elements, or d > ``SP_MAX_D`` (as the ``sp`` sampler).
  """
  check_supported(poset)  # names the caller's poset and its labels
  return _exact_tree_tables(poset)


@by_relation(16)
def _exact_tree_tables(poset: Poset) -> tuple[TreeTables, TreeLayout]:
  root = _tree(poset)
  nodes, queue, depths = [], [root], []
  while queue:  # breadth first: parents before children
    depths.append(len(nodes))
    nxt = []
    for v in queue:
      v.id = len(nodes)
      nodes.append(v)
      nxt.extend(c for c in (v.left, v.right) if c is not None)
    queue = nxt
  d, num = poset.d, len(nodes)
  rows = [_rows([root.t])]  # the root's row: |A|
  steps, pos = [(num, 0, num + 1, 0, d + 1, 0)], d + 1
  kind = np.array([v.kind for v in nodes], np.int32)
  left = np.array([v.left.id if v.left else -1 for v in nodes], np.int32)
  right = np.array([v.right.id if v.right else -1 for v in nodes], np.int32)
  size = np.array([len(v.elems) for v in nodes], np.int32)
  slot = np.full(num, -1, np.int32)
  parent = np.full(num, -1, np.int64)
  node_of = np.zeros(d, np.int64)
  slots, blocks, block_tables, width = 0, [], [], d + 1
  kind_of = [v.kind for v in nodes]
  for v in nodes:
    if v.kind in (SERIES, PARALLEL):
      parent[v.left.id] = parent[v.right.id] = v.id
      small_left = len(v.left.elems) <= len(v.right.elems)
      r = _split_rows(v, small_left)
      rows.append(r)
      wid = r.shape[1]
      kids = (v.left.id, v.right.id) if small_left else (v.right.id, v.left.id)
      steps.append((v.id, *kids, pos, wid, len(steps)))
      pos += r.size
      width = max(width, wid)
      if v.kind == PARALLEL and (parent[v.id] < 0 or kind_of[parent[v.id]] != PARALLEL):
        slot[v.id] = slots
        slots += len(v.elems)
    else:
      for x in v.elems:
        node_of[x] = v.id
      if v.kind == BLOCK:
        blocks.append((v.id, tuple(v.elems)))
        block_tables.append(v.block)
  depth = []
  for x in range(d):
    chain, v = [], node_of[x]
    while v >= 0:
      chain.append(v)
      v = parent[v]
    depth.append(chain)
  h = max(len(c) for c in depth)
  anc = np.full((h, d), -1, np.int32)
  for x, c in enumerate(depth):
    anc[: len(c), x] = c
  slot_node = np.zeros(max(slots, 1), np.int32)
  member, most = [], 1
  for v in nodes:
    if slot[v.id] >= 0:
      slot_node[slot[v.id] : slot[v.id] + len(v.elems)] = v.id
      first, stack = len(member), [v]
      while stack:  # the run's children, left to right
        w = stack.pop()
        if w.kind == PARALLEL:
          stack += [w.right, w.left]
        else:
          member.append((w.id, v.id, first))
      most = max(most, len(member) - first)
  thr = np.concatenate([r.ravel() for r in rows])
  words = np.empty((CHOICE_WORDS, thr.size), np.uint64)
  for w in range(CHOICE_WORDS):
    shift = 64 * (CHOICE_WORDS - 1 - w)
    words[w] = [(int(t) >> shift) & 0xFFFFFFFFFFFFFFFF for t in thr]
  waves, runs = _waves(steps, parent)
  tables = TreeTables(
    thresholds=words,
    first=(words[0] >> np.uint64(32)).astype(np.uint32),
    waves=waves,
    kind=kind,
    left=left,
    right=right,
    size=size,
    slot=slot,
    slot_node=slot_node,
    member=np.array(member, np.int32).reshape(-1, 3),
    anc=anc,
    up=np.array(poset.order),
    blocks=tuple(block_tables),
  )
  layout = TreeLayout(
    d=d,
    num_nodes=num,
    num_choices=len(steps),
    search=int(width).bit_length(),
    runs=runs,
    slots=slots,
    members=len(member),
    labels=int(most).bit_length(),
    groups=tuple((int(slot[v]), int(size[v])) for v in np.argsort(slot) if slot[v] >= 0),
    blocks=tuple(blocks),
    depths=tuple(depths),
  )
  return read_only(tables), layout


def _waves(steps, parent) -> tuple[np.ndarray, tuple]:
  """The choices in waves of a common width W, and runs of consecutive waves whose
  rows need the same number of binary-search iterations: a depth's choices (widest
  row first) in consecutive waves (their parents are all in earlier ones), padded;
  W minimises the padded work plus a per-wave cost."""
  depth = {}
  levels: dict = {}
  for st in steps:
    v = st[0]
    if v == len(parent):  # the root's |A|
      depth[v] = -1
    else:
      depth[v] = 0 if parent[v] < 0 else depth[parent[v]] + 1
    levels.setdefault(depth[v], []).append(st)
  sizes = [len(levels[k]) for k in sorted(levels)]
  best = min(
    (sum(-(-m // w) for m in sizes) * (w + 16), w) for w in (1, 2, 4, 8, 16, 32, 64)
  )
  w = best[1]
  pad = (len(parent), len(parent) + 1, len(parent) + 1, 0, 1, -1)
  out, iters = [], []
  for k in sorted(levels):
    lv = sorted(levels[k], key=lambda st: -st[4])  # rows by width, widest first
    for i in range(0, len(lv), w):
      chunk = lv[i : i + w]
      out.append(chunk + [pad] * (w - len(chunk)))
      iters.append(int(chunk[0][4]).bit_length())
  runs, start = [], 0
  for i in range(1, len(iters) + 1):
    if i == len(iters) or iters[i] != iters[start]:
      runs.append((start, i, iters[start]))
      start = i
  return np.array(out, np.int32), tuple(runs)


def exact_num_objects(poset: Poset) -> int:
  """N(P), exactly (a Python integer), from the size tables."""
  return sum(_tree(poset).t)


def exact_size_table(poset: Poset) -> list:
  """T_P[a], a = 0..d: the number of objects with |A| = a (Python integers)."""
  return list(_tree(poset).t)


# ------------------------------------------------------------------ internals
@by_relation(16)
def _tree(poset: Poset) -> _Node:
  return build_tree(poset, _build)


def _build(poset, node) -> _Node:
  if node.kind == "leaf":
    return _Node(LEAF, node.elements, t=[1, 1])
  if node.kind == "prime":
    block = _block(poset, node.elements)
    return _Node(BLOCK, node.elements, t=[int(x) for x in block.total], block=block)
  kind = SERIES if node.kind == "series" else PARALLEL
  return _combine(kind, [_build(poset, c) for c in node.children])


def _combine(kind, parts) -> _Node:
  """Balanced binary composition of ``parts`` (series: bottom to top)."""
  if len(parts) == 1:
    return parts[0]
  mid = len(parts) // 2
  lo, hi = _combine(kind, parts[:mid]), _combine(kind, parts[mid:])
  v = _Node(kind, tuple(sorted(lo.elems + hi.elems)), lo, hi)
  nl, nr = len(lo.elems), len(hi.elems)
  t = [0] * (nl + nr + 1)
  for a1 in range(nl + 1):
    for a2 in range(nr + 1):
      t[a1 + a2] += _weight(v, a1, a2)
  v.t = t
  return v


def _weight(v: _Node, a1: int, a2: int) -> int:
  """Objects of v with a1 A-elements in its left child and a2 in its right."""
  w = v.left.t[a1] * v.right.t[a2]
  if v.kind == PARALLEL:
    nl, n, a = len(v.left.elems), len(v.elems), a1 + a2
    w *= math.comb(a, a1) * math.comb(n - a, nl - a1)
  return w


def _rows(weight_rows) -> np.ndarray:
  """Object-dtype rows of floor(c_i 2^192) for rows of exact weights."""
  out = np.empty((len(weight_rows), len(weight_rows[0])), object)
  for r, w in enumerate(weight_rows):
    total, acc = sum(w), 0
    for i, wi in enumerate(w):
      acc += wi
      out[r, i] = _FULL if acc == total else (acc << (64 * CHOICE_WORDS)) // total
  return out


def _split_rows(v: _Node, small_left: bool) -> np.ndarray:
  """Rows a = 0..n_v: cumulative probabilities of the smaller child's count."""
  ns = min(len(v.left.elems), len(v.right.elems))
  no = len(v.elems) - ns
  rows = []
  for a in range(len(v.elems) + 1):
    w = []
    for s in range(ns + 1):
      o = a - s
      if not 0 <= o <= no:
        w.append(0)
      else:
        w.append(_weight(v, s, o) if small_left else _weight(v, o, s))
    rows.append(w)
  return _rows(rows)


def _block(poset: Poset, elems: tuple) -> TreeBlock:
  idx = np.asarray(elems)
  sub = Poset.from_order(poset.order[np.ix_(idx, idx)])
  L = len(elems)
  e = extension_counts(sub, np.int64)  # e(S) <= L! < 2^45 for L <= 16
  w = object_weights(e)  # <= 2^L L! < 2^61
  masks = np.arange(1 << L)
  pop = np.array([bin(int(m)).count("1") for m in masks], np.int64)
  order = np.lexsort((masks, pop))
  start = np.searchsorted(pop[order], np.arange(L + 2))
  cum = np.empty(1 << L, np.int64)
  total = np.zeros(L + 1, np.int64)
  for a in range(L + 1):
    g = order[start[a] : start[a + 1]]
    cum[start[a] : start[a + 1]] = np.cumsum(w[g])
    total[a] = int(w[g].sum())
  o = sub.order
  strict = o & ~np.eye(L, dtype=bool)
  strict_up = (strict.astype(np.uint64) << np.arange(L, dtype=np.uint64)).sum(axis=1)
  return TreeBlock(
    masks=masks[order].astype(np.int32),
    cum=cum,
    weight=w[order].astype(np.int64),
    start=start.astype(np.int32),
    total=total,
    ext=e.astype(np.int64),
    strict_up=strict_up.astype(np.uint32),
    up=np.array(o),
  )
