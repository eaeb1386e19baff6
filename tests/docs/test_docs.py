"""The documentation: README and guide snippets run, the site builds, links resolve,
the generated benchmarks page matches the committed results, and the API reference
shows no raw Sphinx role and the constructors' signatures."""

import ast
import html
import importlib
import importlib.util
import inspect
import json
import re
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest

from tests.helpers.modules import load_script

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SNIPPET_FILES = [
  ROOT / "README.md",
  DOCS / "index.md",
  *sorted((DOCS / "guides").glob("*.md")),
]
OPT_OUT = "<!-- no-test -->"
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def python_blocks(path: Path) -> list[tuple[int, str]]:
  """The ```python blocks of a Markdown file (line number, code), in order, except
  those right after an ``<!-- no-test -->`` comment."""
  text = path.read_text()
  blocks = []
  for m in FENCE.finditer(text):
    if m.group(1) != "python":
      continue
    before = text[: m.start()].rstrip().splitlines()
    if before and before[-1].strip() == OPT_OUT:
      continue
    blocks.append((text.count("\n", 0, m.start()) + 1, m.group(2)))
  return blocks


def test_readme_and_tour_have_python_blocks():
  assert python_blocks(ROOT / "README.md") and python_blocks(DOCS / "index.md")


def test_snippet_parser_finds_and_skips_blocks(tmp_path):
  page = tmp_path / "page.md"
  page.write_text(
    "text\n\n```python\nx = 1\n```\n\n<!-- no-test -->\n```python\n"
    "open('mine.csv')\n```\n\n```bash\nls\n```\n\n"
    "```python\ny = x + 1\n```\n"
  )
  assert [code for _, code in python_blocks(page)] == ["x = 1\n", "y = x + 1\n"]


@pytest.mark.slow
@pytest.mark.parametrize(
  "path",
  [p for p in SNIPPET_FILES if python_blocks(p)],  # the CLI guide has only bash
  ids=lambda p: str(p.relative_to(ROOT)),
)
def test_python_snippets_run(path, tmp_path, monkeypatch):
  """Each file's python blocks run in order in one namespace of their own."""
  blocks = python_blocks(path)
  monkeypatch.chdir(tmp_path)  # snippets that write files write them here
  namespace = {"__name__": f"snippets_{path.stem}"}
  for line, code in blocks:
    try:
      exec(compile(code, f"{path.relative_to(ROOT)}:{line}", "exec"), namespace)
    except Exception as e:
      raise AssertionError(
        f"{path.relative_to(ROOT)}, block at line {line}: {type(e).__name__}: {e}"
      ) from e


def markdown_files() -> list[Path]:
  return [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]


def relative_links(path: Path) -> list[str]:
  """Link targets in a Markdown file that are neither URLs nor in-page anchors
  (fenced code left out)."""
  text = FENCE.sub("", path.read_text())
  targets = []
  for target in LINK.findall(text):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
      continue
    targets.append(target.split("#", 1)[0])
  return targets


def test_relative_links_resolve():
  missing = []
  for path in markdown_files():
    for target in relative_links(path):
      if not (path.parent / target).exists():
        missing.append(f"{path.relative_to(ROOT)} -> {target}")
  assert not missing, "links to missing files:\n" + "\n".join(missing)


def test_link_check_sees_a_missing_file(tmp_path):
  page = tmp_path / "page.md"
  page.write_text(
    "[ok](page.md), [gone](nope.md#x), [web](https://example.org), "
    "[anchor](#here)\n```\n[in code](skipped.md)\n```\n"
  )
  assert relative_links(page) == ["page.md", "nope.md"]


def load_run_all():
  return load_script("benchmarks/run_all.py")


def test_benchmarks_page_is_generated_from_results():
  run_all = load_run_all()
  expected = run_all.benchmarks_page(ROOT / "results")
  assert (DOCS / "benchmarks.md").read_text() == expected, (
    "docs/benchmarks.md differs from what results/ generates: do not edit it by hand; "
    "run python benchmarks/run_all.py --docs-only"
  )


def test_benchmarks_page_follows_the_results(tmp_path):
  run_all = load_run_all()
  results = tmp_path / "results"
  shutil.copytree(ROOT / "results", results)
  before = run_all.benchmarks_page(results)
  md = results / "secure.md"
  md.write_text(md.read_text() + "\n| an extra row |\n")
  assert run_all.benchmarks_page(results) != before
  assert "| an extra row |" in run_all.benchmarks_page(results)


def test_a_benchmark_not_run_yet_is_listed_as_such(tmp_path):
  """A listed benchmark without results (its first run still to come) gets a "not
  run" header row and section; the other sections are unchanged."""
  run_all = load_run_all()
  results = tmp_path / "results"
  shutil.copytree(ROOT / "results", results)
  for suffix in (".json", ".md"):
    (results / f"secure{suffix}").unlink(missing_ok=True)
  page = run_all.benchmarks_page(results)
  assert "| `secure` | not run | not run | not run |" in page
  assert (
    "## secure\n\nNot run yet.\n\nWritten by `python benchmarks/secure.py --out results`."
    in page
  )
  assert "## recompile" in page
  readme = run_all.combined_readme(results)
  assert "# secure\n" not in readme and "# recompile\n" in readme


def test_the_page_and_readme_come_from_a_folder_missing_result_files(tmp_path, capsys):
  """A run into a fresh folder that some benchmark or study did not write (e.g. the
  tree profile, the NHIS study): their rows and sections say "not run"; ``--docs-only``
  on that folder writes its README and leaves the documentation's page alone."""
  run_all = load_run_all()
  results = tmp_path / "results"
  shutil.copytree(ROOT / "results", results)
  for path in ("exact_profile_tree.json", "exact_profile_tree.md", "nhis/nhis.md"):
    (results / path).unlink()
  (results / "nhis" / "nhis.json").unlink(missing_ok=True)
  page = run_all.benchmarks_page(results)
  assert "| `exact_profile_tree` | not run | not run | not run |" in page
  assert "| `nhis/nhis` | not run | not run | not run |" in page
  assert "## The NHIS study\n\nWritten by" in page
  nhis = page.split("## The NHIS study", 1)[1].split("\n## ", 1)[0]
  assert nhis.rstrip().endswith("Not run yet."), nhis
  assert "## Random posets by dimension" in page
  empty = tmp_path / "empty"
  empty.mkdir()
  assert page.count("not run |") < run_all.benchmarks_page(empty).count("not run |")
  before = (DOCS / "benchmarks.md").stat().st_mtime_ns
  assert run_all.main(["--docs-only", "--out", str(results)]) == 0
  assert "# exact_profile_tree\n" not in (results / "README.md").read_text()
  assert "# samplers\n" in (results / "README.md").read_text()
  assert (DOCS / "benchmarks.md").stat().st_mtime_ns == before
  assert "left alone" in capsys.readouterr().out


def test_run_all_runs_every_listed_benchmark_and_reports_a_failure(
  tmp_path, monkeypatch, capsys
):
  """run_all calls each benchmark's ``main`` with its command's arguments (the tree
  profile too: its JSON was once read but never written) and ``--quick``'s; one that
  raises or writes no JSON is reported, the others still run and are dated."""
  run_all = load_run_all()
  calls = []

  def writes(name):
    def main(argv):
      calls.append((name, argv))
      Path(argv[1]).mkdir(parents=True, exist_ok=True)
      stem = "exact_profile_tree" if "--tree" in argv else name
      Path(argv[1], f"{stem}.json").write_text("{}")

    return types.SimpleNamespace(main=main)

  def boom(argv):
    raise RuntimeError("boom")

  for name in ("montecarlo", "exact_profile"):
    monkeypatch.setitem(sys.modules, name, writes(name))
  monkeypatch.setitem(sys.modules, "samplers", types.SimpleNamespace(main=boom))
  monkeypatch.setitem(sys.modules, "recompile", types.SimpleNamespace(main=len))
  only = "samplers,montecarlo,recompile,exact_profile_tree"
  assert run_all.main(["--quick", "--only", only, "--out", str(tmp_path)]) == 1
  out = str(tmp_path)
  assert calls == [
    ("montecarlo", ["--out", out, *run_all.QUICK["montecarlo"]]),
    ("exact_profile", ["--out", out, "--tree", *run_all.QUICK["exact_profile_tree"]]),
  ]
  for name in ("montecarlo", "exact_profile_tree"):
    assert "date" in json.loads((tmp_path / f"{name}.json").read_text())
  captured = capsys.readouterr()
  assert "RuntimeError: boom" in captured.err
  assert "failed: samplers, recompile" in captured.err


def test_benchmarks_write_a_fresh_folder_unless_out_names_one(tmp_path):
  """No benchmark's default ``--out`` is the committed ``results/``: each adds
  ``--out`` with ``folders.add_out`` (a new folder under ``out/benchmarks/``)."""
  run_all = load_run_all()
  folders = sys.modules["folders"]
  assert folders.BASE == Path("out", "benchmarks")
  first = Path(folders.fresh_folder(tmp_path))
  assert first.parent == tmp_path and not first.exists()
  first.mkdir()
  second = Path(folders.fresh_folder(tmp_path))
  assert second.parent == tmp_path and second != first and not second.exists()
  scripts = {command.split()[1] for _, command in run_all.BENCHMARKS}
  assert len(scripts) == len(run_all.BENCHMARKS) - 1  # exact_profile.py twice
  for script in sorted(scripts):
    calls = [
      node
      for node in ast.walk(ast.parse((ROOT / script).read_text()))
      if isinstance(node, ast.Call)
    ]
    names = [getattr(c.func, "id", getattr(c.func, "attr", None)) for c in calls]
    own_out = [
      c
      for c in calls
      if getattr(c.func, "attr", None) == "add_argument"
      and any(isinstance(a, ast.Constant) and a.value == "--out" for a in c.args)
    ]
    assert "add_out" in names and not own_out, script
  assert set(run_all.QUICK) == {name for name, _ in run_all.BENCHMARKS}
  assert set(run_all.QUICK_TIER) < set(run_all.QUICK)


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
  """The site, built once for the tests below (``mkdocs build --strict``)."""
  if shutil.which("mkdocs") is None and importlib.util.find_spec("mkdocs") is None:
    pytest.skip("mkdocs is not installed (pip install -e '.[docs]')")
  if importlib.util.find_spec("mkdocstrings_handlers") is None:
    pytest.skip("mkdocstrings[python] is not installed (pip install -e '.[docs]')")
  out = tmp_path_factory.mktemp("docs") / "site"
  proc = subprocess.run(
    [sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
    cwd=ROOT,
    capture_output=True,
    text=True,
    timeout=600,
  )
  assert proc.returncode == 0, proc.stdout + proc.stderr
  return out


@pytest.mark.slow
@pytest.mark.subprocess
def test_mkdocs_build_strict(site):
  # Every API page documents its module's main names (a module path that became a
  # shim or a package without them would render an empty page without a warning).
  for page, name in API_NAMES.items():
    text = (site / "api" / page / "index.html").read_text()
    assert f'id="{name}"' in text, f"api/{page}.md does not document {name}"


API_NAMES = {
  "jaxdp": "jaxdp",
  "random": "jaxdp.random.poset_ball",
  "exact": "jaxdp.exact.discrete_gaussian",
  "montecarlo": "jaxdp.montecarlo.estimate",
  "session": "jaxdp.session.Session",
  "mechanisms": "jaxdp.mechanisms.LaplaceMechanism",
  "accounting": "jaxdp.accounting.Accountant",
  "composition": "jaxdp.composition.advanced_composition",
  "posets": "jaxdp.posets.Poset",
  "reporting": "jaxdp.reporting.error_bars",
  "samplers": "jaxdp.samplers.balls.PosetBall",
  "prng": "jaxdp.prng.chacha.block",
  "typing": "jaxdp.typing.KeyArray",
}

# A Sphinx role left in a rendered page: ``:func:`x``` shows as ":func:x", and a role
# opening a Returns or Raises line loses its first colon ("class:ErrorBars").
ROLES = "class|func|meth|mod|attr|data|exc|obj|const|type"
RAW_ROLE = re.compile(rf":(?:py:)?(?:{ROLES}):\S|(?<![\w.:/-])(?:{ROLES}):(?=[\w.~`])")
TAG = re.compile(r"<script\b.*?</script>|<style\b.*?</style>|<[^>]+>", re.S | re.I)


def raw_roles(page: str) -> list[str]:
  """The raw Sphinx roles in an HTML page's text, each with some context."""
  text = html.unescape(TAG.sub("", page))
  return [text[max(m.start() - 30, 0) : m.end() + 30] for m in RAW_ROLE.finditer(text)]


def test_raw_role_check_sees_roles():
  page = (
    "<p>(:func:<code>jaxdp.exact.laplace</code>)</p><li>class:<code>ErrorBars</code>"
    "; x</li><p>see :py:meth:<code>create</code></p>"
  )
  assert len(raw_roles(page)) == 3
  clean = (
    '<p class="doc">The data: a <code>(n, d)</code> array; type: <code>int</code>'
    ' (<a href="https://example.org/a:b">link</a>), <code>ErrorBars</code></p>'
  )
  assert raw_roles(clean) == []


@pytest.mark.slow
@pytest.mark.subprocess
def test_site_shows_no_raw_sphinx_role(site):
  found = {
    str(path.relative_to(site)): roles
    for path in sorted(site.rglob("*.html"))
    if (roles := raw_roles(path.read_text()))
  }
  assert not found, f"raw Sphinx roles in the built site: {found}"


@pytest.mark.slow
@pytest.mark.subprocess
def test_roles_render_as_links(site):
  """A role naming a documented object is a link to it (here a Returns line's)."""
  page = (site / "api" / "reporting" / "index.html").read_text()
  assert re.search(
    r'<a class="autorefs autorefs-internal"[^>]*href="#jaxdp\.reporting\.ErrorBars">'
    r"<code>ErrorBars</code></a>; <code>bars\.interval",
    page,
  )


# Pages whose classes and functions must show their constructor's (or their own)
# signature: page -> the documented names.
SIGNED = {
  "mechanisms": [
    "jaxdp.mechanisms.LaplaceMechanism",
    "jaxdp.mechanisms.GaussianMechanism",
    "jaxdp.mechanisms.PosetCountMechanism",
    "jaxdp.mechanisms.KNormMechanism",
    "jaxdp.mechanisms.DiscreteGaussianMechanism",
    "jaxdp.mechanisms.ZCDPGaussianMechanism",
  ],
  "accounting": ["jaxdp.accounting.Accountant.create"],
  "session": ["jaxdp.session.Session"],
  "ledger": ["jaxdp.ledger.Ledger"],
}


def rendered_signature(page: str, name: str) -> str | None:
  """The text of the signature shown right under ``name``'s heading, or None."""
  heading = re.search(rf'<h\d id="{re.escape(name)}".*?</h\d>\s*', page, re.S)
  if heading is None:
    return None
  block = re.match(
    r'<div class="doc-signature highlight">(.*?)</div>', page[heading.end() :], re.S
  )
  return block and " ".join(html.unescape(TAG.sub("", block.group(1))).split())


@pytest.mark.slow
@pytest.mark.subprocess
@pytest.mark.parametrize(
  "page,name", [(p, n) for p, names in SIGNED.items() for n in names], ids=str
)
def test_api_pages_show_constructor_signatures(site, page, name):
  """The signature under the heading names every parameter the object takes
  (``inspect.signature`` of the real class or function)."""
  module, _, attr = name.partition(".")
  obj = importlib.import_module(module)
  for part in attr.split("."):
    obj = getattr(obj, part)
  shown = rendered_signature((site / "api" / page / "index.html").read_text(), name)
  assert shown is not None, f"api/{page}: no signature under {name}"
  assert shown.startswith(f"{name.rsplit('.', 1)[-1]}("), shown
  for param in inspect.signature(obj).parameters:
    assert re.search(rf"[(,*] ?{param}\b", shown), f"{name}: {param} not in {shown}"
