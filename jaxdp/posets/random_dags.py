"""Uniformly random labelled DAGs by Melancon's Markov chain (the paper's test posets)."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.typing import KeyArray

__all__ = ["random_dag", "random_dags"]


def random_dag(key: KeyArray, d: int, *, steps: int | None = None) -> list[tuple[int, int]]:
  """Edges of a uniformly random labelled DAG on ``d`` nodes (Melancon's chain).

  Start from the empty graph; each step picks an ordered pair ``(i, j)`` uniformly;
  if the edge ``i -> j`` is present it is removed, otherwise it is added unless that
  makes a cycle (pairs with ``i == j`` leave the graph unchanged). The chain is
  symmetric on DAGs, so its stationary law is uniform.

  Args:
    key: a ``jax.random`` key (typed or legacy).
    d: number of nodes.
    steps: number of steps, default ``10 * d**2``.

  Returns:
    A list of edges ``(i, j)`` (``p_i < p_j`` in the poset they generate).

  References:
    G. Melancon, I. Dutour, M. Bousquet-Melou, "Random generation of directed acyclic
    graphs", 2001. Joseph, Ribero & Yu (ICLR 2025), Section 5.2.
  """
  d = _checks.check_int(d, "d", minimum=1)
  _checks.check_key(key, "key")
  steps = 10 * d * d if steps is None else _checks.check_int(steps, "steps", minimum=0)
  adj = np.asarray(_melancon(key, d, steps))
  return [(int(i), int(j)) for i, j in zip(*np.nonzero(adj))]


def random_dags(key: KeyArray, d: int, num: int, *, steps: int | None = None) -> np.ndarray:
  """``num`` independent random DAG adjacency matrices, shape ``(num, d, d)``, bool.

  Same chain as :func:`random_dag`, vectorised over ``num`` chains (one key each,
  split from ``key``).
  """
  d = _checks.check_int(d, "d", minimum=1)
  num = _checks.check_int(num, "num", minimum=1)
  _checks.check_key(key, "key")
  steps = 10 * d * d if steps is None else _checks.check_int(steps, "steps", minimum=0)
  keys = jax.random.split(key, num)
  return np.asarray(_melancon_batch(keys, d, steps))


@functools.partial(jax.jit, static_argnames=("d", "steps"))
def _melancon(key, d, steps):
  pairs = jax.random.randint(key, (steps, 2), 0, d)
  adj0 = jnp.zeros((d, d), dtype=bool)

  def reaches(adj, src, dst):
    # Breadth-first reachability from src, stopping when dst is reached or stable.
    def cond(state):
      seen, prev = state
      return (~seen[dst]) & jnp.any(seen != prev)

    def body(state):
      seen, _ = state
      return seen | jnp.any(adj & seen[:, None], axis=0), seen

    start = jnp.zeros((d,), bool).at[src].set(True)
    seen, _ = jax.lax.while_loop(cond, body, body((start, start)))
    return seen[dst]

  def step(adj, pair):
    i, j = pair[0], pair[1]
    present = adj[i, j]
    # Adding i -> j closes a cycle iff j already reaches i.
    can_add = (i != j) & ~jax.lax.cond(
      present | (i == j), lambda: True, lambda: reaches(adj, j, i)
    )
    new = jnp.where(present, False, can_add)
    return adj.at[i, j].set(new), None

  adj, _ = jax.lax.scan(step, adj0, pairs)
  return adj


_melancon_batch = jax.jit(
  jax.vmap(_melancon, in_axes=(0, None, None)), static_argnums=(1, 2)
)
