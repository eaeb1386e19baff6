"""Throughput of ``jaxdp.consistent``: the batched solvers, the exact host path, and
per vector against scikit-learn and scipy.

  python benchmarks/consistency.py [--nhis-batch 100000] [--q-batch 2000]
      [--ref-batch 4000] [--dims 10,30,100,300,512] [--out DIR]

Against references: for each ``d`` in ``--dims``, a chain, a random recursive forest
(each element below a uniformly chosen earlier one, or maximal) and a
series-parallel poset that is no forest (diamonds ``a < b, c < d`` side by side),
noisy float32 counts (a profile falling with depth plus Gaussian noise of
standard deviation 20, so that many constraints bind); ``jaxdp.consistent`` on a
batch of ``--ref-batch`` vectors beside, in turn under the same load, scikit-learn's
``isotonic_regression`` (chains) or scipy's ``nnls`` on the dual (forests and the
series-parallel posets), one float64 vector at a time. The ratio is their time per
vector over jaxdp's; ``max diff`` the largest difference between the two answers
over the reference's vectors, relative to ``max(1, max|y|)``.

Vectors per second of order-consistent projection on noisy count vectors (true
counts of a data shape of :mod:`jaxdp.experiments.consistency` plus poset-ball
noise: ``many`` at eps = 1, where constraints rarely bind, and ``small`` at eps =
0.1, where nearly all do): on NHIS with 3 sections (a forest: the exact batched
series-parallel junctions, beside the dual solver on the same tree) and on a
300-question synthetic questionnaire (series-parallel, not a forest: the exact
series-parallel junctions, beside the dual solver), each jitted
on one batch, then through ``jaxdp.consistent`` (validation, and the exact host
path for any vector the batched solver does not certify), and the exact host
algorithm on single vectors. Writes ``consistency.{json,md}`` into ``--out``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, interleaved_best, machine, write_results
from folders import add_out
from scipy.optimize import nnls
from sklearn.isotonic import isotonic_regression

import jaxdp
from jaxdp.consistency import chain, constraint_graph, default_tol, solver
from jaxdp.experiments.consistency import true_counts
from jaxdp.experiments.questionnaire import synthetic_questionnaire

CASES = (("many", 1.0), ("small", 0.1))  # constraints rarely bind; nearly all bind
ROUNDS = 7  # rounds of the reference comparison (each side called once a round)


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
  name = path_name(graph) if tree_path else "dual solver"
  return [
    row(f"batched: {name} (jit)", poset, y.shape[0], t, float(jnp.mean(cert.ok)), case)
  ]


def path_name(graph) -> str:
  """The batched solver ``isotonic_batched`` takes for ``graph``."""
  path = solver.exact_path(graph)
  if path is None:
    return "dual solver"
  return path + (" junctions" if path == "series-parallel" else " pool-adjacent-violators")


def reference_posets(d: int) -> dict:
  """A chain, a random recursive forest and a series-parallel non-forest on ``d``."""
  rng = np.random.default_rng(d)
  diamonds = []
  for k in range(0, d - 3, 4):  # a < b, a < c, b < d, c < d (element k + 3 on top)
    diamonds += [(k, k + 1), (k, k + 2), (k + 1, k + 3), (k + 2, k + 3)]
  return {
    "chain": jaxdp.Poset.from_edges(d, [(i + 1, i) for i in range(d - 1)]),
    "forest": jaxdp.Poset.from_parents([int(rng.integers(-1, i)) for i in range(d)]),
    "series-parallel": jaxdp.Poset.from_edges(d, diamonds),
  }


def noisy_profile(poset, batch, seed):
  """Counts falling with depth (1000 at n, 0.98 times less per level) plus Gaussian
  noise of standard deviation 20, as float32."""
  graph = constraint_graph(poset)
  depth = np.zeros(graph.dim)
  up = [graph.up[i] for i in range(graph.dim)]
  for i in sorted(range(1, graph.dim), key=lambda i: poset.order[i - 1].sum()):
    depth[i] = 1 + max(depth[j] for j in up[i])  # elements above come first
  rng = np.random.default_rng(seed)
  x = 1000.0 * 0.98**depth
  return (x + 20.0 * rng.normal(size=(batch, graph.dim))).astype(np.float32)


def reference_rows(dims, batch, seed=0):
  rows = []
  for d in dims:
    for kind, poset in reference_posets(d).items():
      graph = constraint_graph(poset)
      y = noisy_profile(poset, batch, seed)
      yj = jnp.asarray(y)
      y64 = y.astype(np.float64)
      if kind == "chain":
        positions = np.asarray(chain.chain_order(graph))[::-1]  # n first
        k = min(batch, 300)

        def ref(v, positions=positions):
          out = np.empty_like(v)
          out[positions] = isotonic_regression(v[positions], increasing=False)
          return np.maximum(out, 0.0)

        name = "scikit-learn isotonic_regression"
      else:
        a_t = graph.incidence.T
        k = int(min(batch, max(3, 2e6 // d**2)))

        def ref(v, a_t=a_t):
          return np.maximum(v - a_t @ nnls(a_t, v, maxiter=50 * a_t.shape[1])[0], 0.0)

        name = "scipy nnls (dual)"
      best = interleaved_best(
        {
          "jaxdp": lambda yj=yj, poset=poset: jaxdp.consistent(yj, poset),
          "ref": lambda y64=y64, k=k, ref=ref: [ref(v) for v in y64[:k]],
        },
        rounds=ROUNDS,
      )
      z = np.asarray(jaxdp.consistent(yj, poset), np.float64)[:k]
      want = np.array([ref(v) for v in y64[:k]])
      scale = np.maximum(1.0, np.abs(y64[:k]).max(axis=1, keepdims=True))
      path = path_name(graph)
      rows.append(
        {
          "structure": kind,
          "d": d,
          "jaxdp_path": path,
          "batch": batch,
          "jaxdp_vectors_per_s": batch / best["jaxdp"],
          "reference": name,
          "reference_vectors": k,
          "reference_vectors_per_s": k / best["ref"],
          "ratio": (best["ref"] / k) / (best["jaxdp"] / batch),
          "max_diff": float(np.max(np.abs(z - want) / scale)),
        }
      )
      print(rows[-1], flush=True)
  return rows


def reference_table(rows):
  lines = [
    "| poset | d | jaxdp path | jaxdp vectors/s | reference | reference vectors/s "
    "| ratio | max diff |",
    "|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
      f"| {r['structure']} | {r['d']} | {r['jaxdp_path']} | "
      f"{r['jaxdp_vectors_per_s']:,.0f} | {r['reference']} | "
      f"{r['reference_vectors_per_s']:,.0f} | {r['ratio']:.1f} | {r['max_diff']:.1e} |"
    )
  return "\n".join(lines)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--nhis-batch", type=int, default=100_000)
  ap.add_argument("--q-batch", type=int, default=2000)
  ap.add_argument("--host-vectors", type=int, default=5)
  ap.add_argument("--ref-batch", type=int, default=4000)
  ap.add_argument("--dims", default="10,30,100,300,512")
  add_out(ap)
  args = ap.parse_args(argv)
  load = [os.getloadavg()]
  ref_rows = reference_rows([int(d) for d in args.dims.split(",")], args.ref_batch)
  nhis = jaxdp.Poset.nhis(3)
  quest = synthetic_questionnaire(0, 300)
  rows = []
  for poset, batch, trees in (
    (nhis, args.nhis_batch, (True, False)),
    (quest, args.q_batch, (True, False)),
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
  load.append(os.getloadavg())
  ref_note = (
    "Per vector against references, measured in turn in one run, the best of "
    f"{ROUNDS} rounds (ratios under the same load): jaxdp.consistent on a batch of "
    f"{args.ref_batch:,} float32 vectors (the exact batched solver of each "
    "structure, named in the table; series-parallel: diamonds side by side) "
    "against scikit-learn's isotonic_regression "
    "(chains) or scipy's nnls on the dual (others), one float64 vector at a "
    "time. Forest: random recursive. Counts: 1000 * 0.98**depth plus Gaussian noise "
    "(sd 20). max diff: largest |jaxdp - reference| / max(1, max|y|). "
    f"Load average (1, 5, 15 min) at the start {tuple(round(x, 1) for x in load[0])}, "
    f"at the end {tuple(round(x, 1) for x in load[1])}: the machine was shared, "
    "so absolute rates are low; the ratios compare calls made in turn."
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
    {"machine": machine(), "load_average": load, "reference_rows": ref_rows, "rows": rows},
    "## Against references\n\n"
    + ref_note
    + "\n\n"
    + reference_table(ref_rows)
    + "\n\n## Paths\n\n"
    + note
    + "\n\n"
    + "\n".join(lines),
  )


if __name__ == "__main__":
  main()
