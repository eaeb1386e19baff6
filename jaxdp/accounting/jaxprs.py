"""Jaxpr helpers for the data-dependence analysis: inner jaxprs of calls, constant
folding of small known values, and digests of constants."""

from __future__ import annotations

import hashlib

import jax
import numpy as np
from jax.extend import core as jex_core

__all__ = [
  "CALLS",
  "FOLD",
  "call_jaxpr",
  "digest",
  "fold",
  "small_value",
  "split",
  "subjaxprs",
]

FINAL = -1  # index of the state marker on the accountant the query function returns


def split(j):
  """``(jaxpr, consts or None)`` of a Jaxpr or ClosedJaxpr."""
  if isinstance(j, jex_core.ClosedJaxpr):
    return j.jaxpr, j.consts
  return j, None


# Calls: their one inner jaxpr computes what the equation computes, from the same
# inputs (a custom rule for jvp, vjp or vmap only changes transformations of it).
CALLS = frozenset(
  [
    "pjit",
    "jit",
    "closed_call",
    "core_call",
    "checkpoint",
    "remat",
    "custom_jvp_call",
    "custom_vjp_call",
    "custom_vmap_call",
  ]
)


def subjaxprs(eqn):
  return [
    s
    for s in eqn.params.values()
    for s in (s if isinstance(s, tuple) else (s,))
    if isinstance(s, (jex_core.Jaxpr, jex_core.ClosedJaxpr))
  ]


def call_jaxpr(eqn):
  """The inner jaxpr of a call in CALLS (None for anything else)."""
  subs = subjaxprs(eqn)
  if eqn.primitive.name in CALLS and len(subs) == 1:
    inner = split(subs[0])[0]
    if len(inner.invars) == len(eqn.invars) and len(inner.outvars) == len(eqn.outvars):
      return subs[0]
  return None


# Primitives folded on small known values: enough to resolve a switch on a Python int
# (``clamp`` of literals) or a cond on a Python int.
FOLD = {
  "convert_element_type": lambda x, new_dtype, **_: np.asarray(x).astype(new_dtype),
  "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
  "eq": lambda a, b, **_: np.equal(a, b),
  "ne": lambda a, b, **_: np.not_equal(a, b),
  "lt": lambda a, b, **_: np.less(a, b),
  "le": lambda a, b, **_: np.less_equal(a, b),
  "gt": lambda a, b, **_: np.greater(a, b),
  "ge": lambda a, b, **_: np.greater_equal(a, b),
  "and": lambda a, b, **_: np.bitwise_and(a, b),
  "or": lambda a, b, **_: np.bitwise_or(a, b),
  "not": lambda a, **_: np.invert(a),
  "min": lambda a, b, **_: np.minimum(a, b),
  "max": lambda a, b, **_: np.maximum(a, b),
}


def small_value(x):
  """``x`` as a NumPy value if it is a small plain array known now, else None."""
  try:
    a = np.asarray(x)
  except Exception:
    return None
  return a if a.dtype.kind in "biuf" and a.size <= 16 else None


def fold(eqn, values):
  fold = FOLD.get(eqn.primitive.name)
  if fold is None or len(eqn.outvars) != 1 or any(v is None for v in values):
    return None
  with np.errstate(all="ignore"):
    return small_value(fold(*values, **eqn.params))


def digest(x):
  """A hashable key of a constant's value (None if it cannot be read)."""
  try:
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      bits = digest(jax.random.key_data(x))
      return None if bits is None else ("key", str(x.dtype), bits)
    a = np.asarray(x)
  except Exception:
    return None
  if a.dtype == object:
    return None
  data = a.tobytes()
  if len(data) > 256:
    data = hashlib.sha256(data).digest()
  return (str(a.dtype), a.shape, data)
