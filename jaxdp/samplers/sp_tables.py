"""Exact uniform sampling of the poset ball for series-parallel posets: host tables.

The traced kernel is in :mod:`jaxdp.samplers.sp_kernel`; objects and the ball's
triangulation are described in :mod:`jaxdp.samplers.dispatch`.

For a set S of elements let T_S[a] = sum over A subset of S with |A| = a of
e(A) e(S \\ A) (e = number of linear extensions), so N(P) = sum_a T_P[a]. A single
element has T = [1, 1]. For a series composition S = L < R (all of L below all of R)
extensions concatenate: T_S[a] = sum_{a1 + a2 = a} T_L[a1] T_R[a2]. For a parallel
composition S = L + R they interleave:
T_S[a] = sum_{a1 + a2 = a} C(a, a1) C(n - a, n_L - a1) T_L[a1] T_R[a2]. A prime set of at
most ``BLOCK_MAX_D`` elements (a *block*) gets its T from the subset recursion over its
2^L subsets. The decomposition (:mod:`jaxdp.posets.decomposition`) is made binary by
splitting each series or parallel node's children in halves.

Sampling (top down) draws |A| from T_P, then at every binary node the number of
A-elements of one child (the smaller one, so each node's table has (n_v + 1) rows of
at most n_v / 2 + 1 entries) in proportion to the summands above; a block draws its
subset A of the given size in proportion to e(A) e(B). The uniform linear extensions
of A and B, and the noise, are then built in the kernel without sorting (see there).

Costs: tables O(sum over nodes of n_v * min(n_L, n_R)) <= O(d^2 log d) memory and time
on the host (plus 2^L per block); per sample O(number of nodes) = O(d) table look-ups
and arithmetic, plus O(L^2) per block (objects for tests also sort d keys).

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
  ``docs/design/series-parallel.md`` (the size recursion and what is exact).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np

from jaxdp.posets import Poset, decomposition
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.logweights import cdf, log_binom
from jaxdp.samplers.subsets import extension_counts, object_weights

SP_MAX_D = 512  # the sizes measured and tested; host tables grow as d^2 log d
BLOCK_MAX_D = 16  # a prime block's tables hold 2^L entries (and 2^L (L+1) work)

LEAF, BLOCK, SERIES, PARALLEL = 0, 1, 2, 3


class BlockTables(NamedTuple):
  masks: jax.Array  # (2^L,) int32: subsets of the block, grouped by size
  cdf: jax.Array  # (2^L,) float32: within each size group, CDF of e(A) e(B)
  start: jax.Array  # (L+2,) int32: first index of each size group
  ext: jax.Array  # (2^L,) float32: e(S) for subsets of the block
  strict_up: jax.Array  # (L,) uint32: local bitmask of {y : x < y}
  up: jax.Array  # (L, L) bool: local order, up[x, y] = x <= y


class SPTables(NamedTuple):
  root_cdf: jax.Array  # (d+1,) float32: CDF of |A|
  split_cdf: jax.Array  # flat float32: per internal node, rows a = 0..n_v of CDFs
  # over the A-count of its smaller child; then max(width) + 1 entries of padding
  blocks: tuple  # BlockTables per block


class SPLayout(NamedTuple):
  """The static shape of the binary decomposition (hashable: a static argument).

  Nodes are numbered from the root (0). ``left`` is the lower child of a series node.
  """

  d: int
  kind: tuple  # per node: LEAF, BLOCK, SERIES or PARALLEL
  left: tuple  # per node: child ids (-1 for leaves and blocks)
  right: tuple
  size: tuple  # per node: number of elements
  small: tuple  # per internal node: the child whose A-count is drawn
  offset: tuple  # per internal node: start of its rows in split_cdf
  width: tuple  # per internal node: entries per row (size of small + 1)
  node_of: tuple  # per element: its leaf or block node
  blocks: tuple  # per block: (node id, elements in local order)
  top_down: tuple  # the elements in a fixed linear extension, top first


class _Node:
  __slots__ = ("kind", "left", "right", "elems", "log_t", "id")

  def __init__(self, kind, elems, left=None, right=None, log_t=None):
    self.kind, self.elems, self.left, self.right = kind, elems, left, right
    self.log_t = log_t


def check_supported(poset: Poset) -> None:
  """Raises ValueError naming why the series-parallel sampler cannot take ``poset``."""
  if poset.d > SP_MAX_D:
    raise ValueError(f"method='sp' supports d <= {SP_MAX_D}; got d = {poset.d}.")
  for node in decomposition.prime_nodes(decomposition.decompose(poset)):
    if node.size > BLOCK_MAX_D:
      n = decomposition.n_in(poset.order, np.asarray(node.elements))
      raise ValueError(
        f"{poset!r} is not series-parallel: it has an induced N "
        f"({decomposition.describe_n(poset, n)}) inside a prime piece of "
        f"{node.size} elements, and method='sp' handles prime pieces of at most "
        f"{BLOCK_MAX_D} elements (by the subset recursion). Use method='general' "
        "(d <= 22) or remove a relation of the N."
      )


@by_relation(32)
def supported(poset: Poset) -> bool:
  try:
    check_supported(poset)
  except ValueError:
    return False
  return True


def sp_tables(poset: Poset) -> tuple[SPTables, SPLayout]:
  """``(tables, layout)`` of the series-parallel sampler (see module docstring).

  Raises:
    ValueError: as :func:`check_supported`.
  """
  check_supported(poset)  # names the caller's poset and its labels
  return _sp_tables(poset)


@by_relation(32)
def _sp_tables(poset: Poset) -> tuple[SPTables, SPLayout]:
  root = _binary_tree(poset)  # checks support first
  nodes = _number(root)
  d = poset.d
  kind, left, right, size = [], [], [], []
  small, offset, width = [], [], []
  flat, blocks_t, blocks_l = [], [], []
  node_of = [0] * d
  pos = 0
  for v in nodes:
    kind.append(v.kind)
    size.append(len(v.elems))
    left.append(v.left.id if v.left is not None else -1)
    right.append(v.right.id if v.right is not None else -1)
    if v.kind == LEAF:
      node_of[v.elems[0]] = v.id
    if v.kind == BLOCK:
      for x in v.elems:
        node_of[x] = v.id
      blocks_t.append(_block_tables(poset, v.elems)[0])
      blocks_l.append((v.id, tuple(v.elems)))
    if v.kind in (SERIES, PARALLEL):
      s_is_right = len(v.right.elems) < len(v.left.elems)
      rows = _splitcdf(v, s_is_right)
      small.append(v.right.id if s_is_right else v.left.id)
      offset.append(pos)
      width.append(rows.shape[1])
      flat.append(rows.ravel())
      pos += rows.size
    else:
      small.append(-1)
      offset.append(-1)
      width.append(0)
  strict_above = poset.order.sum(axis=1) - 1
  top_down = tuple(int(x) for x in np.argsort(strict_above, kind="stable"))
  tables = SPTables(
    root_cdf=cdf(root.log_t).astype(np.float32),
    # trailing entries: a row read as a window of its depth's widest row stays in bounds
    split_cdf=np.concatenate(flat + [np.ones(max(width) + 1)]).astype(np.float32),
    blocks=tuple(blocks_t),
  )
  layout = SPLayout(
    d=d,
    kind=tuple(kind),
    left=tuple(left),
    right=tuple(right),
    size=tuple(size),
    small=tuple(small),
    offset=tuple(offset),
    width=tuple(width),
    node_of=tuple(node_of),
    blocks=tuple(blocks_l),
    top_down=top_down,
  )
  return tables, layout


def log_num_objects(poset: Poset) -> float:
  """log N(P) from the root's T table."""
  log_t = _binary_tree(poset).log_t
  m = np.max(log_t)
  return float(m + np.log(np.sum(np.exp(log_t - m))))


def log_size_table(poset: Poset) -> np.ndarray:
  """log T_P[a], a = 0..d, float64 (T_P overflows float64 near d = 170)."""
  return _binary_tree(poset).log_t.copy()


# ------------------------------------------------------------------ internals
def build_tree(poset: Poset, build: Callable[[Poset, decomposition.SPNode], Any]) -> Any:
  """``build(poset, root)`` over the decomposition tree of a supported poset, with
  Python's recursion limit raised for a tree of ``poset.d`` levels (and restored)."""
  check_supported(poset)
  limit = sys.getrecursionlimit()
  sys.setrecursionlimit(max(limit, 20 * poset.d + 1000))
  try:
    return build(poset, decomposition.decompose(poset))
  finally:
    sys.setrecursionlimit(limit)


@by_relation(32)
def _binary_tree(poset: Poset) -> _Node:
  return build_tree(poset, _build)


def _build(poset, node) -> _Node:
  if node.kind == "leaf":
    return _Node(LEAF, node.elements, log_t=np.zeros(2))
  if node.kind == "prime":
    return _Node(BLOCK, node.elements, log_t=_block_tables(poset, node.elements)[1])
  kind = SERIES if node.kind == "series" else PARALLEL
  return _combine(poset, kind, [_build(poset, c) for c in node.children])


def _combine(poset, kind, parts) -> _Node:
  """Balanced binary composition of ``parts`` (series: bottom to top)."""
  if len(parts) == 1:
    return parts[0]
  mid = len(parts) // 2
  lo, hi = _combine(poset, kind, parts[:mid]), _combine(poset, kind, parts[mid:])
  node = _Node(kind, tuple(sorted(lo.elems + hi.elems)), lo, hi)
  node.log_t = _log_size_table(node)
  return node


def _pair_weights(v: _Node) -> np.ndarray:
  """log weight of (a_L, a_R): T_L[a_L] T_R[a_R] times the interleavings (parallel)."""
  tl, tr = v.left.log_t, v.right.log_t
  w = tl[:, None] + tr[None, :]
  if v.kind == PARALLEL:
    nl, n = len(tl) - 1, len(tl) + len(tr) - 2
    a1 = np.arange(nl + 1)[:, None]
    a = a1 + np.arange(len(tr))[None, :]
    w = w + log_binom(a, a1) + log_binom(n - a, nl - a1)
  return w


def _log_size_table(v: _Node) -> np.ndarray:
  w = _pair_weights(v)
  nl, nr = w.shape[0] - 1, w.shape[1] - 1
  out = np.full(nl + nr + 1, -np.inf)
  for a1 in range(nl + 1):
    out[a1 : a1 + nr + 1] = np.logaddexp(out[a1 : a1 + nr + 1], w[a1])
  return out


def _splitcdf(v: _Node, s_is_right: bool) -> np.ndarray:
  """Rows a = 0..n_v: CDF over the smaller child's A-count given a."""
  w = _pair_weights(v)
  if s_is_right:
    w = w.T  # rows: small child's count
  ns, no = w.shape[0] - 1, w.shape[1] - 1
  n = ns + no
  rows = np.ones((n + 1, ns + 1))
  for a in range(n + 1):
    lw = np.full(ns + 1, -np.inf)
    lo, hi = max(0, a - no), min(ns, a)
    idx = np.arange(lo, hi + 1)
    lw[idx] = w[idx, a - idx]
    if np.isfinite(lw).any():
      rows[a] = cdf(lw)
  return rows


@by_relation(64)
def _block_tables(poset: Poset, elems: tuple):
  """(BlockTables, log T) of the prime block on ``elems`` (local order = ``elems``)."""
  idx = np.asarray(elems)
  sub = Poset.from_order(poset.order[np.ix_(idx, idx)])
  L = len(elems)
  e = extension_counts(sub)
  masks = np.arange(1 << L)
  w = object_weights(e)
  pop = np.zeros(1 << L, dtype=np.int64)
  for x in range(L):
    pop += (masks >> x) & 1
  order = np.lexsort((masks, pop))
  start = np.searchsorted(pop[order], np.arange(L + 2))
  cdf = np.empty(1 << L)
  t = np.zeros(L + 1)
  for a in range(L + 1):
    g = order[start[a] : start[a + 1]]
    t[a] = w[g].sum()
    c = np.cumsum(w[g]) / t[a]
    last = np.nonzero(w[g])[0][-1]
    c[last:] = 1.0
    cdf[start[a] : start[a + 1]] = c
  o = sub.order
  strict = o & ~np.eye(L, dtype=bool)
  strict_up = (strict.astype(np.uint64) << np.arange(L, dtype=np.uint64)).sum(axis=1)
  tables = BlockTables(
    masks=masks[order].astype(np.int32),
    cdf=cdf.astype(np.float32),
    start=start.astype(np.int32),
    ext=e.astype(np.float32),
    strict_up=strict_up.astype(np.uint32),
    up=np.array(o),
  )
  return tables, np.log(t)


def _number(root: _Node):
  """Nodes in breadth-first order from the root; sets ``id``."""
  out, queue = [], [root]
  while queue:
    nxt = []
    for v in queue:
      v.id = len(out)
      out.append(v)
      nxt.extend(c for c in (v.left, v.right) if c is not None)
    queue = nxt
  return out
