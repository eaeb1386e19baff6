"""Red team: the publishable (exact, float-safe) release path, every argument but the
scale (tests/attacks/test_red_team_exact_scale.py covers that).

The attacks, as an analyst with the public API and the docs only: a secure accountant
asked for parallel composition that only the caller asserts (the same statistic
passed twice as two objects, charged once and released twice); errors that tell the
caller to pass an option the mechanism does not have, or a cast that rounds; and a
secure accountant given a ChaCha20 key whose bytes the caller chose. Each check
compares with an independent expectation: the budget that two releases of one
statistic cost, the mechanism's own constructor, or numpy's rounding of the
suggested dtype.
"""

import inspect
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import (
  Accountant,
  DiscreteGaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  PosetBall,
  release_parallel_unchecked,
  release_partitioned,
)

POSET = jaxdp.Poset.from_edges(3, [(1, 0)])
STAT = jnp.int32(7)


def _secure(budget=1.0, **kw):
  return Accountant.create(budget, delta_budget=1e-3, secure=True, **kw)


@pytest.mark.parametrize("how", ["eager", "jit"])
def test_a_secure_accountant_refuses_parallel_composition_the_caller_asserts(how):
  """``release_parallel_unchecked`` charges the largest part's cost on the caller's
  word that the parts are disjoint; the same statistic passed as two objects (``x``
  and ``x + 0``) was charged eps = 0.5 once and released twice (the true cost is
  1.0). A secure accountant rests a published release on proved composition only,
  as it does for its rule: refused with a ValueError naming release_partitioned,
  before anything is spent or drawn."""
  acct = _secure()
  mech = LaplaceMechanism(0.5, exact=True)

  def run(a, x):
    return release_parallel_unchecked(a, [(mech, x), (mech, x + 0)])

  call = run if how == "eager" else jax.jit(run)
  with pytest.raises(
    ValueError, match="secure.*release_parallel_unchecked.*release_partitioned"
  ):
    call(acct, STAT)
  assert int(acct.spent_units) == 0 and int(acct.answered) == 0
  # release_partitioned, disjoint by construction, still releases from that accountant
  rows, part = jnp.array([3, 4], jnp.int32), jnp.array([0, 1], jnp.int32)
  acct, out = release_partitioned(acct, mech, rows, part, 2)
  assert out.shape == (2,) and out.dtype == jnp.int32 and bool(acct.last_answered)


def test_parallel_composition_stays_available_to_a_non_secure_accountant():
  acct = Accountant.create(1.0, key=jax.random.key(3))
  mech = LaplaceMechanism(0.5, exact=True)
  acct, outs = release_parallel_unchecked(acct, [(mech, STAT), (mech, STAT + 1)])
  assert len(outs) == 2 and abs(float(acct.spent_eps) - 0.5) <= 2.0**-20


FLOAT_STAT = {
  "DiscreteGaussianMechanism": (
    lambda: DiscreteGaussianMechanism(1.0, 1e-6),
    jnp.ones((3,), jnp.float32),
  ),
  "KNormMechanism": (
    lambda: KNormMechanism(LpBall(3, 2), 1.0, exact=True),
    jnp.ones((3,), jnp.float32),
  ),
  "KNormMechanism-poset": (
    lambda: KNormMechanism(PosetBall(POSET), 1.0, exact=True),
    jnp.ones((4,), jnp.float32),
  ),
}


@pytest.mark.parametrize("name", sorted(FLOAT_STAT))
def test_a_float_statistic_error_suggests_only_options_the_mechanism_has(name):
  """A real-valued statistic given to an exact mechanism without a ``grid`` option
  was told to "pass grid=2.0**-k" (a TypeError if followed). The error names the
  dtype and the one exact mechanism that snaps to a grid; the suggestion is checked
  against the mechanism's constructor, not against the message alone."""
  make, stat = FLOAT_STAT[name]
  mech = make()
  assert "grid" not in inspect.signature(type(mech)).parameters
  with pytest.raises(ValueError) as err:
    mech.randomize(jax.random.key(0), stat)
  text = str(err.value)
  assert "float32" in text and "integer" in text
  assert "LaplaceMechanism(..., exact=True, grid=2.0**-k)" in text
  assert "pass grid" not in text and "give the mechanism grid" not in text


def test_float_rows_of_a_mechanism_without_a_grid_are_told_what_to_use():
  """The per-row form (``release_partitioned``, a Session): the same suggestion."""
  acct = _secure(10.0)
  mech = DiscreteGaussianMechanism(1.0, 1e-6)
  rows, part = jnp.ones((3,), jnp.float32), jnp.zeros((3,), jnp.int32)
  with pytest.raises(ValueError) as err:
    release_partitioned(acct, mech, rows, part, 1)
  text = str(err.value)
  assert "rows" in text and "float32" in text
  assert "LaplaceMechanism(..., exact=True, grid=2.0**-k)" in text
  assert "give the mechanism grid" not in text
  assert int(acct.spent_units) == 0


def test_a_secure_accountant_refuses_a_key_whose_bytes_the_caller_chose():
  """``secure_key(bytes(32))`` (for tests) was accepted, and its releases' noise is
  reproducible by anyone who knows the bytes. A secure accountant, and a secure
  Session, make their own key from the OS (tests/attacks/test_secure_keys.py has
  the other keys), and take a given ChaCha20 key only with ``allow_test_key=True``."""
  known = jaxdp.random.secure_key(bytes(32))
  with pytest.raises(ValueError, match="key=None.*reproduce.*allow_test_key=True"):
    Accountant.create(1.0, secure=True, key=known)
  with pytest.raises(ValueError, match="key=None.*reproduce.*allow_test_key=True"):
    jaxdp.Session(np.arange(4), 1.0, secure=True, key=known)
  assert Accountant.create(1.0, secure=True, key=known, allow_test_key=True).secure


def test_the_cast_a_wide_integer_error_suggests_keeps_every_integer_it_allows():
  """With x64, a traced int64 statistic for a grid release is refused (float64 rounds
  past 2^53) and the error said to clip to +-2^53 and cast to float32, which rounds
  2^24 + 1 to 2^24 and 2^24 + 2 to itself: neighbours 1 apart then differ by 2 (the
  sensitivity silently doubled). The suggested dtype must hold every integer of the
  suggested clip exactly (checked in numpy, independently of jaxdp)."""
  mech = LaplaceMechanism(1.0, exact=True, grid=2.0**-10)
  with jax.enable_x64(True):
    with pytest.raises(ValueError) as err:
      jax.jit(mech.randomize)(jax.random.key(0), jnp.int64(5))
  match = re.search(
    r"jnp\.clip\(data, -(\d+), (\d+)\)\.astype\(jnp\.(\w+)\)", str(err.value)
  )
  assert match, str(err.value)
  limit, dtype = int(match.group(2)), np.dtype(match.group(3))
  assert int(dtype.type(limit - 1)) == limit - 1  # the cast keeps the clip's integers
