"""A griffe extension that renders the Sphinx roles of jaxdp's docstrings as links.

The docstrings name other objects with Sphinx roles (``:class:`~jaxdp.Poset```,
``:func:`release```, ``:mod:`.budget```), which mkdocstrings' Markdown shows as raw
text. Loaded by mkdocstrings (``extensions: [tools/sphinx_roles.py]`` in mkdocs.yml),
this extension rewrites each role, before the docstring is parsed, into an autorefs
cross-reference to the object the name resolves to in the docstring's scope (as
Python would: members, then imports, then the enclosing scopes):

* a role naming a jaxdp object becomes a link to its page when the API reference
  documents it, and plain code otherwise (a private helper, a module without a page);
* a role naming something outside jaxdp (``secrets.token_bytes``, a builtin) becomes
  plain code;
* a role naming a jaxdp object that does not exist is reported as a warning, which
  fails ``mkdocs build --strict``.

The shown text follows Sphinx: the name as written, or its last part after ``~``, or
the title of ``title <target>``. The source keeps its roles (they read well in
``help()``); only the rendered page changes.
"""

from __future__ import annotations

import builtins
import html
import importlib.util
import re

import griffe

ROLE = re.compile(
  r":(?:py:)?(?P<role>class|func|meth|mod|attr|data|exc|obj|const|type):"
  r"`(?P<body>[^`]+)`"
)
TITLED = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.S)


def split_role(body: str) -> tuple[str, str]:
  """The (shown text, target) of a role's body: ``X``, ``~a.b.X`` (shows ``X``),
  ``title <a.b.X>``. Whitespace inside a name (a role wrapped across lines) is
  dropped."""
  body = " ".join(body.split())
  titled = TITLED.match(body)
  if titled:
    return titled["title"], re.sub(r"\s+", "", titled["target"]).lstrip("~")
  target = re.sub(r"\s+", "", body)
  if target.startswith("~"):
    target = target[1:]
    return target.rsplit(".", 1)[-1], target
  return target, target


def lookup(collection: griffe.ModulesCollection, path: str) -> griffe.Object | None:
  """The object at ``path`` (an alias followed to its target), or None."""
  try:
    obj = collection[path]
  except (KeyError, ValueError, griffe.AliasResolutionError):
    return None
  if obj.is_alias:
    try:
      return obj.final_target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
      return None
  return obj


def resolve(scope: griffe.Object, target: str) -> tuple[str, griffe.Object | None]:
  """Where ``target``, named in the docstring of ``scope``, points: its full path
  and the object there (None when it is outside the loaded package or missing).

  ``.name`` is looked up under the scope and then under each enclosing scope (a
  module docstring's ``.budget`` is its submodule); a dotted name resolves its first
  part in the scope (members, imports, enclosing scopes) and appends the rest; a
  name that does not resolve there is tried as a full path."""
  collection = scope.modules_collection
  if target.startswith("."):
    node = scope
    while node is not None:
      found = lookup(collection, node.path + target)
      if found is not None:
        return found.path, found
      node = node.parent
    return target, None
  first, _, rest = target.partition(".")
  try:
    path = scope.resolve(first) + (f".{rest}" if rest else "")
  except griffe.NameResolutionError:
    path = target
  found = lookup(collection, path)
  if found is None and path != target:
    path, found = target, lookup(collection, target)
  return path, found


def is_outside(path: str, package: str) -> bool:
  """Whether ``path`` names something outside ``package``: a builtin or a name in
  another installed package (``secrets.token_bytes``, ``jax.Array``)."""
  first = path.split(".", 1)[0]
  if first == package:
    return False
  return hasattr(builtins, first) or importlib.util.find_spec(first) is not None


def rewrite(scope: griffe.Object, text: str) -> str:
  """``text`` (the docstring of ``scope``) with each Sphinx role replaced by an
  optional autorefs cross-reference (a link where its target is documented, plain
  code elsewhere), or by plain code for a name outside the package."""

  def replace(match: re.Match) -> str:
    shown, target = split_role(match["body"])
    code = f"<code>{html.escape(shown)}</code>"
    path, found = resolve(scope, target)
    if found is None:
      if not is_outside(path, scope.package.name):
        griffe.logger.warning(
          "%s: %s names no object of %s", scope.path, match.group(0), scope.package.name
        )
      return code
    identifier = html.escape(found.path, quote=True)
    return f'<autoref identifier="{identifier}" optional>{code}</autoref>'

  return ROLE.sub(replace, text)


def documented(obj: griffe.Object):
  """``obj`` and every object defined under it (aliases left out: their docstrings
  are their targets')."""
  yield obj
  for member in obj.members.values():
    if not member.is_alias:
      yield from documented(member)


class SphinxRoles(griffe.Extension):
  """Rewrites the Sphinx roles of a loaded package's docstrings (see the module)."""

  def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
    for obj in documented(pkg):
      if obj.docstring is not None and ROLE.search(obj.docstring.value):
        obj.docstring.value = rewrite(obj, obj.docstring.value)
        obj.docstring.__dict__.pop("parsed", None)
