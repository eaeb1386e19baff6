"""Finite partially ordered sets (posets) as immutable, hashable values.

A :class:`Poset` on ``d`` elements stores its order relation ``order[i][j] = True``
iff ``p_i <= p_j``. A data point is a *filter* (up-set) ``x`` in ``{0, 1}^d``: if
``p_i <= p_j`` and ``x_i = 1`` then ``x_j = 1``. In survey terms, question ``i`` may be
answered "yes" only if question ``j`` was answered "yes".

Posets are hashable, so they can be static arguments of ``jax.jit`` and static
fields of pytrees.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data",
  ICLR 2025 (arXiv:2410.06881), Sections 2.2 and 4.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

import numpy as np

from jaxdp import _checks
from jaxdp.posets import canonical, decomposition, formats, graphs, nhis
from jaxdp.posets.random_dags import random_dag
from jaxdp.typing import ArrayLike, KeyArray

__all__ = ["MAX_ENUMERATE_D", "Poset"]

# Largest d for which ``Poset.filters()`` enumerates (2^d candidate sets).
MAX_ENUMERATE_D = 24


@dataclasses.dataclass(frozen=True, eq=False)
class Poset:
  """An immutable finite poset, usable as a static jit argument.

  Build one with a classmethod constructor (:meth:`from_order`, :meth:`from_edges`,
  :meth:`from_parents`, :meth:`nhis`, :meth:`random`); the plain constructor takes the
  order as a tuple of tuples of bools and is validated the same way.

  **Direction.** ``p_i <= p_j`` means: whoever answers "yes" to i also answers
  "yes" to j (a data row is a *filter*, an up-set). Survey skip logic reads the other
  way round: "q2 is asked only if q1 is yes" (q2 requires q1) is ``p_q2 <= p_q1``, so
  q1 is *above* q2 and the edge for :meth:`from_edges` is ``(q2, q1)``. To avoid the
  trap, say it with names: ``Poset.from_prerequisites({"q2": ["q1"]})``.

  Equality and hashing are those of the relation's canonical bytes (:attr:`key`),
  which also key every table cache (:mod:`jaxdp.posets.canonical`).

  Attributes:
    relation: ``relation[i][j]`` is True iff ``p_i <= p_j`` (hashable form of
      :attr:`order`), stored as a tuple of tuples of Python bools.
    name: an optional label used in reprs and reports; not part of equality.
    labels: optional element names (question labels), used in error messages and
      outputs; not part of equality. :attr:`element_names` falls back to p0, p1, ...
  """

  relation: tuple[tuple[bool, ...], ...]
  name: str = dataclasses.field(default="", compare=False)
  labels: tuple[str, ...] = dataclasses.field(default=(), compare=False)

  def __post_init__(self):
    relation = canonical.canonical_relation(self.relation)
    graphs.validate_order(np.array(relation, dtype=bool), "order")
    object.__setattr__(self, "relation", relation)
    labels = formats.check_labels(self.labels, len(self.relation))
    object.__setattr__(self, "labels", labels)

  def __eq__(self, other):
    if other.__class__ is not self.__class__:
      return NotImplemented
    return self.key == other.key

  def __hash__(self):
    return hash(self.key)

  @property
  def key(self) -> bytes:
    """The relation's canonical bytes (:func:`~jaxdp.posets.canonical.relation_key`)."""
    return canonical.relation_key(self.relation)

  @classmethod
  def from_key(cls, key: bytes) -> Poset:
    """The unnamed poset of canonical bytes ``key``, as the table caches build it: its
    relation is the one tuple :func:`~jaxdp.posets.canonical.relation_of` keeps for
    the bytes, checked to be a partial order (bytes from elsewhere could hold a
    cycle, which no sampler's ball is built for).

    Raises:
      ValueError: the relation breaks an order axiom (named)."""
    graphs.validate_order(canonical.order_of(key), "order")
    poset = object.__new__(cls)
    object.__setattr__(poset, "relation", canonical.relation_of(key))
    object.__setattr__(poset, "name", "")
    object.__setattr__(poset, "labels", ())
    return poset

  @property
  def element_names(self) -> tuple[str, ...]:
    """The element labels, or p0, p1, ... when none were given."""
    return self.labels or tuple(f"p{i}" for i in range(self.d))

  # ------------------------------------------------------------------ constructors
  @classmethod
  def from_order(
    cls, order: ArrayLike, *, name: str = "", labels: Sequence[str] = ()
  ) -> Poset:
    """Builds a poset from its order matrix.

    Args:
      order: a square ``(d, d)`` array-like with ``order[i][j]`` truthy iff
        ``p_i <= p_j``; entries must be 0/1 (or bool). It must be reflexive,
        antisymmetric and transitive.
      name: optional label.

    Returns:
      The :class:`Poset`.

    Raises:
      ValueError: naming the broken property and the indices involved.
    """
    return cls(canonical.canonical_relation(order), name=name, labels=labels)

  @classmethod
  def from_edges(
    cls,
    d: int,
    edges: Iterable[Sequence[int]],
    *,
    name: str = "",
    labels: Sequence[str] = (),
  ) -> Poset:
    """Builds the poset generated by strict relations ``(i, j)``: ``p_i < p_j``.

    ``(i, j)`` puts i *below* j: "i requires j" in survey terms (see the class
    docstring; :meth:`from_prerequisites` takes the survey's own wording).

    Args:
      d: number of elements.
      edges: pairs ``(i, j)`` with ``0 <= i, j < d`` meaning ``p_i < p_j``. The
        poset is their reflexive-transitive closure.
      name: optional label.
      labels: optional element names.

    Returns:
      The :class:`Poset`.

    Raises:
      ValueError: if ``d`` is not a non-negative integer, an index is out of range,
        an edge is malformed, or the edges contain a cycle (one cycle is named).
    """
    d = _checks.check_int(d, "d", minimum=1)
    adj = np.zeros((d, d), dtype=bool)
    for n, edge in enumerate(edges):
      try:  # integers only: int() would truncate 0.7 to 0 and parse "1"
        i, j = (_checks.check_int(v, f"edges[{n}]") for v in edge)
      except (TypeError, ValueError):
        raise ValueError(
          f"edges[{n}] must be a pair (i, j) of integers; got {edge!r}."
        ) from None
      for v in (i, j):
        if not 0 <= v < d:
          raise ValueError(
            f"edges[{n}] = {tuple(edge)!r} has index {v} out of range for d = {d}; "
            f"indices must be in [0, {d - 1}]."
          )
      if i == j:
        raise ValueError(
          f"edges[{n}] = ({i}, {j}) is a self-loop, which is a cycle; "
          "edges mean strict relations p_i < p_j."
        )
      adj[i, j] = True
    cycle = graphs.find_cycle(adj)
    if cycle:
      path = " < ".join(f"p{c}" for c in cycle + [cycle[0]])
      raise ValueError(f"edges contain a cycle: {path}. A partial order has no cycles.")
    return cls(graphs.transitive_closure(adj), name=name, labels=labels)

  @classmethod
  def from_prerequisites(
    cls, requires: Mapping[str, Sequence[str]], *, name: str = ""
  ) -> Poset:
    """Builds a poset from survey skip logic, by question name.

    Args:
      requires: ``{question: [questions it requires], ...}``: "q2": ["q1"] means a
        respondent can answer q2 "yes" only after "yes" to q1 (``p_q2 <= p_q1``).
        Every question named anywhere becomes an element, in order of first
        appearance; list questions without prerequisites with ``[]``.
      name: optional label.

    Returns:
      The :class:`Poset`, labelled with the question names.

    Raises:
      ArgTypeError: prerequisites not in a list or tuple (a string, or a set).
    """
    labels = []
    for q, reqs in requires.items():
      if not isinstance(reqs, (list, tuple)):  # a string, or a set: its order varies
        got = f"a {type(reqs).__name__} (a set's order varies by process)"
        if isinstance(reqs, str):
          got = f"the string {reqs!r} (write [{reqs!r}])"
        raise _checks.ArgTypeError(
          f"requires[{q!r}] must be a list of question names; got {got}."
        )
      for v in [q, *reqs]:
        if v not in labels:
          labels.append(v)
    index = {v: i for i, v in enumerate(labels)}
    edges = [(index[q], index[r]) for q, reqs in requires.items() for r in reqs]
    return cls.from_edges(len(labels), edges, name=name, labels=tuple(labels))

  @classmethod
  def load(cls, path: str | os.PathLike) -> Poset:
    """Reads a poset file.

    Formats: JSON ``{"order": [[...]]}``, ``{"d": 5, "edges": [[i, j], ...]}`` or
    ``{"requires": {"q2": ["q1"], ...}}``, each with optional ``"labels"`` (not with
    requires, where every question is a key, ``"q1": []`` if it has no
    prerequisite); or text: a 0/1 order matrix, one row per line, or ``d D``
    followed by ``i j`` edge lines (``#`` starts a comment). Named after the file.

    Raises:
      ValueError: naming the file and what is wrong (also for ``"d": 2.5``, a
        duplicate JSON key, more questions than the samplers serve: 512, or a
        prerequisite that is not a key: see :mod:`jaxdp.posets.formats`).
    """
    path = Path(path)
    name = path.stem
    try:
      text = path.read_text()
    except OSError as e:
      raise ValueError(f"{path}: cannot read ({e.strerror}).") from None
    try:
      spec = formats.parse(path, text)
      if spec.kind == "requires":
        return cls.from_prerequisites(*spec.args, name=name)
      if spec.kind == "order":
        return cls.from_order(*spec.args, name=name, labels=spec.labels)
      return cls.from_edges(*spec.args, name=name, labels=spec.labels)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}: invalid JSON ({e.msg} at line {e.lineno}).") from None
    except RecursionError:
      raise ValueError(f"{path}: invalid JSON (nested too deeply).") from None
    except (ValueError, TypeError, KeyError, IndexError) as e:
      raise ValueError(f"{path}: {e}") from None

  @classmethod
  def from_parents(cls, parents: Sequence[int], *, name: str = "") -> Poset:
    """Builds a forest: ``parents[i]`` is the element directly above ``i``, or -1.

    Args:
      parents: length-``d`` sequence of parent indices (-1 for a maximal element).
      name: optional label.

    Returns:
      The :class:`Poset` (a forest: every element has at most one element directly
      above it).
    """
    parents = [_checks.check_int(p, f"parents[{i}]") for i, p in enumerate(parents)]
    d = len(parents)
    edges = []
    for i, p in enumerate(parents):
      if p == -1:
        continue
      if not 0 <= p < d:
        raise ValueError(
          f"parents[{i}] = {p} is out of range; use -1 for 'no parent' or an "
          f"index in [0, {d - 1}]."
        )
      edges.append((i, p))
    return cls.from_edges(d, edges, name=name)

  @classmethod
  def nhis(cls, sections: int = 3) -> Poset:
    """The National Health Interview Survey posets of Joseph, Ribero & Yu.

    Section 1 (4 questions): q1; q2 requires q1; q3 requires q2; q4 requires q1.
    Section 2 (7 questions): q5; q6..q11 each require q5.
    Section 3 (4 questions): q12; q13..q15 each require q12.
    "q2 requires q1" means a respondent may answer q2 "yes" only after "yes" to
    q1, i.e. ``p_q2 <= p_q1``. Elements are numbered q1 = 0, q2 = 1, ...

    Args:
      sections: 1, 2 or 3 (d = 4, 11, 15).

    Returns:
      The forest poset on the first ``sections`` sections.

    References:
      Joseph, Ribero & Yu (ICLR 2025), Section 5.3.
    """
    parents = nhis.parents(sections)
    return dataclasses.replace(
      cls.from_parents(parents, name=f"nhis{sections}"),
      labels=tuple(f"q{i + 1}" for i in range(len(parents))),
    )

  @classmethod
  def random(cls, key: KeyArray, d: int, *, steps: int | None = None) -> Poset:
    """A random poset: the transitive closure of a uniformly random labelled DAG.

    The DAG comes from Melancon's Markov chain (see :func:`random_dag`).

    Args:
      key: a ``jax.random`` key.
      d: number of elements.
      steps: chain length; default ``10 * d**2`` as in the paper's experiments.

    Returns:
      The :class:`Poset`.
    """
    d = _checks.check_int(d, "d", minimum=1)
    return cls.from_edges(d, random_dag(key, d, steps=steps), name=f"random{d}")

  # ------------------------------------------------------------------ properties
  @property
  def d(self) -> int:
    """Number of elements."""
    return len(self.relation)

  @property
  def order(self) -> np.ndarray:
    """The order matrix as a read-only numpy bool ``(d, d)`` array."""
    return canonical.order_of(self.key)

  @functools.cached_property
  def parents(self) -> tuple[int, ...] | None:
    """For a forest, the element directly above each element (-1 if none); else None."""
    cover = self.cover_matrix
    if np.any(cover.sum(axis=1) > 1):
      return None
    return tuple(int(np.argmax(r)) if r.any() else -1 for r in cover)

  @property
  def is_forest(self) -> bool:
    """True iff every element has at most one element directly above it."""
    return self.parents is not None

  @property
  def is_series_parallel(self) -> bool:
    """True iff the poset has no induced N (:mod:`jaxdp.posets.decomposition`); such posets
    take the exact series-parallel sampler up to d = 512."""
    return decomposition.is_series_parallel(self)

  @functools.cached_property
  def cover_matrix(self) -> np.ndarray:
    """``cover[i, j]`` True iff ``p_j`` covers ``p_i`` (``p_i < p_j``, nothing between)."""
    o = self.order
    strict = o & ~np.eye(self.d, dtype=bool)
    # i < k < j for some k  <=>  (strict @ strict)[i, j] (float64 BLAS: exact counts)
    between = (strict.astype(np.float64) @ strict.astype(np.float64)) > 0
    cover = strict & ~between
    cover.setflags(write=False)
    return cover

  @property
  def num_cover_edges(self) -> int:
    """Number of edges of the Hasse diagram (cover relations)."""
    return int(self.cover_matrix.sum())

  @functools.cached_property
  def depth(self) -> int:
    """Number of elements on a longest chain (0 for the empty poset)."""
    if self.d == 0:
      return 0
    o = self.order
    strict = o & ~np.eye(self.d, dtype=bool)
    # Longest chain ending at each element, elements processed bottom-up.
    below_count = strict.sum(axis=0)
    longest = np.ones(self.d, dtype=np.int64)
    for j in np.argsort(below_count, kind="stable"):
      lower = np.nonzero(strict[:, j])[0]
      if lower.size:
        longest[j] = 1 + longest[lower].max()
    return int(longest.max())

  def is_filter(self, x: ArrayLike) -> bool:
    """Whether ``x`` (length-``d`` 0/1 vector) is a filter (up-set) of the poset."""
    x = np.asarray(x)
    if x.shape != (self.d,):
      raise ValueError(f"x must have shape ({self.d},); got {x.shape}.")
    xb = x.astype(bool)
    if not np.array_equal(xb, x):
      raise ValueError("x must hold 0/1 values.")
    # violation: x_i = 1, p_i <= p_j, x_j = 0
    return not np.any(self.order[xb][:, ~xb])

  def filters(self) -> np.ndarray:
    """All filters (up-sets) as an ``(m, d)`` uint8 array, the empty filter first.

    Raises:
      ValueError: for ``d`` > 24, where enumeration is impractical.
    """
    if self.d > MAX_ENUMERATE_D:
      raise ValueError(
        f"filters() enumerates 2^d sets and supports d <= {MAX_ENUMERATE_D}; this "
        f"poset has d = {self.d}. Use is_filter() to check single rows."
      )
    return graphs.filters_of(self)

  def __repr__(self) -> str:
    label = f"{self.name!r}, " if self.name else ""
    return f"Poset({label}d={self.d}, cover_edges={self.num_cover_edges})"

  def explain_violation(self, x: ArrayLike) -> str:
    """For a 0/1 row that is not a filter: which answer needs which other answer."""
    x = np.asarray(x).astype(bool)
    bad = np.argwhere(x[:, None] & self.order & ~x[None, :])
    if not bad.size:
      return ""
    i, j = bad[0]
    n = self.element_names
    return f"{n[i]!r} is 1 but {n[j]!r}, which it requires, is 0"
