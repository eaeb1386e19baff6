"""A secure accountant (and a secure Session) draws its noise only from a key born
from the operating system's entropy: ``key=None``, or the very key object that
``jaxdp.random.secure_key()`` (or ``os_key``) made from ``secrets.token_bytes``.

An allowlist by provenance, not a list of known test keys. The attacks, with the
public API only: a key whose bytes the caller chose (``secure_key(bytes(32))``,
``wrap_key_data`` of known words, ``os_key`` given its entropy, an unpickled key), a
child derived from an OS key, and an OS key passed into ``jit`` (a tracer, whose
provenance the trace cannot show). Before the allowlist each was accepted, and its
release's noise was reproducible by anyone who knows the bytes.
``allow_test_key=True`` lets a test use a fixed key. Every refusal comes before
anything is drawn (nothing is compiled) and leaves the key unconsumed.
"""

import pickle

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Accountant, Session, StaleAccountantError
from jaxdp.prng import CHACHA20
from jaxdp.random import os_key, secure_key

ZEROS = bytes(32)
ROWS = np.arange(10, dtype=np.int32)

KNOWN = {
  "given-bytes": lambda: secure_key(ZEROS),
  "os_key-given-entropy": lambda: os_key(CHACHA20, entropy=bytes(range(32))),
  "wrap_key_data": lambda: jax.random.wrap_key_data(
    jnp.arange(8, dtype=jnp.uint32), impl=CHACHA20
  ),
  "split-child-of-an-os-key": lambda: jax.random.split(secure_key())[0],
  # the same bytes as an OS key, but whoever unpickles can have chosen them
  "unpickled-os-key": lambda: pickle.loads(pickle.dumps(secure_key())),
}


def _assert_explains(err):
  """The refusal names ``key``, says why and what to do instead."""
  text = str(err.value)
  assert "key" in text and "reproduce" in text
  assert "key=None" in text and "jaxdp.random.secure_key()" in text
  assert "allow_test_key=True" in text


@pytest.mark.parametrize("kind", KNOWN)
def test_a_secure_accountant_refuses_a_key_not_born_from_the_os(kind):
  key = KNOWN[kind]()
  with pytest.raises(ValueError) as err:
    Accountant.create(1.0, secure=True, key=key)
  _assert_explains(err)
  # nothing was consumed: the same key object is still usable, here as a test key
  acct = Accountant.create(1.0, secure=True, key=key, allow_test_key=True)
  assert acct.secure and jaxdp.random.is_secure_key(acct.key)
  with pytest.raises(StaleAccountantError):  # and now it is consumed
    Accountant.create(1.0, secure=True, key=key, allow_test_key=True)


def test_a_secure_accountant_accepts_keys_from_the_os_once():
  """Guards against an over-strict allowlist (these were accepted before it too)."""
  for key in (secure_key(), os_key(CHACHA20)):
    assert Accountant.create(1.0, secure=True, key=key).secure
    with pytest.raises(StaleAccountantError):
      Accountant.create(1.0, secure=True, key=key)
  assert jaxdp.random.is_secure_key(Accountant.create(1.0, secure=True).key)


def test_another_generator_keeps_its_own_message():
  for key in (jax.random.key(0), np.zeros(8, np.uint32)):
    for allow in (False, True):
      with pytest.raises(ValueError, match="secure=True needs a ChaCha20 key"):
        Accountant.create(1.0, secure=True, key=key, allow_test_key=allow)


def test_an_os_key_traced_inside_jit_is_refused_unless_allowed():
  """Inside ``jit`` the key argument is a tracer: whether its bytes came from the OS
  cannot be told, so a secure accountant created there from it is refused (create it
  outside and pass the accountant in)."""
  key = secure_key()

  def make(k, allow):
    return jax.random.key_data(
      Accountant.create(1.0, secure=True, key=k, allow_test_key=allow).key
    )

  with pytest.raises(ValueError) as err:
    jax.jit(make, static_argnums=1)(key, False)
  _assert_explains(err)
  assert "jit" in str(err.value)
  assert jax.jit(make, static_argnums=1)(key, True).shape == (8,)
  assert Accountant.create(1.0, secure=True, key=key).secure  # the OS key itself


def test_allow_test_key_is_checked_before_anything_is_consumed():
  key = secure_key(ZEROS)
  with pytest.raises(TypeError, match="allow_test_key must be True or False; got 1"):
    Accountant.create(1.0, secure=True, key=key, allow_test_key=1)
  with pytest.raises(ValueError, match="allow_test_key=True.*secure=False"):
    Accountant.create(1.0, key=jax.random.key(0), allow_test_key=True)
  with pytest.raises(ValueError, match="eps_budget"):  # limits first
    Accountant.create(-1.0, secure=True, key=key, allow_test_key=True)
  assert Accountant.create(1.0, secure=True, key=key, allow_test_key=True).secure


def test_a_secure_session_refuses_a_key_whose_bytes_the_caller_chose():
  key = secure_key(ZEROS)
  with pytest.raises(ValueError) as err:
    Session(ROWS, 1.0, secure=True, key=key)
  _assert_explains(err)
  with pytest.raises(TypeError, match="allow_test_key"):
    Session(ROWS, 1.0, secure=True, key=key, allow_test_key="yes")
  assert Session(ROWS, 1.0, secure=True, key=key, allow_test_key=True).secure
  assert Session(ROWS, 1.0, secure=True, key=secure_key()).secure


def test_a_ledger_refuses_a_chosen_key_as_a_bad_argument_not_a_corrupt_ledger(tmp_path):
  """Resuming a registered budget (``eps_budget=None``) rebuilds the accountant from
  the stored record: a refused key there is the caller's argument, not a damaged
  ledger, and ``allow_test_key`` reaches it."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("d", ROWS, 1.0, secure=True)
  key = secure_key(ZEROS)
  for budget in (None, 1.0):
    with pytest.raises(ValueError) as err:
      ledger.accountant("d", ROWS, budget, key=key, secure=True)
    _assert_explains(err)
  acct = ledger.accountant("d", ROWS, key=key, secure=True, allow_test_key=True)
  assert acct.secure
