"""The maintainer's tools pass on the whole tree: ruff's linter and formatter
(configured in pyproject.toml, installed by the test extra)."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.subprocess
@pytest.mark.parametrize(
  "command", [["check", "."], ["format", "--check", "."]], ids=["lint", "format"]
)
def test_ruff_is_clean(command):
  proc = subprocess.run(
    [sys.executable, "-m", "ruff", *command], cwd=ROOT, capture_output=True, text=True
  )
  assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
