"""Points of the poset ball of a forest without the order: the forest sampler's kernel
for :func:`jaxdp.random.poset_ball` and K-norm noise.

The object (A, ext(A), ext(B)) is drawn as :func:`jaxdp.samplers.forest.forest_objects`
draws it: |A| and the tree recursion's choices, then random heap keys made into a
uniformly random heap order of each part by the top-down swap. The point needs no
more than that:

* After the swap each part's keys are a uniformly random heap order (the extension)
  of values that are the part's original keys, i.i.d. uniform and independent of the
  order. With U_x = key_x / 2^31, the k values of A sorted are the order statistics
  of k uniforms, so with an independent G_A ~ Gamma(k + 1) the spacings of
  (G_A U_(1), ..., G_A U_(k), G_A) are k + 1 i.i.d. Exp(1), in the order of A's
  chain of vertices; likewise for B with G_B ~ Gamma(d - k + 1). These are the
  Dirichlet weights of the simplex's vertices (times G_A + G_B ~ Gamma(d + 2)).
* Coordinate j of sum_i E_i v_i sums the weights of the chain filters containing j:
  G_A (1 - min U over the A-elements below or equal to j) minus the same for B, and
  the root coordinate is G_A - G_B. In a forest the elements below j are j's
  subtree, so the minima are one bottom-up pass (``1 - U`` is computed from the key's
  complement, without cancellation).

So no sort, no O(d^2) rank count or chain sum, and no d + 2 exponentials: per sample
d + 1 Threefry hashes give the d + 1 choice uniforms and the d heap keys
(:func:`jaxdp.prng.threefry.words64`), and two Gamma variates take two words each
(:func:`jaxdp.samplers.gamma.gamma_shapes`). The K-norm noise R Z (R ~ Gamma(d + 2))
is that sum itself; the uniform point is it over G_A + G_B.

Exactness: the object is exact up to float32 rounding of the choices and the heap
keys' tie probability (as the object sampler); the values U_x are uniform up to
their grid of 2^-(31 - ceil(log2 d)), far below float32's resolution of the output.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.samplers.forest import (
  COLUMN_MAX_D,
  ForestLayout,
  ForestTables,
  choose_parts,
  heap_keys_columns,
  heap_keys_pairs,
)
from jaxdp.samplers.gamma import gamma_shapes
from jaxdp.samplers.words import paired_words, stored, unit_floats
from jaxdp.typing import DTypeLike, KeyArray

__all__ = ["forest_noise", "forest_points"]


def forest_noise(
  key_obj: KeyArray,
  key_exp: KeyArray,
  tables: ForestTables,
  layout: ForestLayout,
  n: int,
  dtype: DTypeLike,
  key_words: int | None = None,
) -> tuple[jax.Array, jax.Array]:
  """``(y, r)``: y = sum_i E_i v_i over a uniformly chosen object's simplex (n, d+1),
  root first: K-norm noise R Z with R = r ~ Gamma(d + 2) independent of Z uniform in
  the ball (module docstring). ``key_words``: 1 or 2 words per heap key (static;
  ``None``: 1 for d <= ``COLUMN_MAX_D``, else 2)."""
  d = layout.d
  if key_words is None:
    key_words = 1 if d <= COLUMN_MAX_D else 2
  k_gamma, k_hi = jax.random.split(key_exp)
  hi, lo = paired_words(key_obj, (d + 1, n))  # one hash: a choice uniform, a heap key
  u = unit_floats(hi)
  k, in_b = choose_parts(u[d], [u[i] for i in range(d)], tables, layout)
  k, in_b_u = stored((k, jnp.stack(in_b).astype(jnp.uint32)), lo[0, 0])
  in_b_col = list(in_b_u)
  in_b = [b != 0 for b in in_b_col]
  low = max(1, (d - 1).bit_length())
  scale = np.float32(2.0**-31)
  if key_words == 1:
    keys = heap_keys_columns([lo[i] for i in range(d)], in_b_col, layout)
    # 1 - U_x from the key's complement: (2^31 - key - 1/2) 2^-31, in (0, 1)
    comp = [
      (jnp.uint32(0x7FFFFFFF) - kx).astype(jnp.float32) * scale + scale / 2 for kx in keys
    ]
  else:
    raw_hi = jax.random.bits(k_hi, (n, d), jnp.uint32)
    keys_hi, _ = heap_keys_pairs(raw_hi, lo.T[:, :d], in_b, layout, low)
    comp = [
      (jnp.uint32(0x7FFFFFFF) - keys_hi[:, i]).astype(jnp.float32) * scale + scale / 2
      for i in range(d)
    ]
  comp = list(stored(jnp.stack(comp), lo[0, 0]))
  zero = jnp.zeros((n,), jnp.float32)
  own = [(jnp.where(b, zero, c), jnp.where(b, c, zero)) for b, c in zip(in_b, comp)]
  high = _subtree_max(own, layout)  # per preorder position: (A, B) max of 1 - U
  shapes = jnp.stack([k + 1, d - k + 1])  # (2, n)
  g = gamma_shapes(k_gamma, shapes, d + 1, jnp.float32)  # G_A, G_B
  coords = [g[0] * ha - g[1] * hb for ha, hb in high]
  by_elem = jnp.stack(coords)[jnp.argsort(tables.labels)]  # (d, n), element order
  y = jnp.concatenate([(g[0] - g[1])[None], by_elem], axis=0)
  return y.T.astype(dtype), (g[0] + g[1]).astype(dtype)


def forest_points(
  key_obj: KeyArray,
  key_exp: KeyArray,
  tables: ForestTables,
  layout: ForestLayout,
  n: int,
  dtype: DTypeLike,
  key_words: int | None = None,
) -> jax.Array:
  """Exactly uniform points of the poset ball of a forest, (n, d+1), root first."""
  y, r = forest_noise(key_obj, key_exp, tables, layout, n, dtype, key_words)
  return y / r[:, None]


def _subtree_max(own, layout: ForestLayout):
  """For each preorder position, the max of ``own`` (pairs of (n,) arrays) over its
  subtree, bottom up through first-child / next-sibling links."""
  fc, ns = layout.first_child, layout.next_sibling
  d = layout.d
  sub = [None] * d  # max over the subtree of i
  suffix = [None] * d  # max over the subtrees of i and its later siblings
  for i in reversed(range(d)):
    here = own[i]
    if fc[i] >= 0:
      here = tuple(jnp.maximum(a, b) for a, b in zip(here, suffix[fc[i]]))
    sub[i] = here
    suffix[i] = (
      here if ns[i] < 0 else tuple(jnp.maximum(a, b) for a, b in zip(here, suffix[ns[i]]))
    )
  return sub
