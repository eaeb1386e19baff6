"""A Session's row count must not leak through the memory a query needs.

A row function that passes the allowlist can need a lot of memory per row (a sort of
2**30 values). Evaluated on all n rows at once it needs n times that, and XLA's
out-of-memory error names the byte count (n * 2**32: n itself), or succeeds or fails
with n while the analyst bisects the size. The rows are evaluated in chunks of a fixed
size, the chunk program runs on stand-in rows before anything is charged, and a
failure is one fixed error.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import session_rows

K = 2**30  # a sort of K float32 values per row: 4 GiB per row, too much for any chunk


def _greedy(r):
  return jnp.sort(jnp.arange(K, dtype=jnp.float32) * r)[0]


def _over_65(a):
  return a > 65


def _ages(n):
  return np.random.default_rng(0).integers(18, 90, size=n)


def test_an_out_of_memory_query_is_refused_alike_for_every_row_count(tmp_path):
  """The reviewer's attack: the error is the same for 7 and 4321 rows, carries no
  byte count, costs nothing (also in the ledger), and the session stays usable."""
  messages = []
  for n in (7, 4321):
    s = jaxdp.Session(
      _ages(n), eps_budget=1.0, ledger=jaxdp.Ledger(tmp_path / f"{n}.db"), dataset="d"
    )
    with pytest.raises(jaxdp.UnsafeQueryError) as info:
      s.sum(_greedy, eps=0.5, bound=1.0)
    messages.append(str(info.value))
    assert s.spent == 0.0 and s.answered == 0
    assert jaxdp.Ledger(tmp_path / f"{n}.db").datasets()[0].charges == 0
    assert np.isfinite(s.count(_over_65, eps=0.5)) and s.answered == 1
  assert messages[0] == messages[1] == session_rows.STAND_IN_FAILED
  assert not re.search(r"\d", messages[0])


def test_a_failure_on_the_held_data_is_one_fixed_error_and_is_charged(monkeypatch):
  """After the stand-in run passed, a run-time failure (here a fake one naming a byte
  count) is charged, raised with one fixed text, and leaves the session usable."""
  s = jaxdp.Session(_ages(30), eps_budget=1.0)

  def failing(*_):
    raise RuntimeError("RESOURCE_EXHAUSTED: while allocating 4321 bytes")

  monkeypatch.setattr(session_rows, "run_on", failing)
  with pytest.raises(jaxdp.UnsafeQueryError) as info:
    s.count(_over_65, eps=0.25)
  assert str(info.value) == session_rows.DATA_FAILED
  monkeypatch.undo()
  assert s.spent == pytest.approx(0.25, rel=1e-6) and s.answered == 1
  assert np.isfinite(s.count(_over_65, eps=0.25)) and s.answered == 2


def _chunked(mech, preparation, values, parts=None, num_parts=1):
  """The statistic of ``values`` (one row each) summed in chunks by the session's
  block programs, with the chunk size the session uses for ``mech``."""
  values = jnp.asarray(values)  # one scalar per row; parts, if any, ride along

  def statistic(rows, valid):
    if parts is None:
      part, contrib = jnp.zeros(rows.shape[:1], jnp.int32), rows
    else:
      part, contrib = rows[:, 1].astype(jnp.int32), rows[:, 0]
    part = session_rows.kept_parts(part, valid, num_parts)
    return mech.part_statistics(contrib, part, num_parts)

  if parts is not None:
    values = jnp.stack([values, jnp.asarray(parts, values.dtype)], axis=1)
  row = jax.ShapeDtypeStruct(values.shape[1:], values.dtype)
  c = session_rows.chunk_rows(mech, preparation)
  q = session_rows.block_query(statistic, lambda acct, stat: stat, c, row, ())
  return np.asarray(q.release(None, session_rows.summed(q, session_rows.hold(values), ())))


BIG = 2**29
N = 3000  # three blocks of 1,024 rows
WHOLE_SUM = jax.jit(lambda m, v, p: m.part_statistics(v, p, 1))  # all rows at once


@pytest.mark.parametrize(
  "values",
  [
    [BIG] * 1500 + [-BIG] * 1499 + [5],  # running sum past 2**31, total 2**29 + 5
    [-BIG] * 1500 + [BIG] * 1499 + [-5],  # the same, negative
    [BIG] * 1502 + [-BIG] * 1498,  # total 2**31: clipped to 2**30
    [-BIG] * 1503 + [BIG] * 1497,  # clipped to -2**30
    [BIG + 1] + [1] * (N - 1),  # a row past the bound counts as 0
  ],
)
def test_chunked_integer_sums_are_the_sum_of_all_rows_at_once(values, monkeypatch):
  """Chunk sums of an exact integer statistic add up exactly (int32 would wrap, a
  clip per chunk would bind), clipped at 2**30 as the sum of all rows is."""
  monkeypatch.setattr(session_rows, "BLOCK", session_rows.CHUNK)  # three blocks
  mech = jaxdp.LaplaceMechanism(1000.0, float(BIG), exact=True)
  assert session_rows.chunk_rows(mech, ("integer", BIG)) == 2  # 2 * 2**29 = 2**30
  values = np.asarray(values, np.int32)
  want = np.asarray(WHOLE_SUM(mech, values, np.zeros(N, np.int32)))
  total = values.astype(np.int64).sum() if values[0] != BIG + 1 else N - 1
  assert want[0] == np.clip(total, -(2**30), 2**30)  # the reference, checked by hand
  np.testing.assert_array_equal(_chunked(mech, ("integer", BIG), values), want)


def test_chunked_histograms_and_float_sums_are_the_sums_of_all_rows_at_once(monkeypatch):
  """Parts from the rows (some out of range, stand-in rows dropped) over 2.5 blocks:
  exact counts equal, float sums within float32 rounding."""
  monkeypatch.setattr(session_rows, "BLOCK", session_rows.CHUNK)
  ages = _ages(2600).astype(np.int32)
  parts = ages // 10 - 2  # -1 and 6 are out of range
  exact_mech = jaxdp.LaplaceMechanism(1.0, exact=True)
  ones = np.ones(2600, np.int32)
  whole = jax.jit(lambda m, v, p: m.part_statistics(v, p, 6))  # all rows at once
  want = np.asarray(whole(exact_mech, ones, parts))
  np.testing.assert_array_equal(want, np.bincount(parts[(parts >= 0) & (parts < 6)]))
  got = _chunked(exact_mech, ("integer", 1), ones, parts, 6)
  np.testing.assert_array_equal(got, want)
  mech = jaxdp.LaplaceMechanism(1.0, 20.0)
  x = ages.astype(np.float32) / 7
  got = _chunked(mech, ("float",), x, parts, 6)
  want = np.asarray(whole(mech, x, parts))
  np.testing.assert_allclose(got, want, rtol=1e-6)
