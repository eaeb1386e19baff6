"""Cost of a durable budget: releases through a Session with and without a ledger.

  python benchmarks/ledger.py [--releases 200] [--batch 100] [--charges 100000]
                              [--rows 1000000] [--dir DIR] [--out DIR]

In one run, side by side:

* ``Session.count`` with no ledger (the budget in the process only);
* ``Session.count`` with a :class:`jaxdp.Ledger`: one exclusive transaction, committed
  with ``synchronous=FULL``, per release, with the rollback journal (the default:
  fsyncs of the journal and of the file) and with a write-ahead log (one fsync);
* the bare charge (``Ledger.charge``, no release), to separate the file's cost;
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
import os
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
from folders import add_out

import jaxdp
from jaxdp.ledger.fingerprint import legacy_rows_fingerprint, rows_fingerprint
from jaxdp.ledger.index import Index
from jaxdp.ledger.store import Store

DATA = np.arange(10_000)


def _below(v):
  return v < 5_000


def _rate(n, seconds):
  return {"releases": n, "seconds": seconds, "releases_per_s": n / seconds}


def _sessions(folder: Path, n: int) -> dict:
  """n counts per setting, after a warm-up count (compilation)."""
  out = {}
  for name, journal in (
    ("no ledger", None),
    ("ledger, one transaction per release", "delete"),
    ("ledger (WAL), one transaction per release", "wal"),
  ):
    ledger = jaxdp.Ledger(folder / f"{journal}.db", journal=journal) if journal else None
    dataset = "sessions" if ledger is not None else None
    s = jaxdp.Session(DATA, 1e6, ledger=ledger, dataset=dataset)
    s.count(_below, eps=0.01)
    t0 = time.perf_counter()
    for _ in range(n):
      s.count(_below, eps=0.01)
    out[name] = _rate(n, time.perf_counter() - t0)
  ledger = jaxdp.Ledger(folder / "charges.db")
  acct = ledger.accountant("charges", DATA, 1e6)
  mech = jaxdp.LaplaceMechanism(0.01)
  ledger.charge("charges", acct, mech)
  t0 = time.perf_counter()
  for _ in range(n):
    ledger.charge("charges", acct, mech)
  out["bare charge (no release)"] = _rate(n, time.perf_counter() - t0)
  return out


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
  ap.add_argument("--releases", type=int, default=200)
  ap.add_argument("--batch", type=int, default=100)
  ap.add_argument("--charges", type=int, default=100_000)
  ap.add_argument("--rows", type=int, default=1_000_000)
  ap.add_argument("--dir", default=None)
  add_out(ap)
  args = ap.parse_args(argv)
  root = Path(__file__).resolve().parent.parent
  with tempfile.TemporaryDirectory(dir=args.dir or root, prefix=".ledger-bench-") as d:
    folder = Path(d)
    sessions = _sessions(folder, args.releases)
    many = _many(folder, args.batch)
    batch = _batch(folder, args.batch)
    opened = _open(folder, args.charges)
    fs = _file_system(folder)
  fingerprints = _fingerprints(args.rows)
  payload = {
    "machine": machine() | {"file_system": fs, "load_average": os.getloadavg()},
    "sessions": sessions,
    "charge_many": many,
    "charge_plan": batch,
    "open": opened,
    "fingerprint_cpu_seconds": fingerprints,
  }
  base = sessions["no ledger"]["releases_per_s"]
  rows = [
    "| setting | releases/s | time per release | vs no ledger |",
    "|---|---:|---:|---:|",
  ]
  for name, r in sessions.items():
    rows.append(
      f"| Session.count, {name} | {r['releases_per_s']:,.0f} | "
      f"{1e3 / r['releases_per_s']:.2f} ms | {r['releases_per_s'] / base:.3f} |"
      if name != "bare charge (no release)"
      else f"| Ledger.charge alone | {r['releases_per_s']:,.0f} | "
      f"{1e3 / r['releases_per_s']:.2f} ms | |"
    )
  for what, r in (
    ("charge_many, one transaction, then the eager releases", many),
    ("charge_plan (jaxdp.plan, one transaction), then one jitted run", batch),
  ):
    rows.append(
      f"| batch of {r['releases']}: {what} | {r['releases_per_s']:,.0f} | "
      f"{1e3 / r['releases_per_s']:.3f} ms | {r['releases_per_s'] / base:.3f} |"
    )
  table = (
    f"Ledger on {fs}; load average {os.getloadavg()[0]:.1f} at the end.\n\n"
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
  print(table)


if __name__ == "__main__":
  main()
