#!/usr/bin/env bash
# The test suite, then every benchmark, on this machine's default JAX device (an
# accelerator when one is installed), everything written under
# results/device-<platform>-<device kind>/, within one time limit:
#
#   bash benchmarks/device_run.sh            # full benchmarks (as on the CPU)
#   QUICK=1 bash benchmarks/device_run.sh    # small sizes (a smoke run)
#   TESTS="tests/samplers" bash benchmarks/device_run.sh   # a part of the suite
#   DRY_RUN=1 bash benchmarks/device_run.sh  # the script itself, tiny, on any machine
#
# LIMIT (seconds, default 540) bounds the whole run, so that it fits a 10-minute
# command: the tests get TEST_LIMIT of it (default 240), the benchmarks what is left
# (each phase is stopped by `timeout`, and the script still reports and exits 0 on
# time). DRY_RUN=1 runs tests/samplers/test_accelerator_ready.py and the smallest
# benchmark (float_attack) at --quick sizes into results/dryrun-<platform>-<kind>/.
#
# Writes device.json (jax.devices(), memory statistics), nvidia-smi.txt where
# available, tests.txt (pytest's output and exit status), the benchmarks' JSON and
# Markdown files (python benchmarks/run_all.py --out <that folder>; the machine and
# device name are in each file), floors.json and floors.md (every figure as a ratio
# to its floor, measured in the same run, with the device name:
# python benchmarks/floors.py --results <that folder>, also after a benchmark phase
# stopped on time) and status.txt (each phase's exit status and seconds). Tests
# that compare draws bit for bit with the CPU reference
# (tests/samplers/test_reference_draws.py) are expected to fail on another backend:
# float arithmetic differs between backends. The results folder is not
# docs/benchmarks.md's source (that page is built from results/ on the CPU).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
start=$SECONDS
limit=${LIMIT:-540}
test_limit=${TEST_LIMIT:-240}
tests=${TESTS:-tests}
quick=""
only=""
prefix="device"
if [ -n "${QUICK:-}" ]; then quick="--quick"; fi
if [ -n "${DRY_RUN:-}" ]; then
  quick="--quick"
  only="--only float_attack"
  tests=${TESTS:-tests/samplers/test_accelerator_ready.py}
  prefix="dryrun"
fi
name=$(python -c "import jax; d = jax.devices()[0]; \
print(f'{d.platform}-{getattr(d, \"device_kind\", \"\")}'.lower().replace(' ', '-'))")
out="results/${prefix}-${name}"
mkdir -p "$out"
: > "$out/status.txt"
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
if [ -z "${DRY_RUN:-}" ] && python -c "import xdist" 2>/dev/null; then xdist="-n 4"; fi
# several test processes share one accelerator: none may preallocate its memory
t0=$SECONDS
# shellcheck disable=SC2086
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout -k 10 "$test_limit" \
  python -m pytest -q $xdist $tests > "$out/tests.txt" 2>&1
rc=$?
echo "pytest exit status: $rc (124: stopped at TEST_LIMIT=${test_limit}s)" | tee -a "$out/tests.txt"
echo "tests $rc $((SECONDS - t0))s" >> "$out/status.txt"
tail -5 "$out/tests.txt"
left=$((limit - (SECONDS - start)))
if [ "$left" -lt 30 ]; then left=30; fi
t0=$SECONDS
# shellcheck disable=SC2086
timeout -k 10 "$left" python benchmarks/run_all.py --out "$out" $quick $only 2>&1 \
  | tee "$out/run_all.log"
rc=${PIPESTATUS[0]}
echo "benchmarks $rc $((SECONDS - t0))s (limit ${left}s; 124: stopped there)" >> "$out/status.txt"
python benchmarks/floors.py --results "$out"
echo "floors $?" >> "$out/status.txt"
cat "$out/status.txt"
echo "wrote $out"
