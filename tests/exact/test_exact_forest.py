"""The ranks path's forest unranking (:mod:`jaxdp.exact.forest`) against the generic
unranking, the one-log exponential intervals (two words and one word per uniform)
against mpmath at 300 bits, and the forest kernel's one-word fast pass against its
host refinement."""

from __future__ import annotations

import functools
import itertools
import math

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import forest
from jaxdp.exact import intervals as exact_intervals
from jaxdp.exact import refine as exact_refine
from jaxdp.exact import samplers as exact_samplers
from jaxdp.exact.choices import trie_subset
from jaxdp.exact.intervals import exp_intervals
from jaxdp.samplers.exact_tables import exact_tables
from tests.helpers.exactness import brute_objects, object_index, without_second_pass


def _key(i):
  return jax.random.fold_in(dprandom.secure_key(bytes(range(32))), i)


# preorder-numbered forests: a 6-element forest of depth 3, and NHIS-3
PREORDER = {
  "forest6": jaxdp.Poset.from_parents([-1, 0, 1, 1, -1, 4]),
  "forest5": jaxdp.Poset.from_parents([-1, 0, 0, 0, -1]),  # a root with three children
}


def _direct_low(seq, k, up):
  """low (2, d) from one sample's sequence: the first position in each part of an
  element below or equal to j (the part's size where none)."""
  d = len(seq)
  la = [next((p for p in range(k) if up[seq[p], j]), k) for j in range(d)]
  lb = [next((p for p in range(d - k) if up[seq[k + p], j]), d - k) for j in range(d)]
  return np.array([la, lb])


@functools.partial(jax.jit, static_argnames=("order", "total", "n"))
def _forest_objects(key, tables, *, order, total, n):
  """The forest kernel's objects: A from a uniform rank's trie, then the positions."""
  low, size_a, pos = forest.forest_object(*jax.random.split(key), tables, total, order, n)
  return pos.T, size_a, low


@pytest.mark.statistical
@pytest.mark.parametrize("name", ["forest6", "forest5"])
def test_forest_objects_are_exactly_uniform(name):
  """Every object's frequency against exact enumeration: chi-square over all N(P)
  objects (N(P) = 692 and 288), n = 60,000, p > 1e-4, fixed key; every sample is a
  valid object and its chain positions equal a direct computation from its
  sequence."""
  poset = PREORDER[name]
  d = poset.d
  objs = brute_objects(poset)
  tables, total = exact_tables(poset)
  assert total == len(objs) == len(set(objs))
  order = forest.forest_order(poset)
  n = 60_000
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    pos, size_a, low = (
      np.asarray(x) for x in _forest_objects(_key(2), t, order=order, total=total, n=n)
    )
  seq = np.argsort(pos, axis=1)  # the element at each position
  assert np.all(np.sort(pos, axis=1) == np.arange(d))
  index = {o: i for i, o in enumerate(objs)}
  rows = np.concatenate([size_a[:, None], seq], 1)
  hits = np.array([index[tuple(r)] for r in rows.tolist()])  # KeyError: not an object
  counts = np.bincount(hits, minlength=len(objs))
  assert stats.chisquare(counts).pvalue > 1e-4
  up = np.asarray(tables.up)
  for i in range(0, n, 300):
    np.testing.assert_array_equal(low[i], _direct_low(seq[i], size_a[i], up))


@pytest.mark.parametrize("name", ["forest6", "forest5"])
def test_every_rank_and_permutation_hit_every_object_equally_often(name):
  """Exact enumeration, no statistics: every rank in [0, N(P)) (A by the trie) with
  every one of the d! digit tuples (the permutation by insertion) gives a valid
  object, and each of the N(P) objects exactly d! times, so uniform ranks and
  uniform digits give each object probability exactly 1/N(P)."""
  poset = PREORDER[name]
  d = poset.d
  objs = brute_objects(poset)
  tables, total = exact_tables(poset)
  order = forest.forest_order(poset)
  digits = np.array(list(itertools.product(*[range(y + 1) for y in range(d)])), np.int32)
  perms = len(digits)
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    a = np.asarray(jax.jit(trie_subset, static_argnums=2)(jnp.arange(total), t, d)[0])
    a = np.repeat(a, perms)  # every rank with every digit tuple
    cols = [jnp.asarray(np.tile(digits[:, y], total)) for y in range(d)]

    @jax.jit
    def positions(cols, a):
      return forest.heap_positions(forest.insert_places(cols), a, order)

    pos = np.asarray(positions(cols, jnp.asarray(a))).T
  size_a = ((a[:, None] >> np.arange(d)) & 1).sum(1)  # |A|: the bits of A's mask
  ref = np.array(objs)
  hits = object_index(np.argsort(pos, axis=1), size_a, ref[:, 1:], ref[:, 0])
  assert np.all(hits >= 0)  # -1: not an object
  np.testing.assert_array_equal(np.bincount(hits, minlength=len(objs)), perms)


def test_uniform_permutation_digits_are_a_bijection():
  """Inserting y at place c_y (c_y in [0, y]) maps the 5! digit tuples onto the 5!
  permutations of 0..4; each radix group's product stays below ``GROUP_MAX`` and the
  groups hold the radices 2..d in order, for d up to 40."""
  d = 5
  digits = np.array(list(itertools.product(*[range(y + 1) for y in range(d)])))
  cols = [jnp.asarray(digits[:, y], jnp.int32) for y in range(d)]
  place = np.stack([np.asarray(p) for p in forest.insert_places(cols)], 1)
  assert len({tuple(p) for p in place.tolist()}) == math.factorial(d)
  assert np.all(np.sort(place, 1) == np.arange(d))
  for dd in range(1, 41):
    groups = forest.radix_groups(dd)
    assert [r for g in groups for r in g] == list(range(2, dd + 1))
    assert all(math.prod(g) < forest.GROUP_MAX for g in groups)


@pytest.mark.statistical
def test_uniform_permutation_is_uniform():
  """120,000 permutations of 0..4: each of the 120 against 1/120 (chi-square, p >
  1e-4), fixed key; and with d = 13 (two radix groups) each element's place is
  uniform over 0..12 (chi-square per element, Bonferroni p > 1e-4 / 13)."""
  # one compiled program per (d, m) rather than one per eager operation: the same
  # integer operations, so the same permutations
  draw = jax.jit(forest.uniform_permutation, static_argnums=(1, 2))
  with jax.enable_x64(True):
    five = np.stack([np.asarray(p) for p in draw(_key(3), 5, 120_000)], 1)
    thirteen = np.stack([np.asarray(p) for p in draw(_key(4), 13, 26_000)], 1)
  assert len(forest.radix_groups(13)) == 2
  code = (five * 5 ** np.arange(5)).sum(1)
  counts = np.unique(code, return_counts=True)[1]
  assert len(counts) == 120 and stats.chisquare(counts).pvalue > 1e-4
  assert np.all(np.sort(thirteen, 1) == np.arange(13))
  for y in range(13):
    obs = np.bincount(thirteen[:, y], minlength=13)
    assert stats.chisquare(obs).pvalue > 1e-4 / 13


def test_forest_order_only_for_preorder_forests():
  """A forest not numbered in preorder, and a poset that is not a forest, keep the
  generic unranking."""
  assert forest.forest_order(jaxdp.Poset.from_parents([-1, 0, 0])) is not None
  assert forest.forest_order(jaxdp.Poset.from_parents([1, -1, 1])) is None
  assert forest.forest_order(jaxdp.Poset.from_parents([-1, 2, 0])) is None
  diamond = jaxdp.Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
  assert forest.forest_order(diamond) is None


def test_exponential_intervals_contain_the_300_bit_values():
  """[E_lo, E_hi] from 52 digits j contains [-log(1 - j 2^-52), -log(1 - (j+1) 2^-52)]
  (mpmath, 300 bits) up to 2^-50 relative, and is no more than twice as wide plus
  2^-50 E_hi, on 3,000 random j and the extremes (j = 2^52 - 2: E_hi = 52 log 2)."""
  rng = np.random.default_rng(3)
  j = np.concatenate(
    [
      rng.integers(0, 2**52, 1500, dtype=np.uint64),
      (2.0 ** -rng.uniform(0, 52, 1500) * 2**52).astype(np.uint64),
      2**52 - 1 - (2.0 ** -rng.uniform(0, 52, 500) * 2**52).astype(np.uint64),
      np.array([0, 1, 2, 2**51, 2**52 - 3, 2**52 - 2], np.uint64),
    ]
  )
  words = np.stack([(j >> np.uint64(20)), (j & np.uint64(0xFFFFF)) << np.uint64(12)], -1)
  with jax.enable_x64(True):
    e_lo, e_hi = jax.jit(exp_intervals)(jnp.asarray(words.astype(np.uint32)))
  e_lo, e_hi = np.asarray(e_lo), np.asarray(e_hi)
  mpmath.mp.prec = 300
  tol = mpmath.mpf(2) ** -50
  for ji, lo, hi in zip(j.tolist(), e_lo, e_hi):
    t_lo = -mpmath.log(1 - mpmath.mpf(ji) / 2**52)
    t_hi = -mpmath.log(1 - mpmath.mpf(ji + 1) / 2**52)
    assert mpmath.mpf(float(lo)) <= t_lo * (1 + tol), ji
    assert mpmath.mpf(float(hi)) >= t_hi * (1 - tol), ji
    assert mpmath.mpf(float(hi - lo)) <= 2 * (t_hi - t_lo) + tol * t_hi, ji
  # V may be 1 only for j = 2^52 - 1: E_hi is infinite there and finite elsewhere
  top = j == 2**52 - 1
  assert np.all(np.isinf(e_hi[top])) and np.all(np.isfinite(e_hi[~top]))


def test_one_word_exponential_intervals_contain_the_300_bit_values():
  """[E_lo, E_hi] from one word (32 digits j) contains [-log(1 - j 2^-32),
  -log(1 - (j+1) 2^-32)] (mpmath, 300 bits) up to 2^-50 relative, and is no more than
  twice as wide plus 2^-50 E_hi, on 1,500 random j and the extremes; E_hi is
  infinite only for j = 2^32 - 1 (V may be 1)."""
  rng = np.random.default_rng(4)
  j = np.concatenate(
    [
      rng.integers(0, 2**32, 500, dtype=np.uint64),
      (2.0 ** -rng.uniform(0, 32, 500) * 2**32).astype(np.uint64),
      2**32 - 1 - (2.0 ** -rng.uniform(0, 32, 500) * 2**32).astype(np.uint64),
      np.array([0, 1, 2, 2**31, 2**32 - 3, 2**32 - 2, 2**32 - 1], np.uint64),
    ]
  )
  with jax.enable_x64(True):
    e_lo, e_hi = jax.jit(exp_intervals)(jnp.asarray(j.astype(np.uint32)[:, None]))
  e_lo, e_hi = np.asarray(e_lo), np.asarray(e_hi)
  mpmath.mp.prec = 300
  tol = mpmath.mpf(2) ** -50
  top = j == 2**32 - 1
  assert np.all(np.isinf(e_hi[top])) and np.all(np.isfinite(e_hi[~top]))
  for ji, lo, hi in zip(j[~top].tolist(), e_lo[~top], e_hi[~top]):
    t_lo = -mpmath.log(1 - mpmath.mpf(ji) / 2**32)
    t_hi = -mpmath.log(1 - mpmath.mpf(ji + 1) / 2**32)
    assert mpmath.mpf(float(lo)) <= t_lo * (1 + tol), ji
    assert mpmath.mpf(float(hi)) >= t_hi * (1 - tol), ji
    assert mpmath.mpf(float(hi - lo)) <= 2 * (t_hi - t_lo) + tol * t_hi, ji


def test_one_word_host_bounds_contain_the_300_bit_values():
  """The host's [E_lo, E_hi] from one fast-pass word and 6 more (224 digits) contains
  the 300-bit [-log(1 - V_lo), -log(1 - V_hi)] of V's cell [b, b + 1) 2^-224 and is
  at most 10^-75 wider, on 60 random cells, cells just below 1 and V = 0; the 52-digit
  reading of the same words (two words) is a different cell, so a host that read
  one word as two would not pass."""
  rng = np.random.default_rng(5)
  cells = [rng.integers(0, 2**32, 7, dtype=np.uint64) for _ in range(60)]
  cells += [np.full(7, 2**32 - 1, np.uint64) - np.eye(7, dtype=np.uint64)[6] * 2]
  cells += [np.array([2**32 - 1] + [7] * 6, np.uint64), np.zeros(7, np.uint64)]
  mpmath.mp.prec = 300
  for c in cells:
    w = c.astype(np.uint32)
    lo, hi = exact_refine.refine_exponential_bounds(w[:1], w[1:])
    big = int(w[0])
    for x in w[1:]:
      big = (big << 32) | int(x)
    t_lo = -mpmath.log(1 - mpmath.mpf(big) / mpmath.mpf(2) ** 224)
    t_hi = -mpmath.log(1 - mpmath.mpf(big + 1) / mpmath.mpf(2) ** 224)
    assert mpmath.mpf(str(lo)) <= t_lo and mpmath.mpf(str(hi)) >= t_hi, big
    assert mpmath.mpf(str(hi)) - mpmath.mpf(str(lo)) <= t_hi - t_lo + 1e-75, big
    lo2, _ = exact_refine.refine_exponential_bounds(w[:2], w[2:])
    assert abs(mpmath.mpf(str(lo2)) - t_lo) > 1e-60 or big == 0, big


# One compilation of the patched kernel serves both checks below (the margin is a
# constant of the program, so each margin is a compilation of its own).
@pytest.mark.slow
def _forced_host_run(monkeypatch, key, poset, scale, n):
  """``exact.poset_knorm`` with the fast passes' margin widened to 2^-8, so that most
  samples reach the host: the release, the host's last operands (settled, words,
  extra, low, size_a and the scale it received, as numpy arrays) and the number of
  samples of each host call."""
  seen, calls = {}, []
  real = exact_refine.host_refine

  def keep(refine_one, k, settled, words, extra, s, *ops):
    calls.append(int(np.sum(~np.asarray(settled))))
    seen.update(settled=np.asarray(settled), words=np.asarray(words), scale=np.asarray(s))
    seen.update(extra=np.asarray(extra), low=np.asarray(ops[0]), size_a=np.asarray(ops[1]))
    return real(refine_one, k, settled, words, extra, s, *ops)

  jax.clear_caches()
  monkeypatch.setattr(exact_refine, "host_refine", keep)
  monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-8)
  release = np.asarray(exact.poset_knorm(key, poset, scale, (n,)))
  jax.clear_caches()
  return release, seen, calls


def test_forest_kernel_reads_one_word_per_exponential_and_forced_refinement_agrees(
  monkeypatch,
):
  """Two checks on one forced run. NHIS-3 through the forest kernel with the fast
  pass's margin widened to 2^-8, so that most of 128 samples (over 64 asserted) go to
  the host, but not all, and the host recomputes them from the same one-word cells
  plus 192 digits, rounding them from the chain positions (with this key 99 go to
  the host and 29 stay device-settled):

  - the kernel reads one word per exponential: every released coordinate
    (device-settled or refined) equals the rounding of the 100-digit decimal sum
    computed here from the kernel's own words, object and scale (a kernel or host
    that read the words otherwise would differ);
  - forced refinement gives the same release: the released integers equal the normal
    run's from the same key."""
  poset = jaxdp.Poset.nhis(3)
  assert exact.poset_path(poset) == "ranks"
  n, d = 128, poset.d
  key, scale = jax.random.key(8), 0.75
  normal = np.asarray(exact.poset_knorm(key, poset, scale, (n,)))
  forced, seen, calls = _forced_host_run(monkeypatch, key, poset, scale, n)
  assert seen["words"].shape == (n, d + 2, 1)
  assert len(calls) == 1 and n // 2 < calls[0] < n, calls
  for i in range(n):
    coeff = exact_refine.tree_coefficients(seen["low"][i], int(seen["size_a"][i]))
    want = exact_refine.refine_sample(seen["words"][i], seen["extra"][i], scale, coeff)
    np.testing.assert_array_equal(forced[i], want)
  np.testing.assert_array_equal(forced, normal)


def test_the_device_rounds_again_from_52_digits_before_the_host(monkeypatch):
  """NHIS-3 through the forest kernel at scale 10^5, where the one-word fast pass
  leaves some samples unsettled: the device rounds them again from 52 digits per
  uniform (the fast-pass word and the first word of the refinement's digits) and
  sends only those still unsettled to the host. Of 4,096 samples (this key), the host
  sees at most a quarter of those it sees when that second pass settles nothing
  (at least 16 asserted there), and the two releases are equal: the host reads the
  same digits, so every integer is the exact rounding of the same noise. A second
  pass that read other digits than the host (or in another order) would release
  other integers for the samples it settles."""
  poset, n, scale, key = jaxdp.Poset.nhis(3), 4096, 1e5, _key(52)
  draw = lambda: exact.poset_knorm(key, poset, scale, (n,))
  (normal, with_second), (host_only, without) = without_second_pass(
    monkeypatch, exact_refine, draw, exact_samplers, "tree_round_marked"
  )
  assert without >= 16 and with_second <= without // 4, (with_second, without)
  np.testing.assert_array_equal(normal, host_only)


def test_the_host_refinement_rounds_with_the_float64_scale(monkeypatch):
  """NHIS-3 through the forest kernel at scale 10^6 / 3 (no float32 number), the fast
  passes' margin widened to 2^-8 so that most of 64 samples reach the host: the host
  receives the scale as the float64 the device used, bit for bit (JAX hands a
  callback's operands over with 64-bit types off unless the caller turned them on
  globally, which would cut it to float32), and every released coordinate equals the
  decimal rounding at that scale from the kernel's own words. It fails when the scale
  reaches the host as float32 (the dtype, and then the integers)."""
  poset, n, scale = jaxdp.Poset.nhis(3), 64, 1e6 / 3
  release, seen, calls = _forced_host_run(monkeypatch, _key(53), poset, scale, n)
  assert len(calls) == 1 and calls[0] > n // 2, calls
  assert seen["scale"].dtype == np.float64 and float(seen["scale"]) == scale, seen
  for i in np.nonzero(~seen["settled"])[0]:
    coeff = exact_refine.tree_coefficients(seen["low"][i], int(seen["size_a"][i]))
    want = exact_refine.refine_sample(seen["words"][i], seen["extra"][i], scale, coeff)
    np.testing.assert_array_equal(release[i], want)
