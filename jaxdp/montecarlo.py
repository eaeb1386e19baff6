"""Streaming Monte Carlo estimates of E[f(X)] over up to 10^9 draws, in bounded memory.

Draws are made in chunks of ``chunk_size``; each chunk is cut into ``blocks`` equal
blocks, sharded over the local devices with ``jax.sharding``. Every block returns
its count, mean and sum of squared deviations; the host combines blocks in a fixed
order in float64 (Chan et al.'s pairwise update). Memory does not grow with the
number of draws, and because each block's key is ``fold_in(fold_in(key, chunk),
block)`` and each block is reduced on one device, the estimate depends only on the
key, the sizes and the functions, not on the number of devices.

Multi-process / multi-host: call ``jax.distributed.initialize()`` in every process
first, then pass ``devices=jax.devices()`` (all processes' devices): the block axis is
sharded over the global mesh and the per-block scalars come back replicated to every
process, so each gets the same estimate (tested with two processes on localhost: bit
for bit the single-device result). Keep ``blocks`` a multiple of the global device
count.

References:
  T. Chan, G. Golub, R. LeVeque, "Algorithms for computing the sample variance", 1983.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxdp import _checks
from jaxdp._cache import value_cache
from jaxdp.typing import KeyArray

__all__ = ["Estimate", "Moments", "estimate", "merge_moments"]


class Moments(NamedTuple):
  """Count, mean and sum of squared deviations of a set of values (per statistic)."""

  n: float
  mean: np.ndarray
  m2: np.ndarray


def merge_moments(a: Moments, b: Moments) -> Moments:
  """The moments of the union of two disjoint sets of values (float64).

  Chan, Golub & LeVeque's pairwise update: exact in real arithmetic, and stable (no
  sum of squares is ever formed). An empty side (n = 0) returns the other.
  """
  if b.n == 0:
    return a
  if a.n == 0:
    return b
  total = a.n + b.n
  delta = b.mean - a.mean
  return Moments(
    total, a.mean + delta * (b.n / total), a.m2 + b.m2 + delta * delta * (a.n * b.n / total)
  )


class Estimate(NamedTuple):
  """Monte Carlo estimate of E[f(X)] for each statistic: scalars (0-d arrays) when
  the statistic gives one value per draw, ``(k,)`` arrays for ``k`` values."""

  mean: np.ndarray
  var: np.ndarray  # sample variance of f(X)
  stderr: np.ndarray  # standard error of the mean
  n: int


def estimate(
  key: KeyArray,
  draw: Callable,
  statistic: Callable,
  num_samples: int,
  *,
  chunk_size: int = 1 << 20,
  blocks: int = 16,
  devices: Sequence | None = None,
  progress: bool | None = None,
  label: str = "",
) -> Estimate:
  """Estimates E[statistic(draw)] from ``num_samples`` independent draws.

  Args:
    key: one PRNG key; the result is a deterministic function of it.
    draw: ``draw(key, m)`` -> a batch of ``m`` draws (array or pytree with leading
      axis m), traceable.
    statistic: ``statistic(batch)`` -> ``(m,)`` or ``(m, k)`` values, traceable;
      each block reduces them in float32, or float64 for a float64 statistic.
      The compiled chunk function is cached on ``(draw, statistic, sizes,
      devices)``: pass the same function objects, or hashable callables that compare
      equal (module-level functions, frozen dataclasses with ``__call__``), to reuse
      it; a new lambda on every call compiles again.
    num_samples: total draws N (any positive int, up to 10^9 and beyond).
    chunk_size: draws per device round trip; must be a multiple of ``blocks``
      (lowered to fit ``num_samples`` when that is smaller).
    blocks: blocks per chunk (the unit of sharding and of reduction).
    devices: devices to shard over (default: all local devices). Only as many as
      divide ``blocks`` are used.
    progress: print progress to stderr (default: when the run takes over 3 s).
    label: what is being estimated, shown in the progress lines.

  Returns:
    An :class:`Estimate` with float64 mean, variance and standard error (scalars
    for a statistic with one value per draw).
  """
  _checks.check_key(key)
  num_samples = _checks.check_int(num_samples, "num_samples", minimum=1)
  blocks = _checks.check_int(blocks, "blocks", minimum=1)
  chunk_size = _checks.check_int(chunk_size, "chunk_size", minimum=blocks)
  if chunk_size % blocks:
    raise ValueError(f"chunk_size ({chunk_size}) must be a multiple of blocks ({blocks}).")
  devices = list(jax.local_devices() if devices is None else devices)
  if not devices:
    raise ValueError("devices must not be empty.")
  n_dev = max(k for k in range(1, len(devices) + 1) if blocks % k == 0)
  chunk_size = min(chunk_size, -(-num_samples // blocks) * blocks)
  block_size = chunk_size // blocks
  run_chunk = _chunk_fn(draw, statistic, block_size, blocks, tuple(devices[:n_dev]))
  scalar = len(jax.eval_shape(lambda k: statistic(draw(k, block_size)), key).shape) == 1

  num_chunks = -(-num_samples // chunk_size)
  acc = Moments(0.0, None, None)
  start = time.perf_counter()
  last = start
  for c in range(num_chunks):
    valid = min(chunk_size, num_samples - c * chunk_size)
    b_n, b_mean, b_m2 = jax.device_get(run_chunk(jax.random.fold_in(key, c), valid))
    for n_b, mu_b, m2_b in zip(b_n, b_mean.astype(np.float64), b_m2.astype(np.float64)):
      acc = merge_moments(acc, Moments(float(n_b), mu_b, m2_b))
    count = acc.n
    now = time.perf_counter()
    show = progress if progress is not None else (now - start > 3.0)
    if show and (now - last > 2.0 or c == num_chunks - 1):
      rate = count / (now - start)
      eta = (num_samples - count) / rate if rate > 0 else math.inf
      print(
        f"[jaxdp.montecarlo{': ' + label if label else ''}] "
        f"{int(count):,}/{num_samples:,} draws "
        f"({rate:,.0f}/s, {eta:,.0f}s left)",
        file=sys.stderr,
        flush=True,
      )
      last = now
  mean, m2 = acc.mean, acc.m2
  var = m2 / (count - 1) if count > 1 else np.full_like(m2, np.nan)
  stderr = np.sqrt(var / count)
  if scalar:
    mean, var, stderr = mean[0], var[0], stderr[0]
  return Estimate(
    mean=np.asarray(mean), var=np.asarray(var), stderr=np.asarray(stderr), n=int(count)
  )


@value_cache(maxsize=16)
def _chunk_fn(draw, statistic, block_size, blocks, devices):
  """The jitted per-chunk function, cached (by value for hashable callables) so
  repeated estimates compile once."""

  def one_block(key, block, valid):
    x = draw(jax.random.fold_in(key, block), block_size)
    v = jnp.asarray(statistic(x))
    if v.ndim == 1:
      v = v[:, None]
    if v.shape[0] != block_size:
      raise ValueError(
        f"statistic must return one row per draw; got shape {v.shape} for a batch of "
        f"{block_size}."
      )
    # at least float32; a float64 statistic (x64 on) stays float64: float32 would
    # round values to their ulp (8 at 10^8) and the variance with them
    v = v.astype(jnp.promote_types(v.dtype, jnp.float32))
    idx = block * block_size + jnp.arange(block_size)
    w = (idx < valid).astype(v.dtype)[:, None]
    n = jnp.sum(w[:, 0])
    mu = jnp.sum(v * w, axis=0) / jnp.maximum(n, 1.0)
    m2 = jnp.sum(w * (v - mu) ** 2, axis=0)
    return n, mu, m2

  mesh = Mesh(np.array(devices), ("blocks",))

  def per_device(key, ids, valid):
    # Blocks are reduced one after another with the same unbatched code on every
    # device, so each block's numbers do not depend on how many devices there are.
    return jax.lax.map(lambda b: one_block(key, b, valid), ids)

  spec = PartitionSpec("blocks")
  mapped = jax.shard_map(
    per_device,
    mesh=mesh,
    in_specs=(PartitionSpec(), spec, PartitionSpec()),
    out_specs=(spec, spec, spec),
  )

  replicated = NamedSharding(mesh, PartitionSpec())

  @jax.jit
  def run(key, valid):
    # The per-block scalars come back replicated on every device, so each process of
    # a multi-process run can read them (a block-sharded result spans other hosts).
    return jax.lax.with_sharding_constraint(
      mapped(key, jnp.arange(blocks), valid), replicated
    )

  return run
