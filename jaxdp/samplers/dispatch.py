"""Which poset-ball sampler a poset takes, and one entry point to all three.

``"auto"`` takes the forest sampler for forests up to ``AUTO_FOREST_MAX_D``, else the
series-parallel one when it applies, else the general one. The host tables are cached
numpy arrays (never device arrays created during a trace); the kernels receive them as
jit arguments, so only ``d``, the method, the layout and the sizes are static: posets
of the same size and width (general sampler) or the same forest shape (forest sampler)
share one compilation.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp.posets import Poset
from jaxdp.samplers import (
  chunks,
  forest,
  forest_points,
  general,
  general_points,
  simplex,
  sp_kernel,
  sp_tables,
)
from jaxdp.samplers.forest import FOREST_MAX_D
from jaxdp.samplers.gamma import gamma_radius
from jaxdp.samplers.general import GENERAL_MAX_D
from jaxdp.typing import DTypeLike, KeyArray

__all__ = [
  "AUTO_FOREST_MAX_D",
  "METHODS",
  "chunk_size",
  "device_chunk_size",
  "noise",
  "num_objects",
  "objects",
  "points",
  "resolve_method",
  "sample_objects",
  "tables_and_layout",
]

METHODS = ("auto", "forest", "sp", "general")

# "auto" takes the forest sampler for forests up to this d, else the series-parallel
# one when it applies, else the general one. benchmarks/samplers.py: the forest
# sampler is faster on NHIS-3 (d = 15), about even with the series-parallel one on a
# random forest with d = 16 and slower from d = 24 on (1.7x slower at d = 32).
AUTO_FOREST_MAX_D = 16


def resolve_method(poset: Poset, method: str) -> str:
  """Chooses the sampler for ``poset``; raises ValueError if it cannot be used."""
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
  d = poset.d
  if method == "auto":
    if forest.is_forest(poset) and d <= AUTO_FOREST_MAX_D:
      return "forest"
    if sp_tables.supported(poset):
      return "sp"
    if d <= GENERAL_MAX_D:
      return "general"
    sp_tables.check_supported(poset)  # raises, naming the induced N
  if method == "forest":
    if not forest.is_forest(poset):
      raise ValueError(
        "method='forest' needs a forest (every element with at most one element "
        f"directly above it); {poset!r} is not one. Use method='sp' or 'auto'."
      )
    if d > FOREST_MAX_D:
      raise ValueError(
        f"method='forest' supports d <= {FOREST_MAX_D} (its table grows as d^3); "
        f"got d = {d}. Use method='sp' (d <= {sp_tables.SP_MAX_D})."
      )
    return "forest"
  if method == "sp":
    sp_tables.check_supported(poset)
    return "sp"
  if d > GENERAL_MAX_D:
    raise ValueError(
      f"the general poset-ball sampler supports d <= {GENERAL_MAX_D} (its tables hold "
      f"2^d entries); got d = {d}. Series-parallel posets (no induced N) of up to "
      f"{sp_tables.SP_MAX_D} elements take method='sp' or 'auto'."
    )
  return "general"


def num_objects(poset: Poset) -> float:
  """N(P) = sum over A of e(A) e(P \\ A); the ball's normalised volume is 2 N(P)."""
  method = resolve_method(poset, "auto")
  if method == "general":
    return general.num_objects(poset)
  if method == "sp":
    return float(np.exp(sp_tables.log_num_objects(poset)))
  return forest.num_objects(poset)


def tables_and_layout(poset: Poset, method: str) -> tuple[str, Any, Any]:
  """Host side: ``(method, tables, layout)`` for the kernels."""
  method = resolve_method(poset, method)
  if method == "general":
    return method, general.general_tables(poset), general.general_layout(poset)
  if method == "sp":
    return (method, *sp_tables.sp_tables(poset))
  return method, forest.forest_tables(poset), forest.forest_layout(poset)


def sample_objects(
  key: KeyArray, poset: Poset, method: str, n: int, *, key_words: int | None = None
) -> tuple[jax.Array, jax.Array]:
  """Draws ``n`` objects: ``seq`` (n, d) int32 elements in order of addition, ``k`` (n,).

  ``key_words`` (forest sampler only, static): 1 or 2 32-bit words per heap key;
  ``None`` picks 1 for d <= 32 and 2 above (see ``forest.COLUMN_MAX_D``).
  """
  method, tables, layout = tables_and_layout(poset, method)
  return _objects_jit(key, tables, d=poset.d, layout=layout, n=n, key_words=key_words)


@functools.partial(jax.jit, static_argnames=("d", "layout", "n", "key_words"))
def _objects_jit(key, tables, *, d, layout, n, key_words):
  tables = jax.tree_util.tree_map(jnp.asarray, tables)  # numpy when jit is disabled
  return objects(key, tables, d, layout, n, key_words=key_words)


def objects(
  key: KeyArray, tables: Any, d: int, layout: Any, n: int, *, key_words: int | None = None
) -> tuple[jax.Array, jax.Array]:
  """Traceable object sampler: the general algorithm for a ``GeneralLayout``, the
  series-parallel one for an ``SPLayout``, else the forest algorithm for that
  layout."""
  if isinstance(layout, general.GeneralLayout):
    return general_points.general_objects(key, tables, layout, n)
  if isinstance(layout, sp_tables.SPLayout):
    return sp_kernel.sp_objects(key, tables, layout, n)
  if key_words is None:
    key_words = 1 if d <= forest.COLUMN_MAX_D else 2
  if key_words not in (1, 2):
    raise ValueError(f"key_words must be 1 or 2; got {key_words!r}.")
  return forest.forest_objects(key, tables, layout, n, key_words)


def points(
  key_obj: KeyArray,
  key_exp: KeyArray,
  tables: Any,
  d: int,
  layout: Any,
  n: int,
  dtype: DTypeLike,
) -> jax.Array:
  """Exactly uniform points of the ball, (n, d+1): an object from ``key_obj``, its
  simplex's Dirichlet weights from ``key_exp``."""
  if isinstance(layout, sp_tables.SPLayout):
    return sp_kernel.sp_points(key_obj, key_exp, tables, layout, n, dtype)
  if isinstance(layout, general.GeneralLayout):
    return general_points.general_points(key_obj, key_exp, tables, layout, n, dtype)
  if isinstance(layout, forest.ForestLayout) and dtype != jnp.float64:
    return forest_points.forest_points(key_obj, key_exp, tables, layout, n, dtype)
  seq, k = objects(key_obj, tables, d, layout, n)
  return simplex.uniform_points(key_exp, seq, k, tables.up, dtype)


def noise(
  key_obj: KeyArray,
  key_exp: KeyArray,
  key_rad: KeyArray,
  tables: Any,
  d: int,
  layout: Any,
  n: int,
  dtype: DTypeLike,
) -> jax.Array:
  """Unscaled K-norm noise R Z, (n, d+1): Z uniform in the ball, R ~ Gamma(d + 2)
  independent of it. The forest kernel returns sum_i E_i v_i over the simplex, which
  is R Z (``key_rad`` unused; float32: in float64 the forest sampler takes the
  chain construction); the others scale a point by a radius from ``key_rad``."""
  if isinstance(layout, forest.ForestLayout) and dtype != jnp.float64:
    return forest_points.forest_noise(key_obj, key_exp, tables, layout, n, dtype)[0]
  z = points(key_obj, key_exp, tables, d, layout, n, dtype)
  return z * gamma_radius(key_rad, d + 2, n, dtype)[:, None]


def chunk_size(layout: Any, chunk: int) -> int:
  """Samples per chunk for ``layout`` (the series-parallel kernel keeps per-node
  arrays and takes smaller chunks on large posets; the general kernel keeps its
  (d, chunk) chain sum in cache)."""
  if isinstance(layout, sp_tables.SPLayout):
    return sp_kernel.chunk_size(layout, chunk)
  if isinstance(layout, general.GeneralLayout):
    return min(chunk, general_points.CPU_CHUNK)
  return chunk


def device_chunk_size(layout: Any, d: int, device: Any = None) -> int:
  """Samples per chunk on ``device`` (default: JAX's default device): on the CPU
  :func:`chunk_size` of ``CHUNK`` (cache-sized); on an accelerator sized from its
  memory (:func:`jaxdp.samplers.chunks.device_chunk`) at 256 bytes per row of the
  kernel (an element, or a node of the series-parallel decomposition)."""
  rows = len(layout.kind) if isinstance(layout, sp_tables.SPLayout) else d + 1
  chunk = chunks.device_chunk(256 * rows, device)
  if chunk == chunks.CHUNK:
    return chunk_size(layout, chunk)
  return chunk
