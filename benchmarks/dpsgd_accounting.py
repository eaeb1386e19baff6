"""DP-SGD accounting (Poisson-subsampled Gaussian) beside dp_accounting's.

  python benchmarks/dpsgd_accounting.py [--h 1e-3] [--out DIR]

In one run, for each (q, sigma, T) of a grid at delta = 1e-5, side by side: eps and
time of ``jaxdp.RdpAccounting`` and dp_accounting's ``RdpAccountant`` at the same
orders (``DPSGD_ORDERS``), and of ``jaxdp.PldAccounting`` and its ``PLDAccountant``
at the same grid ``h``; each pair is timed in turn (best of 3 rounds), so their
ratio is measured under the same load. Also the compile and run time of the traced
per-step RDP (``RdpAccounting.step_rdp`` under ``jax.jit``) and its eps after T
steps against the host's. Writes results/dpsgd_accounting.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_best, machine, write_results
from folders import add_out

import jaxdp
from jaxdp.composition import renyi
from jaxdp.composition.dpsgd import DPSGD_ORDERS

DELTA = 1e-5
GRID = [
  (q, s, t) for q in (0.001, 0.01, 0.1) for s in (0.6, 1.0, 2.0, 5.0) for t in (100, 1000)
]


def _peer(q, s, steps, h):
  import dp_accounting

  event = dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(s))

  def rdp():
    acc = dp_accounting.rdp.RdpAccountant(list(DPSGD_ORDERS))
    acc.compose(event, steps)
    return acc.get_epsilon(DELTA)

  def pld():
    acc = dp_accounting.pld.PLDAccountant(value_discretization_interval=h)
    acc.compose(event, steps)
    return acc.get_epsilon(DELTA)

  return rdp, pld


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--h", type=float, default=1e-3, help="PLD loss grid (default: 1e-3)")
  add_out(ap)
  args = ap.parse_args(argv)
  rdp_acc, pld_acc = jaxdp.RdpAccounting(), jaxdp.PldAccounting(h=args.h)
  rows = []
  for q, s, steps in GRID:
    ours = {
      "rdp": lambda: rdp_acc.epsilon(q, s, steps, DELTA),
      "pld": lambda: pld_acc.epsilon(q, s, steps, DELTA),
    }
    peer_rdp, peer_pld = _peer(q, s, steps, args.h)
    fns = {**ours, "peer_rdp": peer_rdp, "peer_pld": peer_pld}
    eps = {name: float(fn()) for name, fn in fns.items()}
    times = interleaved_best(fns, rounds=3)
    rows.append({"q": q, "sigma": s, "steps": steps, "eps": eps, "seconds": times})
  t0 = time.perf_counter()
  step = jax.jit(rdp_acc.step_rdp).lower(0.01, 1.0).compile()
  compile_s = time.perf_counter() - t0
  run_s = interleaved_best({"run": lambda: step(0.01, 1.0)}, rounds=20)["run"]
  traced = []
  for q, s, steps in ((0.01, 1.0, 1000), (0.004, 1.1, 10000), (0.1, 5.0, 1000)):
    host = rdp_acc.epsilon(q, s, steps, DELTA)
    jit_eps = float(renyi.rdp_epsilon(steps * step(q, s), rdp_acc.orders, DELTA))
    traced.append({"q": q, "sigma": s, "steps": steps, "host": host, "traced": jit_eps})
  lines = [
    f"delta = {DELTA}; RDP at the {len(DPSGD_ORDERS)} orders of DPSGD_ORDERS; PLD at "
    f"h = {args.h}. Times: best of 3 rounds, each calling all four in turn.",
    "",
    "| q | sigma | T | RDP eps (jaxdp / dp_accounting) | ms (jaxdp / dp_acc.) | "
    "PLD eps (jaxdp / dp_accounting) | s (jaxdp / dp_acc.) |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    e, t = r["eps"], r["seconds"]
    lines.append(
      f"| {r['q']} | {r['sigma']} | {r['steps']} | {e['rdp']:.5g} / {e['peer_rdp']:.5g} "
      f"| {1e3 * t['rdp']:.1f} / {1e3 * t['peer_rdp']:.1f} | {e['pld']:.5g} / "
      f"{e['peer_pld']:.5g} | {t['pld']:.2f} / {t['peer_pld']:.2f} |"
    )
  lines += [
    "",
    f"Traced per-step RDP: compile {compile_s:.2f} s, run {1e6 * run_s:.0f} us.",
    "",
    "| q | sigma | T | eps host | eps from traced per-step RDP |",
    "|---|---|---|---|---|",
  ]
  lines += [
    f"| {x['q']} | {x['sigma']} | {x['steps']} | {x['host']:.6f} | {x['traced']:.6f} |"
    for x in traced
  ]
  write_results(
    args.out,
    "dpsgd_accounting",
    {
      "machine": machine(),
      "h": args.h,
      "rows": rows,
      "traced": {"compile_s": compile_s, "run_s": run_s, "eps": traced},
    },
    "\n".join(lines),
  )


if __name__ == "__main__":
  main()
