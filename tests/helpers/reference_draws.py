"""Draws that must not change when the code is refactored (same keys, same bits).

``python -m tests.helpers.reference_draws`` writes
``tests/helpers/data/reference_draws.npz`` from the installed jaxdp;
``tests/samplers/test_reference_draws.py`` recomputes every entry and compares it bit
for bit, so a refactoring that changes a single draw fails that test. Regenerate the
file only for a deliberate change of the samplers' output (and say so in
CHANGELOG.md). Only public names are used, so the script runs against any layout of
the package.
"""

import os
import pathlib

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
  ).strip()

import jax
import jax.numpy as jnp
import numpy as np

PATH = pathlib.Path(__file__).parent / "data" / "reference_draws.npz"


def _posets():
  import jaxdp

  return {
    "nhis3": jaxdp.Poset.nhis(3),  # forest
    "random8": jaxdp.Poset.random(jax.random.key(8), 8),  # general
    "sp": jaxdp.Poset.from_edges(6, [(0, 2), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5)]),
  }


def draws() -> dict[str, np.ndarray]:
  """Name -> array, from fixed keys, for a set of samplers and mechanisms."""
  import jaxdp

  out = {}
  key = jax.random.key(20261201)
  chacha = jaxdp.random.secure_key(bytes(range(32)))
  chacha8 = jaxdp.random.study_key(3, "chacha8")
  for name, poset in _posets().items():
    out[f"poset_ball/{name}"] = jaxdp.random.poset_ball(
      jax.random.fold_in(key, 1), poset, shape=(64,)
    )
    out[f"poset_ball_chacha/{name}"] = jaxdp.random.poset_ball(chacha, poset, shape=(16,))
    out[f"knorm/{name}"] = jaxdp.random.knorm(
      jax.random.fold_in(key, 2), jaxdp.PosetBall(poset), eps=0.5, shape=(32,)
    )
    out[f"exact_poset_knorm/{name}"] = jaxdp.exact.poset_knorm(
      jax.random.fold_in(key, 3), poset, scale=3.0, shape=(32,)
    )
  for method in ("forest", "sp", "general"):
    out[f"poset_ball_{method}/nhis2"] = jaxdp.random.poset_ball(
      jax.random.fold_in(key, 14), jaxdp.Poset.nhis(2), shape=(32,), method=method
    )
  from jaxdp.experiments.questionnaire import synthetic_questionnaire

  big = synthetic_questionnaire(0, 40)
  out["poset_ball_auto/big40"] = jaxdp.random.poset_ball(
    jax.random.fold_in(key, 15), big, shape=(16,)
  )
  out["poset_ball_chacha8/nhis3"] = jaxdp.random.poset_ball(
    chacha8, jaxdp.Poset.nhis(3), shape=(16,)
  )
  out["lp_ball/inf"] = jaxdp.random.lp_ball(
    jax.random.fold_in(key, 4), 16, float("inf"), (32,)
  )
  out["lp_ball/1"] = jaxdp.random.lp_ball(jax.random.fold_in(key, 5), 7, 1.0, (32,))
  out["lp_ball/2"] = jaxdp.random.lp_ball(jax.random.fold_in(key, 6), 5, 2.0, (32,))
  out["knorm/linf"] = jaxdp.random.knorm(
    jax.random.fold_in(key, 7), jaxdp.LpBall(9, float("inf")), eps=2.0, shape=(8,)
  )
  out["laplace"] = jaxdp.random.laplace(jax.random.fold_in(key, 8), (50,), scale=2.0)
  out["laplace_chacha"] = jaxdp.random.laplace(chacha, (50,), scale=2.0)
  out["gaussian"] = jaxdp.random.gaussian(jax.random.fold_in(key, 9), (50,), scale=0.5)
  out["exact_laplace"] = jaxdp.exact.laplace(jax.random.fold_in(key, 10), (200,), scale=7.5)
  out["exact_linf"] = jaxdp.exact.linf_knorm(jax.random.fold_in(key, 11), 6, 2.5, (32,))
  out["exact_l2"] = jaxdp.exact.l2_knorm(jax.random.fold_in(key, 16), 5, 2.5, (32,))
  out["exact_discrete_gaussian"] = jaxdp.exact.discrete_gaussian(
    jax.random.fold_in(key, 12), (200,), sigma=3.0
  )
  out["random_dag"] = np.asarray(
    jaxdp.random_dag(jax.random.fold_in(key, 13), 9), dtype=np.int64
  )

  counts = jnp.arange(16, dtype=jnp.int32)
  mechanisms = {
    "laplace": jaxdp.LaplaceMechanism(eps=0.5, sensitivity=2.0),
    "laplace_exact": jaxdp.LaplaceMechanism(eps=0.5, sensitivity=2.0, exact=True),
    "gaussian": jaxdp.GaussianMechanism(eps=0.5, delta=1e-6, sensitivity=1.0),
    "zcdp_gaussian": jaxdp.ZCDPGaussianMechanism(sigma=2.0, sensitivity=1.0),
    "discrete_gaussian": jaxdp.DiscreteGaussianMechanism(eps=0.5, delta=1e-6),
    "knorm_poset": jaxdp.KNormMechanism(eps=0.5, ball=jaxdp.PosetBall(jaxdp.Poset.nhis(3))),
  }
  for i, (name, mech) in enumerate(mechanisms.items()):
    stat = counts if name != "knorm_poset" else counts.astype(jnp.float32)
    if name in ("laplace", "gaussian", "zcdp_gaussian"):
      stat = stat.astype(jnp.float32)
    out[f"mechanism/{name}"] = mech.randomize(jax.random.fold_in(key, 100 + i), stat)

  est = jaxdp.montecarlo.estimate(
    jax.random.fold_in(key, 200),
    lambda k, n: jaxdp.random.poset_ball(k, jaxdp.Poset.nhis(2), shape=(n,)),
    lambda z: jnp.sum(z * z, axis=-1),
    10_000,
    chunk_size=2_500,
    blocks=4,
  )
  out["montecarlo/mean"] = np.asarray(est.mean)
  out["montecarlo/stderr"] = np.asarray(est.stderr)
  return {k: np.asarray(v) for k, v in out.items()}


if __name__ == "__main__":
  PATH.parent.mkdir(exist_ok=True)
  np.savez_compressed(PATH, **draws())
  print(f"wrote {PATH}")
