"""Argument validation shared by the public API (runs outside tracing)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
  """Returns ``value`` as a Python int, or raises ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    if isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0 and \
        jnp.issubdtype(np.asarray(value).dtype, np.integer):
      value = int(value)
    else:
      raise ValueError(f"{name} must be an integer; got {value!r}.")
  value = int(value)
  if minimum is not None and value < minimum:
    raise ValueError(f"{name} must be >= {minimum}; got {value}.")
  return value


def is_concrete(x: Any) -> bool:
  """True if ``x`` holds a value now (not a tracer)."""
  return not isinstance(x, jax.core.Tracer)


def check_positive(value: Any, name: str, *, allow_traced: bool = False,
                   hint: str = "") -> Any:
  """Checks a scalar is finite and > 0.

  Concrete values are returned as Python floats. A traced value is returned as is
  when ``allow_traced``: callers must then make a bad value produce NaN output
  rather than weaker privacy (see :func:`guard_positive`).
  """
  if not is_concrete(value):
    if not allow_traced:
      raise ValueError(
          f"{name} must be a concrete Python number here (it is static); got a traced "
          f"value. {hint}".strip())
    if jnp.ndim(value) != 0:
      raise ValueError(f"{name} must be a scalar; got shape {jnp.shape(value)}.")
    if not jnp.issubdtype(jnp.result_type(value), jnp.floating) and \
        not jnp.issubdtype(jnp.result_type(value), jnp.integer):
      raise ValueError(f"{name} must be a real number; got dtype {jnp.result_type(value)}.")
    return value
  if isinstance(value, bool):
    raise ValueError(f"{name} must be a positive finite number; got {value!r}.")
  try:
    arr = np.asarray(value)
  except Exception:  # pragma: no cover - exotic objects
    raise ValueError(f"{name} must be a positive finite number; got {value!r}.") from None
  if arr.ndim != 0 or not (np.issubdtype(arr.dtype, np.floating)
                           or np.issubdtype(arr.dtype, np.integer)):
    raise ValueError(f"{name} must be a positive finite scalar; got {value!r}.")
  v = float(arr)
  if not math.isfinite(v) or v <= 0:
    raise ValueError(f"{name} must be a positive finite number; got {v!r}. {hint}".strip())
  return v


def guard_positive(value, out):
  """Returns ``out`` where ``value`` is finite and > 0, NaN elsewhere (traced values)."""
  ok = jnp.isfinite(value) & (value > 0)
  return jnp.where(ok, out, jnp.nan)


def check_key(key: Any, name: str = "key") -> None:
  """Rejects anything but one PRNG key (typed, or a legacy uint32 (2,) array)."""
  if isinstance(key, (jax.Array, np.ndarray)) or hasattr(key, "dtype"):
    dtype = key.dtype
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
      if key.shape != ():
        raise ValueError(
            f"{name} must be a single PRNG key; got a batch of keys with shape "
            f"{key.shape}. Pass one key and use shape=..., or jax.vmap over the keys.")
      return
    if dtype == jnp.uint32:
      if key.shape == (2,):
        return
      if key.ndim >= 2 and key.shape[-1] == 2:
        raise ValueError(
            f"{name} must be a single PRNG key; got a batch of raw keys with shape "
            f"{key.shape}. Pass one key and use shape=..., or jax.vmap over the keys.")
  raise ValueError(
      f"{name} must be a PRNG key from jax.random.key(seed) (or a legacy "
      f"jax.random.PRNGKey); got {type(key).__name__} "
      f"{getattr(key, 'dtype', '')}{getattr(key, 'shape', '')}.")


def check_shape(shape: Any, name: str = "shape") -> tuple[int, ...]:
  """Canonicalises a shape to a tuple of non-negative Python ints."""
  if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
    shape = (shape,)
  try:
    out = tuple(check_int(s, name, minimum=0) for s in shape)
  except TypeError:
    raise ValueError(f"{name} must be a tuple of non-negative ints; got {shape!r}.") from None
  except ValueError:
    raise ValueError(f"{name} must be a tuple of non-negative ints; got {shape!r}.") from None
  return out


def check_float_dtype(dtype: Any, name: str = "dtype"):
  """Returns a floating dtype (default: JAX's default float), or raises."""
  if dtype is None:
    return jnp.dtype(jnp.result_type(float))
  try:
    dt = jnp.dtype(dtype)
  except TypeError:
    raise ValueError(f"{name} must be a floating dtype; got {dtype!r}.") from None
  if not jnp.issubdtype(dt, jnp.floating):
    raise ValueError(
        f"{name} must be a floating dtype such as jnp.float32; got {dt}. Noise is "
        "real-valued; cast the result yourself if you need another type.")
  return jax.dtypes.canonicalize_dtype(dt)
