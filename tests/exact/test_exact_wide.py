"""The 128-bit integer ranks (jaxdp.exact.wide): limb arithmetic against Python ints,
the unranking against brute-force enumeration and the int64 unranking, object
frequencies against the uniform law, and a 22-element fence (N(P) > 2^64, not
series-parallel) end to end.

Independent references: Python ints, brute-force enumeration of the objects, the
float64 subset table (for the law of |A|), the int64 unranking on small posets.
"""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import samplers as exact_samplers
from jaxdp.exact import wide
from jaxdp.samplers.exact_tables import exact_tables
from jaxdp.samplers.exact_wide_tables import (
  exact_wide_tables,
  limb_add,
  limb_mul,
  limbs_to_ints,
)
from jaxdp.samplers.subsets import extension_counts
from tests.exact.test_exact import _brute_objects
from tests.helpers.exactness import batch_temp_bytes

KEY = bytes(range(32))
EDGES = sorted(
  {
    v
    for base in (0, 1 << 32, 1 << 63, 1 << 64, 1 << 70, 1 << 96, 1 << 127)
    for v in (base - 1, base, base + 1)
    if 0 <= v < 1 << 128
  }
  | {(1 << 128) - 1, 0x5555_5555_5555_5555_AAAA_AAAA_AAAA_AAAA}
)


def _key(i=0):
  return jax.random.fold_in(dprandom.secure_key(KEY), i)


def _fence(d):
  """a1 < b1 > a2 < b2 > ...: prime (not series-parallel)."""
  return jaxdp.Poset.from_edges(
    d, [(i, i + 1) if i % 2 == 0 else (i + 1, i) for i in range(d - 1)]
  )


def _limbs(values):
  return (
    np.array([v >> 64 for v in values], np.uint64),
    np.array([v & ((1 << 64) - 1) for v in values], np.uint64),
  )


def _ints(limbs):
  return limbs_to_ints(np.asarray(limbs[0]), np.asarray(limbs[1]))


def test_limb_arithmetic_is_exact_at_every_carry_and_limb_boundary():
  """add, sub, less, divmod on the device and add, mul on the host, on all pairs of
  edge values (0, 2^32 +- 1, 2^63 +- 1, 2^64 +- 1, 2^70, 2^96, 2^127 +- 1, 2^128 - 1)
  against Python ints."""
  pairs = list(itertools.product(EDGES, EDGES))
  a_int, b_int = [p[0] for p in pairs], [p[1] for p in pairs]
  big = 1 << 128
  with jax.enable_x64(True):
    a, b = (tuple(map(jnp.asarray, _limbs(v))) for v in (a_int, b_int))
    s, dif, lt = jax.jit(lambda a, b: (wide.add(a, b), wide.sub(a, b), wide.less(a, b)))(
      a, b
    )
    assert _ints(s) == [(x + y) % big for x, y in pairs]
    assert _ints(dif) == [(x - y) % big for x, y in pairs]
    assert list(np.asarray(lt)) == [x < y for x, y in pairs]
    # restoring division: x < 2^96 by every divisor in [1, 2^75)
    xs = [x for x in EDGES if x < 1 << 96]
    ds = [v for v in EDGES if 1 <= v < 1 << 75] + [3, 609_887_750_400, (1 << 75) - 3]
    xd = list(itertools.product(xs, ds))
    x, dv = (tuple(map(jnp.asarray, _limbs(v))) for v in zip(*xd))
    q, r = jax.jit(lambda x, dv: wide.divmod_wide(x, dv, 96))(x, dv)
    assert list(zip(_ints(q), _ints(r))) == [divmod(x, y) for x, y in xd]
    # skipping leading bits (the rank reduction's shortcut) when div >= 2^skip
    n = (1 << 74) + 12345
    q, r = jax.jit(lambda x: wide.divmod_wide(x, wide.const(n), 96, 74))(x)
    assert _ints(r) == [x % n for x, _ in xd]
  # the host's table arithmetic: sums mod 2^128, products below 2^128
  h = limb_add(_limbs(a_int), _limbs(b_int))
  assert limbs_to_ints(*h) == [(x + y) % big for x, y in pairs]
  small = [(x, y) for x, y in pairs if x * y < big]
  m = limb_mul(*(_limbs(v) for v in zip(*small)))
  assert limbs_to_ints(*m) == [x * y for x, y in small]
  with pytest.raises(ValueError, match="2\\^128"):
    wide.const(big)


def test_wide_tables_hold_counts_beyond_2_64_exactly():
  """An antichain of 21 (forced through the 128-bit tables): e(S) = |S|! (21! > 2^64)
  at 500 random subsets, the trie's last level w(S) = |S|! (21 - |S|)!, and
  N(P) = 22! > 2^70: closed forms in Python ints."""
  d = 21
  tables, total = exact_wide_tables(jaxdp.Poset.from_edges(d, []))
  assert total == math.factorial(22)
  subsets = np.random.default_rng(1).integers(0, 1 << d, 500)
  subsets[:2] = (1 << d) - 1, 0
  sizes = [bin(int(m)).count("1") for m in subsets]
  e = limbs_to_ints(tables.ext_hi[subsets], tables.ext_lo[subsets])
  assert e == [math.factorial(k) for k in sizes]
  pairs = subsets[subsets % 2 == 0]  # left children at the last level: S = 2p
  at = (1 << (d - 1)) - 1 + pairs // 2
  left = limbs_to_ints(tables.trie_hi[at], tables.trie_lo[at])
  sizes = [bin(int(m)).count("1") for m in pairs]
  assert left == [math.factorial(k) * math.factorial(d - k) for k in sizes]


@pytest.mark.statistical
def test_wide_unranking_is_the_int64_bijection_and_objects_are_uniform():
  """A 6-element fence (prime, N(P) = 1018) through the 128-bit path (N(P) from
  brute force): every rank in [0, N(P))
  unranks to a distinct object, all of the enumeration is hit, and rank by rank the
  object is the int64 unranking's. Then 3 x 10^4 objects from uniform wide ranks:
  counts against the uniform law over the enumeration (chi-square, p > 1e-4)."""
  poset = _fence(6)
  tables, total = exact_wide_tables(poset)
  brute = sorted(_brute_objects(poset))
  assert total == len(brute) == exact_tables(poset)[1]
  n = 30_000
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    drawn = jax.jit(wide.uniform_below_wide, static_argnums=(1, 2))(_key(4), total, n)
    every = tuple(map(jnp.asarray, _limbs(range(total))))
    ranks = tuple(jnp.concatenate([x, y]) for x, y in zip(every, drawn))
    unrank = jax.jit(wide.unrank_wide, static_argnums=(2, 3))
    seq, k = map(np.asarray, unrank(ranks, t, poset.d, total.bit_length()))
    t64 = jax.tree_util.tree_map(jnp.asarray, exact_tables(poset)[0])
    unrank64 = jax.jit(exact.unrank, static_argnums=(2,))
    seq64, k64 = unrank64(jnp.arange(total, dtype=jnp.int64), t64, poset.d)
  index = {obj: i for i, obj in enumerate(brute)}
  idx = np.array([index.get((int(kk),) + tuple(map(int, s)), -1) for s, kk in zip(seq, k)])
  np.testing.assert_array_equal(np.sort(idx[:total]), np.arange(total))
  np.testing.assert_array_equal(seq[:total], np.asarray(seq64))
  np.testing.assert_array_equal(k[:total], np.asarray(k64))
  assert idx[total:].min() >= 0
  assert stats.chisquare(np.bincount(idx[total:], minlength=total)).pvalue > 1e-4


@pytest.fixture(scope="module")
def fence22():
  """The 22-element fence, its limb tables and 5 x 10^4 of its uniform wide ranks."""
  poset = _fence(22)
  tables, total = exact_wide_tables(poset)
  with jax.enable_x64(True):
    ranks = jax.jit(wide.uniform_below_wide, static_argnums=(1, 2))(_key(5), total, 50_000)
  return poset, tables, total, tuple(map(np.asarray, ranks))


@pytest.mark.slow
@pytest.mark.statistical
def test_fence22_wide_ranks_are_uniform_across_both_limbs(fence22):
  """5 x 10^4 ranks below the fence's N(P) ~ 3.08 * 2^64: all in range; the high
  limb j in {0, 1, 2, 3} has probability 2^64 / N(P) for j < 3 and the rest for j = 3
  (chi-square, 3 dof, p > 1e-4); given j < 3 the low limb is uniform on [0, 2^64),
  so its bits 0-2 and 61-63 are uniform (chi-square, 7 dof, p > 1e-4)."""
  _, _, total, (hi, lo) = fence22
  top_hi, top_lo = total >> 64, total & ((1 << 64) - 1)
  assert top_hi == 3
  assert np.all((hi < top_hi) | ((hi == top_hi) & (lo < top_lo)))
  law = np.array([2.0**64] * 3 + [total - 3 * 2**64]) / total
  assert (
    stats.chisquare(np.bincount(hi.astype(np.int64), minlength=4), law * hi.size).pvalue
    > 1e-4
  )
  for shift in (0, 61):
    bits = ((lo[hi < 3] >> np.uint64(shift)) & np.uint64(7)).astype(np.int64)
    assert stats.chisquare(np.bincount(bits, minlength=8)).pvalue > 1e-4
  with pytest.raises(ValueError, match="2\\^75"):
    wide.uniform_below_wide(_key(3), 1 << 75, 4)


def _valid_objects(poset, seq, k):
  """Each row of seq is a permutation whose first k entries (A) and the rest (B) are
  each listed top down: for every x < y in the same part, y comes before x."""
  m, d = seq.shape
  pos = np.empty_like(seq)
  np.put_along_axis(pos, seq, np.arange(d)[None, :].repeat(m, 0), axis=1)
  ok = np.all(np.sort(seq, axis=1) == np.arange(d), axis=1)
  in_a = pos < k[:, None]
  for x, y in zip(*np.nonzero(poset.order & ~np.eye(d, dtype=bool))):
    same = in_a[:, x] == in_a[:, y]
    ok &= ~same | (pos[:, y] < pos[:, x])
  return ok


@pytest.mark.slow
@pytest.mark.statistical
def test_fence22_objects_are_valid_with_the_exact_size_law(fence22):
  """The 22-element fence (N(P) > 2^64, prime): poset_path takes the 128-bit ranks;
  the limb tables obey the subset recurrence in Python ints at 64 random subsets and
  their total matches the float table to 1e-12; 2000 objects are valid (a permutation,
  A's and B's parts linear extensions top down) and |A| follows
  sum_{|S| = k} e(S) e(P \\ S) / N(P) (the float64 subset table; chi-square over
  the sizes with expected count >= 5, the rest pooled, p > 1e-4)."""
  poset, tables, total, ranks = fence22
  d = 22
  assert exact.poset_path(poset) == "wide"
  assert total > 1 << 64
  e_float = extension_counts(poset)
  w_float = e_float * e_float[((1 << d) - 1) ^ np.arange(1 << d)]
  assert abs(total / w_float.sum() - 1) < 1e-12
  strict = poset.order & ~np.eye(d, dtype=bool)
  rng = np.random.default_rng(0)
  for s in rng.integers(1, 1 << d, 64):
    tops = [
      x
      for x in range(d)
      if s >> x & 1 and not any(s >> y & 1 for y in np.nonzero(strict[x])[0])
    ]
    e = lambda m: (int(tables.ext_hi[m]) << 64) | int(tables.ext_lo[m])
    assert e(s) == sum(e(s ^ (1 << x)) for x in tops)
  n = 2000
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    rank = tuple(jnp.asarray(v[:n]) for v in ranks)
    # the tables as arguments, not 128 MiB of constants in the compiled code
    unrank = jax.jit(wide.unrank_wide, static_argnums=(2, 3))
    seq, k = unrank(rank, t, d, total.bit_length())
  seq, k = np.asarray(seq), np.asarray(k)
  assert _valid_objects(poset, seq, k).all()
  masks = np.arange(1 << d)
  pop = sum((masks >> x) & 1 for x in range(d))
  law = np.bincount(pop, weights=w_float, minlength=d + 1) / w_float.sum()
  observed = np.bincount(k, minlength=d + 1)
  keep = law * n >= 5
  expected = np.append(law[keep] * n, law[~keep].sum() * n)
  obs = np.append(observed[keep], observed[~keep].sum())
  assert stats.chisquare(obs, expected * obs.sum() / expected.sum()).pvalue > 1e-4


@pytest.mark.slow
def test_fence22_release_translates_with_the_statistic(fence22):
  """PosetCountMechanism(fence22, exact=True): integer releases, and with the same
  key neighbouring data (one row fewer) move the release by exactly the statistic's
  change (the noise does not depend on the data)."""
  poset = fence22[0]
  up = np.asarray(poset.order)
  rows = np.concatenate([up[[0, 3, 5, 21]], np.zeros((2, 22), bool)]).astype(np.int32)
  mech = jaxdp.PosetCountMechanism(poset, 0.9, exact=True)
  a = np.asarray(mech.randomize(_key(6), rows))
  b = np.asarray(mech.randomize(_key(6), rows[1:]))
  assert a.dtype == np.int32 and a.shape == (23,)
  np.testing.assert_array_equal(
    a - b, np.asarray(mech.statistic(rows)) - np.asarray(mech.statistic(rows[1:]))
  )
  assert not np.array_equal(a, np.asarray(mech.randomize(_key(7), rows)))


def test_beyond_d22_a_non_series_parallel_poset_is_refused_naming_the_limit():
  with pytest.raises(ValueError, match="d <= 22 \\(integer ranks of any N\\(P\\)\\)"):
    exact.poset_path(_fence(23))
  with pytest.raises(ValueError, match="d <= 22"):
    exact.poset_knorm(_key(), jaxdp.Poset.from_edges(23, []), 1.0, (2,), path="wide")


def test_one_limb_extension_counts_unrank_as_the_two_limb_ones():
  """A 6-element fence (every count below 2^64): with ``ext64`` and ``trie64`` (the
  high limbs never read) every rank in [0, N(P)) unranks to the object the full
  128-bit arithmetic gives."""
  poset = _fence(6)
  tables, total = exact_wide_tables(poset)
  assert not tables.ext_hi.any() and not tables.trie_hi.any()
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    ranks = tuple(map(jnp.asarray, _limbs(range(total))))
    unrank = jax.jit(wide.unrank_wide, static_argnums=(2, 3, 4, 5))
    full = unrank(ranks, t, poset.d, total.bit_length(), False, False)
    for flags in ((True, False), (True, True)):
      one = unrank(ranks, t, poset.d, total.bit_length(), *flags)
      for a, b in zip(full, one):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_wide_batch_of_several_chunks_keeps_its_temporaries_to_one_chunk():
  """An 18-element fence through the 128-bit path, its tables constants of the
  compiled code (a caller's jit), 2 wide chunks and a partial one: XLA's temporaries
  stay within WIDE_CHUNK_BYTES. In chunks of CHUNK (2^14) samples the whole batch
  was one chunk (3.8 MB at about 1.7 KB a sample), and the all-zero high limbs of
  its tables (N(P) < 2^64), when gathered, became two materialised 2^18-entry zero
  arrays (2 MiB each)."""
  poset = _fence(18)
  chunk = exact_samplers.wide_chunk(poset.d)
  assert 64 <= chunk < exact_samplers.CHUNK
  temp = batch_temp_bytes(_key(), poset, chunk, "wide")
  if temp is None:
    pytest.skip("the backend reports no memory analysis")
  assert temp <= exact_samplers.WIDE_CHUNK_BYTES
