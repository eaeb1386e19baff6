"""Value numbering of jaxpr values: two values get the same number when the same
primitives with the same parameters compute them from the same inputs (constants
compared by value). The dependence analysis uses it to see that the branches of a
``cond`` make the same releases."""

from __future__ import annotations

import itertools

import jax
import numpy as np
from jax.extend import core as jex_core

from jaxdp import _checks
from jaxdp.accounting.jaxprs import FINAL, call_jaxpr, digest, split

__all__ = ["ValueNumbering", "mechanism_key"]


def mechanism_key(inputs):
  """The mechanisms among a release's ``inputs`` as a hashable key: their classes,
  static fields and leaf values, or None when a leaf is traced or a value unreadable
  (a release that is then like no other)."""
  mechs = [x for x in jax.tree.leaves(inputs, is_leaf=_is_mechanism) if _is_mechanism(x)]
  leaves, treedef = jax.tree.flatten(mechs)
  values = tuple(digest(x) if _checks.is_concrete(x) else None for x in leaves)
  key = None if None in values else (treedef, values)
  try:
    hash(key)
  except TypeError:  # an unhashable static field
    return None
  return key


def _is_mechanism(x) -> bool:
  return callable(getattr(x, "randomize", None))


class ValueNumbering:
  """Value numbers: equal numbers mean equal values (the converse need not hold)."""

  def __init__(self, release_key):
    self._table: dict = {}
    self._fresh = itertools.count()
    self._release_key = release_key
    self._structures: dict = {}  # id(jaxpr) -> (jaxpr, key)
    self._holding: dict = {}  # id(jaxpr) -> (jaxpr, whether it holds a release)

  def intern(self, key) -> int:
    return self._table.setdefault(key, len(self._table))

  def fresh(self) -> int:
    return self.intern(("fresh", next(self._fresh)))

  def literal(self, lit) -> int:
    d = None if lit is None else digest(lit.val)
    return self.fresh() if d is None else self.intern(("literal", str(lit.aval), d))

  def value(self, x) -> int:
    d = digest(x)
    return self.fresh() if d is None else self.intern(("const", d))

  def eqn(self, eqn, in_ids):
    """``(value numbers of an equation's outputs, numbers of the releases it makes,
    in order)``. An equation holding releases (a nested cond or loop) stands for all
    of them; a call is numbered as its inner jaxpr."""
    n, name = len(eqn.outvars), eqn.primitive.name
    if eqn.effects:  # an effect may give different values to equal-looking calls
      outs = [self.fresh() for _ in range(n)]
      return outs, (self.intern(("release", tuple(outs))),) if self._holds(eqn) else ()
    if name == "jaxdp_state":
      i = eqn.params["index"]
      k = self.intern(
        ("eqn", name, FINAL if i == FINAL else self._release_key(i), tuple(in_ids))
      )
      return [self.intern(("out", k, j)) for j in range(n)], () if i == FINAL else (k,)
    call = call_jaxpr(eqn)
    if call is not None:
      return self.run(call, in_ids)
    k = self.intern(("eqn", name, self._params(eqn.params), tuple(in_ids)))
    return [self.intern(("out", k, j)) for j in range(n)], (k,) if self._holds(eqn) else ()

  def run(self, j, in_ids):
    """``(value numbers of j's outputs, numbers of its releases in order)`` for
    inputs numbered ``in_ids``."""
    jaxpr, consts = split(j)
    ids = dict(zip(jaxpr.invars, in_ids))
    for k, v in enumerate(jaxpr.constvars):
      ids[v] = self.value(consts[k]) if consts is not None else self.fresh()
    read = lambda v: (
      self.literal(v)
      if isinstance(v, jex_core.Literal)
      else ids[v]
      if v in ids
      else self.fresh()
    )
    releases = ()
    for eqn in jaxpr.eqns:
      outs, made = self.eqn(eqn, [read(v) for v in eqn.invars])
      releases += made
      ids.update(zip(eqn.outvars, outs))
    return [read(v) for v in jaxpr.outvars], releases

  def _holds(self, eqn) -> bool:
    """Whether an equation is a release's marker or holds one."""
    if eqn.primitive.name == "jaxdp_state":
      return eqn.params["index"] != FINAL
    return any(self._holds_in(s) for s in jex_core.jaxprs_in_params(eqn.params))

  def _holds_in(self, jaxpr) -> bool:
    hit = self._holding.get(id(jaxpr))
    if hit is None or hit[0] is not jaxpr:
      hit = (jaxpr, any(self._holds(e) for e in jaxpr.eqns))
      self._holding[id(jaxpr)] = hit
    return hit[1]

  def _structure(self, j):
    """A key equal for jaxprs that compute the same function the same way."""
    jaxpr, _ = split(j)
    hit = self._structures.get(id(j))
    if hit is not None and hit[0] is j:
      return hit[1]
    args = [self.intern(("arg", k, str(v.aval))) for k, v in enumerate(jaxpr.invars)]
    outs, releases = self.run(j, args)
    key = ("jaxpr", tuple(outs), releases)
    self._structures[id(j)] = (j, key)
    return key

  def _params(self, params):
    return tuple((k, self._param(v)) for k, v in sorted(params.items()))

  def _param(self, v):
    if isinstance(v, (jex_core.Jaxpr, jex_core.ClosedJaxpr)):
      return self._structure(v)
    if isinstance(v, (tuple, list)):
      return ("seq", tuple(self._param(x) for x in v))
    if isinstance(v, np.ndarray):
      d = digest(v)
      return ("fresh", next(self._fresh)) if d is None else ("array", d)
    if isinstance(v, (float, complex, np.inexact)):  # -0.0 == 0.0, but they differ
      return ("number", type(v), repr(v))
    try:
      hash(v)
    except TypeError:
      return ("fresh", next(self._fresh))
    return ("object", type(v), v)
