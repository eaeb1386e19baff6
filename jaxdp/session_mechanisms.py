"""The mechanisms a :class:`~jaxdp.Session` accepts: jaxdp's own, built again.

An analyst hands a session a mechanism, and with it a ball or a poset: objects the
analyst made, may still hold and may have changed in place (``object.__setattr__``
passes a frozen dataclass). A session releases none of them. It takes a mechanism
of exactly one of jaxdp's classes (a subclass could override its noise or cost)
whose ball and poset are exactly jaxdp's too, refuses an instance attribute beyond
a mechanism's or ball's dataclass fields (it would shadow a method: a ball's
``norm``, by which each row is clipped, or ``bounding_box``), and builds each part
again through its constructor, which checks it (a poset's relation a partial order,
a ball's sizes in range). Every static field of the copy must then hold a plain
value (exactly a ``float``, ``int``, ``bool``, ``str`` or ``None``: a subclass of
``str`` may compare equal to one reader and not to another). The copy is the
session's own: changing the analyst's objects later changes nothing.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxdp import _checks
from jaxdp.mechanisms import (
  DiscreteGaussianMechanism,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  PosetCountMechanism,
)
from jaxdp.mechanisms.publishable import PLAIN_TYPES
from jaxdp.posets import Poset
from jaxdp.rowwise import LRU
from jaxdp.samplers import CountBall, LpBall, PosetBall, SumBall, VoteBall

__all__ = ["BALLS", "MECHANISMS", "POSETS", "own_mechanism"]

MECHANISMS = (
  LaplaceMechanism,
  GaussianMechanism,
  KNormMechanism,
  PosetCountMechanism,
  DiscreteGaussianMechanism,
)
BALLS = (PosetBall, LpBall, SumBall, CountBall, VoteBall)


def own_mechanism(mech: Any) -> Any:
  """A copy of ``mech``, its ball and its poset, each built again by its constructor.

  Args:
    mech: what the analyst passed as a mechanism.

  Returns:
    A new mechanism of ``mech``'s class, sharing no object with it but plain values.

  Raises:
    TypeError: ``mech``, its ball or its poset is not exactly one of jaxdp's classes,
      holds an instance attribute beyond its fields, or a field that is not a plain
      value (an ``ArgTypeError``, also a ValueError).
    ValueError: a field out of range, as the class's constructor checks it (a
      relation that is not a partial order, a ball's ``k`` of 0, ...).
  """
  if type(mech) not in MECHANISMS:  # a subclass could override randomize or cost
    raise _checks.ArgTypeError(
      f"mech must be one of jaxdp's mechanisms "
      f"({', '.join(m.__name__ for m in MECHANISMS)}); got {type(mech).__name__}."
    )
  return _rebuilt(mech, "mech")


def _rebuilt(obj, name):
  """``obj`` built again from its fields (balls and posets too)."""
  if type(obj) is Poset:  # its cached properties may sit in its __dict__: not copied
    return _own_poset(vars(obj))
  held = vars(obj)
  extra = sorted(set(held) - {f.name for f in dataclasses.fields(obj)})
  if extra:
    raise _checks.ArgTypeError(
      f"{name} ({type(obj).__name__}) has instance attribute(s) "
      f"{', '.join(map(repr, extra))} that are not its fields (they would shadow its "
      "class's own); construct it again."
    )
  values = {}
  for f in dataclasses.fields(obj):
    value = held.get(f.name)
    if f.name in ("ball", "poset"):
      kinds = BALLS if f.name == "ball" else (Poset,)
      if type(value) not in kinds:  # a subclass could lie
        raise _checks.ArgTypeError(
          f"{name}.{f.name} must be a {' or '.join(k.__name__ for k in kinds)} "
          f"itself, not a subclass; got {type(value).__name__}."
        )
      value = _rebuilt(value, f"{name}.{f.name}")
    values[f.name] = value
  fresh = type(obj)(**values)  # the constructor's checks and conversions
  for f in dataclasses.fields(fresh):
    value = vars(fresh)[f.name]
    if f.name not in ("ball", "poset") and type(value) not in PLAIN_TYPES:
      raise _checks.ArgTypeError(
        f"{name}.{f.name} holds a {type(value).__qualname__}, not a plain float, int, "
        "bool, str or None (a subclass may compare or convert to another value for "
        "each reader); pass a plain value."
      )
  return fresh


POSETS = LRU(64)  # id(relation) -> (relation, the poset built from it): held, so the
# id is not reused while cached, and only for an immutable relation


def _own_poset(held: dict) -> Poset:
  """A poset built by :class:`~jaxdp.Poset` from the relation (and a plain name and
  labels) held in ``held`` (a poset's ``__dict__``). The one built from a relation
  made of exactly tuples and bools (which cannot change) is reused while that
  relation object is: a repeated query on one poset checks it once."""
  relation = held.get("relation")
  name, labels = held.get("name", ""), held.get("labels", ())
  name = name if type(name) is str else ""  # kept for reprs and messages
  labels = labels if type(labels) is tuple and all(type(x) is str for x in labels) else ()
  hit = POSETS.get(id(relation))
  if hit is not None and hit[0] is relation:
    fresh = hit[1]
    if fresh.name == name and fresh.labels == labels:
      return fresh
  fresh = Poset(relation, name=name, labels=labels)  # checks a partial order
  if type(relation) is tuple and all(
    type(row) is tuple and all(type(b) is bool for b in row) for row in relation
  ):
    POSETS.put(id(relation), (relation, fresh))
  return fresh
