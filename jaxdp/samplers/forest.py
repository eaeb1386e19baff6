"""The forest poset-ball sampler (forests, d <= FOREST_MAX_D): host tables and the traced
object sampler.

The weight e(A) e(B) factorises over the tree by the hook-length formula, so a tree
recursion over "how many A-elements lie in this subtree (and in the subtrees of its
later siblings)" gives N(P) and lets A be drawn top down. Uniform linear extensions of
both parts come from distinct random keys: top down, each element swaps in the
smallest key of its part within its subtree, which leaves a uniformly random heap
order (the hook-length law); the order of the keys is the extension. The random keys
carry the element's position in their low bits; a tie of the random bits, which the
position would break, has probability below 7.5e-6 for d <= 32 (one-word keys) and
below d^2 2^-57 above (two-word keys).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.logweights import cdf, logconv, logsumexp
from jaxdp.typing import KeyArray

__all__ = [
  "COLUMN_MAX_D",
  "FOREST_MAX_D",
  "ForestLayout",
  "ForestTables",
  "choose_parts",
  "forest_layout",
  "forest_objects",
  "forest_tables",
  "heap_keys_columns",
  "heap_keys_pairs",
  "is_forest",
  "num_objects",
]

FOREST_MAX_D = 128  # the forest table holds d (d+1) 2(d+1) float32 values (17 MiB)


class ForestTables(NamedTuple):
  top_cdf: jax.Array  # (d+1,) float32: CDF of k = |A|
  node_cdf: jax.Array  # (d, d+1, 2(d+1)) float32: per preorder node, per budget m,
  # CDF over options 2a + [node in A], a = A-count in its subtree
  up: jax.Array  # (d, d) bool
  labels: jax.Array  # (d,) int32: the element at each preorder position


class ForestLayout(NamedTuple):
  """The shape of a forest in preorder (hashable: the kernels' static argument).

  Positions are preorder positions; -1 means none. Forests with the same layout
  share one compiled kernel; which element sits at each position is data
  (``ForestTables.labels``).
  """

  first_child: tuple
  next_sibling: tuple
  subtree_size: tuple

  @property
  def d(self) -> int:
    return len(self.first_child)


@by_relation(32)
def is_forest(poset: Poset) -> bool:
  """Whether ``poset`` is a forest, from its relation alone (cached per relation)."""
  return poset.is_forest


@by_relation(32)
def forest_layout(poset: Poset) -> ForestLayout:
  """The forest's preorder layout: first-child and next-sibling links, subtree sizes."""
  return _forest_structure(poset)[1]


@by_relation(32)
def _forest_structure(poset: Poset):
  """``(preorder, layout)``: the elements in preorder, and the :class:`ForestLayout`."""
  parents = poset.parents
  d = poset.d
  children = [[] for _ in range(d)]
  roots = []
  for v, p in enumerate(parents):
    (roots if p < 0 else children[p]).append(v)
  pre, fc, ns = [], [-1] * d, [-1] * d
  pos = {}

  def visit(siblings):
    prev = None
    for v in siblings:
      pos[v] = len(pre)
      pre.append(v)
      if prev is not None:
        ns[pos[prev]] = pos[v]
      prev = v
      if children[v]:
        fc[pos[v]] = len(pre)
        visit(children[v])

  visit(roots)
  return tuple(pre), ForestLayout(tuple(fc), tuple(ns), tuple(_subtree_sizes(fc, ns)))


@by_relation(32)
def _forest_logs(poset: Poset):
  """Log-weights of the forest recursion (see module docstring).

  For preorder node v with subtree size s_v and children c_1..c_r:
    C_v = conv(W_c1, ..., W_cr)                  (delta_0 for a leaf)
    W_v(m) = C_v(m-1)/m + C_v(m)/(s_v - m)        (v in A / v in B)
    X_v = conv(W_v, X_next_sibling)               (sibling-suffix forest T_v)
  and P(|A| = k) is proportional to k! (d-k)! X_first_root(k). Here W_v(m) sums
  prod_{u in A} 1/h_A(u) prod_{u in B} 1/h_B(u) over subtree assignments with m
  A-elements, so k!(d-k)! X(k) = sum_{|A|=k} e(A) e(B) by the hook-length formula.
  """
  layout = forest_layout(poset)
  fc, ns, size = layout.first_child, layout.next_sibling, layout.subtree_size
  d = poset.d
  log_x = [None] * d
  log_c = [None] * d
  log_w = [None] * d
  for i in reversed(range(d)):
    s = size[i]
    c = log_x[fc[i]] if fc[i] >= 0 else np.zeros(1)
    log_c[i] = c  # length s
    m = np.arange(s + 1)
    w = np.full(s + 1, -np.inf)
    with np.errstate(divide="ignore"):
      in_a = np.concatenate([[-np.inf], c - np.log(m[1:])])  # m >= 1
      in_b = np.concatenate([c - np.log(s - m[:-1]), [-np.inf]])  # m <= s-1
    w = np.logaddexp(in_a, in_b)
    log_w[i] = w
    log_x[i] = logconv(w, log_x[ns[i]]) if ns[i] >= 0 else w
  k = np.arange(d + 1)
  lfact = np.array([math.lgamma(v + 1) for v in range(d + 1)])
  log_top = lfact[k] + lfact[d - k] + log_x[0]
  return log_top, log_c, log_x, size


@by_relation(32)
def forest_tables(poset: Poset) -> ForestTables:
  """The per-node CDFs of the tree recursion (host)."""
  d = poset.d
  pre, layout = _forest_structure(poset)
  ns, size = layout.next_sibling, layout.subtree_size
  log_top, log_c, log_x, _ = _forest_logs(poset)
  node_cdf = np.ones((d, d + 1, 2 * (d + 1)), dtype=np.float64)
  for i in range(d):
    s = size[i]
    t_len = len(log_x[i]) - 1  # |T_v|
    xn = log_x[ns[i]] if ns[i] >= 0 else np.zeros(1)
    c = log_c[i]
    for m in range(t_len + 1):
      lw = np.full(2 * (d + 1), -np.inf)
      for a in range(max(0, m - (len(xn) - 1)), min(s, m) + 1):
        rest = xn[m - a]
        if a >= 1:
          lw[2 * a + 1] = c[a - 1] - math.log(a) + rest
        if a <= s - 1:
          lw[2 * a] = c[a] - math.log(s - a) + rest
      node_cdf[i, m] = cdf(lw)
  # node_cdf is indexed by preorder position, up by element.
  return ForestTables(
    top_cdf=cdf(log_top).astype(np.float32),
    node_cdf=node_cdf.astype(np.float32),
    up=np.array(poset.order),
    labels=np.asarray(pre, np.int32),
  )


def _subtree_sizes(fc, ns):
  """Subtree size of every preorder position, from first-child / next-sibling links."""
  d = len(fc)
  size = [1] * d
  for i in reversed(range(d)):
    j = fc[i]
    while j >= 0:
      size[i] += size[j]
      j = ns[j]
  return size


def num_objects(poset: Poset) -> float:
  """N(P) of a forest, from the tree recursion."""
  return float(np.exp(logsumexp(_forest_logs(poset)[0])))


def forest_objects(
  key: KeyArray, tables: ForestTables, layout: ForestLayout, n: int, key_words: int
) -> tuple[jax.Array, jax.Array]:
  """Traced: ``n`` objects ``(seq, k)``; ``key_words`` 32-bit words per heap key."""
  d = layout.d
  k_top, k_node, k_ext = jax.random.split(key, 3)
  u_top = jax.random.uniform(k_top, (n,))
  u = jax.random.uniform(k_node, (n, d))
  k, in_b = choose_parts(u_top, [u[:, i] for i in range(d)], tables, layout)
  in_b = [b.astype(jnp.uint32) for b in in_b]
  # Uniform linear extensions of the induced forests on A and B at once: distinct
  # random keys, then, top down in preorder, swap the smallest key of v's part within
  # v's subtree into v. Each swap keeps the keys below v uniformly arranged, so the
  # result is a uniformly random heap order of each part, i.e. a uniform linear
  # extension (top = smallest key). Keys carry the element's position in their low
  # bits so they are distinct; a tie of the random bits (which the position would
  # break) is the only departure from exactness.
  heap_order = _heap_order_columns if key_words == 1 else _heap_order_pairs
  seq = heap_order(k_ext, in_b, layout, n, tables.labels)
  return seq, k


def choose_parts(
  u_top: jax.Array, u: Sequence[jax.Array], tables: ForestTables, layout: ForestLayout
) -> tuple[jax.Array, list[jax.Array]]:
  """Traced: ``k = |A|`` (n,) int32 and, per preorder position, whether it is in B
  ((n,) bool), from the uniforms ``u_top`` (n,) and ``u`` (d columns (n,)).

  Node i's CDF row is read only over its 2 (s_i + 1) options (s_i its subtree
  size): the others have weight zero, so their CDF entries are 1 and never count
  (u < 1); the choice is the same as over the whole row.
  """
  fc, ns, size = layout.first_child, layout.next_sibling, layout.subtree_size
  d = layout.d
  k = jnp.sum(tables.top_cdf[:, None] <= u_top[None, :], axis=0).astype(jnp.int32)
  k = jnp.minimum(k, d)
  budget = [None] * d
  budget[0] = k
  in_b = [None] * d  # by preorder position
  for i in range(d):
    row = tables.node_cdf[i, :, : 2 * (size[i] + 1)][budget[i]]  # (n, 2 (s_i + 1))
    opt = jnp.sum(row <= u[i][:, None], axis=1).astype(jnp.int32)
    cnt, here = opt // 2, opt % 2
    if fc[i] >= 0:
      budget[fc[i]] = cnt - here
    if ns[i] >= 0:
      budget[ns[i]] = budget[i] - cnt
    in_b[i] = here == 0
  return k, in_b


# Up to this d the heap-order step works column by column (fastest on CPU; XLA's
# compile time grows quickly beyond it). Keys are one 32-bit word: 31 - ceil(log2 d)
# random bits, so a tie has probability below d^2 2^-(32 - ceil(log2 d)) < 7.5e-6.
# Larger forests use two-word keys (ties below d^2 2^-57) and array slices.
COLUMN_MAX_D = 32


def heap_keys_columns(
  raw: Sequence[jax.Array], in_b: Sequence[jax.Array], layout: ForestLayout
) -> list[jax.Array]:
  """Uniformly random heap orders of both parts (module docstring), one column per
  preorder position: ``raw`` d (n,) uint32 random words, ``in_b`` d (n,) uint32 (1:
  in B). Returns the d swapped keys: 31 - ceil(log2 d) random high bits (a
  part's keys keep their values, permuted within the part), the original position
  in the low bits."""
  d, size = layout.d, layout.subtree_size
  low = max(1, (d - 1).bit_length())
  keys = [((raw[i] >> (low + 1)) << low) | jnp.uint32(i) for i in range(d)]
  for i in range(d):
    sub = range(i, i + size[i])  # v's subtree, preorder
    same = [in_b[j] == in_b[i] for j in sub]
    smallest = keys[i]
    for j, ok in zip(sub, same):
      smallest = jnp.where(ok, jnp.minimum(smallest, keys[j]), smallest)
    old = keys[i]
    for j, ok in zip(sub[1:], same[1:]):
      keys[j] = jnp.where(ok & (keys[j] == smallest), old, keys[j])
    keys[i] = smallest
  return keys


def _heap_order_columns(key, in_b, layout: ForestLayout, n, labels):
  """``labels`` (elements by preorder position) in A-then-B top-down order, working
  with one (n,) column per element."""
  d = layout.d
  raw = jax.random.bits(key, (n, d), jnp.uint32)
  keys = heap_keys_columns([raw[:, i] for i in range(d)], in_b, layout)
  sort_key = jnp.stack([keys[i] | (in_b[i] << 31) for i in range(d)], axis=1)
  return _order_from_keys(sort_key[:, None, :] < sort_key[:, :, None], labels)


def heap_keys_pairs(
  raw_hi: jax.Array,
  raw_lo: jax.Array,
  in_b: Sequence[jax.Array],
  layout: ForestLayout,
  low: int,
) -> tuple[jax.Array, jax.Array]:
  """As :func:`heap_keys_columns` with two-word keys and array slices: ``raw_hi``,
  ``raw_lo`` (n, d) uint32 random words, ``in_b`` d (n,) arrays (nonzero: in B).
  Returns the swapped ``(hi, lo)`` (n, d): 31 random bits in ``hi``, the position in
  the low ``low`` bits of ``lo``."""
  d, size = layout.d, layout.subtree_size
  hi = raw_hi >> 1  # (n, d), preorder order
  lo = ((raw_lo >> low) << low) | jnp.arange(d, dtype=jnp.uint32)
  part = jnp.stack([b.astype(jnp.uint32) for b in in_b], axis=1)
  top = jnp.uint32(0xFFFFFFFF)
  for i in range(d):
    if size[i] == 1:
      continue
    sub = slice(i, i + size[i])  # v's subtree, preorder
    h, l, b = hi[:, sub], lo[:, sub], part[:, sub]
    same = b == b[:, :1]
    min_h = jnp.min(jnp.where(same, h, top), axis=1, keepdims=True)
    min_l = jnp.min(jnp.where(same & (h == min_h), l, top), axis=1, keepdims=True)
    is_min = same & (l == min_l)  # lo alone is unique
    h = jnp.where(is_min, h[:, :1], h).at[:, 0].set(min_h[:, 0])
    l = jnp.where(is_min, l[:, :1], l).at[:, 0].set(min_l[:, 0])
    hi, lo = hi.at[:, sub].set(h), lo.at[:, sub].set(l)
  return hi, lo


def _heap_order_pairs(key, in_b, layout: ForestLayout, n, labels):
  """Same as :func:`_heap_order_columns` with two-word keys and array slices."""
  d = layout.d
  low = max(1, (d - 1).bit_length())
  raw = jax.random.bits(key, (2, n, d), jnp.uint32)
  hi, lo = heap_keys_pairs(raw[0], raw[1], in_b, layout, low)
  part = jnp.stack(in_b, axis=1)
  part_hi = hi | (part << 31)
  return _order_from_keys(
    _pair_less(part_hi[:, None, :], lo[:, None, :], part_hi[:, :, None], lo[:, :, None]),
    labels,
  )


def _order_from_keys(smaller, labels):
  """Column r holds the label whose key has rank r; ``smaller[:, x, y]`` = key_y <
  key_x. Counting (much faster than a sort on CPU for small d)."""
  pos = jnp.sum(smaller, axis=2)  # (n, d) rank of each index
  slot = jnp.arange(labels.shape[0], dtype=pos.dtype)
  return jnp.sum(jnp.where(pos[:, :, None] == slot, labels[None, :, None], 0), axis=1)


def _pair_less(a_hi, a_lo, b_hi, b_lo):
  """(a_hi, a_lo) < (b_hi, b_lo) lexicographically."""
  return (a_hi < b_hi) | ((a_hi == b_hi) & (a_lo < b_lo))
