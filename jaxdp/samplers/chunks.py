"""Large draws in fixed-size chunks: one compiled draw, a sequential loop, memory of
one chunk plus the output (shared by :mod:`jaxdp.random` and :mod:`jaxdp.exact`).

On the CPU a chunk is ``CHUNK`` samples (its working set stays in cache). An
accelerator runs best on one large batch: :func:`device_chunk` sizes the float
samplers' chunks from the device's memory (``Device.memory_stats()``), so a batch of
millions is one step there, with no sequential loop.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxdp import _checks

__all__ = [
  "CHUNK",
  "DEVICE_MEMORY_FRACTION",
  "MAX_CHUNK",
  "chunked",
  "device_chunk",
  "varying_like",
]

CHUNK = 1 << 15  # samples per chunk: bounds peak memory of large batches
MAX_CHUNK = 1 << 24  # the largest device chunk (samples)
DEVICE_MEMORY_FRACTION = 1 / 16  # of an accelerator's memory, for one chunk's work


def device_chunk(bytes_per_sample: int, device=None) -> int:
  """Samples per chunk on ``device`` (default: JAX's default device).

  The CPU, and any device that reports no memory limit, take ``CHUNK``. Elsewhere
  the largest power of two whose working set, ``bytes_per_sample`` each, fits in
  ``DEVICE_MEMORY_FRACTION`` of the device's ``bytes_limit``, between ``CHUNK`` and
  ``MAX_CHUNK`` (an H200's 141 GB give 2^20 samples at 8 KiB each). The chunk decides
  how a batch is split into keys, so draws of more than ``CHUNK`` samples from one
  key differ between the CPU and such a device (as their float arithmetic does).

  Args:
    bytes_per_sample: the kernel's working set per sample, in bytes (an estimate).
    device: a ``jax.Device`` (or any object with ``platform`` and
      ``memory_stats()``).

  Returns:
    A power of two in [CHUNK, MAX_CHUNK].
  """
  if device is None:
    device = jax.devices()[0]
  if getattr(device, "platform", "cpu") == "cpu":
    return CHUNK
  try:
    stats = device.memory_stats() or {}
  except Exception:  # backends without memory statistics
    stats = {}
  limit = stats.get("bytes_limit") or stats.get("bytes_reservable_limit")
  if not limit:
    return CHUNK
  fit = int(limit * DEVICE_MEMORY_FRACTION) // max(1, int(bytes_per_sample))
  if fit < CHUNK:
    return CHUNK
  return min(MAX_CHUNK, 1 << (fit.bit_length() - 1))


def chunked(fn, key, n: int, tail: tuple[int, ...], dtype, chunk: int = CHUNK):
  """fn(key, m) -> (m, *tail); n samples in ``chunk``-sized pieces with split keys.

  A sequential loop writes each chunk into the output in place, so memory stays one
  chunk plus the output. When ``chunk`` does not divide ``n`` the last chunk is
  written at ``n - chunk`` over the end of the one before: every output row is still
  one fresh draw of its chunk's own key (the rows it replaces are discarded whatever
  their values), and no padded copy of the output is made and sliced. Under
  ``shard_map`` the buffer varies over the draws' mesh axes (a loop carry must keep
  its type); ``fn`` appears once in the program, so it compiles once.
  """
  if n == 0:
    return jnp.zeros((0, *tail), dtype)
  if n > jnp.iinfo(jnp.result_type(int)).max:  # chunk offsets would wrap
    raise ValueError(
      f"{n:,} draws in one call are more than {jnp.iinfo(jnp.result_type(int)).max:,}, "
      "the largest row offset JAX's integer dtype holds (int32 with x64 off): the "
      "last chunks would be written at wrapped offsets, leaving rows without noise. "
      "Draw in several calls, or enable x64."
    )
  if n <= chunk:
    return fn(key, n)
  keys = jax.random.split(key, -(-n // chunk))
  # offsets in int32 where they fit: an enclosing jit with x64 off lowers a batched
  # update (a caller's vmap) with int32 bounds, which int64 offsets fail to match
  offset = jnp.int32 if n <= jnp.iinfo(jnp.int32).max else jnp.int64

  def put(out, xs):
    i, k = xs
    start = jnp.minimum(i * chunk, n - chunk).astype(offset)
    return jax.lax.dynamic_update_slice_in_dim(out, fn(k, chunk), start, axis=0), None

  # The keys are scanned over (and indexed only inside eval_shape's trace): JAX's
  # key-reuse checker (jax_debug_key_reuse) then sees one fresh key per step.
  out = varying_like(
    jax.eval_shape(lambda ks: fn(ks[0], chunk), keys), jnp.zeros((n, *tail), dtype)
  )
  return jax.lax.scan(put, out, (jnp.arange(keys.shape[0]), keys))[0]


def varying_like(spec, x):
  """``x`` cast to vary over the ``shard_map`` mesh axes that values of type ``spec``
  vary over (none outside ``shard_map``, or under ``check_vma=False``)."""
  axes = _checks.varying_axes(spec)
  if not axes:
    return x
  return jax.lax.pcast(x, tuple(sorted(axes)), to="varying")
