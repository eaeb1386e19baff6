"""Composition rules of the accountant: one class per rule, one protocol.

``Accountant.create(composition=...)`` takes a rule instance or one of the names in
:data:`RULES` (with the rule's options as keyword arguments).
"""

from __future__ import annotations

from jaxdp import _checks
from jaxdp.accounting.rules.advanced import AdvancedComposition
from jaxdp.accounting.rules.base import Capacity, CompositionRule, UnitRule, bound_rule
from jaxdp.accounting.rules.basic import BasicComposition
from jaxdp.accounting.rules.planned import PlannedComposition
from jaxdp.accounting.rules.renyi import RenyiFilter
from jaxdp.accounting.rules.zcdp import ZCDPFilter

__all__ = [
  "CompositionRule",
  "UnitRule",
  "Capacity",
  "BasicComposition",
  "AdvancedComposition",
  "ZCDPFilter",
  "RenyiFilter",
  "PlannedComposition",
  "RULES",
  "COMPOSITIONS",
  "make_rule",
  "check_own_rule",
  "bound_rule",
]

RULES = {
  "basic": BasicComposition,
  "advanced": AdvancedComposition,
  "zcdp": ZCDPFilter,
  "rdp": RenyiFilter,
  "planned": PlannedComposition,
}
COMPOSITIONS = tuple(RULES)


def check_own_rule(composition: str | CompositionRule, why: str) -> None:
  """Raises unless ``composition`` is a name of :data:`RULES` or an instance whose
  type is exactly one of jaxdp's rule classes (no subclass: a subclass may override
  what the proofs rest on, such as ``allows``).

  Args:
    composition: the ``composition`` argument.
    why: who asks and why, for the message (``"for a secure accountant: ..."``).

  Raises:
    ValueError: an unknown name.
    ArgTypeError: any other value (a custom rule, a subclass of a jaxdp rule).
  """
  if isinstance(composition, str):
    if composition not in RULES:
      raise ValueError(f"composition must be one of {COMPOSITIONS}; got {composition!r}.")
    return
  if type(composition) not in RULES.values():
    classes = ", ".join(c.__name__ for c in RULES.values())
    raise _checks.ArgTypeError(
      f"composition must be one of {COMPOSITIONS} or an instance of exactly one of "
      f"jaxdp's rule classes ({classes}; not a subclass) {why}; got "
      f"{composition!r} (a {type(composition).__qualname__})."
    )


def make_rule(
  composition,
  eps_budget: float,
  delta_budget: float,
  *,
  max_releases=None,
  delta_prime: float = 0.0,
  orders=None,
  plan=None,
):
  """The bound rule for ``composition``: a name of :data:`RULES` with its options,
  or a rule instance (its options are its own: the keyword options must be unset).

  Raises:
    ValueError: an unknown name, an option for another rule, or an option or budget
      out of range for the rule.
  """
  if not isinstance(composition, str):
    if not isinstance(composition, CompositionRule):
      raise _checks.ArgTypeError(
        f"composition must be one of {COMPOSITIONS} or a composition rule (see "
        f"jaxdp.accounting.rules); got {composition!r}."
      )
    given = [
      name
      for name, value, unset in (
        ("max_releases", max_releases, None),
        ("delta_prime", delta_prime, 0.0),
        ("orders", orders, None),
        ("plan", plan, None),
      )
      if value is not unset and value != unset
    ]
    if given:
      raise ValueError(
        f"{', '.join(given)} must be given to the rule "
        f"{type(composition).__name__}, not to create, when composition "
        "is a rule instance."
      )
    return composition.bind(eps_budget, delta_budget)
  if composition not in RULES:
    raise ValueError(f"composition must be one of {COMPOSITIONS}; got {composition!r}.")
  if composition == "advanced":
    rule = AdvancedComposition(max_releases, delta_prime)
  else:
    if max_releases is not None:  # accepted by every rule; only advanced uses it
      _checks.check_int(max_releases, "max_releases", minimum=0)
    rule = RULES[composition]() if composition != "rdp" else RenyiFilter(orders)
  if rule.needs_delta and not delta_budget > 0:
    rule.bind(eps_budget, delta_budget)  # raises: the rule converts at delta_budget
  if (plan is not None) != (composition == "planned"):
    raise ValueError(
      "composition='planned' needs plan=jaxdp.plan(...), and plan is "
      f"only for it; got composition={composition!r}, plan={plan!r}."
    )
  if orders is not None and composition != "rdp":
    raise ValueError(f"orders is for composition='rdp'; got composition={composition!r}.")
  if composition == "planned":
    rule = PlannedComposition(plan)
  return rule.bind(eps_budget, delta_budget)
