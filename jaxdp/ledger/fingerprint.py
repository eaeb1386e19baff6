"""Dataset fingerprints: SHA-256 over a canonical encoding of the data as a multiset
of rows.

The data's first axis indexes its rows (people); trailing unit axes are dropped, so
shapes ``(n, 1)`` and ``(n,)`` are one layout. Values are canonicalised: booleans and
integers, and floats whose values are all integral (within int64), as int64 (uint64
above its range); other floats as float64 with -0.0 as 0.0 and one NaN. The rows are
then sorted lexicographically and hashed with the canonical dtype and the row shape.
So an int32 and an int64 copy, a float copy of integer data, a numpy and a JAX array,
and the same rows in another order have one fingerprint: a fingerprint recognises
exact copies up to representation and row order, not near-copies (the data with one
row added, dropped or changed is other data; the dataset's name is the identity an
operator must govern). For poset counts the poset's order matrix has its own
fingerprint (:func:`array_fingerprint`, exact, rows not reordered), and the two
together make the dataset's.

A fingerprint of a small dataset identifies it (anyone can hash every candidate),
so the ledger file is as confidential as the data; errors never show fingerprints.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

__all__ = ["array_fingerprint", "dataset_fingerprint", "rows_fingerprint"]


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
  """Canonical values: integral floats as int64, else float64 with one zero, one NaN."""
  if not np.issubdtype(x.dtype, np.floating):
    return _canonical(x)
  f = x.astype("<f8")
  finite = np.isfinite(f)
  if finite.all() and (np.floor(f) == f).all() and (np.abs(f) < 2.0**63).all():
    return f.astype("<i8")
  f = f + 0.0  # -0.0 -> 0.0
  f[np.isnan(f)] = np.nan  # one NaN
  return f


def rows_fingerprint(data: Any) -> str:
  """The SHA-256 (hex) of an array as a multiset of rows (see the module docstring).

  Raises:
    TypeError: an array of another kind (complex, strings, objects).
  """
  x = np.atleast_1d(np.asarray(data))
  while x.ndim > 1 and x.shape[-1] == 1:
    x = x[..., 0]
  x = _values(x)
  rows = x.reshape(x.shape[0], -1)
  if rows.shape[0] > 1 and rows.shape[1]:
    rows = rows[np.lexsort(rows.T[::-1])]
  h = hashlib.sha256(b"jaxdp-rows\x00")
  h.update(f"{rows.dtype.str}{list(x.shape[1:])}{rows.shape[0]}".encode())
  h.update(np.ascontiguousarray(rows).tobytes())
  return h.hexdigest()


def dataset_fingerprint(data: Any, poset: Any = None) -> dict:
  """``{"data": ..., "poset": ... or None, "dataset": ...}``: the data's (as rows,
  :func:`rows_fingerprint`), the poset order's (for poset counts) and both together
  (hex SHA-256 each)."""
  d = rows_fingerprint(data)
  p = None if poset is None else array_fingerprint(np.asarray(poset.order, bool))
  both = hashlib.sha256(f"jaxdp-dataset\x00{d}\x00{p}".encode()).hexdigest()
  return {"data": d, "poset": p, "dataset": both}
