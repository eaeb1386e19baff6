"""Throughput of ``jaxdp.consistent``: the batched solvers and the exact host path.

  python benchmarks/consistency.py [--nhis-batch 100000] [--q-batch 2000] [--out results]

Vectors per second of order-consistent projection on noisy count vectors (true
counts of the ``many`` data shape of :mod:`jaxdp.experiments.consistency` plus
poset-ball noise at eps = 1): on NHIS with 3 sections (a forest: the exact batched
pool-adjacent-violators, beside the dual solver on the same tree) and on a
300-question synthetic questionnaire (not a forest: the dual solver), each jitted
on one batch, then through ``jaxdp.consistent`` (validation, and the exact host
path for any vector the batched solver does not certify), and the exact host
algorithm on single vectors. Writes results/consistency.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, machine, write_results

import jaxdp
from jaxdp.consistency import constraint_graph, default_tol, solver
from jaxdp.experiments.consistency import true_counts
from jaxdp.experiments.questionnaire import synthetic_questionnaire


def noisy(poset, batch, seed):
  x = jnp.asarray(true_counts(poset, "many"), jnp.float32)
  mech = jaxdp.PosetCountMechanism(poset, 1.0)
  return jax.block_until_ready(
    mech.inner.randomize(jax.random.key(seed), jnp.broadcast_to(x, (batch, poset.d + 1)))
  )


def row(what, poset, batch, seconds, certified=None):
  return {
    "what": what,
    "poset": poset.name,
    "d": poset.d,
    "batch": batch,
    "seconds": seconds,
    "vectors_per_s": batch / seconds,
    "certified": certified,
  }


def batched_rows(poset, y, tree_path):
  graph = constraint_graph(poset)
  tol = default_tol(y.dtype)
  f = lambda: solver.isotonic_batched(y, graph, tol, tree_path=tree_path)
  t = best_time(f)
  cert = f()[2]
  name = "tree pool-adjacent-violators" if tree_path and graph.is_tree else "dual solver"
  out = [row(f"batched: {name} (jit)", poset, y.shape[0], t, float(jnp.mean(cert.ok)))]
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--nhis-batch", type=int, default=100_000)
  ap.add_argument("--q-batch", type=int, default=2000)
  ap.add_argument("--host-vectors", type=int, default=5)
  ap.add_argument("--out", default="results")
  args = ap.parse_args(argv)
  nhis = jaxdp.Poset.nhis(3)
  quest = synthetic_questionnaire(0, 300)
  rows = []
  for poset, batch, trees in (
    (nhis, args.nhis_batch, (True, False)),
    (quest, args.q_batch, (True,)),
  ):
    y = noisy(poset, batch, 1)
    for tree_path in trees:
      rows += batched_rows(poset, y, tree_path)
    t = best_time(lambda: jaxdp.consistent(y, poset), repeats=2)
    rows.append(row("jaxdp.consistent (auto)", poset, batch, t))
    host = np.asarray(y[: args.host_vectors], np.float64)
    jaxdp.consistent(host[0], poset)  # warm caches
    t0 = time.perf_counter()
    for v in host:
      jaxdp.consistent(v, poset)
    t = time.perf_counter() - t0
    rows.append(row("exact host path, one vector at a time", poset, len(host), t))
  lines = [
    "| poset | d | path | batch | seconds | vectors/s | certified |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    cert = "-" if r["certified"] is None else f"{r['certified']:.5f}"
    lines.append(
      f"| {r['poset']} | {r['d']} | {r['what']} | {r['batch']:,} | {r['seconds']:.3f} | "
      f"{r['vectors_per_s']:,.0f} | {cert} |"
    )
  note = (
    "Noisy counts: the `many` data shape plus poset-ball noise at eps = 1; float32. "
    "certified = fraction of vectors whose certificate met the default tolerance "
    "(1e-4 relative) in the batched solver."
  )
  write_results(
    args.out,
    "consistency",
    {"machine": machine(), "rows": rows},
    note + "\n\n" + "\n".join(lines),
  )


if __name__ == "__main__":
  main()
