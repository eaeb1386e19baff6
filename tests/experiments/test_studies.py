"""Monte Carlo engine, studies and examples (the command line: tests/cli/)."""

import os
import runpy
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import montecarlo
from jaxdp.experiments import studies

ROOT = Path(__file__).resolve().parents[2]


def _run(args, env=None, timeout=300):
  e = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
  return subprocess.run(
    [sys.executable, *args],
    cwd=ROOT,
    env=e,
    capture_output=True,
    text=True,
    timeout=timeout,
  )


# ------------------------------------------------------------------ Monte Carlo
def test_estimate_matches_exact_moment():
  """NHIS-1 ratio from 400_003 draws (a partial last chunk) vs exact 0.40625: |z| < 5.
  The engine's blocks (100_001 draws) exceed the sampler's chunk, so each block runs
  the sampler's chunk loop inside the engine's shard_map."""
  p = jaxdp.Poset.nhis(1)
  est = montecarlo.estimate(
    jax.random.key(0),
    lambda k, m: jaxdp.random.poset_ball(k, p, (m,)),
    lambda z: jnp.sum(z[:, 1:] ** 2, axis=1) / (4 / 3),
    400_003,
    blocks=4,
  )
  assert est.n == 400_003
  assert est.mean.shape == () and abs(est.mean - 0.40625) / est.stderr < 5


def test_estimate_streams_exact_mean_and_variance():
  # Statistic = the draw index, so mean and variance are known exactly.
  draw = lambda k, m: jax.random.uniform(k, (m,))
  est = montecarlo.estimate(
    jax.random.key(1),
    draw,
    lambda u: jnp.stack([u, u * u], 1),
    100_000,
    chunk_size=4096,
    blocks=8,
  )
  assert est.mean.shape == (2,)
  assert abs(est.mean[0] - 0.5) < 5 * est.stderr[0]
  assert est.var[0] == pytest.approx(1 / 12, rel=0.02)


@pytest.mark.slow
@pytest.mark.subprocess
def test_estimate_across_two_processes_equals_one_device_bit_for_bit():
  """Two processes on localhost joined by jax.distributed, 2 CPU devices each: the
  estimate sharded over all 4 devices of both processes equals, bit for bit, the same
  estimate on this test's one device (the engine JAX ships: a global mesh, no process
  pool)."""
  import socket

  with socket.socket() as s:
    s.bind(("localhost", 0))
    port = s.getsockname()[1]
  code = (
    "import sys, jax, jax.numpy as jnp, jaxdp\n"
    "from jaxdp import montecarlo\n"
    f"jax.distributed.initialize('localhost:{port}', num_processes=2, "
    "process_id=int(sys.argv[1]))\n"
    "assert jax.process_count() == 2 and len(jax.devices()) == 4\n"
    "p = jaxdp.Poset.nhis(1)\n"
    "b = montecarlo.estimate(jax.random.key(3), "
    "lambda k, m: jaxdp.random.poset_ball(k, p, (m,)), "
    "lambda z: jnp.sum(z ** 2, 1), 40_000, chunk_size=1 << 13, devices=jax.devices())\n"
    "print((b.mean.tobytes() + b.var.tobytes()).hex())\n"
  )
  env = dict(
    os.environ,
    PYTHONUNBUFFERED="1",  # this process's compiler flags too
    XLA_FLAGS=(
      os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=2"
    ).strip(),
  )
  procs = [
    subprocess.Popen(
      [sys.executable, "-c", code, str(i)],
      cwd=ROOT,
      env=env,
      stdout=subprocess.PIPE,
      stderr=subprocess.PIPE,
      text=True,
    )
    for i in range(2)
  ]
  nhis1 = jaxdp.Poset.nhis(1)
  one = montecarlo.estimate(
    jax.random.key(3),
    lambda k, m: jaxdp.random.poset_ball(k, nhis1, (m,)),
    lambda z: jnp.sum(z**2, 1),
    40_000,
    chunk_size=1 << 13,
    devices=jax.local_devices()[:1],
  )
  outs = [proc.communicate(timeout=300) for proc in procs]
  for proc, (_, err) in zip(procs, outs):
    assert proc.returncode == 0, err[-2000:]
  want = (one.mean.tobytes() + one.var.tobytes()).hex()
  assert [o.split()[-1] for o, _ in outs] == [want, want]


def test_estimate_bad_arguments():
  draw = lambda k, m: jnp.zeros(m)
  with pytest.raises(ValueError, match="num_samples"):
    montecarlo.estimate(jax.random.key(0), draw, lambda x: x, 0)
  with pytest.raises(ValueError, match="multiple of blocks"):
    montecarlo.estimate(jax.random.key(0), draw, lambda x: x, 10, chunk_size=100, blocks=16)
  with pytest.raises(ValueError, match="one row per draw"):
    montecarlo.estimate(jax.random.key(0), draw, lambda x: x[:3], 1000, chunk_size=64)


# ------------------------------------------------------------------ studies
def test_merge_moments_equals_the_moments_of_the_union():
  """merge_moments over random splits equals numpy's mean and M2 of all values
  (float64, relative 1e-12)."""
  rng = np.random.default_rng(0)
  x = rng.normal(3.0, 2.0, size=(1000, 2))
  cuts = np.sort(rng.choice(np.arange(1, 1000), size=7, replace=False))
  acc = montecarlo.Moments(0.0, None, None)
  for part in np.split(x, cuts):
    mu = part.mean(0)
    acc = montecarlo.merge_moments(
      acc, montecarlo.Moments(float(len(part)), mu, ((part - mu) ** 2).sum(0))
    )
  acc = montecarlo.merge_moments(acc, montecarlo.Moments(0.0, np.zeros(2), np.zeros(2)))
  assert acc.n == 1000
  np.testing.assert_allclose(acc.mean, x.mean(0), rtol=1e-12)
  np.testing.assert_allclose(acc.m2, ((x - x.mean(0)) ** 2).sum(0), rtol=1e-12)


@pytest.mark.slow
def test_repeated_studies_reuse_the_compiled_chunk():
  p = jaxdp.Poset.nhis(1)
  studies.norm_ratio(jax.random.key(0), p, 4096)
  before = montecarlo._chunk_fn.cache_info()
  studies.norm_ratio(jax.random.key(1), p, 4096)
  studies.mechanism_mse(jax.random.key(2), p, 1.0, ("linf",), 4096)
  studies.mechanism_mse(jax.random.key(3), p, 1.0, ("linf",), 4096)
  after = montecarlo._chunk_fn.cache_info()
  assert after.hits - before.hits == 2 and after.misses - before.misses == 1


@pytest.mark.slow
def test_poset_study_row_and_insertion_gap():
  # NHIS-1: the exact ratio is 0.40625 = 13/32 (exact enumeration of its objects);
  # the study's estimate (200,000 draws) must be within 5 standard errors. (Its
  # insertion and MSE columns, which the NHIS-3 row checks, are not computed: the
  # ratio's draws come from their own split of the key, so it is the same estimate.)
  one = studies.poset_study(
    jax.random.key(1),
    jaxdp.Poset.nhis(1),
    num_samples=200_000,
    insertion_samples=0,
    noises=(),
  )
  assert abs(one["exact_ratio"] - 0.40625) < 5 * one["exact_ratio_se"]
  row = studies.poset_study(
    jax.random.key(0),
    jaxdp.Poset.nhis(3),
    num_samples=200_000,
    insertion_samples=5_000,
    noises=("poset", "linf"),
  )
  # NHIS-3: the published insertion sampler's ratio is visibly higher (biased).
  assert row["difference_z"] > 5
  assert abs(row["mse_linf"] - row["mse_linf_exact"]) < 5 * row["mse_linf_se"]
  assert row["mse_poset"] < row["mse_linf"]


@pytest.mark.slow
def test_random_studies_small():
  summary, per = studies.random_by_dimension(
    jax.random.key(0), dims=(4, 5), posets_per_dim=3, num_samples=2000, insertion_samples=50
  )
  assert [g["d"] for g in summary] == [4, 5] and len(per) == 6
  # d = 5 and 2000 draws a poset: the sampler compiled for random_by_dimension's d = 5
  by_depth, by_edges, per = studies.random_by_structure(
    jax.random.key(1), 5, num_posets=40, num_samples=2000, min_group=1
  )
  assert sum(g["posets"] for g in by_depth) == 40
  assert all(0 < g["exact_ratio"] <= 1 for g in by_edges)


# ------------------------------------------------------------------ examples
# One example runs as a script in a fresh interpreter (montecarlo_sharded must: it asks
# XLA for host devices before JAX starts); the others run as __main__ in this process
# (runpy), which reuses the kernels it has compiled.
SUBPROCESS_EXAMPLES = ("montecarlo_sharded --n 300000",)


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.parametrize(
  "name",
  [
    pytest.param(n, marks=pytest.mark.subprocess) if n in SUBPROCESS_EXAMPLES else n
    for n in (
      "nhis_counts",
      "nhis_counts --publishable",
      "session",
      "two_hospitals",
      "household",
      "mmm_postprocessing",
      "montecarlo_sharded --n 300000",
      "dp_training --quick",
    )
  ],
)
def test_example_runs(name, monkeypatch, capsys):
  script, *extra = name.split()
  path = ROOT / "examples" / f"{script}.py"
  if name in SUBPROCESS_EXAMPLES:
    r = _run([str(path.relative_to(ROOT)), *extra], timeout=900)  # generous: loaded
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip()
    return
  monkeypatch.chdir(ROOT)
  monkeypatch.setattr(sys, "argv", [str(path), *extra])
  runpy.run_path(str(path), run_name="__main__")
  assert capsys.readouterr().out.strip()
