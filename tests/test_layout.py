"""The package's architecture, checked: no import circle, modules of a readable size,
no private name used across modules, and every old module path still working."""

import ast
import functools
import importlib
import json
import pathlib
import subprocess
import sys

import pytest

import jaxdp
from tests.conftest import SLOWEST_FILES

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import import_graph  # noqa: E402

# Module paths that moved, and where they live now: importing the old path warns and
# gives the new module itself.
MOVED = {
  "jaxdp.balls": "jaxdp.samplers.balls",
  "jaxdp.chacha": "jaxdp.prng.chacha",
  "jaxdp.threefry": "jaxdp.prng.threefry",
  "jaxdp.decomposition": "jaxdp.posets.decomposition",
  "jaxdp.renyi": "jaxdp.composition.renyi",
  "jaxdp.pld": "jaxdp.composition.pld",
  "jaxdp.calibration": "jaxdp.composition.calibration",
  "jaxdp.planning": "jaxdp.accounting.planning",
  "jaxdp.experiments.cli": "jaxdp.cli",
}

# Modules allowed past ~400 lines, with the reason.
LONG = {}

# Every entry the repository tracks at its root. Anything else there (a command's
# redirected output, a scratch script) is a stray: add an entry here on purpose only.
ROOT_ENTRIES = {
  ".ci",
  ".gitignore",
  "CHANGELOG.md",
  "CONTRIBUTING.md",
  "LICENSE",
  "README.md",
  "benchmarks",
  "docs",
  "examples",
  "jaxdp",
  "mkdocs.yml",
  "pyproject.toml",
  "results",
  "tests",
  "tools",
}


@functools.cache
def _report() -> dict:
  return import_graph.report()


@functools.cache
def _modules() -> dict:
  return import_graph.modules()


def test_no_import_circle_even_through_deferred_imports():
  report = _report()
  assert report["circles_module_level"] == []
  assert report["circles_with_deferred_imports"] == []


def test_no_deferred_import_of_a_jaxdp_module():
  """A function-level import of a jaxdp module is the usual way to hide a circle."""
  assert _report()["deferred_imports"] == {}


def test_modules_stay_readable():
  over = _report()["over_400_lines"]
  assert {k: v for k, v in over.items() if k not in LONG and v > 420} == {}


def _private_uses(path: pathlib.Path):
  tree = ast.parse(path.read_text())
  modules = {}
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jaxdp"):
      for a in node.names:
        full = f"{node.module}.{a.name}"
        if full in _modules():
          modules[a.asname or a.name] = full
        elif (
          a.name.startswith("_")
          and not a.name.startswith("__")
          and node.module != "jaxdp._moved"
        ):
          yield f"from {node.module} import {a.name}"
    elif isinstance(node, ast.Import):
      for a in node.names:
        if a.name.startswith("jaxdp") and a.asname:
          modules[a.asname] = a.name
  for node in ast.walk(tree):
    if (
      isinstance(node, ast.Attribute)
      and isinstance(node.value, ast.Name)
      and node.value.id in modules
      and node.attr.startswith("_")
      and not node.attr.startswith("__")
    ):
      yield f"{modules[node.value.id]}.{node.attr}"


def test_no_private_name_crosses_modules():
  found = {}
  for path in sorted((ROOT / "jaxdp").rglob("*.py")):
    uses = sorted(set(_private_uses(path)))
    if uses:
      found[str(path.relative_to(ROOT))] = uses
  assert found == {}


_OLD_PATH_CHECK = """
import importlib, json, sys, warnings
import jaxdp
out = {}
for old, new in json.loads(sys.argv[1]).items():
  warnings.simplefilter("error", DeprecationWarning)
  try:
    importlib.import_module(old)
  except DeprecationWarning as e:
    out[old] = "ok" if new in str(e) else f"the warning does not name {new}: {e}"
  else:
    out[old] = "no DeprecationWarning"
  warnings.simplefilter("ignore")
  if out[old] == "ok" and importlib.import_module(old) is not importlib.import_module(new):
    out[old] = f"{old} is not {new}"
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def old_paths():
  """Each old module path's result, from one fresh interpreter that has imported
  only jaxdp: "ok" when importing it warns (naming the new path) and gives the new
  module."""
  run = subprocess.run(
    [sys.executable, "-c", _OLD_PATH_CHECK, json.dumps(MOVED)],
    capture_output=True,
    text=True,
    cwd=ROOT,
  )
  assert run.returncode == 0, run.stderr[-4000:]
  return json.loads(run.stdout)


@pytest.mark.subprocess
@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_path_warns_and_is_the_new_module(old, old_paths):
  assert old_paths[old] == "ok"


@pytest.mark.subprocess
def test_importing_jaxdp_warns_nothing():
  subprocess.run(
    [
      sys.executable,
      "-W",
      "error::DeprecationWarning",
      "-c",
      "import jaxdp, jaxdp.cli, jaxdp.experiments",
    ],
    check=True,
    cwd=ROOT,
  )


def test_every_public_name_resolves():
  for name in jaxdp.__all__:
    assert getattr(jaxdp, name) is not None, name
  for name in [
    "exact",
    "prng",
    "posets",
    "samplers",
    "mechanisms",
    "accounting",
    "composition",
    "session",
    "montecarlo",
    "random",
  ]:
    assert name in jaxdp.__all__, name
    assert importlib.import_module(f"jaxdp.{name}") is getattr(jaxdp, name)


def test_one_version_source():
  from jaxdp import _version

  assert jaxdp.__version__ == _version.__version__
  text = (ROOT / "pyproject.toml").read_text()
  assert 'dynamic = ["version"]' in text and '\nversion = "' not in text
  assert 'version = {attr = "jaxdp._version.__version__"}' in text


def _tracked_root_entries():
  """The first path component of every file git tracks in this checkout (None where
  this is not the root of a git checkout)."""
  try:
    top = subprocess.run(
      ["git", "rev-parse", "--show-toplevel"], cwd=ROOT, capture_output=True, text=True
    )
    if top.returncode or pathlib.Path(top.stdout.strip()).resolve() != ROOT:
      return None
    files = subprocess.run(
      ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
  except OSError:  # no git
    return None
  return {path.split("/", 1)[0] for path in files.split("\0") if path}


def test_the_repository_root_holds_only_the_allowlisted_entries():
  tracked = _tracked_root_entries()
  if tracked is None:
    pytest.skip("not a git checkout")
  assert "jaxdp" in tracked
  assert tracked - ROOT_ENTRIES == set(), "stray files at the root: remove them"


def test_the_files_the_run_schedules_first_exist():
  """tests/conftest.py's SLOWEST_FILES name files that exist (a renamed file would
  silently fall back to collection order)."""
  missing = [p for p in SLOWEST_FILES if not (ROOT / p).is_file()]
  assert not missing, missing
