"""Command line: ``python -m jaxdp`` (or ``jaxdp``) runs utility studies.

  jaxdp                      the NHIS study (same as ``jaxdp nhis``)
  jaxdp nhis                 NHIS posets with 1, 2 and 3 sections (paper, Figure 4)
  jaxdp poset --poset SRC    one poset: nhis1|nhis2|nhis3, random:D[:SEED],
                             questionnaire:D[:SEED], or a file
  jaxdp dims                 random posets by dimension (Figure 2)
  jaxdp structure            random posets of fixed d by depth and edges (Figure 3)
  jaxdp sample --poset SRC   draw poset-ball noise and print its shape and E||Z||^2
  jaxdp release --poset SRC --data FILE --eps E
                             publishable counts: exact integer noise, ChaCha20 key

A poset file is JSON ({"order": [[0/1, ...], ...]}, {"d": D, "edges": [[i, j], ...]}
with (i, j) meaning p_i < p_j, i.e. "i requires j", or {"requires": {"q2": ["q1"]}}),
or text: a square 0/1 order matrix, one row per line, or "d D" then "i j" edge lines.
See jaxdp.Poset.load.

Outputs go to out/<command>/ by default (an ignored folder: running a study never
changes the published results/), named after the command or the poset.
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
GENERATORS = ("threefry", "rbg", "chacha8")  # jaxdp.random.GENERATORS (jax not yet imported)


class UsageError(Exception):
  """A bad option or file: printed as one line, exit status 2."""


def main(argv=None) -> int:
  args = _parser().parse_args(argv)
  try:
    _setup_devices(args.devices)
    _setup_processes(args)
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

  import jaxdp
  from jaxdp.experiments import studies

  _check_out(args.out)
  if args.command in (None, "nhis"):
    args.command = "nhis"
    posets = [_load_poset(f"nhis{s}") for s in _int_list(args.sections, "--sections")]
  else:
    posets = [_load_poset(args.poset)]
  noises = _noise_list(args.mechanisms)
  key = jaxdp.random.study_key(args.seed, args.generator)
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
  name = args.command if args.command == "nhis" else f"poset_{posets[0].name or 'file'}"
  written = _write(args.out, name, rows, table)
  if not args.no_plot:
    written += _plot_study(args.out, name, rows)
  _report(args.out, written)
  return 0


def _cmd_dims(args) -> int:
  import jaxdp
  from jaxdp.experiments import studies

  _check_out(args.out)

  dims = _int_list(args.dims, "--dims")
  for d in dims:
    _check_random_d(d, "--dims")
  summary, per = studies.random_by_dimension(
      jaxdp.random.study_key(args.seed, args.generator), dims,
      posets_per_dim=args.posets, num_samples=args.samples,
      insertion_samples=args.insertion_samples)
  table = _group_table(summary, "d")
  print(table)
  written = _write(args.out, "dims", summary, table, extra={"per_poset": per})
  if not args.no_plot:
    written += _plot_groups(args.out, "dims", summary, "d", "dimension d")
  _report(args.out, written)
  return 0


def _cmd_structure(args) -> int:
  import jaxdp
  from jaxdp.experiments import studies

  _check_out(args.out)

  _check_random_d(args.d, "--d")
  by_depth, by_edges, per = studies.random_by_structure(
      jaxdp.random.study_key(args.seed, args.generator), args.d, num_posets=args.posets,
      num_samples=args.samples, insertion_samples=args.insertion_samples,
      min_group=args.min_group)
  table = _group_table(by_depth, "depth") + "\n\n" + _group_table(by_edges, "dag_edges")
  if not by_depth and not by_edges:
    table = (f"No group has at least --min-group {args.min_group} posets (of "
             f"{args.posets}); lower --min-group or raise --posets.")
  print(table)
  written = _write(args.out, "structure", {"by_depth": by_depth, "by_edges": by_edges},
                   table, extra={"per_poset": per})
  if not args.no_plot:
    written += _plot_groups(args.out, "structure_depth", by_depth, "depth", "depth")
    written += _plot_groups(args.out, "structure_edges", by_edges, "dag_edges",
                            "DAG edges")
  _report(args.out, written)
  return 0


def _cmd_sample(args) -> int:
  import jax
  import jax.numpy as jnp
  import numpy as np

  import jaxdp

  poset = _load_poset(args.poset)
  n, dim = args.samples, poset.d + 1
  target = None
  if args.out:
    path = Path(args.out)
    try:
      path.parent.mkdir(parents=True, exist_ok=True)
      target = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32,
                                         shape=(n, dim))
    except OSError as e:
      raise UsageError(f"--out {args.out}: cannot write ({e.strerror})") from None
  key = jaxdp.random.study_key(args.seed, args.generator)
  total, done, last = 0.0, 0, time.perf_counter()
  while done < n:  # in chunks: memory stays bounded whatever --samples is
    m = min(args.chunk, n - done)
    z = jaxdp.random.poset_ball(jax.random.fold_in(key, done // args.chunk), poset, (m,))
    total += float(jnp.sum(z[:, 1:] ** 2))
    if target is not None:
      target[done:done + m] = np.asarray(z)
    done += m
    now = time.perf_counter()
    if now - last > 2.0 and done < n:
      print(f"[jaxdp sample] {done:,}/{n:,} poset-ball points drawn"
            + (f" into {args.out}" if target is not None else ""), file=sys.stderr,
            flush=True)
      last = now
  if target is not None:
    target.flush()
  sq = total / n
  print(f"poset {poset!r}: {n:,} exactly uniform points of its poset ball, "
        f"shape ({n}, {dim}), E||Z_(1:)||^2 = {sq:.5f} "
        f"(ratio to the l_inf cube's d/3: {sq / (poset.d / 3):.5f})"
        + (f"; wrote {args.out}" if target is not None else ""))
  return 0


def _cmd_release(args) -> int:
  """Publishable poset counts: a secure accountant (ChaCha20 key from the OS) and the
  exact mechanism; prints and writes the integer release, never the key or data."""
  import numpy as np

  import jaxdp

  poset = _load_poset(args.poset)
  rows = _load_rows(args.data, poset.d)
  acct = jaxdp.Accountant.create(args.eps, secure=True)
  mech = jaxdp.PosetCountMechanism(poset, args.eps, noise=args.noise, exact=True,
                                   on_invalid=args.on_invalid)
  acct, out = jaxdp.release(acct, mech, rows)
  counts = np.asarray(jaxdp.raise_if_refused(acct, out)).astype(int).tolist()
  names = ["respondents"] + list(poset.element_names)
  payload = {"poset": repr(poset), "eps": args.eps, "noise": args.noise,
             "mechanism": "exact integer K-norm noise (jaxdp.exact), ChaCha20 key from "
                          "the OS", "counts": dict(zip(names, counts))}
  if args.out:
    path = Path(args.out)
    try:
      path.parent.mkdir(parents=True, exist_ok=True)
      path.write_text(json.dumps(payload, indent=2))
    except OSError as e:
      raise UsageError(f"--out {args.out}: cannot write ({e.strerror})") from None
  print(f"eps = {args.eps:g} release of {poset!r} counts ({args.noise} noise, exact "
        "integers, safe to publish):")
  for name, c in zip(names, counts):
    print(f"  {name:>12}: {c}")
  if args.out:
    print(f"wrote {args.out}", file=sys.stderr)
  return 0


def _load_rows(src, d):
  """0/1 answers: a .npy array (n, d) or a CSV with d columns (an optional header)."""
  import numpy as np
  path = Path(src)
  if not path.is_file():
    raise UsageError(f"--data {src!r}: no such file")
  try:
    if path.suffix == ".npy":
      rows = np.load(path, allow_pickle=False)
    else:
      with open(path, newline="") as f:
        lines = [r for r in csv.reader(f) if r]
      if lines and not all(v.strip().lstrip("-").isdigit() for v in lines[0]):
        lines = lines[1:]                                     # a header
      rows = np.array([[int(v) for v in r] for r in lines], dtype=np.int64)
  except (ValueError, OverflowError, OSError) as e:  # OverflowError: beyond int64
    raise UsageError(f"--data {src!r}: cannot read 0/1 rows ({e})") from None
  if rows.ndim != 2 or rows.shape[1] != d:
    raise UsageError(f"--data {src!r}: expected {d} columns (one 0/1 answer per "
                     f"question); got shape {rows.shape}")
  return rows


def _check_random_d(d, opt):
  """Random posets use the general sampler (2^d tables): check d before any work."""
  from jaxdp._poset_tables import GENERAL_MAX_D
  if not 1 <= d <= GENERAL_MAX_D:
    raise UsageError(f"{opt} {d}: random posets need 1 <= d <= {GENERAL_MAX_D} (the exact "
                     "sampler for a general poset holds tables of 2^d entries)")


# ------------------------------------------------------------------ parsing
POSET_HELP = ("nhis1|nhis2|nhis3, random:D[:SEED], questionnaire:D[:SEED], or a "
              "JSON/text file")


def _parser():
  fmt = _HelpFormatter
  ap = argparse.ArgumentParser(
      prog="jaxdp", description="Exact poset-ball DP noise: utility studies.",
      epilog=__doc__.split("\n\n", 1)[1], formatter_class=fmt)
  ap.set_defaults(func=_cmd_study, command="nhis", sections="1,2,3", poset=None,
                  samples=1_000_000, insertion_samples=20_000, eps=1.0,
                  mechanisms=",".join(NOISES), out="out/nhis", devices=None,
                  seed=0, no_plot=False, generator="threefry", coordinator=None,
                  num_processes=None, process_id=None)
  sub = ap.add_subparsers(dest="command")

  def common(p, samples, out):
    p.add_argument("--samples", type=_pos_int, default=samples,
                   help="exact-sampler draws per poset (1e6 and 1_000_000 work)")
    p.add_argument("--out", default=out, help="output directory")
    p.add_argument("--devices", type=_pos_int, default=None,
                   help="number of devices to shard over (on CPU, that many host "
                        "devices are created; default: all local devices)")
    p.add_argument("--seed", type=int, default=0, help="PRNG seed of the study")
    p.add_argument("--coordinator", default=None,
                   help="HOST:PORT of process 0, to run one study over several "
                        "processes or hosts (jax.distributed; with --num-processes "
                        "and --process-id)")
    p.add_argument("--num-processes", type=_pos_int, default=None,
                   help="processes in the run")
    p.add_argument("--process-id", type=int, default=None,
                   help="this process's index, 0 .. N-1")
    p.add_argument("--generator", choices=GENERATORS, default="threefry",
                   help="PRNG of the study (threefry: the default and fastest on CPU)")
    p.add_argument("--no-plot", action="store_true", help="skip PNG plots")

  for name, help_ in [("nhis", "NHIS posets (Figure 4)"), ("poset", "one poset")]:
    p = sub.add_parser(name, help=help_, formatter_class=fmt)
    common(p, 1_000_000, f"out/{name}")
    if name == "nhis":
      p.add_argument("--sections", default="1,2,3", help="comma list from 1,2,3")
    else:
      p.add_argument("--poset", required=True,
                     help=POSET_HELP)
    p.add_argument("--insertion-samples", type=_nonneg_int, default=20_000,
                   help="draws from the published insertion sampler (0: skip)")
    p.add_argument("--eps", type=_pos_float, default=1.0,
                   help="eps of the count mechanisms whose MSE is estimated")
    p.add_argument("--mechanisms", default=",".join(NOISES),
                   help=f"comma list from {','.join(NOISES)} (empty: none)")
    p.set_defaults(func=_cmd_study)

  p = sub.add_parser("dims", help="random posets by dimension (Figure 2)",
                     formatter_class=fmt)
  common(p, 20_000, "out/dims")
  p.add_argument("--dims", default="4,6,8,10,12",
                 help="comma list of dimensions d (1 to 22)")
  p.add_argument("--posets", type=_pos_int, default=20, help="random posets per d")
  p.add_argument("--insertion-samples", type=_nonneg_int, default=1_000,
                 help="insertion-sampler draws per poset (0: skip)")
  p.set_defaults(func=_cmd_dims)

  p = sub.add_parser("structure", help="random posets by depth and edges (Figure 3)",
                     formatter_class=fmt)
  common(p, 2_000, "out/structure")
  p.add_argument("--d", type=_pos_int, default=10, help="dimension (1 to 22)")
  p.add_argument("--posets", type=_pos_int, default=5000, help="random posets")
  p.add_argument("--min-group", type=_pos_int, default=100,
                 help="drop groups with fewer posets (as the paper does)")
  p.add_argument("--insertion-samples", type=_nonneg_int, default=200,
                 help="insertion-sampler draws per poset (0: skip)")
  p.set_defaults(func=_cmd_structure)

  p = sub.add_parser("sample", help="draw poset-ball points (streamed to a .npy file)",
                     formatter_class=fmt)
  p.add_argument("--poset", default="nhis3",
                 help=POSET_HELP)
  p.add_argument("--samples", type=_pos_int, default=1_000_000, help="points to draw")
  p.add_argument("--out", default=None,
                 help="write the points to this .npy file, chunk by chunk (default: "
                      "only summarise)")
  p.add_argument("--chunk", type=_pos_int, default=1 << 20,
                 help="points per chunk (bounds memory)")
  p.add_argument("--seed", type=int, default=0, help="PRNG seed")
  p.add_argument("--generator", choices=GENERATORS, default="threefry",
                 help="PRNG (threefry: the default and fastest on CPU)")
  p.add_argument("--devices", type=_pos_int, default=None,
                 help="number of host devices to create (CPU)")
  p.set_defaults(func=_cmd_sample)
  p = sub.add_parser(
      "release", formatter_class=fmt,
      help="publishable counts of 0/1 survey answers (exact noise, ChaCha20 key)",
      description="Releases (respondents, yes-count per question) once, safe to publish: "
                  "exact integer noise (the exact rounding of the ideal mechanism's "
                  "noise) from a ChaCha20 key drawn from the OS. Costs --eps.")
  p.add_argument("--poset", default="nhis3",
                 help=POSET_HELP)
  p.add_argument("--data", required=True,
                 help="answers: .npy (n, d) or CSV with d 0/1 columns")
  p.add_argument("--eps", type=_pos_float, required=True, help="privacy parameter")
  p.add_argument("--noise", choices=("poset", "linf", "laplace"), default="poset",
                 help="K-norm noise with the poset ball (most accurate), the l_inf "
                      "ball, or Laplace")
  p.add_argument("--on-invalid", choices=("raise", "clip"), default="raise",
                 help="rows that are not filters: refuse, or clip to the largest filter")
  p.add_argument("--out", default=None, help="also write the release as JSON here")
  p.add_argument("--devices", type=_pos_int, default=None, help=argparse.SUPPRESS)
  p.set_defaults(func=_cmd_release)
  return ap


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter,
                     argparse.RawDescriptionHelpFormatter):
  """Every option's help shows its default; the epilog keeps its line breaks."""


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


def _integer(s):
  """An integer written as 1000000, 1_000_000 or 1e6 (but not 2.5)."""
  try:
    return int(s)
  except ValueError:
    v = float(s)
    if not v.is_integer():
      raise
    return int(v)


_pos_int = _number(_integer, lambda v: v >= 1, "a positive integer")
_nonneg_int = _number(_integer, lambda v: v >= 0, "an integer >= 0")
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


def _setup_processes(args):
  """--coordinator/--num-processes/--process-id: join a multi-process run
  (jax.distributed); the studies then shard over every process's devices."""
  given = [getattr(args, a, None) is not None for a in
           ("coordinator", "num_processes", "process_id")]
  if not any(given):
    return
  if not all(given):
    raise UsageError("--coordinator, --num-processes and --process-id go together")
  if not 0 <= args.process_id < args.num_processes:
    raise UsageError(f"--process-id {args.process_id}: must be in [0, "
                     f"{args.num_processes})")
  import jax
  jax.distributed.initialize(coordinator_address=args.coordinator,
                             num_processes=args.num_processes,
                             process_id=args.process_id)


def _devices(n):
  import jax
  if jax.process_count() > 1:  # every process's devices: the global mesh
    return jax.devices()
  if n is None:
    return None
  devs = jax.devices()
  if n > len(devs):
    raise UsageError(f"--devices {n}: only {len(devs)} device(s) available")
  return devs[:n]


def _sized_spec(src, kind, max_d):
  """``(d, seed)`` from ``KIND:D`` or ``KIND:D:SEED``, with 1 <= d <= max_d."""
  parts = src.split(":")
  try:
    d = int(parts[1])
    seed = int(parts[2]) if len(parts) > 2 else 0
  except (IndexError, ValueError):
    raise UsageError(f"--poset {src!r}: expected {kind}:D or {kind}:D:SEED") from None
  if not 1 <= d <= max_d:
    raise UsageError(f"--poset {src!r}: {kind} posets need 1 <= D <= {max_d}")
  return d, seed


def _load_poset(src):
  from jaxdp import Poset
  if src is None:
    raise UsageError("--poset is required")
  if src in ("nhis1", "nhis2", "nhis3"):
    return Poset.nhis(int(src[-1]))
  if src.startswith("random:"):
    import jax
    from jaxdp._poset_tables import GENERAL_MAX_D
    d, seed = _sized_spec(src, "random", GENERAL_MAX_D)
    return Poset.random(jax.random.key(seed), d)
  if src.startswith("questionnaire:"):
    from jaxdp.experiments.questionnaire import synthetic_questionnaire
    d, seed = _sized_spec(src, "questionnaire", 512)
    return synthetic_questionnaire(seed, d)
  path = Path(src)
  if not path.is_file():
    raise UsageError(f"--poset {src!r}: not nhis1|nhis2|nhis3, random:D, "
                     "questionnaire:D, or a file")
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


def _check_out(out):
  """Fails now, not after hours of sampling, when ``--out`` cannot be written."""
  path = Path(out)
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / ".jaxdp-write-check"
    probe.write_text("")
    probe.unlink()
  except OSError as e:
    raise UsageError(f"--out {out}: cannot write ({e.strerror})") from None


def _write(out, name, rows, table, extra=None) -> list:
  """Writes NAME.json, NAME.md and (when there are rows) NAME.csv; returns the names."""
  out = Path(out)
  payload = {"results": rows, "machine": _machine_line()}
  if extra:
    payload.update(extra)
  written = []
  try:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    written.append(f"{name}.json")
    (out / f"{name}.md").write_text(table + "\n")
    written.append(f"{name}.md")
    flat = rows if isinstance(rows, list) else [dict(r, group=k) for k, v in rows.items()
                                                for r in v]
    if flat:
      keys = sorted({k for r in flat for k in r})
      with open(out / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(flat)
      written.append(f"{name}.csv")
  except OSError as e:
    raise UsageError(f"--out {out}: cannot write ({e.strerror})") from None
  return written


def _report(out, written):
  print(f"\nwrote {', '.join(str(Path(out) / w) for w in written)}", file=sys.stderr)


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


def _plot_study(out, name, rows) -> list:
  labels = [f"{r['poset']} (d={r['d']})" for r in rows]
  return _plot(out, name, rows, list(range(len(rows))), "", "E||Z||² / (d/3)  (±2 SE)",
               ticks=labels, line="")


def _plot_groups(out, name, groups, field, label) -> list:
  return _plot(out, name, groups, [g[field] for g in groups], label,
               "mean E||Z||² / (d/3)  (±2 SE)", line="-")


def _plot(out, name, rows, xs, xlabel, ylabel, *, ticks=None, line=""):
  """Exact vs insertion-sampler ratios with 2-SE bars, saved as NAME.png."""
  plt = _pyplot()
  if plt is None or not rows:
    return []
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
  return [f"{name}.png"]


if __name__ == "__main__":  # pragma: no cover
  sys.exit(main())
