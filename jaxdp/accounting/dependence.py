"""Which releases depend on the data: a dependence analysis of a traced jaxpr.

:func:`jaxdp.plan` traces a query function with its data arguments abstract. While it
traces, :func:`mark_cost` tags each release's traced (eps, delta),
:func:`mark_state` tags the accountant state each release starts from (every release,
static cost or not: it also marks where the release runs) and the accountant the
function returns, and :func:`mark_released` tags each release's output.
:func:`analyse` then walks the jaxpr and reports, for every release, which data
arguments its cost depends on (data dependence), which ones decide whether it runs at
all (control dependence: the index of an enclosing ``cond``/``switch``, the predicate
of an enclosing ``while_loop``) and which ones its starting state depends on; and the
order in which the releases run. A released output counts as independent of the data
(postprocessing, Dwork's Proposition 2.4: choosing the next eps, or whether to
release at all, from earlier *answers* is allowed), so only what is computed from the
raw data is flagged.

A ``cond`` whose branches make the same releases (same mechanisms, parameters and
order, from the same accountant state) does not make them control dependent: every
branch then leaves the accountant in the same state, key included. Sameness is
decided by value numbering: two branch outputs are the same when they are computed by
the same primitives with the same parameters from the same inputs (constants compared
by value), and then that output of the ``cond`` does not depend on its index.

The analysis is conservative: through primitives it does not know it assumes every
output depends on every input, and that a release inside them runs or not depending
on every input, so it may flag a release that does not really depend on the data,
never the reverse.
"""

from __future__ import annotations

import hashlib
import itertools
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core
from jax.interpreters import batching, mlir

FINAL = -1  # index of the state marker on the accountant the query function returns

_cost_p = jex_core.Primitive("jaxdp_cost")
_released_p = jex_core.Primitive("jaxdp_released")
for _p in (_cost_p, _released_p):
  _p.def_impl(lambda x, **_: x)
  _p.def_abstract_eval(lambda x, **_: x)
  mlir.register_lowering(_p, lambda ctx, x, **_: [x])
batching.primitive_batchers[_cost_p] = (
    lambda args, dims, **p: (_cost_p.bind(*args, **p), dims[0]))
batching.primitive_batchers[_released_p] = (
    lambda args, dims, **p: (_released_p.bind(*args, **p), dims[0]))

_state_p = jex_core.Primitive("jaxdp_state")
_state_p.multiple_results = True
_state_p.def_impl(lambda *xs, **_: list(xs))
_state_p.def_abstract_eval(lambda *xs, **_: list(xs))
mlir.register_lowering(_state_p, lambda ctx, *xs, **_: list(xs))
batching.primitive_batchers[_state_p] = (
    lambda args, dims, **p: (_state_p.bind(*args, **p), list(dims)))


def mark_cost(x, index: int):
  """Tags a traced cost of release ``index`` (identity)."""
  return _cost_p.bind(jnp.asarray(x), index=index)


def mark_released(tree):
  """Tags every array leaf of a released output (identity)."""
  return jax.tree_util.tree_map(lambda x: _released_p.bind(jnp.asarray(x)), tree)


def mark_state(leaves, index: int) -> list:
  """Tags the accountant state (its array leaves) that release ``index`` starts from,
  or with ``index=FINAL`` the state the query function returns (identity)."""
  leaves = [x if isinstance(x, jax.Array) else jnp.asarray(x) for x in leaves]
  return list(_state_p.bind(*leaves, index=index)) if leaves else []


class Analysis(NamedTuple):
  """What :func:`analyse` found.

  ``found[i]`` maps ``"cost"``, ``"control"`` and ``"state"`` to the positions of the
  jaxpr inputs that release ``i``'s cost, whether it runs, and the accountant state
  it starts from depend on, and to what makes it so (for ``"control"``: the construct,
  ``"cond"``, ``"while"`` or an unknown primitive's name). ``final`` holds the inputs
  the returned accountant's state depends on. ``order`` lists the releases in the
  order they run (a ``cond`` whose branches make the same releases contributes its
  first branch's). ``unplanned[i]`` names the construct that decides at run time,
  from data-independent values, whether or how often release ``i`` runs.
  """
  found: dict
  final: frozenset
  order: list
  unplanned: dict


def analyse(closed, release_key: Callable[[int], object]) -> Analysis:
  """Walks the closed jaxpr of a planned query function.

  Args:
    closed: the ``ClosedJaxpr`` (its inputs are the data).
    release_key: what release ``i`` is (its mechanism and parameters), hashable;
      releases with equal keys charge the same and may stand in for each other in
      the branches of a ``cond``.
  """
  an = _Analysis(release_key)
  n = len(closed.jaxpr.invars)
  ids = [an.vn.intern(("data", i)) for i in range(n)]
  _, _, order = _walk(closed, [frozenset([i]) for i in range(n)], ids, _NO_CONTROL, an)
  return Analysis(an.found, an.final, order, an.unplanned)


# ------------------------------------------------------------------ the walk
_NO_CONTROL = (frozenset(), None)


class _Analysis:
  def __init__(self, release_key):
    self.vn = _Numbering(release_key)
    self.found: dict[int, dict[str, tuple]] = {}
    self.final = frozenset()
    self.unplanned: dict[int, str] = {}

  def note(self, index, kind, inputs, what=None):
    if inputs:
      old = self.found.setdefault(index, {}).get(kind, (frozenset(), what))
      self.found[index][kind] = (old[0] | inputs, old[1] or what)


def _union(sets):
  out = frozenset()
  for s in sets:
    out |= s
  return out


def _split(j):
  """``(jaxpr, consts or None)`` of a Jaxpr or ClosedJaxpr."""
  if isinstance(j, jex_core.ClosedJaxpr):
    return j.jaxpr, j.consts
  return j, None


def _walk(j, in_deps, in_ids, ctx, an):
  """Dependence sets and value numbers of ``j``'s outputs, and the releases it makes
  in order."""
  jaxpr, consts = _split(j)
  deps = dict(zip(jaxpr.invars, in_deps))
  ids = dict(zip(jaxpr.invars, in_ids))
  known = {}  # small values known while tracing (a switch's Python int index)
  for k, v in enumerate(jaxpr.constvars):
    ids[v] = an.vn.value(consts[k]) if consts is not None else an.vn.fresh()
    if consts is not None:
      known[v] = _small(consts[k])

  def read(env, v, literal):
    if isinstance(v, jex_core.Literal):
      return literal(v)
    return env[v] if v in env else literal(None)

  order = []
  for eqn in jaxpr.eqns:
    ins = [read(deps, v, lambda _: frozenset()) for v in eqn.invars]
    in_ids_ = [read(ids, v, an.vn.literal) for v in eqn.invars]
    values = [_small(v.val) if isinstance(v, jex_core.Literal) else known.get(v)
              for v in eqn.invars]
    outs, seq = _eqn(eqn, ins, in_ids_, values, ctx, an)
    order += seq
    for v, d, i in zip(eqn.outvars, outs, an.vn.eqn(eqn, in_ids_)[0]):
      deps[v], ids[v] = d, i
    folded = _fold(eqn, values)
    if folded is not None:
      known[eqn.outvars[0]] = folded
  return ([read(deps, v, lambda _: frozenset()) for v in jaxpr.outvars],
          [read(ids, v, an.vn.literal) for v in jaxpr.outvars], order)


def _within(ctx, inputs, what):
  """The control context inside a construct decided by ``inputs``."""
  return (ctx[0] | inputs, what) if inputs else ctx


# Calls: their one inner jaxpr computes what the equation computes, from the same
# inputs (a custom rule for jvp, vjp or vmap only changes transformations of it).
_CALLS = frozenset(["pjit", "jit", "closed_call", "core_call", "checkpoint", "remat",
                    "custom_jvp_call", "custom_vjp_call", "custom_vmap_call"])


def _subjaxprs(eqn):
  return [s for s in eqn.params.values() for s in (s if isinstance(s, tuple) else (s,))
          if isinstance(s, (jex_core.Jaxpr, jex_core.ClosedJaxpr))]


def _call_jaxpr(eqn):
  """The inner jaxpr of a call in _CALLS (None for anything else)."""
  subs = _subjaxprs(eqn)
  if eqn.primitive.name in _CALLS and len(subs) == 1:
    inner = _split(subs[0])[0]
    if len(inner.invars) == len(eqn.invars) and len(inner.outvars) == len(eqn.outvars):
      return subs[0]
  return None


# Primitives folded on small known values: enough to resolve a switch on a Python int
# (``clamp`` of literals) or a cond on a Python int.
_FOLD = {
    "convert_element_type": lambda x, new_dtype, **_: np.asarray(x).astype(new_dtype),
    "clamp": lambda lo, x, hi, **_: np.clip(x, lo, hi),
    "eq": lambda a, b, **_: np.equal(a, b), "ne": lambda a, b, **_: np.not_equal(a, b),
    "lt": lambda a, b, **_: np.less(a, b), "le": lambda a, b, **_: np.less_equal(a, b),
    "gt": lambda a, b, **_: np.greater(a, b),
    "ge": lambda a, b, **_: np.greater_equal(a, b),
    "and": lambda a, b, **_: np.bitwise_and(a, b),
    "or": lambda a, b, **_: np.bitwise_or(a, b), "not": lambda a, **_: np.invert(a),
    "min": lambda a, b, **_: np.minimum(a, b), "max": lambda a, b, **_: np.maximum(a, b),
}


def _small(x):
  """``x`` as a NumPy value if it is a small plain array known now, else None."""
  try:
    a = np.asarray(x)
  except Exception:  # noqa: BLE001 - tracers, keys: not known
    return None
  return a if a.dtype.kind in "biuf" and a.size <= 16 else None


def _fold(eqn, values):
  fold = _FOLD.get(eqn.primitive.name)
  if fold is None or len(eqn.outvars) != 1 or any(v is None for v in values):
    return None
  with np.errstate(all="ignore"):
    return _small(fold(*values, **eqn.params))


def _eqn(eqn, ins, in_ids, values, ctx, an):
  name, params, n_out = eqn.primitive.name, eqn.params, len(eqn.outvars)
  if name == "jaxdp_released":
    return [frozenset()] * n_out, []
  if name == "jaxdp_cost":
    an.note(params["index"], "cost", ins[0])
    return ins, []
  if name == "jaxdp_state":
    i = params["index"]
    if i == FINAL:
      an.final |= _union(ins)
      return ins, []
    an.note(i, "state", _union(ins))
    an.note(i, "control", ctx[0], ctx[1])
    return ins, [i]
  if name == "scan":
    body = params["jaxpr"]
    nc, ncarry = params["num_consts"], params["num_carry"]
    consts, carry, xs = ins[:nc], ins[nc:nc + ncarry], ins[nc + ncarry:]
    fresh = [an.vn.fresh() for _ in ins[nc:]]
    while True:
      out, _, seq = _walk(body, consts + carry + xs, in_ids[:nc] + fresh, ctx, an)
      new = [a | b for a, b in zip(carry, out[:ncarry])]
      if new == carry:
        return new + out[ncarry:], seq * params["length"]
      carry = new
  if name == "while":
    cond, body = params["cond_jaxpr"], params["body_jaxpr"]
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cconsts, bconsts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    cids, bids = in_ids[:nc], in_ids[nc:nc + nb]
    pred = frozenset()
    while True:
      fresh = [an.vn.fresh() for _ in carry]
      inner = _within(ctx, pred, "while")
      pred_deps, _, s1 = _walk(cond, cconsts + carry, cids + fresh, inner, an)
      pred = _union(pred_deps)
      inner = _within(ctx, pred, "while")
      out, _, s2 = _walk(body, bconsts + carry, bids + fresh, inner, an)
      new = [a | b | pred for a, b in zip(carry, out)]
      if new == carry:
        break
      carry = new
    _walk(cond, cconsts + carry, cids + fresh, inner, an)  # the final context
    for i in s1 + s2:
      an.unplanned.setdefault(i, "while")
    return new, []
  if name == "cond":
    index, ops, op_ids = ins[0], ins[1:], in_ids[1:]
    branches = params["branches"]
    if values[0] is not None and values[0].ndim == 0:  # known now: that branch runs
      b = branches[int(np.clip(values[0], 0, len(branches) - 1))]
      out, _, seq = _walk(b, ops, op_ids, ctx, an)
      return out, seq
    numbered = [an.vn.run(b, op_ids) for b in branches]
    same_releases = all(r == numbered[0][1] for _, r in numbered)
    inner = ctx if same_releases else _within(ctx, index, "cond")
    walked = [_walk(b, ops, op_ids, inner, an) for b in branches]
    outs = []
    for k in range(n_out):
      same = all(o[k] == numbered[0][0][k] for o, _ in numbered)
      outs.append(_union(w[0][k] for w in walked) | (frozenset() if same else index))
    if same_releases:
      return outs, walked[0][2]
    for w in walked:
      for i in w[2]:
        an.unplanned.setdefault(i, "cond")
    return outs, []
  subs = _subjaxprs(eqn)
  call = _call_jaxpr(eqn)
  if call is None and len(subs) == 1 and len(_split(subs[0])[0].invars) == len(ins) \
      and len(_split(subs[0])[0].outvars) == n_out:
    call, in_ids = subs[0], [an.vn.fresh() for _ in ins]  # shard_map, ...: same arity
  if call is not None:
    out, _, seq = _walk(call, ins, in_ids, ctx, an)
    return out, seq
  everything = _union(ins)
  inner = _within(ctx, everything, name)
  for sub in subs:  # unknown structure: every inner input sees every outer input
    n = len(_split(sub)[0].invars)
    _, _, seq = _walk(sub, [everything] * n, [an.vn.fresh() for _ in range(n)], inner, an)
    for i in seq:
      an.unplanned.setdefault(i, name)
  return [everything] * n_out, []


# ------------------------------------------------------------------ value numbering
class _Numbering:
  """Value numbers: equal numbers mean equal values (the converse need not hold)."""

  def __init__(self, release_key):
    self._table: dict = {}
    self._fresh = itertools.count()
    self._release_key = release_key
    self._structures: dict = {}  # id(jaxpr) -> (jaxpr, key)
    self._holding: dict = {}     # id(jaxpr) -> (jaxpr, whether it holds a release)

  def intern(self, key) -> int:
    return self._table.setdefault(key, len(self._table))

  def fresh(self) -> int:
    return self.intern(("fresh", next(self._fresh)))

  def literal(self, lit) -> int:
    d = None if lit is None else _digest(lit.val)
    return self.fresh() if d is None else self.intern(("literal", str(lit.aval), d))

  def value(self, x) -> int:
    d = _digest(x)
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
      k = self.intern(("eqn", name, FINAL if i == FINAL else self._release_key(i),
                       tuple(in_ids)))
      return [self.intern(("out", k, j)) for j in range(n)], () if i == FINAL else (k,)
    call = _call_jaxpr(eqn)
    if call is not None:
      return self.run(call, in_ids)
    k = self.intern(("eqn", name, self._params(eqn.params), tuple(in_ids)))
    return [self.intern(("out", k, j)) for j in range(n)], \
        (k,) if self._holds(eqn) else ()

  def run(self, j, in_ids):
    """``(value numbers of j's outputs, numbers of its releases in order)`` for
    inputs numbered ``in_ids``."""
    jaxpr, consts = _split(j)
    ids = dict(zip(jaxpr.invars, in_ids))
    for k, v in enumerate(jaxpr.constvars):
      ids[v] = self.value(consts[k]) if consts is not None else self.fresh()
    read = lambda v: self.literal(v) if isinstance(v, jex_core.Literal) else \
        ids[v] if v in ids else self.fresh()  # noqa: E731
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
    jaxpr, _ = _split(j)
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
      d = _digest(v)
      return ("fresh", next(self._fresh)) if d is None else ("array", d)
    if isinstance(v, (float, complex, np.inexact)):  # -0.0 == 0.0, but they differ
      return ("number", type(v), repr(v))
    try:
      hash(v)
    except TypeError:
      return ("fresh", next(self._fresh))
    return ("object", type(v), v)


def _digest(x):
  """A hashable key of a constant's value (None if it cannot be read)."""
  try:
    if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
      bits = _digest(jax.random.key_data(x))
      return None if bits is None else ("key", str(x.dtype), bits)
    a = np.asarray(x)
  except Exception:  # noqa: BLE001 - anything unreadable is simply never equal
    return None
  if a.dtype == object:
    return None
  data = a.tobytes()
  if len(data) > 256:
    data = hashlib.sha256(data).digest()
  return (str(a.dtype), a.shape, data)
