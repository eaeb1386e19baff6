"""From an object (A, ext(A), ext(B)) to a point: Dirichlet(1) weights on the vertices
of its simplex (traced; shared by the general and forest samplers and the K-norm noise).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["chain_noise", "uniform_points"]


def uniform_points(key, seq, k, up, dtype):
  """Exactly uniform points of each object's simplex (so of the ball): Dirichlet(1)
  weights from d + 2 exponentials on the vertices. Returns (n, d+1), root first."""
  expo = jax.random.exponential(key, (seq.shape[0], seq.shape[1] + 2), dtype)
  return chain_noise(seq, k, expo, up, dtype) / jnp.sum(expo, axis=1, keepdims=True)


def chain_noise(seq, k, expo, up, dtype):
  """sum_i E_i v_i over the simplex of each object: (n, d+1), root first.

  A's vertices (1, 1_F0..Fk) take E[0..k], B's -(1, 1_G0..Gl) take E[k+1..d+1].
  Coordinate j accumulates E_i over the chain filters containing j.
  """
  n, d = seq.shape
  f = jnp.zeros((n, d), bool)
  coord = jnp.zeros((n, d), dtype)
  for s in range(d):
    is_a = s < k
    f = jnp.where((k == s)[:, None], False, f) | up[seq[:, s]]
    coeff = jnp.where(is_a, expo[:, s + 1], -expo[:, s + 2])
    coord = coord + coeff[:, None] * f.astype(dtype)
  idx = jnp.arange(d + 2)
  root = jnp.sum(jnp.where(idx[None, :] <= k[:, None], expo, -expo), axis=1)
  return jnp.concatenate([root[:, None], coord], axis=1)
