"""Every public callable of the public API has annotated parameters and a return type.

The walk starts at ``__all__`` of :mod:`jaxdp` and of the public subpackages and
follows every submodule listed there; a class contributes its own constructor,
class methods, static methods, public methods and properties (what it inherits from
outside jaxdp is not checked). ``self``/``cls`` and ``*args``/``**kwargs`` are exempt.
"""

from __future__ import annotations

import importlib
import inspect
import types

ROOTS = (
  "jaxdp",
  "jaxdp.random",
  "jaxdp.exact",
  "jaxdp.montecarlo",
  "jaxdp.session",
  "jaxdp.mechanisms",
  "jaxdp.accounting",
  "jaxdp.composition",
  "jaxdp.composition.calibration",
  "jaxdp.composition.renyi",
  "jaxdp.composition.pld",
  "jaxdp.composition.events",
  "jaxdp.posets",
  "jaxdp.samplers",
  "jaxdp.prng",
)


def _public_names(module):
  names = getattr(module, "__all__", None)
  if names is None:
    names = [
      n
      for n, v in vars(module).items()
      if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
    ]
  return names


def _own_members(cls):
  """(qualified name, function) for what ``cls`` and its jaxdp bases define."""
  for klass in cls.__mro__:
    if not klass.__module__.startswith("jaxdp"):
      continue
    for name, attr in vars(klass).items():
      if name.startswith("_") and name not in ("__init__", "__call__"):
        continue
      if isinstance(attr, (staticmethod, classmethod)):
        yield f"{klass.__module__}.{klass.__qualname__}.{name}", attr.__func__
      elif isinstance(attr, property):
        if attr.fget is not None:
          yield f"{klass.__module__}.{klass.__qualname__}.{name}", attr.fget
      elif inspect.isfunction(attr) and attr.__qualname__.startswith(klass.__qualname__):
        # (a Protocol's __init__ comes from typing, not from the class)
        yield f"{klass.__module__}.{klass.__qualname__}.{name}", attr


def _public_callables():
  """{qualified name: function} reachable from the roots."""
  found, seen_modules = {}, set()
  pending = [importlib.import_module(name) for name in ROOTS]
  while pending:
    module = pending.pop()
    if module.__name__ in seen_modules:
      continue
    seen_modules.add(module.__name__)
    for name in _public_names(module):
      value = getattr(module, name)
      if isinstance(value, types.ModuleType):
        if value.__name__.startswith("jaxdp"):
          pending.append(value)
      elif inspect.isclass(value) and value.__module__.startswith("jaxdp"):
        for qualname, function in _own_members(value):
          found[qualname] = function
      elif inspect.isfunction(value) and value.__module__.startswith("jaxdp"):
        found[f"{value.__module__}.{value.__qualname__}"] = value
      elif callable(value) and getattr(value, "__wrapped__", None) is not None:
        wrapped = inspect.unwrap(value)
        if getattr(wrapped, "__module__", "").startswith("jaxdp"):
          found[f"{wrapped.__module__}.{wrapped.__qualname__}"] = wrapped
  return found


def _missing_annotations(function):
  signature = inspect.signature(function)
  missing = []
  for index, (name, parameter) in enumerate(signature.parameters.items()):
    if index == 0 and name in ("self", "cls"):
      continue
    if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
      continue
    if parameter.annotation is parameter.empty:
      missing.append(name)
  if signature.return_annotation is signature.empty:
    missing.append("return")
  return missing


PUBLIC = _public_callables()


def test_the_walk_finds_the_public_api():
  assert len(PUBLIC) > 100
  for name in (
    "jaxdp.accounting.accountant.Accountant.create",
    "jaxdp.mechanisms.laplace.LaplaceMechanism.randomize",
    "jaxdp.random.laplace",
  ):
    assert name in PUBLIC, name


def test_every_public_callable_is_annotated():
  missing = {
    name: gaps
    for name, function in sorted(PUBLIC.items())
    if (gaps := _missing_annotations(function))
  }
  assert not missing, "\n".join(f"{n}: {', '.join(g)}" for n, g in missing.items())


def test_the_check_catches_an_unannotated_function():
  def bare(key, shape=()):
    return key

  def annotated(key: int, *args, shape: tuple = (), **kwargs) -> int:
    return key

  assert _missing_annotations(bare) == ["key", "shape", "return"]
  assert _missing_annotations(annotated) == []
