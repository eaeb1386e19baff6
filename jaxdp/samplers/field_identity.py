"""Equality and hashing of a ball's static configuration by its fields' types and
values.

A ball is the key of caches and of jit compilations (a static argument), shared by
every caller in the process. Dataclass equality compares field values with their
own ``==``, so a field replaced after construction (``object.__setattr__``) by an
int or float subclass that compares and hashes as another value would make a
forged ball equal to an honest one, and fill the honest ball's cache entries with
tables computed from its real value. Comparing each field's type too (an
allowlist: the constructors store plain ``int`` and ``float``) keeps them apart.
"""

from __future__ import annotations

import dataclasses

__all__ = ["FieldIdentity"]


class FieldIdentity:
  """Mixin for frozen dataclasses declared with ``eq=False``: ``==`` and ``hash``
  over the class and each field's ``(type, value)``."""

  def _identity(self) -> tuple:
    values = (getattr(self, f.name) for f in dataclasses.fields(self))
    return (type(self), *((type(v), v) for v in values))

  def __eq__(self, other):
    if type(other) is not type(self):
      return NotImplemented
    return self._identity() == other._identity()

  def __hash__(self):
    return hash(self._identity())
