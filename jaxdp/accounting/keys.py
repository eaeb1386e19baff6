"""The key a new accountant owns.

:meth:`jaxdp.Accountant.create` makes a fresh key from the operating system for
``key=None`` (ChaCha20 for a secure accountant) and otherwise consumes the key object
it is given (:func:`jaxdp.accounting.guard.own_key`). A secure accountant's releases
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
from jaxdp.accounting.guard import check_unused, key_copy, mark_used, own_key

__all__ = ["accountant_key", "check_key_source", "check_secure_key", "consumed_on_success"]


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


def _check_fresh(key, secure: bool) -> None:
  try:
    check_unused(key)
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
  ``secure``); else ``key``, consumed (:func:`own_key`).

  Raises:
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  if key is None:
    return dprandom.secure_key() if secure else dprandom.os_key()
  _checks.check_key(key)
  _check_fresh(key, secure)
  return own_key(key)


@contextlib.contextmanager
def consumed_on_success(key, *, secure: bool):
  """For a call that makes an accountant and then may refuse (a ledger's checks):
  yields a private copy of ``key`` to make it from, and consumes ``key`` only if the
  block returns, so a refused call leaves ``key`` usable. ``None`` yields ``None``.

  Raises:
    StaleAccountantError: ``key`` was already used by a release or an accountant.
  """
  if key is None:
    yield None
    return
  _checks.check_key(key)
  _check_fresh(key, secure)
  yield key_copy(key)
  mark_used(key)
