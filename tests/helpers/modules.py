"""Loading a script of the repository (a benchmark, a tool) as a module by its path."""

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["ROOT", "load_script"]


def load_script(relative: str) -> ModuleType:
  """The module of the file ``ROOT / relative`` (e.g. ``"benchmarks/floors.py"``),
  named by its stem, executed afresh."""
  path = ROOT / relative
  spec = importlib.util.spec_from_file_location(path.stem, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
