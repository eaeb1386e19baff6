"""The key a new accountant owns.

:meth:`jaxdp.Accountant.create` makes a fresh key from the operating system for
``key=None`` (ChaCha20 for a secure accountant) and otherwise consumes the key object
it is given (checked and marked used in one step, :func:`jaxdp.accounting.guard.claim`,
so two threads cannot both make an accountant from it). A secure accountant's releases
are meant to be published, and noise is private only while no one knows or reuses
its key, so a secure accountant makes its own: a key given to it is refused (a key
someone holds or derived can be reused or reproduced; an OS key the caller holds may
already have been drawn from), except with ``allow_test_key=True``, which lets a
test use any ChaCha20 key (its releases are reproducible, so not private).

The OS is read in Python: inside ``jit``, ``vmap`` or ``lax.map`` that happens once,
while JAX traces, and the key would be a constant of the program (the same in every
call, lane and step), so ``key=None`` is refused there (:func:`check_key_source`).
"""

from __future__ import annotations

import contextlib

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.accounting.errors import StaleAccountantError
from jaxdp.accounting.guard import claim, key_copy, unclaim

__all__ = [
  "accountant_key",
  "check_flags",
  "check_key_source",
  "check_secure_key",
  "consumed_on_success",
]


def check_flags(secure, allow_test_key) -> None:
  """Raises for ``secure`` or ``allow_test_key`` not a bool (an ``ArgTypeError``, a
  ValueError), and for ``allow_test_key=True`` without ``secure``."""
  for name, flag in (("secure", secure), ("allow_test_key", allow_test_key)):
    if not isinstance(flag, bool):
      raise _checks.ArgTypeError(f"{name} must be True or False; got {flag!r}.")
  if allow_test_key and not secure:
    raise ValueError(
      "allow_test_key=True applies to secure accountants only; with secure=False "
      "every key is accepted: drop allow_test_key (or pass secure=True)."
    )


def check_secure_key(key, *, allow_test_key: bool) -> None:
  """Raises a ValueError, consuming nothing, for a ``key`` given to a secure
  accountant: any key without ``allow_test_key`` (an allowlist of one: the key the
  accountant makes itself), and a key of another generator than ChaCha20."""
  if key is None:
    return
  if not allow_test_key:
    what = "a key traced inside jit" if not _checks.is_concrete(key) else "a given key"
    raise ValueError(
      f"secure=True makes its own key: pass key=None (a fresh ChaCha20 key from the "
      f"OS); got {what}. A key someone holds or derived can be reused or "
      "reproduced (an OS key may already have been drawn from), so the noise would "
      "not be private. For a test with a fixed key, pass allow_test_key=True."
    )
  if not dprandom.is_secure_key(key):
    raise ValueError(
      "secure=True needs a ChaCha20 key: pass key=None (a fresh key from the OS), "
      "or for a test jaxdp.random.secure_key(bytes(32)); got a key of another generator."
    )


def check_key_source(key, *, secure: bool, allow_test_key: bool) -> None:
  """Raises a ValueError, consuming nothing, for a key an accountant cannot own:
  ``key=None`` inside a JAX transformation (the OS would be read once, while JAX
  traces: every call would get the same key), or a key :func:`check_secure_key`
  refuses. Call it before ``jax.ensure_compile_time_eval``, which may hide the trace."""
  if key is None:
    _checks.check_os_read(
      "Accountant.create(key=None)",
      "Create the accountant outside jit, vmap and lax.map and pass it in (a batch "
      "of accountants: create each outside and stack them).",
    )
  elif secure:
    check_secure_key(key, allow_test_key=allow_test_key)


def _claim(key, secure: bool) -> None:
  """:func:`~jaxdp.accounting.guard.claim`, with a message for making an accountant."""
  try:
    claim(key)
  except StaleAccountantError:
    advice = (
      "a secure accountant makes its own key: pass key=None (a test key must be new too)"
      if secure
      else "pass key=None (a fresh key from the OS), or give each accountant a key "
      "of its own (jax.random.split)"
    )
    where = "" if _checks.is_concrete(key) else " in this traced program"
    raise StaleAccountantError(
      f"key was already given to another accountant or used to draw noise{where}: a "
      f"second accountant from it would draw the same noise. To make one, {advice}."
    ) from None


def accountant_key(key, *, secure: bool):
  """The key a new accountant owns (:meth:`jaxdp.Accountant.create`, after
  :func:`check_key_source`): for ``None``, a fresh key from the OS (ChaCha20 when
  ``secure``); else a copy of ``key``, which is consumed (checked and marked used in
  one step, :func:`~jaxdp.accounting.guard.claim`).

  Raises:
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  if key is None:
    return dprandom.secure_key() if secure else dprandom.os_key()
  _checks.check_key(key)
  _claim(key, secure)
  return key_copy(key)


@contextlib.contextmanager
def consumed_on_success(key, *, secure, allow_test_key):
  """For a call that makes an accountant and then may refuse (a ledger's checks):
  checks the flags and the key (:func:`check_flags`, :func:`check_key_source`),
  claims ``key`` (so no other call makes an accountant from it meanwhile), yields a
  private copy to make the accountant from, and gives the claim back if the block
  raises, so a refused call leaves ``key`` usable. ``None`` yields ``None``.

  Raises:
    ValueError: a bad flag, or a key :func:`check_key_source` refuses.
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  check_flags(secure, allow_test_key)
  check_key_source(key, secure=secure, allow_test_key=allow_test_key)
  if key is None:
    yield None
    return
  _checks.check_key(key)
  _claim(key, secure)
  try:
    yield key_copy(key)
  except BaseException:
    unclaim(key)
    raise
