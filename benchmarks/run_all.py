"""Runs every benchmark and writes JSON and Markdown into one folder.

  python benchmarks/run_all.py [--out DIR] [--quick] [--only samplers,secure]
  python benchmarks/run_all.py --out results          # rewrite the committed results
  python benchmarks/run_all.py --docs-only [--out results]

``--out`` defaults to a fresh ``out/benchmarks/<UTC date and time>/`` (git-ignored),
as every benchmark's does: only ``--out results`` rewrites the committed results.
Each benchmark records the machine (CPU, core count, backend, devices, jax version);
this script adds the date of the run to every JSON it wrote. On an accelerator the
same command runs unchanged; JAX picks the device. ``--quick`` runs the quick tier
(:data:`QUICK_TIER`: the benchmarks that compile few kernels) at small sizes and few
repeats, a check that the benchmarks run, not for reporting; with ``--only`` it runs
the named benchmarks at those sizes (every one: ``--only`` naming them all). ``--only``
runs the named benchmarks alone (a dry run of
``benchmarks/device_run.sh``; no README then). A benchmark that fails is reported and
the others still run; the exit status is 1 then. Every run (``--quick`` and
``--only`` too) ends with ``<out>/floors.json`` and ``floors.md``: every figure in
``<out>`` as a ratio to its floor (``benchmarks/floors.py``). Besides
``<out>/README.md`` (the benchmarks' tables joined), a full run into ``results``
writes the documentation's benchmarks page, ``docs/benchmarks.md``, and the tables of
the guides that include results (:data:`GENERATED`), from the files there;
``--docs-only`` regenerates them from existing results (``--out``'s default then:
``results``) without running anything (it needs neither JAX nor jaxdp).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import re
import sys
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floors import machine_words, markdown, summary
from floors import write as write_floors
from folders import fresh_folder

ROOT = Path(__file__).resolve().parent.parent
DOCS_PAGE = ROOT / "docs" / "benchmarks.md"
GUIDES = ROOT / "docs" / "guides"
# A guide's table read from results/: the lines between these markers are rewritten
# from results/<file> (e.g. knorm_family_error.md) with the benchmarks page.
GENERATED = re.compile(
  r"^(<!-- generated from results/(\S+) by benchmarks/run_all.py; do not edit -->\n)"
  r"(.*?)^(<!-- end of generated table -->)$",
  re.S | re.M,
)

# (results name, command that writes it), in the order the page shows them.
BENCHMARKS = (
  ("samplers", "python benchmarks/samplers.py"),
  ("montecarlo", "python benchmarks/montecarlo.py"),
  ("accounting", "python benchmarks/accounting.py"),
  ("float_attack", "python benchmarks/float_attack.py"),
  ("recompile", "python benchmarks/recompile.py"),
  ("session", "python benchmarks/session.py"),
  ("secure", "python benchmarks/secure.py"),
  ("generators", "python benchmarks/generators.py"),
  ("sp_costs", "python benchmarks/sp_costs.py"),
  ("reporting", "python benchmarks/reporting.py"),
  ("ledger", "python benchmarks/ledger.py"),
  ("consistency", "python benchmarks/consistency.py"),
  ("sampler_profile", "python benchmarks/sampler_profile.py"),
  ("exact_profile", "python benchmarks/exact_profile.py"),
  ("exact_profile_tree", "python benchmarks/exact_profile.py --tree"),
  ("training", "python benchmarks/training.py"),
  ("dpsgd_accounting", "python benchmarks/dpsgd_accounting.py"),
  ("knorm_family", "python benchmarks/knorm_family.py"),
)
# The paper's studies: (results name, title, command that writes it).
STUDIES = (
  (
    "nhis/nhis",
    "The NHIS study",
    "python -m jaxdp nhis --out results/nhis --overwrite-results",
  ),
  (
    "dims/dims",
    "Random posets by dimension (paper, Figure 2)",
    "python -m jaxdp dims --out results/dims --overwrite-results",
  ),
  (
    "structure/structure",
    "Random posets with d = 10 by depth and by DAG edges (paper, Figure 3)",
    "python -m jaxdp structure --out results/structure --overwrite-results",
  ),
  (
    "consistency/consistency",
    "Raw versus order-consistent releases on NHIS (jaxdp.consistent)",
    "python -m jaxdp nhis --consistency --out results/consistency --overwrite-results",
  ),
  (
    "consistency/consistency_questionnaire300-0",
    "Raw versus order-consistent releases on a 300-question questionnaire",
    "python -m jaxdp poset --poset questionnaire:300 --consistency --releases 4096 "
    "--out results/consistency --overwrite-results",
  ),
)


# What ``--quick`` runs without ``--only``: the benchmarks that compile few kernels
# (a new user's check that the benchmarks run, in about two minutes on 2 cores).
QUICK_TIER = (
  "montecarlo",
  "accounting",
  "recompile",
  "session",
  "reporting",
  "ledger",
  "consistency",
)
# The arguments a ``--quick`` run adds to each benchmark's command: small sizes and
# few repeats, a smoke run of the whole set (not for reporting).
QUICK = {
  "samplers": ["--quick", "--n", "20000", "--numpy-n", "200", "--large-n", "2000"],
  "montecarlo": ["--n", "100000"],
  "accounting": ["--accountants", "100", "--releases", "10"],
  "float_attack": ["--eps", "1"],
  "recompile": ["--posets", "5"],
  "session": ["--n", "10000", "--repeats", "2", "--queries", "count"],
  "secure": [
    "--quick",
    "--n",
    "20000",
    "--opendp-n",
    "1000",
    "--n-tree",
    "2000",
    "--n-host",
    "8192",
    "--n-wide",
    "2000",
  ],
  "generators": ["--n", "20000"],
  "sp_costs": ["--quick", "--n", "20000"],
  "reporting": ["--quick"],
  "ledger": ["--releases", "20", "--charges", "2000", "--rows", "20000"],
  "consistency": ["--nhis-batch", "10000", "--q-batch", "200", "--dims", "10,100"],
  "sampler_profile": ["--quick"],
  "exact_profile": ["--n", "20000", "--repeats", "1"],
  "exact_profile_tree": ["--n", "20000", "--repeats", "1"],
  "training": ["--steps", "5", "--large-steps", "1", "--rounds", "2"],
  "dpsgd_accounting": [],
  "knorm_family": ["--quick"],
}


def run_benchmarks(out: str, quick: bool, only=None) -> list[str]:
  """Runs every benchmark (or those named in ``only``), each its command's ``main``
  with ``--out out`` (and :data:`QUICK`'s arguments with ``quick``), writing
  ``<out>/<name>.json`` and ``.md``; dates the JSON. A benchmark that raises or writes
  no JSON is reported and the others still run.

  Returns:
    The names of the benchmarks that failed.
  """
  from common import machine  # imported here: --docs-only needs no JAX

  print(f"machine: {machine()}", flush=True)
  date = datetime.datetime.now(datetime.timezone.utc).date().isoformat()
  failed = []
  for name, command in BENCHMARKS:
    if not _wanted(name, only):
      continue
    script, *args = command.split()[1:]
    args = ["--out", out, *args, *(QUICK[name] if quick else [])]
    t0, cpu0, path = time.perf_counter(), time.process_time(), Path(out, f"{name}.json")
    try:
      importlib.import_module(Path(script).stem).main(args)
    except Exception:  # one benchmark's failure leaves the others' results
      traceback.print_exc()
      failed.append(name)
    else:
      if path.exists():
        payload = json.loads(path.read_text())
        payload["date"] = date
        path.write_text(json.dumps(payload, indent=2))
      else:
        print(f"{name}: wrote no {path}", flush=True)
        failed.append(name)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    print(f"{name}: {wall:.0f} s, {cpu:.0f} s CPU", flush=True)
  return failed


def _wanted(name: str, only) -> bool:
  return only is None or name in only


def combined_readme(out: str | Path) -> str:
  """``<out>/README.md``: the benchmarks' Markdown tables, joined."""
  return "\n\n".join(
    Path(out, f"{name}.md").read_text()
    for name, _ in BENCHMARKS
    if Path(out, f"{name}.md").exists()
  )


def _demoted(markdown: str) -> str:
  """A results table file as a page section: headings one level down, and the
  ``Machine:`` line left out (the page's header table states it)."""
  lines = []
  for line in markdown.strip().splitlines():
    if line.startswith("Machine: "):
      continue
    lines.append("#" + line if line.startswith("#") else line)
  text = "\n".join(lines)
  while "\n\n\n" in text:
    text = text.replace("\n\n\n", "\n\n")
  return text


def _header_row(results: Path, name: str) -> str:
  """The page header's row for ``results/name.json``: machine, JAX version, date
  (``not run`` for a benchmark whose results are not there yet)."""
  if not (results / f"{name}.json").exists():
    return f"| `{name}` | not run | not run | not run |"
  payload = json.loads((results / f"{name}.json").read_text())
  m = payload.get("machine", {})
  jax_version = m.get("jax", "not recorded") if isinstance(m, dict) else "not recorded"
  return (
    f"| `{name}` | {machine_words(m)} | {jax_version} | "
    f"{payload.get('date', 'not recorded')} |"
  )


def benchmarks_page(results: str | Path = ROOT / "results") -> str:
  """The documentation's benchmarks page, from the JSON and Markdown in ``results``.

  Args:
    results: the folder the benchmarks and studies wrote.

  Returns:
    The page's Markdown: a header table of where and when each table was measured
    (machine, JAX version and date as each JSON records them), then every table
    (a benchmark listed here whose results are not in ``results`` yet: "Not run
    yet"), after the distance of every figure to its floor (``floors.md``'s table,
    from the same JSON).
  """
  results = Path(results)
  head = [
    "# Benchmarks and studies",
    "",
    "<!-- Generated by benchmarks/run_all.py from results/; do not edit by hand. "
    "Regenerate with: python benchmarks/run_all.py --docs-only -->",
    "",
    "Every table below is read from `results/`, written by the command named "
    "in its section (`python benchmarks/run_all.py --out results` runs all the "
    "benchmarks; without `--out results`, each writes a fresh folder under "
    "`out/benchmarks/` instead). "
    "Timings depend on the machine and vary from run to run; the header says "
    "where each table was measured.",
    "",
    "| results | machine | jax | date |",
    "|---|---|---|---|",
  ]
  body = ["", "## Distance to the floor", "", markdown(summary(results))]
  for name, command in BENCHMARKS:
    head.append(_header_row(results, name))
    table = results / f"{name}.md"
    body += [
      "",
      _demoted(table.read_text()) if table.exists() else f"## {name}\n\nNot run yet.",
      "",
      f"Written by `{command} --out results`.",
    ]
  body += ["", "# The paper's studies"]
  for name, title, command in STUDIES:
    head.append(_header_row(results, name))
    table = results / f"{name}.md"
    body += [
      "",
      f"## {title}",
      "",
      f"Written by `{command}`.",
      "",
      _demoted(table.read_text()) if table.exists() else "Not run yet.",
    ]
  return "\n".join(head + body) + "\n"


def guide_page(text: str, results: str | Path = ROOT / "results") -> str:
  """A guide with its generated tables (:data:`GENERATED` markers) read from
  ``results`` ("Not run yet." for a file not there)."""

  def fill(m):
    table = Path(results, m.group(2))
    body = table.read_text().strip() if table.exists() else "Not run yet."
    return f"{m.group(1)}\n{body}\n\n{m.group(4)}"

  return GENERATED.sub(fill, text)


def write_docs_page(results: str | Path = ROOT / "results", page: Path = DOCS_PAGE) -> None:
  """Writes :func:`benchmarks_page` of ``results`` to ``page``, and the generated
  tables of the guides that have them."""
  page.write_text(benchmarks_page(results))
  print(f"wrote {page}", flush=True)
  for guide in sorted(GUIDES.glob("*.md")):
    text = guide.read_text()
    if GENERATED.search(text) and guide_page(text, results) != text:
      guide.write_text(guide_page(text, results))
      print(f"wrote {guide}", flush=True)


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument(
    "--out",
    help="output folder (default: a fresh out/benchmarks/<UTC date and time>/; with "
    "--docs-only, results); --out results rewrites the committed results",
  )
  ap.add_argument(
    "--quick",
    action="store_true",
    help="the quick tier: a few benchmarks at small sizes (with --only: those, small)",
  )
  ap.add_argument("--only", help="comma-separated benchmark names (default: all)")
  ap.add_argument(
    "--docs-only",
    action="store_true",
    help="only regenerate <out>/README.md and docs/benchmarks.md from the results in --out",
  )
  args = ap.parse_args(argv)
  only = set(QUICK_TIER) if args.quick and not args.only else None
  if args.only:
    only = set(args.only.split(","))
    unknown = only - {name for name, _ in BENCHMARKS}
    if unknown:
      ap.error(f"--only: unknown benchmarks {sorted(unknown)}")
  out = args.out or (str(ROOT / "results") if args.docs_only else fresh_folder())
  failed = [] if args.docs_only else run_benchmarks(out, args.quick, only)
  if Path(out).is_dir():
    write_floors(out)
  if only is None:
    Path(out).mkdir(parents=True, exist_ok=True)
    Path(out, "README.md").write_text(combined_readme(out))
    print(f"wrote {out}/README.md", flush=True)
    if Path(out).resolve() == ROOT / "results" and not args.quick:
      write_docs_page(out)
    else:
      print(
        f"{DOCS_PAGE} left alone: it shows results/ only (--out {out}"
        f"{', --quick' if args.quick else ''})",
        flush=True,
      )
  else:
    subset = "--only" if args.only else "--quick"
    print(f"{subset} ran a subset: README.md and the docs page left alone", flush=True)
  print(f"results in {out}", flush=True)
  if failed:
    print(f"failed: {', '.join(failed)}", file=sys.stderr, flush=True)
    return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
