"""Poset files: JSON (order, edges or prerequisites) and plain text, parsed to a spec.

Parsing is separate from building: :func:`parse` returns a :class:`PosetSpec` that
names the constructor of :class:`~jaxdp.Poset` and its arguments, and
:meth:`Poset.load <jaxdp.Poset.load>` builds it.

A file declares every question it names, so that a misspelt name is an error, never
a new question: in a ``requires`` file each question is a key (one without
prerequisites as ``"q1": []``), and a prerequisite that is not a key is refused,
naming its line, the name and the closest key; in an edge list (JSON or text) each
index lies in ``[0, D)``, and a bad one is refused naming its line.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["MAX_FILE_D", "PosetSpec", "check_labels", "parse", "question_count"]

# The largest d any sampler serves (jaxdp.samplers.SP_MAX_D; the package cannot import
# the samplers, which import it): a file with more questions is refused before the
# poset is built (its closure is cubic in d).
MAX_FILE_D = 512


class PosetSpec(NamedTuple):
  """What a poset file says.

  Attributes:
    kind: ``"order"`` (``args = (matrix,)``), ``"edges"`` (``args = (d, edges)``) or
      ``"requires"`` (``args = (mapping,)``).
    args: the constructor's positional arguments.
    labels: element names given by the file (``()`` if none).
  """

  kind: str
  args: tuple
  labels: tuple = ()


def parse(path: Path, text: str) -> PosetSpec:
  """Parses the text of the poset file ``path`` (its suffix picks JSON or text).

  Raises:
    ValueError, TypeError, KeyError, IndexError, json.JSONDecodeError: what is wrong
      (the caller adds the file's name).
  """
  spec = _parse(path, text)
  d = question_count(spec)
  if d > MAX_FILE_D:
    raise ValueError(
      f"the file has {d} questions; the samplers serve at most {MAX_FILE_D}. Split the "
      "questionnaire into independent parts."
    )
  return spec


def check_labels(labels: Any, d: int) -> tuple:
  """``labels`` as a tuple: none, or ``d`` distinct, non-empty, printable strings
  with no spaces at either end (a CSV header could name each, and no control
  character, such as a carriage return, could split a row of a table naming them).

  Raises:
    ValueError: naming what is wrong and the labels.
  """
  if isinstance(labels, (str, bytes)):  # tuple("xyz") would be one label per character
    raise ValueError(
      f"labels must be a sequence of {d} strings; got the string {labels!r}."
    )
  labels = tuple(labels)
  if not labels:
    return labels
  if len(labels) != d or not all(isinstance(v, str) for v in labels):
    raise ValueError(f"labels must be {d} strings, one per element; got {labels!r}.")
  if len(set(labels)) != len(labels) or any(
    v != v.strip() or not v.isprintable() or not v for v in labels
  ):
    raise ValueError(
      "labels must be distinct and non-empty printable text (no control characters), "
      f"with no spaces at either end (a CSV header could not name them); got {labels!r}."
    )
  return labels


def question_count(spec: PosetSpec) -> int:
  """The number of questions a spec names (before checking it further)."""
  if spec.kind == "edges":
    return spec.args[0]
  if spec.kind == "order":
    return len(spec.args[0]) if isinstance(spec.args[0], list) else 0
  mapping = spec.args[0]
  if not isinstance(mapping, dict):
    return 0  # the constructor says what is wrong
  names = set(mapping)
  for v in mapping.values():
    if isinstance(v, list):
      names.update(x for x in v if isinstance(x, str))
  return len(names)


# a JSON poset's keys: one form's, and the optional keys it may carry
FORMS = {
  ("order",): {"labels"},
  ("d", "edges"): {"labels"},
  ("requires",): {"d"},  # as `jaxdp release` records the poset
}


def _unique_keys(pairs):
  seen = {}
  for k, v in pairs:
    if k in seen:
      raise ValueError(f"duplicate key {k!r} in a JSON object (each key once)")
    seen[k] = v
  return seen


def _parse(path: Path, text: str) -> PosetSpec:
  if path.suffix == ".json":
    obj: Any = json.loads(text, object_pairs_hook=_unique_keys)
    if not isinstance(obj, dict):
      raise ValueError(
        "JSON must be an object with 'order', 'd' and 'edges', or 'requires'"
      )
    forms = [k for k, extra in FORMS.items() if set(k) <= set(obj) <= set(k) | extra]
    if len(forms) != 1:
      raise ValueError(
        "a poset JSON object holds 'order', or 'd' and 'edges' (each with optional "
        f"'labels'), or 'requires' (with optional 'd'); got the keys {sorted(obj)}"
      )
    labels = obj.get("labels", [])
    if not isinstance(labels, list):  # tuple() would split a string, key an object
      raise ValueError(f"'labels' must be a list of question names; got {labels!r:.80}")
    labels = tuple(labels)
    _check_printable(text, obj)
    if "requires" in obj:
      spec = PosetSpec("requires", (obj["requires"],))
      if "d" in obj and obj["d"] != question_count(spec):
        raise ValueError(
          f"'d' is {obj['d']!r} but 'requires' names {question_count(spec)} questions"
        )
      _check_declared(text, obj["requires"])
      return spec
    if "order" in obj:
      return PosetSpec("order", (obj["order"],), labels)
    d = obj["d"]  # the one form left: 'd' and 'edges'
    if isinstance(d, bool) or not isinstance(d, int):
      raise ValueError(f"'d' must be an integer; got {d!r}")
    _check_json_edges(text, d, obj["edges"])
    return PosetSpec("edges", (d, obj["edges"]), labels)
  lines = [(n, ln.split("#")[0].split()) for n, ln in enumerate(text.splitlines(), 1)]
  lines = [(n, ln) for n, ln in lines if ln]
  if not lines:
    raise ValueError("the file holds no poset")
  (num, first), rest = lines[0], lines[1:]
  if first[0] != "d":
    return PosetSpec("order", ([[_integer(v, n) for v in ln] for n, ln in lines],))
  if len(first) != 2:
    raise ValueError(f"line {num}: expected 'd D' (the number of questions)")
  d = _integer(first[1], num)
  edges = []
  for n, ln in rest:
    if len(ln) != 2:
      raise ValueError(
        f"line {n}: an edge line is 'i j' (question i requires question j); got "
        f"{len(ln)} fields"
      )
    edge = tuple(_integer(v, n) for v in ln)
    for v in edge:
      if not 0 <= v < d:
        raise _index_error(n, v, d)
    edges.append(edge)
  return PosetSpec("edges", (d, edges))


def _integer(text: str, line: int) -> int:
  """An integer field of a text poset file (ASCII digits, an optional sign)."""
  if not re.fullmatch(r"[+-]?[0-9]+", text):
    raise ValueError(f"line {line}: {text[:40]!r} is not an integer")
  return int(text)


def _index_error(line: int, v: int, d: int) -> ValueError:
  return ValueError(
    f"line {line}: {v} is not a question of the file: indices run from 0 to {d - 1} "
    f"(d = {d})"
  )


_PAIR = re.compile(r"\[\s*(-?[0-9]+)\s*,\s*(-?[0-9]+)\s*\]")  # a JSON edge [i, j]


def _check_json_edges(text: str, d: int, edges) -> None:
  """Refuses an index out of ``[0, d)`` in a JSON edge list, naming its line, when
  the file's ``[i, j]`` pairs are exactly the edges (else the constructor names the
  edge by its position)."""
  pairs = list(_PAIR.finditer(text))
  if not isinstance(edges, list) or [[int(v) for v in m.groups()] for m in pairs] != [
    e for e in edges if isinstance(e, list)
  ]:
    return
  for m in pairs:
    for v in map(int, m.groups()):
      if not 0 <= v < d:
        raise _index_error(text.count("\n", 0, m.start()) + 1, v, d)


# a JSON string token: outside strings, JSON holds no quote character
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def _check_printable(text: str, obj: dict) -> None:
  """Refuses a question name that is not printable (an allowlist: a control
  character such as CR, LF or TAB would split or shift a row of a CSV table that
  names the question), naming its line and the name.

  Raises:
    ValueError: ``line N: the question name '...' holds a character that is not
      printable ...``.
  """
  requires = obj.get("requires")
  names = list(obj.get("labels", ())) if isinstance(obj.get("labels"), list) else []
  if isinstance(requires, dict):
    names += list(requires)
    names += [r for v in requires.values() if isinstance(v, list) for r in v]
  bad = [v for v in names if isinstance(v, str) and not v.isprintable()]
  if not bad:
    return
  line = next(
    (
      text.count("\n", 0, m.start()) + 1
      for m in _STRING.finditer(text)
      if json.loads(m.group()) == bad[0]
    ),
    0,
  )
  where = f"line {line}: " if line else ""
  raise ValueError(
    f"{where}the question name {bad[0]!r} holds a character that is not printable "
    "(a control character such as a line break, carriage return or tab). Use "
    "printable characters only."
  )


def _check_declared(text: str, requires) -> None:
  """Refuses a prerequisite that is not a key of ``requires`` (a misspelt name would
  otherwise be a new question), naming the line of its first use, the name and the
  closest key.

  Raises:
    ValueError: ``line N: 'name', a prerequisite of 'q', is not a question ...``.
  """
  if not isinstance(requires, dict):
    return  # the constructor says what is wrong
  undeclared = {}  # each undeclared name: the first question that requires it
  for q, reqs in requires.items():
    for r in reqs if isinstance(reqs, list) else ():
      if isinstance(r, str) and r not in requires:
        undeclared.setdefault(r, q)
  if not undeclared:
    return
  # its line: the first string token of the file that is an undeclared name (never a
  # key, so every such token is a prerequisite)
  found = (
    (text.count("\n", 0, m.start()) + 1, json.loads(m.group()))
    for m in _STRING.finditer(text)
  )
  line, name = next(
    ((ln, v) for ln, v in found if v in undeclared), (0, next(iter(undeclared)))
  )
  close = difflib.get_close_matches(name, [str(k) for k in requires], n=1)
  hint = f"; did you mean {close[0]!r}?" if close else "."
  where = f"line {line}: " if line else ""
  raise ValueError(
    f"{where}{name!r}, a prerequisite of {undeclared[name]!r}, is not a question "
    f"of the file{hint} Every question is a key of 'requires' (one without "
    f"prerequisites as {json.dumps(name)}: []), so that a misspelt name is not a new question"
  )
