"""Budget arithmetic in integer fixed-point units, identical on the host and in traces.

Why not floats: a float32 running total stalls (any eps below half an ulp of the
total adds nothing, so it is free) and rounds the other way too (10 x 0.1 exceeds
1.0 in float32). The accountant therefore counts **integer units**.

The rule, for a budget ``B`` (eps or delta):

* ``B`` fixes a power-of-two unit ``u = 2**e`` with ``2**(e + 30) >= B``, and a
  capacity of ``C = floor(B / u)`` units (``2**29 < C <= 2**30``; int32 holds it).
* A charge ``c`` of a cost ``x > 0`` is computed in float32: ``x`` is rounded to
  float32, scaled by ``1/u`` (exact: a power of two), relieved of a relative
  ``2**-22`` (forgiving the representation error of a decimal such as 0.1, which
  float32 stores as 0.10000000149), rounded **up** to an integer and at least 1. So
  every cost > 0 spends at least one unit, and ``c u >= x (1 - 2**-21)`` (the
  float32 roundings of the cost, of a group multiple and of the subtraction add at
  most ``3 * 2**-24``).
* A release is answered iff ``c <= C - spent`` (no overflow: both sides are int32).

Bound: the costs of the answered releases add up to at most ``B (1 + 2**-20)``; in
particular 10 x 0.1, 20 x 0.05 and 7 x (1/7) fit 1.0 and 3 x 0.1 fits 0.3, while
nothing is answered once ``C`` units are spent, however small its cost, and at most
``2**30`` releases can ever be answered under one budget. The price of the slack: a
release of exactly ``B`` is charged ``C - 2**-22 C`` units, and the ``2**-22 B`` left
may still pay for tiny releases; the bound covers them. (Float32 itself cannot tell
eps apart more finely than 2**-24; the noise is computed from eps in float32.)

The same float32 operations run in numpy for static costs (:func:`charge_host`)
and in XLA for traced ones (:func:`charge`): both are correctly rounded IEEE
multiplications and a subtraction, so static and traced costs give the same units.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._cache import value_cache

UNIT_BITS = 30
SLACK_BITS = 22
MIN_BUDGET = 2.0**-60  # keeps 1/u inside float32's range
MAX_BUDGET = 2.0**60
_CLIP = np.float32(2.0**31 - 128)  # largest float32 below 2**31: > any capacity


def unit_exponent(budget: float) -> int:
  """``e`` with ``u = 2**e``: the smallest power of two with ``2**30 u >= budget``."""
  if budget <= 0:
    return 0
  m, e = math.frexp(budget)  # budget = m 2**e, 0.5 <= m < 1
  if m == 0.5:
    e -= 1
  return e - UNIT_BITS


def capacity(budget: float, exponent: int) -> int:
  """``floor(budget / 2**exponent)``, exact (power-of-two scaling of a float64)."""
  return int(math.floor(math.ldexp(budget, -exponent))) if budget > 0 else 0


def to_float(units, exponent: int) -> float:
  """Units back to a cost, as a Python float (exact for int32 units)."""
  return math.ldexp(float(units), exponent)


def _scale(exponent):
  """2**-exponent in float32 (exact); a vector for a vector of exponents."""
  return np.asarray(np.ldexp(1.0, -np.asarray(exponent)), np.float32)


def charge(x, exponent, *, positive: bool):
  """Traced charge: ``(valid, units)`` with int32 ``units`` for a cost ``x``.

  Args:
    x: the cost (a scalar, any float dtype; cast to float32), or a vector of costs
      (the Rényi filter: one per order) with a tuple of exponents; ``valid`` is then
      one flag for the whole vector.
    exponent: the budget's unit exponent (or one per entry of ``x``).
    positive: True for eps (must be > 0); False for delta (>= 0; 0 costs nothing).
  """
  x = jnp.asarray(x).astype(jnp.float32)
  # signs from the bits: XLA may flush a subnormal cost to zero in one comparison and
  # not in another (a positive cost must never be charged 0 units)
  bits = jax.lax.bitcast_convert_type(x, jnp.int32)
  magnitude = bits & 0x7FFFFFFF
  pos = (bits > 0) & (magnitude < 0x7F800000)
  zero = magnitude == 0
  valid = jnp.all(pos if positive else pos | zero)
  scaled = x * _scale(exponent)
  relieved = jnp.where(
    scaled < _CLIP,  # a scaling that overflows is clipped, never
    scaled - scaled * np.float32(2.0**-SLACK_BITS),
    _CLIP,
  )  # NaN
  units = jnp.ceil(jnp.minimum(relieved, _CLIP)).astype(jnp.int32)
  units = jnp.where(pos, jnp.maximum(units, 1), 0)
  return valid, jnp.where(valid, units, 0)


def charge_host(x: float, exponent: int, *, positive: bool):
  """Host twin of :func:`charge` for static costs: ``(valid, units)`` as Python values.

  The same float32 operations in numpy, so static and traced costs agree unit for unit.
  A Python or numpy float scalar with an int exponent is looked up in a cache of
  earlier results (a pure function of the value: equal values round to one float32).
  """
  if type(x) in _SCALARS and type(exponent) is int:
    return _charge_scalar(x, exponent, positive)
  return _charge_host(x, exponent, positive=positive)


_SCALARS = (float, np.float64, np.float32)


@value_cache(maxsize=1024)
def _charge_scalar(x: float, exponent: int, positive: bool):
  return _charge_host(x, exponent, positive=positive)


def _charge_host(x, exponent, *, positive: bool):
  with np.errstate(over="ignore", invalid="ignore"):
    x = np.asarray(x, np.float32)
    valid = bool(np.all((x > 0 if positive else x >= 0) & (x < np.inf)))
    if not valid:
      return False, (0 if x.ndim == 0 else np.zeros(x.shape, np.int64))
    scaled = x * _scale(exponent)
    relieved = np.where(
      scaled < _CLIP, scaled - scaled * np.float32(2.0**-SLACK_BITS), _CLIP
    )
    units = np.ceil(np.minimum(relieved, _CLIP)).astype(np.int64)
    units = np.where(x > 0, np.maximum(units, 1), 0)
  return True, (int(units) if units.ndim == 0 else units)


def check_budget(value, name):
  """A budget, checked to be positive and within [2**-60, 2**60]."""
  v = _checks.check_positive(value, name)
  if not MIN_BUDGET <= v <= MAX_BUDGET:
    raise ValueError(f"{name} must be between 2**-60 and 2**60; got {v!r}.")
  return v


def in_cost(units, exponent) -> jax.Array:
  """Integer units as a cost in the default float dtype (one exponent per entry
  under the Rényi filter)."""
  return jnp.asarray(units).astype(jnp.result_type(float)) * np.ldexp(
    1.0, np.asarray(exponent)
  )


def capped_capacity(budget: float, exponent: int) -> int:
  """:func:`capacity`, at most the largest int32."""
  return min(capacity(budget, exponent), 2**31 - 1)


INT32_MAX = 2**31 - 1


def add_units(spent, units):
  """``spent + units`` (both >= 0), saturated at :data:`INT32_MAX`.

  A counter never wraps past int32 to a small or negative value: a saturated one is
  above every capacity (:func:`capped_capacity` is at most ``INT32_MAX``), so it reads
  as over budget. Python and numpy integers (:func:`jaxdp.plan`) are added on the
  host, anything else (a release) in jnp.
  """
  if type(spent) is int and type(units) is int:
    return min(spent + units, INT32_MAX)
  host = (int, np.integer, np.ndarray)
  if isinstance(spent, host) and isinstance(units, host):
    total = np.minimum(np.asarray(spent, np.int64) + np.asarray(units, np.int64), INT32_MAX)
    return int(total) if total.ndim == 0 else total
  spent = jnp.asarray(spent)
  return spent + jnp.minimum(units, INT32_MAX - spent).astype(spent.dtype)
