"""The exactly rounded Laplace and K-norm samplers (poset ball, l_inf ball): checks,
the jitted kernels and their chunking."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.exact.choices import simplex_coefficients, uniform_below, unrank
from jaxdp.exact.forest import forest_object, forest_order
from jaxdp.exact.intervals import (
  UNSETTLED,
  chain_round,
  laplace_round,
  linf_round,
  tree_round_marked,
)
from jaxdp.exact.limits import MAX_SCALE, max_scale
from jaxdp.exact.refine import (
  refine_linf_sample,
  refine_sample,
  refine_tree_sample,
  settle,
  settle_marked,
)
from jaxdp.exact.tree import tree_objects
from jaxdp.exact.wide import uniform_below_wide, unrank_wide
from jaxdp.posets import Poset
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers import sp_tables
from jaxdp.samplers.chunks import chunked
from jaxdp.samplers.exact_tables import exact_tables
from jaxdp.samplers.exact_tree_tables import exact_tree_tables
from jaxdp.samplers.exact_wide_tables import exact_wide_tables
from jaxdp.samplers.general import GENERAL_MAX_D
from jaxdp.typing import KeyArray, Shape

CHUNK = 1 << 14  # samples per sequential step (bounds memory)
TREE_CHUNK_BYTES = 1 << 23  # working bytes per chunk of the tree path
WIDE_CHUNK_BYTES = 1 << 21  # working bytes per chunk of the 128-bit path
WIDE_SAMPLE_BYTES = 100  # per sample and poset element, a bound for the 128-bit path


def laplace(key: KeyArray, shape: Shape = (), *, scale: float) -> jax.Array:
  """Exactly rounded Laplace noise: ``round(L)`` for ``L`` ~ Laplace(scale), int32.

  Args:
    key: one PRNG key (use :func:`jaxdp.random.secure_key` for a release).
    shape: output shape.
    scale: the Laplace scale b > 0, at most ``max_scale(0)`` (= ``MAX_SCALE``,
      :mod:`jaxdp.exact.limits`); a Python number (used exactly as its float64
      value) or a traced scalar (a bad traced value yields the sentinel
      ``INT32_MIN`` everywhere, never weaker noise).

  Returns:
    int32 array of ``shape``. ``P(k) = P(k - 1/2 < L < k + 1/2)`` exactly.

  Raises:
    ValueError: a static scale out of range (checked before anything is drawn).
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  scale = check_scale(scale, 0)
  with jax.enable_x64(True):  # int64/float64 inside; the arguments keep their types
    out = _laplace_kernel(key, scale_arg(scale), n=math.prod(shape))
  return out.reshape(shape)


def poset_knorm(
  key: KeyArray, poset: Poset, scale: float, shape: Shape = (), *, path: str | None = None
) -> jax.Array:
  """Exactly rounded K-norm noise for the poset ball, int32 ``(*shape, d + 1)``.

  The ideal noise has density proportional to ``exp(-||y||_K / scale)`` on
  R^(d+1), K the poset ball; each coordinate is rounded to the nearest integer,
  exactly. With ``scale = sensitivity / eps`` and an integer statistic, adding it is
  eps-DP (postprocessing of the K-norm mechanism).

  The object is drawn by one of three exact paths (:func:`poset_path`): an exactly
  uniform integer rank in [0, N(P)) unranked with int64 tables (d <= 22 and
  N(P) < 2^61; NHIS-3 has N(P) = 609,887,750,400; for a forest numbered in preorder
  the rank gives A and one exactly uniform permutation both extensions,
  :mod:`jaxdp.exact.forest`); for every other
  series-parallel poset with prime pieces of at most 16 elements and d <= 512
  (forests included), exact lazy choices down its decomposition tree
  (:mod:`jaxdp.exact.tree`); for every other poset with d <= 22, the same ranks
  and unranking in exact 128-bit arithmetic (:mod:`jaxdp.exact.wide`).

  Args:
    key: one PRNG key.
    poset: a :class:`~jaxdp.Poset` one of the two paths takes.
    scale: 1/eps times the sensitivity; Python number or traced scalar, at most
      ``max_scale(d + 1)`` (:mod:`jaxdp.exact.limits`: ``MAX_SCALE`` up to
      d + 1 = 600, about ``2^30 / 1484`` at d + 1 = 1000); a bad traced value
      yields the sentinel ``INT32_MIN`` everywhere.
    shape: batch shape.
    path: ``None`` (:func:`poset_path`'s choice), ``"ranks"``, ``"tree"`` (any
      series-parallel poset, small ones too) or ``"wide"`` (any poset with
      d <= 22); every path draws each object with probability exactly 1/N(P).

  Raises:
    ValueError: the poset fits neither path, or not the one asked for; a static
      scale out of range.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  if not isinstance(poset, Poset):
    raise _checks.ArgTypeError(f"poset must be a jaxdp.Poset; got {poset!r}.")
  scale = check_scale(scale, poset.d + 1)
  n = math.prod(shape)
  chosen = poset_path(poset)
  if path not in (None, "ranks", "tree", "wide"):
    raise ValueError(f"path must be None, 'ranks', 'tree' or 'wide'; got {path!r}.")
  if path == "tree":
    sp_tables.check_supported(poset)
  elif path == "ranks":
    exact_tables(poset)
  if (path or chosen) == "ranks":
    tables, total = exact_tables(poset)
    forest = forest_order(poset)
    with jax.enable_x64(True):  # the int64 tables must not be canonicalised to int32
      out = _poset_kernel(
        key, tables, scale_arg(scale), total=total, d=poset.d, n=n, forest=forest
      )
  elif (path or chosen) == "wide":
    tables, total = exact_wide_tables(poset)
    # high limbs that are all zero are not read (every e(S), or N(P), below 2^64)
    narrow = (not tables.ext_hi.any(), not tables.trie_hi.any())
    with jax.enable_x64(True):  # uint64 limbs
      out = _poset_kernel(
        key,
        tables,
        scale_arg(scale),
        total=total,
        d=poset.d,
        n=n,
        wide=True,
        narrow=narrow,
      )
  else:
    tables, layout = exact_tree_tables(poset)
    with jax.enable_x64(True):
      out = _tree_kernel(key, tables, scale_arg(scale), layout=layout, n=n)
  return out.reshape(*shape, poset.d + 1)


def poset_path(poset: Poset) -> str:
  """``"ranks"`` (int64 ranks, d <= 22 and N(P) < 2^61), ``"tree"`` (exact choices
  down the decomposition tree, the other series-parallel posets) or ``"wide"``
  (128-bit ranks, the other posets with d <= 22) for :func:`poset_knorm`.

  Raises:
    ValueError: none applies, naming why (checked before anything is drawn).
  """
  try:
    exact_tables(poset)
    return "ranks"
  except ValueError as err:
    if sp_tables.supported(poset):
      return "tree"
    if poset.d <= GENERAL_MAX_D:
      return "wide"
    raise ValueError(
      f"exact poset-ball noise needs a series-parallel poset (prime pieces of at "
      f"most {sp_tables.BLOCK_MAX_D} elements, d <= {sp_tables.SP_MAX_D}) or one "
      f"with d <= {GENERAL_MAX_D} (integer ranks of any N(P)); {poset!r} is neither "
      f"({err})"
    ) from None


def linf_knorm(key: KeyArray, d: int, scale: float, shape: Shape = ()) -> jax.Array:
  """Exactly rounded K-norm noise for the l_inf ball, int32 ``(*shape, d)``.

  The ideal noise is ``scale * R * Z``: R ~ Gamma(d + 1) (a sum of d + 1
  exponentials) and Z uniform in the cube [-1, 1]^d; each coordinate is rounded to
  the nearest integer exactly (interval products, then the same refinement).

  Args:
    key: one PRNG key.
    d: the dimension (>= 1).
    scale: sensitivity / eps; Python number or traced scalar, at most
      ``max_scale(d)`` (:mod:`jaxdp.exact.limits`: ``MAX_SCALE`` up to d = 600,
      about ``2^30 / 1484`` at d = 1000); a bad traced value yields the sentinel
      ``INT32_MIN`` everywhere.
    shape: batch shape.

  Raises:
    ValueError: d or a static scale out of range.
  """
  _checks.check_key(key)
  key = fast_key(key)  # the same draws, faster (jaxdp.threefry)
  shape = _checks.check_shape(shape)
  d = _checks.check_int(d, "d", minimum=1)
  scale = check_scale(scale, d)
  with jax.enable_x64(True):
    out = _linf_kernel(key, scale_arg(scale), d=d, n=math.prod(shape))
  return out.reshape(*shape, d)


def check_scale(scale, dim: int):
  """A static scale checked against ``max_scale(dim)`` (the noise dimension; 0 for
  Laplace), before anything is drawn; a traced scale passes (``scale64`` checks it).

  Raises:
    ValueError: a static scale out of range, naming the limit.
  """
  if _checks.is_concrete(scale):
    scale = _checks.check_positive(scale, "scale")
    limit = max_scale(dim)
    if scale > limit:
      raise ValueError(
        f"scale must be at most {limit!r} for exact integer noise of dimension "
        f"d = {dim} (MAX_SCALE = {MAX_SCALE:g}, and the noise must stay within "
        f"+-2^30 except with probability 2^-128); got scale = {scale!r}. Use a "
        "larger eps or a coarser grid."
      )
    return float(scale)
  return _checks.check_positive(scale, "scale", allow_traced=True)


def scale_arg(scale) -> jax.Array:
  """The scale as the kernels' float64 argument (call with x64 enabled): a static
  Python float exactly, a traced scale converted. Every scale is an argument, not
  a constant of the program, so one compilation serves every eps."""
  return jnp.asarray(scale, jnp.float64)


def scale64(scale: jax.Array, dim: int):
  """The scale argument, NaN when out of ``(0, max_scale(dim)]`` (-> the sentinel
  output; a static scale was checked before, by :func:`check_scale`)."""
  return jnp.where((scale > 0) & (scale <= max_scale(dim)), scale, jnp.nan)


def run_chunks(chunk, key, scale, n: int, tail: tuple[int, ...], size: int | None = None):
  """``n`` samples from ``chunk(key, m)`` in chunks of ``size`` (default ``CHUNK``);
  the sentinel everywhere when a traced scale is bad."""
  out = chunked(chunk, key, n, tail, jnp.int32, CHUNK if size is None else size)
  return _checks.mark_invalid(~jnp.isnan(scale), out)


@functools.partial(jax.jit, static_argnames=("n",))
def _laplace_kernel(key, scale, *, n):
  with jax.enable_x64(True):
    scale = scale64(scale, 0)

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, 1, 2), jnp.uint32)
      k, settled, coeff = laplace_round(words, scale)
      return settle(k, settled, words, scale, k_ref, refine_sample, coeff)[:, 0]

    return run_chunks(chunk, key, scale, n, ())


_POSET_STATIC = ("total", "d", "n", "forest", "wide", "narrow")


@functools.partial(jax.jit, static_argnames=_POSET_STATIC)
def _poset_kernel(
  key, tables, scale, *, total, d, n, forest=None, wide=False, narrow=(False, False)
):
  with jax.enable_x64(True):
    device_tables = jax.tree_util.tree_map(jnp.asarray, tables)
    scale = scale64(scale, d + 1)

    def chunk(k_chunk, m):
      if forest is not None:  # A from the rank, the extensions from a permutation
        k_rank, k_bits, k_ref, k_ext = jax.random.split(k_chunk, 4)
        # one word an exponential
        words = jax.random.bits(k_bits, (m, d + 2, 1), jnp.uint32)
        low, size_a, _ = forest_object(k_rank, k_ext, device_tables, total, forest, m)
        k = tree_round_marked(words, low, size_a, scale)
        failed = jnp.zeros((m,), bool)  # no object choice is left undecided
        refine = refine_tree_sample
        redo = lambda words2: tree_round_marked(words2, low, size_a, scale)
        return settle_marked(k, words, scale, k_ref, refine, low, size_a, failed, redo=redo)
      k_rank, k_bits, k_ref = jax.random.split(k_chunk, 3)
      words = jax.random.bits(k_bits, (m, d + 2, 2), jnp.uint32)
      if wide:  # 128-bit ranks (uint64 limbs), the same bijection
        rank = uniform_below_wide(k_rank, total, m)
        seq, size_a = unrank_wide(rank, device_tables, d, total.bit_length(), *narrow)
      else:
        seq, size_a = unrank(uniform_below(k_rank, total, m), device_tables, d)
      k, settled = chain_round(words, seq, size_a, device_tables.up, scale)
      coeff = lambda: simplex_coefficients(seq, size_a, device_tables.up)  # (m, d+2, d+1)
      return settle(k, settled, words, scale, k_ref, refine_sample, coeff)

    return run_chunks(chunk, key, scale, n, (d + 1,), wide_chunk(d) if wide else None)


def wide_chunk(d: int) -> int:
  """Samples per chunk of the 128-bit path: about ``WIDE_CHUNK_BYTES`` of working
  arrays, at ``WIDE_SAMPLE_BYTES`` per sample and element (the fast pass's float64
  intervals over d + 2 exponentials; the refinement branch's extra digits and
  simplex coefficients, which XLA allocates whether or not it runs). 2^21 bytes
  keep a batch's peak memory close to its output (911 samples at d = 22: 2 MB of
  temporaries beside the 9.2 MB output of 10^5 samples)."""
  return int(max(64, min(CHUNK, WIDE_CHUNK_BYTES // (WIDE_SAMPLE_BYTES * (d + 1)))))


@functools.partial(jax.jit, static_argnames=("layout", "n"))
def _tree_kernel(key, tables, scale, *, layout, n):
  with jax.enable_x64(True):
    device_tables = jax.tree_util.tree_map(jnp.asarray, tables)
    d = layout.d
    scale = scale64(scale, d + 1)

    def chunk(k_chunk, m):
      k_obj, k_bits, k_ref = jax.random.split(k_chunk, 3)
      _, size_a, low, failed = tree_objects(k_obj, device_tables, layout, m)
      words = jax.random.bits(k_bits, (m, d + 2, 2), jnp.uint32)
      k = jnp.where(
        failed[:, None], UNSETTLED, tree_round_marked(words, low, size_a, scale)
      )
      refine = refine_tree_sample
      return settle_marked(k, words, scale, k_ref, refine, low, size_a, failed)

    return run_chunks(chunk, key, scale, n, (d + 1,), tree_chunk(layout))


def tree_chunk(layout) -> int:
  """Samples per chunk of the tree path: about ``TREE_CHUNK_BYTES`` of working arrays
  (the per-node and per-slot arrays of a chunk stay in cache). Per sample, a bound
  on XLA's temporaries: mostly the interleaving's sort keys (uint64 per slot, a few
  alive at once), the down-set minima per node and the noise's float64 intervals.
  2^23 bytes keep a batch's peak memory near 1.3x its output (176 samples of the
  d = 128 forest, about 42.6 KB each, beside the 25.8 MB output of 50,000)."""
  per_sample = 64 * layout.slots + 16 * layout.num_nodes + 96 * layout.d
  return int(max(64, min(CHUNK, TREE_CHUNK_BYTES // per_sample)))


@functools.partial(jax.jit, static_argnames=("d", "n"))
def _linf_kernel(key, scale, *, d, n):
  with jax.enable_x64(True):
    scale = scale64(scale, d)

    def chunk(k_chunk, m):
      k_bits, k_ref = jax.random.split(k_chunk)
      words = jax.random.bits(k_bits, (m, 2 * d + 1, 2), jnp.uint32)
      k, settled = linf_round(words, scale, d)
      refine = functools.partial(refine_linf_sample, num_exp=d + 1)
      return settle(k, settled, words, scale, k_ref, refine)

    return run_chunks(chunk, key, scale, n, (d,))
