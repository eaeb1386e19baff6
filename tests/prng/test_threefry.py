"""The unrolled Threefry implementation: Random123's known answers, and the same
stream as JAX's own Threefry (bits, split, fold_in), so jaxdp's samplers draw the
same values with the swap on or off.

References: Random123 1.09 ``kat_vectors`` (threefry2x32_20 lines), the vectors
JAX's own tests use; ``jax.random`` with Threefry keys as the second implementation.
"""

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import samplers as exact_samplers
from jaxdp.prng import threefry

KAT = [  # (key, counter, output) for threefry2x32 with 20 rounds
  ((0x00000000, 0x00000000), (0x00000000, 0x00000000), (0x6B200159, 0x99BA4EFE)),
  ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
  ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
]


@pytest.mark.parametrize("key,counter,expected", KAT)
def test_random123_known_answers(key, counter, expected):
  u = lambda v: jnp.asarray(v, jnp.uint32)
  out = threefry.hash2x32(u(key[0]), u(key[1]), u(counter[0]), u(counter[1]))
  assert tuple(int(w) for w in out) == expected


def _unrolled(key):
  return jax.random.wrap_key_data(jax.random.key_data(key), impl=threefry.THREEFRY_UNROLLED)


@pytest.fixture(params=["unrolled", "default"])
def small_count(request, monkeypatch):
  """Both ways a small draw can go: through the unrolled hash (``SMALL_COUNT`` 0, so
  that the tests compare it with JAX's code at every size), and as shipped (below
  ``SMALL_COUNT`` elements, JAX's ``threefry2x32`` primitive)."""
  if request.param == "unrolled":
    monkeypatch.setattr(threefry, "SMALL_COUNT", 0)


@pytest.mark.parametrize(
  "shape", [(), (1,), (7,), (3, 5), (2, 3, 4), (1023,), (1024,), (40_001,)]
)
@pytest.mark.usefixtures("small_count")
def test_bits_and_split_are_jax_threefry(shape):
  k = jax.random.key(20261130)
  u = _unrolled(k)
  for dtype in (jnp.uint8, jnp.uint16, jnp.uint32):
    np.testing.assert_array_equal(
      jax.random.bits(u, shape, dtype), jax.random.bits(k, shape, dtype)
    )
  np.testing.assert_array_equal(
    jax.random.key_data(jax.random.split(u, shape)),
    jax.random.key_data(jax.random.split(k, shape)),
  )


@pytest.mark.slow
@pytest.mark.usefixtures("small_count")
def test_64_bit_draws_fold_in_vmap_and_distributions_are_jax_threefry():
  k = jax.random.key(7)
  u = _unrolled(k)
  with jax.enable_x64(True):
    np.testing.assert_array_equal(
      jax.random.bits(u, (5, 3), jnp.uint64), jax.random.bits(k, (5, 3), jnp.uint64)
    )
  for x in (0, 1, 2**31 + 5, 2**32 - 1):
    np.testing.assert_array_equal(
      jax.random.key_data(jax.random.fold_in(u, x)),
      jax.random.key_data(jax.random.fold_in(k, x)),
    )
  draw = jax.vmap(
    lambda kk: (jax.random.normal(kk, (9,)), jax.random.exponential(kk, (4,)))
  )
  for a, b in zip(draw(jax.random.split(u, 6)), draw(jax.random.split(k, 6))):
    np.testing.assert_array_equal(a, b)


def test_fast_key_swaps_only_threefry_keys():
  if jax.default_backend() != "cpu":
    pytest.skip("the swap is for the CPU backend")
  k = jax.random.key(3)
  assert jax.random.key_impl(threefry.fast_key(k)) == threefry.THREEFRY_UNROLLED
  legacy = threefry.fast_key(jax.random.PRNGKey(3))
  np.testing.assert_array_equal(jax.random.key_data(legacy), jax.random.key_data(k))
  for other in (
    jax.random.key(3, impl="rbg"),
    dprandom.study_key(3, "chacha8"),
    dprandom.secure_key(bytes(32)),
  ):
    assert threefry.fast_key(other) is other
  with jax.threefry_partitionable(False):  # another stream: JAX's own code draws it
    assert threefry.fast_key(k) is k


def test_huge_draws_are_left_to_jax():
  """2**32 elements need 64-bit counters: traced, not drawn (no memory spent)."""
  out = jax.eval_shape(
    lambda kk: jax.random.bits(kk, (2**16, 2**16), jnp.uint32), _unrolled(jax.random.key(0))
  )
  assert out.shape == (2**16, 2**16)


@pytest.mark.slow
def test_samplers_draw_the_same_values_with_the_swap(monkeypatch):
  """Every sampler family, once through the unrolled implementation (the default)
  and once through JAX's own Threefry: equal bit for bit. (The poset ball on NHIS's
  first section: the forest kernel's key handling is the same at every d up to 32,
  and a small forest compiles in a third of the time of three sections.)"""
  key = jax.random.key(11)
  nhis = jaxdp.Poset.nhis(1)
  draws = {
    "poset ball": lambda: dprandom.poset_ball(key, nhis, (300,)),
    "knorm l_inf": lambda: dprandom.knorm(key, jaxdp.LpBall(16, jnp.inf), 1.0, (300,)),
    "laplace": lambda: dprandom.laplace(key, (300,)),
    "exact laplace": lambda: exact.laplace(key, (300,), scale=2.0),
  }
  fast = {name: np.asarray(f()) for name, f in draws.items()}
  monkeypatch.setattr(dprandom, "fast_key", lambda k: k)
  monkeypatch.setattr(exact_samplers, "fast_key", lambda k: k)
  for name, f in draws.items():
    np.testing.assert_array_equal(fast[name], np.asarray(f()), err_msg=name)


def _loop_sizes(text):
  """The element counts of the arrays every ``while`` loop of a lowered program
  carries (JAX's rolled Threefry rounds on the CPU are such a loop)."""
  sizes = []
  for line in text.splitlines():
    if "stablehlo.while" in line:
      dims = re.findall(r"tensor<((?:\d+x)+)", line.split(" : ", 1)[-1])
      sizes += [math.prod(int(n) for n in d.rstrip("x").split("x")) for d in dims]
  return sizes


def test_samplers_do_not_draw_large_arrays_with_jax_rolled_threefry():
  """On the CPU the samplers must draw with the unrolled hash: JAX's own lowering
  there is a ``while`` loop over the rounds, which is what made Threefry draws slower
  than numpy's. Only hashes of fewer than ``SMALL_COUNT`` elements (splits, fold_in,
  a few words) take JAX's primitive, which compiles to less."""
  if jax.default_backend() != "cpu":
    pytest.skip("the swap is for the CPU backend")
  key = jax.random.key(0)
  sizes = lambda f: _loop_sizes(jax.jit(f).lower(key).as_text())
  assert max(sizes(lambda k: jax.random.laplace(k, (4096,)))) == 4096  # the check sees it
  for draw in (
    lambda k: dprandom.laplace(k, (4096,)),
    lambda k: dprandom.gaussian(k, (4096,)),
    lambda k: dprandom.lp_ball(k, 4, jnp.inf, (4096,)),
  ):
    assert all(size < threefry.SMALL_COUNT for size in sizes(draw))


def test_words64_are_jax_64_bit_draws_or_two_32_bit_draws():
  """``words64`` (the sp kernel's 52-bit variates): for Threefry keys (JAX's impl,
  the unrolled one, a legacy uint32 key) the halves of ``jax.random.bits(key, shape,
  uint64)`` under x64 (one hash per element), also under jit; for other generators
  two 32-bit draws ``jax.random.bits(key, (2, *shape), uint32)``."""
  shape = (3, 7)
  with jax.enable_x64(True):
    for k in (jax.random.key(9), _unrolled(jax.random.key(9)), jax.random.PRNGKey(9)):
      ref = np.asarray(jax.random.bits(k, shape, jnp.uint64))
      for hi, lo in (
        threefry.words64(k, shape),
        jax.jit(lambda k: threefry.words64(k, shape))(k),
      ):
        both = (np.asarray(hi).astype(np.uint64) << np.uint64(32)) | np.asarray(lo)
        np.testing.assert_array_equal(both, ref)
  for k in (jax.random.key(9, impl="rbg"), dprandom.study_key(9, generator="chacha8")):
    hi, lo = jax.jit(lambda k: threefry.words64(k, shape))(k)
    ref = jax.random.bits(k, (2, *shape), jnp.uint32)
    np.testing.assert_array_equal(np.stack([hi, lo]), ref)
