"""The row-function check of a :class:`~jaxdp.Session`: an analyst's function is traced
once on one abstract row and its program checked against an allowlist of JAX primitives
known to act on that row alone; checked programs are cached by a fingerprint of the
function.

References:
  F. McSherry, "Privacy integrated queries", SIGMOD 2009 (stable transformations).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import types
from collections.abc import Callable

import jax
import numpy as np
from jax.extend import core as jex_core
from jax.extend.core import primitives as P

from jaxdp import _checks


class UnsafeQueryError(ValueError):
  """A query function uses a construct that could act beyond its own row (a host
  callback, a batching rule, a collective, an effect, an unknown primitive)."""


# Primitives that act on their operands alone: traced on one row, they see that row
# and constants only, and JAX's own batching rule for each keeps the rows apart.
# Compared by identity (a user-made primitive may carry any name).
ROWWISE_PRIMITIVES = frozenset(
  getattr(P, name + "_p")
  for name in """
    abs acos acosh add and asin asinh atan atan2 atanh bessel_i0e bessel_i1e cbrt ceil
    clamp clz complex conj cos cosh digamma div erf erf_inv erfc exp exp2 expm1 floor
    igamma igammac imag integer_pow is_finite lgamma log log1p logistic max min mul
    neg nextafter not or polygamma population_count pow real regularized_incomplete_beta
    rem round rsqrt shift_left shift_right_arithmetic shift_right_logical sign sin
    sinh sqrt square sub tan tanh xor zeta
    eq ne lt le gt ge
    convert_element_type bitcast_convert_type reduce_precision select_n
    reduce_sum reduce_max reduce_min reduce_prod reduce_and reduce_or reduce_xor
    argmax argmin cumsum cumprod cummax cummin cumlogsumexp
    broadcast_in_dim reshape squeeze transpose slice dynamic_slice dynamic_update_slice
    concatenate pad rev iota gather scatter scatter_add sort top_k dot_general copy
    stop_gradient
    cond scan jit closed_call remat custom_jvp_call custom_vjp_call
    """.split()
)

_CALLBACK = "it calls back to the host, which could copy rows out of the session"
_WHY = {
  "debug_print": _CALLBACK,
  "debug_callback": _CALLBACK,
  "pure_callback": _CALLBACK,
  "io_callback": _CALLBACK,
  "while": "a while_loop's running time depends on the row without bound (write a "
  "loop of fixed length with lax.fori_loop over Python ints, or lax.scan)",
  "custom_vmap_call": "a custom_vmap rule sees the whole batch of rows",
}


def check_rowwise(jaxpr, name: str) -> None:
  """Raises :class:`UnsafeQueryError` unless every equation of ``jaxpr`` (and of its
  sub-jaxprs) is an allowlisted, effect-free primitive."""
  for eqn in jaxpr.eqns:
    prim = eqn.primitive
    if prim not in ROWWISE_PRIMITIVES or eqn.effects:
      why = _WHY.get(
        prim.name,
        "it is not known to act on one row alone (host "
        "callbacks, collectives, batching rules, effects and random "
        "numbers are refused)",
      )
      raise UnsafeQueryError(
        f"{name} uses the primitive {prim.name!r}, which a session refuses: {why}. "
        "Use jax.numpy and jax.lax operations on the row."
      )
    for sub in jex_core.jaxprs_in_params(eqn.params):
      check_rowwise(sub, name)


@dataclasses.dataclass(frozen=True)
class CheckedQuery:
  """An analyst's function, traced on one abstract row and checked."""

  jaxpr: object
  consts: tuple
  out: jax.ShapeDtypeStruct
  program: tuple  # what identifies the checked program (its text, constants' types)

  def apply(self, consts, data):
    fn = jex_core.jaxpr_as_fun(jex_core.ClosedJaxpr(self.jaxpr, list(consts)))
    return jax.vmap(lambda row: fn(row)[0])(data)


class LRU:
  """A bounded dict that forgets the least recently used entry."""

  def __init__(self, size: int):
    self._size, self._items = size, collections.OrderedDict()

  def get(self, key):
    value = self._items.get(key)
    if value is not None:
      self._items.move_to_end(key)
    return value

  def put(self, key, value):
    self._items[key] = value
    if len(self._items) > self._size:
      self._items.popitem(last=False)
    return value

  def clear(self) -> None:
    """Forgets every entry."""
    self._items.clear()


CHECKED = LRU(1024)  # (function fingerprint, row type) -> checked program


class NoFingerprint(Exception):
  """A function whose behaviour may depend on state a fingerprint cannot capture."""


_SIMPLE = (int, str, bytes, bool, type(None))


class _Held:
  """An object compared and hashed by identity, and held: a fingerprint that keeps
  only ``id(obj)`` would match another object made later at the freed address."""

  __slots__ = ("obj",)

  def __init__(self, obj):
    self.obj = obj

  def __eq__(self, other):
    return type(other) is _Held and other.obj is self.obj

  def __hash__(self):
    return id(self.obj)


def fingerprint(obj, depth: int = 0):
  """A hashable value equal for two functions that trace to the same program: the
  code, the closure's and defaults' values and the globals the code names
  (recursively for functions; modules, builtins and JAX or numpy callables by
  identity, holding the object). Raises :class:`NoFingerprint` for anything else
  (arrays, objects, subclasses of the plain types, deep recursion)."""
  if depth > 6:
    raise NoFingerprint
  # by exact type: a subclass's ==, hash or hex() may say anything
  if type(obj) is float:  # by its bits: 0.0 == -0.0, and both hash alike
    return (float, obj.hex())
  if type(obj) is complex:
    return (complex, obj.real.hex(), obj.imag.hex())
  if type(obj) in _SIMPLE:
    return (type(obj), obj)
  if type(obj) is tuple:
    return ("tuple",) + tuple(fingerprint(v, depth + 1) for v in obj)
  if isinstance(obj, (types.ModuleType, types.BuiltinFunctionType)) or _library(obj):
    return ("id", _Held(obj))  # the object itself: its id is not reused while cached
  if type(obj) is functools.partial:
    return (
      "partial",
      fingerprint(obj.func, depth + 1),
      fingerprint(obj.args, depth + 1),
      fingerprint(tuple(sorted(obj.keywords.items())), depth + 1),
    )
  if not isinstance(obj, types.FunctionType):
    raise NoFingerprint
  code = obj.__code__
  try:
    cells = tuple(fingerprint(c.cell_contents, depth + 1) for c in obj.__closure__ or ())
  except ValueError:  # an empty cell
    raise NoFingerprint from None
  g = obj.__globals__
  names = sorted(n for n in _names(code) if n in g)
  return (
    "function",
    code,
    cells,
    fingerprint(obj.__defaults__ or (), depth + 1),
    fingerprint(tuple(sorted((obj.__kwdefaults__ or {}).items())), depth + 1),
    tuple((n, fingerprint(g[n], depth + 1)) for n in names),
  )


def _library(obj) -> bool:
  """A callable of JAX or numpy (a jitted jnp function, a ufunc, a custom_jvp),
  whose behaviour is fixed when it is made."""
  return (
    callable(obj)
    and not isinstance(obj, (type, np.ndarray, jax.Array))
    and type(obj).__module__.split(".")[0] in ("jax", "jaxlib", "numpy")
  )


def _names(code) -> set:
  """The global and attribute names a code object (and its nested code) uses."""
  out = set(code.co_names)
  for c in code.co_consts:
    if isinstance(c, types.CodeType):
      out |= _names(c)
  return out


def not_traced():
  """Refuses a query made inside a JAX transformation (``jit``, ``make_jaxpr``,
  ``eval_shape``, ``vmap``, ``grad``, or another query's row function): the data
  and the key would be staged into the caller's program."""
  if _checks.in_transformation():
    raise UnsafeQueryError(
      "a Session answers only outside JAX transformations (jit, make_jaxpr, "
      "eval_shape, vmap, grad, or a row function): inside one, the data would become "
      "part of the caller's program. Call it from plain Python; nothing was spent."
    )


def lift_literals(jaxpr, consts):
  """The checked program with its top-level numeric scalar literals (a threshold, a
  bound) turned into constants passed at run time, so queries that differ only in
  them share one compiled program. The equations are unchanged otherwise."""
  lifted, values, eqns = [], [], []
  for eqn in jaxpr.eqns:
    invars = list(eqn.invars)
    for i, v in enumerate(invars):
      if (
        isinstance(v, jex_core.Literal)
        and np.ndim(v.val) == 0
        and np.result_type(v.val) != np.bool_
      ):
        var = jex_core.Var(v.aval)
        lifted.append(var)
        values.append(np.asarray(v.val, v.aval.dtype))
        invars[i] = var
    eqns.append(eqn.replace(invars=invars) if lifted else eqn)
  if not lifted:
    return jaxpr, consts
  new = jex_core.Jaxpr(
    list(jaxpr.constvars) + lifted,
    jaxpr.invars,
    jaxpr.outvars,
    eqns,
    jaxpr.effects,
    jaxpr.debug_info,
  )
  return new, consts + tuple(values)


def checked_query(fn: Callable, name: str, row: jax.ShapeDtypeStruct) -> CheckedQuery:
  """``fn`` traced once on the abstract ``row`` and checked against the allowlist.

  A function whose fingerprint (code, closure, defaults, named globals) matches an
  earlier query's on the same row type reuses that checked program, as ``jax.jit``
  reuses a trace.

  Raises:
    TypeError: ``fn`` is not callable.
    ValueError: ``fn`` returns more than one array.
    UnsafeQueryError: ``fn`` uses a primitive outside the allowlist.
  """
  if not callable(fn):
    raise _checks.ArgTypeError(f"{name} must be a function of one row; got {fn!r}.")
  try:
    cache_key = (fingerprint(fn), row.shape, row.dtype)
  except NoFingerprint:
    cache_key = None
  else:
    hit = CHECKED.get(cache_key)
    if hit is not None:
      return hit
  query = _trace(fn, name, row)
  return query if cache_key is None else CHECKED.put(cache_key, query)


def _trace(fn: Callable, name: str, row: jax.ShapeDtypeStruct) -> CheckedQuery:
  closed = jax.make_jaxpr(fn)(row)
  if len(closed.jaxpr.outvars) != 1:
    raise ValueError(
      f"{name} must return one array per row; it returns {len(closed.jaxpr.outvars)}."
    )
  check_rowwise(closed.jaxpr, name)
  (aval,) = closed.out_avals
  jaxpr, consts = lift_literals(closed.jaxpr, tuple(closed.consts))
  program = (str(jaxpr), tuple((np.shape(c), str(np.result_type(c))) for c in consts))
  return CheckedQuery(jaxpr, consts, jax.ShapeDtypeStruct(aval.shape, aval.dtype), program)


def explain_failure(run, acct, row: jax.ShapeDtypeStruct, args):
  """Raises the error of a failed query as it occurs on a one-row stand-in for the
  data (``row`` the held data's row type), so that neither its type nor its message
  depends on the rows.

  Raises:
    The query's own error on the stand-in, else :class:`UnsafeQueryError`.
  """
  stand_in = jax.ShapeDtypeStruct((1,) + row.shape, row.dtype)
  jax.eval_shape(run, acct, stand_in, *args)
  raise UnsafeQueryError(
    "the query failed on the held data but not on a one-row stand-in: an exact draw "
    "refused after drawing is charged and its key used; nothing else was spent."
  )
