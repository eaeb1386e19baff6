"""The exact decomposition-tree path of jaxdp.exact.poset_knorm (series-parallel posets
and forests of any size the float samplers serve).

Independent references: brute-force enumeration of the objects, the subset recursion
(``tests.helpers.exactness``) for |A|'s law, a direct O(d^2) computation of the chain
positions, and the ranks path's ``chain_round`` for the rounding.
"""

import fractions
import functools
import itertools

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import intervals as exact_intervals
from jaxdp.exact import refine as exact_refine
from jaxdp.exact import samplers as exact_samplers
from jaxdp.exact import tree as exact_tree
from jaxdp.samplers.exact_tree_tables import (
  exact_num_objects,
  exact_size_table,
  exact_tree_tables,
)
from tests.helpers.exactness import (
  batch_temp_bytes,
  brute_objects,
  random_series_parallel,
  record_host_refinements,
)

P_MIN, Z_MAX = 1e-4, 5.0
KEY = bytes(range(32))


def _key(i=0):
  return jax.random.fold_in(dprandom.secure_key(KEY), i)


@functools.partial(jax.jit, static_argnames=("layout", "n"))
def _objects_jit(key, tables, layout, n):
  tables = jax.tree_util.tree_map(jnp.asarray, tables)
  return exact_tree.tree_objects(key, tables, layout, n)


def _objects(poset, key, n):
  tables, layout = exact_tree_tables(poset)
  with jax.enable_x64(True):
    out = _objects_jit(key, tables, layout, n)
  return [np.asarray(x) for x in out]


def _direct_low(poset, seq, k):
  """low[i, part, j]: first position in the part of an element <= j (O(d^2))."""
  n, d = seq.shape
  below = poset.order[seq]  # (n, d, d): below[i, t, j] = seq[i, t] <= j
  t = np.arange(d)[None, :, None]
  big = np.where(below, t, 10**6)
  in_a = t < k[:, None, None]
  low_a = np.minimum(np.where(in_a, big, 10**6).min(1), k[:, None])
  low_b = np.minimum(
    (np.where(in_a, 10**6, big) - k[:, None, None]).min(1), (d - k)[:, None]
  )
  return np.stack([low_a, low_b], 1)


# A series-parallel poset that is not a forest with a prime N block inside a series
# composition, and a forest whose element 0 has three children (a run of two parallel
# nodes: one interleaving of three members) beside a free element.
N_ON_TOP = jaxdp.Poset.from_edges(5, [(0, 1), (2, 1), (2, 3), (1, 4), (3, 4)])
FOREST = jaxdp.Poset.from_edges(5, [(1, 0), (2, 0), (3, 0)])
# Two chains of two beside a free element: one interleaving of three members, two of
# them holding two elements of a part (the slots of a member are ordered).
CHAINS = jaxdp.Poset.from_edges(5, [(0, 1), (2, 3)])


@pytest.mark.statistical
@pytest.mark.parametrize(
  "poset", [N_ON_TOP, FOREST, CHAINS], ids=["sp_with_block", "forest", "chains"]
)
def test_tree_objects_are_exactly_uniform(poset):
  """Every object's frequency against exact enumeration: chi-square over all N(P)
  objects, n = 40,000, p > 1e-4; each object is valid and each chain position equals
  the direct computation."""
  objs = brute_objects(poset)
  assert len(objs) == exact_num_objects(poset) and len(set(objs)) == len(objs)
  assert not N_ON_TOP.is_forest and FOREST.is_forest
  for p, sizes in ((FOREST, [1, 1, 1]), (CHAINS, [1, 2, 2])):  # one group of three
    t = exact_tree_tables(p)[0]
    tops = t.member[:, 1]
    assert sizes in [sorted(t.size[t.member[tops == g, 0]].tolist()) for g in tops]
  n = 40_000
  seq, k, low, failed = _objects(poset, _key(1), n)
  assert not failed.any()
  index = {o: i for i, o in enumerate(objs)}
  rows = np.concatenate([k[:, None], seq], 1)
  hits = np.array([index[tuple(r)] for r in rows.tolist()])  # KeyError: invalid object
  counts = np.bincount(hits, minlength=len(objs))
  assert stats.chisquare(counts).pvalue > P_MIN
  np.testing.assert_array_equal(low, _direct_low(poset, seq, k))


@jax.jit
def _roundings(words, seq, k, low, up):
  a = exact_intervals.tree_round(words, low, k, 0.8)
  b = exact_intervals.chain_round(words, seq, k, up, 0.8)
  return a, b


def test_tree_rounding_equals_the_chain_rounding():
  """The tree path's prefix-sum rounding equals chain_round's on the same words and
  objects wherever both settle (both are the exact rounding), 2000 samples; the
  refinement's coefficients equal simplex_coefficients."""
  poset = N_ON_TOP
  # the chi-square test's draws (one compilation), the first 2000 of them
  seq, k, low = (x[:2000] for x in _objects(poset, _key(1), 40_000)[:3])
  with jax.enable_x64(True):
    words = jax.random.bits(_key(3), (2000, poset.d + 2, 2), jnp.uint32)
    (a, sa), (b, sb) = _roundings(words, seq, k, low, jnp.asarray(poset.order))
  both = np.asarray(sa & sb)
  assert both.mean() > 0.99
  np.testing.assert_array_equal(np.asarray(a)[both], np.asarray(b)[both])
  ref = jax.jit(exact.simplex_coefficients)(seq[:50], k[:50], jnp.asarray(poset.order))
  for i in range(50):
    coeff = exact_refine.tree_coefficients(low[i], int(k[i]))
    np.testing.assert_array_equal(coeff, np.asarray(ref)[i])


@jax.jit
def _three_roundings(words, seq, k, low, up, coeff, scale):
  marked = exact_intervals.tree_round_marked(words, low, k, scale)
  return (
    marked,
    exact_intervals.chain_round(words, seq, k, up, scale),
    exact.knorm_round(words, coeff, scale),
  )


def _cell_ends(j, bits, coeff):
  """Per sample and coordinate the exact cell [lo, hi] of ``sum_i coeff_i E_i``,
  E_i in [-log(1 - j_i 2^-b), -log(1 - (j_i + 1) 2^-b)], in long double (64-bit
  mantissa on x86: 1 - j 2^-b exact, the sums within 2^-57 of their terms' total)."""
  one = np.longdouble(1)
  jj = j.astype(np.longdouble)
  e_lo = -np.log(one - jj * np.longdouble(2.0**-bits))
  with np.errstate(divide="ignore"):
    e_hi = -np.log(one - (jj + 1) * np.longdouble(2.0**-bits))
  pos, neg = coeff > 0, coeff < 0
  lo = np.einsum("nmd,nm->nd", pos, e_lo) - np.einsum("nmd,nm->nd", neg, e_hi)
  hi = np.einsum("nmd,nm->nd", pos, e_hi) - np.einsum("nmd,nm->nd", neg, e_lo)
  return lo, hi, np.sum(e_hi, axis=1)


def _exact_end(j, bits, c, upper):
  """mpmath (80 digits) end of one coordinate's cell."""
  mpmath.mp.dps = 80
  e = lambda v: -mpmath.log(1 - mpmath.mpf(int(v)) / mpmath.mpf(2) ** bits)
  total = mpmath.mpf(0)
  for v, ci in zip(j.tolist(), c.tolist()):
    if ci:
      total += ci * e(v + int((ci > 0) == upper))
  return total


@pytest.mark.parametrize(
  "d, bits, n",
  [(5, 32, 400), (70, 52, 60)],
  ids=["N_ON_TOP, one word, prefix product", "d = 70, two words, parallel scan"],
)
def test_fast_passes_settle_a_coordinate_only_when_its_whole_cell_rounds_alike(d, bits, n):
  """Uniforms log-spread toward 1 (cells up to about 0.4 wide with one word, up to
  1 with two; at d = 70 about 5 of each sample's 72, the rest uniform): a coordinate
  that tree_round_marked, chain_round or knorm_round settles rounds to the same
  integer at both ends of its exact cell, at scale 2.5, on 400 samples of N_ON_TOP
  with one word per exponential (as the forest kernel reads them; prefix sums by a
  matrix product) and on 60 samples of a random series-parallel poset of d = 70
  with two words (prefix sums of 72 terms by a parallel scan). The cell's ends come
  from long double logarithms, and from mpmath (80 digits) where an end lies within
  2^-40 of the exponentials' total from a rounding boundary. At least 5% of the
  samples stay unsettled and 20% settle. Rounding the centres with the half-widths
  left out of the widening, or halved, settles coordinates whose cells straddle a
  boundary, and fails."""
  if d == 5:
    poset = N_ON_TOP
  else:
    poset = jaxdp.Poset.from_edges(d, random_series_parallel(np.random.default_rng(70), d))
  scale = 2.5
  seq, k, low = (x[:n] for x in _objects(poset, _key(1), 4096)[:3])
  rng = np.random.default_rng(21)
  j = 2**bits - 1 - (2.0 ** rng.uniform(0, bits, (n, d + 2))).astype(np.uint64)
  if d + 2 > 8:  # about 5 log-spread uniforms a sample, the rest uniform
    plain = rng.integers(0, 2**bits, (n, d + 2), dtype=np.uint64)
    j = np.where(rng.random((n, d + 2)) < 5 / (d + 2), j, plain)
  if bits == 32:
    words = j.astype(np.uint32)[..., None]
  else:
    words = np.stack([j >> np.uint64(20), (j & np.uint64(0xFFFFF)) << np.uint64(12)], -1)
    words = words.astype(np.uint32)
  with jax.enable_x64(True):
    up = jnp.asarray(poset.order)
    coeff = jax.jit(exact.simplex_coefficients)(seq, k, up)
    marked, (k2, s2), (k3, s3) = _three_roundings(
      jnp.asarray(words), seq, k, low, up, coeff, scale
    )
  k1, s1 = (np.asarray(x) for x in exact_intervals.unmark(marked))
  coeff = np.asarray(coeff)
  lo, hi, total = _cell_ends(j, bits, coeff)
  near = np.longdouble(2.0**-40) * scale * total[:, None]
  for name, kk, ss in (("tree", k1, s1), ("chain", k2, s2), ("knorm", k3, s3)):
    kk, ss = np.asarray(kk), np.asarray(ss)
    assert 0.05 < 1 - ss.mean() < 0.8, (name, ss.mean())
    for i in np.nonzero(ss)[0]:
      for end, upper in ((lo, False), (hi, True)):
        x = scale * end[i]
        rounded = np.floor(x + np.longdouble(0.5)).astype(np.int64)
        close = np.abs(x - np.round(x - np.longdouble(0.5)) - np.longdouble(0.5)) < near[i]
        for col in np.nonzero(close)[0]:  # within reach of a boundary: mpmath decides
          exact_x = scale * _exact_end(j[i], bits, coeff[i, :, col], upper)
          rounded[col] = int(mpmath.floor(exact_x + mpmath.mpf(1) / 2))
        np.testing.assert_array_equal(rounded, kk[i], err_msg=f"{name} sample {i}")


def test_a_rounding_boundary_at_the_centre_of_a_cell_is_never_settled():
  """Two words per exponential (cells about 2^-52 wide, as narrow as the float64
  sums' own error), 200 samples of N_ON_TOP, each with its own scale: the one that
  puts a half-integer (+-2.5) at the exact centre (mpmath, 80 digits) of one
  coordinate's cell (the root in half the samples), so the cell straddles a
  rounding boundary; at least 100 still do with the scale rounded to float64. That
  coordinate must stay unsettled in tree_round_marked (both roundings) and its
  sample in chain_round and knorm_round. Leaving out the 2^-40 margin of the second
  rounding settles some of them; the first rounding's total half-width exceeds the
  sums' error at this size with or without its margin, so no sample here tells."""
  poset, n = N_ON_TOP, 200
  d = poset.d
  seq, k, low = (x[:n] for x in _objects(poset, _key(1), 4096)[:3])
  rng = np.random.default_rng(22)
  j = rng.integers(0, 2**52 - 1, (n, d + 2), dtype=np.uint64)
  words = np.stack([j >> np.uint64(20), (j & np.uint64(0xFFFFF)) << np.uint64(12)], -1)
  with jax.enable_x64(True):
    up = jnp.asarray(poset.order)
    coeff = np.asarray(jax.jit(exact.simplex_coefficients)(seq, k, up))
  cols = np.where(np.arange(n) % 2 == 0, 0, np.arange(n) % (d + 1))  # half the root
  scale = np.empty((n, 1))
  cells = [
    [_exact_end(j[i], 52, coeff[i, :, col], upper) for upper in (False, True)]
    for i, col in enumerate(cols)
  ]
  for i, (lo, hi) in enumerate(cells):
    centre = (lo + hi) / 2
    scale[i, 0] = float(mpmath.mpf(2.5) / abs(centre)) if abs(centre) > 0.01 else 1.0
  with jax.enable_x64(True):
    marked, (_, s2), (_, s3) = _three_roundings(
      jnp.asarray(words.astype(np.uint32)), seq, k, low, up, jnp.asarray(coeff), scale
    )
  # the scale is a float64 near 2.5 / |centre|: check the coordinates whose scaled
  # cell still straddles +-2.5 (exactly, in mpmath)
  inside = np.zeros(n, bool)
  for i, cell in enumerate(cells):
    ends = [abs(scale[i, 0] * end) for end in cell]
    inside[i] = min(ends) < 2.5 < max(ends)
  assert inside.sum() >= 100
  marked = np.asarray(marked)
  assert np.all(marked[np.arange(n), cols][inside] == exact_intervals.UNSETTLED)
  assert not np.asarray(s2)[inside].any() and not np.asarray(s3)[inside].any()


def test_one_wide_exponential_leaves_only_the_coordinates_that_hold_it_unsettled():
  """One word per exponential, every uniform's first 32 digits 0 (E below 2^-32)
  except one at 2^32 - 2 (E in [21.49, 22.18]): tree_round_marked leaves exactly the
  coordinates whose sum holds that exponential unsettled (root included) and settles
  the rest to 0, on 50 samples of N_ON_TOP with the wide term at each position
  (the chain rounding, whose widening is the total half-width, settles none of those
  samples' coordinates)."""
  poset, n = N_ON_TOP, 50
  seq, k, low = (x[:n] for x in _objects(poset, _key(1), 4096)[:3])
  wide = np.arange(n) % (poset.d + 2)
  j = np.zeros((n, poset.d + 2), np.uint64)
  j[np.arange(n), wide] = 2**32 - 2
  words = j.astype(np.uint32)[..., None]
  with jax.enable_x64(True):
    up = jnp.asarray(poset.order)
    coeff = np.asarray(jax.jit(exact.simplex_coefficients)(seq, k, up))
    marked, (_, chain_settled), _ = _three_roundings(
      jnp.asarray(words), seq, k, low, up, jnp.asarray(coeff), 2.5
    )
  marked = np.asarray(marked)
  holds = coeff[np.arange(n), wide] != 0  # (n, d + 1): the coordinate sums it
  assert holds[:, 0].all() and (~holds).any()
  np.testing.assert_array_equal(marked == exact_intervals.UNSETTLED, holds)
  np.testing.assert_array_equal(marked[~holds], 0)
  assert not np.asarray(chain_settled).any()


def test_lazy_choice_is_decided_only_when_the_whole_cell_agrees():
  """One choice row of exact weights, 4000 uniforms (a third of them with leading
  digits equal to a boundary's): a decided first pass (32 digits, against the
  tables' first 32 bits) or refined pass (192 digits) gives #{i : c_i <= U} for
  every U in the digits' cell, computed with fractions from the exact weights; the
  first pass is undecided exactly when a boundary's first 32 bits equal the
  digits."""
  rng = np.random.default_rng(0)
  weights = [int(x) for x in rng.integers(0, 10**6, 9)] + [3**200]
  total = sum(weights)
  cum = list(itertools.accumulate(weights))
  c = [fractions.Fraction(x, total) for x in cum]
  full = (1 << 192) - 1
  t = [full if x == total else (x << 192) // total for x in cum]
  thr = np.array(
    [[(x >> (64 * (2 - w))) & (2**64 - 1) for x in t] for w in range(3)], np.uint64
  )
  tab32 = np.array([x >> 160 for x in t], np.uint32)
  m = 4000
  u = [[int(x) for x in rng.integers(0, 2**63, 3, dtype=np.uint64) * 2] for _ in range(m)]
  for i in range(0, m, 3):
    u[i][0] = (t[i % len(t)] >> 128) ^ (i & 0xFFFF)  # a boundary's first 48 bits
  words = np.array(u, np.uint64).T  # (3, m)
  with jax.enable_x64(True):
    thr_d, tab_d = [jnp.asarray(x) for x in thr], jnp.asarray(tab32)
    off, width = jnp.zeros((m,), jnp.int32), jnp.full((m,), len(t), jnp.int32)
    j32 = jnp.asarray(words[0] >> np.uint64(32)).astype(jnp.uint32)
    first = jax.jit(lambda j: exact_tree._choose(tab_d, off, width, [j], 4, False))
    refined = jax.jit(lambda w: exact_tree._choose(thr_d, off, width, list(w), 4, True))
    i1, ok1 = (np.asarray(x) for x in first(j32))
    i3, ok3 = (np.asarray(x) for x in refined(jnp.asarray(words)))
  assert 0.3 < 1 - ok1.mean() < 0.4
  for r in range(m):
    j = u[r][0] >> 32
    assert ok1[r] == (j not in [x >> 160 for x in t])
    big = (u[r][0] << 128) | (u[r][1] << 64) | u[r][2]
    for idx, ok, lo, bits in ((i1[r], ok1[r], j, 32), (i3[r], ok3[r], big, 192)):
      if ok:  # the same index at every U in [lo, lo + 1) 2^-bits
        left, right = fractions.Fraction(lo, 2**bits), fractions.Fraction(lo + 1, 2**bits)
        assert sum(ci <= left for ci in c) == idx == sum(ci < right for ci in c)
    assert ok3[r]


def test_undecided_choice_raises_rather_than_guessing():
  with pytest.raises(RuntimeError, match="192 bits"):
    exact_refine.refine_tree_sample(
      np.zeros((3, 2), np.uint32),
      np.zeros((3, 6), np.uint32),
      1.0,
      np.zeros((2, 1), np.int64),
      0,
      True,
    )


def _d48():
  """A random series-parallel poset with a prime N piece, d = 48 (beyond the ranks
  path), and its exact law of |A|."""
  p = jaxdp.Poset.from_edges(
    48, random_series_parallel(np.random.default_rng(48), 48, True)
  )
  assert not p.is_forest and exact_tree_tables(p)[1].blocks
  assert exact.samplers.poset_path(p) == "tree"
  t = exact_size_table(p)
  return p, np.array([float(x / sum(t)) for x in t])


@functools.cache
def _d48_draws(n=20_000):
  """The size-law test's |A| of n exact objects (_key(5)) and the moment test's n
  exact noise samples at scale 32 (_key(6), exact.poset_knorm) at d = 48, from one
  compiled program (the same draws as two separate calls, for about 30% less
  compiling: the objects program and the kernel share most of their code)."""
  p, _ = _d48()
  tables, layout = exact_tree_tables(p)

  @jax.jit
  def both(key_objects, key_noise, tables):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    k = exact_tree.tree_objects(key_objects, t, layout, n)[1]
    return k, exact.poset_knorm(key_noise, p, 32.0, (n,))

  with jax.enable_x64(True):
    k, y = both(_key(5), _key(6), tables)
  return np.asarray(k), np.asarray(y)


@pytest.mark.slow
@pytest.mark.statistical
def test_d48_size_law():
  """|A| of 20,000 exact objects at d = 48 against the exact size table (chi-square,
  bins expecting < 5 pooled, p > 1e-4)."""
  p, law = _d48()
  n = 20_000
  k = _d48_draws(n)[0]
  counts = np.bincount(k, minlength=p.d + 1)
  keep = law * n >= 5
  obs = np.append(counts[keep], counts[~keep].sum())
  exp = np.append(law[keep], law[~keep].sum()) * n
  assert stats.chisquare(obs, exp).pvalue > P_MIN


@pytest.mark.slow
@pytest.mark.statistical
def test_d48_noise_moment_and_means():
  """Exact noise at d = 48, scale 32 (eps = 2^-5), n = 20,000: E[Y_0^2] equals
  scale^2 sum_k P(k) ((d+2) + (2k-d)^2) + 1/12 (|z| < 5) and every mean is 0
  (|z| < 5)."""
  p, law = _d48()
  n, s, d = 20_000, 32.0, p.d
  y = _d48_draws(n)[1].astype(np.float64)  # exact.poset_knorm(_key(6), p, s, (n,))
  ks = np.arange(d + 1)
  m2 = s * s * np.sum(law * ((d + 2) + (2 * ks - d) ** 2)) + 1 / 12
  r2 = y[:, 0] ** 2
  assert abs(r2.mean() - m2) < Z_MAX * r2.std(ddof=1) / np.sqrt(n)
  assert np.abs(y.mean(0) / (y.std(0, ddof=1) / np.sqrt(n))).max() < Z_MAX


@pytest.mark.slow
def test_d48_neighbouring_data_move_the_release_by_the_statistic():
  """The same key on neighbouring data (300 rows and the last 299) at d = 48: the
  releases differ by exactly the statistics' difference (the integer noise does not
  depend on the data)."""
  p, _ = _d48()
  d = p.d
  rows = np.asarray(p.order, np.int8)  # row x: the up-set of x, a filter
  rows = rows[np.random.default_rng(0).integers(0, d, 300)]
  mech = jaxdp.PosetCountMechanism(p, 2.0**-5, exact=True)
  a = np.asarray(mech.randomize(_key(9), rows))
  b = np.asarray(mech.randomize(_key(9), rows[1:]))
  np.testing.assert_array_equal(
    a - b, np.asarray(mech.statistic(rows)) - np.asarray(mech.statistic(rows[1:]))
  )


def test_search_runs_cover_every_wave_with_enough_steps():
  """The first pass's binary searches: the runs of waves partition the waves in
  order, and a run's step count reaches every row width of its waves (a search over
  w boundaries needs bit_length(w) halvings); a choice's parent is decided in an
  earlier wave. (Too few steps release invalid objects: the enumeration test.)"""
  p, _ = _d48()
  tables, layout = exact_tree_tables(p)
  waves = tables.waves
  bounds = [(a, b) for a, b, _ in layout.runs]
  assert bounds[0][0] == 0 and bounds[-1][1] == len(waves)
  assert all(b0[1] == b1[0] for b0, b1 in zip(bounds, bounds[1:]))
  decided = {layout.num_nodes: -1}  # the root's |A| row reads the dummy node
  for a, b, iters in layout.runs:
    for w in range(a, b):
      for v, small, other, _, wid, idx in waves[w]:
        if idx < 0:
          continue
        assert int(wid).bit_length() <= iters
        assert decided[v] < w  # the node's own count came from an earlier wave
        decided[small] = decided[other] = w
  assert sorted(i for i in waves[..., 5].ravel() if i >= 0) == list(
    range(layout.num_choices)
  )


def test_a_tree_batch_of_several_chunks_keeps_its_temporaries_to_one_chunk():
  """A 12-element series-parallel poset through the tree path, 2 chunks and a
  partial one: XLA's temporaries stay within TREE_CHUNK_BYTES (tree_chunk's
  per-sample estimate bounds the real working arrays) and within 8 MiB, the budget
  that keeps the d = 128 forest's and the 300-question questionnaire's peak memory
  near 1.3x their output at a batch of 50,000. At 2^25 bytes a chunk (13,025
  samples, about 2 KB each) the same test held 28.8 MB."""
  d = 12
  poset = jaxdp.Poset.from_edges(d, random_series_parallel(np.random.default_rng(3), d))
  _, layout = exact_tree_tables(poset)
  chunk = exact_samplers.tree_chunk(layout)
  assert 64 <= chunk < exact_samplers.CHUNK
  temp = batch_temp_bytes(_key(), poset, chunk, "tree")
  if temp is None:
    pytest.skip("the backend reports no memory analysis")
  assert temp <= min(exact_samplers.TREE_CHUNK_BYTES, 1 << 23)


# jax.clear_caches() makes every later test trace and compile again: this comes last.
@pytest.mark.slow
def test_forced_refinement_gives_the_same_objects_and_the_same_release(monkeypatch):
  """Two checks under one cache clearing (each forced run is its own compilation):

  - every choice forced through the refined pass (WIDEN = 2^31: the first pass
    decides almost nothing) gives the same objects (40,000, the chi-square test's
    compilation for the normal ones);
  - with every choice refined (WIDEN = 2^31) and the noise forced to the host
    refinement (MARGIN = 2^-3), the exact release has the same integers: 1000
    samples, nearly all of them refined on the host (999 with this key; over 900
    asserted). A refinement that differed from the exact rounding on one sample in
    100 still fails with probability above 0.9999."""
  key = _key(4)
  normal = _objects(N_ON_TOP, key, 40_000)  # the chi-square test's compilation
  poset, n = N_ON_TOP, 1000
  noise = np.asarray(exact.poset_knorm(key, poset, 0.75, (n,), path="tree"))
  jax.clear_caches()
  monkeypatch.setattr(exact_tree, "WIDEN", 1 << 31)
  monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-3)
  calls = record_host_refinements(monkeypatch, exact_refine)
  tables, layout = exact_tree_tables(poset)

  # both forced draws in one program (the objects share most of the kernel's code;
  # they do not read MARGIN, so they are the objects of WIDEN alone)
  @jax.jit
  def forced_draws(key, tables):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    objects = exact_tree.tree_objects(key, t, layout, 40_000)
    return objects, exact.poset_knorm(key, poset, 0.75, (n,), path="tree")

  with jax.enable_x64(True):
    forced, got = forced_draws(key, tables)
  jax.clear_caches()
  for x, y in zip(normal, forced):
    np.testing.assert_array_equal(x, np.asarray(y))
  got = np.asarray(got)
  assert calls and calls[0] > 900, calls
  np.testing.assert_array_equal(got, noise)
