"""Runs every benchmark and writes JSON and Markdown into one folder.

  python benchmarks/run_all.py [--out results] [--quick]

Each benchmark records the machine (CPU, core count, backend, devices, jax version).
On an accelerator the same command runs unchanged; JAX picks the device.
``--quick`` uses small sizes (a smoke run, not for reporting).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accounting  # noqa: E402
import float_attack  # noqa: E402
import generators  # noqa: E402
import montecarlo  # noqa: E402
import recompile  # noqa: E402
import samplers  # noqa: E402
import secure  # noqa: E402
import sp_costs  # noqa: E402
from common import machine  # noqa: E402


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--out", default="results")
  ap.add_argument("--quick", action="store_true")
  args = ap.parse_args(argv)
  print(f"machine: {machine()}", flush=True)
  q = args.quick
  samplers.main(["--out", args.out] + (["--n", "20000", "--numpy-n", "200"] if q else []))
  montecarlo.main(["--out", args.out] + (["--n", "100000"] if q else []))
  accounting.main(["--out", args.out] +
                  (["--accountants", "100", "--releases", "10"] if q else []))
  float_attack.main(["--out", args.out])
  recompile.main(["--out", args.out] + (["--posets", "5"] if q else []))
  secure.main(["--out", args.out] + (["--n", "20000", "--opendp-n", "1000"] if q else []))
  generators.main(["--out", args.out] + (["--n", "20000"] if q else []))
  sp_costs.main(["--out", args.out] + (["--n", "20000"] if q else []))
  parts = [Path(args.out, f"{n}.md").read_text()
           for n in ("samplers", "montecarlo", "accounting", "float_attack", "recompile",
                     "secure", "generators", "sp_costs")]
  Path(args.out, "README.md").write_text("\n\n".join(parts))
  print(f"wrote {args.out}/README.md", flush=True)


if __name__ == "__main__":
  main()
