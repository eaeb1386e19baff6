"""The exact discrete steps of count-ball noise: the orthant class, the positive
coordinates, and the two cube-slice points of per-row sizes.

In the orthant whose j positive coordinates form the set P, the count ball's norm
is g(a) + g(b) (v = (a, -b), g(x) = max(||x||_inf, ||x||_1 / k)), so the K-norm
density exp(-g(a)) exp(-g(b)) factorises: a = G x and b = G' y with G ~ Gamma(j + 1),
G' ~ Gamma(d - j + 1) and x, y uniform in the slices S(j, k), S(d - j, k), all
independent. The orthant's mass is j! vol S(j, k) (d - j)! vol S(d - j, k), so the
class j (of C(d, j) orthants) has the integer weight
w_j = C(d, j) E(j) E(d - j), E(m) = m! vol S(m, k) = sum_(i < k) A(m, i) (Eulerian
numbers; E(m) = m! for m <= k).

* Class: a uniform V read as 256 binary digits is compared with
  T_j = floor(2^256 (w_0 + ... + w_j) / W); j = #{T_j < V} is exact unless V equals
  some T_j (probability below (d + 1) 2^-256: an error, never a guess).
* P: the j coordinates with the smallest 64-bit keys; when the j-th and (j+1)-th
  smallest keys tie, all keys are drawn again (the tie event is symmetric in the
  coordinates, so the set stays exactly uniform).
* Slices: one proposal per slice (:mod:`jaxdp.exact.slices`, the plan of each size
  m = j or d - j gathered from a (d + 1)-row table), accepted when both are; the
  positive slice reads the uniforms of P's coordinates, the negative one the rest.
  The wrapped simplex's spacings are sorted per part (the negative part's digits
  offset by 2^53) and its i-th point coordinate goes to the part's i-th coordinate
  in index order (the slice is symmetric, so any fixed assignment is uniform).

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 8.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp._cache import value_cache
from jaxdp.exact.intervals import FAST_BITS
from jaxdp.exact.slices import (
  ACCEPT,
  REJECT,
  UNDECIDED,
  SlicePlan,
  decide_exact,
  slice_plan,
)

__all__ = ["CountPlans", "class_weights", "count_plans", "decide_two", "decide_two_exact"]

CLASS_BITS = 256  # binary digits of the class uniform (8 words)


class CountPlans(NamedTuple):
  """The static tables of CountBall(d, k) (hashable: a static jit argument).

  Attributes:
    d, k: the ball.
    plans: the slice plan of each size m = 0..d (the cube for m <= k).
    thresholds: T_j = floor(2^256 (w_0 + ... + w_j) / W), j < d, as 8 uint32 words
      each (most significant first).
  """

  d: int
  k: int
  plans: tuple[SlicePlan | None, ...]
  thresholds: tuple[tuple[int, ...], ...]


@value_cache(maxsize=None)
def class_weights(d: int, k: int) -> tuple[int, ...]:
  """The exact integer weights w_j = C(d, j) E(j) E(d - j), j = 0..d (module
  docstring), E from the Eulerian recurrence A(m, i) = (i + 1) A(m - 1, i) +
  (m - i) A(m - 1, i - 1) over i < k."""
  row, e = [1], [1]  # A(0, .) = [1]; E(0) = 1
  for m in range(1, d + 1):
    row = [
      (i + 1) * (row[i] if i < len(row) else 0) + (m - i) * (row[i - 1] if i else 0)
      for i in range(min(m, k))
    ]
    e.append(sum(row))
  return tuple(math.comb(d, j) * e[j] * e[d - j] for j in range(d + 1))


@value_cache(maxsize=None)
def count_plans(d: int, k: int) -> CountPlans:
  """The slice plans and the class thresholds of CountBall(d, k) (1 <= k <= d <= 1024)."""
  w = class_weights(d, k)
  total, run, thresholds = sum(w), 0, []
  for j in range(d):
    run += w[j]
    t = (run << CLASS_BITS) // total
    thresholds.append(tuple((t >> (32 * (7 - i))) & 0xFFFFFFFF for i in range(8)))
  plans = tuple(slice_plan(m, min(m, k)) for m in range(1, d + 1))
  return CountPlans(d, k, (None, *plans), tuple(thresholds))


def choose_class(v, tab: CountPlans):
  """The class j (m,) int32 from the class uniforms ``v`` (m, 8) uint32 words, and
  whether some T_j equals V (undecided)."""
  t = jnp.asarray(np.array(tab.thresholds, np.uint32).reshape(-1, 8))  # (d, 8)
  vv, tt = v[:, None, :], t[None]
  eq = vv == tt
  before = jnp.cumprod(jnp.concatenate([jnp.ones_like(eq[..., :1]), eq[..., :-1]], -1), -1)
  greater = jnp.any(before.astype(bool) & (vv > tt), axis=-1)
  tie = jnp.any(jnp.all(eq, axis=-1), axis=1)
  return jnp.sum(greater, axis=1, dtype=jnp.int32), tie


def choose_subset(key, cls, d: int):
  """The positive coordinates (m, d) bool: the ``cls`` coordinates with the smallest
  64-bit keys, all keys of a row drawn again (fold_in(key_t, attempt)) while its
  cls-th and (cls + 1)-th smallest tie. ``key`` holds one key per row."""

  def keys(attempt):
    w = jax.vmap(
      lambda k: jax.random.bits(jax.random.fold_in(k, attempt), (d, 2), jnp.uint32)
    )(key)
    w = w.astype(jnp.uint64)
    return (w[..., 0] << np.uint64(32)) | w[..., 1]

  def split(u):
    s = jnp.sort(u, axis=1)
    top = jnp.take_along_axis(s, jnp.clip(cls, 0, d - 1)[:, None], axis=1)[:, 0]
    below = jnp.take_along_axis(s, jnp.clip(cls - 1, 0, d - 1)[:, None], axis=1)[:, 0]
    tie = (cls > 0) & (cls < d) & (below == top)
    pos = jnp.where((cls >= d)[:, None], True, u < top[:, None])
    return pos, tie

  def body(state):
    pos, tie, attempt = state
    new_pos, new_tie = split(keys(attempt))
    return jnp.where(tie[:, None], new_pos, pos), tie & new_tie, attempt + 1

  pos, tie = split(keys(0))
  pos, _, _ = lax.while_loop(lambda s: jnp.any(s[1]), body, (pos, tie, jnp.int32(1)))
  return pos


def decide_two(j52, pos, cls, w_pos, w_neg, tab: CountPlans):
  """The device's decisions on both slices from 52 digits per uniform (x64 scope).

  Args:
    j52: (m, d) int64, each coordinate's uniform's first 52 digits.
    pos: (m, d) bool, the positive coordinates; cls: (m,) their number.
    w_pos, w_neg: (m,) uint64, the two Bernoulli uniforms' first 64 digits.

  Returns:
    ``(status, x_lo, x_hi)``: status (m,) int32; x_lo, x_hi (m, d) int64 with each
    coordinate's slice value in [x_lo, x_hi] 2^-52 (meaningful where accepted).
  """
  d, k, b = tab.d, tab.k, FAST_BITS
  a_tab = jnp.asarray(np.array([p.a if p else 0 for p in tab.plans], np.int64))
  width = max(k - 1, 1)
  p_rows = [
    list(p.p_top) + [0] * (width - len(p.p_top)) if p else [0] * width for p in tab.plans
  ]
  p_tab = jnp.asarray(np.array(p_rows, np.uint64))
  sizes = (cls, d - cls)
  off = jnp.int64(1) << (b + 1)
  q = jnp.arange(d)[None, :]
  first = q < cls[:, None]  # sorted positions of the positive part
  js = jnp.sort(j52 + jnp.where(pos, 0, off), axis=1) - jnp.where(first, 0, off)
  prev = jnp.concatenate([jnp.zeros_like(js[:, :1]), js[:, :-1]], axis=1)
  prev = jnp.where((q == 0) | (q == cls[:, None]), 0, prev)
  a_q = jnp.where(first, a_tab[cls][:, None], a_tab[d - cls][:, None])
  lo, hi = a_q * (js - prev - 1), a_q * (js - prev + 1)
  n = lo >> b
  n_ok = hi <= (n + 1) << b
  place = jnp.where(
    pos, jnp.cumsum(pos, axis=1) - 1, cls[:, None] + jnp.cumsum(~pos, axis=1) - 1
  )
  w_lo = jnp.take_along_axis(lo - (n << b), place, axis=1)
  w_hi = jnp.take_along_axis(hi - (n << b), place, axis=1)
  wrapped = jnp.where(pos, a_tab[cls][:, None], a_tab[d - cls][:, None]) > 0
  x_lo, x_hi = jnp.where(wrapped, w_lo, j52), jnp.where(wrapped, w_hi, j52 + 1)
  bound = jnp.int64(k) << b
  status = []
  for part, size, w, in_part in zip((pos, ~pos), sizes, (w_pos, w_neg), (first, ~first)):
    s_lo = jnp.sum(jnp.where(part, x_lo, 0), axis=1)
    s_hi = jnp.sum(jnp.where(part, x_hi, 0), axis=1)
    cube = jnp.where(s_hi <= bound, ACCEPT, jnp.where(s_lo >= bound, REJECT, UNDECIDED))
    nok = jnp.all(n_ok | ~in_part, axis=1)
    i = s_lo >> b
    i_ok = nok & (s_hi <= (i + 1) << b) & (i < k)
    p = p_tab[size, jnp.clip(i, 0, width - 1)]
    always = i >= k - 1
    win, lose = always | (w < p), ~always & (w > p)
    reject = (nok & (s_lo >= bound)) | (i_ok & lose)
    wrap = jnp.where(i_ok & win, ACCEPT, jnp.where(reject, REJECT, UNDECIDED))
    status.append(jnp.where(a_tab[size] > 0, wrap, cube))
  both = jnp.where(
    (status[0] == REJECT) | (status[1] == REJECT),
    REJECT,
    jnp.where((status[0] == ACCEPT) & (status[1] == ACCEPT), ACCEPT, UNDECIDED),
  )
  return both.astype(jnp.int32), x_lo, x_hi


def decide_two_exact(
  digits: list[int], bits: int, pos, w_pos: int, w_neg: int, w_bits: int, tab: CountPlans
) -> tuple[int, list[int], list[int]]:
  """:func:`decide_two` in Python integers from any number of digits
  (:func:`~jaxdp.exact.slices.decide_exact` on each part)."""
  d = tab.d
  x_lo, x_hi = [0] * d, [0] * d
  status = []
  for mask, w in ((pos, w_pos), ([not p for p in pos], w_neg)):
    idx = [i for i in range(d) if mask[i]]
    if not idx:
      status.append(ACCEPT)
      continue
    s, lo, hi = decide_exact([digits[i] for i in idx], bits, w, w_bits, tab.plans[len(idx)])
    for i, a, b in zip(idx, lo, hi):
      x_lo[i], x_hi[i] = a, b
    status.append(s)
  if REJECT in status:
    return REJECT, x_lo, x_hi
  return (ACCEPT if status == [ACCEPT, ACCEPT] else UNDECIDED), x_lo, x_hi
