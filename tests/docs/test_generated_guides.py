"""Guides whose tables come from results/ (between run_all's markers): the committed
pages match what results/ generates, and the tables follow the results files."""

import shutil
from pathlib import Path

from tests.helpers.modules import load_script

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "knorm-family.md"


def load_run_all():
  return load_script("benchmarks/run_all.py")


def test_guides_tables_are_generated_from_results():
  run_all = load_run_all()
  stale = [
    guide.name
    for guide in sorted((ROOT / "docs" / "guides").glob("*.md"))
    if run_all.guide_page(guide.read_text(), ROOT / "results") != guide.read_text()
  ]
  assert not stale, (
    f"{stale}: the generated tables differ from what results/ generates: run "
    "python benchmarks/run_all.py --docs-only"
  )


def test_the_knorm_guide_includes_both_tables():
  text = GUIDE.read_text()
  for name in ("knorm_family_error.md", "knorm_family_speed.md"):
    assert f"<!-- generated from results/{name} by benchmarks/run_all.py" in text


def test_guide_tables_follow_the_results(tmp_path):
  run_all = load_run_all()
  results = tmp_path / "results"
  shutil.copytree(ROOT / "results", results)
  for name in ("knorm_family_error.md", "knorm_family_speed.md"):
    (results / name).unlink(missing_ok=True)
  empty = run_all.guide_page(GUIDE.read_text(), results)
  assert empty.count("Not run yet.") == 2
  (results / "knorm_family_error.md").write_text("| query | d |\n|---|---|\n| sum | 7 |\n")
  page = run_all.guide_page(empty, results)
  assert "| sum | 7 |" in page and page.count("Not run yet.") == 1
  assert page.index("| sum | 7 |") < page.index("## Speed")  # in its own section
  assert run_all.guide_page(page, results) == page  # regenerating changes nothing
  (results / "knorm_family_error.md").write_text("| query | d |\n|---|---|\n| vote | 9 |\n")
  again = run_all.guide_page(page, results)
  assert "| vote | 9 |" in again and "| sum | 7 |" not in again


def test_write_docs_page_rewrites_the_guides(tmp_path, monkeypatch):
  """A run into results/ writes the benchmarks page and the guides' tables."""
  run_all = load_run_all()
  guides = tmp_path / "guides"
  guides.mkdir()
  (guides / "knorm-family.md").write_text(GUIDE.read_text())
  (guides / "plain.md").write_text("# no tables\n")
  results = tmp_path / "results"
  results.mkdir()
  (results / "knorm_family_speed.md").write_text("| a |\n|---|\n| 1 |\n")
  monkeypatch.setattr(run_all, "GUIDES", guides)
  run_all.write_docs_page(results, page=tmp_path / "benchmarks.md")
  assert "| 1 |" in (guides / "knorm-family.md").read_text()
  assert (guides / "plain.md").read_text() == "# no tables\n"
  assert (tmp_path / "benchmarks.md").exists()
