"""Exact uniform sampling of the poset ball, part 1: host-side tables (numpy).

The traced kernels that use these tables are in :mod:`jaxdp._poset_kernels`.

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
import numpy as np

from jaxdp import _sp_tables
from jaxdp.posets import Poset

GENERAL_MAX_D = 22   # the tables hold 2^d float32 values twice (32 MiB at d = 22)
FOREST_MAX_D = 128   # the forest table holds d (d+1) 2(d+1) float32 values (17 MiB)
METHODS = ("auto", "forest", "sp", "general")


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
  labels: jax.Array     # (d,) int32: the element at each preorder position


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


# ------------------------------------------------------------------ method choice
# "auto" takes the forest sampler for forests up to this d, else the series-parallel
# one when it applies, else the general one. benchmarks/samplers.py: the forest
# sampler is faster on NHIS-3 (d = 15), about even with the series-parallel one on a
# random forest with d = 16 and slower from d = 24 on (1.7x slower at d = 32).
AUTO_FOREST_MAX_D = 16


def resolve_method(poset: Poset, method: str) -> str:
  """Chooses the sampler for ``poset``; raises ValueError if it cannot be used."""
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
  d = poset.d
  if method == "auto":
    if poset.is_forest and d <= AUTO_FOREST_MAX_D:
      return "forest"
    if _sp_tables.supported(poset):
      return "sp"
    if d <= GENERAL_MAX_D:
      return "general"
    _sp_tables.check_supported(poset)   # raises, naming the induced N
  if method == "forest":
    if not poset.is_forest:
      raise ValueError(
          "method='forest' needs a forest (every element with at most one element "
          f"directly above it); {poset!r} is not one. Use method='sp' or 'auto'.")
    if d > FOREST_MAX_D:
      raise ValueError(
          f"method='forest' supports d <= {FOREST_MAX_D} (its table grows as d^3); "
          f"got d = {d}. Use method='sp' (d <= {_sp_tables.SP_MAX_D}).")
    return "forest"
  if method == "sp":
    _sp_tables.check_supported(poset)
    return "sp"
  if d > GENERAL_MAX_D:
    raise ValueError(
        f"the general poset-ball sampler supports d <= {GENERAL_MAX_D} (its tables hold "
        f"2^d entries); got d = {d}. Series-parallel posets (no induced N) of up to "
        f"{_sp_tables.SP_MAX_D} elements take method='sp' or 'auto'.")
  return "general"


def num_objects(poset: Poset) -> float:
  """N(P) = sum over A of e(A) e(P \\ A); the ball's normalised volume is 2 N(P)."""
  method = resolve_method(poset, "auto")
  if method == "general":
    e = _extension_counts(poset)
    full = (1 << poset.d) - 1
    idx = np.arange(1 << poset.d)
    return float(np.sum(e * e[full ^ idx]))
  if method == "sp":
    return float(np.exp(_sp_tables.log_num_objects(poset)))
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
def _extension_counts(poset: Poset, dtype=np.float64) -> np.ndarray:
  """e(S) for every subset S (bit x of S = element x), as ``dtype`` (float64, or
  int64 when the caller has bounded every count below 2^63: e(S) <= e(S) e(P \\ S)
  <= N(P))."""
  d = poset.d
  o = poset.order
  strict = o & ~np.eye(d, dtype=bool)
  strict_up = [int(sum(1 << int(y) for y in np.nonzero(strict[x])[0])) for x in range(d)]
  masks = np.arange(1 << d, dtype=np.int64)
  pop = np.zeros(1 << d, dtype=np.int64)
  for x in range(d):
    pop += (masks >> x) & 1
  e = np.zeros(1 << d, dtype=dtype)
  e[0] = 1
  for size in range(1, d + 1):
    layer = masks[pop == size]
    acc = np.zeros(layer.shape, dtype=dtype)
    for x in range(d):
      # x is removable as the top when it is in S and nothing above it is in S
      sel = ((layer >> x) & 1).astype(bool) & ((layer & strict_up[x]) == 0)
      acc[sel] += e[layer[sel] ^ (1 << x)]
    e[layer] = acc
  return e


@functools.lru_cache(maxsize=32)
def forest_layout(poset: Poset) -> ForestLayout:
  """The forest's preorder layout: first-child and next-sibling links, subtree sizes."""
  return _forest_structure(poset)[1]


@functools.lru_cache(maxsize=32)
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
  lay = forest_layout(poset)
  fc, ns, size = lay.first_child, lay.next_sibling, lay.subtree_size
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
  pre, lay = _forest_structure(poset)
  ns, size = lay.next_sibling, lay.subtree_size
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
      up=np.array(poset.order),
      labels=np.asarray(pre, np.int32))


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


# ------------------------------------------------------------------ exact integer tables
EXACT_MAX_OBJECTS = 1 << 62  # N(P) bound for the exact sampler's int64 ranks


class ExactTables(NamedTuple):
  """Integer tables for the exact sampler (ranks in [0, N(P)) unrank to objects)."""
  trie_left: jax.Array  # (2^d - 1,) int64: objects whose next bit of A is 0, per prefix
  ext: jax.Array        # (2^d,) int64: e(S)
  strict_up: jax.Array  # (d,) uint32
  up: jax.Array         # (d, d) bool


@functools.lru_cache(maxsize=32)
def exact_tables(poset: Poset) -> tuple[ExactTables, int]:
  """``(tables, N(P))`` with every count an exact integer.

  Raises:
    ValueError: d > GENERAL_MAX_D, or N(P) >= 2^62 (ranks would not fit in int64).
  """
  d = poset.d
  if d > GENERAL_MAX_D:
    raise ValueError(
        f"the exact poset-ball sampler supports d <= {GENERAL_MAX_D} (integer tables "
        f"over all 2^d subsets); got d = {d}.")
  approx = num_objects(poset)
  if approx >= EXACT_MAX_OBJECTS / 2:
    raise ValueError(
        f"the exact poset-ball sampler needs N(P) < 2^61 objects (64-bit integer ranks); "
        f"this poset has N(P) ~ {approx:.3g}. Split it into independent components.")
  e = _extension_counts(poset, np.int64)  # every e(S) <= N(P) < 2^61: exact
  full = (1 << d) - 1
  w = e * e[full ^ np.arange(1 << d)]         # every product <= N(P) < 2^61
  total = int(w.sum())
  trie_left = np.empty((1 << d) - 1, dtype=np.int64)
  for level in range(d):
    sums = w.reshape(1 << (level + 1), -1).sum(axis=1)
    trie_left[(1 << level) - 1:(1 << (level + 1)) - 1] = sums[0::2]
  general = general_tables(poset)
  return ExactTables(trie_left=trie_left, ext=e, strict_up=general.strict_up,
                     up=general.up), total
