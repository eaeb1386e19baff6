"""Exact uniform sampling of the poset ball, part 2: the traced kernels.

The tables (:mod:`jaxdp._poset_tables`) are passed as data; only ``d``, the method,
the forest layout and the sizes are static, so posets of the same size (general
sampler) or the same forest shape (forest sampler) share one compilation. See
:mod:`jaxdp._poset_tables` for the algorithms and what is exact.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from jaxdp import _sp_kernels, _sp_tables
from jaxdp._poset_tables import (ForestLayout, ForestTables, GeneralTables,
                                 forest_layout, forest_tables, general_tables,
                                 resolve_method)
from jaxdp.posets import Poset


def tables_and_layout(poset: Poset, method: str):
  """Host side: ``(method, tables, layout)`` for the kernels (layout None: general)."""
  method = resolve_method(poset, method)
  if method == "general":
    return method, general_tables(poset), None
  if method == "sp":
    return (method, *_sp_tables.sp_tables(poset))
  return method, forest_tables(poset), forest_layout(poset)


def sample_objects(key, poset: Poset, method: str, n: int, *,
                   key_words: int | None = None):
  """Draws ``n`` objects: ``seq`` (n, d) int32 elements in order of addition, ``k`` (n,).

  ``key_words`` (forest sampler only, static): 1 or 2 32-bit words per heap key;
  ``None`` picks 1 for d <= 32 and 2 above (see ``_COLUMN_MAX_D``).
  """
  method, tables, layout = tables_and_layout(poset, method)
  return _objects_jit(key, tables, d=poset.d, layout=layout, n=n, key_words=key_words)


@functools.partial(jax.jit, static_argnames=("d", "layout", "n", "key_words"))
def _objects_jit(key, tables, *, d, layout, n, key_words):
  tables = jax.tree_util.tree_map(jnp.asarray, tables)  # numpy when jit is disabled
  return objects(key, tables, d, layout, n, key_words=key_words)


def objects(key, tables, d: int, layout, n: int, *, key_words: int | None = None):
  """Traceable object sampler: the general algorithm when ``layout`` is None, the
  series-parallel one for an ``SPLayout``, else the forest algorithm for that
  layout."""
  if layout is None:
    return _objects_general(key, tables, d, n)
  if isinstance(layout, _sp_tables.SPLayout):
    return _sp_kernels.sp_objects(key, tables, layout, n)
  if key_words is None:
    key_words = 1 if d <= _COLUMN_MAX_D else 2
  if key_words not in (1, 2):
    raise ValueError(f"key_words must be 1 or 2; got {key_words!r}.")
  return _objects_forest(key, tables, layout, n, key_words)


def _objects_general(key, t: GeneralTables, d: int, n: int):
  k_trie, k_ext = jax.random.split(key)
  u = jax.random.uniform(k_trie, (n, d))
  v = jax.random.uniform(k_ext, (n, d))
  a = jnp.zeros((n,), jnp.int32)
  for level in range(d):
    p = t.trie[(1 << level) - 1 + a]
    a = 2 * a + (u[:, level] < p).astype(jnp.int32)
  a = a.astype(jnp.uint32)
  k = jax.lax.population_count(a).astype(jnp.int32)
  return linear_extensions(t.ext, t.strict_up, a, k, v, d), k


def linear_extensions(ext, strict_up, a, k, v, d: int):
  """Uniform linear extensions of A (bitmask ``a``, ``k = |A|``) and of its
  complement, top down: repeatedly take a maximal x of the rest S with probability
  e(S \\ x) / e(S) (``ext`` = e over all subsets), with uniforms ``v`` (n, d).
  Returns (n, d) elements, A's first."""
  bits = jnp.left_shift(jnp.uint32(1), jnp.arange(d, dtype=jnp.uint32))
  rest = a ^ jnp.uint32((1 << d) - 1)
  s_set = a
  seq = []
  for s in range(d):
    s_set = jnp.where(k == s, rest, s_set)
    member = (s_set[:, None] & bits) != 0
    top = member & ((s_set[:, None] & strict_up[None, :]) == 0)
    # Candidates read e(S \ x); the others read e(S), one address (fewer misses).
    idx = jnp.where(top, s_set[:, None] ^ bits, s_set[:, None]).astype(jnp.int32)
    w = jnp.where(top, jnp.take(ext, idx, mode="clip"), 0.0)
    x = _categorical(w, v[:, s], top)
    s_set = s_set ^ jnp.left_shift(jnp.uint32(1), x.astype(jnp.uint32))
    seq.append(x)
  return jnp.stack(seq, axis=1)


def _categorical(w, u, valid):
  """Index i with probability w_i / sum(w) (w >= 0, zero where not ``valid``), by
  inverse CDF with uniform u: the first valid i whose partial sum exceeds u * total.

  The partial sums are one matrix product with a triangular matrix of ones, not
  ``cumsum``, which XLA:CPU lowers to a windowed reduction (with it the general
  sampler ran at 9.1x the RNG floor at d = 20, with the product 3.5x:
  ``benchmarks/samplers.py``).
  A product need not round its partial sums monotonically, so the choice is the
  first *valid* index past the threshold, never one with w_i = 0; when u * total
  rounds up to the total, the last valid index.
  """
  d = w.shape[1]
  tri = jnp.triu(jnp.ones((d, d), w.dtype))
  c = jnp.dot(w, tri, precision=jax.lax.Precision.HIGHEST)
  idx = jnp.arange(d, dtype=jnp.int32)
  last = jnp.max(jnp.where(valid, idx, -1), axis=1)
  past = valid & (c > (u * c[:, -1])[:, None])
  return jnp.min(jnp.where(past, idx, last[:, None]), axis=1)


def _objects_forest(key, t: ForestTables, layout: ForestLayout, n: int, key_words: int):
  fc, ns = layout.first_child, layout.next_sibling
  d = layout.d
  k_top, k_node, k_ext = jax.random.split(key, 3)
  u_top = jax.random.uniform(k_top, (n,))
  u = jax.random.uniform(k_node, (n, d))
  k = jnp.sum(t.top_cdf[None, :] <= u_top[:, None], axis=1).astype(jnp.int32)
  k = jnp.minimum(k, d)
  budget = [None] * d
  budget[0] = k
  in_b = [None] * d                                      # by preorder position
  for i in range(d):
    row = t.node_cdf[i][budget[i]]                         # (n, 2(d+1))
    opt = jnp.sum(row <= u[:, i:i + 1], axis=1).astype(jnp.int32)
    cnt, here = opt // 2, opt % 2
    if fc[i] >= 0:
      budget[fc[i]] = cnt - here
    if ns[i] >= 0:
      budget[ns[i]] = budget[i] - cnt
    in_b[i] = (1 - here).astype(jnp.uint32)
  # Uniform linear extensions of the induced forests on A and B at once: distinct
  # random keys, then, top down in preorder, swap the smallest key of v's part within
  # v's subtree into v. Each swap keeps the keys below v uniformly arranged, so the
  # result is a uniformly random heap order of each part, i.e. a uniform linear
  # extension (top = smallest key). Keys carry the element's position in their low
  # bits so they are distinct; a tie of the random bits (which the position would
  # break) is the only departure from exactness.
  heap_order = _heap_order_columns if key_words == 1 else _heap_order_pairs
  seq = heap_order(k_ext, in_b, layout, n, t.labels)
  return seq, k


# Up to this d the heap-order step works column by column (fastest on CPU; XLA's
# compile time grows quickly beyond it). Keys are one 32-bit word: 31 - ceil(log2 d)
# random bits, so a tie has probability below d^2 2^-(32 - ceil(log2 d)) < 7.5e-6.
# Larger forests use two-word keys (ties below d^2 2^-57) and array slices.
_COLUMN_MAX_D = 32


def _heap_order_columns(key, in_b, layout: ForestLayout, n, labels):
  """``labels`` (elements by preorder position) in A-then-B top-down order, working
  with one (n,) column per element."""
  d, size = layout.d, layout.subtree_size
  low = max(1, (d - 1).bit_length())
  raw = jax.random.bits(key, (n, d), jnp.uint32)
  keys = [((raw[:, i] >> (low + 1)) << low) | jnp.uint32(i) for i in range(d)]
  for i in range(d):
    sub = range(i, i + size[i])                            # v's subtree, preorder
    same = [in_b[j] == in_b[i] for j in sub]
    smallest = keys[i]
    for j, ok in zip(sub, same):
      smallest = jnp.where(ok, jnp.minimum(smallest, keys[j]), smallest)
    old = keys[i]
    for j, ok in zip(sub[1:], same[1:]):
      keys[j] = jnp.where(ok & (keys[j] == smallest), old, keys[j])
    keys[i] = smallest
  sort_key = jnp.stack([keys[i] | (in_b[i] << 31) for i in range(d)], axis=1)
  return _order_from_keys(sort_key[:, None, :] < sort_key[:, :, None], labels)


def _heap_order_pairs(key, in_b, layout: ForestLayout, n, labels):
  """Same as :func:`_heap_order_columns` with two-word keys and array slices."""
  d, size = layout.d, layout.subtree_size
  low = max(1, (d - 1).bit_length())
  raw = jax.random.bits(key, (2, n, d), jnp.uint32)
  hi = raw[0] >> 1                                         # (n, d), preorder order
  lo = ((raw[1] >> low) << low) | jnp.arange(d, dtype=jnp.uint32)
  part = jnp.stack(in_b, axis=1)
  top = jnp.uint32(0xFFFFFFFF)
  for i in range(d):
    if size[i] == 1:
      continue
    sub = slice(i, i + size[i])                            # v's subtree, preorder
    h, l, b = hi[:, sub], lo[:, sub], part[:, sub]
    same = b == b[:, :1]
    min_h = jnp.min(jnp.where(same, h, top), axis=1, keepdims=True)
    min_l = jnp.min(jnp.where(same & (h == min_h), l, top), axis=1, keepdims=True)
    is_min = same & (l == min_l)                           # lo alone is unique
    h = jnp.where(is_min, h[:, :1], h).at[:, 0].set(min_h[:, 0])
    l = jnp.where(is_min, l[:, :1], l).at[:, 0].set(min_l[:, 0])
    hi, lo = hi.at[:, sub].set(h), lo.at[:, sub].set(l)
  part_hi = hi | (part << 31)
  return _order_from_keys(_pair_less(part_hi[:, None, :], lo[:, None, :],
                                     part_hi[:, :, None], lo[:, :, None]), labels)


def _order_from_keys(smaller, labels):
  """Column r holds the label whose key has rank r; ``smaller[:, x, y]`` = key_y <
  key_x. Counting (much faster than a sort on CPU for small d)."""
  pos = jnp.sum(smaller, axis=2)                           # (n, d) rank of each index
  slot = jnp.arange(labels.shape[0], dtype=pos.dtype)
  return jnp.sum(jnp.where(pos[:, :, None] == slot, labels[None, :, None], 0), axis=1)


def _pair_less(a_hi, a_lo, b_hi, b_lo):
  """(a_hi, a_lo) < (b_hi, b_lo) lexicographically."""
  return (a_hi < b_hi) | ((a_hi == b_hi) & (a_lo < b_lo))


def points(key_obj, key_exp, tables, d: int, layout, n: int, dtype):
  """Exactly uniform points of the ball, (n, d+1): an object from ``key_obj``, its
  simplex's Dirichlet weights from ``key_exp``."""
  if isinstance(layout, _sp_tables.SPLayout):
    return _sp_kernels.sp_points(key_obj, key_exp, tables, layout, n, dtype)
  seq, k = objects(key_obj, tables, d, layout, n)
  return uniform_points(key_exp, seq, k, tables.up, dtype)


def chunk_size(layout, chunk: int) -> int:
  """Samples per chunk for ``layout`` (the series-parallel kernel keeps per-node
  arrays and takes smaller chunks on large posets)."""
  if isinstance(layout, _sp_tables.SPLayout):
    return _sp_kernels.chunk_size(layout, chunk)
  return chunk


def uniform_points(key, seq, k, up, dtype):
  """Exactly uniform points of each object's simplex (so of the ball): Dirichlet(1)
  weights from d + 2 exponentials on the vertices. Returns (n, d+1), root first."""
  expo = jax.random.exponential(key, (seq.shape[0], seq.shape[1] + 2), dtype)
  return chain_noise(seq, k, expo, up, dtype) / jnp.sum(expo, axis=1, keepdims=True)


def chain_noise(seq, k, expo, up, dtype):
  """sum_i E_i v_i over the simplex of each object: (n, d+1), root first.

  A's vertices (1, 1_F0..Fk) take E[0..k], B's -(1, 1_G0..Gl) take E[k+1..d+1].
  Coordinate j accumulates E_i over the chain filters containing j.
  """
  n, d = seq.shape
  f = jnp.zeros((n, d), bool)
  coord = jnp.zeros((n, d), dtype)
  for s in range(d):
    is_a = s < k
    f = jnp.where((k == s)[:, None], False, f) | up[seq[:, s]]
    coeff = jnp.where(is_a, expo[:, s + 1], -expo[:, s + 2])
    coord = coord + coeff[:, None] * f.astype(dtype)
  idx = jnp.arange(d + 2)
  root = jnp.sum(jnp.where(idx[None, :] <= k[:, None], expo, -expo), axis=1)
  return jnp.concatenate([root[:, None], coord], axis=1)
