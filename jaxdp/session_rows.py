"""The rows of a :class:`~jaxdp.Session`, evaluated in chunks of a fixed size.

An analyst's row function runs on ``c`` rows at a time (``c`` at most :data:`CHUNK`,
fixed by the mechanism), never on all the rows at once: the memory a query needs, and
so whether it runs or fails, depends on the checked program and ``c`` only, never on
the number of rows. The held data is padded with stand-in rows (zeros) to whole
blocks (:func:`block_rows`; one block program call evaluates a block's chunks one
after the other), and a stand-in row's part index is set out of range, so it adds
nothing. The chunks' per-part statistics are summed exactly (integers in two int32
words, floats with a compensated float32 sum, or in 64 bits with x64), so the total
is the statistic of all rows at once; a float32 total past the dtype's range
saturates as it is summed (never inf - inf, a NaN the mechanism would refuse on those
data only).

Before anything is charged the block program runs once on a stand-in block (zeros):
a program that cannot run (out of memory, any run-time error) is refused then, at no
cost, with one fixed message. A failure on the held data after that is charged and
answered with one fixed error (:func:`failed_on_the_data`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxdp import _checks, exact
from jaxdp.mechanisms.statistics import WIDE_CLIP
from jaxdp.rowwise import LRU, UnsafeQueryError

__all__ = [
  "BLOCK",
  "BLOCK_BYTES",
  "CHUNK",
  "BlockQuery",
  "RELEASES",
  "Held",
  "block_query",
  "block_rows",
  "chunk_rows",
  "failed_on_the_data",
  "hold",
  "prechecked",
  "run_on",
  "summed",
  "traced",
]

CHUNK = 1024  # at most this many rows evaluated at once (a power of two)
BLOCK = 1 << 20  # at most this many rows per block program call (one dispatch each)
BLOCK_BYTES = 1 << 26  # and blocks of at most 64 MiB of rows (unless one chunk is more)
_BITS = 30  # integer sums are kept as hi * 2**30 + lo, 0 <= lo < 2**30
STAND_IN_FAILED = (
  "the query cannot run on a stand-in chunk of rows (it ran out of memory or failed "
  "at run time): lower the memory its row function needs per row. Nothing was spent."
)
DATA_FAILED = (
  "the query failed while running on the held data, after it ran on a stand-in "
  "chunk of rows: it is charged and its key used (an exact draw refused after "
  "drawing, or the machine ran out of memory); nothing was released."
)


class Held(NamedTuple):
  """The held data in blocks of equal size, the first ``n`` rows the data's and the
  rest stand-in rows (zeros)."""

  blocks: tuple
  n: int


def block_rows(n: int, row: jax.ShapeDtypeStruct) -> int:
  """Rows per block for ``n`` rows of type ``row``: a power of two from
  :data:`CHUNK` up to :data:`BLOCK`, at least ``n`` if that fits, and at most
  :data:`BLOCK_BYTES` of rows. It sets how many chunks one program call evaluates
  one after the other (a query dispatches one call per block), not the memory a
  chunk needs; the stand-in rows that pad the data fill less than one block."""
  row_bytes = max(1, math.prod(row.shape) * jnp.dtype(row.dtype).itemsize)
  b = CHUNK
  while b < n and 2 * b <= BLOCK and 2 * b * row_bytes <= BLOCK_BYTES:
    b *= 2
  return b


def hold(data: jax.Array) -> Held:
  """``data`` (one row per person) padded to whole blocks."""
  n = data.shape[0]
  b = block_rows(n, jax.ShapeDtypeStruct(data.shape[1:], data.dtype))
  m = max(1, -(-n // b))
  pad = jnp.zeros((m * b - n,) + data.shape[1:], data.dtype)
  padded = jnp.concatenate([data, pad])
  return Held(tuple(padded[i * b : (i + 1) * b] for i in range(m)), n)


def chunk_rows(mech, preparation: tuple) -> int:
  """Rows evaluated at once: :data:`CHUNK`, or, for an exact integer statistic of
  per-row bound ``b`` (the sensitivity, in grid units with a grid), the largest power
  of two ``c`` with ``c b <= 2**30``, so that no chunk's sum reaches the clip at
  ``2**30`` and the chunk sums add up to the statistic of all rows (decided from the
  mechanism alone)."""
  if preparation[0] not in ("integer", "grid"):
    return CHUNK
  bound = max(1, int(np.ceil(float(mech.sensitivity))))
  c = CHUNK
  while c > 1 and c * bound > exact.LIMIT:
    c //= 2
  return c


def kept_parts(part, valid, num_parts: int):
  """Part indices as int32, -1 (dropped) for stand-in rows and indices outside
  ``[0, num_parts)`` (compared in the index's own dtype, then cast exactly)."""
  keep = valid
  if jnp.issubdtype(part.dtype, jnp.signedinteger):
    keep = keep & (part >= 0)
  if jnp.iinfo(part.dtype).max >= num_parts:
    keep = keep & (part < num_parts)
  return jnp.where(keep, part.astype(jnp.int32), -1)


# ------------------------------------------------------------------ exact sums
def _wide() -> bool:
  return jnp.dtype(jnp.result_type(float)) == jnp.float64


def zero(stat: jax.ShapeDtypeStruct):
  """The empty sum of statistics of type ``stat`` (and no invalid chunk yet)."""
  if _wide():
    dtype = jnp.int64 if jnp.issubdtype(stat.dtype, jnp.integer) else jnp.float64
    words = (jnp.zeros(stat.shape, dtype),)
  else:
    words = (jnp.zeros(stat.shape, stat.dtype), jnp.zeros(stat.shape, stat.dtype))
  return words, jnp.zeros((), bool)


def add(acc, s):
  """``acc`` plus one chunk's statistic ``s``, exactly (floats: compensated)."""
  words, bad = acc
  integer = jnp.issubdtype(s.dtype, jnp.integer)
  if integer:  # the sentinel of an invalid statistic marks the total invalid
    bad = bad | jnp.any(s == jnp.iinfo(s.dtype).min)
  if _wide():
    return (words[0] + s.astype(words[0].dtype),), bad
  hi, lo = words
  if integer:  # |s| <= 2**30 (chunk_rows), 0 <= lo < 2**30: t fits int32
    t = lo + s
    carry = t >> _BITS  # floor division by 2**30
    return (hi + carry, t - (carry << _BITS)), bad
  total = hi + s  # Knuth's two-sum: hi + lo holds the sum to twice the precision
  b = total - hi
  lo = lo + ((hi - (total - b)) + (s - b))
  # past the dtype's range (each s is finite, clipped): saturate rather than let
  # inf - inf make NaN, which the mechanism would refuse on these data only;
  # clipping each partial sum is 1-Lipschitz in every chunk's statistic
  over = jnp.isinf(total)
  big = jnp.finfo(total.dtype).max
  return (jnp.where(over, jnp.sign(total) * big, total), jnp.where(over, 0, lo)), bad


def total(acc, stat: jax.ShapeDtypeStruct):
  """The sum as a statistic of type ``stat``, clipped as the statistic of all rows
  at once is (integers to +-2**30 in int32, +-WIDE_CLIP in int64; floats to the
  dtype's finite range)."""
  words, bad = acc
  if jnp.issubdtype(stat.dtype, jnp.integer):
    limit = exact.LIMIT if stat.dtype == jnp.int32 else WIDE_CLIP
    if _wide():
      out = jnp.clip(words[0], -limit, limit).astype(stat.dtype)
    else:
      hi, lo = words
      inside = jnp.where(hi == -1, lo - (1 << _BITS), lo)  # hi in {-1, 0}
      out = jnp.where(hi >= 1, limit, jnp.where(hi <= -2, -limit, inside))
    return _checks.mark_invalid(~bad, out.astype(stat.dtype))
  big = float(jnp.finfo(stat.dtype).max)
  s = words[0] if _wide() else words[0] + words[1]
  return jnp.clip(s, -big, big).astype(stat.dtype)


# ------------------------------------------------------------------ the programs
class BlockQuery:
  """A query's block program and release program, compiled once.

  ``step(acc, block, start, n, *consts)`` adds one block's statistics to ``acc``
  (starting from ``zero``, the empty sum); ``release(acct, acc)`` releases the total.
  """

  def __init__(self, step: Callable, release: Callable, stat: jax.ShapeDtypeStruct):
    self.step, self.release, self.stat = step, release, stat
    self.zero = zero(stat)  # made once, not at every query
    self.ran_on_stand_in = set()  # block sizes
    self.traced_for = set()  # accountant types whose release traced (see traced)


RELEASES = LRU(256)  # (release_key, statistic type) -> jitted release of the sum


def block_query(
  statistic: Callable,
  release: Callable,
  c: int,
  row: jax.ShapeDtypeStruct,
  consts,
  release_key=None,
) -> BlockQuery:
  """The programs of a query whose chunk statistic is ``statistic(rows, valid,
  *consts)`` (``c`` rows) and whose release of the summed statistic is
  ``release(acct, stat)``; queries with one ``release_key`` (not None) and statistic
  type share one compiled release."""
  chunk = jax.ShapeDtypeStruct((c,) + row.shape, row.dtype)
  stat = jax.eval_shape(statistic, chunk, jax.ShapeDtypeStruct((c,), bool), *consts)
  key = None if release_key is None else (release_key, stat.shape, str(stat.dtype))
  released = None if key is None else RELEASES.get(key)
  if released is None:
    released = jax.jit(lambda acct, acc: release(acct, total(acc, stat)))
    if key is not None:
      RELEASES.put(key, released)

  def step(acc, block, start, n, *consts):
    size = block.shape[0]  # a multiple of c
    index = start + jnp.arange(size)  # the default integer: int64 with x64 (> 2**31 rows)
    valid = (index < n).reshape(size // c, c)
    rows = block.reshape((size // c, c) + row.shape)

    def body(acc, xs):
      return add(acc, statistic(*xs, *consts)), None

    return lax.scan(body, acc, (rows, valid))[0]

  return BlockQuery(jax.jit(step), released, stat)


def prechecked(q: BlockQuery, held: Held, row: jax.ShapeDtypeStruct, consts) -> None:
  """Runs ``q``'s block program once on a stand-in block (zeros, no valid row) of
  the held blocks' size, before anything is charged. An error raised while tracing
  propagates (it depends on the program and the row's shape and dtype only).

  Raises:
    UnsafeQueryError: the program fails at run time (out of memory, or any other
      run-time error), with one fixed message; nothing was spent.
  """
  size = held.blocks[0].shape[0]
  if size in q.ran_on_stand_in:
    return
  block = jnp.zeros((size,) + row.shape, row.dtype)
  try:
    jax.block_until_ready(q.step(q.zero, block, 0, 0, *consts))
  except RuntimeError:
    failed = True
  else:
    failed = False
  if failed:  # raised outside the handler: the run-time error is not chained
    raise UnsafeQueryError(STAND_IN_FAILED)
  q.ran_on_stand_in.add(size)


def summed(q: BlockQuery, held: Held, consts):
  """The summed statistic of the held rows (one block program call per block)."""
  acc = q.zero
  start = 0
  for block in held.blocks:
    acc = q.step(acc, block, start, held.n, *consts)
    start += block.shape[0]
  return acc


def traced(q: BlockQuery, acct) -> None:
  """Traces ``q``'s release from ``acct`` without running it: its errors (decided
  from the mechanism, the budget and the statistic's type, never the rows) raise
  here, before anything is drawn; any error of the run that follows is the data's."""
  leaves, tree = jax.tree_util.tree_flatten(acct)
  kind = (tree, tuple(jax.typeof(x) for x in leaves))  # what the trace depends on
  if kind not in q.traced_for:
    jax.eval_shape(q.release, acct, q.zero)
    q.traced_for.add(kind)


def run_on(q: BlockQuery, held: Held, acct, consts):
  """``q`` released from ``acct`` on the held rows, once its results are computed
  (a run-time error is raised here, not when a result is read later)."""
  return jax.block_until_ready(q.release(acct, summed(q, held, consts)))


def failed_on_the_data() -> None:
  """Raises the one error of a query that failed on the held data.

  Raises:
    UnsafeQueryError: always, with a fixed message.
  """
  raise UnsafeQueryError(DATA_FAILED)
