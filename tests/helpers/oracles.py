"""Independent references for the accounting tests, in mpmath."""

import mpmath


def renyi_filter_budgets(eps, delta, orders) -> tuple[tuple, tuple]:
  """The Rényi filter's kept orders and their budgets, in the caller's mpmath precision.

  Each of the m kept orders gets delta / m and B_a = eps - (log(m / delta) +
  (a-1) log(1 - 1/a) - log a) / (a - 1) (Canonne, Kamath & Steinke, Proposition 12);
  orders with B_a <= 0 are dropped until none is. ``((), ())`` when no order holds
  anything.
  """
  kept = list(orders)
  while kept:
    m = len(kept)
    budgets = [
      eps
      - (
        mpmath.log(m / mpmath.mpf(delta))
        + (a - 1) * mpmath.log(1 - 1 / mpmath.mpf(a))
        - mpmath.log(a)
      )
      / (a - 1)
      for a in kept
    ]
    if all(b > 0 for b in budgets):
      return tuple(kept), tuple(budgets)
    kept = [a for a, b in zip(kept, budgets) if b > 0]
  return (), ()
