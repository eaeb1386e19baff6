"""The tree path's sorting networks (jaxdp.exact.interleave): a comparator network
sorts every input iff it sorts every 0-1 input (the 0-1 principle), so the networks
are checked on all 0-1 inputs of small lengths, beside numpy's sort on random inputs
with ties, and group by group as the interleavings use them. The law of the
interleavings is checked by exact enumeration in test_exact_tree.py."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.exact import interleave as il


def test_network_sorts_every_zero_one_input():
  """All 2^L 0-1 vectors (one per column), L = 1..12: the network sorts each."""
  for length in range(1, 13):
    _zero_one(length)


def _zero_one(length):
  cols = np.arange(1 << length)
  bits = ((cols[None, :] >> np.arange(length)[:, None]) & 1).astype(np.uint16)
  got = np.asarray(jax.jit(il.network_sort)(jnp.asarray(bits)))
  np.testing.assert_array_equal(got, np.sort(bits, axis=0))


def test_network_equals_numpy_sort_with_ties():
  """Random uint32 columns with many ties, lengths 17, 29, 40 and 311 (a pruned
  network past the last power of two)."""
  rng = np.random.default_rng(0)
  for length in (17, 29, 40, 311):
    x = rng.integers(0, 40, (length, 9)).astype(np.uint32)
    got = np.asarray(jax.jit(il.network_sort)(jnp.asarray(x)))
    np.testing.assert_array_equal(got, np.sort(x, 0))


def test_groups_are_sorted_each_on_its_own():
  """sort_groups on groups of sizes 2..35 (classes padded with the dtype's largest
  value, which real keys may equal): each group's rows sorted, nothing mixed."""
  groups, start = [], 0
  for size in (2, 3, 35, 2, 8, 5, 11, 32, 9, 4, 2):
    groups.append((start, size))
    start += size
  rng = np.random.default_rng(1)
  for dtype in (np.uint16, np.uint64):
    x = rng.integers(0, np.iinfo(np.uint16).max + 1, (start, 5)).astype(dtype)
    x[3] = np.iinfo(dtype).max
    with jax.enable_x64(True):
      sort = jax.jit(il.sort_groups, static_argnums=1)
      got = np.asarray(sort(jnp.asarray(x), tuple(groups)))
    for a, size in groups:
      np.testing.assert_array_equal(got[a : a + size], np.sort(x[a : a + size], 0))
