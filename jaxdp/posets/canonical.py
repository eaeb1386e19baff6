"""The canonical form of a poset's relation, and the caches keyed by it.

Host tables are cached per poset and shared by every later release in the process, so
a cache must never hold what one caller's object says of itself. Only a *canonical
relation* enters a cache: a tuple of ``d`` tuples of ``d`` Python bools, encoded as
:func:`relation_key` bytes, which are also what :class:`~jaxdp.Poset` equality and
hashing compare. :func:`by_relation` caches a function of a poset under that key and
computes it, on a miss, from a fresh poset built from the key alone, never from the
caller's object: cached properties forged on it (``parents``, ``cover_matrix``) or a
relation that lies about equality cannot fill a cache for another caller.
"""

from __future__ import annotations

import collections
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from jaxdp._cache import value_cache

__all__ = ["by_relation", "canonical_relation", "order_of", "relation_key", "relation_of"]

F = TypeVar("F", bound=Callable)

# id(relation) -> (relation, key). The entry holds the relation, so its id is not
# reused while the entry lives; a tuple of tuples of bools never changes, so the key
# stays its key. At most _KEYS_CELLS relation entries are held (d^2 each).
_KEYS_CELLS = 1 << 22


class _Memo(collections.OrderedDict):
  cells = 0  # the d^2 of the relations held


_KEYS = _Memo()


def canonical_relation(relation: Any) -> tuple[tuple[bool, ...], ...]:
  """``relation`` (a square array-like of 0/1 or bools) as a tuple of tuples of
  Python bools; the order axioms are checked by the caller.

  Raises:
    ValueError: empty, not a square matrix, or an entry other than 0/1 (named).
  """
  try:
    arr = np.asarray(relation)
  except ValueError:
    raise ValueError("order must be a square (d, d) matrix; got ragged rows.") from None
  if arr.size == 0:
    raise ValueError("a poset needs at least one element; got d = 0.")
  if arr.ndim != 2 or arr.shape[0] != arr.shape[1]:
    raise ValueError(
      f"order must be a square (d, d) matrix; got shape {arr.shape}. "
      "Pass order[i][j] = 1 iff p_i <= p_j."
    )
  if arr.dtype != bool:
    if not (np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)):
      raise ValueError(f"order must hold 0/1 values; got dtype {arr.dtype}.")
    bad = np.argwhere((arr != 0) & (arr != 1))
    if bad.size:
      i, j = bad[0]
      raise ValueError(
        f"order must hold 0/1 values; order[{i}][{j}] = {arr[i, j].item()!r}."
      )
  return tuple(tuple(bool(v) for v in row) for row in arr.astype(bool))


def relation_key(relation: Any) -> bytes:
  """The canonical bytes of a relation: ``d`` then its bits, row by row.

  Raises:
    ValueError: ``relation`` is not a tuple of ``d`` tuples of ``d`` Python bools (a
      poset's relation is stored so: one that is not was changed after creation).
  """
  hit = _KEYS.get(id(relation))
  if hit is not None and hit[0] is relation:
    _KEYS.move_to_end(id(relation))
    return hit[1]
  d = len(relation) if type(relation) is tuple else -1
  if d < 1 or not all(
    type(row) is tuple and len(row) == d and all(type(v) is bool for v in row)
    for row in relation
  ):
    raise ValueError(
      f"a poset's relation must be a tuple of d tuples of d bools; got a "
      f"{type(relation).__qualname__} (was it changed after the poset was created?)."
    )
  key = d.to_bytes(4, "little") + np.packbits(np.array(relation, dtype=bool)).tobytes()
  _KEYS[id(relation)] = (relation, key)
  _KEYS.cells += d * d
  while _KEYS.cells > _KEYS_CELLS and len(_KEYS) > 1:
    _KEYS.cells -= len(_KEYS.popitem(last=False)[1][0]) ** 2
  return key


@value_cache(maxsize=256)
def order_of(key: bytes) -> np.ndarray:
  """The read-only ``(d, d)`` bool order matrix of a :func:`relation_key`."""
  d = int.from_bytes(key[:4], "little")
  bits = np.unpackbits(np.frombuffer(key[4:], dtype=np.uint8), count=d * d)
  arr = bits.astype(bool).reshape(d, d)
  arr.setflags(write=False)
  return arr


@value_cache(maxsize=32)
def relation_of(key: bytes) -> tuple[tuple[bool, ...], ...]:
  """The canonical relation of a :func:`relation_key`: one tuple per key, so the
  keys of the posets the caches build are found by identity."""
  return tuple(tuple(bool(v) for v in row) for row in order_of(key))


def by_relation(maxsize: int) -> Callable[[F], F]:
  """:func:`~jaxdp._cache.value_cache` for ``fn(poset, *args)``, keyed by the poset's class
  and :func:`relation_key` (and ``args``), never by the object.

  On a miss ``fn`` runs on a fresh poset of the same class built from the key
  (``cls.from_key``), so nothing the caller's object holds besides its relation
  reaches the cache. The wrapper has ``cache_clear`` and ``cache_info``.
  """

  def wrap(fn):
    @value_cache(maxsize=maxsize)
    def cached(cls, key, *args, **kwargs):
      return fn(cls.from_key(key), *args, **kwargs)

    @functools.wraps(fn)
    def call(poset, *args, **kwargs):
      return cached(type(poset), relation_key(poset.relation), *args, **kwargs)

    call.cache_clear = cached.cache_clear
    call.cache_info = cached.cache_info
    return call

  return wrap
