"""Module paths that moved: the old path stays importable and is the new module."""

import importlib
import sys
import warnings


def alias(old: str, new: str, *, warn: bool = True):
  """Makes ``import old`` give the module ``new`` itself (the same object).

  Args:
    old: the module path that moved (the shim's ``__name__``).
    new: where the module lives now.
    warn: emit a ``DeprecationWarning`` naming the new path (public paths); ``False``
      for package-internal paths.

  Returns:
    The module ``new``.
  """
  module = importlib.import_module(new)
  if warn:
    warnings.warn(
      f"{old} moved to {new}: import it from there (the old path is kept "
      "for compatibility and will be removed in a future release).",
      DeprecationWarning,
      stacklevel=3,
    )
  sys.modules[old] = module
  return module
