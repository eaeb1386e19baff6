"""Per-example gradients with ``jax.vmap``, in the layout :func:`dp_aggregate` reads."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

__all__ = ["per_example_grads"]

_REQUIRED = object()  # mask's default: a missing mask is refused, not taken as None


def per_example_grads(loss_fn: Callable) -> Callable:
  """A function computing one gradient per example: ``jax.vmap`` of ``jax.grad``.

  Args:
    loss_fn: ``loss_fn(params, *example) -> scalar``, the loss of ONE example (its
      arrays without a batch axis).

  Returns:
    ``grads(params, *batch, mask)``: the gradient of ``loss_fn`` with respect to
    ``params`` for every example of ``batch`` (arrays with a leading batch axis), a
    pytree like ``params`` with that leading axis added. ``mask`` (booleans, one per
    example) zeroes the examples outside the batch, as :func:`poisson_batch` pads a
    Poisson sample to a fixed size: a padded example contributes exactly zero (a
    ``where``, so not even a NaN of its gradient gets through). It must be given:
    ``poisson_batch``'s mask, or ``mask=None`` for a batch without padding (a
    forgotten mask would count example 0, the padding's index, once per padded row).

  Raises:
    ValueError (from ``grads``): no batch array, no ``mask`` argument, or a mask that
      is not one boolean per example.
  """
  grad = jax.grad(loss_fn)

  def grads(params, *batch, mask=_REQUIRED):
    if not batch:
      raise ValueError("per-example gradients need at least one batch array.")
    if mask is _REQUIRED:
      raise ValueError(
        "per-example gradients need mask=: the mask poisson_batch returned with the "
        "indices (its padding rows are example 0, which the mask zeroes), or "
        "mask=None for a batch without padding."
      )
    out = jax.vmap(grad, in_axes=(None,) + (0,) * len(batch))(params, *batch)
    if mask is None:
      return out
    mask = jnp.asarray(mask)
    size = jax.tree_util.tree_leaves(batch)[0].shape[0]
    if mask.shape != (size,) or mask.dtype != jnp.bool_:
      raise ValueError(
        f"mask must be a boolean array of shape ({size},), one entry per example; "
        f"got {mask.dtype}{tuple(mask.shape)}."
      )
    return jax.tree_util.tree_map(
      lambda g: jnp.where(jnp.reshape(mask, (-1,) + (1,) * (g.ndim - 1)), g, 0), out
    )

  return grads
