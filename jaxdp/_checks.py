"""Argument validation shared by the public API (runs outside tracing).

One wording: the message names the argument, the bad value and what to do. A wrong
*type* raises :class:`ArgTypeError`, a ``TypeError`` (that is also a ``ValueError``,
so code written against jaxdp 0.1's ``except ValueError`` keeps working); a wrong
*value* raises ``ValueError``.
"""

from __future__ import annotations

import math
import numbers
import threading
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core


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


def is_real(v: Any) -> bool:
  """True if ``v`` is a Python or numpy real number, not a boolean."""
  return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(
    v, (bool, np.bool_)
  )


def is_concrete(x: Any) -> bool:
  """True if ``x`` holds a value now (not a tracer)."""
  return not isinstance(x, jax.core.Tracer)


def _eval_trace_type() -> type:
  """The type of JAX's top trace outside every transformation, read in a new thread:
  JAX keeps its trace state per thread, so this holds even when this module is first
  imported inside a ``jit`` (where the importing thread's top trace is the jit's)."""
  out = []
  thread = threading.Thread(target=lambda: out.append(type(jex_core.find_top_trace(()))))
  thread.start()
  thread.join()
  return out[0]


_EVAL_TRACE = _eval_trace_type()


def in_transformation() -> bool:
  """True while a JAX transformation runs (``jit``, ``make_jaxpr``, ``eval_shape``,
  ``vmap``, ``grad``, ...), whether or not any value at hand is a tracer."""
  return type(jex_core.find_top_trace(())) is not _EVAL_TRACE


def check_os_read(what: str, instead: str) -> None:
  """Raises ValueError when ``what``, a call that reads the operating system's
  entropy in Python, runs inside a JAX transformation (:func:`in_transformation`):
  there the OS is read once, while JAX traces, and the key it gives is a constant of
  the program, the same in every call, lane and step. ``instead``: what to do."""
  if in_transformation():
    raise ValueError(
      f"{what} reads the operating system's entropy in Python: inside jit, vmap, "
      "lax.map or another JAX transformation that happens once, while JAX traces, so "
      "every call of the compiled program (every vmap lane, every lax.map step) would "
      f"get the same key, and the same noise. {instead}"
    )


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


def read_only(tree):
  """``tree`` with every numpy array in it marked read-only, in place.

  Host tables cached by :func:`jaxdp._cache.value_cache` are shared by every later draw: an
  edit by caller code would silently change the law of every release after it.
  """
  for leaf in jax.tree_util.tree_leaves(tree):
    if isinstance(leaf, np.ndarray):
      leaf.setflags(write=False)
  return tree


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


def holds_invalid(x) -> bool:
  """Whether concrete ``x`` holds :func:`invalid_value` of its dtype anywhere (NaN, or
  a signed integer dtype's minimum: the mark of a refused or invalid release)."""
  x = np.asarray(x)
  if np.issubdtype(x.dtype, np.signedinteger):
    return bool(np.any(x == np.iinfo(x.dtype).min))
  return bool(np.issubdtype(x.dtype, np.floating) and np.any(np.isnan(x)))


def mark_invalid(ok, out):
  """``out`` where ``ok``, :func:`invalid_value` of its dtype elsewhere."""
  out = jnp.asarray(out)
  return jnp.where(ok, out, invalid_value(out.dtype))


def in_range(
  name: str, value: Any, lo: float, hi: float, *, below: bool = False, hint: str = ""
) -> Any:
  """Whether ``lo <= value <= hi`` (``value < hi`` when ``below``): an allowlist,
  which NaN fails.

  A traced value is compared in float64 (a float32 or narrower value, or an int32,
  exactly; the bounds exactly as the Python floats they are): a bound rounded to
  float32 could let through a value the samplers' own float64 tests refuse.

  Returns:
    True for a concrete value in range; a traced bool for a traced value.

  Raises:
    ValueError: a concrete value out of range, naming ``name``.
  """
  upper = (lambda v: v < hi) if below else (lambda v: v <= hi)
  if not is_concrete(value):
    with jax.enable_x64(True):
      v = jnp.asarray(value).astype(jnp.float64)
      return jnp.all((v >= lo) & upper(v))
  if type(value) is float:  # a float64 already: the same comparisons in Python
    fits = lo <= value and upper(value)
  else:
    try:
      v = np.asarray(value, np.float64)
    except (TypeError, ValueError):
      raise ArgTypeError(f"{name} must be a real number; got {value!r}.") from None
    fits = bool(np.all((v >= lo) & upper(v)))
  if not fits:
    raise ValueError(
      f"{name} must be in [{lo:.4g}, {hi:.4g}{')' if below else ']'}; got "
      f"{value!r}. {hint}".strip()
    )
  return True


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
  # XLA aborts the process (not an exception) on an extent product that overflows,
  # even when another extent is 0
  if math.prod(s for s in out if s) >= 2**48:
    raise ValueError(
      f"{name} {out} is too large: the product of its non-zero extents must be below "
      "2**48 (also when an extent is 0)."
    )
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
