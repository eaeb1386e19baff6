"""Cost of a durable budget: releases through a Session with and without a ledger.

  python benchmarks/ledger.py [--releases 20] [--rounds 15] [--batch 100]
                              [--charges 100000] [--rows 1000000] [--dir DIR]
                              [--out DIR]

In one run, side by side, for the rollback journal (the default: fsyncs of the
journal and of the file) and the write-ahead log (one fsync), per release (wall
time, and the process's CPU time, which leaves out the waits for the disk; best of
``--rounds`` rounds of ``--releases`` releases, every setting called in turn in each
round; a setting's ratio to its floor is the median over the rounds of the ratio
within a round, releases made under the same load):

* the floor: one durable sqlite transaction per release (``synchronous=FULL``,
  ``BEGIN IMMEDIATE``, the journal), writing what a charge writes and nothing else;
* ``Ledger.charge`` alone (no release), from the accountant made first (each charge
  also checks that this earlier state was held);
* ``Session.count`` with a :class:`jaxdp.Ledger` (one charge committed before each
  release), against its floor: the transaction's plus ``Session.count`` with no
  ledger (also measured);

and, once:

* a batch: ``Ledger.charge_many`` commits ``--batch`` charges in one transaction,
  then the releases run (eagerly); and ``Ledger.charge_plan`` plans a jitted query
  function of ``--batch`` releases (:func:`jaxdp.plan`, which traces it), commits
  them in one transaction, then the function runs once;
* opening a ledger of ``--charges`` charges (the whole hash chain verified) and
  summarizing it;
* dataset fingerprints of ``--rows`` rows (process CPU time, best of 3,
  interleaved): the current scheme (columns in a canonical order) against the first
  (cells in the order given).

The ledger lives in ``--dir`` (default: a temporary folder on the disk holding this
checkout, since the fsyncs are the cost; its file system is recorded). Writes
<out>/ledger.{json,md}.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from floor_rows import median_ratio
from folders import add_out

import jaxdp
from jaxdp.ledger.creation import SCHEMA_SQL
from jaxdp.ledger.fingerprint import legacy_rows_fingerprint, rows_fingerprint
from jaxdp.ledger.index import Index
from jaxdp.ledger.store import JOURNALS, Store

DATA = np.arange(10_000)


def _below(v):
  return v < 5_000


def _floor(path: Path, journal: str, body: str):
  """The floor: one durable sqlite transaction per release and nothing else (the
  ledger's settings: ``synchronous=FULL``, ``BEGIN IMMEDIATE``, the journal), writing
  what a charge writes (one entry row of a charge's size, the head row)."""
  conn = sqlite3.connect(path, isolation_level=None)
  conn.execute(f"PRAGMA journal_mode={journal}")
  conn.execute("PRAGMA synchronous=FULL")
  for statement in SCHEMA_SQL:
    conn.execute(statement)
  conn.execute("INSERT INTO head VALUES (1, 0, ?)", ("0" * 64,))
  seq = [0]

  def commit():
    seq[0] += 1
    conn.execute("BEGIN IMMEDIATE")
    row = (seq[0], "floor", "charge", "t" * 32, body, "0" * 64, "1" * 64)
    conn.execute("INSERT INTO entries VALUES (?, ?, ?, ?, ?, ?, ?)", row)
    conn.execute("UPDATE head SET seq = ?, hash = ? WHERE id = 1", (seq[0], "2" * 64))
    conn.execute("COMMIT")

  return commit


def _per_release(folder: Path, n: int, rounds: int) -> dict:
  """Seconds per release, wall and this process's CPU time (each the best of
  ``rounds`` rounds of ``n`` releases per setting, the settings called in turn in
  each round: their ratios compare releases made under the same load): per journal,
  the floor (:func:`_floor`), ``Ledger.charge`` alone (from the accountant made
  first, so each charge also checks that its earlier state was held) and
  ``Session.count`` with the ledger; and ``Session.count`` with no ledger."""
  mech = jaxdp.LaplaceMechanism(0.01)
  blocks = {}

  def block(fn):
    return lambda: [fn() for _ in range(n)]

  session = jaxdp.Session(DATA, 1e6)
  blocks["Session.count, no ledger"] = block(lambda: session.count(_below, eps=0.01))
  for journal in JOURNALS:
    charges = jaxdp.Ledger(folder / f"charges-{journal}.db", journal=journal)
    acct = charges.accountant("charges", DATA, 1e6)
    charges.charge("charges", acct, mech)
    with contextlib.closing(sqlite3.connect(folder / f"charges-{journal}.db")) as c:
      (body,) = c.execute("SELECT body FROM entries ORDER BY seq DESC").fetchone()
    floor = _floor(folder / f"floor-{journal}.db", journal, body)
    ledger = jaxdp.Ledger(folder / f"sessions-{journal}.db", journal=journal)
    s = jaxdp.Session(DATA, 1e6, ledger=ledger, dataset="sessions")
    blocks[f"{journal}: floor, one transaction"] = block(floor)
    blocks[f"{journal}: Ledger.charge"] = block(
      functools.partial(charges.charge, "charges", acct, mech)
    )
    blocks[f"{journal}: Session.count, ledger"] = block(
      functools.partial(s.count, _below, eps=0.01)
    )
  times = {name: [] for name in blocks}
  for fn in blocks.values():
    fn()  # compiles
  for _ in range(rounds):
    for name, fn in blocks.items():
      t0, c0 = time.perf_counter(), time.process_time()
      fn()
      times[name].append(((time.perf_counter() - t0) / n, (time.process_time() - c0) / n))
  return {
    name: {
      "wall": min(w for w, _ in t),
      "cpu": min(c for _, c in t),
      "rounds": [{"wall": w, "cpu": c} for w, c in t],
    }
    for name, t in times.items()
  }


def _many(folder: Path, k: int, repeats: int = 3) -> dict:
  """k charges committed in one transaction (charge_many), then k eager releases."""
  x = jnp.asarray(float(_below(DATA).sum()))
  ledger = jaxdp.Ledger(folder / "many.db")
  acct = ledger.accountant("many", DATA, 1e6)
  mechs = [jaxdp.LaplaceMechanism(0.01)] * k
  best = (np.inf, np.inf)
  for r in range(repeats + 1):
    t0 = time.perf_counter()
    acct = ledger.charge_many("many", acct, mechs)
    t1 = time.perf_counter()
    for mech in mechs:
      acct, out = jaxdp.release(acct, mech, x)
    jax.block_until_ready(out)
    t2 = time.perf_counter()
    if r:  # the first round compiles
      best = min(best, (t1 - t0, t2 - t1), key=sum)
  return {
    "releases": k,
    "commit_seconds": best[0],
    "run_seconds": best[1],
    "releases_per_s": k / sum(best),
  }


def _batch(folder: Path, k: int, repeats: int = 3) -> dict:
  """A jitted function of k releases: plan + commit in one transaction, then run."""

  def program(acct, x):
    for _ in range(k):
      acct, _ = jaxdp.release(acct, jaxdp.LaplaceMechanism(0.01), x)
    return acct, x

  x = jnp.asarray(float(_below(DATA).sum()))
  run = jax.jit(program)
  ledger = jaxdp.Ledger(folder / "batch.db")
  acct = ledger.accountant("batch", DATA, 1e6)
  best = (np.inf, np.inf)
  for r in range(repeats + 1):
    t0 = time.perf_counter()
    pre = ledger.charge_plan("batch", acct, program, x)
    t1 = time.perf_counter()
    acct, out = run(pre, x)
    jax.block_until_ready(out)
    t2 = time.perf_counter()
    if r:  # the first round compiles
      best = min(best, (t1 - t0, t2 - t1), key=sum)
  return {
    "releases": k,
    "commit_seconds": best[0],
    "run_seconds": best[1],
    "releases_per_s": k / sum(best),
  }


def _open(folder: Path, n: int) -> dict:
  """A ledger of n charges (written through the store in one transaction), opened."""
  path = folder / "large.db"
  ledger = jaxdp.Ledger(path)
  acct = ledger.accountant("large", DATA, 1e6)
  ledger.charge("large", acct, jaxdp.LaplaceMechanism(0.01))
  (charge,) = ledger.charges("large")
  ledger.close()
  store = Store(path)
  index = Index(store.ledger_id, store.key)
  t0 = time.perf_counter()
  with index.writing(store) as tx:
    for _ in range(n - 1):
      before = index.states["large"]
      after = dict(
        before, spent=before["spent"] + charge.units, answered=before["answered"] + 1
      )
      body = {"mechanism": charge.mechanism, "units": charge.units, "delta_units": 0}
      index.append(tx, "large", "charge", dict(body, before=before, after=after, label=""))
  write = time.perf_counter() - t0
  store.close()
  t0 = time.perf_counter()
  ledger = jaxdp.Ledger(path)
  opened = time.perf_counter() - t0
  t0 = time.perf_counter()
  (summary,) = ledger.datasets()
  summarized = time.perf_counter() - t0
  assert summary.charges == n
  return {
    "charges": n,
    "file_mb": path.stat().st_size / 2**20,
    "write_seconds": write,
    "open_seconds": opened,
    "summary_seconds": summarized,
  }


def _fingerprints(n: int, repeats: int = 3) -> dict:
  """CPU seconds (best of ``repeats``, the two schemes interleaved) per data set."""
  rng = np.random.default_rng(0)
  answers = rng.integers(0, 2, (n, 4)).astype(bool)
  cases = {
    f"{n:,} x 8 integers": rng.integers(0, 1000, (n, 8)),
    f"{n:,} x 8 yes/no, columns of equal counts": np.concatenate(
      [answers, rng.permutation(answers)], axis=1
    ),
    f"{n:,} x 8 floats": rng.normal(size=(n, 8)),
    f"{n:,} x 1 integers": rng.integers(0, 1000, n),
  }
  out = {}
  for name, x in cases.items():
    best = {"columns in a canonical order": np.inf, "first scheme": np.inf}
    for _ in range(repeats):
      for scheme, fn in zip(best, (rows_fingerprint, legacy_rows_fingerprint)):
        t0 = time.process_time()
        fn(x)
        best[scheme] = min(best[scheme], time.process_time() - t0)
    out[name] = best
  return out


def _file_system(folder: Path) -> str:
  try:
    return (
      subprocess.run(["df", "-T", str(folder)], capture_output=True, text=True, check=True)
      .stdout.splitlines()[-1]
      .split()[1]
    )
  except (OSError, subprocess.CalledProcessError, IndexError):
    return "unknown"


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--releases", type=int, default=20, help="releases per round")
  ap.add_argument("--rounds", type=int, default=15)
  ap.add_argument("--batch", type=int, default=100)
  ap.add_argument("--charges", type=int, default=100_000)
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--dir", default=None)
  add_out(ap)
  args = ap.parse_args(argv)
  root = Path(__file__).resolve().parent.parent
  with tempfile.TemporaryDirectory(dir=args.dir or root, prefix=".ledger-bench-") as d:
    folder = Path(d)
    per_release = _per_release(folder, args.releases, args.rounds)
    many = _many(folder, args.batch)
    batch = _batch(folder, args.batch)
    opened = _open(folder, args.charges)
    fs = _file_system(folder)
  fingerprints = _fingerprints(args.rows)
  payload = {
    "machine": machine() | {"file_system": fs, "load_average": os.getloadavg()},
    "seconds_per_release": per_release,
    "rounds": args.rounds,
    "releases_per_round": args.releases,
    "charge_many": many,
    "charge_plan": batch,
    "open": opened,
    "fingerprint_cpu_seconds": fingerprints,
  }
  alone = per_release["Session.count, no ledger"]
  rows = [
    "| setting | releases/s | time per release | x its floor | CPU per release "
    "| CPU x its floor |",
    "|---|---:|---:|---:|---:|---:|",
    f"| Session.count, no ledger | {1 / alone['wall']:,.0f} | "
    f"{1e3 * alone['wall']:.3f} ms | | {1e3 * alone['cpu']:.3f} ms | |",
  ]
  for journal in JOURNALS:
    floor = per_release[f"{journal}: floor, one transaction"]
    for what, t, bases in (
      ("floor: one durable sqlite transaction", floor, [floor]),
      ("Ledger.charge alone", per_release[f"{journal}: Ledger.charge"], [floor]),
      (
        "Session.count with the ledger",
        per_release[f"{journal}: Session.count, ledger"],
        [floor, alone],
      ),
    ):
      rows.append(
        f"| {journal}: {what} | {1 / t['wall']:,.0f} | {1e3 * t['wall']:.3f} ms | "
        f"{median_ratio(t, bases, 'wall'):.2f} | {1e3 * t['cpu']:.3f} ms | "
        f"{median_ratio(t, bases, 'cpu'):.1f} |"
      )
  for what, r in (
    ("charge_many, one transaction, then the eager releases", many),
    ("charge_plan (jaxdp.plan, one transaction), then one jitted run", batch),
  ):
    rows.append(
      f"| batch of {r['releases']}: {what} | {r['releases_per_s']:,.0f} | "
      f"{1e3 / r['releases_per_s']:.3f} ms | | | |"
    )
  table = (
    f"Ledger on {fs}; load average {os.getloadavg()[0]:.1f} at the end. Each setting: "
    f"best of {args.rounds} rounds of {args.releases} releases, the settings called "
    "in turn in each round (wall time, and this process's CPU time, which leaves out "
    "the waits for the disk); x its floor: the median over the rounds of its time "
    "over its floor's in the same round. A journal's floor is one transaction with "
    "the ledger's settings writing what a charge writes; Session.count's floor is "
    "that plus Session.count with no ledger.\n\n"
    + "\n".join(rows)
    + f"\n\nOpening a ledger of {opened['charges']:,} charges "
    f"({opened['file_mb']:.1f} MB; the whole hash chain verified): "
    f"{opened['open_seconds']:.2f} s; its summary: {opened['summary_seconds']:.3f} s."
    + "\n\n| dataset fingerprint of | CPU s | first scheme (columns as given) |\n"
    + "|---|---:|---:|\n"
    + "\n".join(
      f"| {name} | {t['columns in a canonical order']:.3f} | {t['first scheme']:.3f} |"
      for name, t in fingerprints.items()
    )
  )
  write_results(args.out, "ledger", payload, table)


if __name__ == "__main__":
  main()
