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
  u_hi, u_lo = _cell(words)
  e_lo = -log_normal(u_hi)
  # stored: XLA would otherwise recompute the log in every consumer
  return stored((e_lo, e_lo + (u_hi - u_lo) / u_lo), words.reshape(-1)[0])


def _cell(words):
  """(u, u - 2^-b) for u = 1 - j 2^-b, j V's first b digits (:func:`fast_bits`):
  both exact (multiples of 2^-b in [0, 1]); u - 2^-b is 0 when V may be 1."""
  bits = fast_bits(words)
  j = digits52(words) if bits == FAST_BITS else words[..., 0].astype(jnp.float64)
  u = 1.0 - j * 2.0**-bits
  return u, u - 2.0**-bits


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
  pad = MARGIN * scale * spread
  x_lo, x_hi = lo * scale - pad, hi * scale + pad
  k = jnp.floor(0.5 * (x_lo + x_hi) + 0.5)
  settled = (k - 0.5 < x_lo) & (x_hi < k + 0.5) & (jnp.abs(k) < LIMIT)
  return jnp.where(settled, k, 0.0).astype(jnp.int32), settled


def unmark(k: ArrayLike) -> tuple[jax.Array, jax.Array]:
  """Marked k (m, D) -> (k with 0 for ``UNSETTLED``, settled (m,): no coordinate
  marked)."""
  marked = k == UNSETTLED
  return jnp.where(marked, 0, k), ~jnp.any(marked, axis=1)


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


def exp_centers(words):
  """(..., 2) or (..., 1) uint32 words -> (C, H) float64 with ``E = -log(1 - V)`` in
  [C - H, C + H] (V's digits as in :func:`exp_intervals`): C the midpoint of
  :func:`exp_intervals`' interval, H its half-width ``2^-b / (2 (u - 2^-b))``,
  inf when V may be 1. C's rounding and the log's error are below 2^-51 of C + H."""
  u_hi, u_lo = _cell(words)
  half = 0.5 * (u_hi - u_lo) / u_lo  # u_hi - u_lo = 2^-b exactly
  # stored: XLA would otherwise recompute the log in every consumer
  return stored((half - log_normal(u_hi), half), words.reshape(-1)[0])


def center_width(c, h, own=None):
  """(m, M) centres and half-widths -> (m, 1): ``H + MARGIN (C + H)`` summed over
  all M exponentials, the widening of every coordinate of a signed sum of them; with
  ``own`` (m, D), each coordinate's own terms' half-widths in place of the total H
  (computed like the sums: within 2^-41 of the total H, inside the margin).

  A coordinate ``sum_i s_i E_i`` (s_i in {-1, 0, 1}) lies within ``sum_i |s_i| H_i``
  of ``sum_i s_i C_i``, at most the total H; computing the sum in float64 (directly
  or as a difference of prefix sums of up to 514 terms, in any order) errs by less
  than 2^-41 of ``sum_i (C_i + H_i)``, the centres' and the log's errors by 2^-51 of
  it, and the total H by 2^-44 of it: ``MARGIN`` = 2^-40 covers them and the
  scaling and comparisons of :func:`round_center`."""
  total_h = jnp.sum(h, axis=1, keepdims=True)
  margin = MARGIN * (jnp.sum(c, axis=1, keepdims=True) + total_h)
  return (total_h if own is None else own) + margin


def round_center(x, width, scale):
  """Rounds ``scale * x`` (m, D) known to within ``scale * width`` (m, 1)
  (:func:`center_width`): k (m, D) int32, ``UNSETTLED`` where the interval does not
  lie strictly inside (k - 1/2, k + 1/2) or |k| >= LIMIT (no settled coordinate is
  ``UNSETTLED``; an infinite or NaN x or width is unsettled). Comparisons with
  k +- 1/2 are exact (|k| < 2^52)."""
  x, pad = x * scale, width * scale
  k = jnp.floor(x + 0.5)
  settled = (k - 0.5 < x - pad) & (x + pad < k + 0.5) & (jnp.abs(k) < LIMIT)
  return jnp.where(settled, k, float(UNSETTLED)).astype(jnp.int32)


def knorm_round(
  words: ArrayLike, coeff: ArrayLike, scale: Scalar
) -> tuple[jax.Array, jax.Array]:
  """The fast pass for ``scale * sum_i coeff[i] E_i``: words (m, M, 2), coeff
  (m, M, D) in {-1, 0, 1} -> (k (m, D) int32, settled (m,): all D coordinates), from
  the centres of :func:`exp_centers` widened by :func:`center_width`."""
  c, h = exp_centers(words)  # (m, M)
  x = jnp.sum(coeff * c[:, :, None], axis=1)
  return unmark(round_center(x, center_width(c, h), scale))


def chain_round(
  words: ArrayLike, seq: ArrayLike, size_a: ArrayLike, up: ArrayLike, scale: Scalar
) -> tuple[jax.Array, jax.Array]:
  """:func:`knorm_round` for the poset ball without the coefficient matrix: the
  vertices' filters form chains, so coordinate j of ``sum_i c_i E_i`` accumulates
  the E of every chain filter containing j (the float sampler's ``chain_noise``,
  on centres). Same results as ``knorm_round(words, simplex_coefficients(...))``."""
  m, d = seq.shape
  c, h = exp_centers(words)  # (m, d + 2)

  def step(i, state):
    f, x = state
    in_a = (i < size_a)[:, None]
    f = jnp.where((size_a == i)[:, None], False, f) | up[seq[:, i]]
    # A's F_(i+1) adds its E, B's G_(i-k+1) subtracts its own
    return f, x + jnp.where(f, jnp.where(in_a, c[:, i + 1, None], -c[:, i + 2, None]), 0.0)

  init = (jnp.zeros((m, d), bool), jnp.zeros((m, d), jnp.float64))
  _, x = lax.fori_loop(0, d, step, init)
  on_a = jnp.arange(d + 2)[None, :] <= size_a[:, None]  # root: +E on A
  root = jnp.sum(jnp.where(on_a, c, -c), axis=1, keepdims=True)
  x = jnp.concatenate([root, x], 1)
  return unmark(round_center(x, center_width(c, h), scale))


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
  (m, d + 2, 2) or (m, d + 2, 1) (:func:`exp_centers`); ``low`` (m, 2, d), per
  part the first position (in the part's extension) of an element below or equal to
  j (the part's size where none), so coordinate j is the sum of A's exponentials
  ``low_A(j) + 1 .. k`` minus B's ``k + 2 + low_B(j) .. d + 1``: differences of
  prefix sums of the centres (one matrix product, or a parallel scan beyond
  ``DOT_PREFIX_MAX`` terms), every coordinate widened by :func:`center_width`.

  When that leaves a coordinate of the batch unsettled (on the CPU; on other
  platforms always), every coordinate is rounded again with its own terms'
  half-widths (the same differences of prefix sums of H) in place of the total H:
  one wide term (a large E, likelier with one word per exponential) then leaves
  only the coordinates that hold it unsettled, and fewer samples go to the host.
  Returns k (m, d + 1) int32, ``UNSETTLED`` where a coordinate is not settled
  (:func:`round_center`)."""
  c, h = exp_centers(words)  # (m, d + 2)
  k = size_a[:, None]

  def parts(p):
    """From prefix sums p: the sums of A's terms and of all terms, and per coordinate
    the sums of A's terms low_A + 1..k and of B's from k + 2 + low_B on."""
    at = lambda i: jnp.take_along_axis(p, i, axis=1)
    a_end, top = at(k + 1), p[:, -1:]
    return a_end, top, a_end - at(low[:, 0] + 1), top - at(k + 2 + low[:, 1])

  a_all, top, a_part, b_part = parts(prefix_sums(c))
  x = jnp.concatenate([a_all - (top - a_all), a_part - b_part], 1)
  marked = round_center(x, center_width(c, h), scale)

  def narrow(_):
    _, top_h, a_h, b_h = parts(prefix_sums(h))
    own = jnp.concatenate([top_h, a_h + b_h], 1)  # the root holds every term
    return round_center(x, center_width(c, h, own), scale)

  # on the CPU only when needed; elsewhere always (a cond's predicate would be read
  # on the host once per chunk, as :func:`~jaxdp.samplers.words.stored` explains)
  when_needed = lambda out: lax.cond(jnp.min(out) == UNSETTLED, narrow, lambda o: o, out)
  return lax.platform_dependent(marked, cpu=when_needed, default=narrow)
