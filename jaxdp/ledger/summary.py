"""What a ledger reports: one :class:`DatasetSummary` per dataset and one
:class:`Charge` per entry, and the text of a refusal."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any, NamedTuple

import numpy as np

from jaxdp.ledger import records
from jaxdp.ledger.index import verify_row

__all__ = ["Charge", "DatasetSummary", "charge_of", "data_tag", "refusal", "summarize"]


class DatasetSummary(NamedTuple):
  """One dataset of a ledger: its budget, what is spent and what is left.

  ``spent_eps`` and ``remaining_eps`` are the accountant's figures
  (:attr:`jaxdp.Accountant.spent_eps`, :meth:`jaxdp.Accountant.remaining`);
  ``budget`` is the stored record (rule, parameters, units), ``state`` the spent
  units and counters; ``tag`` a keyed digest of the data's fingerprint
  (:func:`data_tag`), which ``jaxdp ledger show`` prints in its place."""

  name: str
  registered: str
  fingerprint: dict
  budget: dict
  state: dict
  charges: int
  spent_eps: float
  spent_delta: float
  remaining_eps: float
  tag: str = ""


def data_tag(key: bytes, fingerprint: dict) -> str:
  """16 hex digits of HMAC-SHA256, under the ledger's key, of the dataset's
  fingerprint: two datasets with one tag hold the same data, and without the key
  file no one can test a candidate dataset against it (a plain SHA-256 of a small
  dataset is found by hashing every candidate)."""
  msg = f"jaxdp-show\x00{fingerprint.get('dataset')}".encode()
  return hmac.new(key, msg, hashlib.sha256).hexdigest()[:16]


class Charge(NamedTuple):
  """One entry of a dataset: a charge (or, under a plan, a refusal)."""

  seq: int
  time: str
  kind: str
  mechanism: dict
  units: Any
  delta_units: int
  label: str
  after: dict


def summarize(
  name: str, entry: dict, state: dict, count: int, key: bytes = b""
) -> DatasetSummary:
  """The summary of a dataset from its registration entry and its state (its
  ``tag`` under ``key``, empty without one)."""
  acct = records.resume(records.rebuild(entry["budget"]), state)
  return DatasetSummary(
    name,
    entry["time"],
    entry["fingerprint"],
    entry["budget"],
    state,
    count,
    float(acct.spent_eps),
    float(acct.spent_delta),
    float(np.asarray(acct.remaining()[0])),
    data_tag(key, entry["fingerprint"]) if key else "",
  )


def charge_of(row, key: bytes) -> Charge:
  """The :class:`Charge` of a stored row, checked against its own keyed hash."""
  verify_row(row, key)
  body = json.loads(row[4])
  return Charge(
    row[0],
    row[3],
    row[2],
    body.get("mechanism", {}),
    body.get("units"),
    body.get("delta_units", 0),
    body.get("label", ""),
    body["after"],
  )


def refusal(s: DatasetSummary, path: str, planned: int = 0) -> str:
  """The message of a refused charge (from the budget and the spend only)."""
  what = f"{planned} planned releases" if planned else "this release"
  return (
    f"refused: {what} would take dataset {s.name!r} past its budget "
    f"({s.spent_eps:g} of eps {s.budget['eps']:g} spent, in ledger {path}). "
    "Nothing was spent."
  )
