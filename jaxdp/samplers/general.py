"""The general poset-ball sampler's host side (any poset, d <= GENERAL_MAX_D): tables
over all 2^d subsets and the static layout its kernel
(:mod:`jaxdp.samplers.general_points`) is compiled for.

With e(S) the number of linear extensions of the subposet induced on S, A is drawn
with probability e(A) e(P \\ A) / N(P) by descending a trie over the bits of A,
``BLOCK_BITS`` bits per node (one row of the children's conditional CDF per node,
one cache line of float32, so d / 4 reads per sample), then a uniform linear extension of
each part by repeatedly taking a maximal x as the next top with probability
e(S \\ x) / e(S). A part's maximal elements form an antichain, so there are at most
width(P) of them: the kernel reads e(S \\ x) for that many candidates per step
(``GeneralLayout.slots``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.subsets import extension_counts, object_weights

__all__ = [
  "BLOCK_BITS",
  "GENERAL_MAX_D",
  "GeneralLayout",
  "GeneralTables",
  "MIN_SLOTS",
  "general_layout",
  "general_tables",
  "num_objects",
  "trie_groups",
  "width",
]

GENERAL_MAX_D = 22  # the tables hold about 2^d float32 values twice (34 MiB at d = 22)
BLOCK_BITS = 4  # bits of A per trie node: a row of 2^4 float32 is one 64-byte line


class GeneralTables(NamedTuple):
  cdf: jax.Array  # (nodes, 2^BLOCK_BITS) float32: per trie node, the children's CDF
  ext: jax.Array  # (2^d,) float32: e(S), linear extensions of the subposet S
  strict_up: jax.Array  # (d,) uint32: bitmask of {y : p_x < p_y}
  up: jax.Array  # (d, d) bool: up[x, j] = p_x <= p_j
  up_mask: jax.Array  # (d,) uint32: bitmask of {j : p_x <= p_j}


MIN_SLOTS = 4  # candidate slots per extension step, at least


class GeneralLayout(NamedTuple):
  """What the general kernel is compiled for (static): posets with the same ``d`` and
  ``slots`` share one compilation."""

  d: int
  # maximal elements read per extension step: the poset's width rounded up to a
  # power of two, at least MIN_SLOTS and at most d (so posets of one size share a
  # few compilations; an empty slot costs one cached read)
  slots: int


# Tables are cached numpy arrays (never device arrays created during a trace); the
# kernels receive them as jit arguments.
@by_relation(32)
def general_tables(poset: Poset) -> GeneralTables:
  """The trie's CDF rows and e(S) over all subsets (host).

  Node rows, level by level (:func:`trie_groups`), hold the CDF of the node's
  children, in float64 rounded to float32; from the last child of positive weight
  on, entries are 2.0, so the number of entries at most a uniform u in [0, 1) is a
  child of positive weight, each with its conditional probability.
  """
  d = poset.d
  e = extension_counts(poset)
  w = object_weights(e)
  row_len = 1 << BLOCK_BITS
  rows, done = [], 0
  for b in trie_groups(d):
    mass = w.reshape(1 << done, 1 << b, -1).sum(axis=2)  # (nodes, children)
    cdf = np.cumsum(mass, axis=1) / mass.sum(axis=1, keepdims=True)
    last = (1 << b) - 1 - np.argmax(mass[:, ::-1] > 0, axis=1)
    row = np.full((1 << done, row_len), 2.0)
    row[:, : 1 << b] = np.where(np.arange(1 << b) >= last[:, None], 2.0, cdf)
    rows.append(row)
    done += b
  o = poset.order
  strict = o & ~np.eye(d, dtype=bool)
  strict_up = (strict.astype(np.uint64) << np.arange(d, dtype=np.uint64)).sum(axis=1)
  return GeneralTables(
    cdf=np.concatenate(rows).astype(np.float32),
    ext=e.astype(np.float32),
    strict_up=strict_up.astype(np.uint32),
    up=np.array(o),
    up_mask=(o.astype(np.uint64) << np.arange(d, dtype=np.uint64))
    .sum(axis=1)
    .astype(np.uint32),
  )


def trie_groups(d: int) -> list[int]:
  """Bits of A decided at each trie level: ``BLOCK_BITS`` each, the remainder first
  (so the widest level has 2^d / 2^BLOCK_BITS nodes)."""
  head = d % BLOCK_BITS
  return ([head] if head else []) + [BLOCK_BITS] * (d // BLOCK_BITS)


def width(poset: Poset) -> int:
  """The largest antichain's size: the most maximal elements of any subset (every
  antichain is the set of maximal elements of itself), counted over all 2^d subsets."""
  d = poset.d
  strict = poset.order & ~np.eye(d, dtype=bool)
  strict_up = (strict.astype(np.int64) << np.arange(d)).sum(axis=1)
  masks = np.arange(1 << d, dtype=np.int64)
  count = np.zeros(1 << d, np.int8)
  for x in range(d):
    count += (((masks >> x) & 1) & ((masks & strict_up[x]) == 0)).astype(np.int8)
  return int(count.max())


@by_relation(32)
def general_layout(poset: Poset) -> GeneralLayout:
  """The static layout of ``poset``'s kernel (host)."""
  w = width(poset)
  return GeneralLayout(
    d=poset.d, slots=min(poset.d, max(MIN_SLOTS, 1 << (w - 1).bit_length()))
  )


def num_objects(poset: Poset) -> float:
  """N(P) = sum over A of e(A) e(P \\ A), from the subset table (d <= GENERAL_MAX_D)."""
  return float(np.sum(object_weights(extension_counts(poset))))
