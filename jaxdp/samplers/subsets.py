"""The subset dynamic programme shared by the general sampler and the series-parallel
sampler's prime blocks: e(S), the number of linear extensions of the subposet induced on
every subset S (host, numpy), and uniform linear extensions drawn from it (traced).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._checks import read_only
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation

__all__ = ["categorical", "extension_counts", "linear_extensions", "object_weights"]


@by_relation(32)
def extension_counts(poset: Poset, dtype=np.float64) -> np.ndarray:
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
  return read_only(e)


def object_weights(e: np.ndarray) -> np.ndarray:
  """``w[S] = e(S) e(P \\ S)`` for every subset S: the number of objects whose part A
  is S (their sum is N(P)), from :func:`extension_counts` (same dtype)."""
  masks = np.arange(len(e))
  return e * e[(len(e) - 1) ^ masks]


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
    x = categorical(w, v[:, s], top)
    s_set = s_set ^ jnp.left_shift(jnp.uint32(1), x.astype(jnp.uint32))
    seq.append(x)
  return jnp.stack(seq, axis=1)


def categorical(w, u, valid):
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
