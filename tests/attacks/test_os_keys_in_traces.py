"""A key from the operating system cannot be made inside a JAX transformation.

``Accountant.create(..., key=None)`` and ``jaxdp.random.os_key()`` /
``secure_key()`` read the OS's entropy in Python. Inside ``jit``, ``vmap`` or
``lax.map`` that happens once, while JAX traces, and the key becomes a constant of
the program: every call of the compiled function, every lane and every step
returned an accountant with the same key and a full budget, so releasing ``x`` from
one and ``x - 1`` from another gave the difference of the data exactly. Each is now
refused at trace time with a ValueError saying to create the accountant (or the key)
outside and pass it in.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

import jaxdp
from jaxdp import Accountant
from jaxdp.random import os_key, secure_key

IN_TRACE = "once, while JAX traces.*outside"
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("secure", [False, True])
def test_an_accountant_made_inside_jit_is_refused(secure):
  make = jax.jit(lambda: Accountant.create(1.0, secure=secure))
  with pytest.raises(ValueError, match=IN_TRACE) as err:
    a1, a2 = make(), make()  # before: the same key twice, a full budget each
    same = jnp.array_equal(jax.random.key_data(a1.key), jax.random.key_data(a2.key))
    pytest.fail(f"accountants made in jit were answered (same key: {bool(same)})")
  assert "key=None" in str(err.value) and "Accountant.create" in str(err.value)


@pytest.mark.parametrize(
  "transform",
  [
    lambda f: jax.vmap(f)(jnp.arange(2)),
    lambda f: jax.lax.map(f, jnp.arange(2)),
    lambda f: jax.eval_shape(f, 0),
  ],
  ids=["vmap", "lax.map", "eval_shape"],
)
def test_an_accountant_made_in_every_lane_or_step_is_refused(transform):
  with pytest.raises(ValueError, match=IN_TRACE):
    transform(lambda _: Accountant.create(1.0, secure=True))


@pytest.mark.parametrize(
  "make",
  [os_key, secure_key, lambda: os_key("chacha20")],
  ids=["os_key", "secure_key", "chacha20"],
)
def test_an_os_key_made_inside_jit_is_refused(make):
  with pytest.raises(ValueError, match=IN_TRACE):
    jax.jit(lambda: jax.random.key_data(make()))()
  with pytest.raises(ValueError, match=IN_TRACE):
    jax.vmap(lambda _: jax.random.key_data(make()))(jnp.arange(2))


def test_given_keys_and_accountants_passed_in_still_work_inside_jit():
  """What the refusal tells the caller to do instead works, and a key of given
  bytes (a test's) is still made inside a trace."""
  acct = Accountant.create(1.0, secure=True)
  mech = jaxdp.LaplaceMechanism(1.0, exact=True)
  acct2, out = jax.jit(lambda a, x: jaxdp.release(a, mech, x))(acct, jnp.int32(5))
  assert out.dtype == jnp.int32 and int(acct2.answered) == 1
  data = jax.jit(lambda: jax.random.key_data(secure_key(bytes(32))))()
  assert data.shape == (8,)
  made = jax.jit(lambda k: Accountant.create(1.0, key=k).spent_units)(jax.random.key(0))
  assert int(made) == 0


def test_the_check_holds_when_jaxdp_is_first_imported_inside_jit():
  """The "inside a transformation" check compared the top trace with the one seen
  when jaxdp was imported: a first ``import jaxdp`` inside a jitted function (a lazy
  import) recorded the jit's trace as "none", so ``Accountant.create(key=None)`` was
  accepted inside ``jit`` (one key for every call) and refused eagerly. A fresh
  process, as the import order is the point."""
  code = textwrap.dedent(
    """
    import jax

    @jax.jit
    def step(x):
      import jaxdp  # the process's first import of jaxdp, while JAX traces
      return x

    step(1.0)
    import jaxdp

    jaxdp.Accountant.create(1.0)  # eagerly: accepted
    try:
      jax.jit(lambda: jaxdp.Accountant.create(1.0, secure=True))()
    except ValueError as e:
      assert "while JAX traces" in str(e), e
    else:
      raise SystemExit("Accountant.create(key=None) inside jit was accepted")
    """
  )
  out = subprocess.run(
    [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300
  )
  assert out.returncode == 0, out.stderr[-2000:]
