"""Synthetic questionnaires: skip logic of a long survey instrument as a poset.

A section opens with a gate question; the questions after it are asked only on
"yes" to the gate, in groups: single follow-ups, follow-up chains (each asked only
after "yes" to the previous one), nested sub-sections (a gate of their own), and
*joint* follow-ups asked only when the respondent said "yes" to two earlier
questions (two prerequisites: the poset is not a forest). Every such instrument is
series-parallel, so ``method="sp"`` samples its poset ball exactly at any size up to
512 questions.
"""

from __future__ import annotations

import numpy as np

from jaxdp import _checks
from jaxdp.posets import Poset

__all__ = ["synthetic_questionnaire", "gate_chain"]


def synthetic_questionnaire(seed: int, d: int, *, section_size: int = 30) -> Poset:
  """A random questionnaire of ``d`` questions in sections of about ``section_size``.

  Args:
    seed: numpy seed.
    d: number of questions (>= 1).
    section_size: mean section length.

  Returns:
    A :class:`~jaxdp.Poset` labelled ``s{section}q{k}``; "q requires r" is
    ``p_q <= p_r``.
  """
  d = _checks.check_int(d, "d", minimum=1)
  rng = np.random.default_rng(seed)
  requires: dict[int, list[int]] = {}
  next_id = [0]

  def new(prereqs):
    q = next_id[0]
    next_id[0] += 1
    requires[q] = list(prereqs)
    return q

  def group(budget, gate):
    """Questions below ``gate`` using at most ``budget`` ids; returns the count."""
    kind = rng.choice(["single", "chain", "section", "joint"], p=[0.35, 0.25, 0.2, 0.2])
    if kind == "single" or budget < 3:
      new([gate])
      return 1
    if kind == "chain":
      length = int(rng.integers(2, min(budget, 4) + 1))
      prev = gate
      for _ in range(length):
        prev = new([prev])
      return length
    if kind == "joint":
      a, b = new([gate]), new([gate])
      new([a, b])  # asked only after "yes" to both a and b
      return 3
    sub = new([gate])
    size = int(rng.integers(2, min(budget, 12) + 1))
    return 1 + body(size - 1, sub)

  def body(budget, gate):
    used = 0
    while used < budget:
      used += group(budget - used, gate)
    return used

  while next_id[0] < d:
    left = d - next_id[0]
    size = min(left, max(1, int(rng.poisson(section_size))))
    gate = new([])
    body(size - 1, gate)
  ids = sorted(requires)[:d]
  keep = set(ids)
  labels, section, count = [], -1, 0
  for q in ids:
    if not requires[q]:
      section, count = section + 1, 0
    labels.append(f"s{section}q{count}")
    count += 1
  edges = [(q, r) for q in ids for r in requires[q] if r in keep]
  return Poset.from_edges(
    len(ids), edges, name=f"questionnaire{d}-{seed}", labels=tuple(labels)
  )


def gate_chain(d: int, seed: int = 0, *, follow_ups: int | None = None) -> Poset:
  """A chain of gate questions, each with 1-4 follow-ups: a deep decomposition tree.

  Element numbers follow the construction. Each gate requires the next gate built
  (so the last one built is asked first) and each follow-up requires its gate; a
  gate's follow-ups are, at random, side by side or a chain (each requiring the one
  before). The decomposition tree is about as deep as the number of gates, and its
  depths differ in shape (``benchmarks/sp_costs.py`` and the sp kernel's scans).
  With one follow-up per gate it is a caterpillar: a spine 0 < 2 < 4 < ... with
  element 2i + 1 below 2i, a decomposition tree d depths deep of one shape.

  Args:
    d: number of questions (>= 1).
    seed: numpy seed for the follow-up counts and shapes.
    follow_ups: follow-ups per gate (>= 1; the last gate gets what is left), or
      ``None`` for 1-4 at random.

  Returns:
    A :class:`~jaxdp.Poset` named ``gate chain d={d}`` (``caterpillar d={d}`` with one
    follow-up per gate); "q requires r" is ``p_q <= p_r``.
  """
  d = _checks.check_int(d, "d", minimum=1)
  if follow_ups is not None:
    follow_ups = _checks.check_int(follow_ups, "follow_ups", minimum=1)
  rng = np.random.default_rng(seed)
  edges, gates, x = [], [], 0
  while x < d:
    g, x = x, x + 1
    if gates:
      edges.append((gates[-1], g))
    gates.append(g)
    m = min(int(rng.integers(1, 5)) if follow_ups is None else follow_ups, d - x)
    follow = list(range(x, x + m))
    x += m
    if rng.random() < 0.5:
      edges += [(f, g) for f in follow]
    elif follow:
      edges += [(follow[0], g)] + [(b, a) for a, b in zip(follow, follow[1:])]
  name = "caterpillar" if follow_ups == 1 else "gate chain"
  return Poset.from_edges(d, edges, name=f"{name} d={d}")
