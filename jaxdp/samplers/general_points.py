"""The general sampler's kernel: objects and points of the poset ball of any poset with
d <= GENERAL_MAX_D, from the tables of :mod:`jaxdp.samplers.general`.

Per sample: A by the trie descent (one float32 uniform and one row of the
children's CDF per level of ``BLOCK_BITS`` bits), then the uniform linear extension
of each part top down, one loop step per element. A step finds the
maximal elements x of the rest S (a bitmask), reads e(S \\ x) for each of them,
and takes the first whose running sum exceeds v e(S) (v uniform): x with
probability e(S \\ x) / e(S), the uniform extension's law, since the counts of the
maximal elements sum to e(S). The maximal elements form an antichain, so a step
reads ``layout.slots`` >= width(P) entries of the table, not d: the candidates are
the lowest set bits of the maximal-element mask, taken ``slots`` times (an empty
slot reads e(S) itself, an address already in cache). The point's chain sum is
accumulated in the same step from the filter of the elements taken so far, kept as a
bitmask. The maximal-element mask, the choice and the step's coefficient are stored
(:func:`jaxdp.samplers.words.stored`): XLA:CPU would otherwise recompute them in
each of the step's fusions (every gather is one).

On the CPU a chunk is ``CPU_CHUNK`` samples, so that the (d, chunk) chain sum that
every step updates stays in a core's cache.

Precision as the other float samplers (:mod:`jaxdp.samplers`): each choice compares
a float32 uniform with float32 counts (or conditional probabilities) computed
exactly or in float64; when rounding leaves no candidate past the threshold, the
last candidate is taken (never an element that is not maximal).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp.samplers.general import GeneralLayout, GeneralTables, trie_groups
from jaxdp.samplers.words import stored
from jaxdp.typing import DTypeLike, KeyArray

__all__ = ["CPU_CHUNK", "descend", "general_objects", "general_points"]

CPU_CHUNK = 1 << 12  # samples per chunk on the CPU: 4096 (d + 1) float32 fit in L2


def general_objects(
  key: KeyArray, tables: GeneralTables, layout: GeneralLayout, n: int
) -> tuple[jax.Array, jax.Array]:
  """Traced: ``n`` objects ``(seq, k)``: seq (n, d) int32, the elements in order of
  addition (A top down, then B top down), k (n,) = |A|."""
  seq, k, _ = _draw(key, None, tables, layout, n, None)
  return seq, k


def general_points(
  key_obj: KeyArray,
  key_exp: KeyArray,
  tables: GeneralTables,
  layout: GeneralLayout,
  n: int,
  dtype: DTypeLike,
) -> jax.Array:
  """Exactly uniform points of the poset ball, (n, d+1), root first: an object from
  ``key_obj``, Dirichlet(1) weights on its simplex's vertices from d + 2
  exponentials drawn from ``key_exp``."""
  _, _, y = _draw(key_obj, key_exp, tables, layout, n, dtype)
  return y


def descend(cdf: jax.Array, u: jax.Array, d: int) -> jax.Array:
  """Traced: A as a bitmask (int32), down the trie's CDF rows ``cdf``
  (:func:`jaxdp.samplers.general.general_tables`) with one uniform per level (``u``:
  (levels, n) float32)."""
  a = jnp.zeros(u.shape[1:], jnp.int32)
  first, done = 0, 0  # the level's first row, the bits decided above it
  for g, b in enumerate(trie_groups(d)):
    row = jnp.take(cdf, first + a, axis=0, mode="clip")[:, : (1 << b) - 1]
    a = (a << b) + jnp.sum((u[g][:, None] >= row).astype(jnp.int32), axis=1)
    first, done = first + (1 << done), done + b
  return a


def _draw(key_obj, key_exp, tables, layout, n, dtype):
  """(seq, k, None) without ``key_exp``, else (None, None, points)."""
  d, slots = layout.d, layout.slots
  k_trie, k_ext = jax.random.split(key_obj)
  groups = trie_groups(d)
  u = jax.random.uniform(k_trie, (len(groups), n))
  v = jax.random.uniform(k_ext, (d, n))
  a = descend(tables.cdf, u, d)
  a = a.astype(jnp.uint32)
  k = jax.lax.population_count(a).astype(jnp.int32)
  rest = a ^ jnp.uint32((1 << d) - 1)
  points = key_exp is not None
  if points:
    expo = jax.random.exponential(key_exp, (d + 2, n), dtype)
    out = jnp.zeros((d, n), dtype)
  else:
    out = jnp.zeros((d, n), jnp.int32)
  elem_bits = jnp.arange(d, dtype=jnp.uint32)[:, None]

  def step(s, carry):
    rem_set, filt, out = carry
    rem_set = jnp.where(k == s, rest, rem_set)  # B's turn after |A| steps
    filt = jnp.where(k == s, jnp.uint32(0), filt)
    top = jnp.zeros_like(rem_set)
    for x in range(d):  # the maximal elements of the rest
      ok = (((rem_set >> x) & 1) != 0) & ((rem_set & tables.strict_up[x]) == 0)
      top = top | jnp.where(ok, jnp.uint32(1 << x), jnp.uint32(0))
    top = stored(top, rem_set[0])
    ext = lambda s_: jnp.take(tables.ext, s_.astype(jnp.int32), mode="clip")
    threshold = v[s] * ext(rem_set)
    total = jnp.zeros((n,), jnp.float32)
    chosen = jnp.zeros_like(rem_set)
    last = chosen
    for _ in range(slots):
      low = top & (~top + jnp.uint32(1))  # the lowest candidate left (0: none)
      top = top ^ low
      some = low != 0
      total = total + jnp.where(some, ext(rem_set ^ low), 0.0)
      chosen = jnp.where(some & (chosen == 0) & (total > threshold), low, chosen)
      last = jnp.where(some, low, last)
    chosen = stored(jnp.where(chosen == 0, last, chosen), rem_set[0])
    rem_set = rem_set ^ chosen
    x = jax.lax.population_count(chosen - jnp.uint32(1)).astype(jnp.int32)
    if points:
      filt = filt | jnp.take(tables.up_mask, x, mode="clip")
      coeff = stored(jnp.where(s < k, expo[s + 1], -expo[s + 2]), rem_set[0])
      out = out + coeff[None] * ((filt[None] >> elem_bits) & 1).astype(dtype)
    else:
      out = jax.lax.dynamic_update_index_in_dim(out, x, s, axis=0)
    return rem_set, filt, out

  init = (a, jnp.zeros((n,), jnp.uint32), out)
  out = jax.lax.fori_loop(0, d, step, init)[2]
  if not points:
    return out.T, k, None
  idx = jnp.arange(d + 2)[:, None]
  root = jnp.sum(jnp.where(idx <= k[None], expo, -expo), axis=0)
  y = jnp.concatenate([root[None], out], axis=0) / jnp.sum(expo, axis=0, keepdims=True)
  return None, None, y.T
