"""The certificate of a consistent vector: feasibility, duality gap, distance bound.

For the isotonic part ``w`` (``w_lo <= w_hi`` on every edge) and any multipliers
``lam >= 0``, weak duality bounds the distance to the exact projection ``w*``:
``||w - w*||^2 / 2 <= P(w) - D(lam)``, the duality gap, which for a feasible ``w``
equals ``||w - (y - A^T lam)||^2 / 2 + sum_e lam_e (w_hi - w_lo)`` (both terms
non-negative: no cancellation). The released vector ``max(w, 0)`` is within the same
distance of the projection ``max(w*, 0)`` onto the counts with the lower bound
(clipping is 1-Lipschitz, and clipping the isotonic regression gives the bounded
one: Barlow et al. 1972, Section 1.4; the KKT multipliers of the bound are
``max(-w*, 0)``).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp.consistency.graph import ConstraintGraph

__all__ = [
  "Certificate",
  "certify",
  "edge_differences",
  "from_sums",
  "gap_scale",
  "operators",
  "transpose_apply",
]

DENSE_MAX = 4096  # dim * edges up to which A is applied as a dense matrix


class Certificate(NamedTuple):
  """Per-vector accuracy of :func:`jaxdp.consistent` (arrays over the batch axes).

  Attributes:
    violation: the largest ``z_lo - z_hi`` over the constraints, clipped at 0
      (0 means every order constraint holds exactly in floating point).
    gap: the duality gap of the isotonic part (>= 0; inf where it is past the
      dtype's range, in counts squared, while ``distance_bound`` is not).
    distance_bound: ``sqrt(2 gap)``: ``||z - z*||_2`` is at most this (in counts),
      for ``z*`` the exact Euclidean projection, when ``violation`` is 0.
    tolerance: the bound required: ``tol * max(1, max_i |y_i|)``.
    ok: ``violation == 0`` and ``distance_bound <= tolerance``.
  """

  violation: jax.Array
  gap: jax.Array
  distance_bound: jax.Array
  tolerance: jax.Array
  ok: jax.Array


def edge_differences(z: jax.Array, graph: ConstraintGraph) -> jax.Array:
  """``(A z)_e = z_lo - z_hi`` for every edge (last axis), <= 0 when consistent."""
  lo = jnp.asarray(graph.lo, jnp.int32)
  hi = jnp.asarray(graph.hi, jnp.int32)
  return z[..., lo] - z[..., hi]


def transpose_apply(lam: jax.Array, graph: ConstraintGraph) -> jax.Array:
  """``A^T lam``: each edge's multiplier added at its lower node, taken at its upper."""
  lo = jnp.asarray(graph.lo, jnp.int32)
  hi = jnp.asarray(graph.hi, jnp.int32)
  out = jnp.zeros(lam.shape[:-1] + (graph.dim,), lam.dtype)
  return out.at[..., lo].add(lam).at[..., hi].add(-lam)


def operators(graph: ConstraintGraph, dtype: jnp.dtype) -> tuple:
  """``(z -> A z, lam -> A^T lam)`` on the last axis: slices for a path numbered
  from the bottom up (edges ``i -> i + 1``), dense products for small graphs,
  gathers and scatters otherwise."""
  if graph.lo == tuple(range(graph.dim - 1)) and graph.hi == tuple(range(1, graph.dim)):

    def apply_at(lam):
      widths = [(0, 0)] * (lam.ndim - 1)
      return jnp.pad(lam, widths + [(0, 1)]) - jnp.pad(lam, widths + [(1, 0)])

    return (lambda z: z[..., :-1] - z[..., 1:]), apply_at
  if graph.dim * graph.num_edges <= DENSE_MAX:
    a = jnp.asarray(graph.incidence, dtype)
    return (lambda z: z @ a.T), (lambda lam: lam @ a)
  return (lambda z: edge_differences(z, graph)), (lambda lam: transpose_apply(lam, graph))


def certify(
  y: jax.Array, w: jax.Array, lam: jax.Array, graph: ConstraintGraph, tol: float
) -> Certificate:
  """The certificate of the isotonic part ``w`` with multipliers ``lam`` (any >= 0)."""
  apply_a, apply_at = operators(graph, w.dtype)
  return _certificate(y, w, lam, apply_a, apply_at, tol, -1)


def _certificate(y, w, lam, apply_a, apply_at, tol, axis):
  diff = apply_a(w)
  violation = jnp.maximum(jnp.max(diff, axis=axis), 0.0)
  lam = jnp.maximum(lam, 0.0)
  r = y - apply_at(lam)
  top = jnp.maximum(1.0, jnp.max(jnp.abs(y), axis=axis))
  inv = gap_scale(top)
  inv_b = jnp.expand_dims(inv, axis)
  scaled = 0.5 * jnp.sum(((w - r) * inv_b) ** 2, axis=axis) + jnp.sum(
    (lam * inv_b) * (jnp.maximum(-diff, 0.0) * inv_b), axis=axis
  )
  return from_sums(violation, scaled, inv, top, tol)


def gap_scale(top: jax.Array) -> jax.Array:
  """``2^-e`` for ``top = f 2^e``, ``0.5 <= f < 1`` (``top = max(1, max|y|)`` per
  vector): the gap's squares are summed scaled by its square, an exact scaling,
  so that huge counts do not overflow the distance bound."""
  return jnp.ldexp(jnp.ones_like(top), -jnp.frexp(top)[1])


def from_sums(
  violation: jax.Array, scaled: jax.Array, inv: jax.Array, top: jax.Array, tol: float
) -> Certificate:
  """The certificate from the largest edge difference (clipped at 0), the gap
  scaled by ``inv ** 2`` (:func:`gap_scale`) and ``top = max(1, max|y|)``."""
  gap = scaled / (inv * inv)
  bound = jnp.sqrt(2.0 * scaled) / inv
  tolerance = tol * top
  ok = (violation == 0) & (bound <= tolerance)
  return Certificate(violation, gap, bound, tolerance, ok)
