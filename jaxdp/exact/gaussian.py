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
from jaxdp.exact.samplers import CHUNK
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.chunks import chunked
from jaxdp.typing import KeyArray, Shape

MAX_SIGMA = 2047.0  # sigma <= 2^11 - 1 keeps every integer below 2^63
Y_MAX = 1 << 18  # |Y| above this: C is decided by a lower bound on gamma


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

    return chunked(chunk, key, n, (), jnp.int32, CHUNK)


def _discrete_gaussian(key, a: int, m: int):
  """CKS Algorithms 1-3 with s^2 = a / 4 and t = floor(s) + 1, as one state machine.

  Each sample moves through phases, one step per loop iteration, so the loop runs as
  long as the slowest sample (nested loops would multiply the slowest counts):

  * P_U: U uniform in [0, t).
  * P_D: D ~ Bernoulli(exp(-U/t)) by K-loop: while Bernoulli(U/t) and Bernoulli(1/K):
    K += 1; D = K odd. D = 0: back to P_U.
  * P_V: V = number of Bernoulli(1/e) successes before a failure (each a K-loop with
    gamma = 1).
  * P_Y (no draw): X = U + t V; with sign bit B, X = 0 and B = 1 restarts; else
    Y = +-X, gamma = (4t|Y| - a)^2 / (8 a t^2) = whole + frac / den.
  * P_W: ``whole`` Bernoulli(1/e) trials; a failure rejects Y (back to P_U).
  * P_F: Bernoulli(exp(-frac/den)) by K-loop; success accepts Y, failure rejects.

  Every step draws two fresh 62-bit integers per sample; a uniform in [0, q) is
  x mod q when x < floor(2^62 / q) q, and otherwise the step is repeated (exact).
  Beyond |Y| = 2^18 gamma is only bounded below (by ``lower`` >= 2^13); a sample
  surviving that many trials sets the error flag (probability below e^-8192).
  """
  t = math.isqrt(a) // 2 + 1  # floor(sqrt(a / 4)) + 1
  den = 8 * a * t * t  # < 2^49 for s < 2^11
  y_max = Y_MAX
  lower = (4 * t * (y_max + 1) - a) ** 2 // den  # gamma >= this for |Y| > y_max
  P_U, P_D, P_V, P_Y, P_W, P_F, DONE = range(7)
  i64 = jnp.int64
  two62 = i64(1 << 62)

  def uniform(x, q):
    return x < (two62 // q) * q, x % q

  def step(state):
    phase, u, k, v, y, left, frac, big, bad, i = state
    w = jax.random.bits(jax.random.fold_in(key, i), (m, 2, 2), jnp.uint32)
    x1, x2 = int62(w[:, 0]), int62(w[:, 1])
    sign = (w[:, 0, 0] >> 31) == 1  # a bit x1 does not use
    q1 = jnp.where(phase == P_F, i64(den), i64(t))
    ok1, r1 = uniform(x1, q1)
    ok2, r2 = uniform(x2, k)
    hit = r2 == 0  # Bernoulli(1 / K)
    # P_U
    at = phase == P_U
    go = at & ok1
    u = jnp.where(go, r1, u)
    k_new = jnp.where(go, 1, k)
    phase_new = jnp.where(go, P_D, phase)
    # P_D: Bernoulli(U/t) and Bernoulli(1/K)
    at = (phase == P_D) & ok1 & ok2
    cont = at & (r1 < u) & hit
    stop = at & ~cont
    k_new = jnp.where(cont, k + 1, k_new)
    odd = (k % 2) == 1
    phase_new = jnp.where(stop, jnp.where(odd, P_V, P_U), phase_new)
    v = jnp.where(stop & odd, 0, v)
    k_new = jnp.where(stop, 1, k_new)
    # P_V: Bernoulli(1/e) trials, each a K-loop with gamma = 1
    at = (phase == P_V) & ok2
    cont = at & hit
    stop = at & ~hit
    k_new = jnp.where(cont, k + 1, k_new)
    v = jnp.where(stop & odd, v + 1, v)  # a success: one more
    k_new = jnp.where(stop, 1, k_new)
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
    k_new = jnp.where(at, 1, k_new)
    # P_W: `left` Bernoulli(1/e) trials, all must succeed
    at = phase == P_W
    empty = at & (left == 0)
    trial = at & (left > 0) & ok2
    cont = trial & hit
    stop = trial & ~hit
    k_new = jnp.where(cont, k + 1, k_new)
    success = stop & odd
    left = jnp.where(success, left - 1, left)
    k_new = jnp.where(stop | empty, 1, k_new)
    phase_new = jnp.where(stop & ~odd, P_U, phase_new)  # rejected
    survived = empty & big  # gamma unknown beyond the bound
    bad = bad | jnp.any(survived)
    phase_new = jnp.where(survived, DONE, jnp.where(empty, P_F, phase_new))
    # P_F: Bernoulli(exp(-frac/den)): Bernoulli(frac/den) and Bernoulli(1/K)
    at = (phase == P_F) & ok1 & ok2
    cont = at & (r1 < frac) & hit
    stop = at & ~cont
    k_new = jnp.where(cont, k + 1, k_new)
    k_new = jnp.where(stop, 1, k_new)
    phase_new = jnp.where(stop, jnp.where(odd, DONE, P_U), phase_new)
    return phase_new, u, k_new, v, y, left, frac, big, bad, i + 1

  zeros = jnp.zeros((m,), i64)
  init = (
    jnp.full((m,), P_U, jnp.int32),
    zeros,
    jnp.ones((m,), i64),
    zeros,
    zeros,
    zeros,
    zeros,
    jnp.zeros((m,), bool),
    jnp.asarray(False),
    jnp.int32(0),
  )
  final = lax.while_loop(lambda state: jnp.any(state[0] != DONE), step, init)
  y, bad = final[4], final[8]
  passed = _raise_if(
    bad,
    "exact discrete Gaussian: a candidate beyond 2^18 survived "
    "2^13 Bernoulli(1/e) trials (probability below e^-8192); "
    "nothing released.",
  )
  return _checks.mark_invalid(passed, y.astype(jnp.int32))


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
