"""A secure accountant (and a secure Session) makes its own key: ``key=None`` draws a
fresh ChaCha20 key from the operating system, and any key given to it is refused
unless ``allow_test_key=True`` (then any ChaCha20 key, for tests).

The attacks, with the public API only: a key whose bytes the caller chose
(``secure_key(bytes(32))``, ``wrap_key_data`` of known words, ``os_key`` given its
entropy, an unpickled key), a child derived from an OS key, an OS key the caller
holds (``secure_key()``, ``os_key``: the caller may keep it, or have drawn from it
already, so the first release would reuse that draw's noise), and an OS key passed
into ``jit``. Every refusal comes before anything is drawn (nothing is compiled) and
leaves the key unconsumed. Also: an accountant's ``repr`` does not show its key, and
a ledger (or a Session with a ledger) that refuses a call consumes nothing.
"""

import pickle
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Accountant, Session, StaleAccountantError, exact
from jaxdp.ledger import BudgetMismatchError, DatasetMismatchError
from jaxdp.prng import CHACHA8, CHACHA20
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
  "unpickled-os-key": lambda: pickle.loads(pickle.dumps(secure_key())),
  # keys from the OS that the caller holds: it can reuse them, or has drawn from them
  "secure_key()": lambda: secure_key(),
  "os_key(CHACHA20)": lambda: os_key(CHACHA20),
  "os_key('chacha20')": lambda: os_key("chacha20"),
}


def _assert_explains(err):
  """The refusal names ``key``, says why and what to do instead."""
  text = str(err.value)
  assert "key" in text and "reproduce" in text and "private" in text
  assert "key=None" in text and "makes its own" in text
  assert "allow_test_key=True" in text


@pytest.mark.parametrize("kind", KNOWN)
def test_a_secure_accountant_refuses_every_key_it_is_given(kind):
  key = KNOWN[kind]()
  with pytest.raises(ValueError) as err:
    Accountant.create(1.0, secure=True, key=key)
  _assert_explains(err)
  # nothing was consumed: the same key object is still usable, here as a test key
  acct = Accountant.create(1.0, secure=True, key=key, allow_test_key=True)
  assert acct.secure and jaxdp.random.is_secure_key(acct.key)
  with pytest.raises(StaleAccountantError) as err:  # and now it is consumed
    Accountant.create(1.0, secure=True, key=key, allow_test_key=True)
  assert "key=None" in str(err.value) and "release" not in str(err.value)


def test_an_os_key_already_drawn_from_does_not_give_its_noise_to_a_release():
  """The key of an exact draw was accepted, and the accountant's first release reused
  that draw's noise (its split child), so the draw revealed the release's noise."""
  key = secure_key()
  drawn = exact.laplace(jax.random.split(key)[1], scale=2.0)
  with pytest.raises(ValueError, match="makes its own"):
    Accountant.create(1.0, secure=True, key=key)
  acct = Accountant.create(1.0, secure=True)
  assert not np.array_equal(jax.random.key_data(acct.key), jax.random.key_data(key))
  assert drawn.shape == ()


def test_a_secure_accountant_makes_its_own_chacha20_key():
  a, b = Accountant.create(1.0, secure=True), Accountant.create(1.0, secure=True)
  assert jaxdp.random.is_secure_key(a.key)
  assert not np.array_equal(jax.random.key_data(a.key), jax.random.key_data(b.key))


def test_another_generator_is_refused_with_or_without_allow_test_key():
  for key in (jax.random.key(0), np.zeros(8, np.uint32)):
    with pytest.raises(ValueError, match="makes its own"):
      Accountant.create(1.0, secure=True, key=key)
    with pytest.raises(ValueError, match="secure=True needs a ChaCha20 key"):
      Accountant.create(1.0, secure=True, key=key, allow_test_key=True)


def test_an_os_key_traced_inside_jit_is_refused_unless_allowed():
  key = secure_key()

  def make(k, allow):
    return jax.random.key_data(
      Accountant.create(1.0, secure=True, key=k, allow_test_key=allow).key
    )

  with pytest.raises(ValueError) as err:
    jax.jit(make, static_argnums=1)(key, False)
  _assert_explains(err)
  assert jax.jit(make, static_argnums=1)(key, True).shape == (8,)


def test_allow_test_key_is_checked_before_anything_is_consumed():
  key = secure_key(ZEROS)
  with pytest.raises(TypeError, match="allow_test_key must be True or False; got 1"):
    Accountant.create(1.0, secure=True, key=key, allow_test_key=1)
  with pytest.raises(ValueError, match="allow_test_key=True.*secure=False"):
    Accountant.create(1.0, key=jax.random.key(0), allow_test_key=True)
  with pytest.raises(ValueError, match="eps_budget"):  # limits first
    Accountant.create(-1.0, secure=True, key=key, allow_test_key=True)
  assert Accountant.create(1.0, secure=True, key=key, allow_test_key=True).secure


def test_a_reused_key_is_told_what_to_do_at_create_time():
  """The create-time refusal of a consumed key spoke of releases and advised
  ``jax.random.split``; a secure accountant is told to pass ``key=None``."""
  key = jax.random.key(3)
  Accountant.create(1.0, key=key)
  with pytest.raises(StaleAccountantError) as err:
    Accountant.create(1.0, key=key)
  assert "key=None" in str(err.value) and "jax.random.split" in str(err.value)
  key = secure_key(ZEROS)
  Accountant.create(1.0, secure=True, key=key, allow_test_key=True)
  with pytest.raises(StaleAccountantError) as err:
    Accountant.create(1.0, secure=True, key=key, allow_test_key=True)
  assert "pass key=None" in str(err.value) and "split" not in str(err.value)


def test_a_secure_session_refuses_a_key_it_is_given():
  for key in (secure_key(ZEROS), secure_key()):
    with pytest.raises(ValueError) as err:
      Session(ROWS, 1.0, secure=True, key=key)
    _assert_explains(err)
  key = secure_key(ZEROS)
  with pytest.raises(TypeError, match="allow_test_key"):
    Session(ROWS, 1.0, secure=True, key=key, allow_test_key="yes")
  assert Session(ROWS, 1.0, secure=True, key=key, allow_test_key=True).secure
  assert Session(ROWS, 1.0, secure=True).secure


def test_a_ledger_refuses_a_given_key_as_a_bad_argument_not_a_corrupt_ledger(tmp_path):
  """Resuming a registered budget (``eps_budget=None``) rebuilds the accountant from
  the stored record: a refused key there is the caller's argument, not a damaged
  ledger, and ``allow_test_key`` reaches it."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("d", ROWS, 1.0, secure=True)
  key = secure_key()
  for budget in (None, 1.0):
    with pytest.raises(ValueError) as err:
      ledger.accountant("d", ROWS, budget, key=key, secure=True)
    _assert_explains(err)
  acct = ledger.accountant("d", ROWS, key=key, secure=True, allow_test_key=True)
  assert acct.secure


def _words(key):
  return [str(int(w)) for w in np.asarray(jax.random.key_data(key)).ravel()]


def test_an_accountants_repr_does_not_show_its_key():
  """``repr(acct)`` printed the key's words: a key in a log is a secret."""
  chosen = np.array([2718281828, 3141592653], np.uint32)
  accts = [
    Accountant.create(1.0, secure=True),
    Accountant.create(
      1.0, secure=True, key=secure_key(bytes(range(90, 122))), allow_test_key=True
    ),
    Accountant.create(1.0, key=jax.random.wrap_key_data(chosen)),
  ]
  for acct in accts:
    words = _words(acct.key)
    for text in (repr(acct), str(acct)):
      assert "Accountant(" in text and "eps_budget=1.0" in text
      assert not any(w in text for w in words), text
      assert not any(format(int(w), "x") in text for w in words)


def _ledger_with(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("d", ROWS, 1.0)
  return ledger


REFUSED = {
  "budget": (BudgetMismatchError, lambda L, k: L.accountant("d", ROWS, 2.0, key=k)),
  "data": (DatasetMismatchError, lambda L, k: L.accountant("d", ROWS + 1, None, key=k)),
  "unknown": (KeyError, lambda L, k: L.accountant("new", ROWS + 2, None, key=k)),
  "session-data": (
    DatasetMismatchError,
    lambda L, k: Session(ROWS + 1, 1.0, key=k, ledger=L, dataset="d"),
  ),
  "session-budget": (
    BudgetMismatchError,
    lambda L, k: Session(ROWS, 2.0, key=k, ledger=L, dataset="d"),
  ),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_refused_ledger_call_consumes_nothing(tmp_path, case):
  """The key was consumed before the ledger's checks refused the call, so the retry
  with the right arguments got a StaleAccountantError."""
  error, call = REFUSED[case]
  ledger, key = _ledger_with(tmp_path), jax.random.key(11)
  with pytest.raises(error):
    call(ledger, key)
  acct = ledger.accountant("d", ROWS, None, key=key)  # the same key, accepted
  assert np.array_equal(jax.random.key_data(acct.key), jax.random.key_data(key))
  with pytest.raises(StaleAccountantError):  # and consumed now
    ledger.accountant("d", ROWS, None, key=key)


def test_a_refused_secure_test_key_is_kept_too(tmp_path):
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("d", ROWS, 1.0, secure=True)
  key = secure_key(ZEROS)
  with pytest.raises(DatasetMismatchError):
    Session(
      ROWS + 1, 1.0, secure=True, key=key, allow_test_key=True, ledger=ledger, dataset="d"
    )
  s = Session(
    ROWS, 1.0, secure=True, key=key, allow_test_key=True, ledger=ledger, dataset="d"
  )
  assert s.secure


def test_os_key_takes_jaxdps_generator_names():
  """``os_key("chacha20")`` failed with JAX's "unrecognized PRNG implementation"
  although its docstring said "name or object"."""
  assert jax.random.key_impl(os_key("chacha20")) == CHACHA20
  assert jax.random.key_impl(os_key("chacha8")) == CHACHA8
  assert jax.random.key_impl(os_key("threefry")) == jax.random.key_impl(jax.random.key(0))
  given = os_key("chacha20", entropy=bytes(range(32)))
  expected = jax.random.key_data(secure_key(bytes(range(32))))
  assert np.array_equal(jax.random.key_data(given), expected)


class _BlockingRows:
  """Rows whose first read waits for ``release``: a call reading them stays inside
  ``Ledger.accountant`` while another thread runs."""

  def __init__(self, rows):
    self.rows, self.reading, self.release = rows, threading.Event(), threading.Event()
    self.shape, self.ndim, self.dtype = rows.shape, rows.ndim, rows.dtype

  def __array__(self, dtype=None, copy=None):
    self.reading.set()
    assert self.release.wait(30)
    return self.rows


def test_two_threads_cannot_make_two_accountants_from_one_key(tmp_path):
  """The key was marked used only when a call succeeded: a second thread calling
  while the first was inside the ledger's checks passed the "unused" check too, and
  both accountants held one key (the same noise twice: differences of neighbouring
  data released exactly). The key is now claimed before the checks run."""
  key = jax.random.key(12)
  rows = _BlockingRows(ROWS)
  result = {}

  def make():  # a Ledger is used from the thread that opened it
    result["first"] = jaxdp.Ledger(tmp_path / "a.db").accountant("d", rows, 1.0, key=key)

  thread = threading.Thread(target=make)
  thread.start()
  try:
    assert rows.reading.wait(30)  # the first call is inside, holding the key
    with pytest.raises(StaleAccountantError):
      Session(ROWS, 1.0, key=key)
    with pytest.raises(StaleAccountantError):
      jaxdp.Ledger(tmp_path / "b.db").accountant("d", ROWS, 1.0, key=key)
  finally:
    rows.release.set()
    thread.join(30)
  assert "first" in result  # the first call succeeded and owns the key


def test_a_bad_flag_on_the_ledgers_resume_path_is_the_callers_error(tmp_path):
  """``allow_test_key="no"`` or ``secure=1`` when resuming a registered budget was
  reported as a corrupt ledger (``LedgerCorruptError``), which could lead an
  operator to repair a healthy file."""
  ledger = jaxdp.Ledger(tmp_path / "l.db")
  ledger.accountant("d", ROWS, 1.0, secure=True)
  key = secure_key(ZEROS)
  for flags in ({"secure": True, "allow_test_key": "no"}, {"secure": 1}):
    with pytest.raises(ValueError, match="must be True or False") as err:
      ledger.accountant("d", ROWS, None, key=key, **flags)
    assert not isinstance(err.value, jaxdp.ledger.LedgerCorruptError)
  assert ledger.accountant("d", ROWS, key=key, secure=True, allow_test_key=True).secure


def test_a_secure_session_refuses_a_stale_given_key_as_a_bad_argument():
  """With ``secure=True`` a given key is refused as an argument (ValueError) before
  its freshness is looked at, as ``Accountant.create`` does."""
  key = jax.random.key(13)
  Accountant.create(1.0, key=key)
  for make in (
    lambda: Session(ROWS, 1.0, secure=True, key=key),
    lambda: Accountant.create(1.0, secure=True, key=key),
  ):
    with pytest.raises(ValueError) as err:
      make()
    assert not isinstance(err.value, StaleAccountantError)
    _assert_explains(err)
