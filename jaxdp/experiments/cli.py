"""Command line: ``python -m jaxdp`` (or ``jaxdp``) runs utility studies.

  jaxdp                      the NHIS study (same as ``jaxdp nhis``)
  jaxdp nhis                 NHIS posets with 1, 2 and 3 sections (paper, Figure 4)
  jaxdp poset --poset SRC    one poset: nhis1|nhis2|nhis3, random:D[:SEED], or a file
  jaxdp dims                 random posets by dimension (Figure 2)
  jaxdp structure            random posets of fixed d by depth and edges (Figure 3)
  jaxdp sample --poset SRC   draw poset-ball noise and print its shape and E||Z||^2

A poset file is JSON ({"order": [[0/1, ...], ...]} or {"d": D, "edges": [[i, j], ...]}
with (i, j) meaning p_i < p_j) or text: a square 0/1 order matrix, one row per line,
or lines "i j" (an edge list; first line "d D").
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from pathlib import Path

NOISES = ("poset", "linf", "l2", "laplace")


class UsageError(Exception):
  """A bad option or file: printed as one line, exit status 2."""


def main(argv=None) -> int:
  args = _parser().parse_args(argv)
  try:
    _setup_devices(args.devices)
    return args.func(args) or 0
  except UsageError as e:
    print(f"jaxdp: error: {e}", file=sys.stderr)
    return 2
  except ValueError as e:  # library validation of user input
    print(f"jaxdp: error: {e}", file=sys.stderr)
    return 2


# ------------------------------------------------------------------ commands
def _cmd_study(args) -> int:
  import jax
  from jaxdp.experiments import studies

  if args.command in (None, "nhis"):
    args.command = "nhis"
    posets = [_load_poset(f"nhis{s}") for s in _int_list(args.sections, "--sections")]
  else:
    posets = [_load_poset(args.poset)]
  noises = _noise_list(args.mechanisms)
  key = jax.random.key(args.seed)
  t0 = time.perf_counter()
  rows = []
  for i, p in enumerate(posets):
    rows.append(studies.poset_study(
        jax.random.fold_in(key, i), p, num_samples=args.samples,
        insertion_samples=args.insertion_samples, eps=args.eps, noises=noises,
        devices=_devices(args.devices)))
  elapsed = time.perf_counter() - t0
  table = _study_table(rows, noises, args.eps)
  print(table)
  print(f"\n{args.samples:,} exact draws per poset, {args.insertion_samples:,} from the "
        f"published insertion sampler; {elapsed:.1f} s on {_machine_line()}.")
  _write(args.out, args.command, rows, table)
  if not args.no_plot:
    _plot_study(args.out, args.command, rows)
  return 0


def _cmd_dims(args) -> int:
  import jax
  from jaxdp.experiments import studies

  summary, per = studies.random_by_dimension(
      jax.random.key(args.seed), _int_list(args.dims, "--dims"),
      posets_per_dim=args.posets, num_samples=args.samples,
      insertion_samples=args.insertion_samples)
  table = _group_table(summary, "d")
  print(table)
  _write(args.out, "dims", summary, table, extra={"per_poset": per})
  if not args.no_plot:
    _plot_groups(args.out, "dims", summary, "d", "dimension d")
  return 0


def _cmd_structure(args) -> int:
  import jax
  from jaxdp.experiments import studies

  by_depth, by_edges, per = studies.random_by_structure(
      jax.random.key(args.seed), args.d, num_posets=args.posets,
      num_samples=args.samples, insertion_samples=args.insertion_samples,
      min_group=args.min_group)
  table = _group_table(by_depth, "depth") + "\n\n" + _group_table(by_edges, "dag_edges")
  print(table)
  _write(args.out, "structure", {"by_depth": by_depth, "by_edges": by_edges}, table,
         extra={"per_poset": per})
  if not args.no_plot:
    _plot_groups(args.out, "structure_depth", by_depth, "depth", "depth")
    _plot_groups(args.out, "structure_edges", by_edges, "dag_edges", "DAG edges")
  return 0


def _cmd_sample(args) -> int:
  import jax
  import jax.numpy as jnp

  import jaxdp

  poset = _load_poset(args.poset)
  z = jaxdp.random.poset_ball(jax.random.key(args.seed), poset, (args.samples,))
  sq = float(jnp.mean(jnp.sum(z[:, 1:] ** 2, axis=1)))
  print(f"poset {poset!r}: {args.samples:,} exactly uniform points of its poset ball, "
        f"shape {tuple(z.shape)}, E||Z_(1:)||^2 = {sq:.5f} "
        f"(ratio to the l_inf cube's d/3: {sq / (poset.d / 3):.5f})")
  return 0


# ------------------------------------------------------------------ parsing
def _parser():
  ap = argparse.ArgumentParser(
      prog="jaxdp", description="Exact poset-ball DP noise: utility studies.",
      epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.set_defaults(func=_cmd_study, command="nhis", sections="1,2,3", poset=None,
                  samples=1_000_000, insertion_samples=20_000, eps=1.0,
                  mechanisms=",".join(NOISES), out="results/nhis", devices=None,
                  seed=0, no_plot=False)
  sub = ap.add_subparsers(dest="command")

  def common(p, samples, out):
    p.add_argument("--samples", type=_pos_int, default=samples,
                   help=f"exact-sampler draws (default {samples:,})")
    p.add_argument("--out", default=out, help=f"output directory (default {out})")
    p.add_argument("--devices", type=_pos_int, default=None,
                   help="number of devices to shard over (on CPU, that many host "
                        "devices are created)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-plot", action="store_true", help="skip PNG plots")

  for name, help_ in [("nhis", "NHIS posets (Figure 4)"), ("poset", "one poset")]:
    p = sub.add_parser(name, help=help_)
    common(p, 1_000_000, f"results/{name}")
    if name == "nhis":
      p.add_argument("--sections", default="1,2,3", help="comma list from 1,2,3")
    else:
      p.add_argument("--poset", required=True,
                     help="nhis1|nhis2|nhis3, random:D[:SEED], or a JSON/text file")
    p.add_argument("--insertion-samples", type=_nonneg_int, default=20_000,
                   help="draws from the published insertion sampler (0: skip)")
    p.add_argument("--eps", type=_pos_float, default=1.0)
    p.add_argument("--mechanisms", default=",".join(NOISES),
                   help=f"comma list from {','.join(NOISES)} (empty: none)")
    p.set_defaults(func=_cmd_study)

  p = sub.add_parser("dims", help="random posets by dimension (Figure 2)")
  common(p, 20_000, "results/dims")
  p.add_argument("--dims", default="4,6,8,10,12")
  p.add_argument("--posets", type=_pos_int, default=20, help="random posets per d")
  p.add_argument("--insertion-samples", type=_nonneg_int, default=1_000)
  p.set_defaults(func=_cmd_dims)

  p = sub.add_parser("structure", help="random posets by depth and edges (Figure 3)")
  common(p, 2_000, "results/structure")
  p.add_argument("--d", type=_pos_int, default=10)
  p.add_argument("--posets", type=_pos_int, default=5000)
  p.add_argument("--min-group", type=_pos_int, default=100)
  p.add_argument("--insertion-samples", type=_nonneg_int, default=200)
  p.set_defaults(func=_cmd_structure)

  p = sub.add_parser("sample", help="draw poset-ball points and summarise them")
  p.add_argument("--poset", default="nhis3")
  p.add_argument("--samples", type=_pos_int, default=1_000_000)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--devices", type=_pos_int, default=None)
  p.set_defaults(func=_cmd_sample)
  return ap


def _number(cast, ok, what):
  """An argparse type: ``cast`` the text, then require ``ok(value)``."""
  def parse(s):
    try:
      v = cast(s)
    except ValueError:
      v = None
    if v is None or not ok(v):
      raise argparse.ArgumentTypeError(f"expected {what}, got {s!r}")
    return v
  return parse


_pos_int = _number(int, lambda v: v >= 1, "a positive integer")
_nonneg_int = _number(int, lambda v: v >= 0, "an integer >= 0")
_pos_float = _number(float, lambda v: math.isfinite(v) and v > 0,
                     "a positive finite number")


def _int_list(s, opt):
  try:
    vals = [int(v) for v in s.split(",") if v.strip()]
  except ValueError:
    raise UsageError(f"{opt} must be a comma-separated list of integers; got {s!r}") from None
  if not vals:
    raise UsageError(f"{opt} must not be empty")
  if opt == "--sections" and any(v not in (1, 2, 3) for v in vals):
    raise UsageError(f"--sections takes values from 1, 2, 3; got {s!r}")
  return vals


def _noise_list(s):
  vals = [v.strip() for v in s.split(",") if v.strip()]
  bad = [v for v in vals if v not in NOISES]
  if bad:
    raise UsageError(f"--mechanisms: unknown {bad[0]!r}; choose from {','.join(NOISES)}")
  return vals


def _setup_devices(n):
  """--devices K on CPU: ask XLA for K host devices (before JAX starts its backend)."""
  if n is None:
    return
  flags = os.environ.get("XLA_FLAGS", "")
  if "xla_force_host_platform_device_count" not in flags:
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={n}".strip()


def _devices(n):
  import jax
  if n is None:
    return None
  devs = jax.devices()
  if n > len(devs):
    raise UsageError(f"--devices {n}: only {len(devs)} device(s) available")
  return devs[:n]


def _load_poset(src):
  from jaxdp import Poset
  if src is None:
    raise UsageError("--poset is required")
  if src in ("nhis1", "nhis2", "nhis3"):
    return Poset.nhis(int(src[-1]))
  if src.startswith("random:"):
    import jax
    parts = src.split(":")
    try:
      d = int(parts[1])
      seed = int(parts[2]) if len(parts) > 2 else 0
    except (IndexError, ValueError):
      raise UsageError(f"--poset {src!r}: expected random:D or random:D:SEED") from None
    if not 1 <= d <= 22:
      raise UsageError(f"--poset {src!r}: random posets need 1 <= D <= 22")
    return Poset.random(jax.random.key(seed), d)
  path = Path(src)
  if not path.is_file():
    raise UsageError(f"--poset {src!r}: not nhis1|nhis2|nhis3, random:D, or a file")
  try:
    return Poset.load(path)
  except ValueError as e:
    raise UsageError(str(e)) from None


# ------------------------------------------------------------------ output
def _study_table(rows, noises, eps):
  head = ["poset", "d", "exact ratio", "insertion ratio", "diff (z)"]
  head += [f"MSE {n}" for n in noises]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [r["poset"], str(r["d"]), f"{r['exact_ratio']:.4f} ± {r['exact_ratio_se']:.4f}"]
    if "insertion_ratio" in r:
      cells += [f"{r['insertion_ratio']:.4f} ± {r['insertion_ratio_se']:.4f}",
                f"{r['difference_z']:+.1f}"]
    else:
      cells += ["-", "-"]
    for n in noises:
      exact = r.get(f"mse_{n}_exact")
      cells.append(f"{r[f'mse_{n}']:.2f} ± {r[f'mse_{n}_se']:.2f}"
                   + (f" (exact {exact:.1f})" if exact is not None else ""))
    lines.append("| " + " | ".join(cells) + " |")
  return ("Ratio = E||Z||^2 (root dropped) / (d/3), poset ball vs l_inf cube; MSE = "
          f"E||noise||^2 of the (d+1)-vector at eps = {eps:g}.\n\n" + "\n".join(lines))


def _group_table(groups, field):
  lines = [f"| {field} | posets | exact ratio | insertion ratio | insertion - exact "
           "(paired) |", "|---|---|---|---|---|"]
  for g in groups:
    ins = (f"{g['insertion_ratio']:.4f} ± {g['insertion_ratio_se']:.4f}"
           if "insertion_ratio" in g else "-")
    diff = (f"{g['difference']:+.4f} ± {g['difference_se']:.4f}"
            if "difference" in g else "-")
    lines.append(f"| {g[field]} | {g['posets']} | {g['exact_ratio']:.4f} ± "
                 f"{g['exact_ratio_se']:.4f} | {ins} | {diff} |")
  return "\n".join(lines)


def _machine_line():
  import jax
  return f"{os.cpu_count()} CPU cores, {jax.default_backend()} ({len(jax.devices())} device(s))"


def _write(out, name, rows, table, extra=None):
  out = Path(out)
  out.mkdir(parents=True, exist_ok=True)
  payload = {"results": rows, "machine": _machine_line()}
  if extra:
    payload.update(extra)
  (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
  (out / f"{name}.md").write_text(table + "\n")
  flat = rows if isinstance(rows, list) else [dict(r, group=k) for k, v in rows.items()
                                              for r in v]
  if flat:
    keys = sorted({k for r in flat for k in r})
    with open(out / f"{name}.csv", "w", newline="") as f:
      w = csv.DictWriter(f, fieldnames=keys)
      w.writeheader()
      w.writerows(flat)
  print(f"\nwrote {out}/{name}.json, .csv, .md", file=sys.stderr)


def _pyplot():
  try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt
  except ImportError:
    print("jaxdp: matplotlib not installed; skipping plots (pip install "
          "'jaxdp[plots]')", file=sys.stderr)
    return None


def _plot_study(out, name, rows):
  labels = [f"{r['poset']} (d={r['d']})" for r in rows]
  _plot(out, name, rows, list(range(len(rows))), "", "E||Z||² / (d/3)  (±2 SE)",
        ticks=labels, line="")


def _plot_groups(out, name, groups, field, label):
  _plot(out, name, groups, [g[field] for g in groups], label,
        "mean E||Z||² / (d/3)  (±2 SE)", line="-")


def _plot(out, name, rows, xs, xlabel, ylabel, *, ticks=None, line=""):
  """Exact vs insertion-sampler ratios with 2-SE bars, saved as NAME.png."""
  plt = _pyplot()
  if plt is None or not rows:
    return
  fig, ax = plt.subplots(figsize=(6, 4))
  series = [("exact_ratio", "o", "exact sampler"),
            ("insertion_ratio", "s", "published insertion sampler")]
  for col, marker, label in series:
    if all(col in r for r in rows):
      ax.errorbar(xs, [r[col] for r in rows], yerr=[2 * r[col + "_se"] for r in rows],
                  fmt=marker + line, label=label)
  if ticks:
    ax.set_xticks(xs, ticks)
  ax.set_xlabel(xlabel)
  ax.set_ylabel(ylabel)
  ax.set_title("Poset ball vs l_inf ball: mean squared norm ratio")
  ax.legend()
  fig.tight_layout()
  fig.savefig(Path(out) / f"{name}.png", dpi=120)
  plt.close(fig)


if __name__ == "__main__":  # pragma: no cover
  sys.exit(main())
