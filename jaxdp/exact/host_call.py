"""Host callbacks that receive 64-bit operands whole.

``jax.pure_callback`` hands its operands to the host function on a thread that does
not see a caller's ``jax.enable_x64`` scope, and with 64-bit types off there it
converts them to 32 bits (a float64 scale arrives as float32). The exact samplers
trace inside such a scope, and their host refinement must round with the scale the
device used, so every 64-bit operand travels as two uint32 words (high, low) and is
put back together bit for bit before the host function runs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["WIDE", "host_call"]

# The 64-bit types sent as word pairs (a listed set: complex64 is 8 bytes too, and
# has no bitcast to uint64).
WIDE = (jnp.dtype(jnp.float64), jnp.dtype(jnp.int64), jnp.dtype(jnp.uint64))


def host_call(fn, result_shape, *args):
  """``jax.pure_callback(fn, result_shape, *args, vmap_method="broadcast_all")`` with
  every 64-bit array of ``args`` (float64, int64, uint64) given to ``fn`` with its
  own dtype and bits (call where 64-bit types are on, as inside the exact kernels).

  Args:
    fn: the host function, called with numpy arrays.
    result_shape: its result's ``jax.ShapeDtypeStruct`` (32-bit types).
    *args: the operands (arrays; a caller's batch axes in front under ``vmap``).

  Returns:
    ``fn``'s result.
  """
  args = [jnp.asarray(a) for a in args]
  wide = [a.dtype if a.dtype in WIDE else None for a in args]
  sent = [a if w is None else _split(a) for a, w in zip(args, wide)]

  def host(*xs):
    return fn(*(x if w is None else _join(x, w) for x, w in zip(xs, wide)))

  return jax.pure_callback(host, result_shape, *sent, vmap_method="broadcast_all")


def _split(a):
  """A 64-bit array -> (..., 2) uint32: its bits' high and low words."""
  bits = lax.bitcast_convert_type(a, jnp.uint64)
  return jnp.stack(
    [(bits >> np.uint64(32)).astype(jnp.uint32), bits.astype(jnp.uint32)], -1
  )


def _join(words, dtype):
  """:func:`_split`'s inverse on the host: (..., 2) uint32 -> ``dtype``."""
  words = np.asarray(words, np.uint32)
  bits = (words[..., 0].astype(np.uint64) << np.uint64(32)) | words[..., 1]
  return bits.view(np.dtype(dtype))
