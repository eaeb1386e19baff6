"""Process-wide caches of host computations, keyed by plain values.

A module-level cache is shared by every caller in the process, and
``functools.lru_cache`` finds an entry by ``hash`` and ``==``. An argument of an
int, float, str or bytes subclass that compares and hashes as another value (a
ball's field replaced with ``object.__setattr__`` after its checks) would file what
it computes, from its real value, under the honest value's key, for every later
caller. :func:`value_cache` passes each such argument (and each element of a tuple
argument) on as its plain builtin value, which is what the computation reads, and
keys every other argument by its type as well as its value (``typed=True``; the
objects used as keys, balls and posets, compare their fields' types too).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["plain", "value_cache"]

F = TypeVar("F", bound=Callable[..., Any])

_PLAIN = frozenset({int, float, bool, str, bytes, type(None)})
_SCALARS = _PLAIN | {type}  # passed on as they are (a class is keyed by identity)


def plain(x: Any) -> Any:
  """``x`` as its plain builtin value when it is an int, float, str or bytes (a
  subclass's real value, not what its ``==`` claims), a tuple of such values
  element by element; anything else unchanged."""
  kind = type(x)
  if kind in _PLAIN:
    return x
  if isinstance(x, int):  # (bool cannot be subclassed)
    return int.__int__(x)
  if isinstance(x, float):
    return float.__float__(x)
  if isinstance(x, str):
    return str.__str__(x)
  if isinstance(x, bytes):
    return bytes(memoryview(x))
  if isinstance(x, tuple):
    return tuple(plain(v) for v in x)
  return x


def value_cache(maxsize: int | None) -> Callable[[F], F]:
  """``functools.lru_cache(maxsize, typed=True)`` (``None``: unbounded) over the
  :func:`plain` values of the arguments. The wrapper has ``cache_clear``,
  ``cache_info`` and ``__wrapped__`` (the uncached function)."""

  def wrap(fn):
    cached = functools.lru_cache(maxsize=maxsize, typed=True)(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
      if not kwargs and all(type(a) in _SCALARS for a in args):  # the common case
        return cached(*args)
      return cached(*map(plain, args), **{k: plain(v) for k, v in kwargs.items()})

    call.cache_clear = cached.cache_clear
    call.cache_info = cached.cache_info
    return call

  return wrap
