"""Exactly rounded K-norm noise for the vote ball conv(P u -P), P the permutohedron
of (0, 1, ..., d - 1).

The ideal noise is ``scale * R * Z``: R ~ Gamma(d + 1) (a sum of d + 1
exponentials) and Z uniform in the ball, the prism P + [-(d - 1), 0] 1, as the float
sampler draws it (:mod:`jaxdp.samplers.vote_ball`): with v uniform in [0, 1)^d and
t uniform in [0, 1), lift (subtract 1 from) the k largest v_i for the k in
0..d - 1 that minimises the spread of r = v - lift (the nearest point of A*_(d-1),
McKilliam, Clarkson & Quinn), and

  Z_i = d (r_i - mean(r)) + (d - 1)(1/2 - t)
      = (d - 1) v_i - sum_(j != i) v_j - d lift_i + k + (d - 1)/2 - (d - 1) t,

linear in the uniforms with integer coefficients. The choice of k is exact: with
the v_i sorted in decreasing order and V = sum(v), d times the spread after k
lifts, less the spread with none, is ``d C_k = -2 d (v_(1) + ... + v_(k)) + 2 k V +
k (d - k)``, a linear form, so from U's first b binary digits J (v in [J, J + 1)
2^-b) each d C_k lies in an integer interval. k is decided when one interval lies
below all the others and the k-th and (k+1)-th largest J differ (then the lifted
set is the elements with J above the (k+1)-th largest: the top k by value). The
device decides from 32 digits (``d C_k 2^32`` below 2^63 for d <= ``MAX_VOTE_D``),
the host from 244 of the same uniforms; still undecided (probability below
2^-200), an error. Z's interval is computed in float64 from 52 digits and R's
interval; the widening ``MARGIN * scale * R_hi * 2d`` bounds every float64 rounding
(magnitudes below 4d, a few operations, and the products), and the settled
coordinates are the exact rounding; the others are recomputed on the host.

Rows of a sample's words (two words per uniform): 0..d R's exponentials, d + 1..2d
the v_i, 2d + 1 t.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 9.
  R. G. McKilliam, I. V. L. Clarkson, B. G. Quinn, "An algorithm to compute the
  nearest point in the lattice A*_n", IEEE Trans. Inf. Theory 54 (2008).
"""

from __future__ import annotations

import decimal
import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.exact.intervals import FAST_BITS, digits52, exp_intervals, round_settled
from jaxdp.exact.limits import max_scale
from jaxdp.exact.refine import (
  refine_gamma_bounds,
  settle,
  settled_integer,
  uniform_digits,
)
from jaxdp.exact.samplers import CHUNK, check_scale, run_chunks, scale_arg
from jaxdp.prng.threefry import fast_key
from jaxdp.typing import KeyArray, Shape

__all__ = ["MAX_VOTE_D", "host_lift", "refine_vote_sample", "vote_knorm", "vote_lift"]

MAX_VOTE_D = 1024  # the largest dimension of exact vote-ball noise
CHOICE_BITS = 32  # digits of each v_i the device's choice of k reads (one word)


def vote_knorm(key: KeyArray, d: int, scale: float, shape: Shape = ()) -> jax.Array:
  """Exactly rounded K-norm noise for the vote ball ``VoteBall(d)``, int32
  ``(*shape, d)``.

  Args:
    key: one PRNG key (use :func:`jaxdp.random.secure_key` for a release).
    d: the number of candidates, 2 <= d <= ``MAX_VOTE_D``.
    scale: sensitivity / eps; Python number or traced scalar. The ball lies in
      [-(d - 1), d - 1]^d, so ``scale * (d - 1)`` must be at most
      ``max_scale(d)`` (:mod:`jaxdp.exact.limits`); a bad traced value yields the
      sentinel ``INT32_MIN`` everywhere.
    shape: batch shape.

  Raises:
    ValueError: d or a static scale out of range, or a traced scale that is not a
      scalar (before anything is drawn).
    TypeError: a scale that is not a real number (a complex one, say).
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  d = _checks.check_int(d, "d", minimum=2)
  if d > MAX_VOTE_D:
    raise ValueError(f"exact vote-ball noise needs 2 <= d <= {MAX_VOTE_D}; got d = {d}.")
  # read once (the value checked is the value drawn with); a traced scale must be a
  # real scalar (a vector would broadcast one scale per sample or coordinate)
  scale = _checks.check_positive(scale, "scale", allow_traced=True)
  if _checks.is_concrete(scale):
    check_scale(scale * (d - 1), d)
  with jax.enable_x64(True):
    out = _vote_kernel(key, scale_arg(scale), d=d, n=math.prod(shape))
  return out.reshape(*shape, d)


@functools.partial(jax.jit, static_argnames=("d", "n"))
def _vote_kernel(key, s, *, d, n):
  with jax.enable_x64(True):
    scale = jnp.where((s > 0) & (s * (d - 1) <= max_scale(d)), s, jnp.nan)  # NaN: sentinel

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, 2 * d + 2, 2), jnp.uint32)
      k, settled = vote_round(words, scale, d)
      refine = functools.partial(refine_vote_sample, d=d)
      return settle(k, settled, words, scale, k_ref, refine)

    size = int(max(64, min(CHUNK, (1 << 21) // (2 * d + 2))))
    return run_chunks(chunk, key, scale, n, (d,), size)


def vote_lift(j, bits: int):
  """The exact choice of the lifted set from each v's first ``bits`` digits ``j``
  (m, d) int64 (call in the x64 scope): (lift (m, d) bool, k (m,), decided (m,))."""
  m, d = j.shape
  js = -jnp.sort(-j, axis=1)  # decreasing
  one = jnp.int64(1) << bits
  ks = jnp.arange(d, dtype=jnp.int64)  # k = 0..d-1
  prefix = jnp.concatenate([jnp.zeros((m, 1), jnp.int64), jnp.cumsum(js, axis=1)], 1)
  p_lo, p_hi = prefix[:, :d], prefix[:, :d] + ks  # sum of the k largest
  v_lo = prefix[:, d:]
  v_hi = v_lo + d
  base = ks * (d - ks) * one
  c_lo = -2 * d * p_hi + 2 * ks * v_lo + base
  c_hi = -2 * d * p_lo + 2 * ks * v_hi + base
  # the first minimiser (not jnp.argmin, whose lowering under a caller's jit runs
  # outside the x64 scope)
  k = jnp.min(jnp.where(c_lo == jnp.min(c_lo, axis=1, keepdims=True), ks, d), axis=1)
  top = jnp.take_along_axis(c_hi, k[:, None], axis=1)
  others = jnp.where(ks[None, :] == k[:, None], jnp.iinfo(jnp.int64).max, c_lo)
  at = lambda i: jnp.take_along_axis(js, jnp.clip(i, 0, d - 1)[:, None], axis=1)[:, 0]
  gap = (k == 0) | (at(k - 1) > at(k))
  decided = (top[:, 0] < jnp.min(others, axis=1)) & gap
  lift = (k[:, None] > 0) & (j > at(k)[:, None])
  return lift, k, decided


def vote_round(words, scale, d: int):
  """The fast pass: words (m, 2d + 2, 2) -> (k (m, d) int32, settled (m,))."""
  e_lo, e_hi = exp_intervals(words[:, : d + 1])
  r_lo = jnp.sum(e_lo, axis=1, keepdims=True)
  r_hi = jnp.sum(e_hi, axis=1, keepdims=True)
  vw = words[:, d + 1 : 2 * d + 1]
  lift, k, decided = vote_lift(vw[..., 0].astype(jnp.int64), CHOICE_BITS)
  unit = 2.0**-FAST_BITS
  v_lo = digits52(vw) * unit  # exact
  v_hi = v_lo + unit
  t_lo = digits52(words[:, 2 * d + 1])[:, None] * unit
  t_hi = t_lo + unit
  s_lo = jnp.sum(v_lo, axis=1, keepdims=True)
  s_hi = jnp.sum(v_hi, axis=1, keepdims=True)
  const = -d * lift + k[:, None] + (d - 1) / 2
  z_lo = d * v_lo - s_hi - (d - 1) * t_hi + const
  z_hi = d * v_hi - s_lo - (d - 1) * t_lo + const
  corners = jnp.stack([r_lo * z_lo, r_lo * z_hi, r_hi * z_lo, r_hi * z_hi])
  out, settled = round_settled(
    jnp.min(corners, 0), jnp.max(corners, 0), r_hi * (2 * d), scale
  )
  return out, jnp.all(settled, axis=1) & decided


def refine_vote_sample(words: np.ndarray, extra: np.ndarray, scale: float, d: int):
  """Exact rounding of one sample from 244 digits per uniform, in Python integers
  (the choice of k and Z's interval) and ``decimal`` (R and the products).

  Raises:
    RuntimeError: the choice still undecided, or a coordinate still unsettled.
  """
  digits = [uniform_digits(w, x) for w, x in zip(words[d + 1 :], extra[d + 1 :])]
  bits = digits[0][1]
  v = [big for big, _ in digits[:d]]
  t = digits[d][0]
  lift, k, decided = host_lift(v, bits)
  if not decided:
    raise RuntimeError(
      "exact noise: the vote ball's lattice rounding could not be decided with 244 "
      "bits per uniform (probability below 2^-200); nothing was released."
    )
  total = sum(v)
  r_lo, r_hi = refine_gamma_bounds(words[: d + 1], extra[: d + 1])
  unit = decimal.Decimal(2) ** -bits
  b = decimal.Decimal(float(scale))
  out = []
  for i in range(d):
    const = ((-d * int(lift[i]) + int(k)) << bits) + ((d - 1) << (bits - 1))
    lo = d * v[i] - (total + d) - (d - 1) * (t + 1) + const  # units 2^-bits, exact
    hi = d * (v[i] + 1) - total - (d - 1) * t + const
    z = (lo * unit, hi * unit)
    corners = [r * zz for r in (r_lo, r_hi) for zz in z]
    out.append(settled_integer(min(corners), max(corners), b))
  return np.asarray(out, np.int64)


def host_lift(v, bits):
  """:func:`vote_lift` in Python integers, for one sample of any digit count."""
  d = len(v)
  order = sorted(v, reverse=True)
  prefix = [0]
  for x in order:
    prefix.append(prefix[-1] + x)
  total, one = prefix[-1], 1 << bits
  c_lo = [-2 * d * (prefix[k] + k) + 2 * k * total + k * (d - k) * one for k in range(d)]
  c_hi = [-2 * d * prefix[k] + 2 * k * (total + d) + k * (d - k) * one for k in range(d)]
  k = min(range(d), key=c_lo.__getitem__)
  decided = all(c_hi[k] < c_lo[j] for j in range(d) if j != k)
  decided &= k == 0 or order[k - 1] > order[k]
  lift = [k > 0 and x > order[k] for x in v]
  return lift, k, decided
