"""The consistency study: its data shapes are real counts, its eps scaling is exact
in distribution (same key, proportional noise), and the command wires it up."""

import functools
import json

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp.cli import main
from jaxdp.cli import studies as cli_studies
from jaxdp.experiments import consistency

NHIS1 = jaxdp.Poset.nhis(1)


@pytest.mark.parametrize("shape", consistency.SHAPES)
def test_true_counts_are_consistent_counts(shape):
  x = consistency.true_counts(NHIS1, shape)
  np.testing.assert_array_equal(np.asarray(jaxdp.consistent(x, NHIS1)), x)
  assert x[0] == (50 if shape == "small" else 10_000)
  if shape == "rare":  # q3 and q4 have nothing below them: near 0
    assert x[3] <= 30 and x[4] <= 30 and x[1] > 1000


@pytest.mark.parametrize("noise", ["linf", "laplace", "gaussian"])  # poset: K-norm too
def test_noise_at_eps_is_the_unit_noise_scaled(noise):
  key = jax.random.key(11)
  zero = np.zeros((4, NHIS1.d + 1), np.float32)
  unit = consistency.noise_mechanism(NHIS1, 1.0, noise).randomize(key, zero)
  at = consistency.noise_mechanism(NHIS1, 0.5, noise).randomize(key, zero)
  scale = consistency.noise_scale(NHIS1, 0.5, noise)
  np.testing.assert_allclose(np.asarray(at), scale * np.asarray(unit), rtol=1e-5, atol=1e-4)
  assert scale == pytest.approx(2.0) if noise != "gaussian" else 1.0 < scale < 2.5


def test_study_and_command(tmp_path, monkeypatch):
  small = functools.partial(
    consistency.consistency_study, noises=("laplace",), shapes=("small",), chunk=64
  )
  monkeypatch.setattr(cli_studies.consistency, "consistency_study", small)
  args = ["nhis", "--sections", "1", "--consistency", "--releases", "128"]
  args += ["--eps-grid", "0.5,2", "--out", str(tmp_path), "--no-plot"]
  assert main(args) == 0
  rows = json.loads((tmp_path / "consistency.json").read_text())["results"]
  assert [(r["eps"], r["noise"], r["shape"], r["samples"]) for r in rows] == [
    (0.5, "laplace", "small", 128),
    (2.0, "laplace", "small", 128),
  ]
  for r in rows:  # the projection never moves a draw away from the truth
    assert r["mse_change"] <= 0 and r["mse_consistent"] <= r["mse_raw"]
    assert r["certified"] == 1.0 and len(r["bias_consistent"]) == NHIS1.d + 1
  assert "| nhis1 | small | laplace | 0.5 |" in (tmp_path / "consistency.md").read_text()
