"""Equality and hashing of a static configuration by its fields' types and values.

A ball (a rule, a training plan, a constraint graph) is the key of caches and of jit
compilations (a static argument, or a static field of a pytree argument), shared by
every caller in the process. Dataclass equality compares field values with their
own ``==``, so a field replaced after construction (``object.__setattr__``) by an
int or float subclass that compares and hashes as another value (or a tuple holding
one) would make a forged object equal to an honest one, and fill the honest object's
cache entries and compilations with what its real value computes. So would an
instance attribute shadowing a method (``object.__setattr__(ball, "knorm_points",
...)``), which ``==`` never reads. Comparing each field's type too (an allowlist:
the constructors store plain ``int``, ``float``, ``str`` and tuples of them), into
tuples element by element, and the names of any instance attributes beyond the
fields (an honest object has none), keeps them apart.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["FieldIdentity", "typed"]


def typed(value: Any) -> Any:
  """``(type, value)``, and for a tuple (a named tuple too) ``(its type, its elements
  typed)``: equal for two values only when their types are, all the way into
  tuples."""
  if isinstance(value, tuple):
    return (type(value), tuple(typed(v) for v in value))
  return (type(value), value)


class FieldIdentity:
  """Mixin for frozen dataclasses declared with ``eq=False``: ``==`` and ``hash``
  over the class, the names of instance attributes that are not fields, and each
  compared field's :func:`typed` value."""

  def _identity(self) -> tuple:
    names = {f.name for f in dataclasses.fields(self)}
    extra = tuple(sorted(k for k in getattr(self, "__dict__", {}) if k not in names))
    values = (typed(getattr(self, f.name)) for f in _compared(self))
    return (type(self), extra, *values)

  def __eq__(self, other):
    if other is self:  # (jit compares its static arguments on every call)
      return True
    if type(other) is not type(self):
      return NotImplemented
    return self._identity() == other._identity()

  def __hash__(self):
    return hash(self._identity())


def _compared(obj) -> tuple:
  """The dataclass fields of ``obj`` that ``==`` compares."""
  return tuple(f for f in dataclasses.fields(obj) if f.compare)
