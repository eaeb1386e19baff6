"""The key a new accountant owns, and which keys a secure accountant refuses.

:meth:`jaxdp.Accountant.create` makes a fresh key from the operating system for
``key=None`` (ChaCha20 for a secure accountant) and otherwise consumes the key object
it is given (:func:`jaxdp.accounting.guard.own_key`). A secure accountant's releases
are meant to be published, and noise is private only while no one knows its key: it
takes a given key only if it is the key object :func:`jaxdp.random.secure_key` (or
:func:`jaxdp.random.os_key`) made from the OS's entropy, an allowlist by provenance
(:mod:`jaxdp.prng.provenance`), not a list of known test keys. ``allow_test_key=True``
lets a test use any ChaCha20 key (its releases are reproducible, so not private).
"""

from __future__ import annotations

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.accounting.guard import own_key
from jaxdp.prng import provenance

__all__ = ["accountant_key", "check_secure_key"]


def check_secure_key(key, *, allow_test_key: bool) -> None:
  """Raises a ValueError, consuming nothing, for a ``key`` a secure accountant refuses:
  not ChaCha20, or (an allowlist) not the key object :func:`jaxdp.random.os_key` made
  from the OS's entropy (:mod:`jaxdp.prng.provenance`) and no ``allow_test_key``:
  whoever knows a key's bytes reproduces its noise."""
  if not dprandom.is_secure_key(key):
    raise ValueError(
      "secure=True needs a ChaCha20 key: pass key=None (a fresh key from the OS) "
      "or jaxdp.random.secure_key(); got a key of another generator."
    )
  if not allow_test_key and not provenance.is_os_born(key):
    got = (
      "a ChaCha20 key that jaxdp.random.secure_key() did not make from the OS (one "
      "of given bytes, wrap_key_data, a split or fold_in child, or a copy)"
      if _checks.is_concrete(key)
      else "a key traced inside jit or another transformation, whose origin cannot "
      "be told (create the accountant outside it and pass the accountant in)"
    )
    raise ValueError(
      f"secure=True needs key=None (a fresh key from the OS) or the key object "
      f"jaxdp.random.secure_key() returned; got {got}. A key whose bytes are known "
      "gives noise anyone who knows them can reproduce: the release would not be "
      "private. For a test with a fixed key, pass allow_test_key=True."
    )


def accountant_key(key, *, secure: bool, allow_test_key: bool):
  """The key a new accountant owns (:meth:`jaxdp.Accountant.create`): for ``None``, a
  fresh key from the OS (ChaCha20 when ``secure``); else ``key``, checked
  (:func:`check_secure_key` when ``secure``) and consumed (:func:`own_key`).

  Raises:
    ValueError: a key a secure accountant refuses (nothing is consumed).
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  if key is None:
    return dprandom.secure_key() if secure else dprandom.os_key()
  if secure:
    check_secure_key(key, allow_test_key=allow_test_key)
  _checks.check_key(key)
  return own_key(key)
