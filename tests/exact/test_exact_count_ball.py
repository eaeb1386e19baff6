"""Exact count-ball K-norm noise (jaxdp.exact.count_ball, jaxdp.exact.count_slices).

Independent references: the orthant classes' exact volumes (the Irwin-Hall CDF in
rationals), the classes' rational CDF against the digits' interval, the exact cell
probabilities of the uniform law on each part's cube slice, the Gamma(d) law of
||Y||_K, the float sampler (a two-sample test), mpmath at 300 bits (each part's
proposal decided by the textbook construction and the noise rounded from the same
digits) and brute force over rationals for the exact per-row norm rule.
"""

import functools
import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import exact
from jaxdp.exact import count_ball as exact_count
from jaxdp.exact import count_slices, slices
from jaxdp.exact import intervals as exact_intervals
from jaxdp.exact import refine as exact_refine
from jaxdp.mechanisms.statistics import count_norm_within, integer_part_sums
from jaxdp.samplers.cube_slice import slice_moments
from tests.helpers.exactness import indexed_key, record_host_refinements, slice_cell_pvalue

mpmath = pytest.importorskip("mpmath")
KEY = bytes(range(64, 96))
SLOW = pytest.mark.slow


def _key(i=0, secure=True):
  """Key i of this file (:func:`~tests.helpers.exactness.indexed_key`)."""
  return indexed_key(KEY, 3000, i, secure)


# One compiled program per plan table rather than one per eager operation.
_fast_count_decisions = jax.jit(exact_count.fast_count_decisions, static_argnums=3)
_count_round = jax.jit(exact_count.count_round, static_argnums=4)
_choose_class = jax.jit(count_slices.choose_class, static_argnums=1)
_choose_subset = jax.jit(count_slices.choose_subset, static_argnums=2)


def _exact_weights(d, k):
  """C(d, j) j! vol S(j, k) (d - j)! vol S(d - j, k), vol from the Irwin-Hall CDF."""
  vol = [slice_moments(m, k)[0] for m in range(d + 1)]
  return [
    math.comb(d, j) * math.factorial(j) * math.factorial(d - j) * vol[j] * vol[d - j]
    for j in range(d + 1)
  ]


def test_class_weights_are_the_exact_orthant_volumes():
  """The Eulerian-number weights equal the Irwin-Hall volumes (rationals), and the
  float sampler's log class weights up to a constant."""
  for d, k in [(4, 2), (6, 3), (7, 1), (5, 5), (12, 4)]:
    w = count_slices.class_weights(d, k)
    assert list(map(Fraction, w)) == _exact_weights(d, k)
    logs = jaxdp.CountBall(d, k).class_weights()
    ratio = np.log(np.array(w, float)) - logs - math.lgamma(d + 1)
    np.testing.assert_allclose(ratio, 0, atol=1e-9)


def _words(values):
  return np.array([[(v >> (32 * (7 - i))) & 0xFFFFFFFF for i in range(8)] for v in values])


def test_class_choice_is_exact_at_its_boundaries():
  """For random 256-bit V and V = T_j - 1, T_j, T_j + 1: where the interval
  [V, V + 1) 2^-256 lies within one class of the rational CDF, that class; where it
  straddles a CDF point, a tie (never a guess)."""
  d, k = 6, 2
  tab = count_slices.count_plans(d, k)
  w = count_slices.class_weights(d, k)
  cdf = [Fraction(sum(w[: j + 1]), sum(w)) for j in range(d)]
  ts = [int("".join(f"{x:08x}" for x in t), 16) for t in tab.thresholds]
  rng = np.random.default_rng(3)
  values = [int.from_bytes(rng.bytes(32), "big") for _ in range(300)]
  values += [t + e for t in ts for e in (-1, 0, 1)]
  with jax.enable_x64(True):
    cls, tie = _choose_class(jnp.asarray(_words(values), jnp.uint32), tab)
  cls, tie = np.asarray(cls), np.asarray(tie)
  assert tie.sum() >= d
  for v, c, t in zip(values, cls, tie):
    lo, hi = Fraction(v, 2**256), Fraction(v + 1, 2**256)
    straddle = any(lo < p < hi for p in cdf)
    if straddle:
      assert t
    elif not t:
      assert c == sum(p <= lo for p in cdf)


def test_subsets_are_uniform():
  """30,000 subsets of 2 of 5 coordinates: the 10 subsets equally likely (chi-square,
  p > 1e-4), every row exactly cls coordinates; cls 0 and 5 give none and all."""
  n = 30_000
  cls = jnp.asarray(np.repeat([2, 0, 5], [n, 10, 10]), jnp.int32)
  keys = jax.random.split(_key(1, secure=False), n + 20)
  with jax.enable_x64(True):
    pos = np.asarray(_choose_subset(keys, cls, 5))
  assert (pos.sum(axis=1) == np.asarray(cls)).all()
  code = pos[:n].astype(int) @ (2 ** np.arange(5))
  counts = np.bincount(code, minlength=32)
  subsets = [sum(1 << i for i in s) for s in itertools.combinations(range(5), 2)]
  assert stats.chisquare(counts[subsets]).pvalue > 1e-4


def test_tied_subset_keys_are_drawn_again(monkeypatch):
  """A row whose cls-th and (cls + 1)-th smallest keys tie (forced: every key of the
  first draw 0) draws all its keys again from fold_in(key, 1): its subset is then the
  cls smallest of those (a numpy sort as the reference), exactly cls coordinates; cls
  0 and d give none and all. Without the redraw the tied rows would get no
  coordinate."""
  d, m = 6, 42
  keys = jax.random.split(_key(71, secure=False), m)
  cls = np.arange(m) % (d + 1)
  real, traced = jax.random.bits, []

  def first_draw_tied(key, shape=(), dtype=None):
    traced.append(shape)
    out = real(key, shape, dtype)
    return jnp.zeros_like(out) if len(traced) == 1 else out

  monkeypatch.setattr(jax.random, "bits", first_draw_tied)
  with jax.enable_x64(True):
    choose = jax.jit(lambda k, c: count_slices.choose_subset(k, c, d))
    pos = np.asarray(choose(keys, jnp.asarray(cls, jnp.int32)))
  monkeypatch.undo()
  assert len(traced) >= 2  # the first draw and the redraw in the loop
  for t in range(m):
    w = np.asarray(real(jax.random.fold_in(keys[t], 1), (d, 2), jnp.uint32), np.uint64)
    u = (w[:, 0] << np.uint64(32)) | w[:, 1]
    want = np.zeros(d, bool)
    want[np.argsort(u, kind="stable")[: cls[t]]] = True
    assert pos[t].sum() == cls[t] and (pos[t] == want).all(), t


@functools.partial(jax.jit, static_argnums=(1, 2))
def _accepted(key, tab, m):
  with jax.enable_x64(True):
    keys = jax.random.split(key, m)
    k_choice, k_prop = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
    k_class, k_subset = jnp.moveaxis(jax.vmap(jax.random.split)(k_choice), 1, 0)
    cls, pos = exact_count.choose(k_class, k_subset, tab)
    words, _ = exact_count.accepted_count_proposals(k_prop, cls, pos, tab)
    _, lo, hi = exact_count.fast_count_decisions(words, cls, pos, tab)
    e_lo, e_hi = exact_intervals.exp_intervals(words[:, : tab.d + 2])
    return cls, pos, words, lo, hi, (e_lo + e_hi) / 2


def _forced(d, k, a):
  """count_plans(d, k) with every part of size m > k on the wrapped simplex a."""
  tab = count_slices.count_plans(d, k)
  plans = tuple(
    p if p is None or m <= k else slices.slice_plan(m, k, a)
    for m, p in enumerate(tab.plans)
  )
  return tab._replace(plans=plans)


@pytest.mark.parametrize(
  "tab",
  [count_slices.count_plans(5, 2), pytest.param(_forced(5, 2, 5), marks=SLOW)],
  ids=["plans", "wrapped-a5"],
)
def test_noise_follows_the_exact_law(tab):
  """40,000 unrounded draws at d = 5, k = 2: the class against the exact weights
  (chi-square); each part's point (the positive part of classes 3 and 4, the
  negative part of classes 1 and 0) in cells of side 1/3 (3 coordinates) or 1/2
  against the exact uniform law on its slice; ||Y||_K against Gamma(5) (KS); all
  p > 1e-4."""
  d, k, n = 5, 2, 40_000
  cls, pos, _, lo, hi, e = (np.asarray(v) for v in _accepted(_key(2, secure=False), tab, n))
  x = (lo + hi).astype(np.float64) * 2.0**-53
  w = np.array([float(v) for v in _exact_weights(d, k)])
  counts = np.bincount(cls, minlength=d + 1)
  assert stats.chisquare(counts, w / w.sum() * n).pvalue > 1e-4
  assert (pos.sum(axis=1) == cls).all()
  for j, positive in [(3, True), (4, True), (1, False), (0, False)]:
    rows = cls == j
    part = pos[rows] if positive else ~pos[rows]
    pts = x[rows][part].reshape(rows.sum(), -1)
    m = pts.shape[1]
    assert slice_cell_pvalue(pts, m, k, 3 if m == 3 else 2) > 1e-4, (j, positive)
  g = lambda v: np.maximum(v.max(axis=1, initial=0), v.sum(axis=1) / k)
  big_g = (e[:, :d] * pos).sum(axis=1) + e[:, d]
  small_g = (e[:, :d] * ~pos).sum(axis=1) + e[:, d + 1]
  norm = big_g * g(np.where(pos, x, 0)) + small_g * g(np.where(pos, 0, x))
  assert stats.kstest(norm, stats.gamma(d).cdf).pvalue > 1e-4


@SLOW
def test_a_missing_bernoulli_step_fails_the_law():
  """Power: the positive part of class 3 with the wrapped a = 5 plan accepting every
  I < k without its Bernoulli trial must fail the cell test (p < 1e-10)."""
  tab = _forced(5, 2, 5)
  skew = tab.plans[3]._replace(p_top=(2**64 - 1,), p_full=(2**256 - 1,))
  tab = tab._replace(plans=(*tab.plans[:3], skew, *tab.plans[4:]))
  cls, pos, _, lo, hi, _ = (
    np.asarray(v) for v in _accepted(_key(3, secure=False), tab, 40_000)
  )
  x = (lo + hi).astype(np.float64) * 2.0**-53
  rows = cls == 3
  pts = x[rows][pos[rows]].reshape(rows.sum(), 3)
  assert slice_cell_pvalue(pts, 3, 2, 3) < 1e-10


def _reference(words, extra, scale, pos, tab, unrounded=False):
  """Each part decided and the noise rounded in mpmath at 300 bits from the digits'
  midpoints (244 per uniform, 256 per W): the textbook construction per part (the
  cube: sum <= k; the wrapped simplex: sorted uniforms, spacings, frac(a D),
  I = floor(sum), W < p_I as a rational). None when a part rejects."""
  mpmath.mp.prec = 300
  d, k = tab.d, tab.k

  def value(w, x, bits=52):
    big = (
      (int(w[0]) << 20) | (int(w[1]) >> 12) if bits == 52 else (int(w[0]) << 32) | int(w[1])
    )
    for v in x:
      big = (big << 32) | int(v)
    return (mpmath.mpf(big) + mpmath.mpf(0.5)) / mpmath.mpf(2) ** (bits + 32 * len(x))

  u = [value(words[d + 2 + i], extra[d + 2 + i]) for i in range(d)]
  pts = [None] * d
  for part, w_row in ((list(pos), 2 * d + 2), ([not p for p in pos], 2 * d + 3)):
    idx = [i for i in range(d) if part[i]]
    m = len(idx)
    if m == 0:
      continue
    plan = tab.plans[m]
    uu = [u[i] for i in idx]
    if plan.a == 0:
      if mpmath.fsum(uu) > plan.k:
        return None
      got = uu
    else:
      s, a = sorted(uu), plan.a
      got = [a * (c - p) - mpmath.floor(a * (c - p)) for p, c in zip([0, *s[:-1]], s)]
      i = int(mpmath.floor(mpmath.fsum(got)))
      if i >= k:
        return None
      p = Fraction(math.comb(a + m - k, m), math.comb(a + m - 1 - i, m))
      if (
        value(words[w_row], extra[w_row], bits=64)
        >= mpmath.mpf(p.numerator) / p.denominator
      ):
        return None
    for i, v in zip(idx, got):
      pts[i] = v
  e = [-mpmath.log(1 - value(words[r], extra[r])) for r in range(d + 2)]
  big_g = mpmath.fsum([e[i] for i in range(d) if pos[i]] + [e[d]])
  small_g = mpmath.fsum([e[i] for i in range(d) if not pos[i]] + [e[d + 1]])
  out = []
  for i in range(d):
    y = mpmath.mpf(float(scale)) * (big_g * pts[i] if pos[i] else -small_g * pts[i])
    out.append(y if unrounded else int(mpmath.floor(y + mpmath.mpf(0.5))))
  return out


def _random(rng, n, d):
  words = rng.integers(0, 2**32, (n, 2 * d + 4, 2), dtype=np.uint64).astype(np.uint32)
  extra = rng.integers(0, 2**32, (n, 2 * d + 4, exact.REFINE_WORDS), dtype=np.uint64)
  cls = rng.integers(0, d + 1, n)
  pos = np.array([rng.permutation(d) < c for c in cls])
  return words, extra.astype(np.uint32), cls.astype(np.int32), pos


@pytest.mark.parametrize(
  "tab",
  [count_slices.count_plans(5, 2), pytest.param(_forced(5, 2, 5), marks=SLOW)],
  ids=["plans", "wrapped-a5"],
)
def test_decisions_and_rounding_equal_high_precision(tab):
  """250 random proposals with random classes and subsets: every device decision
  (where decided) and every host decision (244 digits) equals mpmath's; on the
  first 40 accepted ones at scales 0.7 and 40, every coordinate the fast pass settles and
  every host refinement equals mpmath's rounding."""
  d = tab.d
  words, extra, cls, pos = _random(np.random.default_rng(11), 250, d)
  with jax.enable_x64(True):
    status, _, _ = _fast_count_decisions(
      jnp.asarray(words), jnp.asarray(cls), jnp.asarray(pos), tab
    )
  status = np.asarray(status)
  host = exact_count.host_count_decisions(
    status, np.ones(len(cls), bool), words, extra, cls, pos, tab=tab
  )
  accepted = []
  for t in range(len(cls)):
    ref = _reference(words[t], extra[t], 1.0, pos[t], tab)
    want = slices.REJECT if ref is None else slices.ACCEPT
    assert host[t] == want
    assert status[t] in (want, slices.UNDECIDED)
    if ref is not None and len(accepted) < 40:
      accepted.append(t)
  assert len(accepted) == 40
  t = np.array(accepted)
  for scale in (0.7, 40.0):
    with jax.enable_x64(True):
      kk, settled = _count_round(
        jnp.asarray(words[t]),
        jnp.asarray(cls[t]),
        jnp.asarray(pos[t]),
        jnp.float64(scale),
        tab,
      )
    for i, k_row, ok in zip(t, np.asarray(kk), np.asarray(settled)):
      want = _reference(words[i], extra[i], scale, pos[i], tab)
      if ok:
        assert list(k_row) == want
      got = exact_count.refine_count_sample(words[i], extra[i], scale, pos[i], tab=tab)
      assert list(got) == want
  assert (status != slices.UNDECIDED).mean() > 0.98


@SLOW
def test_rounded_noise_matches_the_float_sampler():
  """20,000 rounded exact draws against 20,000 rounded float draws (d = 4, k = 2,
  scale 2): coordinate 0 (clipped to [-6, 6]) and the number of positive
  coordinates, two-sample chi-square, p > 1e-4."""
  n, ball = 20_000, jaxdp.CountBall(4, 2)
  ex = np.asarray(exact.count_knorm(_key(5, secure=False), 4, 2, 2.0, (n,)))
  fl = np.asarray(
    jax.jit(ball.knorm_points, static_argnums=(1, 2))(jax.random.key(9), n, jnp.float32)
  )
  fl = np.floor(2.0 * fl + 0.5).astype(int)
  for f in (lambda y: np.clip(y[:, 0], -6, 6) + 6, lambda y: (y > 0).sum(axis=1)):
    table = np.stack([np.bincount(f(ex), minlength=13), np.bincount(f(fl), minlength=13)])
    table = table[:, table.min(axis=0) >= 5]
    assert stats.chi2_contingency(table).pvalue > 1e-4


def test_norm_rule_is_exact():
  """count_norm_within against g(x+) + g(x-) <= bound in rationals, on every
  integer row of 3 entries in [-3, 3] at bounds 1, 1.5, 2, 7/3 (k = 2)."""
  rows = np.array(list(itertools.product(range(-3, 4), repeat=3)))
  for bound in (1.0, 1.5, 2.0, 7 / 3):
    with jax.enable_x64(True):
      got = np.asarray(count_norm_within(jnp.asarray(rows, jnp.int64), 2, bound))
    b = Fraction(bound)
    g = lambda v: max(max(v, default=0), Fraction(sum(v), 2))
    want = [g([max(t, 0) for t in r]) + g([max(-t, 0) for t in r]) <= b for r in rows]
    np.testing.assert_array_equal(got, want)


def test_huge_integer_rows_cannot_wrap_past_the_norm_rules():
  """int64 rows whose sums or |x| would wrap (2^62 and -2^62; -2^63) count 0 in every
  exact per-row rule (count, sum, l_1, l_inf, l_2 balls), and a row in the ball still
  counts."""
  rows = np.array([[2**62, -(2**62), 0], [-(2**63), 0, 0], [1, 0, 0]], np.int64)
  for p in (jaxdp.CountBall(3, 2), jaxdp.SumBall(3, 2), 1, math.inf, 2):
    with jax.enable_x64(True):
      sums = integer_part_sums(jnp.asarray(rows), jnp.zeros(3, jnp.int32), 1, 1.0, p=p)
    np.testing.assert_array_equal(np.asarray(sums), [[1, 0, 0]], err_msg=str(p))


def test_mechanisms_translate_are_publishable_and_refuse_bad_input():
  """KNormMechanism(CountBall, exact=True) and CountQueryMechanism(exact=True) (its
  ball noise by default) release int32 through a secure accountant, which is
  charged; neighbouring data moves the release by exactly the row; a stale
  accountant, bad eps, a scale beyond max_scale(d + 1) and sizes beyond the exact
  sampler are refused."""
  mech = jaxdp.CountQueryMechanism(4, 2, 0.5, exact=True)
  assert mech.noise == "ball" and jaxdp.is_publishable(mech)
  rows = np.array([[1, 1, 0, 0], [0, 0, 1, 0], [0, 1, 0, 1]])
  key = _key(41)
  a, b = (np.asarray(mech.randomize(key, r)) for r in (rows, rows[1:]))
  assert a.dtype == np.int32
  np.testing.assert_array_equal(a - b, rows[0])
  knorm = jaxdp.KNormMechanism(jaxdp.CountBall(4, 2), 0.5, exact=True)
  assert jaxdp.is_publishable(knorm)
  np.testing.assert_array_equal(
    np.asarray(knorm.randomize(key, jnp.zeros(4, jnp.int32))), a - rows.sum(axis=0)
  )
  acct = jaxdp.Accountant.create(1.0, secure=True)
  new, out = jaxdp.release(acct, mech, rows)
  assert out.dtype == jnp.int32 and bool(new.last_answered)
  assert float(new.spent_eps) == pytest.approx(0.5)
  with pytest.raises(jaxdp.StaleAccountantError):
    jaxdp.release(acct, mech, rows)
  for eps in (float("nan"), float("inf"), -1.0, 0.0):
    with pytest.raises(ValueError, match="eps"):
      jaxdp.KNormMechanism(jaxdp.CountBall(4, 2), eps, exact=True)
  wide = jaxdp.KNormMechanism(jaxdp.CountBall(700, 3), 0.5, exact=True)
  limit = exact.max_scale(701)  # |noise| <= scale times d + 2 exponentials
  assert wide._scale_limit() == limit < exact.max_scale(700)
  with pytest.raises(ValueError, match="scale must be at most"):
    exact.count_knorm(key, 700, 3, math.nextafter(limit, 1e9))
  with pytest.raises(ValueError, match="d <= 1024"):
    jaxdp.KNormMechanism(jaxdp.CountBall(1025, 3), 1.0, exact=True)
  with pytest.raises(ValueError, match="1 <= k <= d <= 1024"):
    exact.count_knorm(key, 4, 5, 1.0)
  bad = jax.jit(
    lambda e: jaxdp.KNormMechanism(jaxdp.CountBall(4, 2), e, exact=True).randomize(
      _key(41, secure=False), jnp.zeros(4, jnp.int32)
    )
  )(jnp.float32(jnp.nan))
  assert (np.asarray(bad) == np.iinfo(np.int32).min).all()
  # per-row contributions: rows beyond the ball (3 ones at k = 2: norm 1.5; a +1
  # and a -1: norm 2) count 0, a row on its boundary counts
  sums = knorm.part_statistics(
    jnp.asarray([[1, 1, 1, 0], [1, -1, 0, 0], [1, 0, 1, 0]]), jnp.zeros(3, jnp.int32), 1
  )
  np.testing.assert_array_equal(np.asarray(sums), [[1, 0, 1, 0]])
  # a ball changed after construction is not publishable
  ball = jaxdp.CountBall(4, 2)
  changed = jaxdp.KNormMechanism(ball, 0.5, exact=True)
  object.__setattr__(ball, "k", 7)
  assert not jaxdp.is_publishable(changed)


@SLOW
def test_a_callers_vmap_and_jit_give_each_key_its_own_draw():
  """Under a caller's jit of a vmap over three keys and three traced scales (20,000
  samples each, the size of the float-sampler comparison, whose compilation the
  unbatched draws reuse; two chunks, whose batched offsets must lower with x64 off)
  each member's noise equals its own unbatched draw at its static scale: one
  compilation checks both the batching and the traced scale."""
  keys = jax.random.split(_key(51, secure=False), 3)
  scales = (3.0, 2.0, 0.75)
  draw = lambda k, s: exact.count_knorm(k, 4, 2, s, (20_000,))
  batched = jax.jit(jax.vmap(draw))(keys, jnp.asarray(scales))
  np.testing.assert_array_equal(
    np.asarray(batched), np.stack([np.asarray(draw(k, s)) for k, s in zip(keys, scales)])
  )


@SLOW
def test_k1_is_iid_laplace():
  """CountBall(4, 1) is the l_1 ball, whose K-norm noise is i.i.d. Laplace: 20,000
  rounded draws at scale 1.5 (every part of size > 1 on the wrapped a = 1 plan),
  each coordinate against the exact law of a rounded Laplace variate
  (P(n) = e^(-|n|/b) sinh(1/(2b)) for n != 0, 1 - e^(-1/(2b)) at 0), chi-square
  with |n| >= 6 pooled, p > 1e-4; the signs of coordinates 0 and 1 independent."""
  b, n = 1.5, 20_000
  x = np.asarray(exact.count_knorm(_key(71, secure=False), 4, 1, b, (n,)))
  top = 6
  probs = [math.exp(-abs(v) / b) * math.sinh(1 / (2 * b)) for v in range(-top + 1, top)]
  probs[top - 1] = 1 - math.exp(-1 / (2 * b))
  tail = (1 - sum(probs)) / 2
  probs = np.array([tail, *probs, tail])
  for i in range(4):
    counts = np.bincount(np.clip(x[:, i], -top, top) + top, minlength=2 * top + 1)
    assert stats.chisquare(counts, probs * n).pvalue > 1e-4, i
  table = np.histogram2d(np.sign(x[:, 0]), np.sign(x[:, 1]), bins=3)[0]
  assert stats.chi2_contingency(table).pvalue > 1e-4


@SLOW
def test_forced_host_paths_release_the_same_integers(monkeypatch):
  """The jitted sampler with every device decision left undecided (every proposal
  decided on the host) and the fast pass's widening raised to 2^-9 (most of 300
  samples refined on the host) releases the normal run's integers from the same key
  (d = 5, k = 2, scale 40). Both host paths are forced in one compilation: a wrong
  host decision or a wrong host rounding on any sample changes the release."""
  key = _key(31, secure=False)
  normal = np.asarray(exact.count_knorm(key, 5, 2, 40.0, (300,)))
  jax.clear_caches()
  try:
    calls = record_host_refinements(monkeypatch, exact_refine)
    decisions = []
    real_host, real = exact_count.host_count_decisions, exact_count.decide_two

    def counting(status, pending, *args, **kwargs):
      decisions.append(int(np.sum(np.asarray(pending))))
      return real_host(status, pending, *args, **kwargs)

    def undecided(*args):
      status, lo, hi = real(*args)
      return jnp.full_like(status, slices.UNDECIDED), lo, hi

    monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-9)
    monkeypatch.setattr(exact_count, "decide_two", undecided)
    monkeypatch.setattr(exact_count, "host_count_decisions", counting)
    forced = np.asarray(exact.count_knorm(key, 5, 2, 40.0, (300,)))
    assert calls and calls[0] > 150, calls
    assert decisions and decisions[0] == 300, decisions
    np.testing.assert_array_equal(forced, normal)
  finally:
    monkeypatch.undo()
    jax.clear_caches()


@SLOW
def test_an_undecided_class_is_an_error_not_a_guess(monkeypatch):
  """A class uniform equal to a threshold (forced here) stops the draw with an error
  naming the 256 bits, under jit too: the check is not dropped by XLA."""
  real = count_slices.choose_class

  def tied(v, tab):
    cls, tie = real(v, tab)
    return cls, tie | (jnp.arange(tie.shape[0]) == 3)

  jax.clear_caches()
  monkeypatch.setattr(exact_count, "choose_class", tied)
  try:
    with pytest.raises(Exception, match="orthant class could not be decided with 256"):
      jax.block_until_ready(exact.count_knorm(_key(61, secure=False), 4, 2, 1.0, (10,)))
  finally:
    monkeypatch.undo()
    jax.clear_caches()
