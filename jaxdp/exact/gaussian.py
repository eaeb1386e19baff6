"""The exact discrete Gaussian sampler: integer arithmetic and exact Bernoulli trials.

References:
  C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
  privacy", NeurIPS 2020, Algorithms 1-3.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp import _checks
from jaxdp.exact.choices import int62
from jaxdp.exact.refine import raise_if
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.chunks import chunked
from jaxdp.typing import KeyArray, Shape

MAX_SIGMA = 2047.0  # sigma <= 2^11 - 1 keeps every integer below 2^63
Y_MAX = 1 << 18  # |Y| above this: C is decided by a lower bound on gamma
LANES = 2048  # samples computed side by side; each takes the next free output slot
K_MAX = 64  # von Neumann counters beyond this: an error (probability below 1/63!)
STEPS = 16  # lane steps per draw of random words
DG_CHUNK = 1 << 20  # the most samples per sequential step (the chunks are balanced)
SHORT_DEN = 1 << 18  # den up to this: one 31-bit uniform per step, else 62 bits


def discrete_gaussian(key: KeyArray, shape: Shape = (), *, sigma: float) -> jax.Array:
  """Discrete Gaussian noise N_Z(0, s^2), int32, exactly (Canonne, Kamath & Steinke).

  ``P(y) = exp(-y^2 / (2 s^2)) / sum_z exp(-z^2 / (2 s^2))`` over the integers, with
  s^2 = ``sigma**2`` rounded *up* to a multiple of 1/4 (so every quantity is an exact
  integer ratio; more noise, never less). Only integer arithmetic and exact Bernoulli
  trials: Bernoulli(exp(-gamma)) by von Neumann's series (Algorithm 1), discrete
  Laplace candidates (Algorithm 2) and rejection (Algorithm 3), all batched: each loop
  runs until every sample of the batch is done.

  Args:
    key: one PRNG key.
    shape: output shape.
    sigma: static, in (0, ``MAX_SIGMA``].

  Returns:
    int32 array of ``shape``.

  Raises:
    ValueError: a bad sigma. At run time, an error (never a guess) if a candidate
      beyond 2^18 survives 2^13 consecutive Bernoulli(1/e) trials (probability below
      e^-8192).

  References:
    C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
    privacy", NeurIPS 2020, Algorithms 1-3.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  quarters = sigma_quarters(sigma)
  with jax.enable_x64(True):
    out = _dg_kernel(key, quarters=quarters, n=math.prod(shape))
  return out.reshape(shape)


def sigma_quarters(sigma: float) -> int:
  """a = ceil(4 sigma^2), exactly (sigma^2 as a rational); the sampler's s^2 = a / 4."""
  if not _checks.is_concrete(sigma):
    raise ValueError(
      "sigma must be a static Python number for the discrete Gaussian "
      "(its integer tables are built on the host)."
    )
  sigma = _checks.check_positive(sigma, "sigma")
  if sigma > MAX_SIGMA:
    raise ValueError(
      f"sigma must be at most {MAX_SIGMA:g} for the exact discrete "
      f"Gaussian (64-bit integer arithmetic); got {sigma:g}."
    )
  return max(1, math.ceil(4 * Fraction(sigma) ** 2))


@functools.partial(jax.jit, static_argnames=("quarters", "n"))
def _dg_kernel(key, *, quarters, n):
  with jax.enable_x64(True):

    def chunk(k, m):
      return _discrete_gaussian(k, quarters, m)

    # balanced chunks: the last one overlaps the one before by fewer than `pieces` rows
    pieces = -(-n // DG_CHUNK) if n else 1
    return chunked(chunk, key, n, (), jnp.int32, -(-n // pieces))


def step_tables(a: int, bits: int) -> tuple[int, int, np.ndarray, np.ndarray]:
  """The integers of one lane step of :func:`discrete_gaussian`.

  ``b[p, k] = floor(2^bits / (q_p k))`` and ``lim[p, k] = q_p k b[p, k]`` for the
  denominator ``q_p`` of phase ``p``'s trial (t for P_U = 0 and P_D = 1, 1 for P_V =
  2 and P_W = 4, den for P_F = 5; rows 3 and 6 are zero) and the von Neumann counter
  1 <= k <= ``K_MAX``: a uniform X below ``lim[p, k]`` decides Bernoulli(num /
  (q_p k)) as ``X < num b[p, k]``, exactly (P_U reads U = X // b[0, 1] instead).

  Args:
    a: 4 s^2 (:func:`sigma_quarters`).
    bits: the uniform's bits, 31 or 62.

  Returns:
    ``(t, den, b, lim)``: t = floor(s) + 1, den = 8 a t^2 and the two int64 tables
    of shape (7, ``K_MAX`` + 1).
  """
  t = math.isqrt(a) // 2 + 1  # floor(sqrt(a / 4)) + 1
  den = 8 * a * t * t  # < 2^49 for s < 2^11
  b = np.zeros((7, K_MAX + 1), np.int64)
  lim = np.zeros((7, K_MAX + 1), np.int64)
  for p, q in enumerate((t, t, 1, None, 1, den, None)):
    if q is None:
      continue
    for k in range(1, K_MAX + 1):
      qk = q if p == 0 else q * k
      b[p, k] = (1 << bits) // qk
      lim[p, k] = qk * b[p, k]
  return t, den, b, lim


def _discrete_gaussian(key, a: int, m: int):
  """CKS Algorithms 1-3 with s^2 = a / 4 and t = floor(s) + 1, on ``LANES`` lanes.

  Each lane runs the sampler as a state machine, one trial per step, and owns one
  output slot at a time: when its candidate is accepted it writes the slot and takes
  the next unassigned one (slots ``0..m-1`` in order), so the loop's length is the
  batch's total work over the lanes plus one sample's, not the slowest of ``m``
  samples. A slot's value is the first accepted candidate of the attempts made for
  it from fresh bits, whichever lane makes them and whenever, so the slots are
  independent draws of the exact law.

  * P_U: U uniform in [0, t); U = 0 skips P_D (exp(-0) = 1).
  * P_D: D ~ Bernoulli(exp(-U/t)) by K-loop: while Bernoulli(U / (t K)): K += 1;
    D = K odd. D = 0: back to P_U.
  * P_V: V = number of Bernoulli(1/e) successes before a failure (each a K-loop with
    gamma = 1, started at K = 2: Bernoulli(1/1) always succeeds). At the failure,
    with a sign bit B of the same word: X = U + t V; X = 0 and B = 1 restarts; else
    Y = +-X and gamma = (4t|Y| - a)^2 / (8 a t^2) = whole + frac / den.
  * P_W: ``whole`` Bernoulli(1/e) trials; a failure rejects Y (back to P_U).
  * P_F: Bernoulli(exp(-frac/den)) by K-loop: while Bernoulli(frac / (den K)); K
    odd accepts Y, even rejects.

  Every step takes one fresh uniform X per lane: 31 bits of one word when den <=
  ``SHORT_DEN`` (the word's top bit is B), else 62 bits of two words (B is the first
  word's top bit); words are drawn ``STEPS`` steps at a time. Each trial is
  Bernoulli(num / (q K)) decided as ``X < num b`` given ``X < lim``
  (:func:`step_tables`); draws outside the accepted range repeat the step (exact).
  Beyond |Y| = 2^18 gamma is only bounded below (by ``lower`` >= 2^13); a sample
  surviving that many trials, or a counter passing ``K_MAX``, sets the error flag
  (probability below e^-8192 and 1/63!).
  """
  short = 8 * a * (math.isqrt(a) // 2 + 1) ** 2 <= SHORT_DEN
  t, den, b_np, lim_np = step_tables(a, 31 if short else 62)
  y_max = Y_MAX
  lower = (4 * t * (y_max + 1) - a) ** 2 // den  # gamma >= this for |Y| > y_max
  P_U, P_D, P_V, P_W, P_F, IDLE = 0, 1, 2, 4, 5, 6
  i64 = jnp.int64
  lanes = min(LANES, m)
  row = K_MAX + 1
  b_tab, lim_tab = jnp.asarray(b_np.ravel()), jnp.asarray(lim_np.ravel())
  b_u = int(b_np[P_U, 1])

  def gamma(x, sign):
    """Y = +-X and its gamma (whole, frac, beyond the exact range)."""
    cand = jnp.where(sign, -x, x)
    is_big = x > y_max
    z = 4 * t * jnp.minimum(x, y_max) - a
    num = z * z  # exact: |z| < 2^31
    return (
      cand,
      jnp.where(is_big, lower, num // den),
      jnp.where(is_big, 0, num % den),
      is_big,
    )

  def step(state, w):
    phase, u, k, v, y, left, frac, big, slot, nxt, out, bad = state
    if short:
      w = w.astype(i64)
      x, sign = w & 0x7FFFFFFF, (w >> 31) == 1
    else:
      x, sign = int62(w), (w[:, 0] >> 31) == 1
    over = k > K_MAX
    at_k = phase * row + jnp.minimum(k, K_MAX)
    ok = x < lim_tab[at_k]
    num = jnp.where(phase == P_F, frac, jnp.where(phase == P_D, u, 1))
    cont = ok & (x < num * b_tab[at_k])  # Bernoulli(num / (q K)): the loop goes on
    stop = ok & ~cont
    odd = (k % 2) == 1
    k_new = jnp.where(cont, k + 1, k)
    phase_new = phase
    # P_U
    at = (phase == P_U) & ok
    u = jnp.where(at, x // b_u, u)
    zero = at & (u == 0)
    phase_new = jnp.where(at, jnp.where(zero, P_V, P_D), phase_new)
    k_new = jnp.where(at, jnp.where(zero, 2, 1), k_new)
    v = jnp.where(zero, 0, v)
    # P_D
    at = (phase == P_D) & stop
    phase_new = jnp.where(at, jnp.where(odd, P_V, P_U), phase_new)
    v = jnp.where(at, 0, v)
    k_new = jnp.where(at, 2, k_new)
    # P_V: a success counts one more; a failure forms the candidate
    at = (phase == P_V) & stop
    v = jnp.where(at & odd, v + 1, v)
    k_new = jnp.where(at, 2, k_new)
    form = at & ~odd
    xx = u + t * v
    restart = form & sign & (xx == 0)
    take = form & ~restart
    cand, whole, fr, is_big = gamma(xx, sign)
    y = jnp.where(take, cand, y)
    left = jnp.where(take, whole, left)
    frac = jnp.where(take, fr, frac)
    big = jnp.where(take, is_big, big)
    phase_new = jnp.where(restart, P_U, jnp.where(take, P_W, phase_new))
    # P_W: `left` Bernoulli(1/e) trials, all must succeed (`left` = 0: none)
    at = (phase == P_W) & stop
    left = jnp.where(at & odd, left - 1, left)
    k_new = jnp.where(at, 2, k_new)
    phase_new = jnp.where(at & ~odd, P_U, phase_new)  # rejected
    ready = (phase_new == P_W) & (left == 0)
    survived = ready & big  # gamma unknown beyond the bound
    phase_new = jnp.where(ready & ~big, P_F, phase_new)
    k_new = jnp.where(ready, 1, k_new)
    # P_F: odd K accepts Y, even rejects
    at = (phase == P_F) & stop
    done = at & odd
    phase_new = jnp.where(at & ~odd, P_U, phase_new)
    k_new = jnp.where(at, 1, k_new)
    # an accepted lane writes its slot and takes the next free one
    out = out.at[jnp.where(done, slot, m)].set(y.astype(jnp.int32), mode="drop")
    rank = jnp.cumsum(done, dtype=jnp.int32) - 1
    slot = jnp.where(done, nxt + rank, slot)
    nxt = nxt + jnp.sum(done, dtype=jnp.int32)
    phase_new = jnp.where(done, jnp.where(slot < m, P_U, IDLE), phase_new)
    live = phase != IDLE
    fail = live & (survived | over)
    bad = bad | jnp.any(fail)
    phase_new = jnp.where(fail, IDLE, phase_new)
    return (phase_new, u, k_new, v, y, left, frac, big, slot, nxt, out, bad), None

  def block(carry):
    state, i = carry
    shape = (STEPS, lanes) if short else (STEPS, lanes, 2)
    words = jax.random.bits(jax.random.fold_in(key, i), shape, jnp.uint32)
    return lax.scan(step, state, words)[0], i + 1

  zeros = jnp.zeros((lanes,), i64)
  init = (
    jnp.full((lanes,), P_U, i64),
    zeros,
    jnp.ones((lanes,), i64),
    zeros,
    zeros,
    zeros,
    zeros,
    jnp.zeros((lanes,), bool),
    jnp.arange(lanes, dtype=jnp.int32),
    jnp.int32(lanes),
    jnp.zeros((m,), jnp.int32),
    jnp.asarray(False),
  )
  final = lax.while_loop(lambda c: jnp.any(c[0][0] != IDLE), block, (init, jnp.int32(0)))[0]
  out, bad = final[10], final[11]
  passed = _raise_if(
    bad,
    "exact discrete Gaussian: a candidate beyond 2^18 survived "
    "2^13 Bernoulli(1/e) trials, or a von Neumann counter passed 64 "
    "(probability below 1/63!); nothing released.",
  )
  return _checks.mark_invalid(passed, out)


def _raise_if(flag, message: str):
  """True normally; a run-time error (also under jit) when ``flag`` is True."""
  return raise_if(flag, lambda _: RuntimeError(message))
