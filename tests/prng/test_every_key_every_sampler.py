"""Every kind of key through every sampler, and the study command with ChaCha8.

Key kinds: JAX's Threefry, rbg and unsafe_rbg typed keys, jaxdp's ChaCha8 study key,
its ChaCha20 release key (``secure_key``), an OS-entropy key (``os_key``) and a
legacy raw ``uint32`` key (``jax.random.PRNGKey``). Each (kind, sampler) pair draws
from two different keys of the kind and checks the shape and dtype, finiteness, that
every draw lies in the sampler's support, and that the two keys' draws differ.
``montecarlo.estimate`` is included: it runs the draw under ``shard_map``, where a
generator's loop carry must keep its type over the mesh axis.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, PartitionSpec
from scipy import optimize

import jaxdp
from jaxdp import LpBall, Poset, PosetBall, exact, montecarlo
from jaxdp.cli import main
from jaxdp.prng import chacha

N = 16  # draws per call
NHIS1 = Poset.nhis(1)  # a forest, so the forest, sp and general samplers all apply
INT32_MIN = np.iinfo(np.int32).min  # exact samplers' sentinel for a bad traced scale

KEY_KINDS = {
  "threefry": lambda i: jax.random.key(i),
  "rbg": lambda i: jax.random.key(i, impl="rbg"),
  "unsafe_rbg": lambda i: jax.random.key(i, impl="unsafe_rbg"),
  "chacha8": lambda i: jaxdp.random.study_key(i, "chacha8"),
  "chacha20": lambda i: jaxdp.random.secure_key(bytes([i]) + bytes(31)),
  "os_key": lambda i: jaxdp.random.os_key(),
  "legacy_uint32": lambda i: jax.random.PRNGKey(i),
}


def _poset_ball_norm(poset, z):
  """||z||_K for K = conv{+-(1, 1_F) : F a filter}, by linear programming."""
  f = poset.filters().astype(float)
  verts = np.concatenate([np.c_[np.ones(len(f)), f], -np.c_[np.ones(len(f)), f]])
  res = optimize.linprog(
    np.ones(len(verts)), A_eq=verts.T, b_eq=z, bounds=(0, None), method="highs"
  )
  assert res.status == 0, res.message
  return res.fun


def _in_poset_ball(z):
  return all(_poset_ball_norm(NHIS1, row) <= 1 + 1e-5 for row in np.asarray(z, float))


def _lp_norms(p):
  return lambda z: np.linalg.norm(np.asarray(z, np.float64), ord=p, axis=-1)


def _in_lp_ball(p):
  return lambda z: bool(np.all(_lp_norms(p)(z) <= 1 + 1e-6))


def _exact_int(z):  # scale or sigma 10: |noise| >= 10^4 has probability below e^-900
  z = np.asarray(z)
  return bool(np.all(z != INT32_MIN) and np.all(np.abs(z) < 10_000))


def _float_noise(z):  # unit-scale noise: anything this far out is a broken generator
  return bool(np.all(np.abs(np.asarray(z)) < 100))


def _poset_ball(method):
  return lambda k: jaxdp.random.poset_ball(k, NHIS1, (N,), method=method)


def _lp_ball(p):
  return lambda k: jaxdp.random.lp_ball(k, 3, p, (N,))


# name -> (draw(key), expected shape, expected dtype, support check)
SAMPLERS = {
  "poset_ball_forest": (_poset_ball("forest"), (N, 5), jnp.float32, _in_poset_ball),
  "poset_ball_sp": (_poset_ball("sp"), (N, 5), jnp.float32, _in_poset_ball),
  "poset_ball_general": (_poset_ball("general"), (N, 5), jnp.float32, _in_poset_ball),
  "lp_ball_1": (_lp_ball(1), (N, 3), jnp.float32, _in_lp_ball(1)),
  "lp_ball_2": (_lp_ball(2), (N, 3), jnp.float32, _in_lp_ball(2)),
  "lp_ball_inf": (_lp_ball(math.inf), (N, 3), jnp.float32, _in_lp_ball(np.inf)),
  "knorm_poset": (
    lambda k: jaxdp.random.knorm(k, PosetBall(NHIS1), 1.0, (N,)),
    (N, 5),
    jnp.float32,
    _float_noise,
  ),
  "knorm_l2": (
    lambda k: jaxdp.random.knorm(k, LpBall(3, 2), 1.0, (N,)),
    (N, 3),
    jnp.float32,
    _float_noise,
  ),
  "laplace": (lambda k: jaxdp.random.laplace(k, (N,)), (N,), jnp.float32, _float_noise),
  "gaussian": (lambda k: jaxdp.random.gaussian(k, (N,)), (N,), jnp.float32, _float_noise),
  "exact_laplace": (
    lambda k: exact.laplace(k, (N,), scale=10.0),
    (N,),
    jnp.int32,
    _exact_int,
  ),
  "exact_poset_knorm": (
    lambda k: exact.poset_knorm(k, NHIS1, 10.0, (N,)),
    (N, 5),
    jnp.int32,
    _exact_int,
  ),
  "exact_linf_knorm": (
    lambda k: exact.linf_knorm(k, 3, 10.0, (N,)),
    (N, 3),
    jnp.int32,
    _exact_int,
  ),
  "exact_discrete_gaussian": (
    lambda k: exact.discrete_gaussian(k, (N,), sigma=10.0),
    (N,),
    jnp.int32,
    _exact_int,
  ),
}


# The fast tier (-m "not slow") keeps JAX's default key and the secure key; the full
# suite runs every pair.
FAST_KINDS = ("threefry", "chacha20")


def _kinds():
  return [
    k if k in FAST_KINDS else pytest.param(k, marks=pytest.mark.slow) for k in KEY_KINDS
  ]


@pytest.mark.parametrize("sampler", list(SAMPLERS))
@pytest.mark.parametrize("kind", _kinds())
def test_every_key_kind_draws_from_every_sampler(kind, sampler):
  draw, shape, dtype, in_support = SAMPLERS[sampler]
  a, b = (draw(KEY_KINDS[kind](i)) for i in (0, 1))
  for z in (a, b):
    assert z.shape == shape and z.dtype == dtype
    assert np.all(np.isfinite(np.asarray(z)))
    assert in_support(z), f"{sampler} with a {kind} key drew outside its support"
  assert not np.array_equal(np.asarray(a), np.asarray(b)), (
    f"two {kind} keys gave the same {sampler} draws"
  )


def _poset_ball_draw(key, m):
  return jaxdp.random.poset_ball(key, NHIS1, (m,))


def _sq_norm(z):
  return jnp.sum(z * z, axis=-1)


@pytest.mark.parametrize("kind", _kinds())
def test_every_key_kind_runs_the_monte_carlo_engine(kind):
  """Two chunks of four blocks under shard_map (devices= default): E||Z||^2 of the
  NHIS-1 poset ball lies in (0, 5), the ball's coordinates being at most 1."""
  a, b = (
    montecarlo.estimate(
      KEY_KINDS[kind](i), _poset_ball_draw, _sq_norm, 512, chunk_size=256, blocks=4
    )
    for i in (0, 1)
  )
  for est in (a, b):
    assert est.n == 512 and est.mean.shape == ()
    assert np.isfinite(est.mean) and 0 < est.mean < 5
    assert np.isfinite(est.stderr) and est.stderr > 0
  assert a.mean != b.mean, f"two {kind} keys gave the same estimate"


@pytest.mark.parametrize("kind", ["chacha8", "chacha20"])
def test_chacha_under_shard_map_draws_what_it_draws_outside(kind):
  """Keys derived inside ``shard_map`` from a mesh-varying index: ``split``,
  ``fold_in`` and a draw long enough to run the CPU's scalar rounds give the same
  words as outside it."""
  key = KEY_KINDS[kind](0)
  num_words = 16 * chacha.SCALAR_MIN_BLOCKS + 5

  def draw(ids):
    k1, k2 = jax.random.split(jax.random.fold_in(key, ids[0]))
    long = jax.random.bits(k1, (num_words,), jnp.uint32)
    return jnp.concatenate([long[:3], long[-3:], jax.random.bits(k2, (3,), jnp.uint32)])[
      None
    ]

  mesh = Mesh(np.array(jax.local_devices()[:1]), ("blocks",))
  mapped = jax.jit(
    jax.shard_map(
      draw, mesh=mesh, in_specs=PartitionSpec("blocks"), out_specs=PartitionSpec("blocks")
    )
  )
  ids = jnp.array([7])
  outside = jax.jit(draw)  # compiled (eagerly, every operation compiles on its own)
  np.testing.assert_array_equal(np.asarray(mapped(ids)), np.asarray(outside(ids)))


@pytest.mark.slow
def test_nhis_study_runs_with_the_chacha8_generator(tmp_path, capsys):
  """``jaxdp nhis --generator chacha8`` at a tiny size, in this process (the entry
  point ``python -m jaxdp`` is run by tests/cli/test_readme.py): exit 0 and its
  report names the NHIS-1 row."""
  argv = ["nhis", "--generator", "chacha8", "--samples", "1000", "--insertion-samples"]
  argv += ["0", "--sections", "1", "--mechanisms", "", "--no-plot", "--out", str(tmp_path)]
  assert main(argv) == 0, capsys.readouterr().err[-3000:]
  report = (tmp_path / "nhis.md").read_text()
  assert "| nhis1 | 4 |" in report
