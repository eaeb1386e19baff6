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

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core
from jax.interpreters import batching, mlir

from jaxdp.accounting.jaxprs import FINAL, call_jaxpr, fold, small_value, split, subjaxprs
from jaxdp.accounting.numbering import ValueNumbering

_cost_p = jex_core.Primitive("jaxdp_cost")
_released_p = jex_core.Primitive("jaxdp_released")
for _p in (_cost_p, _released_p):
  _p.def_impl(lambda x, **_: x)
  _p.def_abstract_eval(lambda x, **_: x)
  mlir.register_lowering(_p, lambda ctx, x, **_: [x])
batching.primitive_batchers[_cost_p] = lambda args, dims, **p: (
  _cost_p.bind(*args, **p),
  dims[0],
)
batching.primitive_batchers[_released_p] = lambda args, dims, **p: (
  _released_p.bind(*args, **p),
  dims[0],
)

_state_p = jex_core.Primitive("jaxdp_state")
_state_p.multiple_results = True
_state_p.def_impl(lambda *xs, **_: list(xs))
_state_p.def_abstract_eval(lambda *xs, **_: list(xs))
mlir.register_lowering(_state_p, lambda ctx, *xs, **_: list(xs))
batching.primitive_batchers[_state_p] = lambda args, dims, **p: (
  _state_p.bind(*args, **p),
  list(dims),
)


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
    self.vn = ValueNumbering(release_key)
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


def _walk(j, in_deps, in_ids, ctx, an):
  """Dependence sets and value numbers of ``j``'s outputs, and the releases it makes
  in order."""
  jaxpr, consts = split(j)
  deps = dict(zip(jaxpr.invars, in_deps))
  ids = dict(zip(jaxpr.invars, in_ids))
  known = {}  # small values known while tracing (a switch's Python int index)
  for k, v in enumerate(jaxpr.constvars):
    ids[v] = an.vn.value(consts[k]) if consts is not None else an.vn.fresh()
    if consts is not None:
      known[v] = small_value(consts[k])

  def read(env, v, literal):
    if isinstance(v, jex_core.Literal):
      return literal(v)
    return env[v] if v in env else literal(None)

  order = []
  for eqn in jaxpr.eqns:
    ins = [read(deps, v, lambda _: frozenset()) for v in eqn.invars]
    in_ids_ = [read(ids, v, an.vn.literal) for v in eqn.invars]
    values = [
      small_value(v.val) if isinstance(v, jex_core.Literal) else known.get(v)
      for v in eqn.invars
    ]
    outs, seq = _eqn(eqn, ins, in_ids_, values, ctx, an)
    order += seq
    for v, d, i in zip(eqn.outvars, outs, an.vn.eqn(eqn, in_ids_)[0]):
      deps[v], ids[v] = d, i
    folded = fold(eqn, values)
    if folded is not None:
      known[eqn.outvars[0]] = folded
  return (
    [read(deps, v, lambda _: frozenset()) for v in jaxpr.outvars],
    [read(ids, v, an.vn.literal) for v in jaxpr.outvars],
    order,
  )


def _within(ctx, inputs, what):
  """The control context inside a construct decided by ``inputs``."""
  return (ctx[0] | inputs, what) if inputs else ctx


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
    consts, carry, xs = ins[:nc], ins[nc : nc + ncarry], ins[nc + ncarry :]
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
    cconsts, bconsts, carry = ins[:nc], ins[nc : nc + nb], ins[nc + nb :]
    cids, bids = in_ids[:nc], in_ids[nc : nc + nb]
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
  subs = subjaxprs(eqn)
  call = call_jaxpr(eqn)
  if (
    call is None
    and len(subs) == 1
    and len(split(subs[0])[0].invars) == len(ins)
    and len(split(subs[0])[0].outvars) == n_out
  ):
    call, in_ids = subs[0], [an.vn.fresh() for _ in ins]  # shard_map, ...: same arity
  if call is not None:
    out, _, seq = _walk(call, ins, in_ids, ctx, an)
    return out, seq
  everything = _union(ins)
  inner = _within(ctx, everything, name)
  for sub in subs:  # unknown structure: every inner input sees every outer input
    n = len(split(sub)[0].invars)
    _, _, seq = _walk(sub, [everything] * n, [an.vn.fresh() for _ in range(n)], inner, an)
    for i in seq:
      an.unplanned.setdefault(i, name)
  return [everything] * n_out, []
