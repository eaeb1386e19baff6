"""Where a benchmark writes: ``--out``, by default a fresh folder under ``out/``.

Every benchmark's default is a new ``out/benchmarks/<UTC date and time>/`` (``out/`` is
git-ignored), so a run never rewrites the committed ``results/`` (the source of
``docs/benchmarks.md``) unless ``--out results`` names it. No JAX here: ``run_all.py
--docs-only`` imports this module without JAX.
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

BASE = Path("out", "benchmarks")


def fresh_folder(base: str | Path = BASE) -> str:
  """A folder under ``base`` (relative to the working directory) that does not exist
  yet, named by the UTC date and time: ``out/benchmarks/2026-01-31T12-00-00Z``."""
  stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H-%M-%SZ")
  path, i = Path(base, stamp), 1
  while path.exists():
    i += 1
    path = Path(base, f"{stamp}-{i}")
  return str(path)


def add_out(ap: argparse.ArgumentParser) -> None:
  """Adds ``--out`` to a benchmark's parser, with a fresh folder as its default."""
  ap.add_argument(
    "--out",
    default=fresh_folder(),
    help=f"output folder (default: a fresh {BASE}/<UTC date and time>/; "
    "--out results rewrites the committed results)",
  )
