"""Shared helpers for the benchmarks: timing, machine description, output files."""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import jax
import numpy as np


def machine() -> dict:
  """What the numbers were measured on."""
  cpu = platform.processor() or platform.machine()
  try:
    with open("/proc/cpuinfo") as f:
      for line in f:
        if line.startswith("model name"):
          cpu = line.split(":", 1)[1].strip()
          break
  except OSError:
    pass
  devices = jax.devices()
  return {
    "cpu": cpu,
    "cpu_count": os.cpu_count(),
    "platform": platform.platform(),
    "python": platform.python_version(),
    "jax": jax.__version__,
    "numpy": np.__version__,
    "backend": jax.default_backend(),
    "devices": [f"{d.platform}:{getattr(d, 'device_kind', '')}" for d in devices],
    "device_count": len(devices),
  }


def best_time(fn, repeats: int = 3, clock=time.perf_counter) -> float:
  """Best time of ``fn()`` (blocked until ready) after one warm-up call: wall time,
  or process CPU time with ``clock=time.process_time``."""
  jax.block_until_ready(fn())
  best = float("inf")
  for _ in range(repeats):
    t0 = clock()
    jax.block_until_ready(fn())
    best = min(best, clock() - t0)
  return best


def interleaved_best(fns: dict, rounds: int = 15, clock=time.perf_counter) -> dict:
  """Best time of each ``fns[name]()`` (blocked until ready) over ``rounds`` rounds
  that call every function once in turn, after one warm-up call each: a ratio of two
  of them compares calls made under the same load, which separate best-of runs on a
  shared machine do not."""
  times = interleaved_times(fns, rounds, clock=clock)
  return {name: min(t) for name, t in times.items()}


def interleaved_times(
  fns: dict, rounds: int, args=lambda r: (), clock=time.perf_counter
) -> dict:
  """Every time of each ``fns[name](*args(r))`` (blocked until ready) in rounds ``r =
  1..rounds`` that call every function once in turn, after a warm-up call each with
  ``args(0)``: a list per name (e.g. ``args = lambda r: (fold_in(key, r),)`` for a
  fresh key a round)."""
  for fn in fns.values():
    jax.block_until_ready(fn(*args(0)))
  times = {name: [] for name in fns}
  for r in range(1, rounds + 1):
    for name, fn in fns.items():
      t0 = clock()
      jax.block_until_ready(fn(*args(r)))
      times[name].append(clock() - t0)
  return times


def peak_ratio(fn, key, out_bytes: int) -> float | None:
  """Peak memory per output byte of ``jit(fn)(key)``: XLA's compiled temporary +
  output bytes over ``out_bytes`` (None where the backend reports no analysis)."""
  return compiled_peak_ratio(jax.jit(fn).lower(key).compile(), out_bytes)


def compiled_peak_ratio(compiled, out_bytes: int) -> float | None:
  """:func:`peak_ratio` of an already compiled function (``jit(f).lower(...).compile()``)."""
  mem = compiled.memory_analysis()
  if mem is None:
    return None
  return (mem.temp_size_in_bytes + mem.output_size_in_bytes) / out_bytes


def write_results(out_dir: str | Path, name: str, payload: dict, table: str) -> None:
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
  m = payload["machine"]
  header = (
    f"# {name}\n\nMachine: {m['cpu']}, {m['cpu_count']} CPUs, backend "
    f"{m['backend']} ({', '.join(m['devices'])}), jax {m['jax']}.\n\n"
  )
  (out / f"{name}.md").write_text(header + table + "\n")
  print(header + table)
  print(f"wrote {out / name}.json and .md", flush=True)
