"""Exactly rounded K-norm noise for the l_2 ball: the fast pass and the sampler.

The ideal noise has density proportional to exp(-|y| / scale), so it is
``scale * T * G / |G|`` with T ~ Gamma(d) (the density of |y| is proportional to
r^(d-1) e^(-r)) independent of the direction G / |G|, G standard normal in R^d. The
normals come in Box-Muller pairs ``sqrt(2 E_j) (cos 2 pi U_j, sin 2 pi U_j)``,
j < h = ceil(d / 2) (for odd d the last sine is dropped), and T reuses their
exponentials: ``T = sum_j E_j + W_1 + ... + W_(d - h)`` with further exponentials
W_i. Indeed sum_j E_j = |G|^2 / 2 (+ the dropped normal's square over 2 for odd d),
a Gamma(d / 2) variate independent of the direction, and the rest is an
independent Gamma(d / 2). With the factor sqrt(2) cancelled, coordinate i is
``scale * T * g_i / |g|``, ``g_i = sqrt(E_j) cos`` (or ``sin``) ``2 pi U_j``: d + h
uniforms per sample.

Every quantity is kept as a float64 interval widened outward at each step: by
``L2_PAD`` relative (it bounds one float64 rounding, a sum of up to 2^11 terms, and
the platform's ``log`` error, 2^-44 relative at most) and, for cos and sin, by
``TRIG_PAD`` absolute (the angle's interval, pi 2^-52 wide, and the error of
:func:`cos_sin_turns`, which uses IEEE + and * only and stays below 2^-48). The
tests measure both against mpmath and compare the fast pass with a 300-bit mpmath
rounding of the same bits.

References:
  F. Barthe, O. Guedon, S. Mendelson, A. Naor, "A probabilistic approach to the
  geometry of the l_p^n-ball", Annals of Probability 33(2), 2005.
  G. Box, M. Muller, "A note on the generation of random normal deviates", 1958.
  C. Haney et al., "Precision-based attacks and interval refining", 2022.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
from jax import lax

from jaxdp import _checks
from jaxdp.exact.intervals import FAST_BITS, LIMIT, digits52
from jaxdp.exact.refine import refine_l2_sample, settle
from jaxdp.exact.samplers import CHUNK, check_scale, scale64
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.chunks import chunked
from jaxdp.typing import ArrayLike, KeyArray, Scalar, Shape

L2_PAD = 2.0**-42  # relative outward widening of every interval step
TRIG_PAD = 2.0**-42  # absolute widening of cos and sin
MAX_L2_D = 1024  # sums of at most 2^11 terms keep L2_PAD a bound


def l2_rows(d: int) -> int:
  """Uniforms per sample: ceil(d / 2) Box-Muller pairs (an exponential and an angle
  each) and floor(d / 2) more exponentials for T."""
  return d + (-(-d // 2))


def l2_knorm(key: KeyArray, d: int, scale: float, shape: Shape = ()) -> jax.Array:
  """Exactly rounded K-norm noise for the l_2 ball, int32 ``(*shape, d)``.

  The ideal noise has density proportional to ``exp(-||y||_2 / scale)`` on R^d
  (equivalently ``scale * R * Z``, R ~ Gamma(d + 1), Z uniform in the unit ball),
  drawn as a Gamma(d) radius times a Box-Muller direction (:mod:`jaxdp.exact.l2`); each
  coordinate is rounded to the nearest integer exactly (interval refining, then the
  host refinement of :mod:`jaxdp.exact.refine` for the rare undecided samples).

  Args:
    key: one PRNG key (use :func:`jaxdp.random.secure_key` for a release).
    d: the dimension, 1 to ``MAX_L2_D``.
    scale: sensitivity / eps; Python number or traced scalar, at most
      ``max_scale(d)`` (:mod:`jaxdp.exact.limits`: ``MAX_SCALE`` up to d = 600,
      less above); a bad traced value yields the sentinel ``INT32_MIN`` everywhere.
    shape: batch shape.

  Raises:
    ValueError: d or scale out of range.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  d = _checks.check_int(d, "d", minimum=1)
  if d > MAX_L2_D:
    raise ValueError(
      f"d must be at most {MAX_L2_D} for exact l_2 noise (its interval sums are "
      f"bounded for up to 2^11 terms); got d = {d}. Split the statistic into blocks."
    )
  scale = check_scale(scale, d)
  traced, const = (None, scale) if isinstance(scale, float) else (scale, None)
  with jax.enable_x64(True):
    out = _l2_kernel(key, traced, const=const, d=d, n=math.prod(shape))
  return out.reshape(*shape, d)


def _widen(lo, hi):
  """[lo, hi] widened by L2_PAD times its largest magnitude on both sides."""
  pad = L2_PAD * jnp.maximum(jnp.abs(lo), jnp.abs(hi))
  return lo - pad, hi + pad


def _times(a_lo, a_hi, b_lo, b_hi):
  """The product of two intervals (corners), widened."""
  corners = jnp.stack([a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi])
  return _widen(jnp.min(corners, 0), jnp.max(corners, 0))


def _exponentials(words):
  """[E_lo, E_hi] for E = -log(1 - V), widened, with one log per uniform: with
  u_hi = 1 - j 2^-52 and u_lo = u_hi - 2^-52 (exact floats),
  0 <= log(u_hi) - log(u_lo) <= 2^-52 / u_lo, so E_hi <= -log(u_hi) + 2^-52 / u_lo
  (inf when u_lo = 0)."""
  j = digits52(words)
  u_hi = 1.0 - j * 2.0**-FAST_BITS  # exact, in (0, 1]
  u_lo = u_hi - 2.0**-FAST_BITS  # exact, may be 0
  e = -jnp.log(u_hi)
  gap = jnp.where(u_lo > 0, 2.0**-FAST_BITS / jnp.where(u_lo > 0, u_lo, 1.0), jnp.inf)
  return e * (1 - L2_PAD), (e + gap) * (1 + L2_PAD)  # log's error; E >= 0


def _gamma_radius(words):
  """[R_lo, R_hi] for R = sum_i -log(1 - V_i) = -log(prod_i (1 - V_i)), widened, with
  one log per 16 uniforms: each product of up to 16 factors u_hi (>= 2^-52 each, so
  no underflow) is within 16 2^-53 relative of the exact one, which moves its log by
  at most 2^-47 absolute; R_hi adds each factor's gap as in ``_exponentials``."""
  j = digits52(words)
  u_hi = 1.0 - j * 2.0**-FAST_BITS  # exact, in (0, 1]
  u_lo = u_hi - 2.0**-FAST_BITS  # exact, may be 0
  gap = jnp.where(u_lo > 0, 2.0**-FAST_BITS / jnp.where(u_lo > 0, u_lo, 1.0), jnp.inf)
  m, n = u_hi.shape
  groups = -(-n // 16)
  u = jnp.pad(u_hi, ((0, 0), (0, 16 * groups - n)), constant_values=1.0)
  logs = -jnp.log(jnp.prod(u.reshape(m, groups, 16), axis=2))  # (m, groups)
  r = jnp.sum(logs, axis=1)
  slack = groups * 2.0**-46  # the products' rounding, in log
  r_lo = jnp.maximum(r * (1 - L2_PAD) - slack, 0.0)
  r_hi = (r + slack + jnp.sum(gap, axis=1)) * (1 + L2_PAD)
  return r_lo, r_hi


_SIN = [(-1) ** k / math.factorial(2 * k + 1) for k in range(9)]  # to phi^17
_COS = [(-1) ** k / math.factorial(2 * k) for k in range(10)]  # to phi^18


def cos_sin_turns(t: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """cos and sin of 2 pi t for float64 t in [0, 1), with IEEE + and * only.

  t is reduced exactly (4t = q + f, q an integer; f folded to g = min(f, 1 - f)),
  then phi = g pi / 2 lies in [0, pi / 4] (argument error below 2^-52) and both
  Taylor polynomials (to phi^17 and phi^18; the next terms are below 10^-18) are
  summed by Horner's rule: the error is below 2^-48 absolute, measured against
  mpmath by the tests."""
  v = t * 4.0  # exact
  q = jnp.floor(v)
  f = v - q  # exact
  flip = f > 0.5
  phi = jnp.where(flip, 1.0 - f, f) * (math.pi / 2)
  z = phi * phi
  sin = jnp.full_like(z, _SIN[-1])
  for c in reversed(_SIN[:-1]):
    sin = sin * z + c
  sin = sin * phi
  cos = jnp.full_like(z, _COS[-1])
  for c in reversed(_COS[:-1]):
    cos = cos * z + c
  big_c, big_s = jnp.where(flip, sin, cos), jnp.where(flip, cos, sin)  # of f pi / 2
  # select_n on the int32 quadrant, not jnp.select: that one's argmax takes the
  # default index dtype (int64 here), which an enclosing jit lowers as int32
  quadrant = q.astype(jnp.int32) % 4
  cos_t = lax.select_n(quadrant, big_c, -big_s, -big_c, big_s)
  sin_t = lax.select_n(quadrant, big_s, big_c, -big_s, -big_c)
  return cos_t, sin_t


def l2_round(words: ArrayLike, scale: Scalar, d: int) -> tuple[jax.Array, jax.Array]:
  """The fast pass for l_2: words (m, ``l2_rows(d)``, 2) -> (k (m, d) int32,
  settled (m,)). Rows: the pairs' h exponentials, the d - h others, the h angles
  (U's first 52 digits; the angle's interval is covered by ``TRIG_PAD``)."""
  h = -(-d // 2)
  t_lo, t_hi = _gamma_radius(words[:, :d])  # T, a sum of d exponentials
  e_lo, e_hi = _exponentials(words[:, :h])  # the pairs' E_j
  a_lo = jnp.sqrt(e_lo) * (1 - L2_PAD)  # sqrt(E_j), (m, h)
  a_hi = jnp.sqrt(e_hi) * (1 + L2_PAD)
  mid = (digits52(words[:, d:]) + 0.5) * 2.0**-FAST_BITS  # exact
  trig = jnp.stack(cos_sin_turns(mid), axis=2).reshape(-1, 2 * h)[:, :d]
  c_lo = jnp.maximum(trig - TRIG_PAD, -1.0)
  c_hi = jnp.minimum(trig + TRIG_PAD, 1.0)
  a_lo, a_hi = (jnp.repeat(a, 2, axis=1)[:, :d] for a in (a_lo, a_hi))
  g_lo, g_hi = _times(a_lo, a_hi, c_lo, c_hi)  # (m, d)
  sq_lo = jnp.where(g_lo > 0, g_lo * g_lo, jnp.where(g_hi < 0, g_hi * g_hi, 0.0))
  sq_hi = jnp.maximum(g_lo * g_lo, g_hi * g_hi)
  q_lo = jnp.sum(sq_lo, 1) * (1 - L2_PAD)
  q_hi = jnp.sum(sq_hi, 1) * (1 + L2_PAD)
  s_lo, s_hi = jnp.sqrt(q_lo) * (1 - L2_PAD), jnp.sqrt(q_hi) * (1 + L2_PAD)
  f_lo = scale * t_lo / s_hi * (1 - L2_PAD)  # scale T / |g| >= 0
  f_hi = scale * t_hi / s_lo * (1 + L2_PAD)  # inf when |g| may be 0: unsettled
  y_lo, y_hi = _times(f_lo[:, None], f_hi[:, None], g_lo, g_hi)
  k = jnp.floor(0.5 * (y_lo + y_hi) + 0.5)
  settled = (k - 0.5 < y_lo) & (y_hi < k + 0.5) & (jnp.abs(k) < LIMIT)
  # one output (LIMIT marks an unsettled coordinate), materialised once: XLA would
  # otherwise recompute the whole pass for each of two outputs
  k = lax.optimization_barrier(jnp.where(settled, k, LIMIT).astype(jnp.int32))
  settled = k != LIMIT
  return jnp.where(settled, k, 0), jnp.all(settled, axis=1)


def l2_chunk(d: int) -> int:
  """Samples per sequential step: ``CHUNK`` up to d = 32, fewer above (memory)."""
  return max(1 << 8, CHUNK * 32 // max(32, d))


@functools.partial(jax.jit, static_argnames=("const", "d", "n"))
def _l2_kernel(key, traced, *, const, d, n):
  with jax.enable_x64(True):
    scale = scale64(traced, const, d)

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, l2_rows(d), 2), jnp.uint32)
      k, settled = l2_round(words, scale, d)
      refine = functools.partial(refine_l2_sample, d=d)
      return settle(k, settled, words, scale, k_ref, refine)

    out = chunked(chunk, key, n, (d,), jnp.int32, l2_chunk(d))
    return _checks.mark_invalid(~jnp.isnan(scale), out)
