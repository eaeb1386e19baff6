"""Uniform points of the cube slice S(m, k) = {x in [0, 1]^m : sum(x) <= k}, the kernel
of the sum and count balls.

Volume: vol S(m, k) = P(U_1 + ... + U_m <= k) (the Irwin-Hall CDF) = sum_{i < k}
A(m, i) / m!, with A the Eulerian numbers (Stanley: the cube's slices i <= sum < i + 1
have volumes A(m, i) / m!). The host computes it in logs from the recurrence
A(n, i) = (i + 1) A(n - 1, i) + (n - i) A(n - 1, i - 1) (positive terms, no
cancellation), and the exact moments as rationals.

Sampler: rejection, from proposals whose density is a function of sum(x) (so that
an acceptance depending on sum(x) alone corrects it to a constant: exact), chosen on
the host for each (m, k) by their exact acceptance probabilities:

* the scaled simplex k * {y >= 0, sum(y) <= 1}: x_i = k E_i / (E_0 + ... + E_m) for
  m + 1 exponentials, accepted when max(x) <= 1 (acceptance vol S * m! / k^m);
* i.i.d. exponentials of rate lam truncated to [0, 1] (lam = 0: the uniform cube),
  accepted when sum(x) <= k and an exponential E_0 >= lam (k - sum(x)), that is with
  probability exp(lam (sum(x) - k)) (acceptance vol S * (lam / (1 - e^-lam))^m
  e^(-lam k)). lam is the maximiser, the root of m E[X] = k for the truncated
  exponential X (lam = 0 when k >= m / 2);
* the wrapped simplex (:func:`wrapped_proposal`): x = frac(a D) for a uniform point
  a D of the simplex a {y >= 0, sum(y) <= a}, integer a >= k, whose density on the
  cube is proportional to C(a + m - 1 - floor(sum(x)), m) (a = k is the scaled
  simplex, with the same acceptance). With the best a, the minimum over k of the
  best acceptance is about 0.28 at m = 50, 0.09 at m = 500 and 0.03 at m = 4096 (at
  k near 0.37 m); the best of the first two alone has minima 0.09, 0.02 and 0.006
  (near k = m / 6).

When only the direction x / g(x) is wanted (g(x) = max(max(x), sum(x) / k), the
count ball's halves), any density of the form h(g(x)) on S(m, k) gives it the cone
measure, and the wrapped simplex accepted against h(g(x)) = C(a + m - 1 - floor(k
g(x)), m) accepts more (:func:`shell_proposal`: 0.50 instead of 0.38 at m = 25,
k = 10; 0.86 instead of 0.51 at m = 40, k = 10). Near m = 2 k the cube folded by
its complement accepts more still (:func:`fold_proposal`: 0.72 instead of 0.64 at
m = 25, k = 13; 1 at m = 2 k).

:mod:`jaxdp.samplers.slice_kernel` picks, for each size, the one that accepts most
and draws them in one kernel. Every draw ends: :func:`rejection_fill` retries
rejected rows only, never a biased fallback.

A candidate is also rejected when rounding puts it outside the ball (its computed
norm above 1), so every returned point lies in the ball as computed.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache

__all__ = [
  "MIN_ROUND",
  "MIN_SLOTS",
  "SliceTable",
  "fold_proposal",
  "log_slice_volumes",
  "rejection_fill",
  "round_slots",
  "shell_proposal",
  "shuffle_proposal",
  "slice_moments",
  "slice_table",
  "wrapped_proposal",
  "wrapped_thresholds",
]

# rejection_fill's rows per round, at least (a smaller batch takes all of them).
MIN_ROUND = 1024
# round_slots' fewest slots.
MIN_SLOTS = 64


def log_slice_volumes(d: int, k: int) -> np.ndarray:
  """log vol S(m, k) for m = 0, ..., d (float64), from the Eulerian numbers."""
  out = np.zeros(d + 1)
  log_a = np.array([0.0])  # log A(0, 0): the empty permutation has no descent
  log_fact = 0.0
  for n in range(1, d + 1):
    size = min(n, k)  # A(n, i) for i < k
    i = np.arange(size)
    prev = np.full(size, -np.inf)
    prev[: len(log_a)] = log_a[:size]
    shifted = np.concatenate([[-np.inf], prev[:-1]])
    log_a = np.logaddexp(np.log(i + 1.0) + prev, np.log(n - i) + shifted)
    log_fact += math.log(n)
    top = np.max(log_a)
    out[n] = top + math.log(np.sum(np.exp(log_a - top))) - log_fact
  return out


def _truncated_mean(lam: float) -> float:
  """E[X] for X ~ Exp(lam) truncated to [0, 1], lam > 0."""
  return 1.0 / lam - (1.0 / math.expm1(lam) if lam < 700 else 0.0)


def _optimal_rate(m: int, k: int) -> float:
  """The root lam >= 0 of m E[X_lam] = k (0 when k >= m / 2), by bisection."""
  target = k / m
  if target >= 0.5:
    return 0.0
  lo, hi = 1e-9, 1.0
  while _truncated_mean(hi) > target:
    hi *= 2.0
  for _ in range(64):
    mid = 0.5 * (lo + hi)
    if _truncated_mean(mid) > target:
      lo = mid
    else:
      hi = mid
  return 0.5 * (lo + hi)


@value_cache(maxsize=64)
def slice_table(d: int, k: int) -> SliceTable:
  """The proposal for each S(m, k), m = 0, ..., d (see the module docstring)."""
  logvol = log_slice_volumes(d, k)
  simplex = np.zeros(d + 1, bool)
  lam = np.zeros(d + 1)
  log_acc = np.zeros(d + 1)
  for m in range(1, d + 1):
    if m <= k:  # S(m, k) is the cube: uniform, always accepted
      continue
    rate = _optimal_rate(m, k)
    tilt = logvol[m] - rate * k
    if rate > 0:
      tilt += m * math.log(rate / -math.expm1(-rate))
    simp = logvol[m] + math.lgamma(m + 1) - m * math.log(k)
    simplex[m] = simp > tilt
    lam[m] = rate
    log_acc[m] = max(simp, tilt)
  for a in (simplex, lam, log_acc, logvol):
    a.setflags(write=False)  # shared by every caller of the cache
  return SliceTable(simplex, lam, log_acc, logvol)


class SliceTable(NamedTuple):
  """Host arrays (read-only) indexed by m = 0..d: ``simplex`` (bool: the simplex
  proposal), ``lam`` (the tilted proposal's rate), ``log_acc`` (log acceptance) and
  ``logvol`` (log vol S(m, k))."""

  simplex: np.ndarray
  lam: np.ndarray
  log_acc: np.ndarray
  logvol: np.ndarray


@value_cache(maxsize=64)
def shuffle_proposal(m: int, k: int) -> tuple[int, np.ndarray, float]:
  """The wrapped simplex proposal for S(m, k): ``(a, thresholds, log_acc)``
  (:func:`wrapped_proposal`)."""
  return wrapped_proposal(m, k, log_slice_volumes(m, k)[m])


def wrapped_proposal(m: int, k: int, logvol: float) -> tuple[int, np.ndarray, float]:
  """The wrapped simplex proposal for S(m, k), m > k, given ``logvol`` = log vol
  S(m, k): ``(a, thresholds, log_acc)``.

  x = frac(a D) for D the first m of m + 1 uniform spacings (a D is uniform in the
  simplex a {y >= 0, sum(y) <= a}) has density (m! / a^m) C(a + m - 1 - i, m) on
  [0, 1)^m, i = floor(sum(x)): the number of integer vectors n >= 0 with
  sum(x + n) <= a. Accepting it when i < k and an exponential exceeds
  ``thresholds[i]`` = log C(a + m - 1 - i, m) - log C(a + m - k, m) leaves x uniform
  in S(m, k), with acceptance vol S(m, k) m! C(a + m - k, m) / a^m; a is the integer
  >= k that maximises it (a = k is the plain scaled simplex), found by bisection on
  the sign of its increment (the acceptance is unimodal in a).
  """

  def log_acc(a):
    return logvol + math.lgamma(m + 1) + _log_comb(a + m - k, m) - m * math.log(a)

  a = _best_a(log_acc, m, k)
  return a, wrapped_thresholds(m, k, a), log_acc(a)


def _best_a(log_acc, m: int, k: int) -> int:
  """The least a in [k, k + 64 m] where ``log_acc(a)`` stops rising (bisection on the
  sign of its increment: the maximiser when it is unimodal)."""
  lo, hi = k, k + 64 * m
  while lo < hi:
    mid = (lo + hi) // 2
    if log_acc(mid + 1) > log_acc(mid):
      lo = mid + 1
    else:
      hi = mid
  return lo


def wrapped_thresholds(m: int, k: int, a: int) -> np.ndarray:
  """``thresholds[i]`` = log C(a + m - 1 - i, m) - log C(a + m - k, m), i = 0..k - 1
  (read-only): the wrapped simplex's log density on the slab i over its least, on
  the slab k - 1."""
  # thresholds[k - 1 - c] = sum_{t = 1..c} log((a + m - k + t) / (a - k + t)), from
  # the ratios C(n, m) / C(n - 1, m) = n / (n - m) at n = a + m - k + t.
  t = np.arange(1, k, dtype=np.float64)
  steps = np.log((a + m - k + t) / (a - k + t))
  thresholds = np.concatenate([np.cumsum(steps)[::-1], [0.0]])
  thresholds.setflags(write=False)
  return thresholds


def shell_proposal(m: int, k: int, logvol: float) -> tuple[int, np.ndarray, float]:
  """The wrapped simplex for the cone measure of S(m, k), m > k, given ``logvol`` =
  log vol S(m, k): ``(a, thresholds, log_acc)``, the thresholds those of
  :func:`wrapped_thresholds`.

  Only the direction x / g(x) is wanted (g(x) = max(max(x), sum(x) / k), the gauge
  of S(m, k)), and it follows the cone measure of S(m, k) for any density of the
  form h(g(x)) (polar coordinates: dx = m vol S t^(m - 1) dt dmu(u) for x = t u).
  The wrapped simplex's density, prop. to C(a + m - 1 - floor(sum(x)), m), falls with
  the sum, and sum(x) <= k g(x); so h(g(x)) = C(a + m - 1 - floor(k g(x)), m) is at
  most it on S(m, k): accepting x when an Exp(1) variate is at least
  ``thresholds[floor(sum(x))] - thresholds[floor(k g(x))]`` leaves x with density
  h(g(x)). Its acceptance, vol S m! / a^m E[C(a + m - 1 - floor(k g), m)] for g ~
  Beta(m, 1) (g(x) for x uniform in S(m, k)), is at least the uniform target's, whose
  threshold is ``thresholds[floor(sum(x))]`` alone. a is searched in [k, k + 64 m]
  as in :func:`wrapped_proposal` (bisection on the sign of the increment); any
  integer a >= k keeps the draw exact, a better one only accepts more.
  """
  i = np.arange(k, dtype=np.float64)
  # log P(floor(k g) = i) = log(((i + 1) / k)^m - (i / k)^m)
  log_p = m * np.log((i + 1) / k) + np.log1p(-((i / (i + 1)) ** m))

  def log_acc(a):
    n = a + m - 1 - i
    terms = log_p + _log_comb(n, m)
    top = np.max(terms)
    mean = top + math.log(np.sum(np.exp(terms - top)))
    return logvol + math.lgamma(m + 1) - m * math.log(a) + mean

  a = _best_a(log_acc, m, k)
  return a, wrapped_thresholds(m, k, a), log_acc(a)


def fold_proposal(m: int, k: int, logvol: float) -> float:
  """The log acceptance of the folded cube for the cone measure of S(m, k), m > k,
  given ``logvol`` = log vol S(m, k).

  x uniform in [0, 1]^m, replaced by 1 - x when sum(x) > k (the complement preserves
  the uniform law), lies in S(m, k) unless both sums are at least k. Its density on
  S(m, k) is f(z) = 1 + [sum(z) <= m - k] (z itself, and 1 - z when that sum exceeds
  k), a function of sum(z) that falls with it; on the level set g(z) = t (g the
  gauge max(max(z), sum(z) / k)) the sum reaches k t, so h(t) = 1 + [k t <= m - k]
  is at most f there: accepting z with probability h(g(z)) / f(z) (one half when
  sum(z) <= m - k < k g(z), else one) leaves density h(g(z)), whose direction z / g(z)
  follows the cone measure (:func:`shell_proposal`). The acceptance is the integral
  of h over S(m, k): vol S (1 + ((m - k) / k)^m) for m < 2 k (the set k g(z) <= m - k
  is S(m, k) scaled by (m - k) / k), 2 vol S for m >= 2 k (then h = 2 on S(m, k)):
  1 at m = 2 k, where the fold maps the cube's upper half onto S(m, k) (up to the
  rounding of float sums within an ulp of k).
  """
  if m >= 2 * k:
    return logvol + math.log(2.0)
  return logvol + math.log1p(((m - k) / k) ** m)


def _log_comb(n, r: int):
  """log C(n, r) for n >= r: a float for a number n, an array for an array."""
  if np.ndim(n) == 0:
    return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)
  lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
  return lgamma(n + 1) - math.lgamma(r + 1) - lgamma(n - r + 1)


def round_slots(m: int, acceptance: float) -> int:
  """Slots for :func:`rejection_fill`'s later rounds: twice the rows that the first
  round is expected to leave (a power of two, at least ``MIN_SLOTS``), at most its
  default."""
  left = 2 * m * (1.0 - acceptance)
  return min(
    m, max(MIN_ROUND, -(-m // 4)), max(MIN_SLOTS, 1 << math.ceil(math.log2(max(left, 1))))
  )


def rejection_fill(
  candidates, key, m: int, dim: int, groups: int, dtype, slots: int | None = None
):
  """``(m, dim)`` rows, each group of coordinates of a row filled by its first
  accepted proposal.

  ``candidates(key, rows) -> (x, ok, member)`` proposes for the rows ``rows``
  (``(b,)`` in [0, m), or None for all m rows in order): ``x`` ``(b, dim)``, ``ok``
  ``(b, groups)`` each group's acceptance and ``member`` ``(b, dim)`` each
  coordinate's group. The first round proposes once for every row; each later one
  has ``slots`` slots (default ``min(m, max(MIN_ROUND, m / 4))``), given in turn to
  the rows with a group not yet filled (a row gets several when fewer than that are
  left). Every proposal is fresh and a group takes, of its row's slots that accept
  it, the first, so each row is an exact draw of its target, independently of the
  others. Terminates with probability one when every acceptance is positive.
  """
  b = min(m, max(MIN_ROUND, -(-m // 4))) if slots is None else min(m, slots)
  slot = jnp.arange(b)

  def cond(state):
    return ~jnp.all(state[1])

  def body(state):
    out, done, k = state
    k, sub = jax.random.split(k)
    pending = ~jnp.all(done, axis=1)
    left = jnp.sum(pending)
    turn = jnp.where(left >= b, slot, slot % jnp.maximum(left, 1))
    idx = jnp.nonzero(pending, size=b, fill_value=m)[0][turn]
    rows = jnp.minimum(idx, m - 1)
    x, ok, member = candidates(sub, rows)
    ok = ok & ~done[rows]
    first = jnp.full((b, groups), b).at[turn].min(jnp.where(ok, slot[:, None], b))
    win = ok & (first[turn] == slot[:, None])
    done = done.at[jnp.where(win, idx[:, None], m), jnp.arange(groups)].set(
      True, mode="drop"
    )
    if groups == 1:  # whole rows
      return out.at[jnp.where(win[:, 0], idx, m)].set(x, mode="drop"), done, k
    # One scatter of merged rows: slot t < min(left, b) is turn t's first slot, so
    # its row (and member) is turn t's; each group takes its winning slot's x.
    won = first < b  # (b, groups): turn t's group g has a winner
    target = jnp.where((slot < left) & jnp.any(won, axis=1), idx, m)
    merged = out[jnp.minimum(target, m - 1)]
    for g in range(groups):
      take = (member == g) & won[:, g : g + 1]
      merged = jnp.where(take, x[jnp.minimum(first[:, g], b - 1)], merged)
    return out.at[target].set(merged, mode="drop"), done, k

  # A first round with a slot per row needs no gathers or scatters.
  key, k_first = jax.random.split(key)
  x, ok, member = candidates(k_first, None)
  write = functools.reduce(
    jnp.logical_or, [(member == g) & ok[:, g : g + 1] for g in range(groups)]
  )
  out = jnp.where(write, x, 0).astype(dtype)
  return jax.lax.while_loop(cond, body, (out, ok, key))[0]


@value_cache(maxsize=4096)
def slice_moments(m: int, k: int) -> tuple[Fraction, Fraction, Fraction, Fraction]:
  """Exact ``(vol, E[x_1], E[x_1^2], E[x_1 x_2])`` for x uniform in S(m, k).

  From the Irwin-Hall CDF F_n(s) = sum_{i <= s} (-1)^i C(n, i) (s - i)^n / n!:
  vol = F_m(k), E[x_1^p] vol = int_0^1 t^p F_{m-1}(k - t) dt and the moments of
  s = sum(x) (density F_m'(s) on [0, k]) give E[x_1 x_2]. Terms that do not apply
  (m < 2) are 0.
  """
  if m == 0:
    return Fraction(1), Fraction(0), Fraction(0), Fraction(0)
  top = min(m, k)  # C(m, i) = 0 beyond m; (k - i)^m = 0 at i = k

  def alt(n, fn):  # sum_{i <= min(n, k)} (-1)^i C(n, i) fn(k - i)
    return sum((-1) ** i * math.comb(n, i) * fn(Fraction(k - i)) for i in range(top + 1))

  def power_integral(a, p):  # int_{a-1}^{a} u^p du
    return (a ** (p + 1) - (a - 1) ** (p + 1)) / (p + 1)

  fm = math.factorial(m)
  vol = alt(m, lambda a: a**m) / fm
  # E[S] vol = k F_m(k) - int_0^k F_m; E[S^2] vol = k^2 F_m(k) - 2 int_0^k s F_m(s).
  int_f = alt(m, lambda a: a ** (m + 1) / (m + 1)) / fm
  int_sf = alt(m, lambda a: a ** (m + 2) / (m + 2) + (k - a) * a ** (m + 1) / (m + 1)) / fm
  es = (k * vol - int_f) / vol
  es2 = (k * k * vol - 2 * int_sf) / vol
  n = m - 1
  fn = math.factorial(n)

  def second(a):  # int_0^1 t^2 (a - t)^n dt, a >= 1
    return (
      a * a * power_integral(a, n)
      - 2 * a * power_integral(a, n + 1)
      + power_integral(a, n + 2)
    )

  top = min(n, k - 1)
  ex2 = sum((-1) ** i * math.comb(n, i) * second(Fraction(k - i)) for i in range(top + 1))
  ex2 = ex2 / fn / vol
  ex1 = es / m
  cross = (es2 - m * ex2) / (m * (m - 1)) if m > 1 else Fraction(0)
  return vol, ex1, ex2, cross
