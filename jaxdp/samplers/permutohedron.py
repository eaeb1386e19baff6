"""Uniform points of the permutohedron, as the Voronoi cell of a lattice.

The permutohedron P = conv{permutations of (0, 1, ..., d - 1)}, centred at its
centroid ((d - 1) / 2) 1, is the Voronoi cell of the lattice L = d A*_{d-1} =
{x in Z^d : sum x = 0, x_i = x_j mod d} in the hyperplane sum x = 0. L holds the
vectors d 1_S - |S| 1 (S a proper non-empty subset), whose bisectors
sum_{i in S} x_i <= |S| (d - |S|) / 2 are exactly P's facets, so the Voronoi cell
lies in P; both have volume det L = d^(d-2) (in units of the root lattice
A_{d-1}; Cayley's count of trees for P), so they coincide up to their boundary.
Hence x -> x - (the point of L nearest to x) maps a uniform point of the torus
(sum x = 0) / L to a uniform point of P, exactly (ties have measure zero).

Scaled down by d: with v uniform in [0, 1)^d and Q the projection onto
sum x = 0, Q v is uniform modulo A*_{d-1} = Q Z^d (the quotient of the uniform
torus R^d / Z^d by the closed circle R 1 / Z 1), and the
point of A*_{d-1} nearest to Q v is Q u with u in Z^d minimising the spread
sum_i (r_i - mean r)^2 of the residuals r = v - u. Shifting u by a constant
changes nothing, so u_i is 0 or 1, and the optimal rounding lifts the k largest
v_i for some k in 0..d-1 (the points v_i on a circle of length 1 are cut once,
at a gap: McKilliam, Clarkson and Quinn's nearest point algorithm for A*_n). So:
sort v, take the k minimising the spread (prefix sums of the sorted values), and
the centred uniform point of P is d (r - mean r).

Ties among the v_i never matter: lifting one of two equal values is never
optimal (lifting the second too changes the spread by the first's change minus
2 / d, so lifting neither or both is strictly better), so
``r = v - (v > t)`` with ``t`` the largest value left unlifted lifts exactly the
optimal set. The spread's steps are compared in float32 only for d <=
:data:`F32_SELECT_MAX_D`, where their rounding stays far below that
2 / d margin; beyond, and for float64 draws, in float64.

The sort is a bitonic network over the sample axis (each of its log2(n)(log2(n) +
1) / 2 stages is a vectorised min / max over all samples), which XLA's CPU backend
runs many times faster than its comparison sort on short rows.

References:
  J. H. Conway, N. J. A. Sloane, "Sphere packings, lattices and groups", Ch. 4 and
  21 (A*_n, its Voronoi cell the permutohedron).
  R. G. McKilliam, I. V. L. Clarkson, B. G. Quinn, "An algorithm to compute the
  nearest point in the lattice A*_n", IEEE Trans. Inf. Theory 54 (2008).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache

__all__ = ["F32_SELECT_MAX_D", "centred_points", "centred_sq_norm", "sort_columns"]

# Up to this d the rounding is chosen in float32 arithmetic for float32 draws.
F32_SELECT_MAX_D = 256


def sort_columns(x: jax.Array) -> jax.Array:
  """``x`` (n, m) sorted ascending along axis 0 by a bitonic network; n a power of
  two."""
  n = x.shape[0]
  if n & (n - 1):
    raise ValueError(f"the bitonic sort needs a power-of-two length; got {n}.")
  rest = x.shape[1:]
  k = 2
  while k <= n:
    j = k // 2
    while j >= 1:
      pairs = x.reshape((n // (2 * j), 2, j, *rest))
      a, b = pairs[:, 0], pairs[:, 1]
      lo, hi = jnp.minimum(a, b), jnp.maximum(a, b)
      start = np.arange(n // (2 * j)) * 2 * j
      up = ((start & k) == 0).reshape((-1,) + (1,) * (1 + len(rest)))
      x = jnp.stack([jnp.where(up, lo, hi), jnp.where(up, hi, lo)], axis=1)
      x = x.reshape((n, *rest))
      j //= 2
    k *= 2
  return x


def _prefix_sums(x: jax.Array) -> jax.Array:
  """Inclusive cumulative sums along axis 0 by log2(n) shifted adds (fuses on the
  CPU, where ``jnp.cumsum`` is a slow reduce-window)."""
  n = x.shape[0]
  shift = 1
  while shift < n:
    x = x + jnp.concatenate([jnp.zeros_like(x[:shift]), x[:-shift]], axis=0)
    shift *= 2
  return x


def centred_points(v: jax.Array) -> jax.Array:
  """Uniform points of the permutohedron of (0, ..., d - 1) minus its centroid.

  Args:
    v: ``(d, m)`` independent uniforms on [0, 1) (float32 or float64), one sample
      per column.

  Returns:
    ``(d, m)`` points of the centred permutohedron, ``v``'s dtype.
  """
  d, m = v.shape
  n = 1 << (d - 1).bit_length()
  pad = jnp.ones((n - d, m), v.dtype)  # above every -v: sorted to the end
  desc = -sort_columns(jnp.concatenate([-v, pad], axis=0))[:d]  # v descending
  work = jnp.float32
  if v.dtype == jnp.float64 or d > F32_SELECT_MAX_D:
    work = jnp.float64
  with jax.enable_x64(True):
    g = desc.astype(work)
    total = jnp.sum(g, axis=0, keepdims=True)
    j = jnp.arange(d - 1, dtype=work)[:, None]
    # d times the spread's change when the (j+1)-th largest value is lifted too
    step = 1 - 2 * g[: d - 1] + (2 * total - 2 * j - 1) / d
    spread = jnp.concatenate([jnp.zeros((1, m), work), _prefix_sums(step)], axis=0)
    best = spread == jnp.min(spread, axis=0, keepdims=True)
    # the largest unlifted value: at the first (fewest lifted) minimum
    top = jnp.max(jnp.where(best, desc, -1), axis=0, keepdims=True)
  r = v - (v > top).astype(v.dtype)
  return d * (r - jnp.mean(r, axis=0, keepdims=True))


@value_cache(maxsize=64)
def centred_sq_norm(d: int) -> float:
  """E||X - c||^2 for X uniform in the permutohedron of (0, ..., d - 1), c its
  centroid, in float64.

  By the cone decomposition over the facets F_S ~ P_k x P_{d-k} (k = |S|), at
  distance h_k = sqrt(k (d - k) d) / 2 from c:  (d + 1) M_d = sum_k w_k (h_k^2 +
  M_k + M_{d-k}), with M_k the value for k, M_1 = 0 and w_k = C(d, k) k^(k-1)
  (d - k)^(d-k-1) / (2 d^(d-2)) (the facets' share of the volume d^(d-2), times
  d - 1: sum_k w_k = d - 1). The weights are evaluated in logs: O(d^2) work.
  """
  mom = np.zeros(d + 1)
  log_fact = np.array([math.lgamma(x + 1) for x in range(d + 1)])
  for e in range(2, d + 1):
    k = np.arange(1, e)
    log_w = (
      log_fact[e]
      - log_fact[k]
      - log_fact[e - k]
      + (k - 1) * np.log(k)
      + (e - k - 1) * np.log(e - k)
      - (e - 2) * math.log(e)
      - math.log(2)
    )
    w = np.exp(log_w)
    mom[e] = np.sum(w * (k * (e - k) * e / 4 + mom[1:e] + mom[e - 1 : 0 : -1])) / (e + 1)
  return float(mom[d])
