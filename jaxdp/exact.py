"""Exact, float-safe noise: the ideal real noise rounded exactly to the integers, and
the discrete Gaussian.

Floating-point noise leaks (Mironov 2012): the set of floats that ``x + noise`` can
produce depends on ``x``. The samplers here return *integers*: the exact rounding of
the ideal real noise (a real Laplace variate, a real K-norm vector) in units of a
grid. Rounding is postprocessing, so adding the integer noise to an integer
statistic is exactly as private as the ideal real mechanism, and no float ever
touches the data. The law of the integer noise does not depend on the data at all.

How the exact rounding is computed (interval refining):

* Each exponential variate is ``E = -log U`` with ``U = 1 - V`` and ``V`` uniform in
  [0, 1), whose binary digits are random bits. The fast pass reads the first 52
  digits, so ``V`` lies in a dyadic interval ``[j, j + 1) 2^-52`` whose ends are
  exact floats, and ``E`` in an interval computed with float64 ``log``.
* The noise is ``b * sum_i c_i E_i`` with integer coefficients ``c_i`` in {-1, 0, 1}
  (Laplace: one signed exponential; the poset-ball K-norm noise: ``D + 1``
  exponentials on the vertices of a uniformly chosen simplex, see
  :mod:`jaxdp._poset_tables`), or ``b * R * Z`` for the l_inf ball (R a sum of
  exponentials, Z = 2U - 1 with U's digits read like V's), so every coordinate
  gets an interval. It is widened by
  ``MARGIN * b * sum_i |c_i| E_i`` (2^-40 relative), which bounds every float64
  rounding in the sum (at most 2^-47 relative for up to 64 terms) plus the
  platform's ``log`` error.
* If the interval of every coordinate lies strictly inside one rounding cell
  ``(k - 1/2, k + 1/2)``, the rounding is ``k``: settled. Otherwise the sample is
  *refined*: 192 more digits of each ``V`` are drawn and a host callback recomputes
  the intervals with Python's ``decimal`` at 100 significant digits (its ``ln`` is
  correctly rounded) plus an absolute margin of 1e-80. A sample still unsettled
  then (probability below 2^-150) raises an error; nothing is ever guessed.

What is proved and what is assumed:

* Proved (given a uniform bit source): every discrete choice is exact (the object of
  the poset ball is an exactly uniform integer rank in [0, N(P)) unranked with
  integer tables; the Laplace sign is one bit), the fast pass's intervals contain
  the ideal values when the platform's float64 ``log`` has relative error at most
  2^-44, and the host refinement is rigorous.
* Assumed: that ``log`` error bound on the platform. The test suite measures it
  against ``mpmath`` at 200 bits over 4 * 10^5 inputs (observed: 0.5 ulp = 2^-53 on
  XLA:CPU) and checks the fast pass against a ``decimal`` recomputation from the same
  bits; the margin is 2^9 times the bound.
* Not covered: timing. Refinement makes the run time depend on the random bits
  (never on the data); the rare host round trip is observable.

The discrete Gaussian (:func:`discrete_gaussian`, Canonne, Kamath & Steinke 2020) needs
no rounding: it is sampled with integer arithmetic and exact Bernoulli trials only.

References:
  I. Mironov, "On significance of the least significant bits for differential
  privacy", CCS 2012.
  C. Haney et al., "Precision-based attacks and interval refining: how to break, then
  fix, differential privacy on finite computers", 2022.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import decimal
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp import _checks
from jaxdp._poset_tables import ExactTables, exact_tables
from jaxdp.random import _chunked
from jaxdp.threefry import fast_key
from jaxdp.posets import Poset

__all__ = ["laplace", "poset_knorm", "linf_knorm", "discrete_gaussian", "MARGIN", "MAX_SCALE",
           "MAX_SIGMA"]

MARGIN = 2.0 ** -40      # relative widening of the fast pass's intervals
FAST_BITS = 52           # digits of each uniform read by the fast pass
REFINE_WORDS = 6         # 192 more digits per uniform for the host refinement
HOST_DIGITS = 100        # decimal precision of the host refinement
MAX_SCALE = 2.0 ** 20    # noise scales above this could overflow int32 outputs
LIMIT = 1 << 30          # |statistic| and |noise| bounds that keep int32 sums exact
CHUNK = 1 << 14          # samples per sequential step (bounds memory)


def laplace(key, shape=(), *, scale) -> jax.Array:
  """Exactly rounded Laplace noise: ``round(L)`` for ``L`` ~ Laplace(scale), int32.

  Args:
    key: one PRNG key (use :func:`jaxdp.random.secure_key` for a release).
    shape: output shape.
    scale: the Laplace scale b > 0, at most ``MAX_SCALE``; a Python number (used
      exactly as its float64 value) or a traced scalar (a bad traced value yields
      the sentinel ``INT32_MIN`` everywhere, never weaker noise).

  Returns:
    int32 array of ``shape``. ``P(k) = P(k - 1/2 < L < k + 1/2)`` exactly.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  scale = _check_scale(scale)
  traced, const = (None, scale) if isinstance(scale, float) else (scale, None)
  with jax.enable_x64(True):  # int64/float64 inside; the arguments keep their types
    out = _laplace_kernel(key, traced, const=const, n=math.prod(shape))
  return out.reshape(shape)


def poset_knorm(key, poset: Poset, scale, shape=()) -> jax.Array:
  """Exactly rounded K-norm noise for the poset ball, int32 ``(*shape, d + 1)``.

  The ideal noise has density proportional to ``exp(-||y||_K / scale)`` on
  R^(d+1), K the poset ball; each coordinate is rounded to the nearest integer,
  exactly. With ``scale = sensitivity / eps`` and an integer statistic, adding it is
  eps-DP (postprocessing of the K-norm mechanism).

  Args:
    key: one PRNG key.
    poset: a :class:`~jaxdp.Poset` with d <= 22 and N(P) < 2^61 objects (integer
      ranks); NHIS-3 has N(P) = 609,887,750,400.
    scale: 1/eps times the sensitivity; Python number or traced scalar, at most
      ``MAX_SCALE``.
    shape: batch shape.

  Raises:
    ValueError: the poset is too large for exact integer ranks.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  scale = _check_scale(scale)
  if not isinstance(poset, Poset):
    raise _checks.ArgTypeError(f"poset must be a jaxdp.Poset; got {poset!r}.")
  tables, total = exact_tables(poset)
  traced, const = (None, scale) if isinstance(scale, float) else (scale, None)
  with jax.enable_x64(True):  # the int64 tables must not be canonicalised to int32
    out = _poset_kernel(key, tables, traced, const=const, total=total, d=poset.d,
                        n=math.prod(shape))
  return out.reshape(*shape, poset.d + 1)


def linf_knorm(key, d: int, scale, shape=()) -> jax.Array:
  """Exactly rounded K-norm noise for the l_inf ball, int32 ``(*shape, d)``.

  The ideal noise is ``scale * R * Z``: R ~ Gamma(d + 1) (a sum of d + 1
  exponentials) and Z uniform in the cube [-1, 1]^d; each coordinate is rounded to
  the nearest integer exactly (interval products, then the same refinement).

  Args:
    key: one PRNG key.
    d: the dimension (>= 1).
    scale: sensitivity / eps; Python number or traced scalar, at most ``MAX_SCALE``.
    shape: batch shape.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  d = _checks.check_int(d, "d", minimum=1)
  scale = _check_scale(scale)
  traced, const = (None, scale) if isinstance(scale, float) else (scale, None)
  with jax.enable_x64(True):
    out = _linf_kernel(key, traced, const=const, d=d, n=math.prod(shape))
  return out.reshape(*shape, d)


# ------------------------------------------------------------------ checks
def _check_scale(scale):
  if _checks.is_concrete(scale):
    scale = _checks.check_positive(scale, "scale")
    if scale > MAX_SCALE:
      raise ValueError(
          f"scale must be at most {MAX_SCALE:g} for exact integer noise (larger noise "
          f"could overflow int32); got {scale:g}. Use a coarser grid or a larger eps.")
    return float(scale)
  return _checks.check_positive(scale, "scale", allow_traced=True)


# ------------------------------------------------------------------ kernels
def _scale64(traced, const):
  """The scale as float64: a static Python float exactly, a traced scale as its
  value; NaN when out of range (-> the sentinel output)."""
  s = jnp.asarray(const if traced is None else traced, jnp.float64)
  return jnp.where((s > 0) & (s <= MAX_SCALE), s, jnp.nan)


def _exp_intervals(words):
  """(..., 2) uint32 words -> (E_lo, E_hi) float64 for ``E = -log(1 - V)``, V's first
  52 binary digits from the words (high word first). E_hi is inf when V may be 1."""
  j = _digits52(words)
  u_hi = 1.0 - j * 2.0 ** -FAST_BITS          # exact: multiples of 2^-52 in (0, 1]
  u_lo = 1.0 - (j + 1.0) * 2.0 ** -FAST_BITS  # exact, may be 0
  return -jnp.log(u_hi), -jnp.log(u_lo)


def _digits52(words):
  """The first 52 binary digits of V (high word first) as an exact float64 integer j:
  V lies in [j, j + 1) 2^-52."""
  hi = words[..., 0].astype(jnp.uint64)
  lo = words[..., 1].astype(jnp.uint64)
  return ((hi << np.uint64(20)) | (lo >> np.uint64(12))).astype(jnp.float64)


def _round_settled(lo, hi, spread, scale):
  """Rounds ``scale * [lo, hi]`` widened by ``MARGIN * scale * spread``.

  Returns (k int32, settled bool per coordinate): settled iff the widened interval
  lies strictly inside (k - 1/2, k + 1/2) and |k| < LIMIT. Comparisons with k +- 1/2
  are exact (|k| < 2^52)."""
  pad = MARGIN * scale * spread
  x_lo, x_hi = lo * scale - pad, hi * scale + pad
  k = jnp.floor(0.5 * (x_lo + x_hi) + 0.5)
  settled = (k - 0.5 < x_lo) & (x_hi < k + 0.5) & (jnp.abs(k) < LIMIT)
  k = jnp.where(settled, k, 0.0)
  return k.astype(jnp.int32), settled


def _settle(k, settled, words, scale, key, refine_one, *operands):
  """Refines unsettled samples on the host, only when there are any (a bad traced
  scale needs none: its output is the sentinel).

  ``refine_one(words_i, extra_i, scale, *operands_i)`` recomputes one sample from its
  fast-pass words and 192 more digits per uniform; ``operands`` are per-sample arrays,
  or functions computing them (run only when refining)."""
  settled = settled | jnp.isnan(scale)

  def refine(k):
    ops = [o() if callable(o) else o for o in operands]
    extra = jax.random.bits(key, (*words.shape[:-1], REFINE_WORDS), jnp.uint32)
    return jax.pure_callback(functools.partial(_host_refine, refine_one),
                             jax.ShapeDtypeStruct(k.shape, jnp.int32),
                             k, settled, words, extra, scale, *ops,
                             vmap_method="broadcast_all")

  return lax.cond(jnp.all(settled), lambda k: k, refine, k)


def _run(chunk, key, scale, n: int, tail: tuple[int, ...]):
  """``n`` samples from ``chunk(key, m)`` in chunks; the sentinel everywhere when a
  traced scale is bad."""
  out = _chunked(chunk, key, n, tail, jnp.int32, CHUNK)
  return _checks.mark_invalid(~jnp.isnan(scale), out)


@functools.partial(jax.jit, static_argnames=("const", "n"))
def _laplace_kernel(key, traced, *, const, n):
  with jax.enable_x64(True):
    s = _scale64(traced, const)

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, 1, 2), jnp.uint32)
      k, settled, coeff = laplace_round(words, s)
      return _settle(k, settled, words, s, k_ref, refine_sample, coeff)[:, 0]

    return _run(chunk, key, s, n, ())


@functools.partial(jax.jit, static_argnames=("const", "total", "d", "n"))
def _poset_kernel(key, tables, traced, *, const, total, d, n):
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)
    s = _scale64(traced, const)

    def chunk(k_chunk, m):
      k_rank, k_bits, k_ref = jax.random.split(k_chunk, 3)
      rank = uniform_below(k_rank, total, m)
      seq, size_a = unrank(rank, t, d)
      words = jax.random.bits(k_bits, (m, d + 2, 2), jnp.uint32)
      k, settled = chain_round(words, seq, size_a, t.up, s)
      coeff = lambda: simplex_coefficients(seq, size_a, t.up)   # (m, d+2, d+1)
      return _settle(k, settled, words, s, k_ref, refine_sample, coeff)

    return _run(chunk, key, s, n, (d + 1,))


@functools.partial(jax.jit, static_argnames=("const", "d", "n"))
def _linf_kernel(key, traced, *, const, d, n):
  with jax.enable_x64(True):
    s = _scale64(traced, const)

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, 2 * d + 1, 2), jnp.uint32)
      k, settled = linf_round(words, s, d)
      refine = functools.partial(refine_linf_sample, num_exp=d + 1)
      return _settle(k, settled, words, s, k_ref, refine)

    return _run(chunk, key, s, n, (d,))


def linf_round(words, scale, d: int):
  """The fast pass for l_inf: words (m, 2d + 1, 2), the first d + 1 rows the radius'
  exponentials, the last d the cube's uniforms (Z = 2U - 1, exact ends) -> (k (m, d)
  int32, settled (m,)). The product of intervals takes the min and max of the four
  corner products; the widening (``MARGIN * scale * R_hi``) bounds their rounding."""
  e_lo, e_hi = _exp_intervals(words[:, :d + 1])
  r_lo = jnp.sum(e_lo, axis=1, keepdims=True)
  r_hi = jnp.sum(e_hi, axis=1, keepdims=True)
  j = _digits52(words[:, d + 1:])
  z_lo = j * 2.0 ** -(FAST_BITS - 1) - 1.0                       # exact
  z_hi = (j + 1.0) * 2.0 ** -(FAST_BITS - 1) - 1.0                # exact
  corners = jnp.stack([r_lo * z_lo, r_lo * z_hi, r_hi * z_lo, r_hi * z_hi])
  k, settled = _round_settled(jnp.min(corners, 0), jnp.max(corners, 0), r_hi, scale)
  return k, jnp.all(settled, axis=1)


def laplace_round(words, scale):
  """The fast pass for Laplace: words (m, 1, 2) -> (k (m, 1) int32, settled (m,),
  coefficients (m, 1, 1) int8). The sign is bit 0 of the second word (not one of
  V's 52 digits)."""
  e_lo, e_hi = _exp_intervals(words)                              # (m, 1)
  positive = (words[..., 1] & 1) == 0
  lo = jnp.where(positive, e_lo, -e_hi)
  hi = jnp.where(positive, e_hi, -e_lo)
  k, settled = _round_settled(lo, hi, e_hi, scale)
  coeff = jnp.where(positive, 1, -1).astype(jnp.int8)[..., None]
  return k, settled[:, 0], coeff


def knorm_round(words, coeff, scale):
  """The fast pass for ``scale * sum_i coeff[i] E_i``: words (m, M, 2), coeff
  (m, M, D) in {-1, 0, 1} -> (k (m, D) int32, settled (m,): all D coordinates)."""
  e_lo, e_hi = (e[:, :, None] for e in _exp_intervals(words))     # (m, M, 1)
  pos, neg = coeff > 0, coeff < 0
  lo = jnp.sum(jnp.where(pos, e_lo, jnp.where(neg, -e_hi, 0.0)), axis=1)
  hi = jnp.sum(jnp.where(pos, e_hi, jnp.where(neg, -e_lo, 0.0)), axis=1)
  spread = jnp.sum(jnp.where(pos | neg, e_hi, 0.0), axis=1)
  k, settled = _round_settled(lo, hi, spread, scale)
  return k, jnp.all(settled, axis=1)


def chain_round(words, seq, size_a, up, scale):
  """:func:`knorm_round` for the poset ball without the coefficient matrix: the
  vertices' filters form chains, so coordinate j of ``sum_i c_i E_i`` accumulates
  the E of every chain filter containing j (the float sampler's ``chain_noise``,
  on intervals). Same results as ``knorm_round(words, simplex_coefficients(...))``."""
  m, d = seq.shape
  e_lo, e_hi = _exp_intervals(words)                              # (m, d + 2)
  def step(i, state):
    f, lo, hi, spread = state
    in_a = (i < size_a)[:, None]
    f = jnp.where((size_a == i)[:, None], False, f) | up[seq[:, i]]
    ea_lo, ea_hi = e_lo[:, i + 1, None], e_hi[:, i + 1, None]   # A's F_(i+1)
    eb_lo, eb_hi = e_lo[:, i + 2, None], e_hi[:, i + 2, None]   # B's G_(i-k+1)
    lo = lo + jnp.where(f, jnp.where(in_a, ea_lo, -eb_hi), 0.0)
    hi = hi + jnp.where(f, jnp.where(in_a, ea_hi, -eb_lo), 0.0)
    spread = spread + jnp.where(f, jnp.where(in_a, ea_hi, eb_hi), 0.0)
    return f, lo, hi, spread

  zero = jnp.zeros((m, d), jnp.float64)
  _, lo, hi, spread = lax.fori_loop(0, d, step, (jnp.zeros((m, d), bool), zero, zero,
                                                 zero))
  on_a = jnp.arange(d + 2)[None, :] <= size_a[:, None]           # root: +E on A
  root_lo = jnp.sum(jnp.where(on_a, e_lo, -e_hi), axis=1, keepdims=True)
  root_hi = jnp.sum(jnp.where(on_a, e_hi, -e_lo), axis=1, keepdims=True)
  root_sp = jnp.sum(e_hi, axis=1, keepdims=True)
  k, settled = _round_settled(jnp.concatenate([root_lo, lo], 1),
                              jnp.concatenate([root_hi, hi], 1),
                              jnp.concatenate([root_sp, spread], 1), scale)
  return k, jnp.all(settled, axis=1)


# ------------------------------------------------------------------ exact discrete parts
def uniform_below(key, total: int, m: int):
  """``m`` independent, exactly uniform int64 in [0, total) (0 < total < 2^61).

  A 62-bit draw X is accepted when X < L = floor(2^62 / total) total, and then
  X mod total is uniform (each residue has exactly L / total preimages below L).
  Rejected samples are redrawn with fresh bits until all are accepted; acceptance
  is above 1 - total / 2^62 (1 - 1.3e-7 for NHIS-3), so a second round is rare.
  """
  limit = ((1 << 62) // total) * total

  def draw(i):
    return _int62(jax.random.bits(jax.random.fold_in(key, i), (m, 2), jnp.uint32))

  def body(state):
    x, i = state
    return jnp.where(x < limit, x, draw(i)), i + 1

  x, _ = lax.while_loop(lambda st: jnp.any(st[0] >= limit), body, (draw(0), 1))
  return x % total


def _int62(w):
  """62-bit non-negative int64 from uint32 word pairs ``w[..., 0]`` (high; its top
  two bits are not used) and ``w[..., 1]``."""
  w = w.astype(jnp.uint64)
  x = ((w[..., 0] & np.uint64(0x3FFFFFFF)) << np.uint64(32)) | w[..., 1]
  return x.astype(jnp.int64)


def unrank(rank, t: ExactTables, d: int):
  """Object number ``rank`` in [0, N(P)): a bijection onto the objects
  (A, ext(A), ext(B)), so a uniform rank gives an exactly uniform object.

  A is found by descending the binary trie over its bits with integer object counts;
  the rest r in [0, e(A) e(B)) splits into r // e(B) (the extension of A) and
  r % e(B) (of B); an extension of S with rank q takes as next top the maximal x whose
  cumulative count of extensions of S \\ x (over maximal x in index order) passes q.

  Returns:
    seq (m, d) int32: A top down, then B top down; size_a (m,) int32: |A|.
  """
  m = rank.shape[0]
  r = rank
  a = jnp.zeros((m,), jnp.int64)
  for level in range(d):
    left = t.trie_left[(1 << level) - 1 + a]
    right = r >= left
    r = jnp.where(right, r - left, r)
    a = 2 * a + right
  full = (1 << d) - 1
  e_b = t.ext[full ^ a]
  r_a, r_b = r // e_b, r % e_b
  size_a = lax.population_count(a.astype(jnp.uint32)).astype(jnp.int32)
  bits = jnp.left_shift(jnp.uint32(1), jnp.arange(d, dtype=jnp.uint32))
  rest = a.astype(jnp.uint32) ^ jnp.uint32(full)

  def step(i, state):
    s_set, q, seq = state
    switch = size_a == i
    s_set = jnp.where(switch, rest, s_set)
    q = jnp.where(switch, r_b, q)
    member = (s_set[:, None] & bits) != 0
    top = member & ((s_set[:, None] & t.strict_up[None, :]) == 0)
    w = jnp.where(top, t.ext[(s_set[:, None] ^ bits).astype(jnp.int32)], 0)
    c = jnp.cumsum(w, axis=1)
    passed = c <= q[:, None]            # q lies beyond every extension through x
    x = jnp.sum(passed, axis=1).astype(jnp.int32)
    q = q - jnp.max(jnp.where(passed, c, 0), axis=1)
    return s_set ^ bits[x], q, seq.at[:, i].set(x)

  # a loop, not d unrolled steps: XLA:CPU fuses the unrolled graph badly
  _, _, seq = lax.fori_loop(0, d, step, (a.astype(jnp.uint32), r_a,
                                         jnp.zeros((m, d), jnp.int32)))
  return seq, size_a


def simplex_coefficients(seq, size_a, up):
  """The (m, d + 2, d + 1) int8 matrix whose row i is vertex i of the object's
  simplex: (1, 1_F0..F_k) for A (F_0 empty, then A's elements' up-sets added top
  down), -(1, 1_G0..G_l) for B. The K-norm noise is ``scale * sum_i E_i row_i``."""
  m, d = seq.shape
  rows = [jnp.zeros((m, d), bool)]       # F_0
  f = jnp.zeros((m, d), bool)
  for step in range(d):
    f = jnp.where((size_a == step)[:, None], False, f) | up[seq[:, step]]
    rows.append(f)
  # row 0: F_0 (A); rows 1..d: chain filters; B's empty G_0 sits at index k + 1
  filt = jnp.stack(rows, axis=1)                                  # (m, d + 1, d)
  idx = jnp.arange(d + 2)
  k = size_a[:, None]
  # vertex i: i <= k -> A's F_i = filt[i]; i == k + 1 -> G_0 (empty); i > k + 1 ->
  # G_(i-k-1) = filt[i - 1]
  src = jnp.where(idx <= k, idx, jnp.maximum(idx - 1, 0))
  chosen = jnp.take_along_axis(filt, src[:, :, None], axis=1)     # (m, d + 2, d)
  chosen = jnp.where((idx == k + 1)[:, :, None], False, chosen)
  sign = jnp.where(idx <= k, 1, -1).astype(jnp.int8)              # (m, d + 2)
  vec = jnp.concatenate([jnp.ones((m, d + 2, 1), jnp.int8), chosen.astype(jnp.int8)],
                        axis=2)
  return vec * sign[:, :, None]


# ------------------------------------------------------------------ discrete Gaussian
MAX_SIGMA = 2047.0      # sigma <= 2^11 - 1 keeps every integer below 2^63
_Y_MAX = 1 << 18        # |Y| above this: C is decided by a lower bound on gamma


def discrete_gaussian(key, shape=(), *, sigma) -> jax.Array:
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


def sigma_quarters(sigma) -> int:
  """a = ceil(4 sigma^2), exactly (sigma^2 as a rational); the sampler's s^2 = a / 4."""
  if not _checks.is_concrete(sigma):
    raise ValueError("sigma must be a static Python number for the discrete Gaussian "
                     "(its integer tables are built on the host).")
  sigma = _checks.check_positive(sigma, "sigma")
  if sigma > MAX_SIGMA:
    raise ValueError(f"sigma must be at most {MAX_SIGMA:g} for the exact discrete "
                     f"Gaussian (64-bit integer arithmetic); got {sigma:g}.")
  from fractions import Fraction
  return max(1, math.ceil(4 * Fraction(sigma) ** 2))


@functools.partial(jax.jit, static_argnames=("quarters", "n"))
def _dg_kernel(key, *, quarters, n):
  with jax.enable_x64(True):
    def chunk(k, m):
      return _discrete_gaussian(k, quarters, m)
    return _chunked(chunk, key, n, (), jnp.int32, CHUNK)


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
  t = math.isqrt(a) // 2 + 1                        # floor(sqrt(a / 4)) + 1
  den = 8 * a * t * t                               # < 2^49 for s < 2^11
  y_max = _Y_MAX
  lower = (4 * t * (y_max + 1) - a) ** 2 // den     # gamma >= this for |Y| > y_max
  P_U, P_D, P_V, P_Y, P_W, P_F, DONE = range(7)
  i64 = jnp.int64
  two62 = i64(1 << 62)

  def uniform(x, q):
    return x < (two62 // q) * q, x % q

  def step(st):
    phase, u, k, v, y, left, frac, big, bad, i = st
    w = jax.random.bits(jax.random.fold_in(key, i), (m, 2, 2), jnp.uint32)
    x1, x2 = _int62(w[:, 0]), _int62(w[:, 1])
    sign = (w[:, 0, 0] >> 31) == 1                 # a bit x1 does not use
    q1 = jnp.where(phase == P_F, i64(den), i64(t))
    ok1, r1 = uniform(x1, q1)
    ok2, r2 = uniform(x2, k)
    hit = r2 == 0                                   # Bernoulli(1 / K)
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
    v = jnp.where(stop & odd, v + 1, v)             # a success: one more
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
    num = z * z                                     # exact: |z| < 2^31
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
    phase_new = jnp.where(stop & ~odd, P_U, phase_new)         # rejected
    survived = empty & big                          # gamma unknown beyond the bound
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
  init = (jnp.full((m,), P_U, jnp.int32), zeros, jnp.ones((m,), i64), zeros, zeros,
          zeros, zeros, jnp.zeros((m,), bool), jnp.asarray(False), jnp.int32(0))
  st = lax.while_loop(lambda st: jnp.any(st[0] != DONE), step, init)
  y, bad = st[4], st[8]
  passed = _raise_if(bad, "exact discrete Gaussian: a candidate beyond 2^18 survived "
                          "2^13 Bernoulli(1/e) trials (probability below e^-8192); "
                          "nothing released.")
  return _checks.mark_invalid(passed, y.astype(jnp.int32))


def _raise_if(flag, message: str):
  """False normally; a run-time error (also under jit) when ``flag`` is True. The
  caller must use the result, or XLA would drop the check."""

  def check(f):
    if np.any(f):
      raise RuntimeError(message)
    return np.ones(np.shape(f), np.bool_)

  return lax.cond(flag, lambda: jax.pure_callback(
      check, jax.ShapeDtypeStruct((), jnp.bool_), flag, vmap_method="broadcast_all"),
                  lambda: jnp.ones((), bool))


# ------------------------------------------------------------------ host refinement
_CTX = decimal.Context(prec=HOST_DIGITS, rounding=decimal.ROUND_HALF_EVEN)
_TOTAL_BITS = FAST_BITS + 32 * REFINE_WORDS   # 244
_SLACK = decimal.Decimal("1e-80")


def _refined_exponential(j: int, extra) -> tuple[decimal.Decimal, decimal.Decimal]:
  """[E_lo, E_hi] for E = -log(1 - V), V's first 244 digits = j (52) then extra."""
  big = j
  for w in extra:
    big = (big << 32) | int(w)
  top = 1 << _TOTAL_BITS
  if top - big - 1 <= 0:
    raise RuntimeError("exact noise: a uniform could not be bounded away from 1 with "
                       "244 bits (probability 2^-244); nothing was released.")
  ln_top = _CTX.multiply(_TOTAL_BITS, _CTX.ln(decimal.Decimal(2)))
  e_lo = _CTX.subtract(ln_top, _CTX.ln(decimal.Decimal(top - big)))
  e_hi = _CTX.subtract(ln_top, _CTX.ln(decimal.Decimal(top - big - 1)))
  return e_lo - _SLACK, e_hi + _SLACK


def refine_sample(words, extra, scale: float, coeff) -> np.ndarray:
  """Exact rounding of one sample from 244 digits per uniform, in ``decimal``.

  Args:
    words: (M, 2) uint32, the fast pass's words; extra: (M, REFINE_WORDS) uint32;
    scale: the float64 scale (used exactly); coeff: (M, D) integer coefficients.

  Raises:
    RuntimeError: still unsettled (probability below 2^-150).
  """
  bounds = []
  for w, x in zip(words, extra):
    bounds.append(_refined_exponential(_digits(w), x))
  b = decimal.Decimal(float(scale))
  out = []
  for c in np.asarray(coeff).T:
    lo = hi = decimal.Decimal(0)
    for ci, (e_lo, e_hi) in zip(c, bounds):
      if ci > 0:
        lo, hi = lo + e_lo, hi + e_hi
      elif ci < 0:
        lo, hi = lo - e_hi, hi - e_lo
    out.append(_settled_integer(lo, hi, b))
  return np.asarray(out, np.int64)


def refine_linf_sample(words, extra, scale: float, num_exp: int) -> np.ndarray:
  """:func:`refine_sample` for l_inf noise ``scale * R * Z``: the first ``num_exp``
  rows are R's exponentials, the others the cube's uniforms."""
  r_lo = r_hi = decimal.Decimal(0)
  for w, x in zip(words[:num_exp], extra[:num_exp]):
    e_lo, e_hi = _refined_exponential(_digits(w), x)
    r_lo, r_hi = r_lo + e_lo, r_hi + e_hi
  b = decimal.Decimal(float(scale))
  top = decimal.Decimal(1 << (_TOTAL_BITS - 1))
  out = []
  for w, x in zip(words[num_exp:], extra[num_exp:]):
    big = _digits(w)
    for v in x:
      big = (big << 32) | int(v)
    z_lo = _CTX.divide(big, top) - 1 - _SLACK          # Z = 2U - 1, U = big / 2^244
    z_hi = _CTX.divide(big + 1, top) - 1 + _SLACK
    corners = [_CTX.multiply(r, z) for r in (r_lo, r_hi) for z in (z_lo, z_hi)]
    out.append(_settled_integer(min(corners), max(corners), b))
  return np.asarray(out, np.int64)


def _digits(w) -> int:
  return (int(w[0]) << 20) | (int(w[1]) >> 12)


def _settled_integer(lo, hi, b) -> int:
  """round(b x) for x in [lo, hi] (decimal), or an error if the interval straddles."""
  half = decimal.Decimal("0.5")
  lo, hi = _CTX.multiply(lo, b) - _SLACK, _CTX.multiply(hi, b) + _SLACK
  mid = _CTX.add(_CTX.divide(_CTX.add(lo, hi), 2), half)
  k = int(mid.to_integral_value(rounding=decimal.ROUND_FLOOR))
  if not (k - half < lo and hi < k + half):
    raise RuntimeError("exact noise: a sample could not be settled with 244 bits per "
                       "uniform (probability below 2^-150); nothing was released.")
  return k


def _host_refine(refine_one, k, settled, words, extra, scale, *operands):
  """Host callback: ``refine_one`` for every unsettled sample with a valid scale."""
  k, settled = np.array(k), np.asarray(settled)
  words, extra = np.asarray(words), np.asarray(extra)
  operands = [np.asarray(o) for o in operands]
  scale = np.asarray(scale, np.float64)
  scale = np.broadcast_to(scale.reshape(scale.shape + (1,) * (settled.ndim - scale.ndim)),
                          settled.shape)
  for idx in zip(*np.nonzero(~settled & (scale > 0))):  # NaN scale: sentinel output
    k[idx] = refine_one(words[idx], extra[idx], float(scale[idx]),
                        *[o[idx] for o in operands])
  if np.any(np.abs(k) >= LIMIT):
    raise RuntimeError("exact noise beyond +-2^30 (scale too large); nothing released.")
  return k.astype(np.int32)
