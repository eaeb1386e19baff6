"""Which privacy costs depend on the data: a dependence analysis of a traced jaxpr.

:func:`jaxdp.plan` traces a query function with its data arguments abstract. While it
traces, :func:`mark_cost` tags each release's traced (eps, delta) and
:func:`mark_released` tags each release's output. :func:`cost_dependence` then walks
the jaxpr and reports, for every tagged cost, which data arguments it depends on. A
released output counts as independent of the data (postprocessing, Dwork's
Proposition 2.4: choosing the next eps from earlier *answers* is allowed), so only a
cost computed from the raw data is flagged.

The analysis is conservative: through primitives it does not know it assumes every
output depends on every input, so it may flag a cost that does not really depend on
the data, never the reverse.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.extend import core as jex_core
from jax.interpreters import batching, mlir

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


def mark_cost(x, index: int):
  """Tags a traced cost of release ``index`` (identity)."""
  return _cost_p.bind(jnp.asarray(x), index=index)


def mark_released(tree):
  """Tags every array leaf of a released output (identity)."""
  return jax.tree_util.tree_map(lambda x: _released_p.bind(jnp.asarray(x)), tree)


def cost_dependence(jaxpr) -> dict[int, frozenset[int]]:
  """``{release index: positions of the jaxpr inputs its cost depends on}``."""
  found: dict[int, frozenset[int]] = {}
  deps = [frozenset([i]) for i in range(len(jaxpr.invars))]
  _walk(jaxpr, deps, found)
  return found


def _walk(jaxpr, in_deps, found):
  env = {v: d for v, d in zip(jaxpr.invars, in_deps)}

  def read(v):
    return frozenset() if isinstance(v, jex_core.Literal) else env.get(v, frozenset())

  for eqn in jaxpr.eqns:
    ins = [read(v) for v in eqn.invars]
    outs = _eqn(eqn, ins, found)
    for v, d in zip(eqn.outvars, outs):
      env[v] = d
  return [read(v) for v in jaxpr.outvars]


def _union(sets):
  out = frozenset()
  for s in sets:
    out |= s
  return out


def _inner(j):
  return j.jaxpr if hasattr(j, "jaxpr") and not isinstance(j, jex_core.Jaxpr) else j


def _eqn(eqn, ins, found):
  name, params, n_out = eqn.primitive.name, eqn.params, len(eqn.outvars)
  if name == "jaxdp_released":
    return [frozenset()] * n_out
  if name == "jaxdp_cost":
    i = params["index"]
    found[i] = found.get(i, frozenset()) | ins[0]
    return ins
  if name == "scan":
    body = _inner(params["jaxpr"])
    nc, ncarry = params["num_consts"], params["num_carry"]
    consts, carry, xs = ins[:nc], ins[nc:nc + ncarry], ins[nc + ncarry:]
    while True:
      out = _walk(body, consts + carry + xs, found)
      new = [a | b for a, b in zip(carry, out[:ncarry])]
      if new == carry:
        return new + out[ncarry:]
      carry = new
  if name == "while":
    cond, body = _inner(params["cond_jaxpr"]), _inner(params["body_jaxpr"])
    nc, nb = params["cond_nconsts"], params["body_nconsts"]
    cconsts, bconsts, carry = ins[:nc], ins[nc:nc + nb], ins[nc + nb:]
    while True:
      pred = _union(_walk(cond, cconsts + carry, found))
      out = _walk(body, bconsts + carry, found)
      new = [a | b | pred for a, b in zip(carry, out)]
      if new == carry:
        return new
      carry = new
  if name == "cond":
    index, ops = ins[0], ins[1:]
    outs = [frozenset() | index] * n_out
    for branch in params["branches"]:
      outs = [a | b for a, b in zip(outs, _walk(_inner(branch), ops, found))]
    return outs
  subs = list(jex_core.jaxprs_in_params(params))
  if len(subs) == 1 and len(subs[0].invars) == len(ins) and \
      len(subs[0].outvars) == n_out:
    return _walk(subs[0], ins, found)  # jit, closed_call, remat, custom_jvp/vjp, ...
  everything = _union(ins)
  for sub in subs:  # unknown structure: every inner input sees every outer input
    _walk(sub, [everything] * len(sub.invars), found)
  return [everything] * n_out
