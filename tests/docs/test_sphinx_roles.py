"""The griffe extension that renders docstrings' Sphinx roles as cross-references
(tools/sphinx_roles.py), on a small package."""

import logging

import pytest

from tests.docs.test_docs import ROOT
from tests.helpers.modules import load_script
from tests.test_layout import MOVED

griffe = pytest.importorskip("griffe")

sphinx_roles = load_script("tools/sphinx_roles.py")

PACKAGE = {
  "__init__.py": (
    '"""The package: :class:`Thing` (:mod:`.core`), :func:`~toypkg.core.helper`."""\n'
    "from toypkg.core import Thing, helper\n"
    '__all__ = ["Thing", "helper"]\n'
  ),
  "core.py": (
    "import secrets\n"
    "class Thing:\n"
    '  """See :meth:`go`, :py:attr:`size`, :func:`secrets.token_bytes`, :class:`int`\n'
    "  and :func:`made <toypkg.core.\n"
    '  helper>`."""\n'
    "  size: int = 1\n"
    "  def go(self):\n"
    '    """Goes.\n\n    Returns:\n      :class:`Thing`; see :func:`toypkg.helper`.\n    """\n'
    "def helper():\n"
    '  """Helps, unlike :func:`toypkg.core.missing`."""\n'
  ),
}


def link(path: str, shown: str) -> str:
  return f'<autoref identifier="{path}" optional><code>{shown}</code></autoref>'


@pytest.fixture(scope="module")
def package():
  extension = sphinx_roles.SphinxRoles()
  with griffe.temporary_visited_package(
    "toypkg",
    PACKAGE,
    extensions=griffe.load_extensions(extension),
    docstring_parser="google",
  ) as toypkg:
    yield toypkg


def test_roles_resolve_in_the_docstrings_scope(package):
  assert package.docstring.value == (
    f"The package: {link('toypkg.core.Thing', 'Thing')} ({link('toypkg.core', '.core')}), "
    f"{link('toypkg.core.helper', 'helper')}."
  )
  thing = package["core.Thing"]
  assert thing.docstring.value == (
    f"See {link('toypkg.core.Thing.go', 'go')}, {link('toypkg.core.Thing.size', 'size')}, "
    "<code>secrets.token_bytes</code>, <code>int</code>\n"
    f"and {link('toypkg.core.helper', 'made')}."
  )


def test_a_role_opening_a_returns_line_is_its_description(package):
  """Google style would read ``:class:`Thing```'s first colon as a separator."""
  (returns,) = [
    s for s in package["core.Thing.go"].docstring.parsed if s.kind.value == "returns"
  ]
  (item,) = returns.value
  assert item.annotation is None
  assert item.description == (
    f"{link('toypkg.core.Thing', 'Thing')}; see {link('toypkg.core.helper', 'toypkg.helper')}."
  )


def test_a_role_naming_no_object_is_a_warning(caplog):
  with caplog.at_level(logging.WARNING):
    with griffe.temporary_visited_package(
      "toypkg", PACKAGE, extensions=griffe.load_extensions(sphinx_roles.SphinxRoles())
    ) as toypkg:
      text = toypkg["core.helper"].docstring.value
  assert text == "Helps, unlike <code>toypkg.core.missing</code>."
  warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
  assert warned == [
    "toypkg.core.helper: :func:`toypkg.core.missing` names no object of toypkg"
  ]


@pytest.mark.parametrize(
  "body,expected",
  [
    ("Poset", ("Poset", "Poset")),
    ("~toypkg.posets.Poset", ("Poset", "toypkg.posets.Poset")),
    ("Poset.load <toypkg.Poset.load>", ("Poset.load", "toypkg.Poset.load")),
    (
      "toypkg.composition.renyi.\n    DEFAULT_ORDERS",
      ("toypkg.composition.renyi.DEFAULT_ORDERS",) * 2,
    ),
  ],
)
def test_split_role(body, expected):
  assert sphinx_roles.split_role(body) == expected


def test_no_role_names_a_moved_module():
  """A moved module's old path is a shim without members: a role naming it (or a
  name under it) would render as plain code instead of a link."""
  stale = []
  for path in sorted((ROOT / "jaxdp").rglob("*.py")):
    for match in sphinx_roles.ROLE.finditer(path.read_text()):
      _, target = sphinx_roles.split_role(match["body"])
      if any(target == old or target.startswith(f"{old}.") for old in MOVED):
        stale.append(f"{path.relative_to(ROOT)}: {match.group(0)}")
  assert not stale, "roles naming a moved module path:\n" + "\n".join(stale)
