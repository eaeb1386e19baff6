"""Validation of datasets and statistics: dtypes, exact integer ranges, finiteness,
named by the first bad entry's position, never its value (runs outside tracing)."""

from __future__ import annotations

import numbers
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._checks import ArgTypeError, is_concrete

__all__ = ["as_exact_float", "check_data", "exact_limit", "first_index", "float_reason"]


def first_index(mask) -> tuple | None:
  """The index of the first True entry of ``mask`` (``()`` for a 0-d True), or None.

  ``np.argwhere`` finds nothing in a 0-d array, so a scalar would slip through."""
  mask = np.asarray(mask)
  if not mask.any():
    return None
  return tuple(int(i) for i in np.unravel_index(int(np.argmax(mask)), mask.shape))


def _where(index) -> str:
  return "" if index == () else f" at index {index}"


def _host_values(x, name: str) -> np.ndarray:
  """Concrete data as a numpy array in its own dtype. Python ints beyond 64 bits
  (a numpy object array) are refused here, naming the first one."""
  arr = np.asarray(x)
  if (
    arr.dtype == object
    and arr.size
    and all(isinstance(v, numbers.Integral) for v in arr.flat)
  ):
    info = jnp.iinfo(jnp.dtype(jnp.result_type(int)))
    outside = np.frompyfunc(lambda v: not info.min <= v <= info.max, 1, 1)(arr)
    i = first_index(np.asarray(outside, dtype=bool))
    if i is not None:
      raise ValueError(
        f"{name}{_where(i)} is the Python integer {arr[i]}, outside [{info.min:,}, "
        f"{info.max:,}], the range of {info.dtype} (JAX's integer dtype): it cannot "
        "be stored without wrapping. Bring the data into range (clip or rescale it) "
        "first."
      )
    arr = arr.astype(info.dtype)
  return arr


def check_data(x: Any, name: str = "data", *, limit: int | None = None, reason: str = ""):
  """Converts data to a JAX array, refusing what the conversion would silently change.

  Concrete data (Python numbers and lists, numpy arrays and scalars, JAX arrays, of
  any shape, 0-d included) is checked on the host, in its own dtype, before it is
  converted; a tracer is in JAX's dtypes already and only its dtype is checked.

  * float16 and bfloat16 are refused (bfloat16 stores 257 as 256, float16 2049 as
    2048).
  * NaN or infinite values are refused (they would flow into the output and look
    like a refusal), as are finite ones the conversion would make infinite (float64
    beyond float32's range with x64 off).
  * Integers (Python ints, signed or unsigned integer arrays of any width, bool
    aside) must fit JAX's dtype for them: with x64 off JAX stores int64 as int32
    and uint64 as uint32, which wraps 2**32 + 5 to 5 (and 2**31 to -2**31).
  * With ``limit``: integers, and floats converted to a narrower float (float64
    with x64 off), must also lie in ``[-limit, limit]``; ``reason`` says why and
    what to do. Without it, a narrowed float is rounded to nearest (float64 to
    float32: a relative error below 2**-24).

  :class:`jaxdp.Session` checks its data once, here, when it is created (by the
  data's owner, before any query); query results are JAX arrays already, which
  pass unchanged.

  Returns:
    A JAX array in JAX's canonical dtype; integers hold exactly the values given.

  Raises:
    ArgTypeError: a dtype that is not numeric or bool, or float16 / bfloat16.
    ValueError: a value as above, naming ``name``, its index and the limit.
  """
  if not is_concrete(x):
    _check_data_dtype(jnp.dtype(x.dtype), name)
    return jnp.asarray(x)
  arr = x if isinstance(x, jax.Array) else _host_values(x, name)
  dt = _check_data_dtype(jnp.dtype(arr.dtype), name)
  target = jnp.dtype(jax.dtypes.canonicalize_dtype(dt))
  if dt == jnp.bool_ or (
    isinstance(arr, jax.Array)
    and dt == target
    and jnp.issubdtype(dt, jnp.integer)
    and limit is None
  ):
    return jnp.asarray(arr)  # nothing the conversion could change
  host = np.asarray(arr)
  if jnp.issubdtype(dt, jnp.floating):
    i = first_index(~np.isfinite(host))
    if i is not None:
      raise ValueError(
        f"{name} holds a non-finite value{_where(i)}: NaN or infinite data would "
        "make the output NaN while the budget is spent. Clean the data first."
      )
    if target != dt:
      with np.errstate(over="ignore"):  # overflow is the refusal below
        narrowed = host.astype(target)
      i = first_index(~np.isfinite(narrowed))
      if i is not None:
        raise ValueError(
          f"{name}{_where(i)} is {host[i]}, beyond {float(jnp.finfo(target).max):.4g}, "
          f"the largest {target} (JAX stores {dt} as {target} with x64 off): it "
          "would become infinite. Rescale the data, or enable x64 "
          "(jax.config.update('jax_enable_x64', True))."
        )
      if limit is not None:
        i = first_index(np.abs(host) > limit)
        if i is not None:
          raise ValueError(
            f"{name}{_where(i)} is {host[i]} ({dt}), beyond {_limit_text(limit)}, {reason}"
          )
      host = narrowed
  else:
    info, src = jnp.iinfo(target), jnp.iinfo(dt)
    if limit is not None and limit < info.max:
      i = first_index((host < -limit) | (host > limit))
      if i is not None:
        raise ValueError(
          f"{name}{_where(i)} is {host[i]}, beyond {_limit_text(limit)}, {reason}"
        )
    if src.min < info.min or src.max > info.max:
      i = first_index((host < info.min) | (host > info.max))
      if i is not None:
        raise ValueError(
          f"{name}{_where(i)} is {host[i]}, outside [{info.min:,}, {info.max:,}]: "
          f"JAX stores {dt} as {target} with x64 off, which would wrap it. Bring the "
          "data into range (clip or rescale it) first, or enable x64 "
          "(jax.config.update('jax_enable_x64', True))."
        )
      host = host.astype(target)
  if isinstance(arr, jax.Array) and dt == target:
    return arr  # checked, and already in its dtype
  return jnp.asarray(host)


def _check_data_dtype(dt, name: str):
  if dt in (jnp.dtype(jnp.float16), jnp.dtype(jnp.bfloat16)):
    raise ArgTypeError(
      f"{name} has dtype {dt}, which cannot hold counts exactly (bfloat16 stores 257 "
      "as 256, float16 2049 as 2048); pass integers or float32/float64."
    )
  if not (
    jnp.issubdtype(dt, jnp.integer) or jnp.issubdtype(dt, jnp.floating) or dt == jnp.bool_
  ):
    raise ArgTypeError(f"{name} must be numeric or bool; got dtype {dt}.")
  return dt


def _limit_text(limit: int) -> str:
  """``limit`` written out, as a power of two when it is one."""
  k = limit.bit_length() - 1
  return f"{limit:,} = 2**{k}" if limit == 1 << k else f"{limit:,}"


def exact_limit(dtype) -> int:
  """Largest integer below which every integer is exact in the float ``dtype``."""
  return 2 ** (jnp.finfo(dtype).nmant + 1)


def float_reason(f) -> str:
  """Why (and what to do) when data exceeds :func:`exact_limit` of the float ``f``."""
  return (
    f"the largest range {jnp.dtype(f)} holds integers exactly in: noise would "
    "be added to a rounded statistic. Enable x64 "
    "(jax.config.update('jax_enable_x64', True)) for float64 releases."
  )


def as_exact_float(x, name: str = "data"):
  """Casts validated data to the default float dtype without silent rounding.

  Integers beyond the float's exact range (2**24 for float32) are an error: when
  concrete (any shape, 0-d included), naming the value; under jit, for any integer
  dtype whose range exceeds it (cast after clipping, which keeps the sensitivity).
  """
  f = jnp.result_type(float)
  if jnp.issubdtype(x.dtype, jnp.floating):
    return x
  limit = exact_limit(f)
  if is_concrete(x):
    i = first_index(np.abs(np.asarray(x).astype(np.float64)) > limit)
    if i is not None:
      raise ValueError(
        f"{name}{_where(i)} is {np.asarray(x)[i]}, beyond "
        f"{_limit_text(limit)}, {float_reason(f)}"
      )
  elif x.dtype != jnp.bool_ and jnp.iinfo(x.dtype).max > limit:
    raise ValueError(
      f"{name} is a traced {x.dtype} array, which may hold integers beyond {limit:,}, "
      f"where {jnp.dtype(f)} rounds; noise would be added to a rounded statistic. "
      f"Clip and cast first (jnp.clip({name}, -{limit}, {limit}).astype(jnp."
      f"{jnp.dtype(f).name}): clipping keeps the sensitivity), or use a narrower "
      "integer dtype" + (", or enable x64." if limit < 2**53 else ".")
    )
  return x.astype(f)
