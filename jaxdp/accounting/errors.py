"""The errors of the accountant and of planning."""

from __future__ import annotations

__all__ = [
  "BudgetExceededError",
  "ReleaseRefusedError",
  "StaleAccountantError",
  "DataDependentCostError",
]


class BudgetExceededError(ValueError):
  """A single release costs more than the whole budget (known at trace time)."""


class ReleaseRefusedError(RuntimeError):
  """A release was refused: its cost would take the total past the budget."""


class StaleAccountantError(RuntimeError):
  """A release from an accountant value whose key an earlier release already used."""


class DataDependentCostError(ValueError):
  """A release's eps or delta is computed from the data: the refusal would leak."""
