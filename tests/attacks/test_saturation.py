"""Attack: an exact poset-ball statistic clipped before the noise.

Under jit a traced statistic beyond +-2^30 was clipped coordinate by coordinate. That
is 1-Lipschitz in every l_p norm, not in the poset-ball norm: the neighbours
(2^30, 0) and (2^30 + 1, 1) (a move by (1, F), norm 1) became (2^30, 0) and (2^30, 1)
(a move by (0, 1), norm 2), so with the same key the release moved by (0, 1) and
P(Y = (2^30, 2) | x') / P(Y = (2^30, 2) | x) was about e^2 at eps = 1. The release is
now sat_B(x + k), k the exact noise, B = 2^31 - 1: a function of x + k, hence
postprocessing. With the same key it moves by exactly the statistic's change, or both
neighbours saturate. Each test below fails on the clip-first code.
"""

import functools
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import KNormMechanism, Poset, PosetBall, PosetCountMechanism
from jaxdp.mechanisms.base import noisy
from jaxdp.mechanisms.statistics import SATURATION, WIDE_CLIP, saturating_add

L = 2**30
B = 2**31 - 1
INT32_MIN = -(2**31)
POSETS = {
  "d=1": Poset.from_edges(1, []),
  "chain of 4": Poset.from_edges(4, [(0, 1), (1, 2), (2, 3)]),
}
KEYS = jax.random.split(jax.random.key(20251201), 24)


@functools.cache
def _release(name):
  """jit(eps, keys, stats) -> releases[stat, key, coordinate]: one compilation per
  poset and x64 mode; every statistic gets the same keys, so the same noise."""
  ball = PosetBall(POSETS[name])

  def one(eps, key, x):
    return KNormMechanism(ball, eps, exact=True).randomize(key, x)

  per_key = jax.vmap(one, (None, 0, None))
  return jax.jit(jax.vmap(per_key, (None, None, 0)))


def _expected(stats, noise):
  """sat_B(x + k) with Python integers (exact for any width)."""
  return [
    [[max(-B, min(B, int(x) + int(k))) for x, k in zip(s, row)] for row in noise]
    for s in stats
  ]


def _check_saturating(name, stats, dtype):
  dim = POSETS[name].d + 1
  stats = np.asarray([[0] * dim] + [list(s) for s in stats], dtype)
  out = np.asarray(_release(name)(jnp.float32(1.0), KEYS, jnp.asarray(stats)))
  assert out.dtype == np.int32
  noise = out[0]  # the zero statistic's release is the noise itself
  assert np.any(noise != 0) and np.all(np.abs(noise) < 64)  # scale 1: not vacuous
  assert out.tolist() == _expected(stats, noise)
  assert not np.any(out == INT32_MIN)
  return out[1:]


@pytest.mark.parametrize("name", POSETS)
def test_neighbours_near_2_30_move_the_release_by_their_difference(name):
  """(x, x + (1, F)) at +2^30 and (x, x - (1, F)) at -2^30, F the full filter (and the
  empty one): with the same key the release moves by exactly (1, F). Clipped first,
  the pair at +2^30 moved by (0, F) (twice the norm) and at -2^30 by 0."""
  dim = POSETS[name].d + 1
  up = np.ones(dim, np.int64)
  root = np.eye(dim, dtype=np.int64)[0]
  near = [
    (np.full(dim, L), +up),
    (np.full(dim, L), +root),
    (np.full(dim, -L), -up),
    (root * L, +up),
  ]
  stats = [s for x, step in near for s in (x, x + step)]
  out = _check_saturating(name, stats, np.int32)
  for i, (_, step) in enumerate(near):
    assert (out[2 * i + 1] - out[2 * i] == step).all()


@pytest.mark.parametrize("name", POSETS)
def test_wide_statistics_are_released_saturated_never_clipped_first(name):
  """int64 statistics under x64 far beyond int32 (2^40, int64's extremes) and at the
  saturation bound: the release is sat_B(x + k), never int32's minimum (the
  sentinel). Clipped to 2^30 first, 2^40 came out as 2^30 + k."""
  dim = POSETS[name].d + 1
  ext = [2**40, -(2**40), 2**63 - 1, -(2**63), B - 2, -B + 2, WIDE_CLIP + 1, -WIDE_CLIP]
  stats = [np.full(dim, v, np.int64) for v in ext]
  stats.append(np.array([2**40 if i % 2 else -(2**40) for i in range(dim)]))
  with jax.enable_x64(True):
    out = _check_saturating(name, stats, np.int64)
  assert (out[0] == B).all() and (out[1] == -B).all()


def test_invalid_parameters_give_the_sentinel_not_saturated_noise():
  """A bad traced eps marks every entry invalid (int32's minimum), whatever the
  statistic: the saturating add never turns the sentinel into a value."""
  stats = jnp.asarray([[L + 1, 1], [B, -B]] + [[0, 0]] * 7, jnp.int32)  # one compile
  for eps in (0.0, float("nan"), -1.0):
    out = np.asarray(_release("d=1")(jnp.float32(eps), KEYS, stats))
    assert (out == INT32_MIN).all(), eps


def test_sampler_fill_is_never_added_to_the_statistic():
  """noisy() with the saturating add: an exact sampler's fill (int32's minimum) makes
  that entry invalid and never enters the sum; other entries are sat_B(x + k)."""
  with jax.enable_x64(True):
    stat = jnp.asarray([2**40, -(2**40), 5, 7], jnp.int64)
    noise = jnp.asarray([INT32_MIN, 3, INT32_MIN, -2], jnp.int32)
    ok, out = noisy(True, stat, noise, saturating_add)
  assert np.asarray(ok).tolist() == [False, True, False, True]
  assert np.asarray(out).tolist()[1::2] == [-B, 5]


SAT_VALUES = [0, 1, -1, L, -L, B - L, B, -B, WIDE_CLIP, WIDE_CLIP + 1, -WIDE_CLIP - 1]
NOISES = [-L, -L + 1, -1, 0, 1, L - 1, L]


@pytest.mark.parametrize(
  "dtype,x64",
  [
    (np.int8, False),
    (np.int32, False),
    (np.uint32, False),
    (np.int64, True),
    (np.uint64, True),
  ],
)
def test_saturating_add_is_exact_in_every_integer_width(dtype, x64):
  """Against Python integers: every statistic the dtype holds among the boundary
  values (around 2^30, B and C = B + 2^30, the dtype's extremes) with noise up to
  +-2^30. A clip of the statistic to B or 2^30 instead of C fails here (B + 5 - 1)."""
  info = np.iinfo(dtype)
  values = sorted(
    {
      v
      for v in SAT_VALUES + [info.min, info.max, info.max - 1]
      if info.min <= v <= info.max
    }
  )
  with jax.enable_x64(x64):
    x = np.repeat(np.asarray(values, dtype), len(NOISES))
    k = np.tile(np.asarray(NOISES, np.int32), len(values))
    out = np.asarray(saturating_add(jnp.asarray(x), jnp.asarray(k)))
  want = [max(-SATURATION, min(SATURATION, int(a) + int(b))) for a, b in zip(x, k)]
  assert out.dtype == np.int32 and out.tolist() == want


def test_poset_counts_reach_the_noise_unclipped(monkeypatch):
  """PosetCountMechanism with poset-ball noise: counts beyond 2^30 (x64, more than
  2^30 rows; simulated by shifting the exact counts by 2^30 - 1) reach the noise
  unclipped. Adding the row (1) moves (n, c) by (1, 1); with the same key the release
  moves by (1, 1). The counts were clipped to 2^30 first: it moved by (0, 0)."""
  module = importlib.import_module("jaxdp.mechanisms.poset_count")
  exact_counts = module.exact_counts
  monkeypatch.setattr(
    module, "exact_counts", lambda *a, **k: exact_counts(*a, **k) + (L - 1)
  )
  mech = PosetCountMechanism(POSETS["d=1"], 1.0, exact=True)
  f = jax.jit(jax.vmap(mech.randomize, (0, None)))
  with jax.enable_x64(True):
    rows = np.asarray([[1.0], [0.0], [1.0]])
    a = np.asarray(f(KEYS[:8], jnp.asarray(rows)))
    b = np.asarray(f(KEYS[:8], jnp.asarray(np.vstack([rows, [[1.0]]]))))
    part = np.asarray(mech.part_statistics(rows, np.zeros(3, np.int32), 1))
  assert (b - a == [1, 1]).all()
  assert (a > L - 64).all() and not (a == INT32_MIN).any()
  assert part.tolist() == [[L + 2, L + 1]]  # int64, not clipped to 2^30


def test_concrete_poset_statistic_beyond_2_30_is_refused_without_advising_a_clip():
  """A host statistic beyond 2^30 stays a ValueError naming it; for the poset ball
  the advice is no longer "clip it yourself", which would break the sensitivity."""
  mech = KNormMechanism(PosetBall(POSETS["d=1"]), 1.0, exact=True)
  with pytest.raises(ValueError, match="1073741825") as e:
    mech.randomize(KEYS[0], np.array([L + 1, 0]))
  assert "clip" not in str(e.value).lower()
