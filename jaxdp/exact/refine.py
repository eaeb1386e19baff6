"""The host refinement of the exact samplers: samples the fast pass could not settle
are recomputed from 244 binary digits per uniform (224 where the fast pass read one
word per uniform) with Python's ``decimal`` (correctly rounded ``ln``) and rounded
exactly, or refused. Where the fast pass read one word per uniform, the device first
rounds such a chunk again from 52 digits (:func:`settle_marked`'s ``redo``).

References:
  C. Haney et al., "Precision-based attacks and interval refining: how to break, then
  fix, differential privacy on finite computers", 2022.
"""

from __future__ import annotations

import decimal
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp.exact.decimal_trig import cos_sin, decimal_pi
from jaxdp.exact.host_call import host_call
from jaxdp.exact.intervals import FAST_BITS, LIMIT, ONE_WORD_BITS, UNSETTLED, unmark

REFINE_WORDS = 6  # 192 more digits per uniform for the host refinement
HOST_DIGITS = 100  # decimal precision of the host refinement


def settle(k, settled, words, scale, key, refine_one, *operands):
  """Refines unsettled samples on the host, only when there are any (a bad traced
  scale needs none: its output is the sentinel); under a caller's ``vmap`` too, where
  the test is :func:`batch_all` over the whole batch.

  ``refine_one(words_i, extra_i, scale, *operands_i)`` recomputes one sample from its
  fast-pass words and 192 more digits per uniform; ``operands`` are per-sample arrays,
  or functions computing them (run only when refining)."""
  settled = settled | jnp.isnan(scale)
  extra = _further_words(key, words.shape[:-1])
  refine = lambda k: _host(k, settled, words, extra, scale, refine_one, operands)
  return lax.cond(batch_all(settled), lambda k: k, refine, k)


def settle_marked(k, words, scale, key, refine_one, *operands, redo=None):
  """:func:`settle` for k (m, D) marked ``UNSETTLED`` where the fast pass did not
  settle a coordinate (:func:`~jaxdp.exact.intervals.round_center`): one int32
  minimum over the chunk decides whether to refine (XLA:CPU reduces booleans per
  sample far more slowly), the per-sample flags are computed only then.

  With ``redo`` (a fast pass that read one word per uniform), the device first
  rounds again from 52 digits per uniform: ``redo(words2)`` with ``words2`` (..., 2)
  the fast-pass word and the first word of the refinement's digits, marked like k
  (the first 52 of the digits :func:`host_refine` reads, so every coordinate it
  settles is the exact rounding of the same noise). Only the samples it leaves
  unsettled go to the host, under a second such minimum."""

  shape = words.shape[:-1]

  def host(k, extra):
    k, settled = unmark(k)
    return _host(k, settled | jnp.isnan(scale), words, extra, scale, refine_one, operands)

  def refine(k):
    if redo is None:
      return host(k, _further_words(key, shape))
    k_first, k_rest = jax.random.split(key)
    first = jax.random.bits(k_first, (*shape, 1), jnp.uint32)
    k = jnp.where(k == UNSETTLED, redo(jnp.concatenate([words, first], -1)), k)
    # the further digits are drawn only for a chunk the host refines
    rest = _further_words(k_rest, shape, REFINE_WORDS - 1)
    extra = lambda: jnp.concatenate([first, rest()], -1)
    return lax.cond(_all_settled(k, scale), _unmarked, lambda k: host(k, extra), k)

  return lax.cond(_all_settled(k, scale), _unmarked, refine, k)


def _further_words(key, shape, count=REFINE_WORDS):
  """The host's further digits: ``count`` uint32 words per uniform of ``shape``,
  drawn when the returned function is called (inside the branch that needs them)."""
  return lambda: jax.random.bits(key, (*shape, count), jnp.uint32)


def _all_settled(k, scale):
  return batch_all((jnp.min(k) != UNSETTLED) | jnp.isnan(scale))


def _unmarked(k):
  return unmark(k)[0]


def _host(k, settled, words, extra, scale, refine_one, operands):
  """The host callback for the unsettled samples; ``extra()`` their further digits
  and the callable ``operands`` are computed only here."""
  ops = [o() if callable(o) else o for o in operands]
  return refine_callback(refine_one, k, settled, words, extra(), scale, *ops)


def refine_callback(refine_one, k, settled, words, extra, scale, *operands):
  """k (int32, k's shape) with every unsettled sample refined by :func:`host_refine`
  on the host, from inside a traced program (one callback for a caller's whole
  ``vmap`` batch); ``extra`` holds the further digits of each sample's words. The
  scale (float64) reaches the host bit for bit (:func:`~jaxdp.exact.host_call.host_call`)."""
  return host_call(
    functools.partial(host_refine, refine_one),
    jax.ShapeDtypeStruct(k.shape, jnp.int32),
    k,
    settled,
    words,
    extra,
    scale,
    *operands,
  )


def raise_if(flag, error, *info):
  """True normally; a run-time error (also under jit) when an entry of ``flag`` is
  True: ``error(f, *i)`` builds it from the host copies ``f`` of ``flag`` (with a
  caller's batch axes in front) and ``i`` of ``info`` (values reduced on the device
  that say what failed). The host is called only then, under a caller's ``vmap`` too
  (:func:`batch_all`). The caller must use the result, or XLA would drop the check."""
  ndim = jnp.ndim(flag)

  def check(f, *i):
    f = np.asarray(f)
    if f.any():
      raise error(f, *(np.asarray(v) for v in i))
    return np.ones(f.shape[: f.ndim - ndim], np.bool_)

  return lax.cond(
    ~batch_all(~flag),
    lambda: host_call(check, jax.ShapeDtypeStruct((), jnp.bool_), flag, *info),
    lambda: jnp.ones((), bool),
  )


@jax.custom_batching.custom_vmap
def batch_all(x):
  """``jnp.all(x)``; under ``vmap``, all of ``x`` over the whole batch, unbatched.

  A ``lax.cond`` whose predicate is batched runs both branches (a select), so under
  a caller's ``vmap`` the settle step would call the host on every chunk. With this
  predicate the cond stays a cond: the host is called only when some sample of the
  batch is unsettled, and then refines exactly the unsettled ones (for a member whose
  samples are all settled the refinement branch returns its input), so every
  member's output is the one it gets alone."""
  return jnp.all(x)


@batch_all.def_vmap
def _batch_all_vmap(axis_size, in_batched, x):
  del axis_size, in_batched
  return batch_all(x), False  # again custom_vmap: nested vmaps reduce every level


_CTX = decimal.Context(prec=HOST_DIGITS, rounding=decimal.ROUND_HALF_EVEN)
_SLACK = decimal.Decimal("1e-80")


def refine_exponential_bounds(words, extra) -> tuple[decimal.Decimal, decimal.Decimal]:
  """[E_lo, E_hi] at ``HOST_DIGITS`` (whatever the caller's decimal context) for
  E = -log(1 - V), V's digits the 52 of ``words`` (2,) (or the 32 of ``words`` (1,))
  then the 192 of ``extra``."""
  with decimal.localcontext(_CTX):
    return _refined_exponential(*uniform_digits(words, extra))


def refine_gamma_bounds(words, extra) -> tuple[decimal.Decimal, decimal.Decimal]:
  """[G_lo, G_hi] for G the sum of the exponentials of the rows of ``words`` and
  ``extra`` (:func:`refine_exponential_bounds` of each; a Gamma(rows) variate)."""
  g_lo = g_hi = decimal.Decimal(0)
  for w, x in zip(words, extra):
    e_lo, e_hi = refine_exponential_bounds(w, x)
    g_lo, g_hi = g_lo + e_lo, g_hi + e_hi
  return g_lo, g_hi


def _refined_exponential(big: int, bits: int) -> tuple[decimal.Decimal, decimal.Decimal]:
  """[E_lo, E_hi] for E = -log(1 - V), V's first ``bits`` digits the integer ``big``
  (:func:`uniform_digits`)."""
  top = 1 << bits
  if top - big - 1 <= 0:
    raise RuntimeError(
      f"exact noise: a uniform could not be bounded away from 1 with "
      f"{bits} bits (probability 2^-{bits}); nothing was released."
    )
  ln_top = _CTX.multiply(bits, _CTX.ln(decimal.Decimal(2)))
  e_lo = _CTX.subtract(ln_top, _CTX.ln(decimal.Decimal(top - big)))
  e_hi = _CTX.subtract(ln_top, _CTX.ln(decimal.Decimal(top - big - 1)))
  return e_lo - _SLACK, e_hi + _SLACK


def refine_sample(
  words: np.ndarray, extra: np.ndarray, scale: float, coeff: np.ndarray
) -> np.ndarray:
  """Exact rounding of one sample from 244 digits per uniform (224 from one fast-pass
  word), in ``decimal``.

  Args:
    words: (M, 2) or (M, 1) uint32, the fast pass's words; extra: (M, REFINE_WORDS) uint32;
    scale: the float64 scale (used exactly); coeff: (M, D) integer coefficients.

  Raises:
    RuntimeError: still unsettled (probability below 2^-150).
  """
  bounds = []
  for w, x in zip(words, extra):
    bounds.append(_refined_exponential(*uniform_digits(w, x)))
  b = decimal.Decimal(float(scale))
  out = []
  for c in np.asarray(coeff).T:
    lo = hi = decimal.Decimal(0)
    for ci, (e_lo, e_hi) in zip(c, bounds):
      if ci > 0:
        lo, hi = lo + e_lo, hi + e_hi
      elif ci < 0:
        lo, hi = lo - e_hi, hi - e_lo
    out.append(settled_integer(lo, hi, b))
  return np.asarray(out, np.int64)


def refine_linf_sample(
  words: np.ndarray, extra: np.ndarray, scale: float, num_exp: int
) -> np.ndarray:
  """:func:`refine_sample` for l_inf noise ``scale * R * Z``: the first ``num_exp``
  rows are R's exponentials, the others the cube's uniforms."""
  r_lo = r_hi = decimal.Decimal(0)
  for w, x in zip(words[:num_exp], extra[:num_exp]):
    e_lo, e_hi = _refined_exponential(*uniform_digits(w, x))
    r_lo, r_hi = r_lo + e_lo, r_hi + e_hi
  b = decimal.Decimal(float(scale))
  out = []
  for w, x in zip(words[num_exp:], extra[num_exp:]):
    big, bits = uniform_digits(w, x)
    top = decimal.Decimal(1 << (bits - 1))
    z_lo = _CTX.divide(big, top) - 1 - _SLACK  # Z = 2U - 1, U = big / 2^bits
    z_hi = _CTX.divide(big + 1, top) - 1 + _SLACK
    corners = [_CTX.multiply(r, z) for r in (r_lo, r_hi) for z in (z_lo, z_hi)]
    out.append(settled_integer(min(corners), max(corners), b))
  return np.asarray(out, np.int64)


_REL = decimal.Decimal("1e-90")  # relative widening of each l_2 interval step
_TRIG_ERROR = decimal.Decimal("1e-90")  # cos_sin's error (below 10^-98) and rounding


def refine_l2_sample(
  words: np.ndarray, extra: np.ndarray, scale: float, d: int
) -> np.ndarray:
  """:func:`refine_sample` for l_2 noise ``scale * T * g / |g|`` (see
  :mod:`jaxdp.exact.l2`; rows as in its fast pass, one or two words per uniform),
  in ``decimal`` intervals widened by 10^-90 relative at each step, cos and sin by
  ``4 * 2^-b + 10^-90`` absolute for an angle read to b digits (224 or 244): its
  interval, pi 2^-b either side of the midpoint (cos and sin are 1-Lipschitz), and
  the evaluation's error."""
  with decimal.localcontext(_CTX):
    return _refine_l2(words, extra, scale, d)


def _refine_l2(words, extra, scale, d):
  exps = []
  for w, x in zip(words[:d], extra[:d]):
    e_lo, e_hi = _refined_exponential(*uniform_digits(w, x))
    exps.append((max(e_lo, decimal.Decimal(0)), e_hi))  # E >= 0
  t = _widen(sum(e[0] for e in exps), sum(e[1] for e in exps))
  two_pi = _CTX.multiply(2, decimal_pi(HOST_DIGITS + 10))
  g = []
  for j, (w, x) in enumerate(zip(words[d:], extra[d:])):
    big, bits = uniform_digits(w, x)
    top = decimal.Decimal(1 << bits)
    theta = _CTX.multiply(two_pi, _CTX.divide(decimal.Decimal(2 * big + 1), 2 * top))
    a = _widen(_CTX.sqrt(exps[j][0]), _CTX.sqrt(exps[j][1]))
    slack = _CTX.add(_CTX.divide(4, top), _TRIG_ERROR)  # 4 2^-b > pi 2^-b, rounded
    for c in cos_sin(theta, HOST_DIGITS):
      g.append(_times(a, (max(c - slack, -1), min(c + slack, 1))))
  g = g[:d]
  sq_lo = sum(lo * lo if lo > 0 else hi * hi if hi < 0 else 0 for lo, hi in g)
  sq_hi = sum(max(lo * lo, hi * hi) for lo, hi in g)
  s = _widen(_CTX.sqrt(sq_lo), _CTX.sqrt(sq_hi))
  if s[0] <= 0:
    raise RuntimeError(
      "exact noise: an l_2 sample's norm could not be bounded away from 0 with 224 "
      "or more bits per uniform (probability below 2^-150); nothing was released."
    )
  f = _widen(_CTX.divide(t[0], s[1]), _CTX.divide(t[1], s[0]))
  b = decimal.Decimal(float(scale))
  return np.asarray([settled_integer(*_times(f, gi), b) for gi in g], np.int64)


def _widen(lo, hi):
  pad = _CTX.multiply(_REL, max(abs(lo), abs(hi)))
  return lo - pad, hi + pad


def _times(a, b):
  corners = [_CTX.multiply(x, y) for x in a for y in b]
  return _widen(min(corners), max(corners))


def _digits(w) -> tuple[int, int]:
  """The fast pass's digits of one uniform and their number: 52 from two words (as
  :func:`~jaxdp.exact.intervals.digits52`), 32 from one."""
  if len(w) == 1:
    return int(w[0]), ONE_WORD_BITS
  return (int(w[0]) << 20) | (int(w[1]) >> 12), FAST_BITS


def uniform_digits(w, extra) -> tuple[int, int]:
  """A uniform's digits, the fast pass's (:func:`_digits`) then 32 per word of
  ``extra``, as an integer, and their number (244 from two words, 224 from one)."""
  big, bits = _digits(w)
  for v in extra:
    big = (big << 32) | int(v)
  return big, bits + 32 * len(extra)


def settled_integer(lo, hi, b) -> int:
  """round(b x) for x in [lo, hi] (decimal), or an error if the interval straddles."""
  half = decimal.Decimal("0.5")
  lo, hi = _CTX.multiply(lo, b) - _SLACK, _CTX.multiply(hi, b) + _SLACK
  mid = _CTX.add(_CTX.divide(_CTX.add(lo, hi), 2), half)
  k = int(mid.to_integral_value(rounding=decimal.ROUND_FLOOR))
  if not (k - half < lo and hi < k + half):
    raise RuntimeError(
      "exact noise: a sample could not be settled with 224 or more bits per "
      "uniform (probability below 2^-150); nothing was released."
    )
  return k


def host_refine(refine_one, k, settled, words, extra, scale, *operands):
  """Host callback: ``refine_one`` for every unsettled sample with a valid scale."""
  k, settled = np.array(k), np.asarray(settled)
  words, extra = np.asarray(words), np.asarray(extra)
  operands = [np.asarray(o) for o in operands]
  scale = np.asarray(scale, np.float64)
  scale = np.broadcast_to(
    scale.reshape(scale.shape + (1,) * (settled.ndim - scale.ndim)), settled.shape
  )
  with decimal.localcontext(_CTX):  # operators too compute at HOST_DIGITS
    for idx in zip(*np.nonzero(~settled & (scale > 0))):  # NaN scale: sentinel output
      k[idx] = refine_one(
        words[idx], extra[idx], float(scale[idx]), *[o[idx] for o in operands]
      )
  if np.any(np.abs(k) >= LIMIT):
    raise RuntimeError("exact noise beyond +-2^30 (scale too large); nothing released.")
  return k.astype(np.int32)


def refine_tree_sample(
  words: np.ndarray,
  extra: np.ndarray,
  scale: float,
  low: np.ndarray,
  size_a,
  failed,
) -> np.ndarray:
  """:func:`refine_sample` for :func:`~jaxdp.exact.intervals.tree_round`'s noise:
  the coefficients from ``low`` (2, d) and ``size_a``.

  Raises:
    RuntimeError: ``failed`` (an object choice undecided after 192 digits), or
      the noise still unsettled.
  """
  if bool(failed):
    raise RuntimeError(
      "exact noise: a discrete choice could not be decided with 192 bits of its "
      "uniform (probability below 2^-190); nothing was released."
    )
  return refine_sample(words, extra, scale, tree_coefficients(low, int(size_a)))


def tree_coefficients(low: np.ndarray, k: int) -> np.ndarray:
  """(d + 2, d + 1) int8 simplex coefficients from the first chain positions ``low``
  (2, d) and |A| = k (the rows of :func:`~jaxdp.exact.choices.simplex_coefficients`)."""
  d = low.shape[1]
  i = np.arange(d + 2)[:, None]
  coeff = np.zeros((d + 2, d + 1), np.int8)
  coeff[:, 0] = np.where(np.arange(d + 2) <= k, 1, -1)
  a = (i >= low[0][None, :] + 1) & (i <= k)
  b = i >= k + 2 + low[1][None, :]
  coeff[:, 1:] = a.astype(np.int8) - b.astype(np.int8)
  return coeff
