"""Exactly rounded K-norm noise for the sum ball {v : ||v||_inf <= 1, ||v||_1 <= k}.

The ideal noise is ``scale * R * s * x``: R ~ Gamma(d + 1) (a sum of d + 1
exponentials), s uniform signs and x uniform in the cube slice S(d, k) (the sum
ball is the union of S(d, k)'s 2^d reflections). x comes from rejection with every
decision exact (:mod:`jaxdp.exact.slices`); each coordinate of the noise is then
rounded to the nearest integer exactly, from the product of R's interval and x's
exact interval, as for the l_inf ball.

Each proposal of a sample is ``2d + 2`` uniforms, two ChaCha20 words each (the
first 52 binary digits, as :func:`~jaxdp.exact.intervals.digits52`): rows 0..d
R's exponentials, rows d + 1..2d the slice's uniforms (bit 0 of each row's second
word, not one of its digits, is the sign of coordinate i), row 2d + 1 the Bernoulli
uniform W (64 digits). Proposal r of sample t has its own key, fold_in(key_t, r),
split into the key of those words and the key of their 192 further digits (six
words per uniform), drawn only when a decision or a rounding needs them, and then
the same digits for both: the host decides an undecided proposal, and later
rounds the accepted one, from the same reals.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Section 7.
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
from jaxdp.exact.host_call import host_call
from jaxdp.exact.intervals import FAST_BITS, digits52, exp_intervals, round_settled
from jaxdp.exact.refine import (
  REFINE_WORDS,
  batch_all,
  refine_callback,
  refine_gamma_bounds,
  settled_integer,
  uniform_digits,
)
from jaxdp.exact.samplers import CHUNK, check_scale, run_chunks, scale64, scale_arg
from jaxdp.exact.slices import (
  ACCEPT,
  MAX_SLICE_D,
  UNDECIDED,
  W_FAST_BITS,
  SlicePlan,
  decide_exact,
  decide_fast,
  slice_plan,
)
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.cube_slice import MIN_ROUND
from jaxdp.typing import KeyArray, Shape

__all__ = ["MAX_SUM_D", "first_accepted", "refine_sum_sample", "sum_knorm"]

MAX_SUM_D = MAX_SLICE_D  # the largest dimension of exact sum-ball noise
CHUNK_WORDS = 1 << 21  # about this many uniforms per chunk of proposals


def sum_knorm(key: KeyArray, d: int, k: int, scale: float, shape: Shape = ()) -> jax.Array:
  """Exactly rounded K-norm noise for the sum ball ``SumBall(d, k)``, int32
  ``(*shape, d)``.

  The ideal noise has density proportional to ``exp(-max(||y||_inf, ||y||_1 / k) /
  scale)``; each coordinate is rounded to the nearest integer, exactly. With
  ``scale = sensitivity / eps`` and an integer statistic, adding it is eps-DP
  (postprocessing of the K-norm mechanism, Hardt & Talwar 2010).

  Args:
    key: one PRNG key (use :func:`jaxdp.random.secure_key` for a release).
    d: the dimension, 1 <= d <= ``MAX_SUM_D``.
    k: the most coordinates one person changes, 1 <= k <= d.
    scale: sensitivity / eps; Python number or traced scalar, at most
      ``max_scale(d)`` (:mod:`jaxdp.exact.limits`); a bad traced value yields the
      sentinel ``INT32_MIN`` everywhere.
    shape: batch shape.

  Raises:
    ValueError: d, k or a static scale out of range (before anything is drawn).
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  d = _checks.check_int(d, "d", minimum=1)
  k = _checks.check_int(k, "k", minimum=1)
  if d > MAX_SUM_D or k > d:
    raise ValueError(
      f"exact sum-ball noise needs 1 <= k <= d <= {MAX_SUM_D}; got d = {d}, k = {k}."
    )
  plan = slice_plan(d, k)
  scale = check_scale(scale, d)
  with jax.enable_x64(True):
    out = _sum_kernel(key, scale_arg(scale), plan=plan, n=math.prod(shape))
  return out.reshape(*shape, d)


def sum_chunk(d: int) -> int:
  """Samples per chunk: about ``CHUNK_WORDS`` uniforms of proposals."""
  return int(max(64, min(CHUNK, CHUNK_WORDS // (2 * d + 2))))


@functools.partial(jax.jit, static_argnames=("plan", "n"))
def _sum_kernel(key, scale, *, plan, n):
  with jax.enable_x64(True):
    d = plan.d
    scale = scale64(scale, d)

    def chunk(k_chunk, m):
      keys = jax.random.split(k_chunk, m)  # one per sample, only derived from
      words, rounds = accepted_proposals(keys, plan)
      k, settled = sum_round(words, scale, plan)
      refine = lambda k: _refine(k, settled, words, scale, keys, rounds, plan)
      return lax.cond(batch_all(settled | jnp.isnan(scale)), lambda k: k, refine, k)

    return run_chunks(chunk, key, scale, n, (d,), sum_chunk(d))


def proposal_words(keys, r, plan: SlicePlan):
  """Proposal ``r`` (a scalar, or one per key) of each sample: (words (m, 2d + 2, 2)
  uint32, the keys of their further digits)."""
  return draw_proposals(keys, r, 2 * plan.d + 2)


def draw_proposals(keys, r, rows: int):
  """Proposal ``r`` (a scalar, or one per key) of each sample, ``rows`` uniforms:
  (words (m, rows, 2) uint32, the keys of their further digits)."""
  r = jnp.broadcast_to(jnp.asarray(r, jnp.int32), keys.shape[:1])
  split = lambda k, i: jax.random.split(jax.random.fold_in(k, i))
  pair = jax.vmap(split)(keys, r)
  words = jax.vmap(lambda k: jax.random.bits(k, (rows, 2), jnp.uint32))(pair[:, 0])
  return words, pair[:, 1]


def extra_words(digit_keys, rows: int):
  """The 192 further digits (``REFINE_WORDS`` words) of each uniform of a proposal."""
  return jax.vmap(lambda k: jax.random.bits(k, (rows, REFINE_WORDS), jnp.uint32))(
    digit_keys
  )


def fast_decisions(words, plan: SlicePlan):
  """:func:`~jaxdp.exact.slices.decide_fast` on a proposal's words."""
  d = plan.d
  j = digits52(words[:, d + 1 : 2 * d + 1]).astype(jnp.int64)
  w = words[:, 2 * d + 1].astype(jnp.uint64)
  return decide_fast(j, (w[:, 0] << np.uint64(32)) | w[:, 1], plan)


def accepted_proposals(keys, plan: SlicePlan):
  """Each sample's first accepted proposal: (words (m, 2d + 2, 2), its index (m,)),
  by :func:`first_accepted` with the slice's decisions."""
  fast = lambda words: fast_decisions(words, plan)[0]
  host = functools.partial(host_decisions, plan=plan)
  return first_accepted(keys, 2 * plan.d + 2, fast, host)


def first_accepted(keys, rows: int, fast, host_decide, operands=()):
  """Each sample's first accepted proposal of ``rows`` uniforms: (words (m, rows, 2),
  its index (m,)).

  ``fast(words, *ops)`` gives each proposal's status (``UNDECIDED`` where 52 digits
  do not decide), ``host_decide(status, pending, words, extra, *ops)`` (a host
  callback) decides the pending ones from 192 more digits; ``operands`` are per
  sample (leading axis m) and reach both as ``ops``. The first round proposes once
  for every sample; each later one has ``b = min(m, max(MIN_ROUND, m / 4))`` slots
  (as :func:`~jaxdp.samplers.cube_slice.rejection_fill`), given in turn to the
  samples not yet done (one gets several, its next proposals in order, when fewer
  than b are left), so the work follows the proposals needed rather than the
  slowest sample. Undecided proposals are decided on the host before a round's
  winners are taken: a sample takes its first accepted proposal in proposal order."""
  m = keys.shape[0]
  b = min(m, max(MIN_ROUND, -(-m // 4)))
  slot = jnp.arange(b, dtype=jnp.int32)

  def propose(idx, r):
    safe = jnp.minimum(idx, m - 1)
    words, digit_keys = draw_proposals(keys[safe], r, rows)
    ops = [o[safe] for o in operands]
    status = fast(words, *ops)
    pending = (idx < m) & (status == UNDECIDED)

    def host(status):
      extra = extra_words(digit_keys, rows)
      shape = jax.ShapeDtypeStruct(status.shape, jnp.int32)
      return host_call(host_decide, shape, status, pending, words, extra, *ops)

    return words, lax.cond(batch_all(~pending), lambda s: s, host, status)

  def body(state):
    out, rounds, next_r, done = state
    left = jnp.sum(~done, dtype=jnp.int32)
    turn = jnp.where(left >= b, slot, slot % jnp.maximum(left, 1))
    rep = jnp.where(left >= b, 0, slot // jnp.maximum(left, 1))
    idx = jnp.nonzero(~done, size=b, fill_value=m)[0][turn]
    r = next_r[jnp.minimum(idx, m - 1)] + rep
    words, status = propose(idx, r)
    ok = (idx < m) & (status == ACCEPT)
    first = jnp.full((b,), b, jnp.int32).at[turn].min(jnp.where(ok, slot, b))
    target = jnp.where(ok & (first[turn] == slot), idx, m)
    out = out.at[target].set(words, mode="drop")
    rounds = rounds.at[target].set(r, mode="drop")
    next_r = next_r.at[idx].max(r + 1, mode="drop")
    return out, rounds, next_r, done.at[target].set(True, mode="drop")

  words, status = propose(jnp.arange(m), jnp.zeros((m,), jnp.int32))
  init = (words, jnp.zeros((m,), jnp.int32), jnp.ones((m,), jnp.int32), status == ACCEPT)
  out, rounds, _, _ = lax.while_loop(lambda s: ~jnp.all(s[3]), body, init)
  return out, rounds


def host_decisions(status, pending, words, extra, *, plan: SlicePlan):
  """Host callback: the pending proposals decided from 244 digits per uniform (W:
  256).

  Raises:
    RuntimeError: a proposal still undecided (probability below 2^-180).
  """
  status, pending = np.array(status), np.asarray(pending)
  words, extra = np.asarray(words), np.asarray(extra)
  for idx in zip(*np.nonzero(pending)):
    status[idx] = _exact_decision(words[idx], extra[idx], plan)[0]
  return status.astype(np.int32)


def _exact_decision(words, extra, plan):
  d = plan.d
  digits = [
    uniform_digits(w, x) for w, x in zip(words[d + 1 : 2 * d + 1], extra[d + 1 : 2 * d + 1])
  ]
  bits = digits[0][1]
  w = 0
  for v in (*words[2 * d + 1], *extra[2 * d + 1]):  # W: 64 digits, then 192
    w = (w << 32) | int(v)
  w_bits = W_FAST_BITS + 32 * REFINE_WORDS
  status, x_lo, x_hi = decide_exact([v for v, _ in digits], bits, w, w_bits, plan)
  if status == UNDECIDED:
    raise RuntimeError(
      "exact noise: a rejection step could not be decided with 244 bits per uniform "
      "(probability below 2^-180); nothing was released."
    )
  return status, x_lo, x_hi, bits


def sum_round(words, scale, plan: SlicePlan):
  """The fast pass on accepted proposals: (k (m, d) int32, settled (m,)). x's exact
  interval (integers below 2^53 times 2^-52) times R's; the widening
  ``MARGIN * scale * R_hi`` bounds the products' and sums' rounding and the log's
  error, as for the l_inf ball."""
  d = plan.d
  e_lo, e_hi = exp_intervals(words[:, : d + 1])
  r_lo = jnp.sum(e_lo, axis=1, keepdims=True)
  r_hi = jnp.sum(e_hi, axis=1, keepdims=True)
  _, x_lo, x_hi = fast_decisions(words, plan)
  unit = 2.0**-FAST_BITS
  lo = r_lo * (x_lo.astype(jnp.float64) * unit)
  hi = r_hi * (x_hi.astype(jnp.float64) * unit)
  neg = (words[:, d + 1 : 2 * d + 1, 1] & 1) == 1
  lo, hi = jnp.where(neg, -hi, lo), jnp.where(neg, -lo, hi)
  k, settled = round_settled(lo, hi, r_hi, scale)
  return k, jnp.all(settled, axis=1)


def _refine(k, settled, words, scale, keys, rounds, plan):
  rows = 2 * plan.d + 2
  digit_keys = jax.vmap(lambda key, r: proposal_digit_key(key, r))(keys, rounds)
  extra = extra_words(digit_keys, rows)
  one = functools.partial(refine_sum_sample, plan=plan)
  return refine_callback(one, k, settled, words, extra, scale)


def proposal_digit_key(key, r):
  """The key of proposal ``r``'s further digits (as :func:`proposal_words`)."""
  return jax.random.split(jax.random.fold_in(key, r))[1]


def refine_sum_sample(
  words: np.ndarray, extra: np.ndarray, scale: float, *, plan: SlicePlan
) -> np.ndarray:
  """Exact rounding of one accepted sample from 244 digits per uniform, in
  ``decimal`` (the caller's context: :func:`~jaxdp.exact.refine.host_refine` sets
  100 digits).

  Raises:
    RuntimeError: the proposal not accepted at 244 digits (it was at 52: never), or
      a coordinate still unsettled (probability below 2^-150).
  """
  d = plan.d
  status, x_lo, x_hi, bits = _exact_decision(words, extra, plan)
  if status != ACCEPT:
    raise RuntimeError("exact noise: an accepted proposal was rejected on refinement.")
  r_lo, r_hi = refine_gamma_bounds(words[: d + 1], extra[: d + 1])
  unit = decimal.Decimal(2) ** -bits
  b = decimal.Decimal(float(scale))
  out = []
  for i in range(d):
    lo, hi = r_lo * (x_lo[i] * unit), r_hi * (x_hi[i] * unit)
    if int(words[d + 1 + i, 1]) & 1:
      lo, hi = -hi, -lo
    out.append(settled_integer(lo, hi, b))
  return np.asarray(out, np.int64)
