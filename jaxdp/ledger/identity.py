"""Which dataset a use of the ledger is: a name and a fingerprint, checked together.

The same name with other data is refused (a name is one dataset), and so is the
same data under a second name (it would get a second budget: the same people,
charged twice as little). For poset counts the data's fingerprint decides: a use
with another poset is charged to the same budget, with a warning. A dataset
registered under the first fingerprint scheme (jaxdp 0.1: no ``scheme`` in its
fingerprint) is compared with the data's fingerprint of that scheme; its first use
here records its fingerprint of this scheme (a ``fingerprint`` entry), so from then
on its copies with the columns reordered are recognised too. A use may present
the same data in several forms (:func:`.fingerprint.data_forms`; the rows before
and after ``release --on-invalid clip``): any form known under a name makes the
data that dataset, and every form not yet known is recorded for it (a
``fingerprint`` entry), so each later use in any of them is recognised. Messages never
show fingerprints, values or the number of rows: two different datasets refused
under one name get the same message.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

from jaxdp import _checks
from jaxdp.ledger import records
from jaxdp.ledger.errors import DatasetMismatchError
from jaxdp.ledger.fingerprint import SCHEME
from jaxdp.ledger.index import Index

__all__ = ["MAX_NAME", "check_dataset", "check_name"]

MAX_NAME = 200


def check_name(dataset: Any) -> None:
  """Raises unless ``dataset`` is a printable name of 1 to 200 characters."""
  if not (isinstance(dataset, str) and 0 < len(dataset) <= MAX_NAME):
    raise _checks.ArgTypeError(
      f"dataset must be a name of 1 to {MAX_NAME} characters; got {dataset!r:.80}."
    )
  if not dataset.isprintable():
    raise ValueError(f"dataset must be printable; got {dataset!r:.80}.")


def _registered_as(other: str, path: str) -> DatasetMismatchError:
  return DatasetMismatchError(
    f"this data is already registered as dataset {other!r} in ledger {path}: the "
    "same data under a second name would get a second budget. Use the name "
    f"{other!r}."
  )


def check_dataset(
  index: Index,
  path: str,
  dataset: str,
  fp: dict,
  forms: list[str],
  record: dict,
  legacy: Callable[[], str],
) -> None:
  """Raises unless ``dataset`` may be used with data of fingerprint ``fp`` (and of
  the other ``forms``, fingerprints of the same data in other forms: any one known
  under a name makes the data that dataset) and the budget ``record``.

  Args:
    legacy: the data's rows fingerprint of scheme 1, called only if the ledger
      holds a dataset registered under it.

  Raises:
    DatasetMismatchError: the name is registered with other data, or the data under
      another name.
    BudgetMismatchError: another budget, rule or group size.
  """
  known = index.datasets.get(dataset)
  names = {index.by_data[f] for f in [fp["data"], *forms] if f in index.by_data}
  if not names and any(
    e["fingerprint"].get("scheme") != SCHEME for e in index.datasets.values()
  ):
    names = {index.by_data[legacy()]} if legacy() in index.by_data else set()
  others = sorted(names - {dataset})
  if others:
    raise _registered_as(others[0], path)
  if known is None:
    return
  scheme = known["fingerprint"].get("scheme")
  same = dataset in names or (scheme is None and known["fingerprint"]["data"] == legacy())
  if not same:
    raise DatasetMismatchError(
      f"dataset {dataset!r} is registered in ledger {path} with other data (the "
      "fingerprints of dtype, shape and values differ): a name is one dataset. Use "
      "a new name for new data."
    )
  if known["fingerprint"]["poset"] != fp["poset"]:
    warnings.warn(
      f"dataset {dataset!r} was registered with "
      f"{'another poset' if known['fingerprint']['poset'] else 'no poset'} than this "
      "use's; its releases are charged to the same budget (the same people).",
      stacklevel=4,
    )
  records.check_budget(known["budget"], record, dataset)
