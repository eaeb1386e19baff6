"""Per-example clipping of a gradient pytree to an l2 ball.

Each example's gradient (one slice along the leading axis of every leaf) is scaled
into the l2 ball of radius ``l2_norm_clip``, its norm taken over the whole pytree.
Adding or removing one example then moves the sum of the clipped gradients by at most
``l2_norm_clip`` in l2: the sensitivity the Gaussian noise of
:func:`jaxdp.training.dp_aggregate` is calibrated to (Abadi et al. 2016, Section 3.1).

The bound holds whatever the gradients hold, float rounding included:

* each example is first multiplied by the power of two that brings its largest
  entry into [0.5, 1) (exact), so its sum of squares neither underflows to 0 (squares
  of entries below about 1e-19 are 0 in float32: a naive norm of 0 would let the
  example through unclipped) nor overflows to ``inf`` (entries above about 1e19: a
  naive norm of ``inf`` would drop the example);
* the sum of the k squares, nonnegative terms, is within a relative
  gamma_k = k u / (1 - k u) of the exact one in any summation order (u = 2**-24 in
  float32; Higham, *Accuracy and Stability of Numerical Algorithms*, 2002, Section
  4.2; past 2**18 entries the sum is accumulated in float64), so an example is
  left as it is only if its computed norm is at most
  ``T = C sqrt(1 - gamma_k) (1 - 2**-20)``, and scaled to norm ``T`` otherwise: its
  exact norm is then at most C;
* an example whose gradient holds a NaN or an infinity anywhere contributes zero (its
  gradient says nothing usable, and a NaN would poison the sum). Which examples those
  are is never reported: that would depend on the data.

``l2_norm_clip`` must lie in [2**-60, 2**60].
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp

from jaxdp import _checks

__all__ = ["check_clip", "clip_per_example", "clipped_sum", "per_example_norms"]


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
  return jnp.reshape(jnp.asarray(x, jnp.float32), (x.shape[0], -1))


_U = 2.0**-24
_F32_TERMS = 2**18  # beyond this many entries per example, squares add up in float64


def check_clip(l2_norm_clip) -> float:
  """``l2_norm_clip`` as a Python float in [2**-60, 2**60], or ValueError."""
  c = _checks.check_positive(l2_norm_clip, "l2_norm_clip")
  if not 2.0**-60 <= c <= 2.0**60:
    raise ValueError(f"l2_norm_clip must be in [2**-60, 2**60]; got {c!r}.")
  return c


def _threshold(c: float, k: int) -> float:
  """T = C sqrt(1 - gamma) (1 - 2**-20): gamma bounds the relative error of the sum of
  k scaled squares (gamma_k for the accumulation's precision, plus 2**-23 for the
  products if they are rounded to float32 before a float64 sum, plus k 2**-120 for
  products flushed to 0 below float32's normal range)."""
  u = _U if k <= _F32_TERMS else 2.0**-53
  gamma = (k + 4) * u / (1 - (k + 4) * u) + 2.0**-23 + k * 2.0**-120
  return c * math.sqrt(1 - gamma) * (1 - 2.0**-20)


def _scaled(grads):
  """Each example times a power of two r (largest entry into [0.5, 1); non-finite
  examples zeroed), its scaled norm and r, and whether it is finite."""
  leaves = [_flat(x) for x in _leaves(grads)]
  sized = [x for x in leaves if x.shape[1]]
  k = sum(x.shape[1] for x in leaves)
  if not sized:
    zero = jnp.zeros(leaves[0].shape[:1], jnp.float32)
    return leaves, zero, zero + 1, zero == 0, k
  # max and min, not max |x|: XLA's CPU reductions are fast for these; a NaN
  # anywhere makes top NaN, an infinity makes it inf
  hi = functools.reduce(jnp.maximum, [jnp.max(x, axis=1) for x in sized])
  lo = functools.reduce(jnp.minimum, [jnp.min(x, axis=1) for x in sized])
  top = jnp.maximum(hi, -lo)
  finite = jnp.isfinite(top)
  exponent = jnp.frexp(jnp.where(finite & (top > 0), top, 1.0))[1]
  r = jnp.ldexp(jnp.ones_like(top), -jnp.clip(exponent, -125, 126))  # normal floats
  leaves = [jnp.where(finite[:, None], x * r[:, None], 0.0) for x in leaves]
  if k <= _F32_TERMS:
    # HIGHEST: the threshold assumes float32 products (TF32 / bfloat16 accelerator
    # defaults would round them, and could let a clipped norm exceed the clip)
    squares = sum(
      jnp.einsum("bi,bi->b", x, x, precision=jax.lax.Precision.HIGHEST)
      for x in leaves
      if x.shape[1]
    )
  else:
    with jax.enable_x64(True):
      squares = sum(
        jnp.einsum(
          "bi,bi->b",
          x,
          x,
          preferred_element_type=jnp.float64,
          precision=jax.lax.Precision.HIGHEST,
        )
        for x in leaves
        if x.shape[1]
      ).astype(jnp.float32)
  return leaves, jnp.sqrt(squares), r, finite, k


def _weights(grads, l2_norm_clip):
  """The scaled examples and each one's weight: 1 / r inside the ball, T / (its
  scaled norm) outside, 0 if it holds a NaN or an infinity."""
  leaves, scaled_norm, r, finite, k = _scaled(grads)
  t = _threshold(check_clip(l2_norm_clip), k)
  outside = scaled_norm / r > t
  safe = jnp.where(scaled_norm > 0, scaled_norm, 1.0)
  w = jnp.where(outside, t / safe, 1.0 / r)
  return leaves, jnp.where(finite, w, 0.0)


def per_example_norms(grads: Any) -> tuple[jax.Array, jax.Array]:
  """The l2 norm of each example's gradient over the whole pytree, and whether it is
  finite everywhere.

  Args:
    grads: a pytree of arrays, each with a leading batch axis of the same size.

  Returns:
    ``(norms, finite)``: arrays of shape ``(batch,)``; ``norms`` (float32, ``inf``
    past float32's range) is computed after scaling by a power of two (no underflow,
    no overflow); it is 0 where ``finite`` is False.
  """
  _, scaled_norm, r, finite, _ = _scaled(grads)
  return jnp.where(finite, scaled_norm / r, 0.0), finite


def clip_per_example(grads: Any, l2_norm_clip: float) -> Any:
  """Each example's gradient scaled into the l2 ball of radius ``l2_norm_clip``.

  Args:
    grads: a pytree of arrays with a leading batch axis (per-example gradients).
    l2_norm_clip: the radius C, in [2**-60, 2**60].

  Returns:
    A pytree like ``grads`` (float32 leaves): example i is ``g_i`` if its computed
    norm is at most T (module docstring: C less a relative 2**-20 plus the rounding
    bound), else ``g_i T / |g_i|``; an example that holds a NaN or an infinity
    anywhere is all zeros. Every example's exact norm is at most C.
  """
  leaves, w = _weights(grads, l2_norm_clip)
  out = [x * w[:, None] for x in leaves]
  flat, treedef = jax.tree_util.tree_flatten(grads)
  return jax.tree_util.tree_unflatten(
    treedef, [jnp.reshape(o, jnp.shape(g)) for o, g in zip(out, flat)]
  )


def clipped_sum(grads: Any, l2_norm_clip: float) -> Any:
  """The sum over examples of :func:`clip_per_example`'s output, without holding the
  clipped examples (one weighted contraction per leaf).

  Returns:
    A pytree like one example's gradient (float32 leaves).
  """
  leaves, w = _weights(grads, l2_norm_clip)
  flat, treedef = jax.tree_util.tree_flatten(grads)
  # HIGHEST: a TF32 / bfloat16 default would round each weight and entry, and an
  # example's contribution could exceed C (as for the norm in _scaled)
  sums = [jnp.matmul(w, x, precision=jax.lax.Precision.HIGHEST) for x in leaves]
  return jax.tree_util.tree_unflatten(
    treedef, [jnp.reshape(s, jnp.shape(g)[1:]) for s, g in zip(sums, flat)]
  )
