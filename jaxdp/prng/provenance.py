"""Which key objects hold bytes from the operating system's entropy.

Noise is private only while no one knows its key: a release under a key whose bytes
someone chose (``secure_key(bytes(32))``, ``jax.random.wrap_key_data`` of known
words) can be reproduced by whoever knows them. A secure accountant
(:meth:`jaxdp.Accountant.create` with ``secure=True``) therefore accepts a key only
by provenance, an allowlist: the very key object that :func:`jaxdp.random.os_key`
(which :func:`jaxdp.random.secure_key` calls) made from ``secrets.token_bytes``.
Those objects are remembered by identity (a weak reference, as the stale-key guard
remembers used tracers, :mod:`jaxdp.accounting.guard`), not by a mark the object
carries, so every other key is unknown here: given bytes, wrapped key data, a
``split`` or ``fold_in`` child, a copy (``copy``, ``pickle``, ``jax.device_put``), a
tracer.
"""

from __future__ import annotations

import weakref

from jaxdp import _checks

__all__ = ["is_os_born", "mark_os_born"]

# id -> weak reference to the key object made from the OS's entropy; the reference
# tells the object from a later one given the same id (an entry leaves with its key)
_OS_BORN: dict[int, weakref.ref] = {}


def _forget(ident, ref):
  if _OS_BORN.get(ident) is ref:
    _OS_BORN.pop(ident, None)


def mark_os_born(key):
  """``key``, remembered as made from the OS's entropy (a concrete key object; a
  tracer is not remembered)."""
  if _checks.is_concrete(key):
    ident = id(key)
    _OS_BORN[ident] = weakref.ref(key, lambda ref: _forget(ident, ref))
  return key


def is_os_born(key) -> bool:
  """Whether ``key`` is a key object :func:`mark_os_born` remembered."""
  ref = _OS_BORN.get(id(key))
  return ref is not None and ref() is key
