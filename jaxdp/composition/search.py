"""Searches shared by the composition mathematics: bisection on a monotone predicate."""

from __future__ import annotations

import math
from collections.abc import Callable

__all__ = ["bisect", "safe_exp"]


def bisect(
  feasible: Callable[[float], bool], good: float, bad: float, *, steps: int = 200
) -> float:
  """The boundary of a monotone predicate, on its feasible side.

  ``feasible(good)`` holds (or is the side to return) and ``feasible(bad)`` does not;
  ``good`` may lie above or below ``bad``. Returns the last feasible point found.
  """
  for _ in range(steps):
    mid = (good + bad) / 2
    if feasible(mid):
      good = mid
    else:
      bad = mid
  return good


def safe_exp(x: float) -> float:
  """math.exp, with inf instead of OverflowError."""
  try:
    return math.exp(x)
  except OverflowError:
    return math.inf
