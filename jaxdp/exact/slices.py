"""Exactly uniform points of the cube slice S(d, k) = {x in [0, 1]^d : sum(x) <= k},
every rejection decided on exact binary fractions.

The uniforms U_1..U_d (and W, for one Bernoulli trial) are reals whose binary digits
are random bits; a decision reads their first b digits as integers J (U lies in
[J, J + 1) 2^-b) and is either decided exactly or left undecided, to be decided
again from more digits of the *same* uniforms (b = 52 on the device, 244 on the
host; W: 64, then 256). No float and no transcendental function enters a decision.

Two proposals, chosen on the host for each (d, k) by their exact acceptance
probabilities (:func:`slice_plan`):

* the cube (``a = 0``): x = U, accepted when sum(x) <= k. With s = sum(J), the sum
  lies in (s, s + d) 2^-b: accepted when s + d <= k 2^b, rejected when s >= k 2^b.
* the wrapped simplex (``a >= k``, :func:`~jaxdp.samplers.cube_slice.shuffle_proposal`):
  the spacings D_i = U_(i) - U_(i-1) of the sorted uniforms (U_(0) = 0) are a
  uniform point of the simplex {D >= 0, sum(D) <= 1}, and x = frac(a D) has density
  proportional to C(a + d - 1 - I, d), I = floor(sum(x)). Accepting when I < k and
  W < p_I = C(a + d - k, d) / C(a + d - 1 - I, d) (p_(k-1) = 1) leaves x uniform in
  S(d, k). Since floor is monotone, U_(i) lies in [J_(i), J_(i) + 1) 2^-b with J_(i)
  the i-th smallest J (ties need no care), so a D_i lies in
  (a (delta_i - 1), a (delta_i + 1)) 2^-b, delta_i = J_(i) - J_(i-1): n_i =
  floor(a D_i) is decided when that interval has one floor, and then x_i = a D_i - n_i
  lies in an exact interval, I is decided when the sum of those intervals has one
  floor, and W < p_I when W's first digits differ from p_I's (``floor(p_I 2^b)``, kept
  to 256 bits on the host).

An undecided proposal (probability about d a 2^-b) is decided again from more digits;
undecided at 244 digits (below 2^-180), it is an error, never a guess. The device's
integers stay in int64: a <= ``MAX_WRAP`` = 2047 keeps every a (delta + 1) below
2047 2^52 < 2^63, and d <= ``MAX_SLICE_D`` = 1024 every sum of d interval ends (each
below 2^52 + 2a) below 2^63.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 7.
  R. Pyke, "Spacings", JRSS B 27(3), 1965 (uniform spacings are Dirichlet(1, ..., 1)).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache
from jaxdp.exact.intervals import FAST_BITS
from jaxdp.samplers.cube_slice import log_slice_volumes

__all__ = [
  "MAX_SLICE_D",
  "MAX_WRAP",
  "SlicePlan",
  "decide_exact",
  "decide_fast",
  "slice_plan",
]

MAX_SLICE_D = 1024  # the largest slice dimension (int64 sums on the device)
MAX_WRAP = 2047  # the largest wrapping factor a (a (delta + 1) < 2^63 at 52 digits)
P_BITS = 256  # binary digits of each p_I kept on the host
W_FAST_BITS = 64  # digits of W read on the device (two words)
REJECT, ACCEPT, UNDECIDED = 0, 1, 2


class SlicePlan(NamedTuple):
  """The proposal for S(d, k) (hashable: a static jit argument).

  Attributes:
    d: the dimension; k: the bound on the sum.
    a: 0 for the cube, else the wrapping factor (k <= a <= ``MAX_WRAP``).
    p_top: floor(p_I 2^64) for I < k - 1 (empty for the cube); p_(k-1) = 1.
    p_full: floor(p_I 2^256) for I < k - 1 (the host's digits).
    log_acc: log of the exact acceptance probability (float64).
  """

  d: int
  k: int
  a: int
  p_top: tuple[int, ...]
  p_full: tuple[int, ...]
  log_acc: float


def _log_comb(n, r):
  return math.lgamma(n + 1) - math.lgamma(r + 1) - math.lgamma(n - r + 1)


@value_cache(maxsize=None)
def slice_plan(d: int, k: int, a: int | None = None) -> SlicePlan:
  """The proposal with the larger acceptance for S(d, k): the cube, or the wrapped
  simplex with the best a in [k, ``MAX_WRAP``] (the acceptance is unimodal in a).

  Args:
    d, k: the slice, 1 <= k <= d <= ``MAX_SLICE_D``.
    a: None (the choice above), or the proposal to use: 0 for the cube, else the
      wrapping factor, k <= a <= ``MAX_WRAP`` (every one gives exactly uniform
      points; they differ in acceptance).

  Raises:
    ValueError: d, k or a out of range.
  """
  if not 1 <= k <= d <= MAX_SLICE_D or not (a in (None, 0) or k <= a <= MAX_WRAP):
    raise ValueError(
      f"exact cube-slice points need 1 <= k <= d <= {MAX_SLICE_D} and a = 0 or "
      f"k <= a <= {MAX_WRAP}; got d = {d}, k = {k}, a = {a}."
    )
  logvol = float(log_slice_volumes(d, k)[d])

  def log_acc(a):
    return logvol + math.lgamma(d + 1) + _log_comb(a + d - k, d) - d * math.log(a)

  if a is None:
    a = k
    while a < MAX_WRAP and log_acc(a + 1) > log_acc(a):
      a += 1
    a = 0 if k == d or logvol >= log_acc(a) else a
  if a == 0:
    return SlicePlan(d, k, 0, (), (), logvol)
  top = math.comb(a + d - k, d)
  full = tuple((top << P_BITS) // math.comb(a + d - 1 - i, d) for i in range(k - 1))
  return SlicePlan(d, k, a, tuple(p >> (P_BITS - 64) for p in full), full, log_acc(a))


def decide_fast(j, w, plan: SlicePlan):
  """The device's decisions from 52 digits per uniform (call in the x64 scope).

  Args:
    j: (m, d) int64, each uniform's first 52 digits (U in [j, j + 1) 2^-52).
    w: (m,) uint64, W's first 64 digits.
    plan: :func:`slice_plan`'s proposal.

  Returns:
    ``(status, x_lo, x_hi)``: status (m,) int32 (``REJECT``, ``ACCEPT`` or
    ``UNDECIDED``); x_lo, x_hi (m, d) int64 with x_i in [x_lo, x_hi] 2^-52 (exact;
    meaningful where accepted).
  """
  b, k = FAST_BITS, plan.k
  bound = jnp.int64(k) << b
  if plan.a == 0:
    x_lo, x_hi = j, j + 1
    s_lo, s_hi = jnp.sum(x_lo, axis=1), jnp.sum(x_hi, axis=1)
    status = jnp.where(s_hi <= bound, ACCEPT, jnp.where(s_lo >= bound, REJECT, UNDECIDED))
    return status.astype(jnp.int32), x_lo, x_hi
  js = jnp.sort(j, axis=1)
  delta = js - jnp.concatenate([jnp.zeros_like(js[:, :1]), js[:, :-1]], axis=1)
  lo, hi = plan.a * (delta - 1), plan.a * (delta + 1)
  n = lo >> b  # arithmetic shift: floor(lo / 2^b)
  n_ok = jnp.all(hi <= (n + 1) << b, axis=1)
  x_lo, x_hi = lo - (n << b), hi - (n << b)
  s_lo, s_hi = jnp.sum(x_lo, axis=1), jnp.sum(x_hi, axis=1)
  i = s_lo >> b
  i_ok = n_ok & (s_hi <= (i + 1) << b) & (i < k)
  if k > 1:
    p = jnp.asarray(np.array(plan.p_top, np.uint64))[jnp.clip(i, 0, k - 2)]
    always = i >= k - 1
    win, lose = always | (w < p), ~always & (w > p)
  else:
    win, lose = jnp.ones_like(i_ok), jnp.zeros_like(i_ok)
  reject = (n_ok & (s_lo >= bound)) | (i_ok & lose)
  status = jnp.where(i_ok & win, ACCEPT, jnp.where(reject, REJECT, UNDECIDED))
  return status.astype(jnp.int32), x_lo, x_hi


def decide_exact(
  digits: list[int], bits: int, w: int, w_bits: int, plan: SlicePlan
) -> tuple[int, list[int], list[int]]:
  """:func:`decide_fast` in Python integers from any number of digits.

  Args:
    digits: each uniform's first ``bits`` digits as an integer.
    bits: their number; w: W's first ``w_bits`` digits (``w_bits <= P_BITS``).
    plan: the proposal.

  Returns:
    ``(status, x_lo, x_hi)``: x_i in [x_lo[i], x_hi[i]] 2^-bits (exact).
  """
  k, one = plan.k, 1 << bits
  if plan.a == 0:
    x_lo, x_hi = list(digits), [v + 1 for v in digits]
    if sum(x_hi) <= k * one:
      return ACCEPT, x_lo, x_hi
    return (REJECT if sum(x_lo) >= k * one else UNDECIDED), x_lo, x_hi
  js = sorted(digits)
  x_lo, x_hi, n_ok = [], [], True
  for prev, cur in zip([0, *js[:-1]], js):
    lo, hi = plan.a * (cur - prev - 1), plan.a * (cur - prev + 1)
    n = lo >> bits
    n_ok &= hi <= (n + 1) << bits
    x_lo.append(lo - (n << bits))
    x_hi.append(hi - (n << bits))
  if not n_ok:
    return UNDECIDED, x_lo, x_hi
  s_lo, s_hi = sum(x_lo), sum(x_hi)
  if s_lo >= k * one:
    return REJECT, x_lo, x_hi
  i = s_lo >> bits
  if s_hi > (i + 1) << bits:
    return UNDECIDED, x_lo, x_hi
  if i == k - 1:
    return ACCEPT, x_lo, x_hi
  p = plan.p_full[i] >> (P_BITS - w_bits)  # floor(p_I 2^w_bits)
  if w == p:
    return UNDECIDED, x_lo, x_hi
  return (ACCEPT if w < p else REJECT), x_lo, x_hi
