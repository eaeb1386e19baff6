"""The general poset-ball sampler (any poset, d <= GENERAL_MAX_D): tables over all 2^d
subsets and the traced object sampler.

With e(S) the number of linear extensions of the subposet induced on S, A is drawn
with probability e(A) e(P \\ A) / N(P) by descending a binary trie over the bits of
A (one conditional probability per trie node), then a uniform linear extension of
each part by repeatedly taking a maximal x as the next top with probability
e(S \\ x) / e(S) (:mod:`jaxdp.samplers.subsets`).
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.posets import Poset
from jaxdp.samplers.subsets import extension_counts, linear_extensions, object_weights
from jaxdp.typing import KeyArray

__all__ = [
  "GENERAL_MAX_D",
  "GeneralTables",
  "general_objects",
  "general_tables",
  "num_objects",
]

GENERAL_MAX_D = 22  # the tables hold 2^d float32 values twice (32 MiB at d = 22)


class GeneralTables(NamedTuple):
  trie: jax.Array  # (2^d - 1,) float32: P(next bit of A is 1 | bits so far)
  ext: jax.Array  # (2^d,) float32: e(S), linear extensions of the subposet S
  strict_up: jax.Array  # (d,) uint32: bitmask of {y : p_x < p_y}
  up: jax.Array  # (d, d) bool: up[x, j] = p_x <= p_j


# Tables are cached numpy arrays (never device arrays created during a trace); the
# kernels receive them as jit arguments.
@functools.lru_cache(maxsize=32)
def general_tables(poset: Poset) -> GeneralTables:
  """The trie of conditional probabilities and e(S) over all subsets (host)."""
  d = poset.d
  e = extension_counts(poset)
  w = object_weights(e)
  trie = np.empty((1 << d) - 1, dtype=np.float64)
  for level in range(d):
    sums = w.reshape(1 << (level + 1), -1).sum(axis=1)
    parent = sums.reshape(-1, 2).sum(axis=1)
    trie[(1 << level) - 1 : (1 << (level + 1)) - 1] = sums[1::2] / parent
  o = poset.order
  strict = o & ~np.eye(d, dtype=bool)
  strict_up = (strict.astype(np.uint64) << np.arange(d, dtype=np.uint64)).sum(axis=1)
  return GeneralTables(
    trie=trie.astype(np.float32),
    ext=e.astype(np.float32),
    strict_up=strict_up.astype(np.uint32),
    up=np.array(o),
  )


def num_objects(poset: Poset) -> float:
  """N(P) = sum over A of e(A) e(P \\ A), from the subset table (d <= GENERAL_MAX_D)."""
  return float(np.sum(object_weights(extension_counts(poset))))


def general_objects(
  key: KeyArray, tables: GeneralTables, d: int, n: int
) -> tuple[jax.Array, jax.Array]:
  """Traced: ``n`` objects ``(seq, k)`` of the poset with these tables."""
  k_trie, k_ext = jax.random.split(key)
  u = jax.random.uniform(k_trie, (n, d))
  v = jax.random.uniform(k_ext, (n, d))
  a = jnp.zeros((n,), jnp.int32)
  for level in range(d):
    p = tables.trie[(1 << level) - 1 + a]
    a = 2 * a + (u[:, level] < p).astype(jnp.int32)
  a = a.astype(jnp.uint32)
  k = jax.lax.population_count(a).astype(jnp.int32)
  return linear_extensions(tables.ext, tables.strict_up, a, k, v, d), k
