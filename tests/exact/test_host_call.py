"""``jaxdp.exact.host_call``: 64-bit operands reach the host function whole."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.exact.host_call import host_call

VALUES = {
  np.float64: [1e6 / 3, -0.1, 5e-324, np.inf, np.nan, 2.0**60 + 1.0],
  np.int64: [2**40 + 3, -(2**62), -1, 0],
  np.uint64: [2**63 + 5, 2**32, 1],
}


def test_64_bit_operands_reach_the_host_bit_for_bit():
  """float64, int64 and uint64 values that no 32-bit type holds (1e6 / 3, 2^40 + 3,
  2^63 + 5, a subnormal, NaN), traced inside ``jax.enable_x64`` and passed through
  ``host_call`` under jit and under vmap and run outside that scope, arrive with their
  dtype and bits; a 32-bit operand beside them is unchanged. ``jax.pure_callback``
  itself hands them over with 64-bit types off there (float64 as float32)."""
  seen = []

  def fn(small, *wide):
    seen.append((np.asarray(small), [np.asarray(w) for w in wide]))
    return np.zeros(np.shape(small), np.int32)

  with jax.enable_x64(True):  # traced and compiled as the exact kernels are
    wide = [jnp.asarray(v, t) for t, v in VALUES.items()]
    small = jnp.arange(3, dtype=jnp.int32)
    flat = lambda s, *w: host_call(fn, jax.ShapeDtypeStruct((3,), jnp.int32), s, *w)
    flat = jax.jit(flat).lower(small, *wide).compile()
    # under vmap: a batch of two, the second with other bits
    batched = [jnp.stack([w, w ^ 1 if w.dtype != jnp.float64 else -w]) for w in wide]
    one = lambda s, *w: host_call(fn, jax.ShapeDtypeStruct((), jnp.int32), s, *w)
    vmapped = jax.jit(jax.vmap(one)).lower(small[:2], *batched).compile()
  # run outside the scope, as a caller runs a compiled sampler
  jax.block_until_ready(flat(small, *wide))
  jax.block_until_ready(vmapped(small[:2], *batched))
  (s0, got), (s1, got_b) = seen
  np.testing.assert_array_equal(s0, [0, 1, 2])
  for (t, v), g, gb, b in zip(VALUES.items(), got, got_b, batched):
    assert g.dtype == t and gb.dtype == t, (g.dtype, gb.dtype, t)
    want = np.asarray(v, t)
    np.testing.assert_array_equal(g.view(np.uint64), want.view(np.uint64))
    np.testing.assert_array_equal(gb.view(np.uint64), np.asarray(b).view(np.uint64))
