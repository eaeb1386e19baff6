"""Argument validation shared by the public API (runs outside tracing).

One wording: the message names the argument, the bad value and what to do. A wrong
*type* raises :class:`ArgTypeError`, a ``TypeError`` (that is also a ``ValueError``,
so code written against jaxdp 0.1's ``except ValueError`` keeps working); a wrong
*value* raises ``ValueError``.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


class ArgTypeError(TypeError, ValueError):
  """An argument of the wrong type (a TypeError; also a ValueError for 0.1 code)."""


def check_int(value: Any, name: str, *, minimum: int | None = None) -> int:
  """Returns ``value`` as a Python int, or raises ValueError naming ``name``."""
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    if (
      isinstance(value, (np.ndarray, jax.Array))
      and np.ndim(value) == 0
      and jnp.issubdtype(np.asarray(value).dtype, np.integer)
    ):
      value = int(value)
    else:
      raise ArgTypeError(f"{name} must be an integer; got {value!r}.")
  value = int(value)
  if minimum is not None and value < minimum:
    raise ValueError(f"{name} must be >= {minimum}; got {value}.")
  return value


def is_concrete(x: Any) -> bool:
  """True if ``x`` holds a value now (not a tracer)."""
  return not isinstance(x, jax.core.Tracer)


def varying_axes(aval: Any) -> frozenset:
  """The ``shard_map`` mesh axes along which values of type ``aval`` (``jax.typeof(x)``
  or a ``ShapeDtypeStruct``, whose ``manual_axis_type`` is None outside ``shard_map``)
  differ: empty outside ``shard_map`` and under ``check_vma=False``. Read directly, so
  a JAX that renamed the field fails loudly instead of skipping the accountant's
  check."""
  mat = aval.manual_axis_type
  return frozenset() if mat is None else frozenset(mat.varying)


def check_positive(
  value: Any, name: str, *, allow_traced: bool = False, hint: str = ""
) -> Any:
  """Checks a scalar is finite and > 0.

  Concrete values are returned as Python floats. A traced value is returned as is
  when ``allow_traced``: callers must then make a bad value produce NaN output
  rather than weaker privacy (see :func:`guard_positive`).
  """
  if not is_concrete(value):
    if not allow_traced:
      raise ValueError(
        f"{name} must be a concrete Python number here (it is static); got a traced "
        f"value. {hint}".strip()
      )
    if jnp.ndim(value) != 0:
      raise ValueError(f"{name} must be a scalar; got shape {jnp.shape(value)}.")
    if not jnp.issubdtype(jnp.result_type(value), jnp.floating) and not jnp.issubdtype(
      jnp.result_type(value), jnp.integer
    ):
      raise ArgTypeError(
        f"{name} must be a real number; got dtype {jnp.result_type(value)}."
      )
    return value
  if isinstance(value, bool):
    raise ArgTypeError(f"{name} must be a positive finite number; got {value!r}.")
  try:
    arr = np.asarray(value)
  except Exception:  # pragma: no cover - exotic objects
    raise ArgTypeError(f"{name} must be a positive finite number; got {value!r}.") from None
  if arr.ndim != 0 or not (
    np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
  ):
    raise ArgTypeError(f"{name} must be a positive finite scalar; got {value!r}.")
  v = float(arr)
  if not math.isfinite(v) or v <= 0:
    raise ValueError(f"{name} must be a positive finite number; got {v!r}. {hint}".strip())
  return v


def clip_integers(x, limit: int):
  """An integer array clipped to [-limit, limit], in its own dtype.

  The bounds must be applied in a dtype that holds them: ``jnp.clip`` casts them to
  ``x``'s dtype, which wraps (int8 values clipped to +-2^24 all become 0). Dtypes whose
  range lies inside the bounds need no clip; unsigned ones only an upper bound.
  """
  info = jnp.iinfo(x.dtype)
  if info.min >= -limit and info.max <= limit:
    return x
  if info.min == 0:
    return jnp.minimum(x, jnp.asarray(limit, x.dtype))
  return jnp.clip(x, jnp.asarray(-limit, x.dtype), jnp.asarray(limit, x.dtype))


def invalid_value(dtype):
  """What marks an output as invalid (refused, or a bad traced parameter): NaN for a
  float dtype, the dtype's minimum for an integer one (exact releases stay integer)."""
  return jnp.iinfo(dtype).min if jnp.issubdtype(dtype, jnp.integer) else jnp.nan


def mark_invalid(ok, out):
  """``out`` where ``ok``, :func:`invalid_value` of its dtype elsewhere."""
  out = jnp.asarray(out)
  return jnp.where(ok, out, invalid_value(out.dtype))


def in_range(
  name: str, value: Any, lo: float, hi: float, *, below: bool = False, hint: str = ""
) -> Any:
  """Whether ``lo <= value <= hi`` (``value < hi`` when ``below``): an allowlist,
  which NaN fails.

  Compared in float32 or wider (a float16 or integer value is cast exactly first), so
  the bounds are never rounded to 0 or infinity.

  Returns:
    True for a concrete value in range; a traced bool for a traced value.

  Raises:
    ValueError: a concrete value out of range, naming ``name``.
  """
  upper = (lambda v: v < hi) if below else (lambda v: v <= hi)
  if is_concrete(value):
    try:
      v = np.asarray(value, np.float64)
    except (TypeError, ValueError):
      raise ArgTypeError(f"{name} must be a real number; got {value!r}.") from None
    if not np.all((v >= lo) & upper(v)):
      raise ValueError(
        f"{name} must be in [{lo:.4g}, {hi:.4g}{')' if below else ']'}; got "
        f"{value!r}. {hint}".strip()
      )
    return True
  v = jnp.asarray(value)
  v = v.astype(jnp.promote_types(v.dtype, jnp.float32))
  return jnp.all((v >= lo) & upper(v))


def guard_positive(value, out):
  """Returns ``out`` where ``value`` is finite and > 0, invalid elsewhere (traced
  values): NaN, or the minimum of an integer ``out``."""
  return mark_invalid(jnp.isfinite(value) & (value > 0), out)


def check_key(key: Any, name: str = "key") -> None:
  """Rejects anything but one PRNG key (typed, or a legacy uint32 (2,) array)."""
  if isinstance(key, (jax.Array, np.ndarray)) or hasattr(key, "dtype"):
    dtype = key.dtype
    if jnp.issubdtype(dtype, jax.dtypes.prng_key):
      if key.shape != ():
        raise ValueError(
          f"{name} must be a single PRNG key; got a batch of keys with shape "
          f"{key.shape}. Pass one key and use shape=..., or jax.vmap over the keys."
        )
      return
    if dtype == jnp.uint32:
      if key.shape == (2,):
        return
      if key.ndim >= 2 and key.shape[-1] == 2:
        raise ValueError(
          f"{name} must be a single PRNG key; got a batch of raw keys with shape "
          f"{key.shape}. Pass one key and use shape=..., or jax.vmap over the keys."
        )
  raise ArgTypeError(
    f"{name} must be a PRNG key from jax.random.key(seed) (or a legacy "
    f"jax.random.PRNGKey); got {type(key).__name__} "
    f"{getattr(key, 'dtype', '')}{getattr(key, 'shape', '')}."
  )


def check_shape(shape: Any, name: str = "shape") -> tuple[int, ...]:
  """Canonicalises a shape to a tuple of non-negative Python ints."""
  if isinstance(shape, numbers.Integral) and not isinstance(shape, bool):
    shape = (shape,)
  try:
    out = tuple(check_int(s, name, minimum=0) for s in shape)
  except TypeError:
    raise ArgTypeError(
      f"{name} must be a tuple of non-negative ints; got {shape!r}."
    ) from None
  except ValueError:
    raise ValueError(
      f"{name} must be a tuple of non-negative ints; got {shape!r}."
    ) from None
  return out


def check_float_dtype(dtype: Any, name: str = "dtype"):
  """Returns a floating dtype (default: JAX's default float), or raises."""
  if dtype is None:
    return jnp.dtype(jnp.result_type(float))
  try:
    dt = jnp.dtype(dtype)
  except TypeError:
    raise ArgTypeError(f"{name} must be a floating dtype; got {dtype!r}.") from None
  if not jnp.issubdtype(dt, jnp.floating):
    raise ArgTypeError(
      f"{name} must be a floating dtype such as jnp.float32; got {dt}. Noise is "
      "real-valued; cast the result yourself if you need another type."
    )
  out = jax.dtypes.canonicalize_dtype(dt)
  if out != dt:
    warnings.warn(
      f"Explicitly requested dtype {dt} is not available, and will be truncated to "
      f"dtype {out}. To enable more dtypes, set the jax_enable_x64 configuration "
      "option or the JAX_ENABLE_X64 shell environment variable.",
      UserWarning,
      stacklevel=3,
    )
  return out


_F32 = np.finfo(np.float32)


def check_eps(value: Any, name: str = "eps") -> Any:
  """:func:`check_positive` for a privacy parameter, which must also be a normal
  float32 number (noise and budgets are computed in float32: 1e-40 would become a
  subnormal or 0, 1e39 infinity). Traced values pass through (see :func:`in_range`)."""
  v = check_positive(value, name, allow_traced=True)
  if is_concrete(v) and not float(_F32.tiny) <= v <= float(_F32.max):
    raise ValueError(
      f"{name} must be between {float(_F32.tiny):.3g} and {float(_F32.max):.3g} "
      f"(a normal float32 number); got {v!r}."
    )
  return v


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
      f"Clip and cast first (jnp.clip({name}, -{limit}, {limit}).astype(jnp.float32): "
      "clipping keeps the sensitivity), use a narrower integer dtype, or enable x64."
    )
  return x.astype(f)


def check_delta(delta, name: str) -> float:
  """A delta in [0, 1) as a Python float, or ValueError naming ``name``."""
  if isinstance(delta, bool):
    raise ArgTypeError(f"{name} must be a number in [0, 1); got {delta!r}.")
  try:
    v = float(delta)
  except (TypeError, ValueError):
    raise ArgTypeError(f"{name} must be a number in [0, 1); got {delta!r}.") from None
  if not (0 <= v < 1):
    raise ValueError(f"{name} must be in [0, 1); got {v!r}.")
  return v
