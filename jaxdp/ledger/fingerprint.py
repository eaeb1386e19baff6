"""Dataset fingerprints: SHA-256 over a canonical encoding of the data as a multiset
of rows whose cells are in a canonical order.

The data's first axis indexes its rows (people); the other axes are flattened into
the row's cells (columns), and trailing unit axes dropped, so shapes ``(n, 1)`` and
``(n,)`` are one layout. Values are canonicalised: booleans and integers, and floats
whose values are all integral, as int64 (uint64 when some value is past int64's range
and none is negative); other floats as float64 with -0.0 as 0.0 and one NaN. The columns
are then put in a canonical order: each gets a colour, a hash of its multiset of values,
refined a few times (as in colour refinement of graphs) by the multiset of its values
paired with the colours of their rows; columns are ordered by colour, and across columns
of one colour each row's values are sorted. Every step is a function of the data up to
row and column order, so the fingerprint is too. The rows are then sorted
lexicographically and hashed with the colours, the canonical dtype and the shape.

So an int32 and an int64 copy, a float copy of integer data, a numpy and a JAX
array, the rows in another order and the columns (questions) in another order have
one fingerprint. Datasets that the refinement cannot tell apart (regular patterns
such as the incidence matrices of one 8-cycle and of two 4-cycles) share one: the
safe direction, one budget for both. A fingerprint recognises exact copies up to
representation and the order of rows and columns, not near-copies: a column or a
row added or dropped, a subset of the rows, values recoded or changed make other
data (the dataset's name is the identity an operator must govern). For poset counts
the poset's order matrix has its own fingerprint (:func:`array_fingerprint`, exact,
rows not reordered), and the two together make the dataset's.

Scheme 1 (jaxdp 0.1) kept the cells in the order given; datasets registered under it
are recognised with :func:`legacy_rows_fingerprint` (:mod:`.identity`).

A fingerprint of a small dataset identifies it (anyone can hash every candidate),
so the ledger file is as confidential as the data; errors never show fingerprints.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

__all__ = [
  "ROUNDS",
  "SCHEME",
  "array_fingerprint",
  "as_held",
  "data_forms",
  "dataset_fingerprint",
  "legacy_rows_fingerprint",
  "poset_fingerprint",
  "rows_fingerprint",
]

SCHEME = 2  # the rows fingerprint's encoding (1: cells in the order given)
ROUNDS = 3  # refinements of the column colours


def _canonical(x: np.ndarray) -> np.ndarray:
  if x.dtype == np.bool_ or np.issubdtype(x.dtype, np.signedinteger):
    return x.astype("<i8")
  if np.issubdtype(x.dtype, np.unsignedinteger):
    return (
      x.astype("<u8") if x.size and x.max() > np.iinfo(np.int64).max else x.astype("<i8")
    )
  if np.issubdtype(x.dtype, np.floating):
    return x.astype("<f8")
  raise TypeError(
    f"a dataset must hold booleans, integers or floats to be fingerprinted; got dtype "
    f"{x.dtype}."
  )


def array_fingerprint(data: Any) -> str:
  """The SHA-256 (hex) of an array's canonical dtype, shape and values, in order
  (a poset's order matrix, whose rows are not interchangeable).

  Raises:
    TypeError: an array of another kind (complex, strings, objects).
  """
  x = _canonical(np.asarray(data))
  h = hashlib.sha256(b"jaxdp-array\x00")
  h.update(f"{x.dtype.str}{list(x.shape)}".encode())
  h.update(np.ascontiguousarray(x).tobytes())
  return h.hexdigest()


def _values(x: np.ndarray) -> np.ndarray:
  """Canonical values: integral floats as :func:`_canonical` holds integers (int64,
  or uint64 when some value is past int64's range and none is negative), else
  float64 with one zero, one NaN."""
  if not np.issubdtype(x.dtype, np.floating):
    return _canonical(x)
  f = x.astype("<f8")
  if np.isfinite(f).all() and (np.floor(f) == f).all():
    if (np.abs(f) < 2.0**63).all():
      return f.astype("<i8")
    if (f >= 0).all() and (f < 2.0**64).all():
      return f.astype("<u8")
  f = f + 0.0  # -0.0 -> 0.0
  f[np.isnan(f)] = np.nan  # one NaN
  return f


def _rows(data: Any) -> np.ndarray:
  """The canonical values as an ``(n, cells)`` array, trailing unit axes dropped."""
  x = np.atleast_1d(np.asarray(data))
  while x.ndim > 1 and x.shape[-1] == 1:
    x = x[..., 0]
  x = _values(x)
  return x.reshape(x.shape[0], int(np.prod(x.shape[1:], dtype=np.int64)))


def _mix(v: np.ndarray) -> np.ndarray:
  """SplitMix64's finaliser, elementwise on uint64 (wrapping)."""
  v = v ^ (v >> np.uint64(30))  # a new array: the rest is in place
  v *= np.uint64(0xBF58476D1CE4E5B9)
  v ^= v >> np.uint64(27)
  v *= np.uint64(0x94D049BB133111EB)
  v ^= v >> np.uint64(31)
  return v


def _colours(v: np.ndarray) -> np.ndarray:
  """A colour per column (uint64) that is a function of the data up to row and
  column order: the column's multiset of values, refined (at most ``ROUNDS`` times,
  while that splits ties) by the multiset, over the rows, of the column's value with
  its row's multiset of (colour, value) cells."""
  v = _mix(v + np.uint64(0x9E3779B97F4A7C15))  # no fixed point at 0
  c = v.sum(axis=0, dtype=np.uint64)
  for _ in range(ROUNDS):
    distinct = len(np.unique(c))
    if distinct == len(c):
      break
    cell = v ^ _mix(c)  # v is mixed already
    row = _mix(cell.sum(axis=1, dtype=np.uint64))
    cell += row[:, None]
    refined = _mix(c ^ _mix(cell).sum(axis=0, dtype=np.uint64))
    if len(np.unique(refined)) == distinct:
      break
    c = refined
  return c


def _columns(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """The columns in a canonical order and their colours: by colour
  (:func:`_colours`), the values of each row across columns of one colour sorted,
  so the result does not depend on the order of the columns (nor of the rows)."""
  if rows.shape[1] < 2 or rows.shape[0] == 0:
    return rows, np.zeros(0, np.uint64)
  c = _colours(np.ascontiguousarray(rows).view("<u8"))
  order = np.argsort(c, kind="stable")
  rows, c = rows[:, order], c[order]
  starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1], True])
  for a, b in zip(starts[:-1], starts[1:]):
    if b - a > 1:
      rows[:, a:b] = np.sort(rows[:, a:b], axis=1)
  return rows, c


def rows_fingerprint(data: Any) -> str:
  """The SHA-256 (hex) of an array as a multiset of rows whose cells are in a
  canonical order (see the module docstring).

  Raises:
    TypeError: an array of another kind (complex, strings, objects).
  """
  rows, colours = _columns(_rows(data))
  if rows.shape[0] > 1 and rows.shape[1]:
    rows = rows[np.lexsort(rows.T[::-1])]
  h = hashlib.sha256(b"jaxdp-rows\x00")
  h.update(f"scheme {SCHEME} {rows.dtype.str} {list(rows.shape)}".encode())
  h.update(colours.astype("<u8").tobytes())
  h.update(np.ascontiguousarray(rows).tobytes())
  return h.hexdigest()


def legacy_rows_fingerprint(data: Any) -> str:
  """The rows fingerprint of scheme 1 (jaxdp 0.1): the rows as a multiset, their
  cells in the order given. Only to recognise datasets registered under it.

  Raises:
    TypeError: an array of another kind (complex, strings, objects).
  """
  x = np.atleast_1d(np.asarray(data))
  while x.ndim > 1 and x.shape[-1] == 1:
    x = x[..., 0]
  rows = _rows(data)
  if rows.shape[0] > 1 and rows.shape[1]:
    rows = rows[np.lexsort(rows.T[::-1])]
  h = hashlib.sha256(b"jaxdp-rows\x00")
  h.update(f"{rows.dtype.str}{list(x.shape[1:])}{rows.shape[0]}".encode())
  h.update(np.ascontiguousarray(rows).tobytes())
  return h.hexdigest()


def as_held(data: Any) -> np.ndarray:
  """The data as a :class:`~jaxdp.Session` holds it with x64 off: floats wider than
  float32 rounded to float32 (to nearest, as JAX converts them), everything else as
  given. Every entry point fingerprints this form, whatever the x64 setting, so a
  float64 array, its float32 copy and the Session holding either are one dataset
  (data differing only below float32's precision shares a budget: the safe side)."""
  x = np.asarray(data)
  if np.issubdtype(x.dtype, np.floating) and x.dtype.itemsize > 4:
    with np.errstate(over="ignore"):
      return x.astype(np.float32)
  return x


def data_forms(data: Any) -> list[str]:
  """The rows fingerprints a use of ``data`` is recognised by: first of
  :func:`as_held`'s form (the one registered), then, for floats that form rounds,
  of the values as given (how a float64 dataset registered through
  :meth:`jaxdp.Ledger.accountant` before the rounding rule was fingerprinted)."""
  held = as_held(data)
  forms = [rows_fingerprint(held)]
  if held.dtype != np.asarray(data).dtype:
    forms.append(rows_fingerprint(data))
  return list(dict.fromkeys(forms))


def poset_fingerprint(poset: Any) -> str:
  """The SHA-256 (hex) of a poset's order matrix (:func:`array_fingerprint` of its
  booleans): a function of the questionnaire alone, safe to publish."""
  return array_fingerprint(np.asarray(poset.order, bool))


def form_record(data_fp: str, poset_fp: str | None) -> dict:
  """The fingerprint record of a data fingerprint and a poset's (or None)."""
  both = hashlib.sha256(f"jaxdp-dataset\x00{data_fp}\x00{poset_fp}".encode()).hexdigest()
  return {"data": data_fp, "poset": poset_fp, "dataset": both, "scheme": SCHEME}


def dataset_fingerprint(data: Any, poset: Any = None) -> dict:
  """``{"data": ..., "poset": ... or None, "dataset": ..., "scheme": 2}``: the
  data's (as rows, :func:`rows_fingerprint`, of :func:`as_held`'s form), the poset
  order's (for poset counts) and both together (hex SHA-256 each), and the rows
  fingerprint's scheme."""
  d = rows_fingerprint(as_held(data))
  p = None if poset is None else poset_fingerprint(poset)
  return form_record(d, p)
