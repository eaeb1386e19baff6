"""pi, cos and sin in Python's ``decimal``, for the host refinement of exact l_2 noise
(the standard library's ``decimal`` has ``ln``, ``exp`` and ``sqrt`` but no
trigonometry).

Both are computed with guard digits and come with a stated error bound, which the
refinement adds to its intervals; the tests compare them with mpmath.

References:
  J. Machin's formula pi = 16 atan(1/5) - 4 atan(1/239) (1706).
"""

from __future__ import annotations

import decimal

from jaxdp._cache import value_cache

GUARD = 15  # extra digits of the internal computations


def _context(prec: int) -> decimal.Context:
  return decimal.Context(prec=prec + GUARD, rounding=decimal.ROUND_HALF_EVEN)


def _atan_inverse(n: int, ctx: decimal.Context) -> decimal.Decimal:
  """atan(1/n) by its alternating series (n >= 5: each term is n^2 times smaller)."""
  eps = decimal.Decimal(10) ** -(ctx.prec + 2)
  x = ctx.divide(1, n)
  n2 = n * n
  total, term, k = x, x, 1
  while abs(term) > eps:
    term = ctx.divide(term, -n2)
    total = ctx.add(total, ctx.divide(term, 2 * k + 1))
    k += 1
  return total


@value_cache(maxsize=8)
def decimal_pi(prec: int) -> decimal.Decimal:
  """pi to ``prec`` significant digits (error below 10^-(prec - 1))."""
  ctx = _context(prec)
  with decimal.localcontext(ctx):  # operators too compute at ctx's precision
    pi = 16 * _atan_inverse(5, ctx) - 4 * _atan_inverse(239, ctx)
  return decimal.Context(prec=prec).plus(pi)


def cos_sin(x: decimal.Decimal, prec: int) -> tuple[decimal.Decimal, decimal.Decimal]:
  """(cos x, sin x) for 0 <= x < 7, each with absolute error below 10^-(prec - 2).

  x is shifted into [-pi, pi] (by 2 pi, computed to prec + 15 digits), then the
  Taylor series are summed until a term is below 10^-(prec + 17); every term is
  below 6 in magnitude, so the sums lose at most one digit of the guard."""
  ctx = _context(prec)
  with decimal.localcontext(ctx):  # operators too compute at ctx's precision
    two_pi = ctx.multiply(2, decimal_pi(prec + GUARD))
    if x > ctx.divide(two_pi, 2):
      x = ctx.subtract(x, two_pi)
    eps = decimal.Decimal(10) ** -(prec + GUARD + 2)
    x2 = ctx.multiply(x, x)
    cos = term = decimal.Decimal(1)
    k = 0
    while abs(term) > eps:
      term = ctx.divide(ctx.multiply(term, -x2), (2 * k + 1) * (2 * k + 2))
      cos = ctx.add(cos, term)
      k += 1
    sin = term = x
    k = 0
    while abs(term) > eps:
      term = ctx.divide(ctx.multiply(term, -x2), (2 * k + 2) * (2 * k + 3))
      sin = ctx.add(sin, term)
      k += 1
  out = decimal.Context(prec=prec)
  return out.plus(cos), out.plus(sin)
