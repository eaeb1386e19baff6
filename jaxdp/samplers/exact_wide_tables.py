"""128-bit integer tables for the exact poset-ball sampler's wide ranks: posets with
d <= 22 and N(P) up to 23! < 2^75, every count held exactly as two uint64 limbs
(hi, lo) = (x >> 64, x mod 2^64).

The counts are built on the host with exact limb arithmetic in numpy (additions with
carries, 64 x 64 -> 128-bit products from 32-bit halves), never in floating point.
Every count is at most N(P) <= (d + 1)! < 2^75, so arithmetic mod 2^128 is exact.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from jaxdp._checks import read_only
from jaxdp.posets import Poset
from jaxdp.posets.canonical import by_relation
from jaxdp.samplers.general import GENERAL_MAX_D

__all__ = ["WideTables", "exact_wide_tables", "limb_add", "limb_mul", "limbs_to_ints"]

M32 = np.uint64(0xFFFFFFFF)
S32 = np.uint64(32)


class WideTables(NamedTuple):
  """Limb tables for the wide ranks (counts x = hi 2^64 + lo, both uint64)."""

  trie_hi: jax.Array  # (2^d - 1,) uint64: objects whose next bit of A is 0, per prefix
  trie_lo: jax.Array  # (2^d - 1,) uint64
  ext_hi: jax.Array  # (2^d,) uint64: e(S)
  ext_lo: jax.Array  # (2^d,) uint64
  strict_up: jax.Array  # (d,) uint32
  up: jax.Array  # (d, d) bool


def limb_add(a, b):
  """``a + b`` mod 2^128 for limb pairs ``(hi, lo)`` of uint64 arrays."""
  lo = a[1] + b[1]
  carry = (lo < b[1]).astype(np.uint64)
  return a[0] + b[0] + carry, lo


def _mul64(x, y):
  """The exact 128-bit product of uint64 arrays, as ``(hi, lo)``."""
  x0, x1, y0, y1 = x & M32, x >> S32, y & M32, y >> S32
  p00, p01, p10, p11 = x0 * y0, x0 * y1, x1 * y0, x1 * y1
  mid = (p00 >> S32) + (p01 & M32) + (p10 & M32)  # < 3 * 2^32
  lo = (p00 & M32) | (mid << S32)
  hi = p11 + (p01 >> S32) + (p10 >> S32) + (mid >> S32)
  return hi, lo


def limb_mul(a, b):
  """``a * b`` mod 2^128 for limb pairs; exact when the product is below 2^128."""
  hi, lo = _mul64(a[1], b[1])
  return hi + a[0] * b[1] + b[0] * a[1], lo


def limbs_to_ints(hi, lo) -> list[int]:
  """The Python ints of limb arrays (for checks and tests)."""
  return [(int(h) << 64) | int(v) for h, v in zip(np.ravel(hi), np.ravel(lo), strict=True)]


def _extension_limbs(poset: Poset):
  """e(S) for every subset S as limbs: the recurrence of
  :func:`jaxdp.samplers.subsets.extension_counts` with exact carries."""
  d = poset.d
  strict = poset.order & ~np.eye(d, dtype=bool)
  strict_up = [int(sum(1 << int(y) for y in np.nonzero(strict[x])[0])) for x in range(d)]
  masks = np.arange(1 << d, dtype=np.int64)
  pop = np.zeros(1 << d, dtype=np.int64)
  for x in range(d):
    pop += (masks >> x) & 1
  hi = np.zeros(1 << d, np.uint64)
  lo = np.zeros(1 << d, np.uint64)
  lo[0] = 1
  for size in range(1, d + 1):
    layer = masks[pop == size]
    acc_hi = np.zeros(layer.shape, np.uint64)
    acc_lo = np.zeros(layer.shape, np.uint64)
    for x in range(d):
      # x is removable as the top when it is in S and nothing above it is in S
      sel = np.nonzero(((layer >> x) & 1).astype(bool) & ((layer & strict_up[x]) == 0))[0]
      src = layer[sel] ^ (1 << x)
      acc_hi[sel], acc_lo[sel] = limb_add((acc_hi[sel], acc_lo[sel]), (hi[src], lo[src]))
    hi[layer], lo[layer] = acc_hi, acc_lo
  return hi, lo


@by_relation(8)
def exact_wide_tables(poset: Poset) -> tuple[WideTables, int]:
  """``(tables, N(P))``, every count exact in two limbs.

  Raises:
    ValueError: d > GENERAL_MAX_D (the tables run over all 2^d subsets).
  """
  d = poset.d
  if d > GENERAL_MAX_D:
    raise ValueError(
      f"the exact poset-ball sampler's integer ranks need d <= {GENERAL_MAX_D} "
      f"(tables over all 2^d subsets); got d = {d}."
    )
  e_hi, e_lo = _extension_limbs(poset)
  comp = ((1 << d) - 1) ^ np.arange(1 << d)
  # w[S] = e(S) e(P \ S) <= N(P) <= (d + 1)! < 2^75: the products are exact
  level_sums = limb_mul((e_hi, e_lo), (e_hi[comp], e_lo[comp]))
  trie_hi = np.empty((1 << d) - 1, np.uint64)
  trie_lo = np.empty((1 << d) - 1, np.uint64)
  for level in range(d - 1, -1, -1):  # pair sums bottom up: 2^d additions in all
    left = (level_sums[0][0::2], level_sums[1][0::2])
    right = (level_sums[0][1::2], level_sums[1][1::2])
    start = (1 << level) - 1
    trie_hi[start : 2 * start + 1], trie_lo[start : 2 * start + 1] = left
    level_sums = limb_add(left, right)
  total = limbs_to_ints(*level_sums)[0]
  strict = poset.order & ~np.eye(d, dtype=bool)
  strict_up = (strict.astype(np.uint64) << np.arange(d, dtype=np.uint64)).sum(axis=1)
  tables = WideTables(
    trie_hi=trie_hi,
    trie_lo=trie_lo,
    ext_hi=e_hi,
    ext_lo=e_lo,
    strict_up=strict_up.astype(np.uint32),
    up=np.array(poset.order),
  )
  return read_only(tables), total
