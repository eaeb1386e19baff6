#!/usr/bin/env bash
# The test suite, then every benchmark, on this machine's default JAX device (an
# accelerator when one is installed), everything written under
# results/device-<platform>-<device kind>/:
#
#   bash benchmarks/device_run.sh            # full benchmarks (as on the CPU)
#   QUICK=1 bash benchmarks/device_run.sh    # small sizes (a smoke run)
#   TESTS="tests/samplers" bash benchmarks/device_run.sh   # a part of the suite
#
# Writes device.json (jax.devices(), memory statistics), nvidia-smi.txt where
# available, tests.txt (pytest's output and exit status) and the benchmarks' JSON and
# Markdown files (python benchmarks/run_all.py --out <that folder>; the machine and
# device name are in each file). Tests that compare draws bit for bit with the CPU
# reference (tests/samplers/test_reference_draws.py) are expected to fail on another
# backend: float arithmetic differs between backends. The results folder is not
# docs/benchmarks.md's source (that page is built from results/ on the CPU).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
name=$(python -c "import jax; d = jax.devices()[0]; \
print(f'{d.platform}-{getattr(d, \"device_kind\", \"\")}'.lower().replace(' ', '-'))")
out="results/device-${name}"
mkdir -p "$out"
python - "$out/device.json" <<'PY'
import json, sys

import jax

devices = []
for d in jax.devices():
  try:
    stats = d.memory_stats()
  except Exception as e:  # noqa: BLE001
    stats = repr(e)
  devices.append({"platform": d.platform, "kind": getattr(d, "device_kind", ""),
                  "memory_stats": stats})
info = {"jax": jax.__version__, "backend": jax.default_backend(), "devices": devices}
open(sys.argv[1], "w").write(json.dumps(info, indent=2, default=str))
print(json.dumps(info, default=str)[:400])
PY
if [ "$(python -c 'import jax; print(jax.default_backend())')" = cpu ]; then
  echo "warning: JAX's default backend is the CPU; install jax for the accelerator" >&2
fi
(nvidia-smi || true) > "$out/nvidia-smi.txt" 2>&1
xdist=""
if python -c "import xdist" 2>/dev/null; then xdist="-n 4"; fi
# shellcheck disable=SC2086
python -m pytest -q $xdist ${TESTS:-tests} > "$out/tests.txt" 2>&1
echo "pytest exit status: $?" | tee -a "$out/tests.txt"
tail -5 "$out/tests.txt"
quick=""
if [ -n "${QUICK:-}" ]; then quick="--quick"; fi
python benchmarks/run_all.py --out "$out" $quick 2>&1 | tee "$out/run_all.log"
echo "wrote $out"
