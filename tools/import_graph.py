"""The import graph of the jaxdp package: circles, the longest chain, module sizes.

  python tools/import_graph.py [--json]

Reads the source with ``ast`` (nothing is imported). An edge ``a -> b`` means module
``a`` imports ``b`` at module level; imports inside functions are listed separately
(``deferred``), since they are the usual way to hide a circle. Shims that only alias a
moved module (``jaxdp._moved.alias``) are left out of the graph.
"""

from __future__ import annotations

import ast
import json
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1] / "jaxdp"


def modules() -> dict[str, pathlib.Path]:
  out = {}
  for path in sorted(ROOT.rglob("*.py")):
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def is_shim(tree: ast.Module) -> bool:
  return any(
    isinstance(n, ast.ImportFrom) and n.module == "jaxdp._moved" for n in tree.body
  )


def _targets(node, name: str, known) -> list[str]:
  """The jaxdp modules an import node names (``from a import b`` may name a module b)."""
  if isinstance(node, ast.Import):
    return [a.name for a in node.names if a.name in known]
  base = node.module or ""
  if node.level:
    pkg = name.split(".")
    pkg = pkg[: len(pkg) - node.level + (1 if known[name].name == "__init__.py" else 0)]
    base = ".".join(pkg + ([base] if base else []))
  out = []
  for alias in node.names:
    if f"{base}.{alias.name}" in known:
      out.append(f"{base}.{alias.name}")
    elif base in known:
      out.append(base)
  return out


def graph():
  known = modules()
  edges, deferred, shims = {}, {}, set()
  for name, path in known.items():
    tree = ast.parse(path.read_text())
    if is_shim(tree):
      shims.add(name)
    top = set()
    for node in tree.body:
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        top.update(_targets(node, name, known))
    inner = set()
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        for sub in ast.walk(node):
          if isinstance(sub, (ast.Import, ast.ImportFrom)):
            inner.update(_targets(sub, name, known))
    edges[name] = sorted(t for t in top if t != name)
    deferred[name] = sorted(t for t in inner if t != name)
  return known, edges, deferred, shims


def circles(edges) -> list[list[str]]:
  """Strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on, out = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on.add(v)
    for w in edges.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  sys.setrecursionlimit(10_000)
  for v in edges:
    if v not in index:
      visit(v)
  return out


def longest_chain(edges) -> list[str]:
  memo = {}

  def chain(v, seen):
    if v in memo:
      return memo[v]
    best = [v]
    for w in edges.get(v, ()):
      if w not in seen:
        c = [v] + chain(w, seen | {w})
        if len(c) > len(best):
          best = c
    memo[v] = best
    return best

  return max((chain(v, {v}) for v in edges), key=len)


def report() -> dict:
  known, edges, deferred, shims = graph()
  real = {k: [t for t in v if t not in shims] for k, v in edges.items() if k not in shims}
  both = {
    k: sorted(set(real.get(k, [])) | {t for t in deferred.get(k, []) if t not in shims})
    for k in real
  }
  sizes = {k: len(known[k].read_text().splitlines()) for k in real}
  largest = max(sizes, key=sizes.get)
  return {
    "modules": len(real),
    "circles_module_level": circles(real),
    "circles_with_deferred_imports": circles(both),
    "deferred_imports": {k: v for k, v in deferred.items() if v and k not in shims},
    "longest_chain": longest_chain(real),
    "largest_module": [largest, sizes[largest]],
    "over_400_lines": {
      k: n for k, n in sorted(sizes.items(), key=lambda x: -x[1]) if n > 400
    },
  }


if __name__ == "__main__":
  r = report()
  if "--json" in sys.argv:
    print(json.dumps(r, indent=1))
  else:
    for k, v in r.items():
      print(f"{k}: {v}")
