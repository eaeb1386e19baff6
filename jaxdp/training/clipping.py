"""Per-example clipping of a gradient pytree to an l2 ball.

Each example's gradient (one slice along the leading axis of every leaf) is scaled
into the l2 ball of radius ``l2_norm_clip``, its norm taken over the whole pytree.
Adding or removing one example then moves the sum of the clipped gradients by at most
``l2_norm_clip`` in l2: the sensitivity the Gaussian noise of
:func:`jaxdp.training.dp_aggregate` is calibrated to (Abadi et al. 2016, Section 3.1).

Two float hazards are handled so the bound holds whatever the gradients hold:

* the norm is taken after dividing by the example's largest entry, so it neither
  underflows to 0 (squares of entries below about 1e-19 are 0 in float32: a naive
  norm of 0 would let the example through unclipped) nor overflows to ``inf`` (entries
  above about 1e19: a naive norm of ``inf`` would drop the example);
* an example whose gradient holds a NaN or an infinity anywhere contributes zero (its
  gradient says nothing usable, and a NaN would poison the sum). Which examples those
  are is never reported: that would depend on the data.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

__all__ = ["clip_per_example", "per_example_norms"]


# a clipped example is scaled to C (1 - 2**-16), so float32's rounding of its norm (a
# relative 2**-24 per term, pairwise-summed) cannot leave it above C
_SHRINK = 1.0 - 2.0**-16


def _leaves(grads):
  leaves = jax.tree_util.tree_leaves(grads)
  if not leaves:
    raise ValueError("the per-example gradients are an empty pytree.")
  sizes = {jnp.shape(x)[0] if jnp.ndim(x) else None for x in leaves}
  if len(sizes) != 1 or None in sizes:
    raise ValueError(
      "per-example gradients must have one leading batch axis of the same size on "
      f"every leaf (one slice per example); got leaf shapes "
      f"{[tuple(jnp.shape(x)) for x in leaves]}. Compute them with "
      "jaxdp.training.per_example_grads (jax.vmap of jax.grad)."
    )
  for x in leaves:
    if not jnp.issubdtype(jnp.result_type(x), jnp.floating):
      raise ValueError(
        f"per-example gradients must be floating arrays; got dtype {jnp.result_type(x)}."
      )
  return leaves


def _flat(x):
  return jnp.reshape(x, (x.shape[0], -1))


def per_example_norms(grads) -> tuple[jax.Array, jax.Array]:
  """The l2 norm of each example's gradient over the whole pytree, and whether it is
  finite everywhere.

  Args:
    grads: a pytree of arrays, each with a leading batch axis of the same size.

  Returns:
    ``(norms, finite)``: float32 arrays of shape ``(batch,)``; ``norms`` is computed as
    ``top * sqrt(sum((g / top)**2))`` with ``top`` the largest absolute entry (no
    underflow to 0, no overflow); it is 0 where ``finite`` is False.
  """
  leaves = [_flat(jnp.asarray(x, jnp.float32)) for x in _leaves(grads)]
  finite = jnp.all(jnp.stack([jnp.all(jnp.isfinite(x), axis=1) for x in leaves]), axis=0)
  leaves = [jnp.where(finite[:, None], x, 0.0) for x in leaves]
  top = jnp.max(jnp.stack([jnp.max(jnp.abs(x), axis=1) for x in leaves]), axis=0)
  unit = jnp.where(top > 0, top, 1.0)
  squares = sum(jnp.sum(jnp.square(x / unit[:, None]), axis=1) for x in leaves)
  return top * jnp.sqrt(squares), finite


def clip_per_example(grads, l2_norm_clip):
  """Each example's gradient scaled into the l2 ball of radius ``l2_norm_clip``.

  Args:
    grads: a pytree of arrays with a leading batch axis (per-example gradients).
    l2_norm_clip: the radius C > 0 (a Python float or a traced scalar).

  Returns:
    A pytree like ``grads`` (float32 leaves): example i is ``g_i`` if ``|g_i| <= C``,
    else ``g_i C (1 - 2**-16) / |g_i|`` (the margin absorbs float32's rounding, so
    the clipped norm is at most ``C``); an example that holds a NaN or an infinity
    anywhere is all zeros.
  """
  norms, finite = per_example_norms(grads)
  safe = jnp.where(norms > 0, norms, 1.0)
  factor = jnp.where(norms > l2_norm_clip, l2_norm_clip * _SHRINK / safe, 1.0)
  factor = jnp.where(finite, factor, 0.0)

  def scale(x):
    x = jnp.asarray(x, jnp.float32)
    f = jnp.reshape(factor, (-1,) + (1,) * (x.ndim - 1))
    return jnp.where(f > 0, x * f, 0.0)  # where, not x * 0: a NaN times 0 is NaN

  return jax.tree_util.tree_map(scale, grads)
