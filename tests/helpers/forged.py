"""Forged values for the attacks on the process's shared caches and compilations."""

__all__ = ["claiming"]


def claiming(value, claim, *, converts_to_self=False):
  """An instance of a subclass of ``type(value)`` (int, float or str) worth ``value``
  that compares equal to ``claim`` (and to ``value``), hashes as ``claim`` and prints
  as it: what a field replaced with ``object.__setattr__`` shows a cache keyed by
  ``hash`` and ``==``. With ``converts_to_self``, ``float()`` of it returns itself."""
  base = type(value)
  if base not in (int, float, str) or type(claim) is not base:
    raise TypeError(f"value and claim must both be int, float or str; got {value!r}")

  def eq(self, other):
    return type(other) is base and other in (claim, value)

  namespace = {
    "__eq__": eq,
    "__ne__": lambda self, other: not eq(self, other),
    "__hash__": lambda self: hash(claim),
    "__repr__": lambda self: repr(claim),
  }
  if converts_to_self:
    namespace["__float__"] = lambda self: self
  return type(f"Claims{base.__name__.title()}", (base,), namespace)(value)
