"""Where the commands write (``--out``), checked before any work, and what they write."""

from __future__ import annotations

import csv
import json
import os
import sys
from pathlib import Path

import jax

from jaxdp.cli.parser import UsageError

# The published figures and tables of a source checkout (absent in an installed package).
RESULTS_DIR = Path(__file__).resolve().parents[2] / "results"


def _refuse_results(out, overwrite_results: bool):
  """An ``--out`` inside the repository's ``results/`` needs ``--overwrite-results``."""
  results = RESULTS_DIR.resolve()
  if overwrite_results or not results.is_dir():
    return
  path = Path(out).resolve()
  if path == results or results in path.parents:
    raise UsageError(
      f"--out {out}: inside the repository's results/ (the published "
      "figures); pass --overwrite-results to rewrite them"
    )


def _probe_dir(path: Path, out):
  """Creates ``path`` and writes and removes a file in it; ``out`` is the flag's value."""
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / ".jaxdp-write-check"
    probe.write_text("")
    probe.unlink()
  except FileExistsError:  # mkdir: the path, or a folder above it, is a file
    raise UsageError(
      f"--out {out}: cannot write ({path} or a folder above it is a file)"
    ) from None
  except OSError as e:
    raise UsageError(f"--out {out}: cannot write ({e.strerror})") from None


def check_out_dir(out, overwrite_results: bool = False):
  """Creates the ``--out`` directory and checks it can be written, before any work.

  Args:
    out: the directory.
    overwrite_results: allow a directory inside the repository's ``results/``.

  Raises:
    UsageError: inside ``results/`` without ``overwrite_results``, or not writable.
  """
  _refuse_results(out, overwrite_results)
  _probe_dir(Path(out), out)


def check_out_file(out, overwrite_results: bool = False):
  """Creates the folder of the ``--out`` file and checks the file can be written there,
  without creating or changing the file itself.

  Args:
    out: the file.
    overwrite_results: allow a file inside the repository's ``results/``.

  Raises:
    UsageError: inside ``results/`` without ``overwrite_results``, a directory, or not
      writable.
  """
  _refuse_results(out, overwrite_results)
  path = Path(out)
  if path.is_dir():
    raise UsageError(f"--out {out}: is a directory; name a file")
  _probe_dir(path.parent, out)
  if path.exists() and not os.access(path, os.W_OK):
    raise UsageError(f"--out {out}: cannot write (permission denied)")


def machine_line() -> str:
  return (
    f"{os.cpu_count()} CPU cores, {jax.default_backend()} ({len(jax.devices())} device(s))"
  )


def write_results(out, name: str, rows, table: str, extra=None) -> list:
  """Writes NAME.json, NAME.md and (when there are rows) NAME.csv into ``out``.

  Args:
    out: the output directory.
    name: the files' stem.
    rows: a list of dict rows, or a dict of such lists (one per group).
    table: the Markdown table.
    extra: more top-level entries of the JSON file.

  Returns:
    The names of the files written.
  """
  out = Path(out)
  payload = {"results": rows, "machine": machine_line()}
  if extra:
    payload.update(extra)
  written = []
  try:
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{name}.json").write_text(json.dumps(payload, indent=2))
    written.append(f"{name}.json")
    (out / f"{name}.md").write_text(table + "\n")
    written.append(f"{name}.md")
    flat = (
      rows
      if isinstance(rows, list)
      else [dict(r, group=k) for k, v in rows.items() for r in v]
    )
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


def report(out, written):
  print(f"\nwrote {', '.join(str(Path(out) / w) for w in written)}", file=sys.stderr)


def study_table(rows, noises, eps) -> str:
  head = ["poset", "d", "exact ratio", "insertion ratio", "diff (z)"]
  head += [f"MSE {n}" for n in noises]
  lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
  for r in rows:
    cells = [r["poset"], str(r["d"]), f"{r['exact_ratio']:.4f} ± {r['exact_ratio_se']:.4f}"]
    if "insertion_ratio" in r:
      cells += [
        f"{r['insertion_ratio']:.4f} ± {r['insertion_ratio_se']:.4f}",
        f"{r['difference_z']:+.1f}",
      ]
    else:
      cells += ["-", "-"]
    for n in noises:
      exact = r.get(f"mse_{n}_exact")
      cells.append(
        f"{r[f'mse_{n}']:.2f} ± {r[f'mse_{n}_se']:.2f}"
        + (f" (exact {exact:.1f})" if exact is not None else "")
      )
    lines.append("| " + " | ".join(cells) + " |")
  return (
    "Ratio = E||Z||^2 (root dropped) / (d/3), poset ball vs l_inf cube; MSE = "
    f"E||noise||^2 of the (d+1)-vector at eps = {eps:g}.\n\n" + "\n".join(lines)
  )


def group_table(groups, field: str) -> str:
  lines = [
    f"| {field} | posets | exact ratio | insertion ratio | insertion - exact (paired) |",
    "|---|---|---|---|---|",
  ]
  for g in groups:
    ins = (
      f"{g['insertion_ratio']:.4f} ± {g['insertion_ratio_se']:.4f}"
      if "insertion_ratio" in g
      else "-"
    )
    diff = (
      f"{g['difference']:+.4f} ± {g['difference_se']:.4f}" if "difference" in g else "-"
    )
    lines.append(
      f"| {g[field]} | {g['posets']} | {g['exact_ratio']:.4f} ± "
      f"{g['exact_ratio_se']:.4f} | {ins} | {diff} |"
    )
  return "\n".join(lines)


def _pyplot():
  try:  # matplotlib is optional (jaxdp[plots]) and slow to import: only when plotting
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
  except ImportError:
    print(
      "jaxdp: matplotlib not installed; skipping plots (pip install 'jaxdp[plots]')",
      file=sys.stderr,
    )
    return None


def plot_study(out, name: str, rows) -> list:
  labels = [f"{r['poset']} (d={r['d']})" for r in rows]
  return _plot(
    out,
    name,
    rows,
    list(range(len(rows))),
    "",
    "E||Z||² / (d/3)  (±2 SE)",
    ticks=labels,
    line="",
  )


def plot_groups(out, name: str, groups, field: str, label: str) -> list:
  return _plot(
    out,
    name,
    groups,
    [g[field] for g in groups],
    label,
    "mean E||Z||² / (d/3)  (±2 SE)",
    line="-",
  )


def _plot(out, name, rows, xs, xlabel, ylabel, *, ticks=None, line=""):
  """Exact vs insertion-sampler ratios with 2-SE bars, saved as NAME.png."""
  plt = _pyplot()
  if plt is None or not rows:
    return []
  fig, ax = plt.subplots(figsize=(6, 4))
  series = [
    ("exact_ratio", "o", "exact sampler"),
    ("insertion_ratio", "s", "published insertion sampler"),
  ]
  for col, marker, label in series:
    if all(col in r for r in rows):
      ax.errorbar(
        xs,
        [r[col] for r in rows],
        yerr=[2 * r[col + "_se"] for r in rows],
        fmt=marker + line,
        label=label,
      )
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


def plot_consistency(out, name: str, rows) -> list:
  """MSE of the consistent over the raw release against eps, one panel per poset and
  data shape, one line per noise, saved as NAME.png."""
  plt = _pyplot()
  if plt is None or not rows:
    return []
  panels = sorted({(r["poset"], r["shape"]) for r in rows})
  fig, axes = plt.subplots(1, len(panels), figsize=(3 * len(panels), 3.2), squeeze=False)
  for ax, (poset, shape) in zip(axes[0], panels):
    for noise in sorted({r["noise"] for r in rows}):
      sel = [
        r for r in rows if (r["poset"], r["shape"], r["noise"]) == (poset, shape, noise)
      ]
      ax.plot(
        [r["eps"] for r in sel],
        [r["mse_consistent"] / r["mse_raw"] for r in sel],
        "o-",
        label=noise,
      )
    ax.set_xscale("log")
    ax.set_title(f"{poset}, {shape}", fontsize=9)
    ax.set_xlabel("eps")
  axes[0][0].set_ylabel("MSE consistent / raw")
  axes[0][0].legend(fontsize=7)
  fig.tight_layout()
  fig.savefig(Path(out) / f"{name}.png", dpi=110)
  plt.close(fig)
  return [f"{name}.png"]
