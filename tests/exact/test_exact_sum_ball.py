"""Exact sum-ball K-norm noise (jaxdp.exact.sum_ball) and its exactly decided
cube-slice points (jaxdp.exact.slices).

Independent references: the exact cell probabilities of the uniform law on the cube
slice (box volumes under a hyperplane by inclusion-exclusion, in rationals), the
Gamma(d) law of ||Y||_K, the float sampler (a two-sample test), and mpmath at 300
bits (the ideal noise rounded from the same digits, with the proposal's acceptance
decided there from the textbook construction).
"""

import functools
import math
from fractions import Fraction

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
from jaxdp.exact import slices
from jaxdp.exact import sum_ball as exact_sum
from tests.helpers.exactness import indexed_key, record_host_refinements, slice_cell_pvalue

mpmath = pytest.importorskip("mpmath")
KEY = bytes(range(32, 64))


def _key(i=0, secure=True):
  """Key i of this file (:func:`~tests.helpers.exactness.indexed_key`)."""
  return indexed_key(KEY, 2000, i, secure)


# One compiled program per plan rather than one per eager operation.
_fast_decisions = jax.jit(exact_sum.fast_decisions, static_argnums=1)
_sum_round = jax.jit(exact_sum.sum_round, static_argnums=2)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _first_statuses(key, plan, m):
  """The fast pass's status of m samples' first proposals."""
  with jax.enable_x64(True):
    words, _ = exact_sum.proposal_words(jax.random.split(key, m), 0, plan)
    return exact_sum.fast_decisions(words, plan)[0]


@functools.partial(jax.jit, static_argnums=(1, 2))
def _accepted(key, plan, m):
  with jax.enable_x64(True):
    keys = jax.random.split(key, m)
    words, _ = exact_sum.accepted_proposals(keys, plan)
    _, lo, hi = exact_sum.fast_decisions(words, plan)
    return words, lo, hi


def _points(key, plan, m):
  """m accepted points of S(d, k) (interval midpoints, width at most 2a 2^-52) and
  the words they came from."""
  words, lo, hi = (np.asarray(v) for v in _accepted(key, plan, m))
  return (lo + hi).astype(np.float64) * 2.0**-53, words


# (d, k, a): the cube, the plain simplex, wrapped simplices with and without a
# Bernoulli step, the plan's own choice
SLOW = pytest.mark.slow
PLANS = [
  (3, 2, 0),
  (3, 2, 5),
  pytest.param(3, 1, 1, marks=SLOW),
  pytest.param(3, 2, 2, marks=SLOW),
  pytest.param(4, 3, 7, marks=SLOW),
  pytest.param(4, 2, None, marks=SLOW),
]


@pytest.mark.parametrize(("d", "k", "a"), PLANS)
def test_slice_points_follow_the_exact_uniform_law(d, k, a):
  """60,000 accepted points per proposal: every cell of side 1/3 (d = 3) or 1/2
  (d = 4) against its exact probability (chi-square, p > 1e-4), no point outside
  S(d, k); the signs (bit 0 of each slice word) are fair and independent of the
  point (chi-square over the 2^d sign patterns, p > 1e-4)."""
  plan = slices.slice_plan(d, k, a)
  x, words = _points(_key(d * 100 + k * 10 + (a or 0), secure=False), plan, 60_000)
  assert (x.sum(axis=1) <= k).all() and (x <= 1).all() and (x >= 0).all()
  assert slice_cell_pvalue(x, d, k, 3 if d == 3 else 2) > 1e-4
  neg = (words[:, d + 1 : 2 * d + 1, 1] & 1).astype(int)
  pattern = neg @ (2 ** np.arange(d))
  assert stats.chisquare(np.bincount(pattern, minlength=2**d)).pvalue > 1e-4
  big = x.sum(axis=1) > k / 2  # signs independent of the point
  table = np.stack(
    [np.bincount(pattern[big], minlength=2**d), np.bincount(pattern[~big], minlength=2**d)]
  )
  assert stats.chi2_contingency(table).pvalue > 1e-4


def test_a_wrapped_simplex_without_its_bernoulli_step_fails_the_law():
  """The same test must fail (p < 1e-10) when the wrapped simplex (a = 5) accepts
  every I < k without its Bernoulli trial: its density C(a + d - 1 - I, d) is then
  not flat (35 against 20 at d = 3, k = 2)."""
  plan = slices.slice_plan(3, 2, 5)
  skewed = plan._replace(p_top=(2**64 - 1,), p_full=(2**256 - 1,))
  x, _ = _points(_key(7, secure=False), skewed, 60_000)
  assert slice_cell_pvalue(x, 3, 2, 3) < 1e-10


def test_plans_choose_the_larger_exact_acceptance():
  """The plan's acceptance against the exact volume: the cube accepts vol S(d, k)
  (the Irwin-Hall CDF), the wrapped simplex vol S d! C(a + d - k, d) / a^d; and the
  measured acceptance of 20,000 proposals at (d, k) = (10, 4) within 5 standard
  errors of the plan's."""
  for d, k in [(3, 2), (10, 4), (50, 19), (1024, 370)]:
    plan = slices.slice_plan(d, k)
    vol = sum((-1) ** i * math.comb(d, i) * Fraction(k - i) ** d for i in range(k + 1))
    vol /= math.factorial(d)
    acc = vol if plan.a == 0 else vol * math.factorial(d) * math.comb(plan.a + d - k, d)
    acc = acc if plan.a == 0 else acc / Fraction(plan.a) ** d
    assert math.isclose(math.log(acc), plan.log_acc, rel_tol=1e-9, abs_tol=1e-9)
    other = slices.slice_plan(d, k, 0)
    assert plan.log_acc >= other.log_acc
  plan = slices.slice_plan(10, 4)
  status = np.asarray(_first_statuses(_key(11, secure=False), plan, 20_000))
  p = math.exp(plan.log_acc)
  assert abs((status == slices.ACCEPT).mean() - p) < 5 * math.sqrt(p * (1 - p) / 20_000)


@pytest.mark.slow
def test_norm_is_gamma_and_the_noise_matches_the_float_sampler():
  """||Y||_K of the unrounded noise (R g(x) from the accepted proposals' digits)
  against Gamma(d) (Kolmogorov-Smirnov, 20,000 draws, p > 1e-4) at (d, k) = (6, 2);
  and the exact rounded noise at scale 3 against the float sampler's, rounded: the
  first coordinate and the number of zero coordinates (chi-square two-sample tests,
  20,000 draws each, p > 1e-4)."""
  d, k = 6, 2
  plan = slices.slice_plan(d, k)
  x, words = _points(_key(21, secure=False), plan, 20_000)
  j = (words[:, : d + 1, 0].astype(np.float64) * 2**20) + (words[:, : d + 1, 1] >> 12)
  r = np.sum(-np.log1p(-(j + 0.5) * 2.0**-52), axis=1)
  g = np.maximum(x.max(axis=1), x.sum(axis=1) / k)
  assert stats.kstest(r * g, stats.gamma(d).cdf).pvalue > 1e-4
  ball = jaxdp.SumBall(d, k)
  y = np.asarray(exact.sum_knorm(_key(22, secure=False), d, k, 3.0, (20_000,)))
  z = np.rint(np.asarray(dprandom.knorm(_key(23, secure=False), ball, 1 / 3.0, (20_000,))))
  assert np.abs(ball.norm(jnp.asarray(y, jnp.float32))).max() < 200
  for stat in (lambda v: np.clip(v[:, 0], -12, 12), lambda v: np.sum(v == 0, axis=1)):
    a, b = stat(y), stat(z)
    values = np.union1d(a, b)
    table = np.stack([[np.sum(a == v) for v in values], [np.sum(b == v) for v in values]])
    assert stats.chi2_contingency(table[:, table.min(axis=0) >= 5]).pvalue > 1e-4


def _reference_sum(words, extra, scale, plan, unrounded=False):
  """The proposal decided and the noise rounded in mpmath at 300 bits from the
  digits' midpoints (244 per uniform, 256 for W): the textbook construction, sorted
  uniforms, spacings, frac(a D), I = floor(sum(x)) and W < p_I as a rational. None
  when rejected."""
  mpmath.mp.prec = 300
  d, k, a = plan.d, plan.k, plan.a

  def value(w, x, bits=52):
    big = (
      (int(w[0]) << 20) | (int(w[1]) >> 12) if bits == 52 else (int(w[0]) << 32) | int(w[1])
    )
    for v in x:
      big = (big << 32) | int(v)
    return (mpmath.mpf(big) + mpmath.mpf(0.5)) / mpmath.mpf(2) ** (bits + 32 * len(x))

  u = [value(w, x) for w, x in zip(words[d + 1 : 2 * d + 1], extra[d + 1 : 2 * d + 1])]
  if a == 0:
    if mpmath.fsum(u) > k:
      return None
    pts = u
  else:
    s = sorted(u)
    pts = [a * (c - p) - mpmath.floor(a * (c - p)) for p, c in zip([0, *s[:-1]], s)]
    i = int(mpmath.floor(mpmath.fsum(pts)))
    if i >= k:
      return None
    p = Fraction(math.comb(a + d - k, d), math.comb(a + d - 1 - i, d))
    w = value(words[2 * d + 1], extra[2 * d + 1], bits=64)
    if w >= mpmath.mpf(p.numerator) / p.denominator:
      return None
  r = mpmath.fsum(-mpmath.log(1 - value(w, x)) for w, x in zip(words[: d + 1], extra))
  out = []
  for t in range(d):
    y = mpmath.mpf(float(scale)) * r * pts[t] * (-1 if words[d + 1 + t, 1] & 1 else 1)
    out.append(y if unrounded else int(mpmath.floor(y + mpmath.mpf(0.5))))
  return out


def _random_words(rng, n, d):
  words = rng.integers(0, 2**32, (n, 2 * d + 2, 2), dtype=np.uint64).astype(np.uint32)
  extra = rng.integers(0, 2**32, (n, 2 * d + 2, exact.REFINE_WORDS), dtype=np.uint64)
  return words, extra.astype(np.uint32)


@pytest.mark.parametrize(("d", "k", "a"), [(4, 2, 0), (4, 2, None), (5, 3, 9)])
def test_decisions_and_rounding_equal_high_precision(d, k, a):
  """400 random proposals: every decision the device makes, and every host decision
  (244 digits), equals mpmath's; on the accepted ones at scales 0.7 and 40, every
  coordinate the fast pass settles and every host refinement equals mpmath's rounding
  of the same digits."""
  plan = slices.slice_plan(d, k, a)
  words, extra = _random_words(np.random.default_rng(d * 10 + k), 400, d)
  refs = {
    s: [_reference_sum(w, x, s, plan) for w, x in zip(words, extra)] for s in (0.7, 40.0)
  }
  accepted = np.array([r is not None for r in refs[0.7]])
  assert 0 < accepted.sum() < 400
  with jax.enable_x64(True):
    status = np.asarray(_fast_decisions(jnp.asarray(words), plan)[0])
  decided = status != slices.UNDECIDED
  assert decided.mean() > 0.99
  np.testing.assert_array_equal(status[decided] == slices.ACCEPT, accepted[decided])
  host = exact_sum.host_decisions(
    np.full(400, slices.UNDECIDED), np.ones(400, bool), words, extra, plan=plan
  )
  np.testing.assert_array_equal(host == slices.ACCEPT, accepted)
  for s, ref in refs.items():
    with jax.enable_x64(True):  # every row (one shape for all tests), the accepted kept
      kk, settled = _sum_round(jnp.asarray(words), jnp.float64(s), plan)
    kk, settled = np.asarray(kk)[accepted], np.asarray(settled)[accepted]
    want = np.array([r for r in ref if r is not None])
    np.testing.assert_array_equal(kk[settled], want[settled])
    for i in np.nonzero(accepted)[0][:40]:
      got = exact_sum.refine_sum_sample(words[i], extra[i], s, plan=plan)
      assert list(got) == ref[i]


def test_decisions_engineered_at_the_bound_use_the_deep_digits():
  """Cube proposals (d = 3, k = 2) whose sum is within 2^-240 of k, above or below by
  the last digits: the device leaves every one undecided, and the host decides each
  from 244 digits as mpmath does."""
  plan = slices.slice_plan(3, 2, 0)
  rng = np.random.default_rng(9)
  words, extra = _random_words(rng, 40, 3)
  for t in range(40):
    digits = [int.from_bytes(rng.bytes(30), "big") >> 4 for _ in range(2)]  # 236 bits
    digits = [v + (1 << 243) for v in digits]  # two uniforms in [1/2, 1)
    last = (2 << 244) - sum(digits) + (3 if t % 2 else -3)
    for row, v in zip(range(4, 7), [*digits, last]):
      words[t, row] = [v >> 212, ((v >> 192) & 0xFFFFF) << 12]
      extra[t, row] = [(v >> (32 * (5 - i))) & 0xFFFFFFFF for i in range(6)]
  with jax.enable_x64(True):
    status = np.asarray(_fast_decisions(jnp.asarray(words), plan)[0])
  assert (status == slices.UNDECIDED).all()
  host = exact_sum.host_decisions(status, np.ones(40, bool), words, extra, plan=plan)
  want = [_reference_sum(w, x, 1.0, plan) is not None for w, x in zip(words, extra)]
  np.testing.assert_array_equal(host == slices.ACCEPT, want)
  assert 0 < sum(want) < 40


@pytest.mark.parametrize("offset", [2.0**-30, 2.0**-60])
def test_coordinates_engineered_near_a_half_integer(offset):
  """Scales that put the first coordinate within ``offset`` (relative) of a
  half-integer, on 30 accepted samples of the wrapped plan at (5, 3): the fast pass
  never settles it wrongly (at 2^-60, inside its 2^-40 widening, it must leave it
  unsettled), and the host refinement returns mpmath's rounding."""
  plan = slices.slice_plan(5, 3, 9)
  words, extra = _random_words(np.random.default_rng(5), 200, 5)
  done = 0
  for w, x in zip(words, extra):
    y = _reference_sum(w, x, 1.0, plan, unrounded=True)
    if y is None or abs(y[0]) < 0.05:
      continue
    target = mpmath.floor(abs(y[0]) * 37) + mpmath.mpf(0.5)
    s = float(target / abs(y[0]) * (1 + mpmath.mpf(offset)))
    ref = _reference_sum(w, x, s, plan)
    # the sample in all 400 rows: the shape test_decisions_... compiles at (5, 3, 9)
    rows = jnp.asarray(np.broadcast_to(w, (400, *w.shape)))
    with jax.enable_x64(True):
      kk, settled = _sum_round(rows, jnp.float64(s), plan)
    if offset < 2.0**-45:
      assert not bool(settled[0])
    elif bool(settled[0]):
      assert list(np.asarray(kk[0])) == ref
    assert list(exact_sum.refine_sum_sample(w, x, s, plan=plan)) == ref
    done += 1
    if done == 30:
      break
  assert done == 30


def test_mechanisms_translate_are_publishable_and_refuse_bad_input():
  """KNormMechanism(SumBall, exact=True) and SumQueryMechanism(exact=True) (its ball
  noise by default) release int32 through a secure accountant, which is charged; the
  same key on neighbouring data moves the release by exactly the statistic's change;
  a stale accountant, bad eps and sizes beyond the exact sampler are refused, and the
  sizes beyond the exact sampler are refused."""
  mech = jaxdp.SumQueryMechanism(4, 2, 0.5, exact=True)
  assert mech.noise == "ball" and jaxdp.is_publishable(mech)
  rows = np.array([[1, -1, 0, 0], [0, 0, 1, 0], [0, -1, 0, 1]])
  key = _key(41)
  a, b = (np.asarray(mech.randomize(key, r)) for r in (rows, rows[1:]))
  assert a.dtype == np.int32
  np.testing.assert_array_equal(a - b, rows[0])
  knorm = jaxdp.KNormMechanism(jaxdp.SumBall(4, 2), 0.5, exact=True)
  assert jaxdp.is_publishable(knorm)
  np.testing.assert_array_equal(  # the query's noise is the K-norm mechanism's
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
      jaxdp.KNormMechanism(jaxdp.SumBall(4, 2), eps, exact=True)
  with pytest.raises(ValueError, match="scale must be at most"):
    exact.sum_knorm(key, 4, 2, 2.0**21)
  with pytest.raises(ValueError, match="d <= 1024"):
    jaxdp.KNormMechanism(jaxdp.SumBall(1025, 3), 1.0, exact=True)
  with pytest.raises(ValueError, match="1 <= k <= d <= 1024"):
    exact.sum_knorm(key, 4, 5, 1.0)
  # a traced bad eps: the sentinel, never weaker noise
  bad = jax.jit(
    lambda e: jaxdp.KNormMechanism(jaxdp.SumBall(4, 2), e, exact=True).randomize(
      _key(41, secure=False), jnp.zeros(4, jnp.int32)
    )
  )(jnp.float32(jnp.nan))
  assert (np.asarray(bad) == np.iinfo(np.int32).min).all()
  # per-row contributions: a row beyond the ball (3 non-zero entries, k = 2) counts 0
  sums = knorm.part_statistics(
    jnp.asarray([[1, 1, 1, 0], [1, -1, 0, 0]]), jnp.zeros(2, jnp.int32), 1
  )
  np.testing.assert_array_equal(np.asarray(sums), [[1, -1, 0, 0]])


@pytest.mark.slow
def test_a_callers_vmap_gives_each_key_its_own_draw():
  """Under a caller's vmap over three keys (2,000 samples each: the later rejection
  rounds run with fewer slots than samples) each member's noise equals its own
  unbatched draw: the batched while loop and host calls change nothing."""
  keys = jax.random.split(_key(51, secure=False), 3)
  draw = lambda k: exact.sum_knorm(k, 4, 2, 3.0, (2000,))
  np.testing.assert_array_equal(
    np.asarray(jax.vmap(draw)(keys)), np.stack([np.asarray(draw(k)) for k in keys])
  )


@pytest.mark.slow
def test_forced_host_paths_release_the_same_integers(monkeypatch):
  """The jitted sampler with every device decision left undecided (every proposal
  decided on the host from 244 digits) and the fast pass's widening raised to 2^-9
  (most of 300 samples refined on the host) releases the normal run's integers from
  the same key (d = 5, k = 3, scale 40). Both host paths are forced in one
  compilation: a wrong host decision or a wrong host rounding on any sample changes
  the release."""
  key = _key(31, secure=False)
  normal = np.asarray(exact.sum_knorm(key, 5, 3, 40.0, (300,)))
  jax.clear_caches()
  try:
    calls = record_host_refinements(monkeypatch, exact_refine)
    decisions = []
    real_host, real = exact_sum.host_decisions, exact_sum.decide_fast

    def counting(status, pending, *args, **kwargs):
      decisions.append(int(np.sum(np.asarray(pending))))
      return real_host(status, pending, *args, **kwargs)

    def undecided(j, w, plan):
      status, lo, hi = real(j, w, plan)
      return jnp.full_like(status, slices.UNDECIDED), lo, hi

    monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-9)
    monkeypatch.setattr(exact_sum, "decide_fast", undecided)
    monkeypatch.setattr(exact_sum, "host_decisions", counting)
    forced = np.asarray(exact.sum_knorm(key, 5, 3, 40.0, (300,)))
    assert calls and calls[0] > 150, calls
    assert decisions and decisions[0] == 300, decisions
    np.testing.assert_array_equal(forced, normal)
  finally:
    monkeypatch.undo()
    jax.clear_caches()
