"""Exact, float-safe noise (jaxdp.exact) and publishable releases.

Independent references: brute-force enumeration of poset-ball objects, mpmath at
200 bits for the exponentials, closed-form probabilities of rounded Laplace noise,
and the float sampler (already audited) for the K-norm noise's law.
"""

import functools
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
from jaxdp.exact import intervals as exact_intervals
from jaxdp.exact import refine as exact_refine
from jaxdp.samplers.exact_tables import exact_tables
from jaxdp.samplers.simplex import chain_noise
from tests.helpers import small_posets
from tests.helpers.exactness import record_host_refinements

mpmath = pytest.importorskip("mpmath")
KEY = bytes(range(32))


def _key(i=0):
  return jax.random.fold_in(dprandom.secure_key(KEY), i)


# One compiled program per (shape, d) rather than one per eager operation.
_unrank = jax.jit(exact.unrank, static_argnums=2)
_coefficients = jax.jit(exact.simplex_coefficients)
_uniform_below = jax.jit(exact.uniform_below, static_argnums=(1, 2))


def _brute_objects(poset):
  """Every object (A, ext(A) top down, ext(B) top down) by enumerating permutations."""
  d = poset.d
  strict = poset.order & ~np.eye(d, dtype=bool)  # strict[x, y]: x below y

  def top_down(seq):
    return all(
      not strict[seq[t], seq[u]] for t in range(len(seq)) for u in range(t + 1, len(seq))
    )

  objs = set()
  for mask in range(1 << d):
    a = [x for x in range(d) if mask >> x & 1]
    b = [x for x in range(d) if not mask >> x & 1]
    for pa in itertools.permutations(a):
      if top_down(pa):
        for pb in itertools.permutations(b):
          if top_down(pb):
            objs.add((len(a),) + pa + pb)
  return objs


@pytest.mark.parametrize("name", list(small_posets()))
def test_unranking_is_a_bijection_onto_all_objects(name):
  """Every rank in [0, N(P)) unranks to a distinct object and all objects are hit,
  with N(P) from brute force: a uniform rank is an exactly uniform object."""
  poset = small_posets()[name]
  tables, total = exact_tables(poset)
  brute = _brute_objects(poset)
  assert total == len(brute)
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    seq, size_a = _unrank(jnp.arange(total, dtype=jnp.int64), t, poset.d)
  got = {
    (int(k),) + tuple(int(v) for v in s)
    for s, k in zip(np.asarray(seq), np.asarray(size_a))
  }
  assert got == brute


@pytest.mark.statistical
def test_uniform_below_is_uniform_and_in_range():
  """10^6 ranks below N = 3 * 2^40 + 5 (62-bit draws, reduced mod N): all in
  range; the top bit splits 2/3 : 1/3 (z-test, |z| < 5); the low 3 bits are uniform
  (chi-square, 7 dof, p > 1e-4)."""
  total = 3 * 2**40 + 5
  with jax.enable_x64(True):
    r = np.asarray(_uniform_below(_key(1), total, 1_000_000))
  assert r.min() >= 0 and r.max() < total
  high = np.mean(r >= 2**41)
  p = (total - 2**41) / total
  assert abs(high - p) / math.sqrt(p * (1 - p) / r.size) < 5
  assert stats.chisquare(np.bincount(r & 7, minlength=8)).pvalue > 1e-4


@functools.cache
def _nhis3_objects(n=4000):
  """(tables, seq, size_a, coefficients) of n uniform NHIS-3 objects from _key(4),
  drawn and compiled once for the two tests that read them (numpy arrays)."""
  poset = jaxdp.Poset.nhis(3)
  tables, total = exact_tables(poset)
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    seq, size_a = _unrank(_uniform_below(_key(4), total, n), t, poset.d)
    coeff = _coefficients(seq, size_a, t.up)
  return tables, np.asarray(seq), np.asarray(size_a), np.asarray(coeff)


@pytest.mark.slow
def test_coefficients_match_the_float_samplers_chain_construction():
  """Row i of the coefficient matrix is vertex i: checked against chain_noise (the
  audited float construction) on unit weights for 4000 NHIS-3 objects (the fast-pass
  test's objects: one draw, one compilation)."""
  d = jaxdp.Poset.nhis(3).d
  tables, seq, size_a, coeff = _nhis3_objects()
  n = len(size_a)
  with jax.enable_x64(True):
    up = jnp.asarray(tables.up)
    units = jnp.eye(d + 2)[:, None, :] * jnp.ones((1, n, 1))  # (d+2, n, d+2)
    ref = jax.jit(jax.vmap(lambda u: chain_noise(seq, size_a, u, up, jnp.float64)))(
      units
    )  # (d+2, n, d+1)
    np.testing.assert_array_equal(coeff, np.asarray(ref).transpose(1, 0, 2))


def test_platform_log_error_is_far_below_the_margin():
  """The one assumption: float64 log has relative error <= 2^-44 on the inputs the
  fast pass uses (1 - j 2^-52). Measured on 4 * 10^5 inputs (uniform j, log-uniform
  j, and the extremes) against mpmath at 200 bits; the margin is 2^-40."""
  rng = np.random.default_rng(7)
  j = np.concatenate(
    [
      rng.integers(0, 2**52, 200_000, dtype=np.uint64),
      (2.0 ** -rng.uniform(0, 52, 200_000) * 2**52).astype(np.uint64),
      np.array([0, 1, 2, 2**52 - 1, 2**52 - 2, 2**51], np.uint64),
    ]
  )
  u = 1.0 - j.astype(np.float64) * 2.0**-52
  with jax.enable_x64(True):
    got = np.asarray(jax.jit(jnp.log)(jnp.asarray(u)))
  mpmath.mp.prec = 200
  worst = 0.0
  for ui, gi in zip(u[::4], got[::4]):
    ref = mpmath.log(mpmath.mpf(float(ui)))
    if ref != 0:
      worst = max(worst, float(abs((mpmath.mpf(float(gi)) - ref) / ref)))
  assert worst <= 2.0**-44, worst


def _reference_round(words, extra, coeff, scale):
  """round(scale * sum_i c_i E_i) with V_i's digits j (52) then extra (192 bits) and
  the rest at the midpoint, in mpmath at 300 bits. 1 - V is formed exactly as the
  245-bit fraction (2^245 - 2 big - 1) / 2^245 and each coordinate's sum is one
  correctly rounded dot product over its nonzero coefficients (the same values as
  forming V and summing c_i E_i term by term, at a fraction of the cost)."""
  mpmath.mp.prec = 300
  es = []
  for w, x in zip(np.asarray(words).tolist(), np.asarray(extra).tolist()):
    big = (w[0] << 20) | (w[1] >> 12)
    for v in x:
      big = (big << 32) | v
    es.append(-mpmath.log(mpmath.mpf(((1 << 245) - 2 * big - 1, -245))))
  out = []
  s = mpmath.mpf(float(scale))
  half = mpmath.mpf(0.5)
  for c in np.asarray(coeff).T.tolist():
    val = s * mpmath.fdot((e, ci) for ci, e in zip(c, es) if ci)
    out.append(int(mpmath.floor(val + half)))
  return out


@pytest.mark.slow
def test_laplace_fast_pass_matches_high_precision_on_1e5_samples():
  """10^5 random word pairs x 5 scales (0.37 to 2^20): every settled fast-pass
  integer equals the mpmath rounding of the ideal value with the same 52 digits and
  random further digits; at most 10 of the 10^5 are unsettled."""
  rng = np.random.default_rng(11)
  n = 100_000
  words = rng.integers(0, 2**32, (n, 1, 2), dtype=np.uint64).astype(np.uint32)
  extra = rng.integers(0, 2**32, (n, 1, exact.REFINE_WORDS), dtype=np.uint64).astype(
    np.uint32
  )
  scales = np.array([0.37, 1.0, 3.0, 1000.0, 2.0**20])[np.arange(n) % 5]
  with jax.enable_x64(True):
    k, settled, coeff = jax.jit(jax.vmap(lambda w, s: exact.laplace_round(w[None], s)))(
      jnp.asarray(words), jnp.asarray(scales)
    )
  k, settled, coeff = np.asarray(k)[:, 0, 0], np.asarray(settled)[:, 0], np.asarray(coeff)
  assert np.sum(~settled) <= 10
  for i in np.nonzero(settled)[0]:
    assert k[i] == _reference_round(words[i], extra[i], coeff[i, 0], scales[i])[0], i


@pytest.mark.slow
def test_poset_fast_pass_matches_high_precision_on_4000_samples():
  """4000 NHIS-3 K-norm samples (17 exponentials, 16 coordinates each: 64,000
  coordinates), half at scale 0.5 and half at 7: every settled integer equals
  mpmath's, and at least 99.9% are settled. The kernel's chain form (chain_round)
  agrees with the coefficient form on all 4000 at both scales."""
  poset = jaxdp.Poset.nhis(3)
  tables, seq, size_a, coeff = _nhis3_objects()  # from _key(4)
  n, d = 4000, poset.d
  assert len(size_a) == n
  rng = np.random.default_rng(12)
  words = rng.integers(0, 2**32, (n, d + 2, 2), dtype=np.uint64).astype(np.uint32)
  extra = rng.integers(0, 2**32, (n, d + 2, exact.REFINE_WORDS), dtype=np.uint64).astype(
    np.uint32
  )
  with jax.enable_x64(True):
    up = jnp.asarray(tables.up)
    outs = [jax.jit(exact.knorm_round)(jnp.asarray(words), coeff, s) for s in (0.5, 7.0)]
    # the kernel's chain form gives the same integers and the same settled flags
    for s, (k, settled) in zip((0.5, 7.0), outs):
      k2, settled2 = jax.jit(exact.chain_round)(jnp.asarray(words), seq, size_a, up, s)
      np.testing.assert_array_equal(k2, k)
      np.testing.assert_array_equal(settled2, settled)
  for (k, settled), s, half in zip(outs, (0.5, 7.0), (slice(0, n // 2), slice(n // 2, n))):
    k, settled = np.asarray(k), np.asarray(settled)
    assert settled.mean() > 0.999
    for i in np.arange(n)[half][settled[half]]:
      assert list(k[i]) == _reference_round(words[i], extra[i], coeff[i], s), i


def test_host_refinement_matches_high_precision():
  """The decimal refinement (used when the fast pass cannot settle) against mpmath
  on 300 Laplace and 100 poset samples with random digits."""
  rng = np.random.default_rng(13)
  for m, dim in ((300, 1), (100, 5)):
    words = rng.integers(0, 2**32, (m, dim, 2), dtype=np.uint64).astype(np.uint32)
    extra = rng.integers(0, 2**32, (m, dim, exact.REFINE_WORDS), dtype=np.uint64).astype(
      np.uint32
    )
    coeff = rng.integers(-1, 2, (m, dim, 3)).astype(np.int8)
    scale = 3.3
    got = exact_refine.host_refine(
      exact.refine_sample,
      np.zeros((m, 3), np.int32),
      np.zeros(m, bool),
      words,
      extra,
      scale,
      coeff,
    )
    for i in range(m):
      assert list(got[i]) == _reference_round(words[i], extra[i], coeff[i], scale)


@pytest.mark.statistical
def test_rounded_laplace_has_the_exact_probabilities():
  """10^6 draws at scale 2 against P(k) = P(k - 1/2 < L < k + 1/2) in closed form:
  chi-square over k in [-12, 12] plus both tails, p > 1e-4; mean within 5 sigma."""
  b = 2.0
  x = np.asarray(exact.laplace(_key(6), (1_000_000,), scale=b))
  assert x.dtype == np.int32
  ks = np.arange(-12, 13)
  cdf = lambda t: np.where(t < 0, 0.5 * np.exp(t / b), 1 - 0.5 * np.exp(-t / b))
  p = cdf(ks + 0.5) - cdf(ks - 0.5)
  tail = cdf(-12.5)
  probs = np.concatenate([[tail], p, [tail]])
  counts = np.concatenate(
    [[np.sum(x < -12)], [np.sum(x == k) for k in ks], [np.sum(x > 12)]]
  )
  assert stats.chisquare(counts, probs * x.size).pvalue > 1e-4
  assert abs(x.mean()) < 5 * math.sqrt(2 * b * b / x.size)


@pytest.mark.slow
@pytest.mark.statistical
def test_exact_poset_noise_has_the_float_samplers_law_rounded():
  """Two-sample chi-square per coordinate (17 tests, Bonferroni p > 1e-4 / 17) between
  2 * 10^5 exact NHIS-2 draws and the float K-norm sampler's draws rounded, both at
  scale 1.5; plus the same for the coordinate sum."""
  poset = jaxdp.Poset.nhis(2)
  n, s = 200_000, 1.5
  ex = np.asarray(exact.poset_knorm(_key(7), poset, s, (n,))).astype(np.int64)
  fl = np.rint(
    np.asarray(dprandom.knorm(jax.random.key(8), jaxdp.PosetBall(poset), 1 / s, (n,)))
  ).astype(np.int64)
  cols = [ex[:, c] for c in range(poset.d + 1)] + [ex.sum(1)]
  refs = [fl[:, c] for c in range(poset.d + 1)] + [fl.sum(1)]
  for a, b in zip(cols, refs):
    lo, hi = np.percentile(np.concatenate([a, b]), [0.5, 99.5]).astype(int)
    bins = np.arange(lo, hi + 2)
    table = np.stack(
      [np.histogram(np.clip(a, lo, hi), bins)[0], np.histogram(np.clip(b, lo, hi), bins)[0]]
    )
    table = table[:, table.sum(0) > 0]
    assert stats.chi2_contingency(table)[1] > 1e-4 / len(cols)


@pytest.mark.slow
def test_exact_releases_translate_with_the_statistic():
  """Same key, neighbouring data: the outputs differ by exactly the statistics'
  difference (the integer noise does not depend on the data), so every output
  reachable from one dataset is reachable from the other: no float attack."""
  poset = jaxdp.Poset.nhis(2)
  rows = np.asarray(poset.filters())[np.random.default_rng(0).integers(0, 20, 400)]
  mech = jaxdp.PosetCountMechanism(poset, 0.7, exact=True)
  key = _key(9)
  a = np.asarray(mech.randomize(key, rows))
  b = np.asarray(mech.randomize(key, rows[1:]))
  np.testing.assert_array_equal(
    a - b, np.asarray(mech.statistic(rows)) - np.asarray(mech.statistic(rows[1:]))
  )
  lap = jaxdp.LaplaceMechanism(0.3, exact=True)
  # three entries, as the integer-dtype tests' statistics: one compilation for both
  np.testing.assert_array_equal(
    np.asarray(lap.randomize(key, jnp.array([5, 9, 0])))
    - np.asarray(lap.randomize(key, jnp.array([4, 9, 0]))),
    [1, 0, 0],
  )


@pytest.mark.slow
def test_traced_eps_under_jit_and_vmap_and_bad_eps_gives_the_sentinel():
  mech = jaxdp.LaplaceMechanism(0.5, exact=True)
  f = jax.jit(
    jax.vmap(
      lambda e, k: jaxdp.LaplaceMechanism(e, exact=True).randomize(k, jnp.array([10, 20]))
    )
  )
  out = np.asarray(f(jnp.array([0.5, -1.0, jnp.nan]), jax.random.split(_key(10), 3)))
  assert out.dtype == np.int32
  assert np.all(np.abs(out[0] - [10, 20]) < 60)
  assert np.all(out[1:] == np.iinfo(np.int32).min)
  assert mech.randomize(_key(11), jnp.array([3])).dtype == jnp.int32


def test_grid_release_charges_the_snapping():
  """grid = 2^-4 on 3 entries of sensitivity 1: the noise scale is (16 + 3) / eps
  units; the output holds exact multiples of the grid."""
  mech = jaxdp.LaplaceMechanism(1.0, exact=True, grid=2.0**-4)
  out = np.asarray(
    jax.jit(jax.vmap(lambda k: mech.randomize(k, jnp.array([0.1, 0.2, 0.3]))))(
      jax.random.split(_key(12), 20000)
    )
  )
  assert np.all(out * 16 == np.round(out * 16))
  # variance of the noise in units: 2 * 19^2 (+ 1/12 from rounding)
  var = np.var(out * 16 - np.round(np.array([0.1, 0.2, 0.3]) * 16), axis=0)
  assert np.all(np.abs(var / (2 * 19.0**2) - 1) < 0.06)


def test_bad_exact_options_are_clear_errors():
  with pytest.raises(ValueError, match="integer statistic"):
    jaxdp.LaplaceMechanism(1.0, exact=True).randomize(_key(), jnp.array([1.5]))
  with pytest.raises(ValueError, match="power of two"):
    jaxdp.LaplaceMechanism(1.0, exact=True, grid=0.1)
  with pytest.raises(ValueError, match="exact=True"):
    jaxdp.LaplaceMechanism(1.0, grid=0.25)
  with pytest.raises(ValueError, match="must be at most MAX_SCALE"):
    jaxdp.LaplaceMechanism(1e-7, exact=True).randomize(_key(), jnp.array([1]))
  with pytest.raises(ValueError, match="l_inf ball"):
    jaxdp.KNormMechanism(jaxdp.LpBall(3, 3.0), 1.0, exact=True)
  # a 24-element fence is prime (not series-parallel) and beyond the integer ranks
  fence = [(2 * i, 2 * i + 1) for i in range(12)] + [
    (2 * i + 2, 2 * i + 1) for i in range(11)
  ]
  with pytest.raises(ValueError, match="series-parallel.*N\\(P\\)"):
    jaxdp.PosetCountMechanism(jaxdp.Poset.from_edges(24, fence), 1.0, exact=True)
  # N(P) >= 2^61 but series-parallel: the decomposition-tree path takes it
  jaxdp.PosetCountMechanism(jaxdp.Poset.from_edges(21, []), 1.0, exact=True)
  with pytest.raises(ValueError, match="scale"):
    exact.laplace(_key(), (2,), scale=-1.0)


def test_secure_accountant_refuses_float_mechanisms_and_other_keys():
  acct = jaxdp.Accountant.create(1.0, secure=True, on_refusal=jaxdp.FillOnRefusal())
  assert dprandom.is_secure_key(acct.key)
  with pytest.raises(ValueError, match="exact=True"):
    jaxdp.release(acct, jaxdp.LaplaceMechanism(0.1), jnp.array([1.0]))
  with pytest.raises(ValueError, match="exact=True"):
    jax.jit(
      lambda a: jaxdp.release(a, jaxdp.GaussianMechanism(0.5, 1e-6), jnp.array([1.0]))
    )(acct)
  assert float(acct.spent_eps) == 0.0
  with pytest.raises(ValueError, match="ChaCha20"):
    jaxdp.Accountant.create(1.0, secure=True, key=jax.random.key(0))
  # three entries, as the other Laplace releases of this file: one compilation
  acct, out = jaxdp.release(
    acct, jaxdp.LaplaceMechanism(0.6, exact=True), jnp.array([3, 4, 5])
  )
  assert out.dtype == jnp.int32 and bool(acct.last_answered)
  acct, out = jaxdp.release(
    acct, jaxdp.LaplaceMechanism(0.6, exact=True), jnp.array([3, 4, 5])
  )
  assert not bool(acct.last_answered)
  assert np.all(np.asarray(out) == np.iinfo(np.int32).min)


@pytest.mark.slow
def test_secure_session_answers_with_integers():
  s = jaxdp.Session(np.arange(1000), 3.0, secure=True)
  c = s.count(lambda v: v < 500, 1.0)
  assert isinstance(c, int) and abs(c - 500) < 40
  h = s.histogram(lambda v: (v % 4).astype(jnp.int32), 4, 1.0)
  assert h.dtype == np.int32 and np.all(np.abs(h - 250) < 40)
  with pytest.raises(ValueError, match="exact=True"):
    s.release(jaxdp.LaplaceMechanism(0.1), lambda v: v < 3)
  total = s.sum(lambda v: v / 1000.0, 0.5, bound=1.0, grid=2.0**-6)
  assert abs(total - 499.5) < 100 and total * 64 == round(total * 64)
  poset = jaxdp.Poset.nhis(1)
  rows = np.asarray(poset.filters())[np.random.default_rng(1).integers(0, 6, 400)]
  s2 = jaxdp.Session(rows, 2.0, secure=True)
  counts = s2.poset_counts(poset, 1.0)
  assert counts.dtype == np.int32
  assert np.all(np.abs(counts - np.concatenate([[400], rows.sum(0)])) < 60)


def _dg_pmf(a, ys):
  w = np.exp(-(ys.astype(float) ** 2) / (2 * a / 4))
  span = np.arange(-60 * int(math.sqrt(a) + 1), 60 * int(math.sqrt(a) + 1) + 1)
  return w / np.exp(-(span.astype(float) ** 2) / (2 * a / 4)).sum()


@pytest.mark.slow
@pytest.mark.statistical
@pytest.mark.parametrize("sigma", [0.5, 1.7, 20.0])
def test_discrete_gaussian_has_the_exact_probabilities(sigma):
  """10^5 draws against P(y) proportional to exp(-y^2 / (2 s^2)), s^2 = ceil(4
  sigma^2) / 4: chi-square over the values with expected count >= 5 plus both tails,
  p > 1e-4; the variance within 5 standard errors of the exact one."""
  n = 100_000
  x = np.asarray(exact.discrete_gaussian(_key(20), (n,), sigma=sigma))
  assert x.dtype == np.int32
  a = exact.sigma_quarters(sigma)
  lim = int(np.ceil(6 * math.sqrt(a / 4))) + 1
  ys = np.arange(-lim, lim + 1)
  p = _dg_pmf(a, ys)
  keep = p * n >= 5
  core = ys[keep]
  lo, hi = core.min(), core.max()
  probs = np.concatenate([[1 - p[ys >= lo].sum()], p[keep], [1 - p[ys <= hi].sum()]])
  counts = np.concatenate(
    [[np.sum(x < lo)], [np.sum(x == y) for y in core], [np.sum(x > hi)]]
  )
  tails = probs * n >= 1e-9
  assert stats.chisquare(counts[tails], probs[tails] / probs[tails].sum() * n).pvalue > 1e-4
  var = float((p * ys.astype(float) ** 2).sum())
  fourth = float((p * ys.astype(float) ** 4).sum())
  assert abs(np.mean(x.astype(float) ** 2) - var) < 5 * math.sqrt((fourth - var**2) / n)


def test_sigma_is_rounded_up_to_a_quarter_exactly():
  from fractions import Fraction

  for sigma in (0.1, 0.5, 1 / 3, 1.7, 20.0, 2047.0):
    a = exact.sigma_quarters(sigma)
    assert Fraction(a, 4) >= Fraction(sigma) ** 2 > Fraction(a - 1, 4)
  with pytest.raises(ValueError, match="at most"):
    exact.sigma_quarters(3000.0)


@pytest.mark.slow
def test_discrete_gaussian_mechanism_costs_and_secure_release():
  mech = jaxdp.DiscreteGaussianMechanism(0.5, 1e-6)
  rho = jaxdp.zcdp_budget(0.5, 1e-6)
  assert 0 < mech.zcdp_cost() <= rho and mech.cost() == (0.5, 1e-6)
  assert mech.zcdp_cost(3) == pytest.approx(9 * mech.zcdp_cost())
  acct = jaxdp.Accountant.create(
    2.0,
    delta_budget=1e-5,
    secure=True,
    composition="zcdp",
    on_refusal=jaxdp.FillOnRefusal(),
  )
  answered = 0
  for _ in range(40):
    acct, out = jaxdp.release(acct, mech, jnp.array([100, 200]))
    answered += bool(acct.last_answered)
  assert out.dtype == jnp.int32
  budget = jaxdp.zcdp_budget(2.0, 1e-5)
  assert answered == math.floor(budget / mech.zcdp_cost() * (1 + 1e-6))
  with pytest.raises(ValueError, match="above the exact"):
    jaxdp.DiscreteGaussianMechanism(1e-4, 1e-6, 100.0)
  with pytest.raises(ValueError, match="static"):
    jax.jit(lambda e: jaxdp.DiscreteGaussianMechanism(e, 1e-6))(0.5)


@pytest.mark.slow
def test_exact_poset_noise_covariance_is_the_continuous_law_plus_rounding():
  """E[Y Y^T] of 2 * 10^5 exact NHIS-1 draws at scale 3 against the ideal K-norm
  noise's exact second moment, (D+1)(D+2) scale^2 E[Z Z^T] (E[Z Z^T] by enumeration,
  Gamma(D+1) radius), plus 1/12 on the diagonal for the rounding (Sheppard's
  correction; its error is far below the test's resolution at scale 3): every entry
  within 5 standard errors."""
  poset = jaxdp.Poset.nhis(1)
  n, s, dim = 200_000, 3.0, poset.d + 1
  y = np.asarray(exact.poset_knorm(_key(30), poset, s, (n,))).astype(float)
  ideal = (dim + 1) * (dim + 2) * s * s * jaxdp.exact_second_moment(poset)
  ideal = ideal + np.eye(dim) / 12
  prod = y[:, :, None] * y[:, None, :]
  se = prod.std(axis=0) / math.sqrt(n)
  z = (prod.mean(axis=0) - ideal) / se
  assert np.all(np.abs(z) < 5), z
  assert np.all(np.abs(y.mean(0)) < 5 * y.std(0) / math.sqrt(n))


def _reference_linf(words, extra, scale, d):
  """round(scale * R * Z) in mpmath at 300 bits, digits then midpoints as above."""
  mpmath.mp.prec = 300

  def value(w, x):  # (big + 1/2) 2^-244, exactly
    big = (int(w[0]) << 20) | (int(w[1]) >> 12)
    for v in x:
      big = (big << 32) | int(v)
    return mpmath.mpf((2 * big + 1, -245))

  r = mpmath.fsum(
    -mpmath.log(1 - value(w, x)) for w, x in zip(words[: d + 1], extra[: d + 1])
  )
  return [
    int(
      mpmath.floor(mpmath.mpf(float(scale)) * r * (2 * value(w, x) - 1) + mpmath.mpf(0.5))
    )
    for w, x in zip(words[d + 1 :], extra[d + 1 :])
  ]


@pytest.mark.slow
def test_linf_fast_pass_and_refinement_match_high_precision():
  """l_inf K-norm noise, d = 5, scales 0.6 and 9: 10,000 fast-pass samples (50,000
  coordinates) and 200 host refinements equal mpmath's rounding."""
  d, n = 5, 10_000
  rng = np.random.default_rng(31)
  words = rng.integers(0, 2**32, (n, 2 * d + 1, 2), dtype=np.uint64).astype(np.uint32)
  extra = rng.integers(
    0, 2**32, (n, 2 * d + 1, exact.REFINE_WORDS), dtype=np.uint64
  ).astype(np.uint32)
  for s, part in ((0.6, slice(0, n // 2)), (9.0, slice(n // 2, n))):
    with jax.enable_x64(True):
      k, settled = jax.jit(exact.linf_round, static_argnums=2)(
        jnp.asarray(words[part]), s, d
      )
    k, settled = np.asarray(k), np.asarray(settled)
    assert settled.mean() > 0.999
    for i in np.nonzero(settled)[0]:
      assert list(k[i]) == _reference_linf(words[part][i], extra[part][i], s, d)
  refine = functools.partial(exact.refine_linf_sample, num_exp=d + 1)
  got = exact_refine.host_refine(
    refine, np.zeros((200, d), np.int32), np.zeros(200, bool), words[:200], extra[:200], 2.5
  )
  for i in range(200):
    assert list(got[i]) == _reference_linf(words[i], extra[i], 2.5, d)


@pytest.mark.slow
def test_exact_linf_noise_has_the_ideal_second_moments():
  """2 * 10^5 draws, d = 4, scale 2: E[Y Y^T] = ((d+1)(d+2) scale^2 / 3 + 1/12) I
  (Gamma(d+1) radius, uniform cube, rounding), every entry within 5 standard errors;
  and the linf count mechanism is accepted by a secure accountant."""
  n, d, s = 200_000, 4, 2.0
  y = np.asarray(exact.linf_knorm(_key(32), d, s, (n,))).astype(float)
  ideal = np.eye(d) * ((d + 1) * (d + 2) * s * s / 3 + 1 / 12)
  prod = y[:, :, None] * y[:, None, :]
  z = (prod.mean(0) - ideal) / (prod.std(0) / math.sqrt(n))
  assert np.all(np.abs(z) < 5), z
  acct = jaxdp.Accountant.create(1.0, secure=True)
  mech = jaxdp.PosetCountMechanism(jaxdp.Poset.nhis(1), 0.5, noise="linf", exact=True)
  acct, out = jaxdp.release(acct, mech, np.ones((10, 4), np.int8))
  assert out.dtype == jnp.int32 and bool(acct.last_answered)


def test_exact_integer_sums_cannot_reveal_the_row_count():
  """A secure session's integer sums are taken in int64 and clipped to +-2^30, so a
  large row count times a large bound neither overflows nor raises (an error that
  depended on the number of rows would let an analyst bisect for it)."""
  s = jaxdp.Session(np.full(5000, 2**19, np.int32), 1.0, secure=True)
  out = s.release(jaxdp.LaplaceMechanism(1.0, 2.0**19, exact=True), lambda v: v)
  assert abs(int(out) - 2**30) < 40 * 2**19


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16, np.uint32])
def test_exact_statistics_of_any_integer_dtype_keep_their_value(dtype):
  """Found attacking the API: clipping to +-2^30 in the statistic's own dtype wrapped
  the bounds (int8/uint8 statistics became 0, uint32 ones became 2^30). The release
  must equal the int32 statistic's release from the same key."""
  key = _key(40)
  mech = jaxdp.LaplaceMechanism(1.0, exact=True)
  ref = np.asarray(mech.randomize(key, jnp.array([5, 7, 100], jnp.int32)))
  got = np.asarray(mech.randomize(key, jnp.array([5, 7, 100], dtype)))
  np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize(
  "draw, kernel",
  [
    # 4000 draws: the forced-refinement test's normal draw, the same compilation
    (lambda k, s: exact.laplace(k, (4000,), scale=s), exact.samplers._laplace_kernel),
    (lambda k, s: exact.linf_knorm(k, 3, s, (29,)), exact.samplers._linf_kernel),
    (lambda k, s: exact.l2_knorm(k, 3, s, (29,)), exact.l2._l2_kernel),
  ],
  ids=["laplace", "linf", "l2"],
)
def test_a_new_static_scale_compiles_nothing(draw, kernel):
  """The scale is an argument of the compiled kernel, not a constant of its program:
  drawing again at another static scale (another eps) reuses the compilation; the
  noise still follows its scale (scale 1000 against 0.5 from the same key: the
  larger scale's noise is larger, and equals its own draw under jit)."""
  key = _key(60)
  small = np.asarray(draw(key, 0.5))
  before = kernel._cache_size()
  large = np.asarray(draw(key, 1000.0))
  assert kernel._cache_size() == before
  assert np.mean(np.abs(large)) > 100 * np.mean(np.abs(small))
  np.testing.assert_array_equal(np.asarray(jax.jit(draw)(key, 1000.0)), large)


@pytest.mark.slow
def test_forced_refinement_through_the_kernel_gives_the_same_release(monkeypatch):
  """With the fast pass's margin widened to 2^-3 over 500 of the 4000 samples go to
  the host refinement inside the jitted kernel; the released integers must equal
  the normal run's from the same key (both are the exact rounding)."""
  key = _key(5)
  # the kernel test_a_new_static_scale_compiles_nothing[laplace] compiled
  normal = np.asarray(exact.laplace(key, (4000,), scale=0.75))
  jax.clear_caches()
  monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-3)
  calls = record_host_refinements(monkeypatch, exact_refine)
  forced = np.asarray(exact.laplace(key, (4000,), scale=0.75))
  jax.clear_caches()
  assert calls and calls[0] > 500
  np.testing.assert_array_equal(forced, normal)
