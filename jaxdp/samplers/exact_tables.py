"""Integer tables for the exact poset-ball sampler of :mod:`jaxdp.exact`: ranks in
[0, N(P)) unrank to objects, every count an exact int64."""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxdp._checks import read_only
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.dispatch import num_objects
from jaxdp.samplers.general import GENERAL_MAX_D, general_tables
from jaxdp.samplers.subsets import extension_counts, object_weights

__all__ = ["EXACT_MAX_OBJECTS", "ExactTables", "exact_tables"]


EXACT_MAX_OBJECTS = 1 << 62  # N(P) bound for the exact sampler's int64 ranks


class ExactTables(NamedTuple):
  """Integer tables for the exact sampler (ranks in [0, N(P)) unrank to objects)."""

  trie_left: jax.Array  # (2^d - 1,) int64: objects whose next bit of A is 0, per prefix
  ext: jax.Array  # (2^d,) int64: e(S)
  strict_up: jax.Array  # (d,) uint32
  up: jax.Array  # (d, d) bool


@by_relation(32)
def exact_tables(poset: Poset) -> tuple[ExactTables, int]:
  """``(tables, N(P))`` with every count an exact integer.

  Raises:
    ValueError: d > GENERAL_MAX_D, or N(P) >= 2^62 (ranks would not fit in int64).
  """
  d = poset.d
  if d > GENERAL_MAX_D:
    raise ValueError(
      f"the exact poset-ball sampler supports d <= {GENERAL_MAX_D} (integer tables "
      f"over all 2^d subsets); got d = {d}."
    )
  approx = num_objects(poset)
  if approx >= EXACT_MAX_OBJECTS / 2:
    raise ValueError(
      f"the exact poset-ball sampler needs N(P) < 2^61 objects (64-bit integer ranks); "
      f"this poset has N(P) ~ {approx:.3g}. Split it into independent components."
    )
  e = extension_counts(poset, np.int64)  # every e(S) <= N(P) < 2^61: exact
  w = object_weights(e)  # every product <= N(P) < 2^61
  total = int(w.sum())
  trie_left = np.empty((1 << d) - 1, dtype=np.int64)
  for level in range(d):
    sums = w.reshape(1 << (level + 1), -1).sum(axis=1)
    trie_left[(1 << level) - 1 : (1 << (level + 1)) - 1] = sums[0::2]
  general = general_tables(poset)
  tables = ExactTables(
    trie_left=trie_left, ext=e, strict_up=general.strict_up, up=general.up
  )
  return read_only(tables), total
