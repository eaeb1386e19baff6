"""The study commands: ``nhis``, ``poset`` (``--consistency``: raw vs consistent
releases), ``dims``, ``structure`` and ``sample``.

Each runs a study of :mod:`jaxdp.experiments.studies` (or draws poset-ball points),
prints its table and writes it (JSON, Markdown, CSV and a PNG plot) under ``--out``,
which is checked before any work.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import random as dprandom
from jaxdp.cli import outputs
from jaxdp.cli.devices import selected_devices
from jaxdp.cli.inputs import load_poset
from jaxdp.cli.parser import UsageError
from jaxdp.experiments import consistency, studies


def run_poset_study(args) -> int:
  """``jaxdp nhis`` (the NHIS posets of ``--sections``) and ``jaxdp poset``."""
  outputs.check_out_dir(args.out, args.overwrite_results)
  if args.command == "nhis":
    posets = [load_poset(f"nhis{s}") for s in args.sections]
  else:
    posets = [load_poset(args.poset)]
  noises = args.mechanisms
  key = dprandom.study_key(args.seed, args.generator)
  if args.consistency:
    return run_consistency(args, posets, key)
  t0 = time.perf_counter()
  rows = []
  for i, p in enumerate(posets):
    rows.append(
      studies.poset_study(
        jax.random.fold_in(key, i),
        p,
        num_samples=args.samples,
        insertion_samples=args.insertion_samples,
        eps=args.eps,
        noises=noises,
        devices=selected_devices(args.devices),
      )
    )
  elapsed = time.perf_counter() - t0
  table = outputs.study_table(rows, noises, args.eps)
  print(table)
  print(
    f"\n{args.samples:,} exact draws per poset, {args.insertion_samples:,} from the "
    f"published insertion sampler; {elapsed:.1f} s on {outputs.machine_line()}."
  )
  name = args.command if args.command == "nhis" else f"poset_{posets[0].name or 'file'}"
  written = outputs.write_results(args.out, name, rows, table)
  if not args.no_plot:
    written += outputs.plot_study(args.out, name, rows)
  outputs.report(args.out, written)
  return 0


def run_consistency(args, posets, key) -> int:
  """``--consistency``: raw vs consistent releases (:mod:`jaxdp.experiments.consistency`)."""
  t0 = time.perf_counter()
  rows = consistency.consistency_study(
    key, posets, num_samples=args.releases, eps_grid=args.eps_grid
  )
  table = consistency.consistency_table(rows)
  print(table)
  print(
    f"\n{args.releases:,} simulated releases per line; {time.perf_counter() - t0:.1f} s "
    f"on {outputs.machine_line()}."
  )
  stem = "consistency" if args.command == "nhis" else f"consistency_{posets[0].name}"
  written = outputs.write_results(args.out, stem, rows, table)
  if not args.no_plot:
    written += outputs.plot_consistency(args.out, stem, rows)
  outputs.report(args.out, written)
  return 0


def run_dims(args) -> int:
  """``jaxdp dims``: random posets by dimension (paper, Figure 2)."""
  outputs.check_out_dir(args.out, args.overwrite_results)
  summary, per = studies.random_by_dimension(
    dprandom.study_key(args.seed, args.generator),
    args.dims,
    posets_per_dim=args.posets,
    num_samples=args.samples,
    insertion_samples=args.insertion_samples,
  )
  table = outputs.group_table(summary, "d")
  print(table)
  written = outputs.write_results(
    args.out, "dims", summary, table, extra={"per_poset": per}
  )
  if not args.no_plot:
    written += outputs.plot_groups(args.out, "dims", summary, "d", "dimension d")
  outputs.report(args.out, written)
  return 0


def run_structure(args) -> int:
  """``jaxdp structure``: random posets of one d by depth and edges (paper, Figure 3)."""
  outputs.check_out_dir(args.out, args.overwrite_results)
  by_depth, by_edges, per = studies.random_by_structure(
    dprandom.study_key(args.seed, args.generator),
    args.d,
    num_posets=args.posets,
    num_samples=args.samples,
    insertion_samples=args.insertion_samples,
    min_group=args.min_group,
  )
  table = (
    outputs.group_table(by_depth, "depth")
    + "\n\n"
    + outputs.group_table(by_edges, "dag_edges")
  )
  if not by_depth and not by_edges:
    table = (
      f"No group has at least --min-group {args.min_group} posets (of "
      f"{args.posets}); lower --min-group or raise --posets."
    )
  print(table)
  written = outputs.write_results(
    args.out,
    "structure",
    {"by_depth": by_depth, "by_edges": by_edges},
    table,
    extra={"per_poset": per},
  )
  if not args.no_plot:
    written += outputs.plot_groups(args.out, "structure_depth", by_depth, "depth", "depth")
    written += outputs.plot_groups(
      args.out, "structure_edges", by_edges, "dag_edges", "DAG edges"
    )
  outputs.report(args.out, written)
  return 0


def run_sample(args) -> int:
  """``jaxdp sample``: poset-ball points, summarised and optionally streamed to .npy."""
  if args.out:
    outputs.check_out_file(args.out, args.overwrite_results)
  poset = load_poset(args.poset)
  n, dim = args.samples, poset.d + 1
  target = None
  if args.out:
    try:
      target = np.lib.format.open_memmap(
        Path(args.out), mode="w+", dtype=np.float32, shape=(n, dim)
      )
    except OSError as e:
      raise UsageError(f"--out {args.out}: cannot write ({e.strerror})") from None
  key = dprandom.study_key(args.seed, args.generator)
  total, done, last = 0.0, 0, time.perf_counter()
  while done < n:  # in chunks: memory stays bounded whatever --samples is
    m = min(args.chunk, n - done)
    z = dprandom.poset_ball(jax.random.fold_in(key, done // args.chunk), poset, (m,))
    total += float(jnp.sum(z[:, 1:] ** 2))
    if target is not None:
      target[done : done + m] = np.asarray(z)
    done += m
    now = time.perf_counter()
    if now - last > 2.0 and done < n:
      print(
        f"[jaxdp sample] {done:,}/{n:,} poset-ball points drawn"
        + (f" into {args.out}" if target is not None else ""),
        file=sys.stderr,
        flush=True,
      )
      last = now
  if target is not None:
    target.flush()
  sq = total / n
  print(
    f"poset {poset!r}: {n:,} exactly uniform points of its poset ball, "
    f"shape ({n}, {dim}), E||Z_(1:)||^2 = {sq:.5f} "
    f"(ratio to the l_inf cube's d/3: {sq / (poset.d / 3):.5f})"
    + (f"; wrote {args.out}" if target is not None else "")
  )
  return 0
