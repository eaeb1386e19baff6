"""Series-parallel posets: recognition, the size recursion and the exact sampler.

References are independent of the code under test: brute force over all 4-element
subsets (induced N), the subset recursion over all 2^d subsets (size tables), the
general sampler (two-sample tests), closed forms (root coordinate). Statistical tests
use fixed keys and state their test, sample size and threshold. Object frequencies
and second moments of method="sp" against exact enumeration run in test_samplers.py
(``_methods``) on the same small posets as the other samplers.
"""

import itertools

import jax
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import Poset, PosetBall
from jaxdp.experiments.questionnaire import gate_chain, synthetic_questionnaire
from jaxdp.posets import decomposition
from jaxdp.samplers import dispatch, sp_kernel, sp_plan, sp_tables, subsets, words
from tests.helpers.exactness import (
  chi_square_uniform_pvalue,
  object_index,
  random_series_parallel,
  second_moment_zscores,
)

P_MIN = 1e-4
Z_MAX = 5.0


def _brute_force_n(order):
  """Every induced N (a < b, c < b, c < d, no other relation) by brute force."""
  d = order.shape[0]
  rel = order & ~np.eye(d, dtype=bool)
  found = []
  for quad in itertools.permutations(range(d), 4):
    a, b, c, e = quad
    want = {(a, b), (c, b), (c, e)}
    got = {(x, y) for x in quad for y in quad if rel[x, y]}
    if got == want:
      found.append(quad)
  return found


def _random_poset(rng, d, p_edge):
  adj = np.triu(rng.random((d, d)) < p_edge, 1)
  perm = rng.permutation(d)
  edges = [(int(perm[i]), int(perm[j])) for i, j in zip(*np.nonzero(adj))]
  return Poset.from_edges(d, edges)


def _size_table_by_subsets(poset):
  """T[a] = sum over |A| = a of e(A) e(P \\ A), by the subset recursion."""
  e = subsets.extension_counts(poset)
  d = poset.d
  idx = np.arange(1 << d)
  pop = np.zeros(1 << d, dtype=np.int64)
  for x in range(d):
    pop += (idx >> x) & 1
  return np.bincount(pop, weights=e * e[((1 << d) - 1) ^ idx], minlength=d + 1)


# ------------------------------------------------------------------ recognition
def test_recognition_and_induced_n_against_brute_force():
  """40 random posets (d = 7, edge densities 0.2-0.5) plus named ones: series-parallel
  iff brute force finds no induced N; a reported N is one."""
  rng = np.random.default_rng(0)
  posets = [_random_poset(rng, 7, p) for p in np.linspace(0.2, 0.5, 40)]
  posets += [
    Poset.nhis(3),
    Poset.from_edges(4, [(0, 1), (2, 1), (2, 3)]),
    Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)]),
  ]
  kinds = set()
  for p in posets:
    brute = _brute_force_n(p.order)
    assert decomposition.is_series_parallel(p) == (not brute)
    n = decomposition.induced_n(p)
    assert (n is None) == (not brute)
    if n is not None:
      assert n in brute
    kinds.add(bool(brute))
  assert kinds == {True, False}  # both cases occurred


def test_decomposition_tree_covers_the_poset():
  """Children partition their parent; series children are totally ordered bottom to
  top, parallel children pairwise unrelated."""
  p = Poset.from_edges(9, random_series_parallel(np.random.default_rng(3), 9))
  o = p.order
  stack = [decomposition.decompose(p)]
  assert stack[0].elements == tuple(range(9))
  while stack:
    v = stack.pop()
    if v.children:
      assert sorted(sum((c.elements for c in v.children), ())) == list(v.elements)
      for c1, c2 in itertools.combinations(v.children, 2):
        block = o[np.ix_(c1.elements, c2.elements)]
        if v.kind == "series":
          assert block.all()
        else:
          assert not block.any() and not o[np.ix_(c2.elements, c1.elements)].any()
    stack.extend(v.children)


# ------------------------------------------------------------------ size recursion
@pytest.mark.parametrize("d,n_block", [(12, False), (16, True), (20, False)])
def test_size_tables_match_the_subset_recursion(d, n_block):
  """T_P from the decomposition equals the subset recursion (relative 1e-9), on
  random series-parallel posets (one with a prime N piece)."""
  rng = np.random.default_rng(d)
  p = Poset.from_edges(d, random_series_parallel(rng, d, n_block))
  assert not p.is_forest
  ref = _size_table_by_subsets(p)
  np.testing.assert_allclose(np.exp(sp_tables.log_size_table(p)), ref, rtol=1e-9)
  assert PosetBall(p, "sp").num_objects() == pytest.approx(ref.sum(), rel=1e-9)


# ------------------------------------------------------------------ the sampler
def _d12():
  """A random series-parallel poset with a prime N piece, d = 12."""
  p = Poset.from_edges(12, random_series_parallel(np.random.default_rng(14), 12, True))
  assert sp_tables.sp_tables(p)[1].blocks and not p.is_forest  # the N is a block
  return p


# The d = 12 checks are two tests (each compiles its own kernels), so that two
# workers can run them side by side.
@pytest.mark.slow
@pytest.mark.statistical
def test_sp_size_law_agrees_with_the_subset_recursion_at_d12():
  """|A| of n = 100,000 objects of method="sp" at d = 12 against the subset
  recursion's exact law (chi-square, bins expecting < 5 pooled, p > 1e-4)."""
  p = _d12()
  n = 100_000
  _, k = dispatch.sample_objects(jax.random.key(11), p, "sp", n)
  law = _size_table_by_subsets(p)
  law = law / law.sum()
  counts = np.bincount(np.asarray(k), minlength=p.d + 1)
  keep = law * n >= 5  # bins expecting < 5 are pooled
  obs, exp = counts[keep], law[keep] * n
  if (~keep).any():
    obs, exp = np.append(obs, counts[~keep].sum()), np.append(exp, law[~keep].sum() * n)
  assert stats.chisquare(obs, exp).pvalue > P_MIN


@pytest.mark.slow
@pytest.mark.statistical
def test_sp_second_moments_agree_with_the_general_sampler_at_d12():
  """E[Z Z^T] of method="sp" against method="general" at d = 12, n = 100,000 each
  (two-sample z, all 91 entries |z| < 5)."""
  p = _d12()
  n = 100_000
  za = np.asarray(
    jaxdp.random.poset_ball(jax.random.key(12), p, (n,), method="sp"), np.float64
  )
  zb = np.asarray(
    jaxdp.random.poset_ball(jax.random.key(13), p, (n,), method="general"), np.float64
  )
  iu = np.triu_indices(p.d + 1)
  pa, pb = za[:, iu[0]] * za[:, iu[1]], zb[:, iu[0]] * zb[:, iu[1]]
  se = np.sqrt(pa.var(0, ddof=1) / n + pb.var(0, ddof=1) / n)
  assert np.abs((pa.mean(0) - pb.mean(0)) / se).max() < Z_MAX


@pytest.mark.slow
def test_questionnaire_of_300_questions():
  """A 300-question instrument with joint follow-ups (not a forest): 'auto' takes
  the exact series-parallel sampler; 8192 points: the root coordinate's second
  moment equals its closed form sum_k P(k) ((d+2) + (2k-d)^2) / ((d+2)(d+3)) (P(k)
  from the size tables; |z| < 5), every coordinate's mean is 0 (A and B are
  exchangeable; all |z| < 5), and every point lies in [-1, 1]; 2048 objects are
  valid (in each part, every question after the questions it requires)."""
  q = synthetic_questionnaire(0, 300)
  assert q.d == 300 and not q.is_forest and decomposition.is_series_parallel(q)
  assert PosetBall(q).resolved_method == "sp"
  n = 8192
  z = np.asarray(jaxdp.random.poset_ball(jax.random.key(300), q, (n,)), np.float64)
  assert z.shape == (n, 301) and np.isfinite(z).all() and np.abs(z).max() <= 1.0
  d = q.d
  log_t = sp_tables.log_size_table(q)
  pk = np.exp(log_t - log_t.max())
  pk /= pk.sum()
  k = np.arange(d + 1)
  exact = np.sum(pk * ((d + 2) + (2 * k - d) ** 2)) / ((d + 2) * (d + 3))
  r2 = z[:, 0] ** 2
  assert abs(r2.mean() - exact) < Z_MAX * r2.std(ddof=1) / np.sqrt(n)
  zmean = z.mean(0) / (z.std(0, ddof=1) / np.sqrt(n))
  assert np.abs(zmean).max() < Z_MAX
  # objects: within each part every question comes after all questions above it
  # (its prerequisites), in all 2048 draws (checked on the 322 cover relations)
  seq, k = dispatch.sample_objects(jax.random.key(301), q, "sp", 2048)
  seq, k = np.asarray(seq), np.asarray(k)
  pos = np.argsort(seq, axis=1)  # position of each question
  in_a = pos < k[:, None]
  below, above = np.nonzero(q.cover_matrix)
  same = in_a[:, below] == in_a[:, above]
  assert (np.sort(seq, axis=1) == np.arange(d)).all()
  assert (pos[:, above] < pos[:, below])[same].all()


@pytest.mark.slow
def test_sp_sampler_under_jit_and_vmap():
  """Keys vmapped under jit give the same draws as one by one."""
  p = Poset.from_edges(3, [(0, 2)])
  keys = jax.random.split(jax.random.key(5), 3)
  f = jax.jit(jax.vmap(lambda k: jaxdp.random.poset_ball(k, p, (4,), method="sp")))
  batch = f(keys)
  for i in range(3):
    np.testing.assert_array_equal(
      batch[i], jaxdp.random.poset_ball(keys[i], p, (4,), method="sp")
    )


# ------------------------------------------------------------------ deep trees
def _spine(d, n_leg=None):
  """Caterpillar (``gate_chain`` with one follow-up per gate): spine 0 < 2 < 4 < ...
  with leaf 2i+1 below 2i (a decomposition tree d depths deep). With ``n_leg``:
  spine element n_leg's leg is replaced by an N (prime block) hanging below it,
  which splits the scanned runs of depths."""
  poset = gate_chain(d, follow_ups=1)
  if n_leg is None:
    return poset
  edges = [tuple(e) for e in np.argwhere(poset.cover_matrix).tolist()]
  x, extra = n_leg, d
  n = [extra, extra + 1, extra + 2]  # with leg x+1: a<b, c<b, c<e
  edges += [(x + 1, n[0]), (n[1], n[0]), (n[1], n[2]), (n[0], x), (n[2], x)]
  edges.remove((x + 1, x))
  return Poset.from_edges(d + 3, edges)


def _draw(poset, n, min_steps, monkeypatch, points=True):
  """Points (if ``points``) and objects of the sp kernel with scans over runs of
  >= ``min_steps`` narrow depths (a huge value: fully unrolled), in one compiled
  program: the objects are drawn from the points' object key, so the program holds
  the object draw once (the points' and the objects' draws are the same
  operations on the same key)."""
  monkeypatch.setattr(sp_plan, "BAND_MIN_STEPS", min_steps)
  _, tables, layout = dispatch.tables_and_layout(poset, "sp")
  tables = jax.tree_util.tree_map(jax.numpy.asarray, tables)
  bands = [(b.a, b.b) for b in sp_plan.LevelPlan(layout).bands]

  def draw(root):
    k, k_exp = jax.random.split(root)
    seq, cnt = sp_kernel.sp_objects(k, tables, layout, n)
    if not points:
      return None, seq, cnt
    z = dispatch.points(k, k_exp, tables, poset.d, layout, n, np.float32)
    return z, seq, cnt

  z, seq, k = jax.jit(draw)(jax.random.key(7))
  return (
    bands,
    np.asarray(z) if points else None,
    np.asarray(seq),
    np.asarray(k),
  )


@pytest.mark.slow
@pytest.mark.parametrize("which", ["caterpillar with an N", "gate chain"])
def test_scanned_depths_equal_the_unrolled_kernel(which, monkeypatch):
  """Runs of narrow depths go through lax.scan (compiled once) instead of one block of
  operations per depth; the arithmetic per node is the same, so points and objects
  equal the unrolled kernel's bit for bit (n = 2,000 each). Deep trees: a 16-element
  caterpillar with an N block in the middle (19 elements; runs above and below the
  block, the lower one entered and left from unrolled depths) and a 24-element chain
  of gates whose follow-ups differ (depths of different shapes, padded)."""
  poset = {
    "caterpillar with an N": lambda: _spine(16, n_leg=8),
    "gate chain": lambda: gate_chain(24, 1),
  }[which]()
  bands, z1, s1, k1 = _draw(poset, 2000, 4, monkeypatch)
  none, z0, s0, k0 = _draw(poset, 2000, 10**9, monkeypatch)
  assert bands and not none
  if which == "caterpillar with an N":
    assert len(bands) == 2 and bands[0][0] == 0
  np.testing.assert_array_equal(z1, z0)
  np.testing.assert_array_equal(s1, s0)
  np.testing.assert_array_equal(k1, k0)


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("d, n_leg", [(6, None), (4, 2)])
def test_scanned_depths_sample_objects_uniformly(d, n_leg, monkeypatch):
  """The scanned path on its own against exact enumeration, chi-square of object
  counts, n = max(100,000, 60 N), p > 1e-4: a 6-element caterpillar (every depth in
  one scan) and a 4-element one with an N block (7 elements: a scan above the block,
  unrolled depths below)."""
  from tests.helpers.exactness import chi_square_uniform_pvalue, object_index

  poset = _spine(d, n_leg)
  ref = jaxdp.enumerate_objects(poset)
  num = ref[0].shape[0]
  bands, _, seq, k = _draw(poset, max(100_000, 60 * num), 1, monkeypatch, points=False)
  assert bands
  idx = object_index(seq, k, *ref)
  assert (idx >= 0).all()
  assert chi_square_uniform_pvalue(idx, num) > P_MIN


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
  "make", [lambda d: synthetic_questionnaire(0, d), lambda d: gate_chain(d)]
)
def test_experiment_posets_check_d(make):
  """The synthetic instruments name a bad ``d`` (a float failed deep inside)."""
  with pytest.raises(TypeError, match=r"d must be an integer; got 1\.5"):
    make(1.5)
  with pytest.raises(ValueError, match="d must be >= 1; got 0"):
    make(0)


def test_gate_chain_follow_ups():
  """Fixed follow-ups per gate: with one, the caterpillar (spine 0 < 2 < ..., 2i+1
  below 2i: the order matrix written out); with three, gates 0, 4, 8 (the last
  gate keeps what is left); 0 is named."""
  d = 7
  want = np.eye(d, dtype=bool)
  for i in range(0, d, 2):
    want[i, i::2] = True  # spine: 2i <= 2j for j >= i
    if i + 1 < d:
      want[i + 1, i::2] = True  # the leg lies below its spine element
  assert np.array_equal(gate_chain(d, follow_ups=1).order, want)
  assert gate_chain(d, follow_ups=1).name == "caterpillar d=7"
  gates = gate_chain(10, follow_ups=3)
  assert [x for x in range(10) if gates.order[0, x]] == [0, 4, 8]
  with pytest.raises(ValueError, match="follow_ups must be >= 1; got 0"):
    gate_chain(5, follow_ups=0)


def _fence(d):
  """a1 < b1 > a2 < b2 > ...: prime (one prime piece of d elements)."""
  return Poset.from_edges(
    d, [(i, i + 1) if i % 2 == 0 else (i + 1, i) for i in range(d - 1)]
  )


def test_non_series_parallel_errors_name_an_induced_n():
  fence = _fence(24)
  with pytest.raises(ValueError, match=r"induced N \(p\d+ < p\d+.*d <= 22"):
    PosetBall(fence)  # auto: too big for general, not sp
  with pytest.raises(ValueError, match="prime piece of 18 elements"):
    PosetBall(_fence(18), "sp")
  assert PosetBall(_fence(18)).resolved_method == "general"
  with pytest.raises(ValueError, match=f"d <= {sp_tables.SP_MAX_D}"):
    PosetBall(Poset.from_edges(sp_tables.SP_MAX_D + 1, []), "sp")
  with pytest.raises(ValueError, match="method='sp'"):
    PosetBall(Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)]), "forest")


# ------------------------------------------------------------------ float64 variates
def test_kernel_log_is_within_one_ulp_of_mpmath():
  """The kernel's float64 logarithm (fdlibm's algorithm in array operations) on its
  whole input set, the midpoints (j + 1/2) 2^-52 of ``_uniform52``: 200,000 random j,
  the 2,000 smallest and largest j, and the values next to fdlibm's branch points
  (sqrt(2) and its rearrangement bounds, at every exponent). Reference: mpmath at
  120 bits for the 3,000 values farthest from numpy's log and all edge values;
  numpy's log (itself below 1 ulp) for the rest. Threshold: below 1 ulp."""
  import mpmath

  rng = np.random.default_rng(11)
  j = np.concatenate(
    [
      rng.integers(0, 2**52, 200_000, dtype=np.int64),
      np.arange(2000),
      2**52 - 1 - np.arange(2000),
    ]
  )
  x = (j.astype(np.float64) + 0.5) * 2.0**-52
  # the mantissas where fdlibm's reduction and rearrangement switch, at all exponents
  edges = []
  for high in (0x6A09E, 0x6147A, 0x6B851):
    for e in range(-53, 0):
      b = ((1023 + e) << 52) | (high << 32)
      edges += [b - 1, b, b + 1, b + (1 << 32) - 1]
  x_edge = np.asarray(edges, np.uint64).view(np.float64)
  x_edge = x_edge[(x_edge >= 2.0**-53) & (x_edge < 1.0)]
  x = np.concatenate([x, x_edge])
  with jax.enable_x64(True):
    y = np.asarray(jax.jit(words.log_normal)(jax.numpy.asarray(x)))
  ref = np.log(x)
  ulp = np.spacing(np.abs(ref))
  assert (np.abs(y - ref) <= ulp).all()
  mpmath.mp.prec = 120
  worst = np.argsort(-np.abs(y - ref) / ulp)[:3000]
  check = np.unique(
    np.concatenate(
      [worst, np.arange(len(x) - len(x_edge), len(x)), np.arange(200_000, 204_000)]
    )
  )
  err = max(
    float(
      abs(mpmath.mpf(float(y[i])) - mpmath.log(mpmath.mpf(float(x[i])))) / float(ulp[i])
    )
    for i in check
  )
  assert err < 1.0, err


def test_kernel_exp_is_within_one_ulp_of_mpmath():
  """The kernel's float64 exponential (fdlibm's algorithm in array operations) on
  the arguments the kernel gives it, log(V) / (m + 1) in [-37, 0], and down to -708:
  200,000 random values in [-40, 0], 20,000 in [-708, 0], 20,000 in [-1e-6, 0], the
  ends and the reduction's switch points (k ln 2 / 2, odd k). Reference: mpmath at
  120 bits for the 3,000 values farthest from numpy's exp and all edge values;
  numpy's exp (itself below 1 ulp) for the rest. Threshold: below 1 ulp."""
  import mpmath

  rng = np.random.default_rng(12)
  half = np.log(2) / 2 * np.arange(1, 80, 2)
  x_edge = np.concatenate([-half, np.nextafter(-half, 0), np.nextafter(-half, -1)])
  x_edge = np.concatenate([x_edge, [0.0, -0.0, -708.0, -(2.0**-60)]])
  x = np.concatenate(
    [-rng.random(200_000) * 40, -rng.random(20_000) * 708, -rng.random(20_000) * 1e-6]
  )
  x = np.concatenate([x, x_edge])
  with jax.enable_x64(True):
    y = np.asarray(jax.jit(words.exp_nonpositive)(jax.numpy.asarray(x)))
  ref = np.exp(x)
  ulp = np.spacing(ref)
  assert (np.abs(y - ref) <= ulp).all()
  mpmath.mp.prec = 120
  worst = np.argsort(-np.abs(y - ref) / ulp)[:3000]
  check = np.unique(np.concatenate([worst, np.arange(len(x) - len(x_edge), len(x))]))
  err = max(
    float(
      abs(mpmath.mpf(float(y[i])) - mpmath.exp(mpmath.mpf(float(x[i])))) / float(ulp[i])
    )
    for i in check
  )
  assert err < 1.0, err


@pytest.mark.slow
@pytest.mark.statistical
def test_parallel_ends_under_a_series_node_are_exact():
  """A parallel node's end (the sum of its children's ends thinned by V^(1/(m+1)),
  from the kernel's logarithm and exponential) decides the order only when the node
  sits under a series node below another parallel node, as {0 < 1, 0 < 2} does in
  {0 < 1, 0 < 2} + {3 < 4} + {5}; the point's spacings depend on it everywhere.
  Against exact enumeration (1,708 objects) and the exact E[Z Z^T]: chi-square of the
  object counts, p > 1e-4, and every second-moment |z| < 5, n = 200,000, key 5
  (objects and points from one draw). Thinning by V^(0.8/(m+1)) instead gives
  |z| = 10.6, by V^(2/(m+1)) |z| = 34 and p = 3e-115, no thinning |z| = 52."""
  poset = Poset.from_edges(6, [(0, 1), (0, 2), (3, 4)])
  ref = jaxdp.enumerate_objects(poset)
  num, n = ref[0].shape[0], 200_000
  _, tables, layout = dispatch.tables_and_layout(poset, "sp")
  tables = jax.tree_util.tree_map(jax.numpy.asarray, tables)

  def draw(key):
    k_obj, k_exp = jax.random.split(key)
    z = dispatch.points(k_obj, k_exp, tables, poset.d, layout, n, np.float32)
    return (z, *sp_kernel.sp_objects(k_obj, tables, layout, n))

  z, seq, k = jax.jit(draw)(jax.random.key(5))
  idx = object_index(np.asarray(seq), np.asarray(k), *ref)
  assert (idx >= 0).all()
  assert chi_square_uniform_pvalue(idx, num) > P_MIN
  zs = second_moment_zscores(np.asarray(z), jaxdp.exact_second_moment(poset))
  assert np.abs(zs).max() < Z_MAX


def test_kernel_uniforms_are_the_cell_midpoints():
  """``uniform52`` maps 52 bits (27 of the high word, 25 of the low) to
  (j + 1/2) 2^-52 exactly, checked with Python integers on extreme and random words,
  from the two words and from their packed uint64 alike: never 0 or 1, so every
  Exp(1) variate is positive and finite."""
  rng = np.random.default_rng(3)
  hi = np.concatenate([[0, 0, 2**32 - 1, 2**32 - 1], rng.integers(0, 2**32, 1000)])
  lo = np.concatenate([[0, 2**32 - 1, 0, 2**32 - 1], rng.integers(0, 2**32, 1000)])
  pair = (jax.numpy.asarray(hi.astype(np.uint32)), jax.numpy.asarray(lo.astype(np.uint32)))
  with jax.enable_x64(True):
    u = np.asarray(jax.jit(words.uniform52)(pair))
    e = np.asarray(jax.jit(words.exponential)(pair))
    packed = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
    u_packed = np.asarray(jax.jit(words.uniform52)(jax.numpy.asarray(packed)))
  np.testing.assert_array_equal(u_packed, u)
  from fractions import Fraction

  for h, l, v in zip(hi, lo, u):
    jj = (int(h) >> 5) * 2**25 + (int(l) >> 7)
    assert Fraction(float(v)) == Fraction(2 * jj + 1, 2**53)
  assert (u > 0).all() and (u < 1).all() and (e > 0).all() and np.isfinite(e).all()
  assert u[0] == 2.0**-53 and u[3] == 1 - 2.0**-53


def test_spare_uniforms_use_only_the_bits_the_spacings_leave():
  """The size choices' uniforms read exactly the 12 bits per word that ``uniform52``
  drops: flipping those bits leaves every spacing uniform unchanged, flipping the
  others leaves every size uniform unchanged, and each size uniform is its 23 bits on
  the grid of ``jax.random.uniform`` (all 2^24 patterns of two words' spare bits
  reach every grid point twice)."""
  from jaxdp.samplers import sp_sizes

  rng = np.random.default_rng(0)
  hi, lo = (rng.integers(0, 2**32, (2, 5, 7), dtype=np.uint32) for _ in range(2))
  spare_hi, spare_lo = np.uint32(31), np.uint32(127)
  with jax.enable_x64(True):
    u52 = np.asarray(words.uniform52((hi, lo)))
    u52_flipped = np.asarray(words.uniform52((hi ^ spare_hi, lo ^ spare_lo)))
  np.testing.assert_array_equal(u52, u52_flipped)
  u = np.asarray(sp_sizes.spare_uniforms((hi, lo), 5))
  u_flipped = np.asarray(sp_sizes.spare_uniforms((hi ^ ~spare_hi, lo ^ ~spare_lo), 5))
  np.testing.assert_array_equal(u, u_flipped)
  # the same bits from the words packed into one uint64 (words.packed_words)
  packed = (hi.astype(np.uint64) << np.uint64(32)) | lo.astype(np.uint64)
  with jax.enable_x64(True):
    u_packed = np.asarray(sp_sizes.spare_uniforms(jax.numpy.asarray(packed), 5))
  np.testing.assert_array_equal(u_packed, u)
  # the 24 spare bits of (word 0, word 1), high to low, and the uniform from their top 23
  bits = (
    ((hi[0] & spare_hi).astype(np.int64) << 19)
    | ((lo[0] & spare_lo).astype(np.int64) << 12)
    | ((hi[1] & spare_hi).astype(np.int64) << 7)
    | (lo[1] & spare_lo)
  )
  np.testing.assert_array_equal(u, (bits >> 1).astype(np.float64) * 2.0**-23)
  assert u.dtype == np.float32 and u.min() >= 0 and u.max() < 1
