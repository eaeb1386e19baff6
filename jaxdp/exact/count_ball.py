"""Exactly rounded K-norm noise for the count ball ``CountBall(d, k)``.

The ideal noise is ``scale * (G x on P, -G' y off P)`` (:mod:`jaxdp.exact.count_slices`:
the class j and the set P of positive coordinates chosen exactly, x, y uniform in
the slices S(j, k), S(d - j, k), G a sum of j + 1 exponentials, G' of d - j + 1).
Each coordinate is rounded to the nearest integer exactly, from the product of G's
(or G''s) interval and the slice value's exact interval, as for the sum ball.

Sample t's key splits into the key of its choices (8 class words; P's keys) and the
key of its proposals. Proposal r (key fold_in(., r), split as the sum ball's into
the key of its words and of their further digits) is ``2d + 4`` uniforms: rows
0..d - 1 coordinate i's exponential (in G if i is in P, else in G'), rows d, d + 1
the extra exponential of G and G', rows d + 2..2d + 1 coordinate i's slice
uniform, rows 2d + 2, 2d + 3 the Bernoulli uniforms of the positive and the
negative slice.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 8.
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
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
from jaxdp.exact.count_slices import (
  CountPlans,
  choose_class,
  choose_subset,
  count_plans,
  decide_two,
  decide_two_exact,
)
from jaxdp.exact.intervals import FAST_BITS, digits52, exp_intervals, round_settled
from jaxdp.exact.refine import (
  REFINE_WORDS,
  batch_all,
  raise_if,
  refine_callback,
  refine_exponential_bounds,
  settled_integer,
  uniform_digits,
)
from jaxdp.exact.samplers import check_scale, run_chunks, scale64, scale_arg
from jaxdp.exact.slices import ACCEPT, MAX_SLICE_D, UNDECIDED, W_FAST_BITS
from jaxdp.exact.sum_ball import (
  extra_words,
  first_accepted,
  proposal_digit_key,
  sum_chunk,
)
from jaxdp.prng.threefry import fast_key
from jaxdp.typing import KeyArray, Shape

__all__ = ["MAX_COUNT_D", "count_knorm", "refine_count_sample"]

MAX_COUNT_D = MAX_SLICE_D  # the largest dimension of exact count-ball noise


def count_knorm(
  key: KeyArray, d: int, k: int, scale: float, shape: Shape = ()
) -> jax.Array:
  """Exactly rounded K-norm noise for the count ball ``CountBall(d, k)``, int32
  ``(*shape, d)``.

  The ideal noise has density proportional to ``exp(-(g(y+) + g(y-)) / scale)``,
  g(x) = max(||x||_inf, ||x||_1 / k); each coordinate is rounded to the nearest
  integer, exactly. With ``scale = sensitivity / eps`` and an integer statistic,
  adding it is eps-DP (postprocessing of the K-norm mechanism, Hardt & Talwar 2010).

  Args:
    key: one PRNG key (use :func:`jaxdp.random.secure_key` for a release).
    d: the dimension, 1 <= d <= ``MAX_COUNT_D``.
    k: the most boxes one person ticks, 1 <= k <= d.
    scale: sensitivity / eps; Python number or traced scalar, at most
      ``max_scale(d + 1)`` (|noise| <= scale times a sum of d + 2 exponentials,
      :mod:`jaxdp.exact.limits`); a bad traced value yields the sentinel
      ``INT32_MIN`` everywhere.
    shape: batch shape.

  Raises:
    ValueError: d, k or a static scale out of range (before anything is drawn).
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  d = _checks.check_int(d, "d", minimum=1)
  k = _checks.check_int(k, "k", minimum=1)
  if d > MAX_COUNT_D or k > d:
    raise ValueError(
      f"exact count-ball noise needs 1 <= k <= d <= {MAX_COUNT_D}; got d = {d}, k = {k}."
    )
  scale = check_scale(scale, d + 1)
  tab = count_plans(d, k)
  with jax.enable_x64(True):
    out = _count_kernel(key, scale_arg(scale), tab=tab, n=math.prod(shape))
  return out.reshape(*shape, d)


class ClassTieError(RuntimeError):
  """The class uniform equalled a threshold in all 256 digits."""


def _tie_error(flag):
  del flag
  return ClassTieError(
    "exact count-ball noise: the orthant class could not be decided with 256 bits "
    "(probability below 2^-246); nothing was released."
  )


@functools.partial(jax.jit, static_argnames=("tab", "n"))
def _count_kernel(key, scale, *, tab, n):
  with jax.enable_x64(True):
    d = tab.d
    scale = scale64(scale, d + 1)

    def chunk(k_chunk, m):
      keys = jax.random.split(k_chunk, m)  # one per sample, only derived from
      k_choice, k_prop = jnp.moveaxis(jax.vmap(jax.random.split)(keys), 1, 0)
      k_class, k_subset = jnp.moveaxis(jax.vmap(jax.random.split)(k_choice), 1, 0)
      cls, pos = choose(k_class, k_subset, tab)
      words, rounds = accepted_count_proposals(k_prop, cls, pos, tab)
      k, settled = count_round(words, cls, pos, scale, tab)

      def refine(k):
        digit_keys = jax.vmap(proposal_digit_key)(k_prop, rounds)
        extra = extra_words(digit_keys, 2 * d + 4)
        one = functools.partial(refine_count_sample, tab=tab)
        return refine_callback(one, k, settled, words, extra, scale, pos)

      return lax.cond(batch_all(settled | jnp.isnan(scale)), lambda k: k, refine, k)

    return run_chunks(chunk, key, scale, n, (d,), sum_chunk(d + 1))


def choose(k_class, k_subset, tab: CountPlans):
  """Each sample's class (m,) int32 and positive coordinates (m, d) bool (an error
  if a class uniform ties a threshold)."""
  v = jax.vmap(lambda k: jax.random.bits(k, (8,), jnp.uint32))(k_class)
  cls, tie = choose_class(v, tab)
  ok = raise_if(tie, _tie_error)
  cls = jnp.where(ok, cls, 0)  # uses the check (ok is True unless it raised)
  return cls, choose_subset(k_subset, cls, tab.d)


def fast_count_decisions(words, cls, pos, tab: CountPlans):
  """:func:`~jaxdp.exact.count_slices.decide_two` on a proposal's words."""
  d = tab.d
  j52 = digits52(words[:, d + 2 : 2 * d + 2]).astype(jnp.int64)
  w = words[:, 2 * d + 2 :].astype(jnp.uint64)
  w = (w[..., 0] << np.uint64(32)) | w[..., 1]
  return decide_two(j52, pos, cls, w[:, 0], w[:, 1], tab)


def accepted_count_proposals(keys, cls, pos, tab: CountPlans):
  """Each sample's first accepted proposal (words (m, 2d + 4, 2), its index (m,))."""
  fast = lambda words, c, p: fast_count_decisions(words, c, p, tab)[0]
  host = functools.partial(host_count_decisions, tab=tab)
  return first_accepted(keys, 2 * tab.d + 4, fast, host, (cls, pos))


def host_count_decisions(status, pending, words, extra, cls, pos, *, tab: CountPlans):
  """Host callback: the pending proposals decided from 244 digits per uniform.

  Raises:
    RuntimeError: a proposal still undecided (probability below 2^-180).
  """
  status, pending = np.array(status), np.asarray(pending)
  words, extra, pos = np.asarray(words), np.asarray(extra), np.asarray(pos)
  for idx in zip(*np.nonzero(pending)):
    status[idx] = _exact_decision(words[idx], extra[idx], pos[idx], tab)[0]
  return status.astype(np.int32)


def _exact_decision(words, extra, pos, tab):
  d = tab.d
  rows = range(d + 2, 2 * d + 2)
  digits = [uniform_digits(words[r], extra[r]) for r in rows]
  bits = digits[0][1]
  ws = []
  for r in (2 * d + 2, 2 * d + 3):
    w = 0
    for v in (*words[r], *extra[r]):  # W: 64 digits, then 192
      w = (w << 32) | int(v)
    ws.append(w)
  w_bits = W_FAST_BITS + 32 * REFINE_WORDS
  status, x_lo, x_hi = decide_two_exact(
    [v for v, _ in digits], bits, [bool(p) for p in pos], ws[0], ws[1], w_bits, tab
  )
  if status == UNDECIDED:
    raise RuntimeError(
      "exact noise: a rejection step could not be decided with 244 bits per uniform "
      "(probability below 2^-180); nothing was released."
    )
  return status, x_lo, x_hi, bits


def count_round(words, cls, pos, scale, tab: CountPlans):
  """The fast pass on accepted proposals: (k (m, d) int32, settled (m,)); each
  coordinate's interval is its part's radius interval times its slice value's,
  widened by ``MARGIN * scale * radius_hi`` (as the sum ball)."""
  d = tab.d
  e_lo, e_hi = exp_intervals(words[:, : d + 2])
  g = []
  for part, extra in ((pos, d), (~pos, d + 1)):
    lo = jnp.sum(jnp.where(part, e_lo[:, :d], 0), axis=1) + e_lo[:, extra]
    hi = jnp.sum(jnp.where(part, e_hi[:, :d], 0), axis=1) + e_hi[:, extra]
    g.append((lo[:, None], hi[:, None]))
  g_lo = jnp.where(pos, g[0][0], g[1][0])
  g_hi = jnp.where(pos, g[0][1], g[1][1])
  _, x_lo, x_hi = fast_count_decisions(words, cls, pos, tab)
  unit = 2.0**-FAST_BITS
  lo = g_lo * (x_lo.astype(jnp.float64) * unit)
  hi = g_hi * (x_hi.astype(jnp.float64) * unit)
  lo, hi = jnp.where(pos, lo, -hi), jnp.where(pos, hi, -lo)
  k, settled = round_settled(lo, hi, g_hi, scale)
  return k, jnp.all(settled, axis=1)


def refine_count_sample(
  words: np.ndarray, extra: np.ndarray, scale: float, pos, *, tab: CountPlans
) -> np.ndarray:
  """Exact rounding of one accepted sample from 244 digits per uniform, in
  ``decimal`` (the caller's context: :func:`~jaxdp.exact.refine.host_refine`).

  Raises:
    RuntimeError: the proposal not accepted at 244 digits (it was at 52: never), or
      a coordinate still unsettled (probability below 2^-150).
  """
  d = tab.d
  status, x_lo, x_hi, bits = _exact_decision(words, extra, pos, tab)
  if status != ACCEPT:
    raise RuntimeError("exact noise: an accepted proposal was rejected on refinement.")
  bounds = [refine_exponential_bounds(w, x) for w, x in zip(words[: d + 2], extra[: d + 2])]
  g = []
  for part, extra_row in (([bool(p) for p in pos], d), ([not p for p in pos], d + 1)):
    lo, hi = bounds[extra_row]
    for i in range(d):
      if part[i]:
        lo, hi = lo + bounds[i][0], hi + bounds[i][1]
    g.append((lo, hi))
  unit = decimal.Decimal(2) ** -bits
  b = decimal.Decimal(float(scale))
  out = []
  for i in range(d):
    g_lo, g_hi = g[0] if pos[i] else g[1]
    lo, hi = g_lo * (x_lo[i] * unit), g_hi * (x_hi[i] * unit)
    if not pos[i]:
      lo, hi = -hi, -lo
    out.append(settled_integer(lo, hi, b))
  return np.asarray(out, np.int64)
