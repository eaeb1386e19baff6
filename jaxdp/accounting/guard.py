"""The stale-key guard: one accountant value, one release.

The accountant owns its key and splits it on every release, so releases threaded
correctly never share noise. Releasing twice from the *same* accountant value would
reuse its key (same noise, spend counted once). :func:`check_unused` follows the key
object, like JAX's own key-reuse checker: a concrete key eagerly, and a key tracer
within the trace that made it (inside ``jit``, ``scan`` or ``vmap``, two releases
from one accountant value hold the same tracer, so the second is refused at trace
time, before any noise). :func:`mark_used` marks the key once its release has
produced output (and :meth:`~jaxdp.Accountant.create` marks the key it is given:
an accountant consumes its key); under ``jax.vmap`` and
``jax.shard_map``, :func:`one_key_per_lane` refuses a release mapped over its data,
mechanism or counters but not over its key, and a release whose accountant is a
constant of the traced program; under ``jax.pmap`` or ``shard_map(check_vma=False)``
every release is refused.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import weakref

import jax
import jax.numpy as jnp
from jax.extend import core as jax_core

from jaxdp import _checks
from jaxdp.accounting import planning
from jaxdp.accounting.errors import StaleAccountantError

__all__ = [
  "Lineage",
  "check_lineage",
  "check_unused",
  "claim",
  "consume",
  "drawing",
  "key_copy",
  "mark_used",
  "one_key_per_lane",
  "own_key",
  "register_tracked",
  "unclaim",
]


def _host_ledger(key) -> bool:
  """Whether the eager host ledger applies: a concrete key, not while planning."""
  return _checks.is_concrete(key) and planning.current() is None


# The key tracers (and NumPy raw keys, which take no attribute) already used, by id,
# each with a weak reference that tells the object from a later one given the same
# id (an entry leaves with its object).
_TRACED_USED: dict[int, weakref.ref] = {}


_MAX_REFS = 32  # key objects a lineage remembers (the most recent, live ones)


def register_tracked(cls):
  """Registers the frozen dataclass ``cls`` (an accountant) as a pytree, as
  ``jax.tree_util.register_dataclass`` does (fields with ``metadata["static"]`` are
  static), except that flattening it records its key in its :class:`Lineage`: a
  value handed to a transformation (a ``lax.cond`` operand, a ``scan`` carry, a
  ``jit`` argument) is flattened there, so its outer key is known to the lineage
  that a release inside marks used."""
  fields = dataclasses.fields(cls)
  data = [f.name for f in fields if not f.metadata.get("static")]
  meta = [f.name for f in fields if f.metadata.get("static")]
  paths = [jax.tree_util.GetAttrKey(name) for name in data]

  def flatten(x):
    if x.lineage is not None:
      x.lineage.handed(x.key)
    return [getattr(x, n) for n in data], tuple(getattr(x, n) for n in meta)

  def flatten_with_keys(x):
    leaves, aux = flatten(x)
    return list(zip(paths, leaves)), aux

  def unflatten(aux, leaves):
    return cls(**dict(zip(data, leaves)), **dict(zip(meta, aux)))

  jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
  return cls


class Lineage:
  """Which accountant value a copy inside a transformation came from.

  A key tracer is the key's object only within its own trace: an accountant given
  to a ``lax.cond`` branch, a ``scan`` or ``while`` body, ``jax.checkpoint``, an inner
  ``jit`` or an eager ``vmap`` holds a new tracer there, so releasing from it marks
  that tracer, not the outer key, and the outer value could be released from again
  with the same noise. The accountant's static field ``lineage`` keeps one
  ``Lineage`` per accountant value; transformations carry static fields through by
  identity, so the copy inside marks the same object (:func:`consume`), and
  :func:`check_lineage` refuses a later release whose key is the key this lineage was
  made with (or, under ``vmap``, the batch it was used on), and every release of the
  lineage once a value already released from was handed to a transformation again
  (an eager release, then the same accountant given to ``jit`` or ``lax.map``).
  Detection runs in Python while JAX traces: where JAX reuses a cached trace (a
  ``jit`` called again with the same shapes, a ``lax.cond`` branch function traced
  before with the same shapes), nothing runs and nothing is detected. All lineages compare equal
  and hash alike, so they never change a ``jit`` cache key or a tree's structure.
  """

  __slots__ = ("refs", "used", "stale")

  def __init__(self, key):
    self.used = False
    self.stale = False  # a used value was handed to a transformation
    self.refs: list = []
    self.add(key)

  def handed(self, key):
    """The value holding ``key`` is being flattened (handed to a transformation, or
    read): remember its key; if that value was already released from, every release
    from this lineage is refused from now on (inside the transformation, the copy's
    key is a new tracer, which only this flag connects to the stale value)."""
    if self.used and self.holds(key) and planning.current() is None:
      self.stale = True
    self.add(key)

  def add(self, key):
    """Remembers ``key``'s base object (under ``vmap``, the batched value)."""
    if self.holds(key):
      return
    try:
      self.refs.append(weakref.ref(_base(key)))
    except TypeError:  # pragma: no cover - a key type without weak references
      return
    if len(self.refs) > _MAX_REFS:
      self.refs = [ref for ref in self.refs if ref() is not None][-_MAX_REFS:]

  def holds(self, key) -> bool:
    """Whether ``key``'s base object is one this lineage remembers."""
    base = _base(key)
    return any(ref() is base for ref in self.refs)

  def __eq__(self, other):
    return isinstance(other, Lineage)

  def __hash__(self):
    return hash(Lineage)

  def __repr__(self):
    return "Lineage()"


def _base(x):
  """``x`` under the ``vmap`` tracers wrapping it (an eager ``vmap`` traces a batch
  whose value is the caller's array)."""
  while type(x).__name__ == "BatchTracer" and hasattr(x, "val"):
    x = x.val
  return x


def check_lineage(acct):
  """Raises :class:`StaleAccountantError` when ``acct``'s value was already released
  from, also when that release ran inside a transformation that gave it a tracer of
  its own (see :class:`Lineage`); nothing while planning."""
  lineage = getattr(acct, "lineage", None)
  if lineage is None or planning.current() is not None:
    return
  if lineage.stale or lineage.used and lineage.holds(acct.key):
    raise StaleAccountantError(
      "this accountant value was already released from (inside a lax.cond, scan, "
      "while or fori loop, jax.checkpoint, an inner jit or a vmap): releasing from it "
      "again would reuse its noise and undercount the spend. Continue from the "
      "accountant that the earlier release (or the transformation around it) returned."
    )


def consume(acct):
  """Marks ``acct``'s key (:func:`mark_used`) and its lineage used."""
  mark_used(acct.key)
  lineage = getattr(acct, "lineage", None)
  if lineage is not None and planning.current() is None:
    lineage.used = True
    lineage.add(acct.key)


def _forget(ident, ref):
  if _TRACED_USED.get(ident) is ref:
    _TRACED_USED.pop(ident, None)


def _is_used(key) -> bool:
  """Whether a release (or :meth:`~jaxdp.Accountant.create`) already used this key
  object: a concrete key (not while planning) or a key tracer."""
  if _checks.is_concrete(key):
    if not _host_ledger(key):
      return False
    if getattr(key, "_jaxdp_used", False):
      return True
  ref = _TRACED_USED.get(id(key))
  return ref is not None and ref() is key


def check_unused(key):
  """Raises :class:`StaleAccountantError` if an earlier release already used this key
  object: eagerly, or at trace time for a key tracer (one accountant value released
  from twice in one ``jit``, ``scan`` body or ``vmap``), before any noise."""
  if _is_used(key):
    raise StaleAccountantError(
      "this accountant's key was already used by an earlier release or given to "
      "another accountant"
      + ("" if _checks.is_concrete(key) else " in this traced program")
      + ": releasing from a stale accountant value would reuse its noise and "
      "undercount the spend. Always continue from the accountant that the last "
      "release returned (in a lax.cond, pass the accountant as an operand of the "
      "branches, not as a closure), and make each accountant from a key of its own "
      "(jax.random.split)."
    )


_SHARED_KEY = (
  "{what}, but the accountant's key is the same on every {lane}: every {lane} would "
  "add the same noise (differences between {lane}s give the differences of their "
  "data exactly) while each returned accountant counts one release. Release the "
  "stacked statistic in one call (one mechanism over all of it, or "
  "release_partitioned for disjoint parts), or give every {lane} its own accountant "
  "(its own key)."
)


def one_key_per_lane(acct, inputs):
  """``acct``, after refusing a release that ``jax.vmap`` or ``jax.shard_map`` maps
  over its mechanisms, data or counters but not over its key: that is one release
  per lane from one accountant value, all with the same noise (a stale replay:
  Lemma 2.6's count is broken). Raises :class:`StaleAccountantError` at trace time,
  before any noise is drawn. ``pmap`` and ``shard_map`` with ``check_vma=False`` do
  not say which values differ across devices, so a release under them is refused
  too (an allowlist: only mesh axes whose variation JAX tracks are accepted). So is
  an accountant that is a constant of the traced program, or a tracer of an
  enclosing trace (closed over by a ``lax.scan`` or other loop body: every step
  would reuse its key)."""
  key = acct.key
  others = [
    x
    for x in jax.tree_util.tree_leaves((inputs, acct))
    if isinstance(x, jax.Array) and x is not key
  ]
  if all(map(_checks.is_concrete, others + [key])):
    return acct  # no transformation is tracing this release
  if _checks.is_concrete(key) and planning.current() is None:
    raise StaleAccountantError(
      "this release's accountant is a constant of the traced program (closed over, "
      "or created inside it) while its data or mechanism are traced: every run of "
      "the program, and every step of a lax.map, fori_loop or while_loop body, would "
      "add the same noise. Pass the accountant as an argument (or a loop carry) and "
      "continue from the one each release returns."
    )
  if (
    not _checks.is_concrete(key) and planning.current() is None and _of_enclosing_trace(key)
  ):
    raise StaleAccountantError(
      "this release's accountant is closed over from an enclosing traced program (by "
      "a lax.scan, fori_loop, while_loop or lax.map body, a lax.cond branch or an "
      "inner transformation): every step of a loop would add the same noise. Pass "
      "the accountant in as a loop carry, a branch operand or an argument, and "
      "continue from the one each release returns."
    )
  untracked = _untracked_axes()
  if untracked:
    raise StaleAccountantError(
      f"this release runs under jax.pmap or jax.shard_map(check_vma=False) (mesh axes "
      f"{sorted(untracked)}), where JAX does not track which values differ across "
      "devices, so jaxdp cannot tell whether every device would add the same noise. "
      "Use jax.shard_map with check_vma=True (the default), with the accountant's "
      "key sharded over the axis (one accountant per device)."
    )
  varying = lambda x: _checks.varying_axes(jax.typeof(x))
  spread = frozenset().union(*map(varying, others)) - varying(key)
  if spread:
    raise StaleAccountantError(
      _SHARED_KEY.format(
        what=f"this release is mapped over mesh axes {sorted(spread)} by shard_map "
        "(its data, mechanism or counters differ across them)",
        lane="shard",
      )
    )
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)  # unwrapping does not consume the key
  # the batching rule runs when jax.vmap meets this call; the result feeds the
  # counters, so no transformation can drop the call
  return dataclasses.replace(
    acct, answered=_lanes(acct.answered, key, jax.lax.stop_gradient(others))
  )


def _of_enclosing_trace(tracer) -> bool:
  """Whether ``tracer`` belongs to a trace that encloses the one now running (a value
  closed over by a loop, map or branch body, or by an inner transformation). Reads
  ``Tracer._trace`` directly, so a JAX that renamed it fails loudly instead of
  skipping the check."""
  return tracer._trace is not jax_core.find_top_trace(())


def _untracked_axes() -> frozenset:
  """The manual mesh axes of the enclosing ``shard_map`` or ``pmap`` along which JAX
  does not track variation (``check_vma=False``): a value cast to varying over them
  stays unvarying."""
  axes = tuple(jax.sharding.get_abstract_mesh().manual_axes)
  if not axes:
    return frozenset()
  probe = jax.lax.pcast(jnp.zeros((), jnp.int32), axes, to="varying")
  return frozenset(axes) - _checks.varying_axes(jax.typeof(probe))


@jax.custom_batching.custom_vmap
def _lanes(token, key, others):
  """``token``; under ``jax.vmap`` the batching rule refuses batched ``others`` with
  an unbatched ``key``."""
  del key, others
  return token


@_lanes.def_vmap
def _lanes_vmap(axis_size, in_batched, token, key, others):
  del axis_size
  token_batched, key_batched, others_batched = in_batched
  if not key_batched and any(jax.tree_util.tree_leaves(others_batched)):
    raise StaleAccountantError(
      _SHARED_KEY.format(
        what="this release is mapped by jax.vmap over its data, mechanism or the "
        "accountant's counters",
        lane="lane",
      )
    )
  return token, token_batched


def mark_used(key):
  """Marks the key object used, once its release has produced output (a release that
  raised on bad input leaves the accountant usable): a concrete key eagerly (not
  while planning; a NumPy raw key by identity), a key tracer for the rest of its
  trace."""
  if _checks.is_concrete(key):
    if not _host_ledger(key):
      return
    try:
      object.__setattr__(key, "_jaxdp_used", True)
      return
    except (AttributeError, TypeError):  # a NumPy raw key takes no attribute
      pass
  ident = id(key)  # a tracer (for the rest of its trace) or a NumPy raw key
  _TRACED_USED[ident] = weakref.ref(key, lambda ref: _forget(ident, ref))


_CLAIMS = threading.Lock()  # check and mark as one step: one key, one owner


def claim(key):
  """:func:`check_unused`, then :func:`mark_used`, as one step under a lock, so two
  threads making accountants from one key object cannot both pass the check.

  Raises:
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  with _CLAIMS:
    check_unused(key)
    mark_used(key)


def unclaim(key):
  """Undoes :func:`claim` for a call refused after claiming ``key`` (nothing was made
  from it)."""
  with _CLAIMS:
    if _checks.is_concrete(key) and getattr(key, "_jaxdp_used", False):
      object.__delattr__(key, "_jaxdp_used")
    _TRACED_USED.pop(id(key), None)


def own_key(key):
  """A typed key object of the accountant's own with ``key``'s bits (``key`` typed or
  raw key data), after consuming ``key`` (:func:`claim`): an accountant consumes the
  key it is made from, so two accountants made from one key object (eagerly, or in
  one traced program) are refused like two releases from one accountant.

  Raises:
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  claim(key)
  return key_copy(key)


def key_copy(key):
  """A new typed key object with ``key``'s bits (``key`` typed, or raw key data of
  the default generator); ``key`` itself is not consumed."""
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return jax.random.wrap_key_data(jax.random.key_data(key), impl=jax.random.key_impl(key))
  return jax.random.wrap_key_data(key)


@contextlib.contextmanager
def drawing(key):
  """Eager host ledger around a release's draw: a ``RuntimeError`` raised after
  drawing (an exact sampler's host refinement refusing its noise) marks the key used,
  so a retry from the same accountant raises :class:`StaleAccountantError` instead
  of drawing the same noise again."""
  try:
    yield
  except RuntimeError:
    mark_used(key)
    raise
