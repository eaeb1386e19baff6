"""Poset files: JSON (order, edges or prerequisites) and plain text, parsed to a spec.

Parsing is separate from building: :func:`parse` returns a :class:`PosetSpec` that
names the constructor of :class:`~jaxdp.Poset` and its arguments, and
:meth:`Poset.load <jaxdp.Poset.load>` builds it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, NamedTuple

__all__ = ["MAX_FILE_D", "PosetSpec", "parse", "question_count"]

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
    labels = tuple(obj.get("labels", ()))
    if "requires" in obj:
      spec = PosetSpec("requires", (obj["requires"],))
      if "d" in obj and obj["d"] != question_count(spec):
        raise ValueError(
          f"'d' is {obj['d']!r} but 'requires' names {question_count(spec)} questions"
        )
      return spec
    if "order" in obj:
      return PosetSpec("order", (obj["order"],), labels)
    d = obj["d"]  # the one form left: 'd' and 'edges'
    if isinstance(d, bool) or not isinstance(d, int):
      raise ValueError(f"'d' must be an integer; got {d!r}")
    return PosetSpec("edges", (d, obj["edges"]), labels)
  lines = [ln.split("#")[0].split() for ln in text.splitlines()]
  lines = [ln for ln in lines if ln]
  if not lines:
    raise ValueError("the file holds no poset")
  if lines[0][0] == "d":
    return PosetSpec("edges", (int(lines[0][1]), [tuple(map(int, ln)) for ln in lines[1:]]))
  return PosetSpec("order", ([[int(v) for v in ln] for ln in lines],))
