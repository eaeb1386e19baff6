"""Exactly uniform interleavings of the decomposition tree's groups, for
:mod:`jaxdp.exact.tree`, sorted by comparator networks.

A group (a maximal run of parallel nodes) with members holding m_1, ..., m_r elements
of a part needs a uniformly random interleaving of the members' extensions. The
part's slots get iid 32-bit keys; the slots of ranks [m_1 + ... + m_(i-1),
m_1 + ... + m_i) in key order go to member i (a uniformly random partition of the
slots into the members' sizes: every partition has the same number of key orders),
and member i's j-th element takes its j-th slot (a second sort, by member and slot).
A sample with two equal keys in one part of a group redraws all its keys, which
conditions iid keys on being distinct and keeps their order uniform.

Both sorts are sorting networks over the slot axis, vectorised over the samples
(arrays laid out (slot, sample)): Batcher's bitonic network in its all-ascending form
(each merge's first step compares i with the block's mirror image), pruned past the
array's end (every comparator puts the minimum at the lower index, so an array padded
with +inf keeps the padding in place and every comparator touching it is a no-op).
Each group is sorted by its own network, groups of equal power-of-two class side by
side, so a group of g slots costs about g log^2 g / 4 comparisons; the keys sort in
place (the slot rides in the low bits), in 16-bit words for the second sort where
they fit. A network sorts any input (the 0-1 principle; tests enumerate every 0-1
input of small lengths), so the order is the one a comparison sort gives.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["interleave", "network_sort", "prefix_sum", "sort_groups"]


def prefix_sum(x, axis: int):
  """Inclusive prefix sums along ``axis`` by a parallel scan (XLA:CPU lowers
  ``cumsum`` to a windowed reduction, quadratic in the length)."""
  return lax.associative_scan(jnp.add, x, axis=axis)


def _step(x, block: int, mirror: bool):
  """One layer on axis 0: in each block, element i against i + block / 2 (mirror:
  against block - 1 - i), the minimum to the lower index; pairs past the end are
  dropped (the array continued with +inf)."""
  size, h = x.shape[0], block // 2
  full, rest = size // block * block, x.shape[1:]
  out = []
  if full:
    y = x[:full].reshape((full // block, 2, h) + rest)
    lo, hi = y[:, 0], jnp.flip(y[:, 1], 1) if mirror else y[:, 1]
    mn, mx = jnp.minimum(lo, hi), jnp.maximum(lo, hi)
    mx = jnp.flip(mx, 1) if mirror else mx
    out.append(jnp.stack([mn, mx], 1).reshape((full,) + rest))
  r, k = x[full:], size - full - h  # the last, partial block: k pairs
  if k > 0 and mirror:
    lo, hi = r[h - k : h], jnp.flip(r[h:], 0)
    out += [r[: h - k], jnp.minimum(lo, hi), jnp.flip(jnp.maximum(lo, hi), 0)]
  elif k > 0:
    out += [jnp.minimum(r[:k], r[h:]), r[k:h], jnp.maximum(r[:k], r[h:])]
  elif size > full:
    out.append(r)
  return out[0] if len(out) == 1 else jnp.concatenate(out, 0)


def network_sort(x):
  """``x`` sorted ascending along axis 0 by the pruned bitonic network (any length)."""
  block = 2
  while block // 2 < x.shape[0]:
    x = _step(x, block, True)
    half = block // 2
    while half >= 2:
      x = _step(x, half, False)
      half //= 2
    block *= 2
  return x


def sort_groups(x, groups: tuple):
  """Each group's rows of ``x`` (slot, sample) sorted: ``groups`` are (first row,
  size) in row order covering the rows; groups of one power-of-two class are padded
  with the dtype's largest value to the class's largest size and sorted together."""
  classes: dict = {}
  for g, (_, size) in enumerate(groups):
    classes.setdefault((size - 1).bit_length(), []).append(g)
  pieces = [None] * len(groups)
  top = np.iinfo(x.dtype).max
  for members in classes.values():
    length = max(groups[g][1] for g in members)
    cols = []
    for g in members:
      start, size = groups[g]
      col = x[start : start + size]
      if size < length:
        pad = jnp.full((length - size,) + x.shape[1:], top, x.dtype)
        col = jnp.concatenate([col, pad], 0)
      cols.append(col)
    out = network_sort(jnp.stack(cols, 1).reshape((length, -1)))
    out = out.reshape((length, len(members)) + x.shape[1:])
    for i, g in enumerate(members):
      pieces[g] = out[: groups[g][1], i]
  return pieces[0] if len(pieces) == 1 else jnp.concatenate(pieces, 0)


def interleave(key, cnt, tables, layout, n: int):
  """(slots, n) int32: per group and part, the local slot of each child-order index
  (the members' elements, member by member), from ``cnt`` (nodes, n), every node's
  A-count."""
  groups = layout.groups
  local = np.concatenate([np.arange(size) for _, size in groups])  # slot in its group
  same = local[1:] > 0  # row and the next in one group
  bits = max(1, int(max(size for _, size in groups) - 1).bit_length())
  a_g = cnt[tables.slot_node]  # (s, n): the group's count in A
  in_b = local[:, None] >= a_g
  base = (in_b.astype(jnp.uint64) << np.uint64(63)) | local[:, None].astype(np.uint64)

  def body(state):
    words, _, tie, i = state
    fresh = jax.random.bits(jax.random.fold_in(key, i), (n, layout.slots), jnp.uint32)
    words = jnp.where(tie[None, :], fresh.T, words)  # carried as 32 bits, not 64
    key1 = sort_groups(base | (words.astype(jnp.uint64) << np.uint64(bits)), groups)
    high = key1 >> np.uint64(bits)
    tie = jnp.any((high[1:] == high[:-1]) & same[:, None], axis=0)
    return words, key1, tie, i + 1

  zero = jnp.zeros((layout.slots, n), jnp.uint32)
  start = (zero, zero.astype(jnp.uint64), jnp.ones((n,), bool), 0)
  _, key1, _, _ = lax.while_loop(lambda st: jnp.any(st[2]), body, start)
  label = _labels(cnt, tables, layout, n)
  wide = 1 + layout.labels + bits
  dtype = jnp.uint16 if wide <= 16 else jnp.uint32
  slot = (key1 & np.uint64((1 << bits) - 1)).astype(dtype)
  key2 = (in_b.astype(dtype) << (wide - 1)) | (label.astype(dtype) << bits) | slot
  slot = (sort_groups(key2, groups) & dtype((1 << bits) - 1)).astype(jnp.int32)
  return slot - jnp.where(in_b, a_g, 0)


def _labels(cnt, tables, layout, n: int):
  """(slots, n) int32: the member of each rank position of its group's part (member
  i holds ranks [m_1 + ... + m_(i-1), m_1 + ... + m_i) of the part)."""
  s = layout.slots
  mem, top, first = tables.member[:, 0], tables.member[:, 1], tables.member[:, 2]
  m_a = cnt[mem]  # (C, n)
  m_b = tables.size[mem][:, None] - m_a
  rows = jnp.arange(n)[None, :]
  marks = jnp.zeros((s + 1, n), jnp.int32)
  for m, base in ((m_a, 0), (m_b, 1)):
    ex = prefix_sum(m, 0) - m
    off = ex - ex[first]  # exclusive sums within the group
    room = jnp.where(base, tables.size[top][:, None] - cnt[top], cnt[top])
    at = tables.slot[top][:, None] + jnp.where(base, cnt[top], 0) + off
    keep = (mem != tables.member[first, 0])[:, None] & (off < room)
    marks = marks.at[jnp.where(keep, at, s), rows].add(1)
  c = prefix_sum(marks[:s], 0)
  start = tables.slot[tables.slot_node][:, None]
  a_g = cnt[tables.slot_node]
  gstart = start + jnp.where(jnp.arange(s)[:, None] - start >= a_g, a_g, 0)
  return c - jnp.take_along_axis(c - marks[:s], gstart, axis=0)
