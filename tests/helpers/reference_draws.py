"""Draws that must not change when the code is refactored (same keys, same bits).

``python -m tests.helpers.reference_draws`` writes the two reference files from the
installed jaxdp, each in a subprocess at XLA's optimisation level 0:
``tests/helpers/data/reference_draws.npz`` with XLA:CPU's default emitters and
``reference_draws_elemental.npz`` with its older elemental emitters (``ELEMENTAL``, the
flag the test suite compiles with where XLA has it). Floats can differ between the two
in the last bits (a few entries do); integers cannot.
``tests/samplers/test_reference_draws.py`` recomputes every entry in the test process
and compares it with the file of the test process's flags (:func:`path_for`):
integers bit for bit, floats to a tolerance far below a draw's size (XLA:CPU's code
differs between processors in floats' last bits), so a refactoring that changes a
single draw fails that test.
Regenerate the files only for a deliberate change of the samplers' output (and say so
in CHANGELOG.md). Only public names are used, so the script runs against any layout
of the package. The entries come in groups (``GROUPS``, each computed on its own;
``ENTRIES`` names what each writes), and the test reports each group on its own.
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
ELEMENTAL_PATH = PATH.with_name("reference_draws_elemental.npz")
# XLA:CPU's older emitters (tests/conftest.py adds it where XLA accepts it).
ELEMENTAL = "--xla_cpu_use_fusion_emitters=false"


def path_for(xla_flags: str) -> pathlib.Path:
  """The reference file written with the emitters that ``xla_flags`` selects."""
  return ELEMENTAL_PATH if ELEMENTAL in xla_flags.split() else PATH


POSETS = ("nhis3", "random8", "sp")
MECHANISMS = (
  "laplace",
  "laplace_exact",
  "gaussian",
  "zcdp_gaussian",
  "discrete_gaussian",
  "knorm_poset",
)


def _key():
  return jax.random.key(20261201)


def _chacha():
  import jaxdp

  return jaxdp.random.secure_key(bytes(range(32)))


def _poset(name):
  import jaxdp

  if name == "nhis3":
    return jaxdp.Poset.nhis(3)  # forest
  if name == "random8":
    return jaxdp.Poset.random(jax.random.key(8), 8)  # general
  return jaxdp.Poset.from_edges(6, [(0, 2), (1, 2), (2, 3), (2, 4), (3, 5), (4, 5)])


KINDS = ("poset_ball", "poset_ball_chacha", "knorm", "exact_poset_knorm")


def _poset_entry(kind, name):
  import jaxdp

  key, poset = _key(), _poset(name)
  if kind == "poset_ball":
    z = jaxdp.random.poset_ball(jax.random.fold_in(key, 1), poset, shape=(64,))
  elif kind == "poset_ball_chacha":
    z = jaxdp.random.poset_ball(_chacha(), poset, shape=(16,))
  elif kind == "knorm":
    z = jaxdp.random.knorm(
      jax.random.fold_in(key, 2), jaxdp.PosetBall(poset), eps=0.5, shape=(32,)
    )
  else:
    z = jaxdp.exact.poset_knorm(jax.random.fold_in(key, 3), poset, scale=3.0, shape=(32,))
  return {f"{kind}/{name}": z}


def _methods():
  import jaxdp

  return {
    f"poset_ball_{method}/nhis2": jaxdp.random.poset_ball(
      jax.random.fold_in(_key(), 14), jaxdp.Poset.nhis(2), shape=(32,), method=method
    )
    for method in ("forest", "sp", "general")
  }


def _big_and_chacha8():
  import jaxdp
  from jaxdp.experiments.questionnaire import synthetic_questionnaire

  big = synthetic_questionnaire(0, 40)
  return {
    "poset_ball_auto/big40": jaxdp.random.poset_ball(
      jax.random.fold_in(_key(), 15), big, shape=(16,)
    ),
    "poset_ball_chacha8/nhis3": jaxdp.random.poset_ball(
      jaxdp.random.study_key(3, "chacha8"), jaxdp.Poset.nhis(3), shape=(16,)
    ),
  }


def _float_samplers():
  import jaxdp

  key, chacha = _key(), _chacha()
  return {
    "lp_ball/inf": jaxdp.random.lp_ball(
      jax.random.fold_in(key, 4), 16, float("inf"), (32,)
    ),
    "lp_ball/1": jaxdp.random.lp_ball(jax.random.fold_in(key, 5), 7, 1.0, (32,)),
    "lp_ball/2": jaxdp.random.lp_ball(jax.random.fold_in(key, 6), 5, 2.0, (32,)),
    "knorm/linf": jaxdp.random.knorm(
      jax.random.fold_in(key, 7), jaxdp.LpBall(9, float("inf")), eps=2.0, shape=(8,)
    ),
    "laplace": jaxdp.random.laplace(jax.random.fold_in(key, 8), (50,), scale=2.0),
    "laplace_chacha": jaxdp.random.laplace(chacha, (50,), scale=2.0),
    "gaussian": jaxdp.random.gaussian(jax.random.fold_in(key, 9), (50,), scale=0.5),
    "random_dag": np.asarray(
      jaxdp.random_dag(jax.random.fold_in(key, 13), 9), dtype=np.int64
    ),
  }


def _exact_samplers():
  import jaxdp

  key = _key()
  return {
    "exact_laplace": jaxdp.exact.laplace(jax.random.fold_in(key, 10), (200,), scale=7.5),
    "exact_linf": jaxdp.exact.linf_knorm(jax.random.fold_in(key, 11), 6, 2.5, (32,)),
    "exact_l2": jaxdp.exact.l2_knorm(jax.random.fold_in(key, 16), 5, 2.5, (32,)),
    "exact_discrete_gaussian": jaxdp.exact.discrete_gaussian(
      jax.random.fold_in(key, 12), (200,), sigma=3.0
    ),
  }


def _mechanism(name):
  import jaxdp

  mech = {
    "laplace": lambda: jaxdp.LaplaceMechanism(eps=0.5, sensitivity=2.0),
    "laplace_exact": lambda: jaxdp.LaplaceMechanism(eps=0.5, sensitivity=2.0, exact=True),
    "gaussian": lambda: jaxdp.GaussianMechanism(eps=0.5, delta=1e-6, sensitivity=1.0),
    "zcdp_gaussian": lambda: jaxdp.ZCDPGaussianMechanism(sigma=2.0, sensitivity=1.0),
    "discrete_gaussian": lambda: jaxdp.DiscreteGaussianMechanism(eps=0.5, delta=1e-6),
    "knorm_poset": lambda: jaxdp.KNormMechanism(
      eps=0.5, ball=jaxdp.PosetBall(jaxdp.Poset.nhis(3))
    ),
  }[name]()
  stat = jnp.arange(16, dtype=jnp.int32)
  if name in ("laplace", "gaussian", "zcdp_gaussian", "knorm_poset"):
    stat = stat.astype(jnp.float32)
  i = MECHANISMS.index(name)
  return {f"mechanism/{name}": mech.randomize(jax.random.fold_in(_key(), 100 + i), stat)}


def _montecarlo():
  import jaxdp

  est = jaxdp.montecarlo.estimate(
    jax.random.fold_in(_key(), 200),
    lambda k, n: jaxdp.random.poset_ball(k, jaxdp.Poset.nhis(2), shape=(n,)),
    lambda z: jnp.sum(z * z, axis=-1),
    10_000,
    chunk_size=2_500,
    blocks=4,
  )
  return {"montecarlo/mean": est.mean, "montecarlo/stderr": est.stderr}


GROUPS = {
  **{
    f"{kind}/{name}": (lambda kind=kind, name=name: _poset_entry(kind, name))
    for name in POSETS
    for kind in KINDS
  },
  "methods": _methods,
  "big_and_chacha8": _big_and_chacha8,
  "float_samplers": _float_samplers,
  "exact_samplers": _exact_samplers,
  **{f"mechanism/{name}": (lambda name=name: _mechanism(name)) for name in MECHANISMS},
  "montecarlo": _montecarlo,
}
# The entries each group writes (checked against the stored file without drawing).
ENTRIES = {
  **{f"{kind}/{p}": (f"{kind}/{p}",) for p in POSETS for kind in KINDS},
  "methods": tuple(f"poset_ball_{m}/nhis2" for m in ("forest", "sp", "general")),
  "big_and_chacha8": ("poset_ball_auto/big40", "poset_ball_chacha8/nhis3"),
  "float_samplers": (
    "lp_ball/inf",
    "lp_ball/1",
    "lp_ball/2",
    "knorm/linf",
    "laplace",
    "laplace_chacha",
    "gaussian",
    "random_dag",
  ),
  "exact_samplers": ("exact_laplace", "exact_linf", "exact_l2", "exact_discrete_gaussian"),
  **{f"mechanism/{m}": (f"mechanism/{m}",) for m in MECHANISMS},
  "montecarlo": ("montecarlo/mean", "montecarlo/stderr"),
}


def group(name: str) -> dict[str, np.ndarray]:
  """Entry name -> array of one group of ``GROUPS``, from fixed keys."""
  return {k: np.asarray(v) for k, v in GROUPS[name]().items()}


def draws() -> dict[str, np.ndarray]:
  """Name -> array, from fixed keys, for a set of samplers and mechanisms."""
  out = {}
  for name in GROUPS:
    out.update(group(name))
  return out


def _write_both():
  """Writes both reference files, each from a subprocess with its emitters."""
  import subprocess
  import sys

  flags = [f for f in os.environ["XLA_FLAGS"].split() if f != ELEMENTAL]
  for path, extra in ((PATH, []), (ELEMENTAL_PATH, [ELEMENTAL])):
    env = dict(os.environ, XLA_FLAGS=" ".join(flags + extra))
    cmd = [sys.executable, "-m", "tests.helpers.reference_draws", "--out", str(path)]
    subprocess.run(cmd, env=env, check=True)


if __name__ == "__main__":
  import argparse

  ap = argparse.ArgumentParser(description="Writes the reference draws.")
  ap.add_argument(
    "--out",
    help="the .npz file to write with this process's XLA_FLAGS (default: both"
    " reference files, each with its emitters)",
  )
  out = ap.parse_args().out
  if out is None:
    _write_both()
  else:
    pathlib.Path(out).parent.mkdir(exist_ok=True)
    np.savez_compressed(out, **draws())
    print(f"wrote {out}")
