"""The fast pass of the exact samplers: intervals that contain the ideal real noise,
computed in float64 from the first 52 (two words) or 32 (one word) binary digits of
each uniform, and their exact rounding when an interval lies inside one rounding cell.

References:
  C. Haney et al., "Precision-based attacks and interval refining: how to break, then
  fix, differential privacy on finite computers", 2022.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.samplers.words import log_normal, stored
from jaxdp.typing import ArrayLike, Scalar

MARGIN = 2.0**-40  # relative widening of the fast pass's intervals
FAST_BITS = 52  # digits of each uniform read by the fast pass from two words
ONE_WORD_BITS = 32  # ... from one word (the forest kernel's exponentials)
LIMIT = 1 << 30  # |statistic| and |noise| bounds that keep int32 sums exact
UNSETTLED = -(1 << 31)  # int32 mark of a coordinate the fast pass left unsettled


def exp_intervals(words):
  """(..., 2) or (..., 1) uint32 words -> (E_lo, E_hi) float64 for ``E = -log(1 - V)``,
  V's first b binary digits from the words (b = 52 from two words, high word first;
  b = 32 from one). E_hi is inf when V may be 1.

  One logarithm per uniform: with u = 1 - j 2^-b (exact, in (0, 1]) and
  x = 2^-b / u, E lies in [-log u, -log(u - 2^-b)] and
  ``-log(u - 2^-b) = -log u - log(1 - x) <= -log u + 2^-b / (u - 2^-b)`` (as
  ``-log(1 - x) <= x / (1 - x)``). The log is fdlibm's (:func:`log_normal`, error
  below 1 ulp); it and the two roundings of the upper end are below 2^-51 of E_hi,
  inside the fast pass's ``MARGIN``, whatever b."""
  bits = fast_bits(words)
  j = digits52(words) if bits == FAST_BITS else words[..., 0].astype(jnp.float64)
  u_hi = 1.0 - j * 2.0**-bits  # exact: multiples of 2^-b in [2^-b, 1]
  u_lo = u_hi - 2.0**-bits  # exact, may be 0 (then E_hi = inf)
  e_lo = -log_normal(u_hi)
  # stored: XLA would otherwise recompute the log in every consumer
  return stored((e_lo, e_lo + 2.0**-bits / u_lo), words.reshape(-1)[0])


def fast_bits(words) -> int:
  """The digits of each uniform the fast pass reads from ``words`` (..., w): 52 from
  two words (``FAST_BITS``), 32 from one (``ONE_WORD_BITS``)."""
  width = words.shape[-1]
  if width not in (1, 2):
    raise ValueError(f"the fast pass reads 1 or 2 words per uniform; got {width}.")
  return FAST_BITS if width == 2 else ONE_WORD_BITS


def digits52(words):
  """The first 52 binary digits of V (high word first) as an exact float64 integer j:
  V lies in [j, j + 1) 2^-52."""
  hi = words[..., 0].astype(jnp.uint64)
  lo = words[..., 1].astype(jnp.uint64)
  return ((hi << np.uint64(20)) | (lo >> np.uint64(12))).astype(jnp.float64)


def round_settled(lo, hi, spread, scale):
  """Rounds ``scale * [lo, hi]`` widened by ``MARGIN * scale * spread``.

  Returns (k int32, settled bool per coordinate): settled iff the widened interval
  lies strictly inside (k - 1/2, k + 1/2) and |k| < LIMIT. Comparisons with k +- 1/2
  are exact (|k| < 2^52)."""
  return _round(lo, hi, spread, scale, 0.0)


def round_marked(lo, hi, spread, scale):
  """:func:`round_settled`'s k with ``UNSETTLED`` where a coordinate is not settled
  (no settled coordinate is ``UNSETTLED``: |k| < LIMIT)."""
  return _round(lo, hi, spread, scale, float(UNSETTLED))[0]


def unmark(k: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Marked k (m, D) -> (k with 0 for ``UNSETTLED``, settled (m,): no coordinate
  marked)."""
  marked = k == UNSETTLED
  return jnp.where(marked, 0, k), ~jnp.any(marked, axis=1)


def _round(lo, hi, spread, scale, fill):
  pad = MARGIN * scale * spread
  x_lo, x_hi = lo * scale - pad, hi * scale + pad
  k = jnp.floor(0.5 * (x_lo + x_hi) + 0.5)
  settled = (k - 0.5 < x_lo) & (x_hi < k + 0.5) & (jnp.abs(k) < LIMIT)
  k = jnp.where(settled, k, fill)
  return k.astype(jnp.int32), settled


def linf_round(words: ArrayLike, scale: Scalar, d: int) -> tuple[jax.Array, jax.Array]:
  """The fast pass for l_inf: words (m, 2d + 1, 2), the first d + 1 rows the radius'
  exponentials, the last d the cube's uniforms (Z = 2U - 1, exact ends) -> (k (m, d)
  int32, settled (m,)). The product of intervals takes the min and max of the four
  corner products; the widening (``MARGIN * scale * R_hi``) bounds their rounding."""
  e_lo, e_hi = exp_intervals(words[:, : d + 1])
  r_lo = jnp.sum(e_lo, axis=1, keepdims=True)
  r_hi = jnp.sum(e_hi, axis=1, keepdims=True)
  j = digits52(words[:, d + 1 :])
  z_lo = j * 2.0 ** -(FAST_BITS - 1) - 1.0  # exact
  z_hi = (j + 1.0) * 2.0 ** -(FAST_BITS - 1) - 1.0  # exact
  corners = jnp.stack([r_lo * z_lo, r_lo * z_hi, r_hi * z_lo, r_hi * z_hi])
  k, settled = round_settled(jnp.min(corners, 0), jnp.max(corners, 0), r_hi, scale)
  return k, jnp.all(settled, axis=1)


def laplace_round(
  words: ArrayLike, scale: Scalar
) -> tuple[jax.Array, jax.Array, jax.Array]:
  """The fast pass for Laplace: words (m, 1, 2) -> (k (m, 1) int32, settled (m,),
  coefficients (m, 1, 1) int8). The sign is bit 0 of the second word (not one of
  V's 52 digits)."""
  e_lo, e_hi = exp_intervals(words)  # (m, 1)
  positive = (words[..., 1] & 1) == 0
  lo = jnp.where(positive, e_lo, -e_hi)
  hi = jnp.where(positive, e_hi, -e_lo)
  k, settled = round_settled(lo, hi, e_hi, scale)
  coeff = jnp.where(positive, 1, -1).astype(jnp.int8)[..., None]
  return k, settled[:, 0], coeff


def knorm_round(
  words: ArrayLike, coeff: ArrayLike, scale: Scalar
) -> tuple[jax.Array, jax.Array]:
  """The fast pass for ``scale * sum_i coeff[i] E_i``: words (m, M, 2), coeff
  (m, M, D) in {-1, 0, 1} -> (k (m, D) int32, settled (m,): all D coordinates)."""
  e_lo, e_hi = (e[:, :, None] for e in exp_intervals(words))  # (m, M, 1)
  pos, neg = coeff > 0, coeff < 0
  lo = jnp.sum(jnp.where(pos, e_lo, jnp.where(neg, -e_hi, 0.0)), axis=1)
  hi = jnp.sum(jnp.where(pos, e_hi, jnp.where(neg, -e_lo, 0.0)), axis=1)
  spread = jnp.sum(jnp.where(pos | neg, e_hi, 0.0), axis=1)
  k, settled = round_settled(lo, hi, spread, scale)
  return k, jnp.all(settled, axis=1)


def chain_round(
  words: ArrayLike, seq: ArrayLike, size_a: ArrayLike, up: ArrayLike, scale: Scalar
) -> tuple[jax.Array, jax.Array]:
  """:func:`knorm_round` for the poset ball without the coefficient matrix: the
  vertices' filters form chains, so coordinate j of ``sum_i c_i E_i`` accumulates
  the E of every chain filter containing j (the float sampler's ``chain_noise``,
  on intervals). Same results as ``knorm_round(words, simplex_coefficients(...))``."""
  m, d = seq.shape
  e_lo, e_hi = exp_intervals(words)  # (m, d + 2)

  def step(i, state):
    f, lo, hi, spread = state
    in_a = (i < size_a)[:, None]
    f = jnp.where((size_a == i)[:, None], False, f) | up[seq[:, i]]
    ea_lo, ea_hi = e_lo[:, i + 1, None], e_hi[:, i + 1, None]  # A's F_(i+1)
    eb_lo, eb_hi = e_lo[:, i + 2, None], e_hi[:, i + 2, None]  # B's G_(i-k+1)
    lo = lo + jnp.where(f, jnp.where(in_a, ea_lo, -eb_hi), 0.0)
    hi = hi + jnp.where(f, jnp.where(in_a, ea_hi, -eb_lo), 0.0)
    spread = spread + jnp.where(f, jnp.where(in_a, ea_hi, eb_hi), 0.0)
    return f, lo, hi, spread

  zero = jnp.zeros((m, d), jnp.float64)
  _, lo, hi, spread = lax.fori_loop(0, d, step, (jnp.zeros((m, d), bool), zero, zero, zero))
  on_a = jnp.arange(d + 2)[None, :] <= size_a[:, None]  # root: +E on A
  root_lo = jnp.sum(jnp.where(on_a, e_lo, -e_hi), axis=1, keepdims=True)
  root_hi = jnp.sum(jnp.where(on_a, e_hi, -e_lo), axis=1, keepdims=True)
  root_sp = jnp.sum(e_hi, axis=1, keepdims=True)
  k, settled = round_settled(
    jnp.concatenate([root_lo, lo], 1),
    jnp.concatenate([root_hi, hi], 1),
    jnp.concatenate([root_sp, spread], 1),
    scale,
  )
  return k, jnp.all(settled, axis=1)


DOT_PREFIX_MAX = 64  # up to this many terms, prefix sums by one matrix product


def prefix_sums(e):
  """(m, M) float64 -> (m, M + 1): column i the sum of the first i columns. Up to
  ``DOT_PREFIX_MAX`` terms by a product with a triangular 0/1 matrix (one fused
  product on the CPU), beyond by a parallel scan; either way each sum is within
  M 2^-53 of the sum of its terms' magnitudes (any order of summation)."""
  m, n = e.shape
  if n <= DOT_PREFIX_MAX:
    tri = jnp.asarray(np.triu(np.ones((n, n + 1)), 1))  # tri[l, i] = 1 iff l < i
    return jnp.dot(e, tri, precision=lax.Precision.HIGHEST)
  zero = jnp.zeros((m, 1), e.dtype)
  return jnp.concatenate([zero, lax.associative_scan(jnp.add, e, axis=1)], 1)


def tree_round(
  words: ArrayLike, low: ArrayLike, size_a: ArrayLike, scale: Scalar
) -> tuple[jax.Array, jax.Array]:
  """(k (m, d + 1) int32, settled (m,)): :func:`tree_round_marked` unmarked."""
  return unmark(tree_round_marked(words, low, size_a, scale))


def tree_round_marked(
  words: ArrayLike, low: ArrayLike, size_a: ArrayLike, scale: Scalar
) -> jax.Array:
  """:func:`chain_round` from the first chain position below each coordinate: words
  (m, d + 2, 2) or (m, d + 2, 1) (:func:`exp_intervals`); ``low`` (m, 2, d), per
  part the first position (in the part's extension) of an element below or equal to
  j (the part's size where none), so coordinate j is the sum of A's exponentials
  ``low_A(j) + 1 .. k`` minus B's ``k + 2 + low_B(j) .. d + 1``. The sums are
  differences of prefix sums, so every coordinate is widened by ``MARGIN * scale``
  times the sum of all d + 2 upper ends, which bounds the float64 rounding of prefix
  sums of up to 514 terms in any order (a parallel scan here; below 2^-41 of that
  sum) plus the platform's ``log`` error. Returns k (m, d + 1) int32, ``UNSETTLED``
  where a coordinate is not settled (:func:`round_marked`)."""
  m, _, d = low.shape
  e_lo, e_hi = exp_intervals(words)  # (m, d + 2)
  p_lo, p_hi = prefix_sums(e_lo), prefix_sums(e_hi)
  k = size_a[:, None]
  at = lambda p, i: jnp.take_along_axis(p, i, axis=1)
  a_from, b_from = low[:, 0] + 1, k + 2 + low[:, 1]
  a_end, top = at(p_lo, k + 1), p_lo[:, -1:]
  a_end_hi, top_hi = at(p_hi, k + 1), p_hi[:, -1:]
  lo = (a_end - at(p_lo, a_from)) - (top_hi - at(p_hi, b_from))
  hi = (a_end_hi - at(p_hi, a_from)) - (top - at(p_lo, b_from))
  root_lo = a_end - (top_hi - a_end_hi)
  root_hi = a_end_hi - (top - a_end)
  spread = jnp.broadcast_to(top_hi, (m, d + 1))
  return round_marked(
    jnp.concatenate([root_lo, lo], 1), jnp.concatenate([root_hi, hi], 1), spread, scale
  )
