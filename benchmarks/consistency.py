"""Throughput of ``jaxdp.consistent``: the batched solvers and the exact host path.

  python benchmarks/consistency.py [--nhis-batch 100000] [--q-batch 2000] [--out DIR]

Vectors per second of order-consistent projection on noisy count vectors (true
counts of a data shape of :mod:`jaxdp.experiments.consistency` plus poset-ball
noise: ``many`` at eps = 1, where constraints rarely bind, and ``small`` at eps =
0.1, where nearly all do): on NHIS with 3 sections (a forest: the exact batched
pool-adjacent-violators, beside the dual solver on the same tree) and on a
300-question synthetic questionnaire (not a forest: the dual solver), each jitted
on one batch, then through ``jaxdp.consistent`` (validation, and the exact host
path for any vector the batched solver does not certify), and the exact host
algorithm on single vectors. Writes <out>/consistency.{json,md}.
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
from folders import add_out

import jaxdp
from jaxdp.consistency import constraint_graph, default_tol, solver
from jaxdp.experiments.consistency import true_counts
from jaxdp.experiments.questionnaire import synthetic_questionnaire

CASES = (("many", 1.0), ("small", 0.1))  # constraints rarely bind; nearly all bind


def noisy(poset, batch, seed, shape, eps):
  x = jnp.asarray(true_counts(poset, shape), jnp.float32)
  mech = jaxdp.PosetCountMechanism(poset, eps)
  return jax.block_until_ready(
    mech.inner.randomize(jax.random.key(seed), jnp.broadcast_to(x, (batch, poset.d + 1)))
  )


def row(what, poset, batch, seconds, certified=None, case=("many", 1.0)):
  return {
    "what": what,
    "data": case[0],
    "eps": case[1],
    "poset": poset.name,
    "d": poset.d,
    "batch": batch,
    "seconds": seconds,
    "vectors_per_s": batch / seconds,
    "certified": certified,
  }


def batched_rows(poset, y, tree_path, case):
  graph = constraint_graph(poset)
  tol = default_tol(y.dtype)
  f = lambda: solver.isotonic_batched(y, graph, tol, tree_path=tree_path)
  t = best_time(f)
  cert = f()[2]
  name = "tree pool-adjacent-violators" if tree_path and graph.is_tree else "dual solver"
  return [
    row(f"batched: {name} (jit)", poset, y.shape[0], t, float(jnp.mean(cert.ok)), case)
  ]


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--nhis-batch", type=int, default=100_000)
  ap.add_argument("--q-batch", type=int, default=2000)
  ap.add_argument("--host-vectors", type=int, default=5)
  add_out(ap)
  args = ap.parse_args(argv)
  nhis = jaxdp.Poset.nhis(3)
  quest = synthetic_questionnaire(0, 300)
  rows = []
  for poset, batch, trees in (
    (nhis, args.nhis_batch, (True, False)),
    (quest, args.q_batch, (True,)),
  ):
    for case in CASES:
      y = noisy(poset, batch, 1, *case)
      for tree_path in trees:
        rows += batched_rows(poset, y, tree_path, case)
      t = best_time(lambda: jaxdp.consistent(y, poset), repeats=2)
      rows.append(row("jaxdp.consistent (auto)", poset, batch, t, None, case))
      host = np.asarray(y[: args.host_vectors], np.float64)
      jaxdp.consistent(host[0], poset)  # warm caches
      t0 = time.perf_counter()
      for v in host:
        jaxdp.consistent(v, poset)
      t = time.perf_counter() - t0
      rows.append(
        row("exact host path, one vector at a time", poset, len(host), t, None, case)
      )
  lines = [
    "| poset | d | data, eps | path | batch | seconds | vectors/s | certified |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    cert = "-" if r["certified"] is None else f"{r['certified']:.5f}"
    lines.append(
      f"| {r['poset']} | {r['d']} | {r['data']}, {r['eps']:g} | {r['what']} | "
      f"{r['batch']:,} | {r['seconds']:.3f} | "
      f"{r['vectors_per_s']:,.0f} | {cert} |"
    )
  note = (
    "Noisy counts: true counts of a data shape of jaxdp.experiments.consistency "
    "plus poset-ball noise: `many` at eps = 1 (constraints rarely bind), `small` at "
    "eps = 0.1 (nearly all bind: large blocks); float32. "
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
