"""Red team: the exact samplers' scale as a kernel argument.

Every exact sampler passes its scale (static or traced) to one compiled kernel as a
float64 argument. The attacks: a kernel reused with a stale scale (same shapes,
another eps; static, jit, vmap, scan; Python int, numpy float32, a concrete JAX
array), a bad scale reaching the kernel without the sentinel, a vmapped batch whose
lanes do not each get their own scale (or where a bad lane changes a good one), a
batch of releases sharing one key, and a non-scalar traced scale that the vote-ball
sampler did not check. Each check compares against an independent expectation: the
draw at the right scale from the same key, or a fixed-key bound on the noise size.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import (
  Accountant,
  FillOnRefusal,
  KNormMechanism,
  LaplaceMechanism,
  Poset,
  StaleAccountantError,
  VoteBall,
  exact,
  release,
)
from jaxdp.exact import max_scale

N = 512  # one sample count for every draw (one compilation per kernel)
KEY = jax.random.key(7)
SENTINEL = np.iinfo(np.int32).min
DATA = jnp.full((N,), 5, jnp.int32)
FILL = FillOnRefusal()


def mean_abs(x):
  return float(np.abs(np.asarray(x, np.float64)).mean())


def test_static_scales_same_shape_are_not_stale():
  """The same shape and key at scale 1, 1000, 1: the second call reuses the first
  one's compilation and must draw at 1000 (E|round(L)| ~ scale; fixed key)."""
  small = exact.laplace(KEY, (N,), scale=1.0)
  big = exact.laplace(KEY, (N,), scale=1000.0)
  again = exact.laplace(KEY, (N,), scale=1.0)
  assert 0.6 < mean_abs(small) < 1.4
  assert 850 < mean_abs(big) < 1150
  np.testing.assert_array_equal(small, again)


@pytest.mark.parametrize(
  "value",
  [1000.0, 3, np.float32(0.1), np.float64(250.5), jnp.float32(17.0)],
  ids=["float", "int", "np-f32", "np-f64", "jax-concrete"],
)
def test_traced_scale_draws_the_static_draw(value):
  """A traced scale of any type draws what the static float64 value draws from the
  same key (a kernel keyed on a stale or rounded scale would differ)."""
  want = exact.laplace(KEY, (N,), scale=float(value))
  got = jax.jit(lambda s: exact.laplace(KEY, (N,), scale=s))(value)
  np.testing.assert_array_equal(got, want)
  conc = exact.laplace(KEY, (N,), scale=value)  # the concrete (static) path
  np.testing.assert_array_equal(conc, want)


F32_ABOVE = float(np.nextafter(np.float32(2.0**20), np.float32(3e6)))  # max_scale(0) = 2^20
BAD = [np.nan, 0.0, -1.0, np.inf, -np.inf, 1e-45, F32_ABOVE, 1e30]


def test_bad_traced_scales_are_the_sentinel_and_spare_good_lanes():
  """vmap over good and bad scales: each good lane is its own static draw, every
  bad lane (NaN, 0, negative, inf, subnormal, above max_scale) the sentinel."""
  good = [1.0, 2.0**20, 300.0]
  scales = jnp.asarray(good + BAD, jnp.float32)
  out = np.asarray(jax.vmap(lambda s: exact.laplace(KEY, (N,), scale=s))(scales))
  for i, s in enumerate(good):
    np.testing.assert_array_equal(out[i], exact.laplace(KEY, (N,), scale=s))
  assert (out[len(good) :] == SENTINEL).all()
  with jax.enable_x64(True):  # float64 traced: subnormal and one ulp above the limit
    f = jax.jit(lambda s: exact.laplace(KEY, (N,), scale=s))
    for s in (5e-324, np.nextafter(max_scale(0), np.inf)):
      assert (np.asarray(f(jnp.float64(s))) == SENTINEL).all()


def test_scan_over_scales_reads_each_step():
  def step(c, s):
    return c, exact.laplace(KEY, (N,), scale=s)

  _, out = jax.lax.scan(step, 0, jnp.asarray([1.0, 1000.0, np.nan], jnp.float32))
  np.testing.assert_array_equal(out[0], exact.laplace(KEY, (N,), scale=1.0))
  np.testing.assert_array_equal(out[1], exact.laplace(KEY, (N,), scale=1000.0))
  assert (np.asarray(out[2]) == SENTINEL).all()


SAMPLERS = {
  "linf": lambda k, s: exact.linf_knorm(k, 3, s, (N,)),
  "l2": lambda k, s: exact.l2_knorm(k, 3, s, (N,)),
  "sum": lambda k, s: exact.sum_knorm(k, 3, 1, s, (N,)),
  "count": lambda k, s: exact.count_knorm(k, 3, 1, s, (N,)),
  "vote": lambda k, s: exact.vote_knorm(k, 3, s, (N,)),
  # the forest path: one 32-bit word per exponential, the host refinement runs most
  "poset": lambda k, s: exact.poset_knorm(k, Poset.nhis(1), s, (N,), path="ranks"),
}


@pytest.mark.parametrize("name", sorted(SAMPLERS))
def test_knorm_lanes_get_their_own_scale(name):
  """Per-lane scales of every K-norm sampler: lane i is the static draw at scale i
  (the same key), the NaN lane the sentinel; the large scale's noise is large."""
  draw = SAMPLERS[name]
  scales = [0.5, 200.0]
  out = np.asarray(
    jax.vmap(lambda s: draw(KEY, s))(jnp.asarray(scales + [np.nan], jnp.float32))
  )
  for i, s in enumerate(scales):
    np.testing.assert_array_equal(out[i], draw(KEY, s))
  assert mean_abs(out[1]) > 50 * max(mean_abs(out[0]), 1.0)
  assert (out[2] == SENTINEL).all()


def test_vote_knorm_refuses_a_non_scalar_traced_scale():
  """A traced scale vector broadcast against the samples would give each sample (or
  coordinate) its own scale, some near 0: it must be refused like the other
  samplers refuse it (linf_knorm: 'scale must be a scalar')."""
  f = jax.jit(lambda s: exact.vote_knorm(KEY, 2, s, (2,)))
  with pytest.raises(ValueError, match="scale must be a scalar"):
    f(jnp.asarray([1000.0, 0.001], jnp.float32))


def test_vote_knorm_refuses_a_complex_traced_scale():
  f = jax.jit(lambda s: exact.vote_knorm(KEY, 2, s, (2,)))
  with pytest.raises(TypeError, match="scale"):
    f(jnp.complex64(1000.0 + 5j))


def accountant(i):
  return Accountant.create(1e6, key=jax.random.key(i), on_refusal=FILL)


def laplace_release(acct, eps):
  return release(acct, LaplaceMechanism(eps, exact=True), DATA)


def test_jitted_release_at_a_new_eps_is_not_stale():
  """One jitted release at eps 1 then 0.001 (the same compilation): noise ~1, then
  ~1000 (a stale scale would give ~1 at a charge of 0.001)."""
  f = jax.jit(laplace_release)
  _, small = f(accountant(0), jnp.float32(1.0))
  _, big = f(accountant(1), jnp.float32(0.001))
  assert 0.6 < mean_abs(np.asarray(small) - 5) < 1.4
  assert 850 < mean_abs(np.asarray(big) - 5) < 1150


def test_vmapped_releases_each_lane_its_eps_and_bad_lanes_fill():
  eps = jnp.asarray([1.0, 0.001, np.nan, -1.0, 0.0, np.inf, 1e-30], jnp.float32)
  accts = jax.tree.map(lambda *x: jnp.stack(x), *[accountant(i) for i in range(7)])
  new, out = jax.vmap(laplace_release)(accts, eps)
  out = np.asarray(out)
  single = jax.jit(laplace_release)
  for i in range(2):  # each good lane: its own release alone (same key, same eps)
    np.testing.assert_array_equal(out[i], single(accountant(i), eps[i])[1])
  assert (out[2:] == SENTINEL).all()  # the fill, never stat + sentinel
  np.testing.assert_array_equal(np.asarray(new.refusals), [0, 0, 1, 1, 1, 1, 1])
  assert (np.asarray(new.spent_eps)[2:] == 0).all()
  assert (np.asarray(new.spent_eps)[:2] >= np.asarray(eps[:2])).all()


def test_vmapped_releases_sharing_one_key_are_refused():
  acct = accountant(0)
  with pytest.raises(StaleAccountantError):
    jax.vmap(lambda e: laplace_release(acct, e)[1])(jnp.asarray([1.0, 0.001]))


def test_vote_release_with_vector_eps_is_refused():
  mech = lambda e: KNormMechanism(VoteBall(2), e, exact=True)
  f = jax.jit(lambda a, e: release(a, mech(e), jnp.zeros((2,), jnp.int32)))
  with pytest.raises(ValueError, match="eps must be a scalar"):
    f(accountant(0), jnp.asarray([1.0, 1000.0]))


class Drifting:
  """A number whose value changes on every read (1.0, then 1000.0, ...)."""

  def __init__(self):
    self.reads = 0

  def __float__(self):
    self.reads += 1
    return 1.0 if self.reads == 1 else 1000.0


def test_a_scale_that_changes_between_reads_is_refused():
  with pytest.raises(TypeError, match="scale"):
    exact.laplace(KEY, (N,), scale=Drifting())
  with pytest.raises(TypeError, match="scale"):
    exact.vote_knorm(KEY, 3, Drifting(), (N,))


# VoteBall(4)'s scale limit is max_scale(4) / 3 = 349525.333..., not a float32: this
# traced float32 eps gives the float32 scale 349525.34375, above the limit in float64
# (the kernel's test) but not above the limit rounded to float32 (the release's range
# test).
EDGE_EPS = np.float32(2.8610257e-06)


def test_a_scale_just_above_the_limit_is_refused_not_charged_as_an_answer():
  """A release whose kernel returns the sentinel must be a refusal (nothing spent,
  last_answered False), never a charged, answered release of -2^31 everywhere."""
  mech = lambda e: KNormMechanism(VoteBall(4), e, exact=True)
  f = jax.jit(lambda a, e: release(a, mech(e), jnp.zeros((4,), jnp.int32)))
  acct, out = f(accountant(0), jnp.float32(EDGE_EPS))
  assert not bool(acct.last_answered) and int(acct.refusals) == 1
  assert float(acct.spent_eps) == 0.0
  assert (np.asarray(out) == SENTINEL).all()  # the fill of a refused release
