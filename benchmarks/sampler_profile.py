"""Where the poset-ball kernels spend their time: the compiled program of one chunk
(XLA's cost analysis, fusions, loops, the largest fusions by operations per sample)
and the stages timed separately.

  python benchmarks/sampler_profile.py [--out DIR] [--quick]

Kernels: NHIS three sections (forest sampler), a random forest with d = 128 (forest
sampler), the synthetic questionnaire with d = 300 (series-parallel sampler) and a
random poset with d = 20 whose prime piece is too large for sp (general sampler), each
at the chunk size its draws use on this device. "cpu ns" is process CPU time per
sample (all threads; steadier than wall time on a shared machine), "wall ns" the best
wall time; both for one chunk, the floor being ``jax.random.uniform`` of 2(d+1)
floats per sample with the fast key at the same size. Operations per sample count
the HLO instructions of each fusion times its elements (a dot counts once per output
element). Writes <out>/sampler_profile.json and .md.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, write_results
from folders import add_out

from jaxdp import Poset
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from jaxdp.prng.threefry import fast_key
from jaxdp.samplers import dispatch, forest, gamma, general, general_points, sp_kernel
from jaxdp.samplers.words import paired_words, unit_floats

_FREE = {"parameter", "constant", "bitcast", "get-tuple-element", "tuple", "broadcast"}
_FREE |= {"slice", "reshape", "iota"}


def _computations(txt):
  comps, cur = {}, None
  for line in txt.splitlines():
    if line and not line.startswith(" ") and line.rstrip().endswith("{"):
      m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) ", line)
      cur = m.group(1) if m else None
      if cur:
        comps[cur] = []
    elif cur and line.startswith("  "):
      comps[cur].append(line.strip())
  return comps


def _ops(comps, name):
  total = 0
  for line in comps.get(name, []):
    m = re.search(r"= (?:\S+|\([^=]*\)) ([\w\-]+)\(", line)
    if not m or m.group(1) in _FREE:
      continue
    total += 1
    for sub in re.findall(r"(?:calls|to_apply)=%([\w.\-]+)", line):
      total += _ops(comps, sub)
  return total


def hlo_profile(compiled, n):
  """Fusions, loops and operations per sample of a compiled program."""
  txt = compiled.as_text()
  comps = _computations(txt)
  entry = re.search(r"^ENTRY %?([\w.\-]+)", txt, re.M).group(1)
  rows = []
  for line in comps[entry]:
    m = re.match(r"%?([\w.\-]+) = (\S+|\([^=]*\)) ([\w\-]+)\(", line)
    if not m:
      continue
    name, shape, op = m.groups()
    called = re.findall(r"calls=%([\w.\-]+)", line)
    ops = sum(_ops(comps, c) for c in called) if called else int(op not in _FREE)
    dims = re.search(r"\[([\d,]*)\]", shape)
    elems = (
      math.prod(int(x) for x in dims.group(1).split(",")) if dims and dims.group(1) else 1
    )
    rows.append((name, op, ops * elems / n))
  ca = compiled.cost_analysis() or {}
  ca = ca[0] if isinstance(ca, list) else ca
  rows.sort(key=lambda r: -r[2])
  return {
    "fusions": sum(r[1] == "fusion" for r in rows),
    "loops": len(re.findall(r" while\(", txt)),
    "conditionals": len(re.findall(r" conditional\(", txt)),
    "ops_per_sample": sum(r[2] for r in rows),
    "flops_per_sample": ca.get("flops", float("nan")) / n,
    "bytes_per_sample": ca.get("bytes accessed", float("nan")) / n,
    "transcendentals_per_sample": ca.get("transcendentals", float("nan")) / n,
    "top_fusions": [(r[0], round(r[2])) for r in rows[:6]],
  }


def _times(f, key, repeats):
  f = jax.jit(f)
  jax.block_until_ready(f(key))
  cpu = wall = float("inf")
  for _ in range(repeats):
    t0, c0 = time.perf_counter(), time.process_time()
    jax.block_until_ready(f(key))
    wall = min(wall, time.perf_counter() - t0)
    cpu = min(cpu, time.process_time() - c0)
  return cpu, wall


def _forest_stages(tables, layout, n):
  d = layout.d

  def choice(k):
    hi, _ = paired_words(k, (d + 1, n))
    u = unit_floats(hi)
    kk, in_b = forest.choose_parts(u[d], [u[i] for i in range(d)], tables, layout)
    return kk, jnp.stack(in_b)

  def gammas(k):
    k_size, k_gamma = jax.random.split(k)
    kk = jax.random.randint(k_size, (n,), 0, d + 1)
    shapes = jnp.stack([kk + 1, d - kk + 1])
    return gamma.gamma_shapes(k_gamma, shapes, d + 1, jnp.float32)

  return {
    "words (d+1 hashes)": lambda k: paired_words(k, (d + 1, n)),
    "words + choices": choice,
    "Gamma pair": gammas,
    "objects (seq, k)": lambda k: forest.forest_objects(
      k, tables, layout, n, 1 if d <= 32 else 2
    ),
  }


def _general_stages(tables, layout, n):
  def trie(k):
    u = jax.random.uniform(k, (len(general.trie_groups(layout.d)), n))
    return general_points.descend(tables.cdf, u, layout.d)

  return {
    "trie descent (A)": trie,
    "objects (seq, k)": lambda k: general_points.general_objects(k, tables, layout, n),
  }


def _sp_stages(tables, layout, n):
  def draws(k):
    dr = sp_kernel._draws(k, tables, layout, n)
    return dr["cnt"], dr["in_a"], dr["bits_space"], dr["bits_v"]

  def times(k):
    dr = sp_kernel._draws(k, tables, layout, n)
    with jax.enable_x64(True):
      return sp_kernel._times(dr, layout, n)

  return {"sizes + words": draws, "sizes + times": times}


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  add_out(ap)
  ap.add_argument("--quick", action="store_true", help="small posets only (a smoke run)")
  ap.add_argument("--repeats", type=int, default=5)
  args = ap.parse_args(argv)
  key = fast_key(jax.random.key(0))
  rng = np.random.default_rng(0)
  d_forest, d_quest = (24, 40) if args.quick else (128, 300)
  big_forest = Poset.from_parents(
    [-1] + [int(rng.integers(0, i)) for i in range(1, d_forest)],
    name=f"random forest d={d_forest}",
  )
  cases = [
    ("NHIS 3 sections", Poset.nhis(3), "forest"),
    (big_forest.name, big_forest, "forest"),
    (
      f"questionnaire d={40 if args.quick else 300}",
      synthetic_questionnaire(0, 40 if args.quick else 300),
      "sp",
    ),
    ("random d=20, prime piece > 16", Poset.random(jax.random.key(44), 20), "general"),
  ]
  rows = []
  for label, poset, method in cases:
    d = poset.d
    _, tables, layout = dispatch.tables_and_layout(poset, method)
    n = dispatch.device_chunk_size(layout, d)
    tables = jax.tree_util.tree_map(jnp.asarray, tables)

    def points(k, tables=tables, layout=layout, d=d, n=n):
      k_obj, k_exp = jax.random.split(k)
      return dispatch.points(k_obj, k_exp, tables, d, layout, n, jnp.float32)

    t0 = time.perf_counter()
    compiled = jax.jit(points).lower(key).compile()
    compile_s = time.perf_counter() - t0
    prof = hlo_profile(compiled, n)
    stages = {
      "floor: uniform 2(d+1)": lambda k, n=n, d=d: jax.random.uniform(k, (n, 2 * (d + 1)))
    }
    if method == "forest":
      stages.update(_forest_stages(tables, layout, n))
    elif method == "general":
      stages.update(_general_stages(tables, layout, n))
    else:
      stages.update(_sp_stages(tables, layout, n))
    stages["points (the kernel)"] = points
    timed = {}
    for name, f in stages.items():
      cpu, wall = _times(f, key, args.repeats)
      timed[name] = {"cpu_ns": cpu * 1e9 / n, "wall_ns": wall * 1e9 / n}
    rows.append(
      {
        "case": label,
        "d": d,
        "method": method,
        "chunk": n,
        "compile_s": compile_s,
        **prof,
        "stages": timed,
      }
    )
    print(rows[-1], flush=True)
  lines = [
    "Compiled program of one chunk (per sample):",
    "",
    "| case | d | method | chunk | fusions | loops | ops | flops | bytes | transcendentals |",
    "|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
      f"| {r['case']} | {r['d']} | {r['method']} | {r['chunk']:,} | {r['fusions']} | "
      f"{r['loops']} | {r['ops_per_sample']:,.0f} | {r['flops_per_sample']:,.0f} | "
      f"{r['bytes_per_sample']:,.0f} | {r['transcendentals_per_sample']:.0f} |"
    )
  lines += ["", "Stages timed separately (one chunk; ns per sample):", ""]
  lines += ["| case | stage | cpu ns | x floor (cpu) | wall ns |", "|---|---|---|---|---|"]
  for r in rows:
    floor = r["stages"]["floor: uniform 2(d+1)"]["cpu_ns"]
    for name, t in r["stages"].items():
      lines.append(
        f"| {r['case']} | {name} | {t['cpu_ns']:,.0f} | {t['cpu_ns'] / floor:.2f} | "
        f"{t['wall_ns']:,.0f} |"
      )
  lines += ["", "Largest fusions (operations per sample):", ""]
  for r in rows:
    top = ", ".join(f"{name} {ops:,}" for name, ops in r["top_fusions"])
    lines.append(f"- {r['case']}: {top}")
  write_results(
    args.out, "sampler_profile", {"machine": machine(), "rows": rows}, "\n".join(lines)
  )


if __name__ == "__main__":
  main()
