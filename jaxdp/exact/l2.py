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

|g|^2 needs no squares: cos^2 + sin^2 = 1 makes it ``S = sum_j E_j`` (for odd d the
last pair contributes ``E_(h-1) cos^2 2 pi U_(h-1)``), so coordinate i is
``P_j c_i`` with ``P_j = scale T sqrt(E_j) / sqrt(S)`` >= 0 and c_i the cos or sin.

The fast pass reads the first b binary digits of each uniform: b = 32 from one
ChaCha20 word (the kernel's layout), or b = 52 from two (:func:`l2_round` takes
either). Every quantity is kept as a float64 interval that contains the ideal value:
- each exponential ``E = -log(1 - V)`` lies in ``[-log u, -log u + 2^-b / (u - 2^-b)]``,
  u = 1 - j 2^-b (exact; :func:`~jaxdp.exact.intervals.exp_intervals`, one fdlibm log
  per uniform, below 1 ulp);
- T's other d - h exponentials are one log of a product of up to ``992 // b`` factors
  u (>= 2^-992, no underflow; the product's rounding, below 31 2^-53 relative, moves
  the log by at most 2^-46 absolute per product), and their gaps are bounded by
  ``(d - h) 2^-b / min(u - 2^-b)``;
- every other step (a sum of up to 2^11 positive terms, a product, a quotient, a
  sqrt, and the log's error) is widened by ``L2_PAD`` = 2^-42 relative, which is at
  least 2^11 times the float64 rounding of the step it follows; ``P_j``'s widening
  also covers the rounding of its products with cos and sin (the corner products
  ``P_lo c`` and ``P_hi c`` of a positive interval then need no widening);
- cos and sin are evaluated at the angle's midpoint by :func:`cos_sin_turns` (IEEE +
  and * only) and widened by ``trig_pad(b)`` absolute: pi 2^-b (half the angle's
  interval, 2 pi 2^-b wide, times the Lipschitz constant 1) plus the evaluation's
  error (below 2^-48 with the polynomials for b = 52, below 2^-36 with the shorter
  ones for b = 32): ``TRIG_PAD`` = 2^-42 for b = 52, ``ONE_WORD_TRIG_PAD`` = 2^-30 for
  b = 32.
A coordinate is settled when its interval lies inside one rounding cell; the samples
with another (about 1.4 per 10^6 at d = 17 and scale 1 with b = 32) are recomputed on
the host from the same b digits plus 192 more
(:func:`~jaxdp.exact.refine.refine_l2_sample`). The tests measure the
cos and sin error against mpmath and compare the fast pass with a 300-bit mpmath
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
from jaxdp.exact.intervals import (
  FAST_BITS,
  LIMIT,
  ONE_WORD_BITS,
  UNSETTLED,
  digits52,
  exp_intervals,
  fast_bits,
  unmark,
)
from jaxdp.exact.refine import refine_l2_sample, settle_marked
from jaxdp.exact.samplers import CHUNK, check_scale, run_chunks, scale64, scale_arg
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.words import log_normal
from jaxdp.typing import ArrayLike, KeyArray, Scalar, Shape

L2_PAD = 2.0**-42  # relative outward widening of every interval step
TRIG_PAD = 2.0**-42  # absolute widening of cos and sin, angles read to 52 digits
ONE_WORD_TRIG_PAD = 2.0**-30  # ... to 32 digits (one word per uniform)
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
  with jax.enable_x64(True):
    out = _l2_kernel(key, scale_arg(scale), d=d, n=math.prod(shape))
  return out.reshape(*shape, d)


def trig_pad(bits: int) -> float:
  """cos and sin's absolute widening for angles read to ``bits`` digits (52 or 32):
  ``TRIG_PAD`` or ``ONE_WORD_TRIG_PAD`` (see :mod:`jaxdp.exact.l2`)."""
  return TRIG_PAD if bits == FAST_BITS else ONE_WORD_TRIG_PAD


_SIN = [(-1) ** k / math.factorial(2 * k + 1) for k in range(9)]  # to phi^17
_COS = [(-1) ** k / math.factorial(2 * k) for k in range(10)]  # to phi^18
_TERMS = {FAST_BITS: (9, 10), ONE_WORD_BITS: (6, 7)}  # to phi^17, ^18 or phi^11, ^12


def cos_sin_turns(t: ArrayLike, bits: int = FAST_BITS) -> tuple[jax.Array, jax.Array]:
  """cos and sin of 2 pi t for float64 t in [0, 1), with IEEE + and * only, to the
  accuracy angles read to ``bits`` digits (52 or 32) need.

  t is reduced exactly (4t = q + f, q an integer; f folded to g = min(f, 1 - f)),
  then phi = g pi / 2 lies in [0, pi / 4] (argument error below 2^-52) and both
  Taylor polynomials are summed by Horner's rule. For 52 digits they run to phi^17
  and phi^18 (the next terms are below 10^-18; the error is below 2^-48 absolute),
  for 32 to phi^11 and phi^12 (the series alternate with decreasing terms, so the
  truncation is below the first omitted term, (pi/4)^13 / 13! < 7.1 10^-12; the
  error is below 2^-36). The tests measure both against mpmath."""
  n_sin, n_cos = _TERMS[bits]
  v = t * 4.0  # exact
  q = jnp.floor(v)
  f = v - q  # exact
  flip = f > 0.5
  phi = jnp.where(flip, 1.0 - f, f) * (math.pi / 2)
  z = phi * phi
  sin = jnp.full_like(z, _SIN[n_sin - 1])
  for c in reversed(_SIN[: n_sin - 1]):
    sin = sin * z + c
  sin = sin * phi
  cos = jnp.full_like(z, _COS[n_cos - 1])
  for c in reversed(_COS[: n_cos - 1]):
    cos = cos * z + c
  big_c, big_s = jnp.where(flip, sin, cos), jnp.where(flip, cos, sin)  # of f pi / 2
  # select_n on the int32 quadrant, not jnp.select: that one's argmax takes the
  # default index dtype (int64 here), which an enclosing jit lowers as int32
  quadrant = q.astype(jnp.int32) % 4
  cos_t = lax.select_n(quadrant, big_c, -big_s, -big_c, big_s)
  sin_t = lax.select_n(quadrant, big_s, big_c, -big_s, -big_c)
  return cos_t, sin_t


def fold(x, op):
  """``op`` (an elementwise jnp function: add, multiply, minimum) over the last axis
  of ``x``, by halving: log2(n) elementwise steps on slices, which XLA:CPU fuses
  into one loop (it hands a float64 ``reduce`` to a library fusion that ran the
  whole fast pass about three times slower). Sums and products are then taken in
  a tree order; the stated bounds hold for any order."""
  while x.shape[-1] > 1:
    half = x.shape[-1] // 2
    rest = op(x[..., :half], x[..., half : 2 * half])
    x = jnp.concatenate([rest, x[..., 2 * half :]], axis=-1) if x.shape[-1] % 2 else rest
  return x[..., 0]


def _down(x):
  return x * (1 - L2_PAD)


def _up(x):
  return x * (1 + L2_PAD)


def _other_exponentials(words, bits):
  """[W_lo, W_hi] for W the sum of ``-log(1 - V_i)`` over the uniforms of ``words``
  (m, n, w), n >= 1: one log per product of up to ``992 // bits`` factors u_i, the
  gaps bounded by ``n 2^-b / min(u_i - 2^-b)`` (inf when some u_i - 2^-b = 0)."""
  j = digits52(words) if bits == FAST_BITS else words[..., 0].astype(jnp.float64)
  u = 1.0 - j * 2.0**-bits  # exact, in [2^-b, 1]
  m, n = u.shape
  per_log = 992 // bits
  groups = -(-n // per_log)
  u_pad = jnp.pad(u, ((0, 0), (0, per_log * groups - n)), constant_values=1.0)
  w = -fold(log_normal(fold(u_pad.reshape(m, groups, per_log), jnp.multiply)), jnp.add)
  slack = groups * 2.0**-46  # the products' rounding, in log
  gaps = n * 2.0**-bits / (fold(u, jnp.minimum) - 2.0**-bits)
  return jnp.maximum(_down(w - slack), 0.0), _up(_up(w + slack) + gaps)


def _cos_squared(c_lo, c_hi):
  """[lo, hi] of c^2 for c in [c_lo, c_hi]."""
  lo = jnp.where(c_lo > 0, c_lo * c_lo, jnp.where(c_hi < 0, c_hi * c_hi, 0.0))
  return _down(lo), _up(jnp.maximum(c_lo * c_lo, c_hi * c_hi))


def l2_round_marked(words: ArrayLike, scale: Scalar, d: int) -> jax.Array:
  """The fast pass for l_2: words (m, ``l2_rows(d)``, w), one word per uniform (its
  32 digits) or two (52 digits, high word first) -> k (m, d) int32, ``UNSETTLED``
  where a coordinate is not settled. Rows: the pairs' h exponentials, the d - h
  others, the h angles (their digits' midpoint; the angle's interval is covered by
  :func:`trig_pad`). The bounds are stated in :mod:`jaxdp.exact.l2`."""
  h = -(-d // 2)
  bits = fast_bits(words)
  e_lo, e_hi = exp_intervals(words[:, :h])  # the pairs' E_j, (m, h)
  e_lo, e_hi = _down(e_lo), _up(e_hi)  # the log's error and the rounding
  j = digits52(words[:, d:]) if bits == FAST_BITS else words[:, d:, 0].astype(jnp.float64)
  cos, sin = cos_sin_turns((j + 0.5) * 2.0**-bits, bits)  # exact angles, (m, h)
  pad = trig_pad(bits)
  trig = jnp.stack([cos, sin], axis=2).reshape(-1, 2 * h)[:, :d]
  c_lo, c_hi = trig - pad, trig + pad
  pairs_lo, pairs_hi = _down(fold(e_lo, jnp.add)), _up(fold(e_hi, jnp.add))
  if d % 2:  # S: the last pair's E times its cos^2 (its sine is dropped)
    sq_lo, sq_hi = _cos_squared(c_lo[:, -1], c_hi[:, -1])
    rest_lo = _down(fold(e_lo[:, :-1], jnp.add)) if h > 1 else 0.0
    rest_hi = _up(fold(e_hi[:, :-1], jnp.add)) if h > 1 else 0.0
    s_lo = _down(rest_lo + _down(e_lo[:, -1] * sq_lo))
    s_hi = _up(rest_hi + _up(e_hi[:, -1] * sq_hi))
  else:
    s_lo, s_hi = pairs_lo, pairs_hi
  if d > h:  # T = the pairs' exponentials + the d - h others
    w_lo, w_hi = _other_exponentials(words[:, h:d], bits)
    t_lo, t_hi = _down(pairs_lo + w_lo), _up(pairs_hi + w_hi)
  else:
    t_lo, t_hi = pairs_lo, pairs_hi
  f_lo = _down(_down(scale * t_lo) / _up(jnp.sqrt(s_hi)))  # scale T / sqrt(S) >= 0
  f_hi = _up(_up(scale * t_hi) / _down(jnp.sqrt(s_lo)))  # inf when S may be 0
  p_lo = _down(f_lo[:, None] * _down(jnp.sqrt(e_lo)))  # P_j, (m, h)
  p_hi = _up(f_hi[:, None] * _up(jnp.sqrt(e_hi)))
  p_lo, p_hi = (jnp.repeat(p, 2, axis=1)[:, :d] for p in (p_lo, p_hi))
  y_lo = jnp.minimum(p_lo * c_lo, p_hi * c_lo)  # P >= 0: the corners of c_lo
  y_hi = jnp.maximum(p_lo * c_hi, p_hi * c_hi)
  k = jnp.floor(0.5 * (y_lo + y_hi) + 0.5)
  settled = (k - 0.5 < y_lo) & (y_hi < k + 0.5) & (jnp.abs(k) < LIMIT)  # NaN: not
  return jnp.where(settled, k, float(UNSETTLED)).astype(jnp.int32)


def l2_round(words: ArrayLike, scale: Scalar, d: int) -> tuple[jax.Array, jax.Array]:
  """The fast pass for l_2 (:func:`l2_round_marked`): words (m, ``l2_rows(d)``, w)
  -> (k (m, d) int32, 0 where unsettled; settled (m,): all d coordinates)."""
  return unmark(l2_round_marked(words, scale, d))


def l2_chunk(d: int) -> int:
  """Samples per sequential step: ``CHUNK`` up to d = 32, fewer above (memory)."""
  return max(1 << 8, CHUNK * 32 // max(32, d))


@functools.partial(jax.jit, static_argnames=("d", "n"))
def _l2_kernel(key, scale, *, d, n):
  with jax.enable_x64(True):
    scale = scale64(scale, d)

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, l2_rows(d), 1), jnp.uint32)  # one per uniform
      k = l2_round_marked(words, scale, d)
      refine = functools.partial(refine_l2_sample, d=d)
      redo = lambda words2: l2_round_marked(words2, scale, d)  # 52 digits per uniform
      return settle_marked(k, words, scale, k_ref, refine, redo=redo)

    return run_chunks(chunk, key, scale, n, (d,), l2_chunk(d))
