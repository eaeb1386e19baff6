"""Exact vote-ball K-norm noise (jaxdp.exact.vote_ball).

Independent references: the lattice rounding's choice by brute force (the spread of
every candidate lift, in rationals), the exact second moment of the vote ball and the
Beta(d, 1) law of ||Z||_K, the float sampler (a two-sample test), and mpmath at 300
bits (the ideal noise rounded from the same digits).
"""

import itertools
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
from jaxdp.exact import vote_ball as exact_vote
from tests.helpers.exactness import (
  indexed_key,
  record_host_refinements,
  second_moment_zscores,
)

mpmath = pytest.importorskip("mpmath")
KEY = bytes(range(64, 96))
BITS = 244


def _key(i=0, secure=True):
  """Key i of this file (:func:`~tests.helpers.exactness.indexed_key`)."""
  return indexed_key(KEY, 3000, i, secure)


# One compiled program per shape rather than one per eager operation.
_vote_lift = jax.jit(exact_vote.vote_lift, static_argnums=1)
_vote_round = jax.jit(exact_vote.vote_round, static_argnums=2)
_digits52 = jax.jit(exact_intervals.digits52)


def _digits(w, x):
  return exact_refine.uniform_digits(w, x)[0]


def _brute_lift(v):
  """(k, lifted set) minimising the spread of v - lift over every subset of sizes
  0..d-1 (rationals; v given exactly), and whether the minimum is unique."""
  d = len(v)
  best = []
  for size in range(d):
    for subset in itertools.combinations(range(d), size):
      r = [x - (i in subset) for i, x in enumerate(v)]
      spread = sum(x * x for x in r) - sum(r) ** 2 / d
      best.append((spread, size, subset))
  best.sort()
  return best[0][1], set(best[0][2]), best[0][0] < best[1][0]


def _random_words(rng, n, d):
  words = rng.integers(0, 2**32, (n, 2 * d + 2, 2), dtype=np.uint64).astype(np.uint32)
  extra = rng.integers(0, 2**32, (n, 2 * d + 2, exact.REFINE_WORDS), dtype=np.uint64)
  return words, extra.astype(np.uint32)


@pytest.mark.parametrize("d", [2, 3, 5])
def test_lift_choice_equals_brute_force(d):
  """On 200 random digit vectors the host's choice (244 digits) equals the brute-force
  minimum over every subset (rationals, the digits' midpoints), and the device's
  (32 digits) wherever it decides (nearly everywhere)."""
  words, extra = _random_words(np.random.default_rng(d), 200, d)
  j = np.zeros((200, d), np.int64)
  for t in range(200):
    v = [_digits(w, x) for w, x in zip(words[t, d + 1 : 2 * d + 1], extra[t, d + 1 :])]
    lift, k, decided = exact_vote.host_lift(v, BITS)
    want_k, want_set, unique = _brute_lift(
      [Fraction(2 * x + 1, 2 ** (BITS + 1)) for x in v]
    )
    assert decided and unique
    assert k == want_k and {i for i in range(d) if lift[i]} == want_set
    j[t] = [x >> (BITS - 32) for x in v]
  with jax.enable_x64(True):
    lift_d, k_d, dec_d = (np.asarray(a) for a in _vote_lift(jnp.asarray(j), 32))
  assert dec_d.mean() > 0.98
  for t in np.nonzero(dec_d)[0]:
    v = [_digits(w, x) for w, x in zip(words[t, d + 1 : 2 * d + 1], extra[t, d + 1 :])]
    lift, k, _ = exact_vote.host_lift(v, BITS)
    assert k_d[t] == k and list(lift_d[t]) == lift


def test_lift_choice_engineered_at_a_tie():
  """d = 3 with x = (y + z + 1) / 2 up to +-3 units of the 244th digit: lifting the
  largest and lifting nothing have spreads within 2^-240; where that tie is the
  minimum, the device (32 digits) leaves the choice undecided, and the host decides
  every case as the brute force does."""
  rng = np.random.default_rng(3)
  ties, sides, tied_rows = 0, set(), []
  for t in range(60):
    y, z = (int.from_bytes(rng.bytes(31), "big") >> 5 for _ in range(2))  # < 2^243
    x = (y + z + (1 << BITS)) // 2 + (3 if t % 2 else -3)
    v = [x, y, z]
    lift, k, decided = exact_vote.host_lift(v, BITS)
    exact_v = [Fraction(2 * a + 1, 2 ** (BITS + 1)) for a in v]
    want_k, want_set, unique = _brute_lift(exact_v)
    assert decided and unique and k == want_k
    assert {i for i in range(3) if lift[i]} == want_set
    if want_k < 2:  # the tie between lifting x and lifting nothing is the minimum
      ties += 1
      sides.add(want_k)
      tied_rows.append([a >> (BITS - 32) for a in v])
  assert ties >= 10 and sides == {0, 1}
  # every tied row at once, padded to the 200 rows of the brute-force test's compile
  j = np.zeros((200, 3), np.int64)
  j[:ties] = tied_rows
  with jax.enable_x64(True):
    assert not np.asarray(_vote_lift(jnp.asarray(j), 32)[2])[:ties].any()


def _reference_vote(words, extra, scale, d, unrounded=False):
  """round(scale * R * Z) in mpmath at 300 bits from the digits' midpoints, the lift
  by brute force."""
  mpmath.mp.prec = 300
  val = lambda w, x: (mpmath.mpf(_digits(w, x)) + mpmath.mpf(0.5)) / mpmath.mpf(2) ** BITS
  u = [val(w, x) for w, x in zip(words, extra)]
  r = mpmath.fsum(-mpmath.log(1 - e) for e in u[: d + 1])
  v, t = u[d + 1 : 2 * d + 1], u[2 * d + 1]
  fr = [
    Fraction(2 * _digits(w, x) + 1, 2 ** (BITS + 1))
    for w, x in zip(words[d + 1 : 2 * d + 1], extra[d + 1 :])
  ]
  k, subset, _ = _brute_lift(fr)
  total = mpmath.fsum(v)
  out = []
  for i in range(d):
    z = d * v[i] - total - d * (i in subset) + k + mpmath.mpf(d - 1) / 2 - (d - 1) * t
    y = mpmath.mpf(float(scale)) * r * z
    out.append(y if unrounded else int(mpmath.floor(y + mpmath.mpf(0.5))))
  return out


@pytest.mark.parametrize("d", [3, 4])
def test_fast_pass_and_refinement_equal_high_precision(d):
  """300 random samples at scales 0.3 and 25: every coordinate the fast pass settles,
  and 40 host refinements, equal mpmath's rounding of the same digits; and scales
  putting coordinate 0 within 2^-60 of a half-integer leave it unsettled and the host
  returns mpmath's rounding."""
  words, extra = _random_words(np.random.default_rng(10 + d), 300, d)
  for s in (0.3, 25.0):
    with jax.enable_x64(True):
      kk, settled = _vote_round(jnp.asarray(words), jnp.float64(s), d)
    kk, settled = np.asarray(kk), np.asarray(settled)
    assert settled.mean() > 0.95
    for t in range(300):
      ref = _reference_vote(words[t], extra[t], s, d) if settled[t] or t < 40 else None
      if settled[t]:
        assert list(kk[t]) == ref
      if t < 40:
        assert list(exact_vote.refine_vote_sample(words[t], extra[t], s, d)) == ref
  for t in range(20):
    y = _reference_vote(words[t], extra[t], 1.0, d, unrounded=True)[0]
    if abs(y) < 0.05:
      continue
    s = float(
      (mpmath.floor(abs(y) * 37) + mpmath.mpf(0.5)) / abs(y) * (1 + mpmath.mpf(2.0**-60))
    )
    with jax.enable_x64(True):  # all rows (the shape compiled above), row t checked
      assert not bool(_vote_round(jnp.asarray(words), jnp.float64(s), d)[1][t])
    assert list(exact_vote.refine_vote_sample(words[t], extra[t], s, d)) == _reference_vote(
      words[t], extra[t], s, d
    )


@pytest.mark.slow
def test_law_second_moment_norms_and_the_float_sampler():
  """Unrounded Z from 40,000 samples' digits (d = 4): E[Z Z^T] against the vote
  ball's exact matrix (|z| < 5), ||Z||_K against Beta(d, 1) and ||R Z||_K against
  Gamma(d) (Kolmogorov-Smirnov, p > 1e-4); and the exact rounded noise at scale 2
  against the float sampler's, rounded (coordinate 0, chi-square two-sample, 20,000
  each, p > 1e-4)."""
  d, n = 4, 40_000
  ball = jaxdp.VoteBall(d)
  words = np.asarray(jax.random.bits(_key(1, secure=False), (n, 2 * d + 2, 2), jnp.uint32))
  with jax.enable_x64(True):
    vw = jnp.asarray(words[:, d + 1 : 2 * d + 1])
    lift, k, decided = (np.asarray(a) for a in _vote_lift(vw[..., 0].astype(jnp.int64), 32))
    u = (np.asarray(_digits52(jnp.asarray(words))) + 0.5) * 2.0**-52  # (n, 2d + 2)
  v, t, e = u[:, d + 1 : 2 * d + 1], u[:, 2 * d + 1], -np.log1p(-u[:, : d + 1])
  assert decided.all()
  z = (
    d * v
    - v.sum(1, keepdims=True)
    - d * lift
    + k[:, None]
    + (d - 1) / 2
    - (d - 1) * t[:, None]
  )
  assert np.abs(second_moment_zscores(z, ball.second_moment())).max() < 5
  norm = np.asarray(ball.norm(jnp.asarray(z)))
  assert norm.max() <= 1 + 1e-9
  assert stats.kstest(norm, stats.beta(d, 1).cdf).pvalue > 1e-4
  assert stats.kstest(norm * e.sum(1), stats.gamma(d).cdf).pvalue > 1e-4
  y = np.asarray(exact.vote_knorm(_key(2, secure=False), 3, 2.0, (20_000,)))[:, 0]
  f = np.rint(
    np.asarray(dprandom.knorm(_key(3, secure=False), jaxdp.VoteBall(3), 0.5, (20_000,)))
  )[:, 0]
  values = np.union1d(y, f)
  table = np.stack([[np.sum(y == c) for c in values], [np.sum(f == c) for c in values]])
  assert stats.chi2_contingency(table[:, table.min(axis=0) >= 5]).pvalue > 1e-4


def test_vote_mechanisms_translate_are_publishable_and_refuse_bad_input():
  """VoteQueryMechanism(exact=True) (its ball noise by default) and
  KNormMechanism(VoteBall, exact=True) release int32 through a secure accountant,
  which is charged; the same key on neighbouring data moves the release by exactly
  the row; the scale limit counts the ball's l_inf radius d - 1; exact per-row
  clipping into the vote ball, d beyond the sampler and bad eps are refused."""
  mech = jaxdp.VoteQueryMechanism(3, 0.5, exact=True)
  assert mech.noise == "ball" and jaxdp.is_publishable(mech)
  rows = np.array([[0, 1, 2], [2, 1, 0], [1, 0, 2]])
  key = _key(5)
  a, b = (np.asarray(mech.randomize(key, r)) for r in (rows, rows[1:]))
  assert a.dtype == np.int32
  np.testing.assert_array_equal(a - b, rows[0])
  knorm = jaxdp.KNormMechanism(jaxdp.VoteBall(3), 0.5, exact=True)
  assert jaxdp.is_publishable(knorm)
  np.testing.assert_array_equal(
    np.asarray(knorm.randomize(key, jnp.zeros(3, jnp.int32))), a - rows.sum(axis=0)
  )
  acct = jaxdp.Accountant.create(1.0, secure=True)
  new, out = jaxdp.release(acct, mech, rows)
  assert out.dtype == jnp.int32 and float(new.spent_eps) == pytest.approx(0.5)
  with pytest.raises(jaxdp.StaleAccountantError):
    jaxdp.release(acct, mech, rows)
  d = 5  # scale * (d - 1) must stay within max_scale(d)
  top = exact.max_scale(d) / (d - 1)
  with pytest.raises(ValueError, match="scale"):
    jaxdp.KNormMechanism(jaxdp.VoteBall(d), 1.0 / (1.01 * top), exact=True).valid((d,))
  with pytest.raises(ValueError, match="scale must be at most"):
    exact.vote_knorm(key, d, 1.01 * top)
  assert bool(
    jaxdp.KNormMechanism(jaxdp.VoteBall(d), 1.0 / (0.99 * top), exact=True).valid((d,))
  )
  with pytest.raises(ValueError, match="d <= 1024"):
    jaxdp.KNormMechanism(jaxdp.VoteBall(1025), 1.0, exact=True)
  with pytest.raises(ValueError, match="vote ball exactly"):
    knorm.part_statistics(jnp.asarray(rows), jnp.zeros(3, jnp.int32), 1)
  for eps in (float("nan"), float("inf"), 0.0):
    with pytest.raises(ValueError, match="eps"):
      jaxdp.VoteQueryMechanism(3, eps, exact=True)
  # a traced statistic near int32's ends saturates at +-(2^31 - 1), never wraps
  noise = np.asarray(knorm.randomize(key, jnp.zeros(3, jnp.int32)))
  x = jnp.asarray([2**31 - 2, -(2**31) + 1, 7], jnp.int32)
  got = np.asarray(jax.jit(knorm.randomize)(key, x))
  want = np.clip(np.asarray(x, np.int64) + noise, -(2**31 - 1), 2**31 - 1)
  np.testing.assert_array_equal(got, want)


def test_a_callers_vmap_gives_each_key_its_own_draw():
  """Under a caller's vmap over three keys each member's noise equals its own
  unbatched draw."""
  keys = jax.random.split(_key(6, secure=False), 3)
  draw = lambda k: exact.vote_knorm(k, 4, 3.0, (500,))
  np.testing.assert_array_equal(
    np.asarray(jax.vmap(draw)(keys)), np.stack([np.asarray(draw(k)) for k in keys])
  )


class _ShiftingScale:
  """A scale whose every read as an array gives the next value (checked as one,
  drawn with another if read twice)."""

  def __init__(self, *values):
    self.values = list(values)

  def __array__(self, dtype=None, copy=None):
    return np.asarray(self.values.pop(0) if len(self.values) > 1 else self.values[0], dtype)


def test_a_static_scale_is_read_once():
  """Checked at 40 and drawn with 1e-3 if read again: the noise must be the scale-40
  noise from the same key."""
  # the key type and size of the vmap test's draws: its compilation
  key = _key(91, secure=False)
  want = np.asarray(exact.vote_knorm(key, 4, 40.0, (500,)))
  got = np.asarray(exact.vote_knorm(key, 4, _ShiftingScale(40.0, 1e-3), (500,)))
  np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_forced_refinement_releases_the_same_integers(monkeypatch):
  """MARGIN widened to 2^-9: most of 500 samples (d = 4, scale 20) are refined on the
  host inside the jitted kernel, and the release equals the normal run's."""
  key = _key(4, secure=False)
  normal = np.asarray(exact.vote_knorm(key, 4, 20.0, (500,)))
  jax.clear_caches()
  try:
    calls = record_host_refinements(monkeypatch, exact_refine)
    monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-9)
    forced = np.asarray(exact.vote_knorm(key, 4, 20.0, (500,)))
    assert calls and calls[0] > 250, calls
    np.testing.assert_array_equal(forced, normal)
  finally:
    monkeypatch.undo()
    jax.clear_caches()
