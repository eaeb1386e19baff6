"""The exact discrete Gaussian sampler: inversion of its exact distribution function.

A sample is the smallest integer y with ``V < F(y)``, where F is the discrete
Gaussian's distribution function and V a uniform in [0, 1) whose binary digits are
random bits (inversion). The device reads V's first 64 digits, so V lies in a dyadic
interval ``[u, u + 1) 2^-64``, and compares u with a table of 64-bit integers
bracketing every ``F(y)`` for ``|y| <= T``: where the interval lies strictly between
two neighbouring values of F, y is settled. Otherwise (V within 2^-63 of some F(y),
or |y| > T: probability below 2^-45 per sample) the sample is *refined*: 192 more
digits of V are drawn and a host callback compares the 256-digit interval with F
computed in ``decimal`` at 100 significant digits plus an absolute margin of 1e-80.
A sample still unsettled then (probability below 2^-190) raises an error; nothing
is guessed.

F is computed on the host once per sigma, in ``decimal`` at 100 digits: the weights
``w(z) = exp(-2 z^2 / a)`` (s^2 = a / 4) by the exact recurrence ``w(z + 1) = w(z)
r(z)``, ``r(z + 1) = r(z) q`` with ``q = exp(-4 / a)``, their tail sums and the
normaliser. Each product and sum has relative error at most 10^-99, so over at most
2^16 terms every value of F is within 10^-93 of the truth; terms where ``2 z^2 / a
> 253`` (below 10^-110 each, and falling geometrically) are left out. Both errors are
far inside the 1e-80 margin, which the 64-bit table's floor and ceiling then widen
further. Every comparison is of integers or of decimals with that margin, so the law
of the output is exactly the discrete Gaussian's.

References:
  C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
  privacy", NeurIPS 2020 (the law and its privacy). L. Devroye, "Non-uniform random
  variate generation", 1986, Chapter III.2 (inversion with a guide table).
"""

from __future__ import annotations

import bisect
import decimal
import functools
import math
from fractions import Fraction
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.exact.refine import HOST_DIGITS, settle
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers.chunks import chunked
from jaxdp.typing import KeyArray, Shape

MAX_SIGMA = 2047.0  # sigma <= 2^11 - 1: |y| stays far below int32's range
TABLE_TAIL = decimal.Decimal(2) ** -62  # T: the largest t with P(Y > t) above this
CUT = 253  # weights exp(-2 z^2 / a) with 2 z^2 / a > CUT (below 1e-110) are left out
SLACK = decimal.Decimal("1e-80")  # the host's margin on every value of F
COMPARE_ALL = 32  # tables up to this size are searched by comparing with every entry
DG_CHUNK = 1 << 20  # the most samples per sequential step (the chunks are balanced)
_CTX = decimal.Context(prec=HOST_DIGITS, rounding=decimal.ROUND_HALF_EVEN)


def discrete_gaussian(key: KeyArray, shape: Shape = (), *, sigma: float) -> jax.Array:
  """Discrete Gaussian noise N_Z(0, s^2), int32, exactly (Canonne, Kamath & Steinke).

  ``P(y) = exp(-y^2 / (2 s^2)) / sum_z exp(-z^2 / (2 s^2))`` over the integers, with
  s^2 = ``sigma**2`` rounded *up* to a multiple of 1/4 (so every quantity is a
  function of an integer; more noise, never less). Drawn by inversion of the exact
  distribution function (64 random digits on the device, 192 more on the host in
  the rare case they do not settle the sample; see the module's docs).

  Args:
    key: one PRNG key.
    shape: output shape.
    sigma: static, in (0, ``MAX_SIGMA``].

  Returns:
    int32 array of ``shape``.

  Raises:
    ValueError: a bad sigma. At run time, an error (never a guess) if a sample is
      still unsettled after 256 random digits (probability below 2^-190).
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  quarters = sigma_quarters(sigma)
  with jax.enable_x64(True):
    out = _dg_kernel(key, quarters=quarters, n=math.prod(shape))
  return out.reshape(shape)


def sigma_quarters(sigma: float) -> int:
  """a = ceil(4 sigma^2), exactly (sigma^2 as a rational); the sampler's s^2 = a / 4."""
  if not _checks.is_concrete(sigma):
    raise ValueError(
      "sigma must be a static Python number for the discrete Gaussian "
      "(its tables are built on the host)."
    )
  sigma = _checks.check_positive(sigma, "sigma")
  if sigma > MAX_SIGMA:
    raise ValueError(
      f"sigma must be at most {MAX_SIGMA:g} for the exact discrete "
      f"Gaussian (its tables grow with sigma); got {sigma:g}."
    )
  return max(1, math.ceil(4 * Fraction(sigma) ** 2))


class Law(NamedTuple):
  """The discrete Gaussian's distribution function for s^2 = a / 4, on the host.

  Attributes:
    a: 4 s^2.
    t: the table's reach T, the largest t with P(Y > t) > :data:`TABLE_TAIL`
      (so P(|Y| > T) is below 2^-61 and every ``F(y) 2^64`` in the table is more
      than 3 away from 0 and 2^64).
    lo: uint64 (2 T + 2,): ``lo[j] <= F(j - T - 1) 2^64``.
    hi: uint64 (2 T + 2,): ``hi[j] >= F(j - T - 1) 2^64``.
    tail: decimal tail sums ``tail[m] = sum_{z >= m} w(z)`` for m = 0, 1, ...
      (0 past the cut).
    total: the normaliser ``sum_z w(z) = 2 tail[1] + 1``.
  """

  a: int
  t: int
  lo: np.ndarray
  hi: np.ndarray
  tail: tuple
  total: decimal.Decimal

  def cdf(self, y: int) -> decimal.Decimal:
    """F(y) = P(Y <= y), at 100 digits (within 10^-93)."""
    m = len(self.tail) - 1
    if y < 0:
      return _CTX.divide(self.tail[min(-y, m)], self.total)
    return _CTX.subtract(1, _CTX.divide(self.tail[min(y + 1, m)], self.total))


@value_cache(maxsize=16)
def law(a: int) -> Law:
  """The :class:`Law` for s^2 = a / 4 (kept for the 16 most recent a)."""
  with decimal.localcontext(_CTX):
    q = _CTX.exp(_CTX.divide(-4, a))
    w, r = decimal.Decimal(1), _CTX.exp(_CTX.divide(-2, a))  # w(0), r(0) = w(1) / w(0)
    weights = [w]
    z = 0
    while 2 * z * z <= CUT * a:
      w, r, z = _CTX.multiply(w, r), _CTX.multiply(r, q), z + 1
      weights.append(w)
    tail = [decimal.Decimal(0)] * (len(weights) + 1)
    for m in range(len(weights) - 1, -1, -1):
      tail[m] = _CTX.add(tail[m + 1], weights[m])
    total = _CTX.add(_CTX.multiply(2, tail[1]), 1)
    t = 0  # P(Y > t) > 2^-62 keeps F(T) 2^64 below 2^64 - 3 (and F(-T-1) above 3)
    while _CTX.divide(tail[t + 2], total) > TABLE_TAIL:
      t += 1
    part = Law(a, t, np.zeros(0, np.uint64), np.zeros(0, np.uint64), tuple(tail), total)
    scale = decimal.Decimal(2) ** 64
    values = [_CTX.multiply(part.cdf(y), scale) for y in range(-t - 1, t + 1)]
    lo = [int((v - SLACK).to_integral_value(decimal.ROUND_FLOOR)) for v in values]
    hi = [int((v + SLACK).to_integral_value(decimal.ROUND_CEILING)) for v in values]
  if not (0 <= lo[0] and hi[-1] < 1 << 64):
    raise AssertionError("the discrete Gaussian's table leaves [0, 2^64)")
  as_u64 = lambda v: np.fromiter(v, np.uint64, len(v))  # beyond int64's range too
  return part._replace(lo=as_u64(lo), hi=as_u64(hi))


@functools.partial(jax.jit, static_argnames=("quarters", "n"))
def _dg_kernel(key, *, quarters, n):
  table = law(quarters)
  with jax.enable_x64(True):

    def chunk(k, m):
      return _inversion(k, table, m)

    # balanced chunks: the last one overlaps the one before by fewer than `pieces` rows
    pieces = -(-n // DG_CHUNK) if n else 1
    return chunked(chunk, key, n, (), jnp.int32, -(-n // pieces))


def _inversion(key, table: Law, m: int):
  """``m`` samples: each from two words (V's first 64 digits), settled against the
  table, else refined on the host from 192 more digits drawn with its own key."""
  k_words, k_refine = jax.random.split(key)
  words = jax.random.bits(k_words, (m, 2), jnp.uint32)
  u = (words[:, 0].astype(jnp.uint64) << 32) | words[:, 1].astype(jnp.uint64)
  y, settled = lookup(u, table)
  refine = functools.partial(refine_sample, table.a)
  return settle(y, settled, words, jnp.float32(1.0), k_refine, refine)


def lookup(u: jax.Array, table: Law) -> tuple[jax.Array, jax.Array]:
  """``(y, settled)`` for V in ``[u, u + 1) 2^-64`` (u uint64): where ``settled``,
  every such V has the same y (the smallest with V < F(y)); elsewhere y is 0."""
  lo, hi = jnp.asarray(table.lo), jnp.asarray(table.hi)
  # c = #{j : hi[j] <= u}: V >= F(j - T - 1) for those j, so y >= c - T - 1
  small = lo.shape[0] <= COMPARE_ALL  # one pass of comparisons beats a binary search
  c = jnp.searchsorted(hi, u, side="right", method="compare_all" if small else "scan")
  inside = (c >= 1) & (c < lo.shape[0])
  # and V < F(c - T - 1) when u + 1 <= lo[c]: then y = c - T - 1
  settled = inside & (u < lo[jnp.minimum(c, lo.shape[0] - 1)])
  return jnp.where(settled, c - table.t - 1, 0).astype(jnp.int32), settled


def refine_sample(a: int, words: np.ndarray, extra: np.ndarray, scale: float) -> int:
  """The sample whose V has the digits of ``words`` (2,) then ``extra`` (uint32),
  from :func:`law` ``(a)`` at 100 digits; ``scale`` (the refinement's) is unused.

  Raises:
    RuntimeError: V's interval still meets some F(y) widened by 1e-80, or lies
      beyond the weights kept (probability below 2^-190).
  """
  del scale
  digits = [int(v) for v in (*words, *extra)]
  big = functools.reduce(lambda acc, v: (acc << 32) | v, digits, 0)
  top = decimal.Decimal(2) ** (32 * len(digits))
  table = law(a)
  reach = len(table.tail) - 1
  with decimal.localcontext(_CTX):
    v_lo, v_hi = _CTX.divide(big, top), _CTX.divide(big + 1, top)
    ys = range(-reach, reach)
    y = ys[bisect.bisect_right(ys, v_lo, key=table.cdf)]  # first y with F(y) > v_lo
    if table.cdf(y - 1) + SLACK <= v_lo and v_hi <= table.cdf(y) - SLACK:
      return y
  raise RuntimeError(
    "exact discrete Gaussian: a sample could not be settled with 256 random digits "
    "(probability below 2^-190); nothing released."
  )
