"""Simulated noise of a :class:`~jaxdp.reporting.NoiseLaw`, for Monte Carlo error bars,
bootstraps and advice.

K-norm noise is drawn as ``scale * R * Z`` (Hardt & Talwar 2010, Section 4): ``Z``
uniform in the ball (the poset ball by jaxdp's exact sampler, in compiled chunks of a
fixed size so one compilation serves every call; the l_p balls on the host) and
``R`` ~ Gamma(D + 1) on the host. Laplace and Gaussian noise (elliptic: the
ellipse's Cholesky factor times i.i.d. normals) are drawn on the host.
These simulations read no data: their randomness protects nothing, and a fixed key
(the default everywhere in :mod:`jaxdp.reporting`) makes results reproducible.
"""

from __future__ import annotations

import functools
import math

import jax
import numpy as np

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.reporting.laws import NoiseLaw
from jaxdp.samplers.balls import PosetBall
from jaxdp.samplers.ellipse import ellipse
from jaxdp.samplers.norm_ball import NormBall

__all__ = [
  "CHUNK",
  "DEFAULT_KEY_SEED",
  "ball_draws",
  "host_rng",
  "noise_draws",
  "simulation_key",
]

CHUNK = 1 << 12  # poset-ball points per compiled call
# The simulations' default seed: they read no data, so a fixed, public key costs no
# privacy and makes error bars and advice reproducible.
DEFAULT_KEY_SEED = 0x5E7A


def simulation_key(key):
  """``key``, checked, or the public default key (simulations read no data)."""
  if key is None:
    return jax.random.key(DEFAULT_KEY_SEED)
  _checks.check_key(key)
  return key


@functools.partial(jax.jit, static_argnames=("poset",))
def _ball_chunk(key, poset):
  return dprandom.poset_ball(key, poset, (CHUNK,))


@functools.partial(jax.jit, static_argnames=("ball",))
def _query_chunk(key, ball):
  return ball.points(key, CHUNK, jax.numpy.float32)


def host_rng(key) -> np.random.Generator:
  """A numpy generator seeded from a JAX key's bits."""
  seed = np.asarray(jax.random.bits(key, (4,), np.uint32)).astype(np.uint64)
  return np.random.default_rng(seed.tolist())


def ball_draws(key, ball, n: int) -> np.ndarray:
  """``(n, dim)`` points uniform in ``ball`` (float64).

  The poset ball's come from :func:`jaxdp.random.poset_ball` and a query ball's
  (:class:`~jaxdp.NormBall`) from its exact sampler (float32), in chunks of
  :data:`CHUNK`, chunk ``i`` drawn from ``fold_in(key, i)``; the l_p balls' (p in
  1, 2, inf) from a numpy generator seeded by ``key``.
  """
  if isinstance(ball, (PosetBall, NormBall)):
    chunks = [
      np.asarray(
        _ball_chunk(jax.random.fold_in(key, i), ball.poset)
        if isinstance(ball, PosetBall)
        else _query_chunk(jax.random.fold_in(key, i), ball)
      )
      for i in range(-(-n // CHUNK))
    ]
    return np.concatenate(chunks)[:n].astype(np.float64)
  rng, d, p = host_rng(key), ball.d, ball.p
  if p == math.inf:
    return rng.uniform(-1.0, 1.0, (n, d))
  if p == 2:
    g = rng.standard_normal((n, d))
    radius = rng.uniform(size=(n, 1)) ** (1.0 / d)
    return g / np.linalg.norm(g, axis=1, keepdims=True) * radius
  if p == 1:
    e = rng.exponential(size=(n, d + 1))
    signs = rng.choice([-1.0, 1.0], size=(n, d))
    return signs * e[:, :d] / e.sum(axis=1, keepdims=True)
  raise ValueError(f"no sampler here for the l_{p:g} ball; use p in (1, 2, inf).")


def noise_draws(key, law: NoiseLaw, n: int, dim: int | None = None) -> np.ndarray:
  """``(n, dim)`` draws of the ideal (real, unrounded) noise of ``law``, float64.

  Args:
    key: a JAX key: split (``fold_in``), never also drawn from.
    law: the noise law.
    n: the number of noise vectors.
    dim: coordinates for i.i.d. laws (default :attr:`NoiseLaw.dim`, else 1).

  Returns:
    The draws, in units of :attr:`NoiseLaw.unit`.
  """
  dim = dim or law.dim or 1
  k_ball, k_radius = jax.random.fold_in(key, 0), jax.random.fold_in(key, 1)
  if law.family == "knorm":
    z = ball_draws(k_ball, law.ball, n)
    r = host_rng(k_radius).gamma(z.shape[1] + 1, size=(n, 1))
    return law.scale * r * z
  rng = host_rng(k_ball)
  if law.family == "laplace":
    return rng.laplace(0.0, law.scale, (n, dim))
  if law.family == "gaussian":
    return rng.normal(0.0, law.scale, (n, dim))
  if law.family == "elliptic":  # L z with L L^T = A has covariance A
    chol = np.linalg.cholesky(ellipse(law.ball).matrix())
    return law.scale * rng.standard_normal((n, dim)) @ chol.T
  raise ValueError(f"noise_draws does not simulate {law.describe()}.")
