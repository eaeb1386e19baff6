"""The general sampler's kernel (jaxdp.samplers.general_points): the trie over blocks of
bits of A and the extension that reads only the maximal elements' counts.

Exactness against exact enumeration, with a stated test, size and threshold; a kernel
that reads one candidate too few fails the same test.
"""

import itertools

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import Poset
from jaxdp.samplers import general, general_points
from tests.helpers.exactness import chi_square_uniform_pvalue, object_index

P_MIN = 1e-4

# An induced N (0 < 2 > 1 < 3) with a chain 5 < 6 < 3 and 4 above 2: not series-parallel,
# width 3, d = 7 (trie levels of 3 and 4 bits), N(P) = 2496 objects.
NON_SP = Poset.from_edges(7, [(0, 2), (1, 2), (1, 3), (2, 4), (5, 6), (6, 3)])


def _brute_width(poset):
  o = np.asarray(poset.order)
  best = 0
  for r in range(1, poset.d + 1):
    for sub in itertools.combinations(range(poset.d), r):
      if all(not o[a, b] and not o[b, a] for a, b in itertools.combinations(sub, 2)):
        best = r
  return best


def test_width_is_the_largest_antichain(posets):
  for name, p in {**posets, "non-sp": NON_SP}.items():
    assert general.width(p) == _brute_width(p), name


def test_slots_hold_every_maximal_element(posets):
  for name, p in {**posets, "non-sp": NON_SP}.items():
    slots = general.general_layout(p).slots
    assert general.width(p) <= slots <= max(p.d, general.MIN_SLOTS), name


def test_trie_groups_cover_d_bits():
  for d in range(1, 23):
    groups = general.trie_groups(d)
    assert sum(groups) == d and all(1 <= b <= general.BLOCK_BITS for b in groups)
    assert groups[1:] == [general.BLOCK_BITS] * (len(groups) - 1)


@pytest.mark.statistical
def test_objects_uniform_and_one_candidate_too_few_is_caught():
  """Chi-square of sampled objects vs uniform over the N(P) = 2496 objects of NON_SP,
  n = 150,000 (60 per object): p > 1e-4. The same kernel compiled for 2 slots, one
  less than the width (it never reads a third maximal element's count), gives
  p < 1e-10."""
  assert not NON_SP.is_series_parallel and general.width(NON_SP) == 3
  ref = jaxdp.enumerate_objects(NON_SP)
  num = ref[0].shape[0]
  assert num == 2496
  tables = general.general_tables(NON_SP)
  layout = general.general_layout(NON_SP)
  n = 150_000
  draw = jax.jit(general_points.general_objects, static_argnums=(2, 3))
  for lay, good in [(layout, True), (layout._replace(slots=2), False)]:
    seq, k = draw(jax.random.key(31), tables, lay, n)
    idx = object_index(np.asarray(seq), np.asarray(k), *ref)
    if good:
      assert (idx >= 0).all()
      assert chi_square_uniform_pvalue(idx, num) > P_MIN
    else:
      idx = idx[idx >= 0]  # a wrong kernel may also give sequences that are no object
      assert chi_square_uniform_pvalue(idx, num) < 1e-10
