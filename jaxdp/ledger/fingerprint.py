"""Dataset fingerprints: SHA-256 over an array's kind, shape and values.

Values are first widened to one canonical dtype per kind (booleans and integers to
int64, or uint64 above its range; floats to float64; little-endian, C order), so
the same values held as int32 in one program and int64 in another, or as a numpy
array and a JAX array, have one fingerprint; the canonical dtype and the shape are
hashed with the bytes. For poset counts the poset's order matrix has its own
fingerprint, and the two together make the dataset's.

A fingerprint of a small dataset identifies it (anyone can hash every candidate),
so the ledger file is as confidential as the data; errors never show fingerprints.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

__all__ = ["array_fingerprint", "dataset_fingerprint"]


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
  """The SHA-256 (hex) of an array's canonical dtype, shape and values.

  Raises:
    TypeError: an array of another kind (complex, strings, objects).
  """
  x = _canonical(np.asarray(data))
  h = hashlib.sha256(b"jaxdp-array\x00")
  h.update(f"{x.dtype.str}{list(x.shape)}".encode())
  h.update(np.ascontiguousarray(x).tobytes())
  return h.hexdigest()


def dataset_fingerprint(data: Any, poset: Any = None) -> dict:
  """``{"data": ..., "poset": ... or None, "dataset": ...}``: the data's, the poset
  order's (for poset counts) and both together (hex SHA-256 each)."""
  d = array_fingerprint(data)
  p = None if poset is None else array_fingerprint(np.asarray(poset.order, bool))
  both = hashlib.sha256(f"jaxdp-dataset\x00{d}\x00{p}".encode()).hexdigest()
  return {"data": d, "poset": p, "dataset": both}
