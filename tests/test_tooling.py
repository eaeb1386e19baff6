"""The maintainer's tools pass on the whole tree: ruff's linter and formatter
(configured in pyproject.toml, installed by the test extra); CI runs the README's test
command as a new user would."""

import os
import shutil
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


def _git(*args):
  return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def _readme_test_command() -> str:
  """The README's second command: the second line of its first ``bash`` block."""
  lines = (ROOT / "README.md").read_text().splitlines()
  return lines[lines.index("```bash") + 2]


@pytest.mark.subprocess
def test_ci_runs_the_readmes_test_command_in_a_fresh_clone_named_jaxdp():
  """``.ci/run`` runs the README's test command, verbatim, in a clone of this HEAD in a
  folder named ``jaxdp`` (``git clone``'s default, which holds the virtual environment)
  and removes the clone afterwards. Its dry run makes the clone and stops there."""
  if shutil.which("git") is None or _git("rev-parse", "HEAD").returncode != 0:
    pytest.skip("not a git checkout")
  command = _readme_test_command()
  assert "pip install" in command and "pytest" in command, command
  proc = subprocess.run(
    ["bash", str(ROOT / ".ci" / "run")],
    env=dict(os.environ, CI_DRY_RUN="1"),
    capture_output=True,
    text=True,
    timeout=120,
  )
  assert proc.returncode == 0, proc.stderr
  got = dict(line.split(": ", 1) for line in proc.stdout.splitlines())
  assert got["command"] == command
  assert Path(got["folder"]).name == "jaxdp"
  assert got["head"] == _git("rev-parse", "HEAD").stdout.strip()
  assert not Path(got["folder"]).exists()
