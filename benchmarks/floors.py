"""Every benchmark figure as a ratio to its floor, read from one results folder.

  python benchmarks/floors.py [--results DIR]

Reads the benchmarks' JSON files in ``--results`` (default ``results``) and writes
``<results>/floors.json`` and ``floors.md``: one row per figure (``floor_rows``), with
the benchmark, the path and size measured, the figure (a rate per second), its floor
(what the floor is and its rate, measured in the same run, side by side), the ratio
figure / floor as a rate (1: at the floor; 0.5: twice the floor's time; 10: ten times
the rate of a reference), the target where one is set, whether it is met, and the
machine (device name included). A figure whose benchmark records no floor is listed
with the floor "not measured". No JAX here: ``run_all.py --docs-only`` runs this on
the committed results.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floor_rows import EXTRACTORS


def machine_words(m) -> str:
  """A benchmark JSON's ``machine`` record in words (device names included)."""
  if isinstance(m, str):
    return m
  devices = ", ".join(m.get("devices", ()))
  return (
    f"{m.get('cpu', '?')}, {m.get('cpu_count', '?')} CPUs, "
    f"{m.get('backend', '?')} ({devices})"
  )


def _device(m) -> str:
  """The first device's name (``jax.devices()[0].device_kind``) in a ``machine``
  record; its platform where no name is recorded."""
  devices = m.get("devices") if isinstance(m, dict) else None
  if not devices:
    return "not recorded"
  platform, _, kind = devices[0].partition(":")
  return kind or platform


def summary(results: str | Path) -> dict:
  """The floors summary of the benchmarks' JSON files in ``results``.

  Returns:
    ``{"device", "rows", "without_figures"}``: ``rows`` one per figure
    (benchmark, path, size, rate, floor, floor_rate, ratio, target, met, machine,
    device, date); ``device`` the device the benchmarks ran on (``device.json``'s,
    written by ``device_run.sh``, else the first benchmark's); ``without_figures``
    the JSON files read that give no rate figure.
  """
  results = Path(results)
  rows, without, devices = [], [], []
  for path in sorted(results.glob("*.json")):
    if path.stem in ("floors", "device"):
      continue
    payload = json.loads(path.read_text())
    m = payload.get("machine", {})
    backend = m.get("backend", "?") if isinstance(m, dict) else "?"
    devices.append(_device(m))
    found = EXTRACTORS[path.stem](payload) if path.stem in EXTRACTORS else []
    if not found:
      without.append(path.stem)
    for row in found:
      target = row["target"]
      row.update(
        benchmark=path.stem,
        target=target and target.text,
        met=target and target.met(row["rate"], row["ratio"], backend),
        machine=machine_words(m),
        device=_device(m),
        date=payload.get("date", "not recorded"),
      )
      rows.append(row)
  # a part's own run (secure.py --only X writes secure_X.json) supersedes the same
  # rows of the full run
  own = {r["path"] for r in rows if r["benchmark"].startswith("secure_")}
  rows = [r for r in rows if not (r["benchmark"] == "secure" and r["path"] in own)]
  order = {name: i for i, name in enumerate(EXTRACTORS)}
  rows.sort(key=lambda r: order[r["benchmark"]])
  device = devices[0] if devices else "not recorded"
  if (results / "device.json").exists():
    listed = json.loads((results / "device.json").read_text()).get("devices") or []
    if listed:
      device = listed[0].get("kind") or listed[0].get("platform") or device
  return {"device": device, "rows": rows, "without_figures": without}


def _rate(x) -> str:
  if x is None:
    return "-"
  return f"{x:,.0f}" if x >= 100 else f"{x:,.3g}"


def _ratio(x) -> str:
  if x is None:
    return "-"
  return f"{x:,.2f}" if x < 10 else f"{x:,.1f}"


def _met(row) -> str:
  if row["target"] is None:
    return ""
  if row["met"] is None:
    return "not judged"
  return "yes" if row["met"] else "**no**"


def markdown(s: dict) -> str:
  """The summary as Markdown: one table, the machine stated once when all rows share
  it (else a column)."""
  machines = sorted({r["machine"] for r in s["rows"]})
  one = len(machines) == 1
  head = (
    "| benchmark | path | size | figure /s | floor (same run) | floor /s "
    "| figure / floor | target | met |" + ("" if one else " machine |")
  )
  lines = [
    "Each figure beside its floor, measured in the same run: figure / floor is the "
    "ratio of the two rates (1: at the floor; 0.5: twice the floor's time; above 1: "
    "faster than a reference). A target is judged on the ratio or on the rate; "
    '"not judged": no figure or floor in these results, or an accelerator\'s goal '
    "on the CPU. Written by `python benchmarks/floors.py` from each benchmark's JSON.",
    "",
    f"Device: {s['device']}." + (f" Machine: {machines[0]}." if one else ""),
    "",
    head,
    "|" + "---|" * head.count(" | ") + "---|",
  ]
  if not s["rows"]:
    lines[-2:] = ["No figure in these results."]
  for r in s["rows"]:
    size = "" if r["size"] is None else f"{r['size']:,}"
    figure_ = "not in these results" if r["rate"] is None else _rate(r["rate"])
    lines.append(
      f"| {r['benchmark']} | {r['path']} | {size} | {figure_} | {r['floor']} | "
      f"{_rate(r['floor_rate'])} | {_ratio(r['ratio'])} | "
      f"{r['target'] or ''} | {_met(r)} |" + ("" if one else f" {r['machine']} |")
    )
  if s["without_figures"]:
    lines += [
      "",
      "No rate figure in: " + ", ".join(f"`{n}`" for n in s["without_figures"]) + ".",
    ]
  return "\n".join(lines)


def write(results: str | Path) -> dict:
  """Writes ``<results>/floors.json`` and ``floors.md`` (:func:`summary`)."""
  s = summary(results)
  Path(results, "floors.json").write_text(json.dumps(s, indent=2))
  Path(results, "floors.md").write_text("# floors\n\n" + markdown(s) + "\n")
  print(
    f"wrote {Path(results, 'floors.json')} and .md ({len(s['rows'])} figures)", flush=True
  )
  return s


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--results", default="results", help="the benchmarks' folder")
  write(ap.parse_args(argv).results)


if __name__ == "__main__":
  main()
