"""Session queries against the same release done directly, side by side in one run.

  python benchmarks/session.py [--n 10000,100000,1000000] [--repeats 7] [--out DIR]

Three queries, each secure and not, at each row count ``n``:

* ``poset_counts``: :meth:`jaxdp.Session.poset_counts` on NHIS-3 rows (random
  filters of the 15-question poset, int32), poset-ball noise at eps = 1; directly:
  :func:`jaxdp.release` of a ``PosetCountMechanism(on_invalid="clip")`` on the whole
  array;
* ``count``: :meth:`jaxdp.Session.count` of ``age > 65`` on int32 ages; directly:
  ``jnp.sum(ages > 65)`` over the whole array, then Laplace noise (exact in a secure
  run);
* ``sum``: :meth:`jaxdp.Session.sum` of ``age / 100`` with bound 1 (a grid of
  2^-10 when secure); directly: the clipped values (snapped to the grid's units
  when secure) summed over the whole array, then Laplace noise.

The direct release is one ``jax.jit`` of the statistic and the mechanism; the
session evaluates the row function in chunks of a fixed size
(:mod:`jaxdp.session_rows`) after its checks. For each case: the first call
(tracing and compilation included, and the session's run on a stand-in block:
jax's caches and the session's are emptied before it, the host tables of the poset
built beforehand) and the median of
``--repeats`` repeated calls, the two paths interleaved; and how many programs the
repeated session calls compiled (jax's lowering events, one per jit cache miss;
0 when the compiled query is reused). Writes <out>/session.{json,md}.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from folders import add_out

import jaxdp
from jaxdp import queries, rowwise, session_rows

POSET = jaxdp.Poset.nhis(3)
EPS = 1.0
GRID = 2.0**-10
COMPILES = [0]  # programs lowered so far (compiled, or read from a persistent cache)


def _count_compile(event, _duration, **_):
  if event == "/jax/core/compile/jaxpr_to_mlir_module_duration":
    COMPILES[0] += 1


def _cold() -> None:
  """Empties jax's caches and the session's caches of checked and compiled queries."""
  jax.clear_caches()
  for cache in (rowwise.CHECKED, queries.COMPILED, session_rows.RELEASES):
    cache.clear()


def _data(query: str, n: int) -> np.ndarray:
  rng = np.random.default_rng(n)
  if query != "poset_counts":
    return rng.integers(18, 90, size=n).astype(np.int32)
  chosen = (rng.random((n, POSET.d)) < 0.1).astype(np.float32)
  above = chosen @ np.asarray(POSET.order, np.float32)  # the up-closure: a filter
  return (above > 0).astype(np.int32)


def _over_65(a):
  return a > 65


def _hundredths(a):
  return a / 100


def _session_query(query: str, secure: bool):
  if query == "poset_counts":
    return lambda s: s.poset_counts(POSET, EPS)
  if query == "count":
    return lambda s: s.count(_over_65, EPS)
  grid = GRID if secure else None
  return lambda s: s.sum(_hundredths, EPS, bound=1.0, grid=grid)


def _direct_release(query: str, secure: bool):
  """``f(acct, data) -> (acct, out)``: the statistic over the whole array, then the
  mechanism, in one jitted program."""
  if query == "poset_counts":
    mech = jaxdp.PosetCountMechanism(POSET, EPS, on_invalid="clip", exact=secure)
    return jax.jit(lambda acct, x: jaxdp.release(acct, mech, x))
  if query == "count":
    mech = jaxdp.LaplaceMechanism(EPS, exact=secure)
    cast = jnp.int32 if secure else jnp.float32
    return jax.jit(lambda acct, x: jaxdp.release(acct, mech, jnp.sum(x > 65).astype(cast)))
  if not secure:
    mech = jaxdp.LaplaceMechanism(EPS, 1.0)
    return jax.jit(
      lambda acct, x: jaxdp.release(acct, mech, jnp.sum(jnp.clip(x / 100, -1.0, 1.0)))
    )
  # grid units, as a secure session sums them: sensitivity 1 / GRID + 1/2 units
  mech = jaxdp.LaplaceMechanism(EPS, float(int(1 / GRID + 0.5)), exact=True)

  def units(acct, x):
    u = jnp.round(jnp.clip(x / 100, -1.0, 1.0) / GRID).astype(jnp.int32)
    acct, out = jaxdp.release(acct, mech, jnp.sum(u))
    return acct, out.astype(jnp.float32) * GRID

  return jax.jit(units)


def _timed(fn) -> float:
  t0 = time.perf_counter()
  jax.block_until_ready(fn())
  return time.perf_counter() - t0


def _case(query: str, secure: bool, n: int, repeats: int) -> dict:
  data = _data(query, n)
  ask = _session_query(query, secure)
  keys = (None, None) if secure else jax.random.split(jax.random.key(n))  # one each
  budget = 1e9

  _cold()
  direct = _direct_release(query, secure)
  state = {"acct": jaxdp.Accountant.create(budget, key=keys[0], secure=secure)}
  x = jax.block_until_ready(jnp.asarray(data))

  def direct_call():
    state["acct"], out = direct(state["acct"], x)
    return out

  direct_first = _timed(direct_call)
  _cold()
  s = jaxdp.Session(data, budget, key=keys[1], secure=secure)
  jax.block_until_ready(s._held.blocks)  # the padded copy, made before any query
  session_first = _timed(lambda: ask(s))
  sess, dirs, compiles = [], [], 0
  for _ in range(repeats):  # interleaved: the same load on both
    before = COMPILES[0]
    sess.append(_timed(lambda: ask(s)))
    compiles += COMPILES[0] - before
    dirs.append(_timed(direct_call))
  session_s, direct_s = statistics.median(sess), statistics.median(dirs)
  return {
    "query": query,
    "secure": secure,
    "n": n,
    "session_first_s": session_first,
    "direct_first_s": direct_first,
    "session_s": session_s,
    "direct_s": direct_s,
    "ratio": session_s / direct_s,
    "session_compiles_repeated": compiles,
  }


def _table(rows) -> str:
  lines = [
    "| query | secure | rows | first call: session / direct (s) | repeated, median: "
    "session / direct (ms) | session / direct | compilations, repeated session calls |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
      f"| {r['query']} | {r['secure']} | {r['n']:,} | {r['session_first_s']:.2f} / "
      f"{r['direct_first_s']:.2f} | {1e3 * r['session_s']:.2f} / "
      f"{1e3 * r['direct_s']:.2f} | {r['ratio']:.2f} | "
      f"{r['session_compiles_repeated']} |"
    )
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument(
    "--n", default="10000,100000,1000000", help="row counts (default: 10^4,10^5,10^6)"
  )
  ap.add_argument("--repeats", type=int, default=7, help="repeated calls (default: 7)")
  ap.add_argument(
    "--queries", default="poset_counts,count,sum", help="which queries (default: all)"
  )
  add_out(ap)
  args = ap.parse_args(argv)
  sizes = [int(v) for v in args.n.split(",")]
  jax.monitoring.register_event_duration_secs_listener(_count_compile)
  for query in args.queries.split(","):  # host tables and first-time imports
    for secure in (False, True):
      _case(query, secure, 1024, 1)
  rows = []
  for query in args.queries.split(","):
    for secure in (False, True):
      for n in sizes:
        rows.append(_case(query, secure, n, args.repeats))
        print(rows[-1], flush=True)
  write_results(args.out, "session", {"machine": machine(), "rows": rows}, _table(rows))


if __name__ == "__main__":
  main()
