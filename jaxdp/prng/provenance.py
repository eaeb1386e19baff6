"""Which key objects hold bytes from the operating system's entropy.

Noise is private only while no one knows its key: a release under a key whose bytes
someone chose (``secure_key(bytes(32))``, ``jax.random.wrap_key_data`` of known
words) can be reproduced by whoever knows them. A secure accountant
(:meth:`jaxdp.Accountant.create` with ``secure=True``) therefore accepts a key only
by provenance, an allowlist: the very key object that :func:`jaxdp.random.os_key`
(which :func:`jaxdp.random.secure_key` calls) made from ``secrets.token_bytes``. The
mark lives on that concrete object, as the stale-key guard's does
(:mod:`jaxdp.accounting.guard`), so every other key is unmarked: given bytes, wrapped
key data, a ``split`` or ``fold_in`` child, a copy (``jax.device_put``), a tracer.
"""

from __future__ import annotations

from jaxdp import _checks

__all__ = ["is_os_born", "mark_os_born"]

_MARK = "_jaxdp_os_entropy"


def mark_os_born(key):
  """``key``, marked as made from the OS's entropy (a concrete key object; a tracer
  takes no mark)."""
  if _checks.is_concrete(key):
    object.__setattr__(key, _MARK, True)
  return key


def is_os_born(key) -> bool:
  """Whether ``key`` is a concrete key object :func:`mark_os_born` marked."""
  return _checks.is_concrete(key) and getattr(key, _MARK, False) is True
