"""Attacks on the process-wide caches of host tables through forged argument values.

A cache keyed by ``hash`` and ``==`` (``functools.lru_cache``) files an entry under
every equal key. An int (float, str) subclass worth one value that compares and
hashes as another, reaching a cached function (a ball's ``k`` replaced with
``object.__setattr__`` after its checks, used for one draw), filled the honest
value's entry with tables computed from its real value: every later caller with the
honest ball drew from the wrong law (or never finished drawing). Every such cache
goes through :func:`jaxdp._cache.value_cache`, which passes plain values.
"""

import re
from pathlib import Path

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp._cache import plain, value_cache
from jaxdp.samplers.cube_slice import slice_table
from jaxdp.samplers.slice_kernel import proposal_table
from tests.helpers.forged import claiming

ROOT = Path(__file__).resolve().parents[2]


def test_a_forged_value_is_cached_under_its_own_value():
  @value_cache(maxsize=8)
  def twice(x, scale=1):
    return x * 2 * scale

  assert twice(claiming(1, 5)) == 2
  assert twice(5) == 10  # not the forged entry's 2
  assert twice((claiming(1, 5), 3)) == (1, 3, 1, 3)
  assert twice((5, 3)) == (5, 3, 5, 3)
  assert twice(claiming(3.0, 1.0)) == 6.0
  assert twice(1.0) == 2.0
  assert twice(claiming("b", "a")) == "bb"
  assert twice("a") == "aa"
  assert twice(2, scale=claiming(1, 5)) == 4
  assert twice(2, scale=5) == 20
  assert twice.cache_info().misses == 10


def test_plain_values_are_builtins_of_the_real_value():
  values = [plain(claiming(1, 5)), plain(claiming(3.0, 1.0)), plain(claiming("b", "a"))]
  assert [type(v) for v in values] == [int, float, str]
  assert values == [1, 3.0, "b"]
  nested = plain((claiming(2, 5), (claiming(0.5, 1.0),)))
  assert nested == (2, (0.5,)) and type(nested[0]) is int and type(nested[1][0]) is float
  assert plain(np.float64(0.25)) == 0.25 and type(plain(np.float64(0.25))) is float
  assert plain(None) is None and plain(True) is True


def test_a_forged_count_ball_does_not_poison_the_slice_tables():
  """A CountBall(13, 5) whose k is an int worth 1 claiming to be 5, used for one
  draw, leaves the tables of S(m, 5) (m <= 13) to the honest ball: each equals a
  fresh computation (the count ball's proposals are the cone measure's, ``cone=True``),
  and honest K-norm noise has mean norm d = 13 (its norm is Gamma(13)): 20,000 draws,
  within 5 standard errors."""
  forged = jaxdp.CountBall(13, 5)
  object.__setattr__(forged, "k", claiming(1, 5))
  jax.block_until_ready(jaxdp.random.knorm(jax.random.key(3), forged, 1.0, (64,)))
  for cached, kwargs in (
    (slice_table, {}),
    (proposal_table, {}),
    (proposal_table, {"cone": True}),
  ):
    fresh = cached.__wrapped__(13, 5, **kwargs)
    for got, want in zip(cached(13, 5, **kwargs), fresh):
      np.testing.assert_array_equal(got, want)
  honest = jaxdp.CountBall(13, 5)
  z = jaxdp.random.knorm(jax.random.key(4), honest, 1.0, (20_000,))
  norms = np.asarray(honest.norm(z), np.float64)
  assert abs(norms.mean() - 13) < 5 * np.sqrt(13 / 20_000)


def test_a_forged_eps_does_not_poison_the_analytic_gaussian_sigma():
  """A GaussianMechanism whose eps is a float worth 10 that claims to be 1 (and
  converts to itself) gets its own sigma; the honest (1, 1e-6) mechanism keeps
  its own (4.2247, Balle & Wang's calibration)."""
  forged = jaxdp.GaussianMechanism(1.0, 1.1e-6, calibration="analytic")
  object.__setattr__(forged, "eps", claiming(10.0, 1.0, converts_to_self=True))
  with pytest.warns(DeprecationWarning):  # float() of a float subclass
    assert forged.sigma < 1.0
  honest = jaxdp.GaussianMechanism(1.0, 1.1e-6, calibration="analytic")
  assert honest.sigma > 4.0


def test_module_caches_go_through_value_cache():
  """An allowlist: no module of jaxdp caches by argument with ``functools``
  directly (a zero-argument ``functools.cache(lambda: ...)`` memo keeps no key)."""
  pattern = re.compile(r"lru_cache\(|@functools\.cache\b|^\s*@cache\b", re.M)
  found = [
    str(path.relative_to(ROOT))
    for path in sorted((ROOT / "jaxdp").rglob("*.py"))
    if path.name != "_cache.py" and pattern.search(path.read_text())
  ]
  assert not found, found
