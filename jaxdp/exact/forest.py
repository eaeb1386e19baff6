"""The ranks path's object for a forest numbered in preorder (NHIS-3): A from the
rank's trie (:func:`~jaxdp.exact.choices.trie_subset`, probability e(A) e(B) / N(P)
exactly), then uniform linear extensions of both parts from one uniformly random
permutation, and the chain positions the noise needs (:func:`forest_low`) from
subtree minima.

The object (A, ext(A), ext(B)) has probability 1/N(P) exactly when, given A, the
extensions of A and of B are independent and uniform. Both come from a uniformly
random permutation of 0..d-1 read as distinct keys, one per element: top down in
preorder, each element swaps the smallest key of its part within its subtree into
its own place, which leaves a uniformly random heap order of each part (Knuth's
hook-length argument), so each part's keys in increasing order are a uniform linear
extension, and the two parts' relative orders are independent. The permutation is
exact: uniform integers below products of the radices 2, 3, ..., d (62-bit draws,
:func:`~jaxdp.exact.choices.uniform_below`) give independent uniform digits
c_y in [0, y] (mixed radix), and inserting element y at position c_y among the
elements before it is a bijection from the digits onto the permutations.

References:
  D. E. Knuth, The Art of Computer Programming, vol. 3, 5.1.1 (inversion tables) and
  5.1.4, exercise 20 (the hook-length formula for forests).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.exact.choices import trie_subset, uniform_below
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.words import stored
from jaxdp.typing import ArrayLike, KeyArray

__all__ = [
  "ForestOrder",
  "forest_low",
  "forest_object",
  "forest_order",
  "forest_positions",
  "heap_positions",
  "insert_places",
  "radix_groups",
  "uniform_permutation",
]

GROUP_MAX = 1 << 31  # a group's digits come from one int32 (vectorised division)


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
def forest_order(poset: Poset) -> ForestOrder | None:
  """The :class:`ForestOrder` of ``poset`` when :func:`forest_positions` applies: a
  forest whose numbering is a preorder (every subtree an index interval starting at
  its root); else None (cached per relation)."""
  parents = poset.parents
  d = poset.d
  if parents is None:
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


def radix_groups(d: int) -> tuple[tuple[int, ...], ...]:
  """The radices 2, 3, ..., d (digit c_y in [0, y] has radix y + 1) in consecutive
  groups, each group's product below ``GROUP_MAX`` (one 62-bit draw a group)."""
  groups, cur = [], []
  for radix in range(2, d + 1):
    if cur and math.prod(cur) * radix >= GROUP_MAX:
      groups.append(tuple(cur))
      cur = []
    cur.append(radix)
  return tuple(groups + [tuple(cur)] if cur else groups)


def uniform_permutation(key: KeyArray, d: int, m: int) -> list[jax.Array]:
  """``m`` independent, exactly uniform permutations of 0..d-1, as d (m,) int32
  columns (column y: element y's place), from uniform digits c_y in [0, y] (module
  docstring).

  Args:
    key: a key only children are derived from (one per radix group).
  """
  u32 = jnp.uint32
  digits = [jnp.zeros((m,), jnp.int32)]  # c_0 = 0
  groups = radix_groups(d)
  for k_group, radices in zip(jax.random.split(key, len(groups)), groups):
    r = uniform_below(k_group, math.prod(radices), m).astype(u32)  # exact, < 2^31
    for radix in radices:  # unsigned: division by a constant vectorises
      digits.append((r % u32(radix)).astype(jnp.int32))
      r = r // u32(radix)
  return insert_places(digits)


def insert_places(digits: list[jax.Array]) -> list[jax.Array]:
  """The permutation of digits c_y in [0, y] (one (m,) int32 column each): element y
  inserted at place c_y among the elements before it, which move up from that place
  on. Returns each element's final place."""
  place = []
  for c in digits:
    place = [p + (p >= c).astype(jnp.int32) for p in place] + [c]
  return place


def forest_object(
  k_rank: KeyArray, k_ext: KeyArray, tables, total: int, order: ForestOrder, m: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """``m`` exactly uniform objects: A from a uniform rank below ``total`` = N(P)
  (the trie of :class:`~jaxdp.samplers.exact_tables.ExactTables` ``tables``), the
  extensions from :func:`forest_positions`.

  Args:
    k_rank, k_ext: two keys, only children derived from each.

  Returns:
    low (m, 2, d) (:func:`forest_low`), size_a (m,) int32 |A|, pos (d, m) int32.
  """
  a, _ = trie_subset(uniform_below(k_rank, total, m), tables, len(order.subtree_end))
  a = stored(a, a[0].astype(jnp.uint32))  # d dependent look-ups: once, not per use
  size_a = lax.population_count(a.astype(jnp.uint32)).astype(jnp.int32)
  pos = forest_positions(k_ext, a, order)
  return forest_low(pos, size_a, order), size_a, pos


def forest_positions(key: KeyArray, a: ArrayLike, order: ForestOrder) -> jax.Array:
  """Uniform linear extensions of A and of B (module docstring), independent and
  exactly uniform given A.

  Args:
    key: a key only children are derived from (:func:`uniform_permutation`).
    a: (m,) integer bit masks of A (bit x set iff element x is in A).
    order: the forest's :class:`ForestOrder`.

  Returns:
    (d, m) int32: per element its position in the sequence A top down, then B top
    down (an element of B at position p is B's (p - |A|)-th).
  """
  return heap_positions(
    uniform_permutation(key, len(order.subtree_end), a.shape[0]), a, order
  )


def heap_positions(keys: list[jax.Array], a: ArrayLike, order: ForestOrder) -> jax.Array:
  """:func:`forest_positions` from given keys: each sample's d keys (a list of d
  (m,) int32 columns) a permutation of 0..d-1, swapped top down into heap order of
  each part, then ranked within the parts.

  Raises:
    ValueError: d > 32 (the keys are counted in 32-bit sets; the ranks path, the
      only caller, has d <= 22).
  """
  ends = order.subtree_end
  d = len(ends)
  if d > 32:
    raise ValueError(f"heap_positions counts keys in 32-bit sets: d <= 32; got {d}.")
  keys = list(keys)
  in_b = [((a >> x) & 1) == 0 for x in range(d)]
  for x in range(d):  # top down in preorder: x's subtree is [x, ends[x])
    sub = range(x + 1, ends[x])
    same = [in_b[y] == in_b[x] for y in sub]
    smallest = keys[x]
    for y, ok in zip(sub, same):
      smallest = jnp.where(ok, jnp.minimum(smallest, keys[y]), smallest)
    for y, ok in zip(sub, same):  # the keys are distinct: one y holds the smallest
      keys[y] = jnp.where(ok & (keys[y] == smallest), keys[x], keys[y])
    keys[x] = smallest
  keys = stored(keys, a[0].astype(jnp.uint32))  # once, not in each use below
  # a part's rank of key v: the part's keys below v, counted in a bit set of keys
  u32 = jnp.uint32
  bit = [u32(1) << k.astype(u32) for k in keys]
  set_b = u32(0)
  for x in range(d):
    set_b = set_b | jnp.where(in_b[x], bit[x], u32(0))
  set_a = set_b ^ u32((1 << d) - 1)
  size_a = lax.population_count(set_a).astype(jnp.int32)
  count = lambda s: lax.population_count(s).astype(jnp.int32)
  pos = [
    jnp.where(in_b[x], size_a + count(set_b & (bit[x] - 1)), count(set_a & (bit[x] - 1)))
    for x in range(d)
  ]
  return stored(jnp.stack(pos), a[0].astype(jnp.uint32))  # once, not in each use


def forest_low(pos: ArrayLike, size_a: ArrayLike, order: ForestOrder) -> jax.Array:
  """(m, 2, d) int32: per part (A, B) and element j, the first position in the
  part's extension of an element of the part below or equal to j (the part's size
  where none), as :func:`~jaxdp.exact.tree.tree_objects` gives it, from
  :func:`forest_positions`' ``pos`` (d, m)."""
  d = len(order.subtree_end)
  in_a = [pos[j] < size_a for j in range(d)]
  big = jnp.int32(d + 1)
  low_a = _subtree_min([jnp.where(ia, pos[j], big) for j, ia in enumerate(in_a)], order)
  low_b = _subtree_min(
    [jnp.where(ia, big, pos[j] - size_a) for j, ia in enumerate(in_a)], order
  )
  low_a = jnp.minimum(jnp.stack(low_a, 1), size_a[:, None])
  low_b = jnp.minimum(jnp.stack(low_b, 1), (d - size_a)[:, None])
  return jnp.stack([low_a, low_b], axis=1)


def _subtree_min(cols, order: ForestOrder):
  """Per element j (a list of (m,) arrays) the min over j's subtree."""
  cols = list(cols)
  for j in reversed(range(len(cols))):  # preorder: children have larger indices
    for c in order.children[j]:
      cols[j] = jnp.minimum(cols[j], cols[c])
  return cols
