"""Which mechanisms a secure accountant accepts: an allowlist of jaxdp's own exact
mechanism classes, each in a configuration whose noise is exact.

Exactness is derived from the mechanism's class (by exact type: a subclass may
override ``randomize`` or ``cost``) and its validated fields, never from a flag a
caller can set: ``exact = True`` on a subclass of :class:`~jaxdp.GaussianMechanism`,
or ``object.__setattr__(mech, "exact", True)`` on a float mechanism, is refused. An
instance attribute that is not one of the class's dataclass fields (one that would
shadow a method or a class attribute such as ``randomize``) is refused too, and so
are a ball or poset of a subclass of jaxdp's.

Publishable:

* :class:`~jaxdp.LaplaceMechanism` with ``exact=True`` (integer statistic, or a
  ``grid`` of a power of two);
* :class:`~jaxdp.KNormMechanism` with ``exact=True`` and a :class:`~jaxdp.PosetBall`,
  an :class:`~jaxdp.LpBall` with p = 1, 2 or inf, or a :class:`~jaxdp.SumBall`,
  :class:`~jaxdp.CountBall` or :class:`~jaxdp.VoteBall` with d <= 1024;
* :class:`~jaxdp.PosetCountMechanism` with ``exact=True`` (every noise in
  :data:`~jaxdp.mechanisms.EXACT_COUNT_NOISES`);
* :class:`~jaxdp.SumQueryMechanism`, :class:`~jaxdp.CountQueryMechanism` and
  :class:`~jaxdp.VoteQueryMechanism` with ``exact=True`` (every noise in
  :data:`~jaxdp.mechanisms.EXACT_QUERY_NOISES`, and each query's ``"ball"``;
  sizes as their constructors check);
* :class:`~jaxdp.DiscreteGaussianMechanism` (always exact).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from typing import Any

import jax
import numpy as np

from jaxdp.exact.count_ball import MAX_COUNT_D
from jaxdp.exact.sum_ball import MAX_SUM_D
from jaxdp.exact.vote_ball import MAX_VOTE_D
from jaxdp.mechanisms.discrete_gaussian import DiscreteGaussianMechanism
from jaxdp.mechanisms.knorm import KNormMechanism
from jaxdp.mechanisms.laplace import LaplaceMechanism
from jaxdp.mechanisms.poset_count import EXACT_COUNT_NOISES, PosetCountMechanism
from jaxdp.mechanisms.queries import (
  CountQueryMechanism,
  SumQueryMechanism,
  VoteQueryMechanism,
)
from jaxdp.posets import Poset, canonical
from jaxdp.samplers.balls import LpBall, PosetBall
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall

__all__ = ["PUBLISHABLE", "PUBLISHABLE_TEXT", "publishable_problem", "is_publishable"]

PUBLISHABLE = (
  LaplaceMechanism,
  KNormMechanism,
  PosetCountMechanism,
  DiscreteGaussianMechanism,
  SumQueryMechanism,
  CountQueryMechanism,
  VoteQueryMechanism,
)
QUERIES = (SumQueryMechanism, CountQueryMechanism, VoteQueryMechanism)
# the query balls with exact noise, by exact type, and their largest d
QUERY_BALL_LIMITS = {SumBall: MAX_SUM_D, CountBall: MAX_COUNT_D, VoteBall: MAX_VOTE_D}

PUBLISHABLE_TEXT = (
  "publishable are instances of exactly (not a subclass of) LaplaceMechanism(..., "
  "exact=True) (optionally with grid=2.0**-k), KNormMechanism(..., exact=True) with "
  "a PosetBall, an LpBall of p = 1, 2 or inf, or a SumBall, CountBall or VoteBall "
  "(d <= 1024), PosetCountMechanism(..., exact=True), DiscreteGaussianMechanism, "
  "and SumQueryMechanism, CountQueryMechanism and VoteQueryMechanism (any noise) "
  "with exact=True"
)


def publishable_problem(mech: Any) -> str | None:
  """Why ``mech`` is not publishable, or None when it is.

  Args:
    mech: any object.

  Returns:
    None for an instance of exactly one of :data:`PUBLISHABLE` in an exact
    configuration (see the module docstring), else a sentence naming its type and
    what is wrong.
  """
  name = type(mech).__qualname__
  if type(mech) not in PUBLISHABLE:
    base = next((c for c in type(mech).__mro__ if c.__module__.startswith("jaxdp.")), None)
    if base in PUBLISHABLE:
      return (
        f"{name} is a subclass of {base.__name__}, not {base.__name__} itself (a "
        "subclass may change its noise or cost whatever it says of itself)"
      )
    if base is not None and base is not type(mech):
      return (
        f"{name} (a subclass of {base.__name__}) is not one of jaxdp's exact "
        "mechanism classes, whatever it says of itself"
      )
    return f"{name} is not one of jaxdp's exact mechanism classes"
  problem = _instance_problem(mech, name)
  if problem:
    return problem
  if type(mech) is DiscreteGaussianMechanism:
    return None
  if mech.exact is not True:
    return f"{name} has exact={mech.exact!r}: its noise is float noise"
  if type(mech) is PosetCountMechanism:
    if mech.noise not in EXACT_COUNT_NOISES:
      return f"{name} has noise={mech.noise!r}, which has no exact sampler"
    return _poset_problem(mech.poset, f"{name}.poset")
  if type(mech) is KNormMechanism:
    return _ball_problem(mech.ball, name)
  if type(mech) in QUERIES:
    if mech.noise not in type(mech).exact_noises:
      return f"{name} has noise={mech.noise!r}, which has no exact sampler"
    try:  # the sizes as the constructor checks them (fields may be set after it)
      mech.valid()
    except (TypeError, ValueError) as e:
      return f"{name} has bad fields: {e}"
    return None
  grid = mech.grid
  if grid is not None and not (
    type(grid) is float and math.frexp(grid)[0] == 0.5 and 2.0**-60 <= grid <= 2.0**20
  ):
    return f"{name} has grid={grid!r}, not a power of two 2**-k (snapping would round)"
  return None


def is_publishable(mech: Any) -> bool:
  """Whether a secure accountant accepts ``mech`` (:func:`publishable_problem`)."""
  return publishable_problem(mech) is None


def _ball_problem(ball, name):
  if type(ball) not in (PosetBall, LpBall, *QUERY_BALL_LIMITS):
    return (
      f"{name}.ball is a {type(ball).__qualname__}, not a jaxdp.PosetBall, "
      "jaxdp.LpBall, jaxdp.SumBall, jaxdp.CountBall or jaxdp.VoteBall itself"
    )
  problem = _instance_problem(ball, f"{name}.ball")
  if problem:
    return problem
  if type(ball) in QUERY_BALL_LIMITS:
    limit = QUERY_BALL_LIMITS[type(ball)]
    try:  # the sizes as the constructor checks them (fields may be set after it)
      fresh = VoteBall(ball.d) if type(ball) is VoteBall else type(ball)(ball.d, ball.k)
    except (TypeError, ValueError) as e:
      return f"{name}.ball has bad fields: {e}"
    if fresh != ball or ball.d > limit:
      return f"{name}.ball is {ball!r}; exact {ball.name} noise needs d <= {limit}"
    return None
  if type(ball) is PosetBall:
    return _poset_problem(ball.poset, f"{name}.ball.poset")
  if ball.p not in (1.0, 2.0, math.inf):
    return f"{name}.ball is an l_{ball.p:g} ball, which has no exact sampler"
  return None


def _poset_problem(poset, name):
  if type(poset) is not Poset:
    return f"{name} is a {type(poset).__qualname__}, not a jaxdp.Poset itself"
  try:
    verified = _verified(poset)
  except ValueError as e:
    return f"{name} does not hold the relation it was created with: {e}"
  fields = {f.name for f in dataclasses.fields(Poset)}
  for key, value in vars(poset).items():
    if key not in fields and not _computed_by_class(verified, key, value):
      return f"{name} holds an attribute {key!r} that its class did not compute"
  return None


# id(poset) -> (weak reference, the relation verified, a fresh poset of it,
# {attribute: verified value})
_VERIFIED: dict = {}


def _verified(poset) -> tuple:
  """``(reference, seen)``: a fresh poset built from ``poset``'s current relation, and
  the attribute values already verified against it. Both start afresh once the
  relation object was replaced (``object.__setattr__``); the new one is checked to be
  canonical (a tuple of tuples of bools, which cannot change in place) and a partial
  order (the fresh poset's construction).

  Raises:
    ValueError: the relation is not canonical, or not a partial order.
  """
  ref, relation, reference, seen = _VERIFIED.get(id(poset), (None, None, None, {}))
  if ref is not None and ref() is poset and relation is poset.relation:
    return reference, seen
  relation = poset.relation
  canonical.relation_key(relation)
  reference, seen = Poset(relation), {}
  ref = weakref.ref(poset, functools.partial(_forget, id(poset)))
  _VERIFIED[id(poset)] = (ref, relation, reference, seen)
  return reference, seen


def _computed_by_class(verified, key, value) -> bool:
  """Whether ``value`` is what the cached property ``key`` of a fresh poset of the
  same relation holds (checked once per relation and value object: the samplers
  read these, e.g. ``parents``). An array must be read-only, as the class leaves
  it."""
  reference, seen = verified
  if not isinstance(type(reference).__dict__.get(key), functools.cached_property):
    return False
  if isinstance(value, np.ndarray) and value.flags.writeable:
    return False
  if seen.get(key) is value:
    return True
  if not _same(value, getattr(reference, key)):
    return False
  seen[key] = value
  return True


def _forget(i, _ref):
  _VERIFIED.pop(i, None)


# The types a field of a publishable mechanism or ball may hold (by exact type; the
# constructors store these, or JAX's own arrays and tracers for a traced parameter): a
# subclass of float can say 1.0 to one reader (the charge) and convert to 50.0 for
# another (the noise's float(eps)).
PLAIN_TYPES = (float, int, bool, str, type(None))
# Fields holding a jaxdp object, checked by their own rules.
OBJECT_FIELDS = ("ball", "poset")


def _instance_problem(obj, name):
  """Instance attributes must be exactly the dataclass's fields (an extra one could
  shadow a method or a class attribute: ``randomize``, ``exact``), each holding a
  value of exactly one of :data:`PLAIN_TYPES` (allowlist) unless it is a ball or a
  poset."""
  fields = {f.name for f in dataclasses.fields(type(obj))}
  extra = sorted(set(vars(obj)) - fields)
  if extra:
    return (
      f"{name} has instance attribute(s) {', '.join(map(repr, extra))} that are not "
      f"fields of {type(obj).__name__} (they would shadow its class's own)"
    )
  missing = sorted(fields - set(vars(obj)))
  if missing:
    return f"{name} lacks its field(s) {', '.join(map(repr, missing))}"
  for key in sorted(fields - set(OBJECT_FIELDS)):
    value = vars(obj)[key]
    kind = type(value)
    if kind not in PLAIN_TYPES and not _jax_array(value):
      return (
        f"{name}.{key} holds a {kind.__qualname__}, not a plain float, int, bool, str "
        "or None (or a JAX array) as its constructor stores (a subclass may convert "
        "to another value than it shows); construct the mechanism again"
      )
  return None


def _jax_array(value) -> bool:
  """A JAX array or tracer of JAX's own classes (a traced parameter), not a
  subclass defined elsewhere."""
  return isinstance(value, jax.Array) and type(value).__module__.split(".")[0] in (
    "jax",
    "jaxlib",
  )


def _same(a, b) -> bool:
  if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
    return (
      isinstance(a, np.ndarray)
      and isinstance(b, np.ndarray)
      and a.dtype == b.dtype
      and np.array_equal(a, b)
    )
  return type(a) is type(b) and a == b
