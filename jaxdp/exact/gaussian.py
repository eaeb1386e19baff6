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
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.chunks import chunked
from jaxdp.typing import KeyArray, Shape

MAX_SIGMA = 2047.0  # sigma <= 2^11 - 1 keeps every integer below 2^63
Y_MAX = 1 << 18  # |Y| above this: C is decided by a lower bound on gamma
LANES = 2048  # samples computed side by side; each takes the next free output slot
K_MAX = 64  # von Neumann counters beyond this: an error (probability below 1/63!)
DG_CHUNK = 1 << 16  # samples per sequential step: the lanes share the work of a chunk


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

    return chunked(chunk, key, n, (), jnp.int32, DG_CHUNK)


def _discrete_gaussian(key, a: int, m: int):
  """CKS Algorithms 1-3 with s^2 = a / 4 and t = floor(s) + 1, on ``LANES`` lanes.

  Each lane runs the sampler as a state machine, one step per loop iteration, and
  owns one output slot at a time: when its candidate is accepted it writes the slot
  and takes the next unassigned one (slots ``0..m-1`` in order), so the loop's length
  is the batch's total work over the lanes plus one sample's, not the slowest of
  ``m`` samples. A slot's value is the first accepted candidate of the attempts made
  for it from fresh bits, whichever lane makes them and whenever, so the slots are
  independent draws of the exact law.

  * P_U: U uniform in [0, t).
  * P_D: D ~ Bernoulli(exp(-U/t)) by K-loop: while Bernoulli(U/t) and Bernoulli(1/K):
    K += 1; D = K odd. D = 0: back to P_U.
  * P_V: V = number of Bernoulli(1/e) successes before a failure (each a K-loop with
    gamma = 1, started at K = 2: Bernoulli(1/1) always succeeds).
  * P_Y (no draw): X = U + t V; with sign bit B, X = 0 and B = 1 restarts; else
    Y = +-X, gamma = (4t|Y| - a)^2 / (8 a t^2) = whole + frac / den.
  * P_W: ``whole`` Bernoulli(1/e) trials; a failure rejects Y (back to P_U).
  * P_F: Bernoulli(exp(-frac/den)) by K-loop; success accepts Y, failure rejects.

  Every step draws two fresh 62-bit integers X1, X2 per lane. Bernoulli(p/q) for a
  fixed q is ``X1 < p B`` given ``X1 < q B``, B = floor(2^62 / q); U is X1 // B given
  ``X1 < t B``; Bernoulli(1/K) is ``X2 < B_K`` given ``X2 < K B_K`` (a table for
  K <= ``K_MAX``). Draws outside the accepted ranges repeat the step (exact). Beyond
  |Y| = 2^18 gamma is only bounded below (by ``lower`` >= 2^13); a sample surviving
  that many trials, or a counter passing ``K_MAX``, sets the error flag
  (probability below e^-8192 and 1/63!).
  """
  t = math.isqrt(a) // 2 + 1  # floor(sqrt(a / 4)) + 1
  den = 8 * a * t * t  # < 2^49 for s < 2^11
  y_max = Y_MAX
  lower = (4 * t * (y_max + 1) - a) ** 2 // den  # gamma >= this for |Y| > y_max
  P_U, P_D, P_V, P_Y, P_W, P_F, IDLE = range(7)
  i64 = jnp.int64
  lanes = min(LANES, m)
  b_t, b_den = (1 << 62) // t, (1 << 62) // den
  ks = np.arange(K_MAX + 1)
  b_k = jnp.asarray([0] + [(1 << 62) // int(k) for k in ks[1:]], i64)
  lim_k = b_k * jnp.asarray(ks, i64)

  def step(state):
    phase, u, k, v, y, left, frac, big, slot, nxt, out, bad, i = state
    w = jax.random.bits(jax.random.fold_in(key, i), (lanes, 2, 2), jnp.uint32)
    x1, x2 = int62(w[:, 0]), int62(w[:, 1])
    sign = (w[:, 0, 0] >> 31) == 1  # a bit x1 does not use
    over = k > K_MAX
    kk = jnp.minimum(k, K_MAX)
    ok2 = x2 < lim_k[kk]
    hit = x2 < b_k[kk]  # Bernoulli(1 / K)
    in_f = phase == P_F
    ok1 = x1 < jnp.where(in_f, i64(den * b_den), i64(t * b_t))
    b1 = jnp.where(in_f, i64(b_den), i64(b_t))
    # P_U
    at = (phase == P_U) & ok1
    u = jnp.where(at, x1 // b_t, u)
    k_new = jnp.where(at, 1, k)
    phase_new = jnp.where(at, P_D, phase)
    # P_D: Bernoulli(U/t) and Bernoulli(1/K)
    at = (phase == P_D) & ok1 & ok2
    cont = at & (x1 < u * b1) & hit
    stop = at & ~cont
    k_new = jnp.where(cont, k + 1, k_new)
    odd = (k % 2) == 1
    phase_new = jnp.where(stop, jnp.where(odd, P_V, P_U), phase_new)
    v = jnp.where(stop & odd, 0, v)
    k_new = jnp.where(stop, 2, k_new)
    # P_V: Bernoulli(1/e) trials, each a K-loop with gamma = 1
    at = (phase == P_V) & ok2
    cont = at & hit
    stop = at & ~hit
    k_new = jnp.where(cont, k + 1, k_new)
    v = jnp.where(stop & odd, v + 1, v)  # a success: one more
    k_new = jnp.where(stop, 2, k_new)
    phase_new = jnp.where(stop & ~odd, P_Y, phase_new)
    # P_Y: the candidate and its gamma (no draw)
    at = phase == P_Y
    x = u + t * v
    restart = at & sign & (x == 0)
    cand = jnp.where(sign, -x, x)
    ay = jnp.abs(cand)
    is_big = ay > y_max
    z = 4 * t * jnp.minimum(ay, y_max) - a
    num = z * z  # exact: |z| < 2^31
    whole = jnp.where(is_big, lower, num // den)
    fr = jnp.where(is_big, 0, num % den)
    take = at & ~restart
    y = jnp.where(take, cand, y)
    left = jnp.where(take, whole, left)
    frac = jnp.where(take, fr, frac)
    big = jnp.where(take, is_big, big)
    phase_new = jnp.where(restart, P_U, jnp.where(take, P_W, phase_new))
    k_new = jnp.where(at, 2, k_new)
    # P_W: `left` Bernoulli(1/e) trials, all must succeed
    at = phase == P_W
    empty = at & (left == 0)
    trial = at & (left > 0) & ok2
    cont = trial & hit
    stop = trial & ~hit
    k_new = jnp.where(cont, k + 1, k_new)
    success = stop & odd
    left = jnp.where(success, left - 1, left)
    k_new = jnp.where(stop, 2, jnp.where(empty, 1, k_new))
    phase_new = jnp.where(stop & ~odd, P_U, phase_new)  # rejected
    survived = empty & big  # gamma unknown beyond the bound
    phase_new = jnp.where(empty & ~big, P_F, phase_new)
    # P_F: Bernoulli(exp(-frac/den)): Bernoulli(frac/den) and Bernoulli(1/K)
    at = in_f & ok1 & ok2
    cont = at & (x1 < frac * b1) & hit
    stop = at & ~cont
    k_new = jnp.where(cont, k + 1, k_new)
    k_new = jnp.where(stop, 1, k_new)
    done = stop & odd
    phase_new = jnp.where(stop & ~odd, P_U, phase_new)
    # an accepted lane writes its slot and takes the next free one
    out = out.at[jnp.where(done, slot, m)].set(y.astype(jnp.int32), mode="drop")
    rank = jnp.cumsum(done, dtype=jnp.int32) - 1
    slot = jnp.where(done, nxt + rank, slot)
    nxt = nxt + jnp.sum(done, dtype=jnp.int32)
    phase_new = jnp.where(done, jnp.where(slot < m, P_U, IDLE), phase_new)
    live = phase != IDLE
    bad = bad | jnp.any(live & (survived | over))
    phase_new = jnp.where(live & (survived | over), IDLE, phase_new)
    return phase_new, u, k_new, v, y, left, frac, big, slot, nxt, out, bad, i + 1

  zeros = jnp.zeros((lanes,), i64)
  init = (
    jnp.full((lanes,), P_U, jnp.int32),
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
    jnp.int32(0),
  )
  final = lax.while_loop(lambda state: jnp.any(state[0] != IDLE), step, init)
  out, bad = final[10], final[11]
  passed = _raise_if(
    bad,
    "exact discrete Gaussian: a candidate beyond 2^18 survived "
    "2^13 Bernoulli(1/e) trials, or a von Neumann counter passed 64 "
    "(probability below 1/63!); nothing released.",
  )
  return _checks.mark_invalid(passed, out)


def _raise_if(flag, message: str):
  """False normally; a run-time error (also under jit) when ``flag`` is True. The
  caller must use the result, or XLA would drop the check."""

  def check(f):
    if np.any(f):
      raise RuntimeError(message)
    return np.ones(np.shape(f), np.bool_)

  return lax.cond(
    flag,
    lambda: jax.pure_callback(
      check, jax.ShapeDtypeStruct((), jnp.bool_), flag, vmap_method="broadcast_all"
    ),
    lambda: jnp.ones((), bool),
  )
