"""Exact uniform sampling of the poset ball: host-side tables and batched kernels.

The poset ball of a poset P on d elements is K = conv{+-(1, 1_F) : F a filter}, a
polytope in R^(d+1). It is tiled by equal-volume simplices, one per *object*
(A, ext(A), ext(B)): an ordered bipartition P = A + B and a linear extension of each
part. Object (A, a_1 < ... < a_k, b_1 < ... < b_l) has the simplex with vertices
(1, 1_F0), ..., (1, 1_Fk), -(1, 1_G0), ..., -(1, 1_Gl), where F_0 = {} and
F_i = F_(i-1) U up(a_(k-i+1)) (A added top down), likewise G from B. So a uniform
point of K is a uniformly random object plus Dirichlet(1, ..., 1) weights on the
vertices of its simplex; with E_0..E_D iid Exp(1), sum_i E_i v_i is that point times
an independent Gamma(D + 1) radius, which is exactly K-norm noise (up to 1/eps).

An object is represented by ``seq`` (the elements in the order they are added: A top
down, then B top down) and ``k = |A|``.

Two exact algorithms choose the object:

* ``general`` (any poset, d <= GENERAL_MAX_D): with e(S) the number of linear
  extensions of the subposet induced on S (a table over all 2^d subsets), A is drawn
  with probability e(A) e(P \\ A) / N(P) by descending a binary trie over the bits of
  A (one conditional probability per trie node), then a uniform linear extension of
  each part by repeatedly taking a maximal x as the next top with probability
  e(S \\ x) / e(S).
* ``forest`` (forests, d <= FOREST_MAX_D): the weight e(A) e(B) factorises over the
  tree by the hook-length formula, so a tree recursion over "how many A-elements lie in
  this subtree (and in the subtrees of its later siblings)" gives N(P) and lets A be
  drawn top down. Uniform linear extensions of both parts come from distinct random
  keys: top down, each element swaps in the smallest key of its part within its
  subtree, which leaves a uniformly random heap order (the hook-length law); the
  order of the keys is the extension.

Discrete choices compare float32 uniforms with float32 conditional probabilities that
were computed in float64, so each choice is exact up to float32 rounding (relative
error below 1e-6 per object). The forest sampler's random keys carry the element's
position in their low bits; a tie of the random bits, which the position would break,
has probability below 7.5e-6 for d <= 32 (one-word keys) and below d^2 2^-57 above
(two-word keys). Both are far below what any feasible sample can detect.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.posets import Poset

GENERAL_MAX_D = 22   # the tables hold 2^d float32 values twice (32 MiB at d = 22)
FOREST_MAX_D = 128   # the forest table holds d (d+1) 2(d+1) float32 values (17 MiB)
METHODS = ("auto", "forest", "general")


class GeneralTables(NamedTuple):
  trie: jax.Array       # (2^d - 1,) float32: P(next bit of A is 1 | bits so far)
  ext: jax.Array        # (2^d,) float32: e(S), linear extensions of the subposet S
  strict_up: jax.Array  # (d,) uint32: bitmask of {y : p_x < p_y}
  up: jax.Array         # (d, d) bool: up[x, j] = p_x <= p_j


class ForestTables(NamedTuple):
  top_cdf: jax.Array    # (d+1,) float32: CDF of k = |A|
  node_cdf: jax.Array   # (d, d+1, 2(d+1)) float32: per preorder node, per budget m,
                        # CDF over options 2a + [node in A], a = A-count in its subtree
  up: jax.Array         # (d, d) bool


# ------------------------------------------------------------------ method choice
def resolve_method(poset: Poset, method: str) -> str:
  """Chooses the sampler for ``poset``; raises ValueError if it cannot be used."""
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
  d = poset.d
  if method == "auto":
    if poset.is_forest and d <= FOREST_MAX_D:
      return "forest"
    method = "general"
  if method == "forest":
    if not poset.is_forest:
      raise ValueError(
          "method='forest' needs a forest (every element with at most one element "
          f"directly above it); {poset!r} is not one. Use method='general' or 'auto'.")
    if d > FOREST_MAX_D:
      raise ValueError(
          f"method='forest' supports d <= {FOREST_MAX_D} (its table grows as d^3); "
          f"got d = {d}.")
    return "forest"
  if d > GENERAL_MAX_D:
    hint = (f" It is a forest, but the forest sampler supports d <= {FOREST_MAX_D}."
            if poset.is_forest else "")
    raise ValueError(
        f"the general poset-ball sampler supports d <= {GENERAL_MAX_D} (its tables hold "
        f"2^d entries); got d = {d}.{hint} Split the poset into independent "
        "components or use a forest-shaped poset.")
  return "general"


def num_objects(poset: Poset) -> float:
  """N(P) = sum over A of e(A) e(P \\ A); the ball's normalised volume is 2 N(P)."""
  method = resolve_method(poset, "auto")
  if method == "general":
    e = _extension_counts(poset)
    full = (1 << poset.d) - 1
    idx = np.arange(1 << poset.d)
    return float(np.sum(e * e[full ^ idx]))
  log_top = _forest_logs(poset)[0]
  return float(np.exp(_logsumexp(log_top)))


# ------------------------------------------------------------------ host tables
# Tables are cached numpy arrays (never device arrays created during a trace); the
# kernels receive them as jit arguments.
@functools.lru_cache(maxsize=32)
def general_tables(poset: Poset) -> GeneralTables:
  d = poset.d
  e = _extension_counts(poset)
  full = (1 << d) - 1
  idx = np.arange(1 << d)
  w = e * e[full ^ idx]
  trie = np.empty((1 << d) - 1, dtype=np.float64)
  for level in range(d):
    sums = w.reshape(1 << (level + 1), -1).sum(axis=1)
    parent = sums.reshape(-1, 2).sum(axis=1)
    trie[(1 << level) - 1:(1 << (level + 1)) - 1] = sums[1::2] / parent
  o = poset.order
  strict = o & ~np.eye(d, dtype=bool)
  strict_up = (strict.astype(np.uint64) << np.arange(d, dtype=np.uint64)).sum(axis=1)
  return GeneralTables(
      trie=trie.astype(np.float32),
      ext=e.astype(np.float32),
      strict_up=strict_up.astype(np.uint32),
      up=np.array(o))


@functools.lru_cache(maxsize=32)
def _extension_counts(poset: Poset) -> np.ndarray:
  """e(S) for every subset S (bit x of S = element x), as float64."""
  d = poset.d
  o = poset.order
  strict = o & ~np.eye(d, dtype=bool)
  strict_up = [int(sum(1 << int(y) for y in np.nonzero(strict[x])[0])) for x in range(d)]
  masks = np.arange(1 << d, dtype=np.int64)
  pop = np.zeros(1 << d, dtype=np.int64)
  for x in range(d):
    pop += (masks >> x) & 1
  e = np.zeros(1 << d, dtype=np.float64)
  e[0] = 1.0
  for size in range(1, d + 1):
    layer = masks[pop == size]
    acc = np.zeros(layer.shape, dtype=np.float64)
    for x in range(d):
      # x is removable as the top when it is in S and nothing above it is in S
      sel = ((layer >> x) & 1).astype(bool) & ((layer & strict_up[x]) == 0)
      acc[sel] += e[layer[sel] ^ (1 << x)]
    e[layer] = acc
  return e


@functools.lru_cache(maxsize=32)
def _forest_structure(poset: Poset):
  """Preorder of the forest with first-child / next-sibling links (preorder positions)."""
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
  return pre, fc, ns, _subtree_sizes(fc, ns)


@functools.lru_cache(maxsize=32)
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
  pre, fc, ns, size = _forest_structure(poset)
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
      in_a = np.concatenate([[-np.inf], c - np.log(m[1:])])           # m >= 1
      in_b = np.concatenate([c - np.log(s - m[:-1]), [-np.inf]])       # m <= s-1
    w = np.logaddexp(in_a, in_b)
    log_w[i] = w
    log_x[i] = _logconv(w, log_x[ns[i]]) if ns[i] >= 0 else w
  k = np.arange(d + 1)
  lfact = np.array([math.lgamma(v + 1) for v in range(d + 1)])
  log_top = lfact[k] + lfact[d - k] + log_x[0]
  return log_top, log_c, log_x, size


@functools.lru_cache(maxsize=32)
def forest_tables(poset: Poset) -> ForestTables:
  d = poset.d
  pre, fc, ns, size = _forest_structure(poset)
  log_top, log_c, log_x, _ = _forest_logs(poset)
  node_cdf = np.ones((d, d + 1, 2 * (d + 1)), dtype=np.float64)
  for i in range(d):
    s = size[i]
    t_len = len(log_x[i]) - 1        # |T_v|
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
      node_cdf[i, m] = _cdf(lw)
  # node_cdf is indexed by preorder position, up by element.
  return ForestTables(
      top_cdf=_cdf(log_top).astype(np.float32),
      node_cdf=node_cdf.astype(np.float32),
      up=np.array(poset.order))


def _logsumexp(x):
  m = np.max(x)
  return m + np.log(np.sum(np.exp(x - m))) if np.isfinite(m) else m


def _logconv(a, b):
  out = np.full(len(a) + len(b) - 1, -np.inf)
  for i, v in enumerate(a):
    if np.isfinite(v):
      out[i:i + len(b)] = np.logaddexp(out[i:i + len(b)], v + b)
  return out


def _cdf(logw):
  p = np.exp(logw - np.max(logw))
  c = np.cumsum(p) / p.sum()
  last = np.nonzero(p)[0][-1]
  c[last:] = 1.0
  return c


# ------------------------------------------------------------------ kernels
def sample_objects(key, poset: Poset, method: str, n: int, *,
                   key_words: int | None = None):
  """Draws ``n`` objects: ``seq`` (n, d) int32 elements in order of addition, ``k`` (n,).

  ``key_words`` (forest sampler only, static): 1 or 2 32-bit words per heap key;
  ``None`` picks 1 for d <= 32 and 2 above (see ``_COLUMN_MAX_D``).
  """
  method = resolve_method(poset, method)
  tables = general_tables(poset) if method == "general" else forest_tables(poset)
  return _objects_jit(key, tables, poset=poset, method=method, n=n,
                      key_words=key_words)


@functools.partial(jax.jit, static_argnames=("poset", "method", "n", "key_words"))
def _objects_jit(key, tables, *, poset, method, n, key_words):
  tables = jax.tree_util.tree_map(jnp.asarray, tables)  # numpy when jit is disabled
  return objects(key, tables, poset, method, n, key_words=key_words)


def objects(key, tables, poset: Poset, method: str, n: int, *,
            key_words: int | None = None):
  """Traceable object sampler used by the public kernels."""
  if method == "general":
    return _objects_general(key, tables, poset.d, n)
  pre, fc, ns, _ = _forest_structure(poset)
  if key_words is None:
    key_words = 1 if poset.d <= _COLUMN_MAX_D else 2
  if key_words not in (1, 2):
    raise ValueError(f"key_words must be 1 or 2; got {key_words!r}.")
  return _objects_forest(key, tables, tuple(pre), tuple(fc), tuple(ns), n, key_words)


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
  bits = jnp.left_shift(jnp.uint32(1), jnp.arange(d, dtype=jnp.uint32))
  rest = a ^ jnp.uint32((1 << d) - 1)
  s_set = a
  seq = []
  for s in range(d):
    s_set = jnp.where(k == s, rest, s_set)
    member = (s_set[:, None] & bits) != 0
    top = member & ((s_set[:, None] & t.strict_up[None, :]) == 0)
    w = jnp.where(top, t.ext[(s_set[:, None] ^ bits).astype(jnp.int32)], 0.0)
    x = _categorical(w, v[:, s], top)
    s_set = s_set ^ bits[x]
    seq.append(x)
  return jnp.stack(seq, axis=1), k


def _categorical(w, u, valid):
  """Index i with probability w_i / sum(w) (w >= 0), by inverse CDF with uniform u."""
  d = w.shape[1]
  c = jnp.cumsum(w, axis=1)
  x = jnp.sum(c <= (u * c[:, -1])[:, None], axis=1).astype(jnp.int32)
  last = (d - 1 - jnp.argmax(valid[:, ::-1], axis=1)).astype(jnp.int32)
  return jnp.where(x >= d, last, x)  # u * total rounded up to total


def _objects_forest(key, t: ForestTables, pre, fc, ns, n: int, key_words: int):
  d = len(pre)
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
  seq = heap_order(k_ext, in_b, fc, ns, n, d, jnp.asarray(pre, jnp.int32))
  return seq, k


# Up to this d the heap-order step works column by column (fastest on CPU; XLA's
# compile time grows quickly beyond it). Keys are one 32-bit word: 31 - ceil(log2 d)
# random bits, so a tie has probability below d^2 2^-(32 - ceil(log2 d)) < 7.5e-6.
# Larger forests use two-word keys (ties below d^2 2^-57) and array slices.
_COLUMN_MAX_D = 32


def _heap_order_columns(key, in_b, fc, ns, n, d, labels):
  """``labels`` (elements by preorder position) in A-then-B top-down order, working
  with one (n,) column per element."""
  low = max(1, (d - 1).bit_length())
  raw = jax.random.bits(key, (n, d), jnp.uint32)
  keys = [((raw[:, i] >> (low + 1)) << low) | jnp.uint32(i) for i in range(d)]
  size = _subtree_sizes(fc, ns)
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


def _heap_order_pairs(key, in_b, fc, ns, n, d, labels):
  """Same as :func:`_heap_order_columns` with two-word keys and array slices."""
  low = max(1, (d - 1).bit_length())
  raw = jax.random.bits(key, (2, n, d), jnp.uint32)
  hi = raw[0] >> 1                                         # (n, d), preorder order
  lo = ((raw[1] >> low) << low) | jnp.arange(d, dtype=jnp.uint32)
  part = jnp.stack(in_b, axis=1)
  top = jnp.uint32(0xFFFFFFFF)
  size = _subtree_sizes(fc, ns)
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
