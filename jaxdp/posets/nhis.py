"""The National Health Interview Survey posets of Joseph, Ribero & Yu (Section 5.3).

Section 1 (4 questions): q1; q2 requires q1; q3 requires q2; q4 requires q1.
Section 2 (7 questions): q5; q6..q11 each require q5.
Section 3 (4 questions): q12; q13..q15 each require q12.
"""

from __future__ import annotations

__all__ = ["PARENTS", "SIZES", "parents"]

PARENTS = (
  (-1, 0, 1, 0)  # section 1: q1..q4
  + (-1,)
  + (4,) * 6  # section 2: q5..q11
  + (-1,)
  + (11,) * 3  # section 3: q12..q15
)
"""The element directly above each question (-1: none), questions numbered q1 = 0."""

SIZES = {1: 4, 2: 11, 3: 15}
"""Number of questions in the first 1, 2 or 3 sections."""


def parents(sections: int) -> tuple[int, ...]:
  """The parent list of the first ``sections`` sections (1, 2 or 3).

  Raises:
    ValueError: ``sections`` is not 1, 2 or 3.
  """
  if isinstance(sections, bool) or sections not in SIZES:
    raise ValueError(f"sections must be 1, 2 or 3; got {sections!r}.")
  return PARENTS[: SIZES[sections]]
