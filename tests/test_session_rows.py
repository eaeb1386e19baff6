"""A Session's queries reuse their compiled programs, and its rows are held in few,
bounded blocks (:mod:`jaxdp.session_rows`)."""

import contextlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import session_rows

LOWERED = "/jax/core/compile/jaxpr_to_mlir_module_duration"


@contextlib.contextmanager
def lowerings():
  """The programs JAX lowers meanwhile: one per jit cache miss, whether XLA then
  compiles it or the persistent compilation cache holds it."""
  seen = []

  def listener(event, _duration, **_):
    if event == LOWERED:
      seen.append(event)

  jax.monitoring.register_event_duration_secs_listener(listener)
  try:
    yield seen
  finally:
    jax.monitoring.unregister_event_duration_listener(listener)


def _ages(n, seed=0):
  return np.random.default_rng(seed).integers(18, 90, size=n).astype(np.int32)


def test_a_repeated_query_compiles_nothing_new():
  """The second identical query, one with a new threshold (the same program), and
  the same query on a new session of the same row type and block size lower no
  program; a query with a new program does (the count can fail)."""
  s = jaxdp.Session(_ages(3000), 100.0, key=jax.random.key(0))
  s.count(lambda a: a > 65, eps=0.5)
  s.sum(lambda a: a / 100, eps=0.5, bound=1.0)
  other = jaxdp.Session(_ages(4000, 1), 100.0, key=jax.random.key(1))  # 4,096 a block
  with lowerings() as seen:
    s.count(lambda a: a > 65, eps=0.5)
    s.count(lambda a: a > 30, eps=0.5)
    s.sum(lambda a: a / 100, eps=0.5, bound=1.0)
    other.count(lambda a: a > 65, eps=0.5)
  assert seen == []
  with lowerings() as seen:
    s.count(lambda a: a < 30, eps=0.5)
  assert seen


@pytest.mark.parametrize(
  "shape, dtype", [((), jnp.int32), ((15,), jnp.int32), ((4096,), jnp.float32)]
)
def test_blocks_are_few_bounded_and_padded_by_less_than_one(shape, dtype):
  """A block is a power of two of rows, at most BLOCK rows and BLOCK_BYTES bytes,
  and the padding is less than one block; 10^6 int32 values are one block."""
  row = jax.ShapeDtypeStruct(shape, dtype)
  row_bytes = math.prod(shape) * jnp.dtype(dtype).itemsize
  for n in (1, 1023, 1025, 70_000, 10**6, 10**6 + 1, 3 * 2**20 + 5):
    b = session_rows.block_rows(n, row)
    assert b & (b - 1) == 0 and session_rows.CHUNK <= b <= session_rows.BLOCK
    assert b * row_bytes <= session_rows.BLOCK_BYTES
    assert -(-n // b) * b - n < b
  assert session_rows.block_rows(10**6, jax.ShapeDtypeStruct((), jnp.int32)) == 2**20


def test_the_empty_sum_is_reused_unchanged():
  """A query's programs start every sum from one stored empty sum: summing the held
  rows twice gives the exact count twice (the stored zero is neither accumulated
  into nor donated to the block program)."""
  ages = _ages(5000)
  mech = jaxdp.LaplaceMechanism(1.0, exact=True)
  row = jax.ShapeDtypeStruct((), jnp.int32)

  def statistic(rows, valid):
    part = session_rows.kept_parts(jnp.zeros(rows.shape, jnp.int32), valid, 1)
    return mech.part_statistics((rows > 65).astype(jnp.int32), part, 1)

  q = session_rows.block_query(statistic, lambda acct, stat: stat, 1024, row, ())
  held = session_rows.hold(jnp.asarray(ages))
  want = np.sum(ages > 65)
  for _ in range(2):
    assert np.asarray(q.release(None, session_rows.summed(q, held, ())))[0] == want
