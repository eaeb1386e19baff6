"""Proposals of the cube slices' kernel on rows of two coordinate groups, for
:func:`~jaxdp.samplers.cube_slice.rejection_fill`."""

import jax
import jax.numpy as jnp

from jaxdp.samplers.slice_kernel import slice_proposals


def two_group_candidates(table, k, sizes, d):
  """``candidates(key, rows) -> (x, ok, member)`` for rows of two groups: the first
  ``sizes`` (``(n,)``) coordinates and the rest, each proposed from ``table``."""
  sizes = jnp.asarray(sizes)
  pos = jnp.arange(d)[None, :] < sizes[:, None]

  def candidates(key, rows):
    jj, pp = (sizes, pos) if rows is None else (sizes[rows], pos[rows])
    u = jax.random.uniform(key, (jj.shape[0], d + 4))
    x, ok, _ = slice_proposals(u[:, :d], u[:, d:], pp, (jj, d - jj), table, k)
    return x, jnp.stack(ok, axis=1), (~pp).astype(jnp.int32)

  return candidates
