"""Exact poset-ball objects of a series-parallel poset by its decomposition tree: every
discrete choice exact, decided lazily on the device.

Per sample (tables: :mod:`jaxdp.samplers.exact_tree_tables`):

1. *Sizes.* |A| at the root and, parents first, the A-count of every internal node's
   smaller child: "i with probability w_i / W" is decided by a uniform U whose binary
   digits are random bits, as ``#{i : c_i <= U}`` for the cumulative probabilities
   c_i. The first pass reads U's first 32 digits j (one ChaCha20 word) and compares
   them with the first 32 bits of ``floor(c_i 2^192)``: a comparison is decided
   unless the two are equal (then U and c_i agree to 32 digits), so the choice is
   settled when no boundary's first 32 bits equal j (a binary search per row, as
   many steps as the row's width needs). A sample with an undecided choice (about
   2^-32 per choice) is redone with 160 more digits of the *same* U (fresh words
   from a key of their own, read only then) against all 192 bits; a choice still
   undecided (probability below 2^-190 per boundary) raises an error, never a
   guess.
2. *Blocks.* An exactly uniform rank below T_block[a] (62-bit draws, rejection)
   picks the block's subset A (cumulative int64 weights e(A) e(B) within the size
   group) and the extensions of A and B inside it (unranked with e(S \\ x)).
3. *Interleavings.* A maximal run of parallel nodes (a *group*) needs a uniformly
   random interleaving of its members' extensions in each part: iid 32-bit keys of
   the part's slots, sorted, give the members their slots (tied keys redraw the
   sample's keys), and a second sort by member and slot gives each member's j-th
   element its j-th slot (:mod:`jaxdp.exact.interleave`, sorting networks per group).
4. *Positions.* An element's position in its part's extension is composed up its
   ancestors: at a series node the lower child's elements follow the upper child's,
   at a parallel node the child's i-th element takes the child's i-th slot.

Every choice has its exact probability, so the object (A, ext(A), ext(B)) has
probability exactly 1 / N(P). The noise then needs, per coordinate j and part, the
first position of an element of the part below or equal to j (the chain filters
containing j): the subtree minima of the positions (bottom up, a depth at a time),
taken over the lower children of the series nodes above j whose upper child holds j,
and inside a block.

Cost per sample: O(number of nodes) choices with O(log width) look-ups each, two
sorting networks per group (g log^2 g / 4 comparisons for g slots; d slots per level
of nested groups), and O(d H) for the
positions and their minima (H the tree's height). Arrays are laid out (node or element, sample).
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.exact.choices import uniform_below_each
from jaxdp.exact.interleave import interleave
from jaxdp.samplers.exact_tree_tables import CHOICE_WORDS, TreeLayout, TreeTables
from jaxdp.samplers.sp_tables import PARALLEL, SERIES

__all__ = ["WIDEN", "size_counts", "tree_objects"]

# The first pass treats a boundary as undecided when U's first 32 digits lie within
# WIDEN of its first 32 bits (0: only when equal). Tests widen it to force the refined
# pass, which must give the same objects.
WIDEN = 0
_BIG = 1 << 30


def tree_objects(key, tables: TreeTables, layout: TreeLayout, n: int):
  """``n`` exactly uniform objects (traceable, inside ``jax.enable_x64``).

  Returns:
    seq (n, d) int32 (A top down, then B top down), k (n,) int32 = |A|, low
    (n, 2, d) int32: per part, the first position of an element of the part below
    or equal to each element (the part's size where none), and failed (n,) bool: a
    choice undecided after 192 digits (the caller must not release such a sample).
  """
  d = layout.d
  k_size, k_more, k_block, k_keys = jax.random.split(key, 4)
  cnt, _, failed = size_counts(k_size, k_more, tables, layout, n)  # (V + 2, n)
  cols = jnp.arange(n)[None, :]
  in_a, pos = cnt[tables.anc[0]] == 1, jnp.zeros((d, n), jnp.int32)  # leaves' count
  kb = jax.random.split(k_block, max(1, len(layout.blocks)))
  for b, ((nid, elems), bt) in enumerate(zip(layout.blocks, tables.blocks)):
    a = cnt[nid]
    mask, seq_loc = _block(kb[b], bt, a, len(elems), n)
    el = np.asarray(elems)
    bits = ((mask[None, :] >> jnp.arange(len(elems), dtype=jnp.uint32)[:, None]) & 1) == 1
    in_a = in_a.at[el].set(bits)
    i = jnp.arange(len(elems), dtype=jnp.int32)[:, None]
    local = jnp.where(i < a[None, :], i, i - a[None, :])
    pos = pos.at[jnp.asarray(el, jnp.int32)[seq_loc.T], cols].set(local)
  part = lambda v: jnp.where(in_a, cnt[v], tables.size[v][:, None] - cnt[v])  # (d, n)
  slot_of = interleave(k_keys, cnt, tables, layout, n) if layout.slots else None

  def climb(s, pos):
    u, c = tables.anc[s], tables.anc[s - 1]
    uu = jnp.maximum(u, 0)
    kind = tables.kind[uu][:, None]
    lft, rgt = jnp.maximum(tables.left[uu], 0), jnp.maximum(tables.right[uu], 0)
    lower = (c == lft)[:, None] & (kind == SERIES)
    right = (c == rgt)[:, None] & (kind == PARALLEL)
    new = pos + jnp.where(lower, part(rgt), 0) + jnp.where(right, part(lft), 0)
    if slot_of is not None:  # the top of a group: the child-order index's slot
      top = (tables.slot[uu] >= 0)[:, None] & (kind == PARALLEL)
      off_b = jnp.where(in_a, 0, cnt[uu])
      idx = jnp.clip(tables.slot[uu][:, None] + new + off_b, 0, layout.slots - 1)
      new = jnp.where(top, jnp.take_along_axis(slot_of, idx, axis=0), new)
    return jnp.where((u >= 0)[:, None], new, pos)

  pos = lax.fori_loop(1, tables.anc.shape[0], climb, pos)
  size_a = cnt[0]
  dest = jnp.where(in_a, pos, size_a[None, :] + pos)
  ids = jnp.broadcast_to(jnp.arange(d, dtype=jnp.int32)[:, None], (d, n))
  seq = jnp.zeros((n, d), jnp.int32).at[cols.T, dest.T].set(ids.T)
  low = _down_set_first(pos, in_a, tables, layout, n)  # (2, d, n)
  low = jnp.minimum(low, jnp.stack([size_a, d - size_a])[:, None, :])
  return seq, size_a, jnp.transpose(low, (2, 0, 1)), failed


# ------------------------------------------------------------------ the sizes
def _words32(key, shape):
  return jax.random.bits(key, shape, jnp.uint32).astype(jnp.uint64)


def _count(pred, width, iters: int):
  """#{i < width : pred(i)} for a predicate true then false (binary search)."""
  lo, hi = jnp.zeros_like(width), width
  for _ in range(iters):
    active = lo < hi
    mid = (lo + hi) // 2
    p = pred(mid)
    lo = jnp.where(active & p, mid + 1, lo)
    hi = jnp.where(active & ~p, mid, hi)
  return lo


def _lex_less(t, u):
  """t < u over word tuples, most significant first."""
  out = t[-1] < u[-1]
  for a, b in zip(t[-2::-1], u[-2::-1]):
    out = (a < b) | ((a == b) & out)
  return out


def _choose(tab, off, width, u, iters: int, refined: bool):
  """The index ``#{i : c_i <= U}`` of one row per sample, and whether it is decided:
  the boundaries below U's digits are counted, and the next one must lie above them
  (no boundary within ``WIDEN`` of the digits in the first pass, which compares U's
  first 32 digits with the boundaries' first 32 bits)."""
  if refined:
    row = lambda i: tuple(t[off + i] for t in tab)
    below = _count(lambda i: _lex_less(row(i), u), width, iters)
    nxt = row(jnp.minimum(below, width - 1))
    tie = functools.reduce(jnp.logical_and, [a == b for a, b in zip(nxt, u)])
  else:
    j, w, top = u[0], np.uint32(WIDEN), np.uint32(2**32 - 1)
    j_lo = jnp.where(j > w, j - w, np.uint32(0))
    j_hi = jnp.where(j < top - w, j + w, top)
    below = _count(lambda i: tab[off + i] < j_lo, width, iters)
    tie = tab[off + jnp.minimum(below, width - 1)] <= j_hi
  return below, ~(tie & (below < width))


def _size_pass(tab, u, tables, layout, n, refined):
  """One pass over the waves (a scan per run of waves searched alike): counts
  (V + 2, n) (the dummy and the sink last) and whether every choice was decided."""

  def wave(iters):
    def body(state, w):
      cnt, ok = state
      v, small, other, off, wid, idx = (w[:, i, None] for i in range(6))
      a = cnt[v[:, 0]]  # (W, n)
      uu = [x[jnp.maximum(idx[:, 0], 0)] for x in u]
      width = jnp.broadcast_to(wid, a.shape)
      s, good = _choose(tab, off + a * wid, width, uu, iters, refined)
      cnt = cnt.at[small[:, 0]].set(s).at[other[:, 0]].set(a - s)
      return (cnt, ok & jnp.all(good | (idx < 0), axis=0)), None

    return body

  state = jnp.zeros((layout.num_nodes + 2, n), jnp.int32), jnp.ones((n,), bool)
  for start, stop, iters in layout.runs:
    state, _ = lax.scan(wave(iters), state, tables.waves[start:stop])
  return state


def size_counts(key, key_more, tables: TreeTables, layout: TreeLayout, n: int):
  """Every node's A-count, (V + 2, n) int32 (the last two rows are scratch), whether
  the first pass decided all of a sample's choices, (n,) bool, and whether a
  sample's choices stayed undecided after the refined pass (n,) bool.

  Each choice's uniform U has its first 32 digits in one word of ``key`` (the first
  pass) and its next 160 in five words of ``key_more``, read only for a refined
  pass."""
  first = jax.random.bits(key, (layout.num_choices, n), jnp.uint32)
  cnt, ok = _size_pass(tables.first, [first], tables, layout, n, False)

  def refine(args):
    cnt, ok = args
    shape = (2 * CHOICE_WORDS - 1, layout.num_choices, n)
    more = jax.random.bits(key_more, shape, jnp.uint32)
    w = [first.astype(jnp.uint64)] + [x.astype(jnp.uint64) for x in more]
    u = [(w[2 * i] << np.uint64(32)) | w[2 * i + 1] for i in range(CHOICE_WORDS)]
    thr = [tables.thresholds[i] for i in range(CHOICE_WORDS)]
    cnt2, ok2 = _size_pass(thr, u, tables, layout, n, True)
    return jnp.where(ok[None, :], cnt, cnt2), ~ok & ~ok2

  cnt, failed = lax.cond(jnp.all(ok), lambda a: (a[0], ~a[1]), refine, (cnt, ok))
  return cnt, ok, failed


# ------------------------------------------------------------------ blocks
def _block(key, bt, a, size: int, n: int):
  """A block's subset (bitmask) and local sequence from one uniform rank."""
  r = uniform_below_each(key, bt.total[a], n)
  lo, width = bt.start[a], bt.start[a + 1] - bt.start[a]
  iters = math.comb(size, size // 2).bit_length()  # the largest size group
  i = lo + _count(lambda i: bt.cum[lo + i] <= r, width, iters)
  mask = bt.masks[i].astype(jnp.uint32)
  rest = r - (bt.cum[i] - bt.weight[i])
  full = jnp.uint32((1 << size) - 1)
  e_b = bt.ext[(mask ^ full).astype(jnp.int32)]
  q_a, q_b = rest // e_b, rest % e_b
  bits = jnp.left_shift(jnp.uint32(1), jnp.arange(size, dtype=jnp.uint32))
  s_set, q, seq = mask, q_a, []
  for step in range(size):
    switch = a == step
    s_set = jnp.where(switch, mask ^ full, s_set)
    q = jnp.where(switch, q_b, q)
    member = (s_set[:, None] & bits) != 0
    top = member & ((s_set[:, None] & bt.strict_up[None, :]) == 0)
    w = jnp.where(top, bt.ext[(s_set[:, None] ^ bits).astype(jnp.int32)], 0)
    c = jnp.cumsum(w, axis=1)
    x = jnp.sum(c <= q[:, None], axis=1).astype(jnp.int32)  # first x whose sum passes q
    prev = jnp.take_along_axis(c, jnp.maximum(x - 1, 0)[:, None], 1)[:, 0]
    before = jnp.where(x > 0, prev, 0)
    q = q - before
    s_set = s_set ^ jnp.left_shift(jnp.uint32(1), x.astype(jnp.uint32))
    seq.append(x)
  return mask, jnp.stack(seq, axis=1)


# ------------------------------------------------------------------ down-sets
def _down_set_first(pos, in_a, tables, layout, n):
  """(2, d, n): per part, the least position of an element of the part <= each."""
  num = layout.num_nodes
  mine = jnp.stack([jnp.where(in_a, pos, _BIG), jnp.where(in_a, _BIG, pos)])
  # the leaves' and blocks' minima, then the internal nodes', deepest depth first
  low_node = jnp.full((2, num, n), _BIG, jnp.int32).at[:, tables.anc[0]].min(mine)
  ends = layout.depths[1:] + (num,)
  for lo, hi in reversed(list(zip(layout.depths, ends))):
    lft, rgt = tables.left[lo:hi], tables.right[lo:hi]
    kids = jnp.minimum(low_node[:, jnp.maximum(lft, 0)], low_node[:, jnp.maximum(rgt, 0)])
    inner = (lft >= 0)[None, :, None]
    low_node = low_node.at[:, lo:hi].set(jnp.where(inner, kids, low_node[:, lo:hi]))

  height = tables.anc.shape[0]

  def climb(s, first):
    u, c = tables.anc[s], tables.anc[s - 1]
    uu = jnp.maximum(u, 0)
    use = (u >= 0) & (tables.kind[uu] == SERIES) & (c == tables.right[uu])
    cand = low_node[:, jnp.maximum(tables.left[uu], 0)]
    return jnp.where(use[None, :, None], jnp.minimum(first, cand), first)

  first = lax.fori_loop(1, height, climb, mine)
  for (_, elems), bt in zip(layout.blocks, tables.blocks):
    el = np.asarray(elems)
    m = mine[:, el]  # (2, L, n)
    le = jnp.asarray(bt.up)  # le[x, y]: x <= y
    inner = jnp.min(jnp.where(le[None, :, :, None], m[:, :, None], _BIG), axis=1)
    first = first.at[:, el].set(jnp.minimum(first[:, el], inner))
  return first
