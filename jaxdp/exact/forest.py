"""The ranks path's unranking for a forest numbered in preorder (NHIS-3): the same
bijection as :func:`~jaxdp.exact.choices.unrank`, with the extension counts from the
hook-length formula instead of table look-ups, and the chain positions the noise
needs (:func:`forest_low`) from subtree minima.

In a forest every element's up-set is a chain, so for any subset S the maximal
elements of S are the roots of its induced forest and (hook-length formula)
``e(S \\ x) = e(S) h_S(x) / |S|`` for a root x, h_S(x) the number of elements of S
below or equal to x. ``unrank`` takes the root x whose cumulative count of
``e(S \\ y)`` (roots y in index order) first passes the rest q; with the counts
``e(S) H_y / |S|`` (H_y the hooks summed up to y) that is the root with
``H_(x-1) <= u < H_x``, ``u = floor(q |S| / e(S))``. When the elements are
numbered in preorder each root's subtree is an index interval and the roots'
intervals follow one another, so x is the topmost element of S above the u-th
element of S (in index order), ``H_(x-1)`` counts the elements of S before x and
h_S(x) those in x's interval. Every quantity is an integer below N(P) d < 2^53,
exact in float64 (the one quotient that is not an integer, ``q |S| / e(S)``, is
floored and corrected with exact products).

References:
  D. E. Knuth, The Art of Computer Programming, vol. 3, 5.1.4, exercise 20 (the
  hook-length formula for forests).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.exact.choices import trie_subset
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.exact_tables import ExactTables
from jaxdp.samplers.words import stored
from jaxdp.typing import ArrayLike

__all__ = ["ForestOrder", "forest_low", "forest_order", "forest_unrank"]

FLOAT_EXACT = 1 << 53  # float64 holds every integer below this


class ForestOrder(tuple):
  """Static structure of a forest numbered in preorder (hashable, for ``jit``):
  ``(subtree_end, children)``, per element the end of its subtree's index interval
  and its children."""

  @property
  def subtree_end(self) -> tuple[int, ...]:
    return self[0]

  @property
  def children(self) -> tuple[tuple[int, ...], ...]:
    return self[1]


@by_relation(32)
def forest_order(poset: Poset, total: int) -> ForestOrder | None:
  """The :class:`ForestOrder` of ``poset`` when :func:`forest_unrank` applies: a
  forest whose numbering is a preorder (every subtree an index interval starting at
  its root) with N(P) d < 2^53; else None (cached per relation)."""
  parents = poset.parents
  d = poset.d
  if parents is None or total * max(d, 1) >= FLOAT_EXACT:
    return None
  order = poset.order  # order[i, j]: p_i <= p_j
  ends, children = [], [[] for _ in range(d)]
  for x in range(d):
    below = np.nonzero(order[:, x])[0]  # x's subtree
    end = x + len(below)
    if below.min() != x or below.max() != end - 1:
      return None
    ends.append(end)
    if parents[x] >= 0:
      children[parents[x]].append(x)
  return ForestOrder((tuple(ends), tuple(tuple(c) for c in children)))


def forest_unrank(
  rank: ArrayLike, tables: ExactTables, order: ForestOrder
) -> tuple[jax.Array, jax.Array]:
  """Object number ``rank`` in [0, N(P)), as :func:`~jaxdp.exact.choices.unrank`
  numbers it.

  Returns:
    seq (d, m) int32: row t the element taken at step t (A top down, then B top
    down; :func:`~jaxdp.exact.choices.unrank`'s ``seq`` transposed); size_a (m,)
    int32: |A|.
  """
  d = len(order.subtree_end)
  m = rank.shape[0]
  a, r = trie_subset(rank, tables, d)
  full = (1 << d) - 1
  e_a, e_b = tables.ext[a], tables.ext[full ^ a]
  r_a, r_b = r // e_b, r % e_b
  size_a = lax.population_count(a.astype(jnp.uint32)).astype(jnp.int32)
  f64, u32 = jnp.float64, jnp.uint32
  ends = np.asarray(order.subtree_end, np.uint32)
  anc = np.array(  # bit y set iff y is above or equal to x
    [sum(1 << y for y in range(d) if y <= x < ends[y]) for x in range(d)], np.uint32
  )
  below = lambda y: (u32(1) << y.astype(u32)) - u32(1)  # the elements before y
  count = lambda bits: lax.population_count(bits).astype(jnp.int32)
  rest = a.astype(u32) ^ u32(full)
  iters = max(1, (d - 1).bit_length())

  def step(i, state):
    s_set, q, e, seq = state
    i = i.astype(jnp.int32)  # int32 throughout: AVX2 converts int32, not int64
    switch = size_a == i
    s_set = jnp.where(switch, rest, s_set)
    q = jnp.where(switch, r_b.astype(f64), q)
    e = jnp.where(switch, e_b.astype(f64), e)
    s = jnp.where(i < size_a, size_a - i, d - i).astype(f64)  # |S|
    t = q * s
    u = jnp.floor(t / e)
    u = jnp.where(u * e > t, u - 1.0, u).astype(jnp.int32)  # floor(q |S| / e(S))
    # w: the u-th element of S (0-based, index order), by binary search on counts
    lo, hi = jnp.zeros((m,), jnp.int32), jnp.full((m,), d, jnp.int32)
    for _ in range(iters):  # invariant: count(S below lo) <= u < count(S below hi)
      mid = (lo + hi) // 2
      left = count(s_set & below(mid)) <= u
      lo, hi = jnp.where(left, mid, lo), jnp.where(left, hi, mid)
    above = s_set & lookup(anc, lo)  # S's elements above or equal to w: a chain
    x = count((above & (~above + u32(1))) - u32(1))  # the topmost: a root of S
    x = stored(x, s_set[0])  # computed once, not again in each consumer below
    before = count(s_set & below(x)).astype(f64)  # H_(x-1)
    hook = count(s_set & below(lookup(ends, x)) & ~below(x)).astype(f64)  # h_S(x)
    q = q - e * before / s  # exact: integers below 2^53, integer quotients
    e = e * hook / s
    return s_set ^ (u32(1) << x.astype(u32)), q, e, seq.at[i].set(x)

  init = (a.astype(u32), r_a.astype(f64), e_a.astype(f64), jnp.zeros((d, m), jnp.int32))
  _, _, _, seq = lax.fori_loop(0, d, step, init)  # (d, m): rows stay contiguous
  return seq, size_a


def forest_low(seq: ArrayLike, size_a: ArrayLike, order: ForestOrder) -> jax.Array:
  """(m, 2, d) int32: per part (A, B) and element j, the first position in the
  part's extension of an element of the part below or equal to j (the part's size
  where none), as :func:`~jaxdp.exact.tree.tree_objects` gives it."""
  d = len(order.subtree_end)
  pos = [sum(jnp.where(seq[t] == j, t, 0) for t in range(d)) for j in range(d)]
  in_a = [p < size_a for p in pos]
  big = jnp.int32(d + 1)
  low_a = _subtree_min([jnp.where(ia, p, big) for ia, p in zip(in_a, pos)], order)
  low_b = _subtree_min([jnp.where(ia, big, p - size_a) for ia, p in zip(in_a, pos)], order)
  low_a = jnp.minimum(jnp.stack(low_a, 1), size_a[:, None])
  low_b = jnp.minimum(jnp.stack(low_b, 1), (d - size_a)[:, None])
  return jnp.stack([low_a, low_b], axis=1)


def lookup(table: np.ndarray, idx):
  """``table[idx]`` for a small static table, by a tree of selects on the bits of
  ``idx`` (in range): vectorised, where XLA:CPU gathers element by element."""
  vals = [jnp.asarray(v) for v in table]
  bit = 0
  while len(vals) > 1:
    pick = ((idx >> bit) & 1) == 1
    vals = [
      jnp.where(pick, vals[i + 1], vals[i]) if i + 1 < len(vals) else vals[i]
      for i in range(0, len(vals), 2)
    ]
    bit += 1
  return jnp.broadcast_to(vals[0], idx.shape)


def _subtree_min(cols, order: ForestOrder):
  """Per element j (a list of (m,) arrays) the min over j's subtree."""
  cols = list(cols)
  for j in reversed(range(len(cols))):  # preorder: children have larger indices
    for c in order.children[j]:
      cols[j] = jnp.minimum(cols[j], cols[c])
  return cols
