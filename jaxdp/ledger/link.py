"""How a :class:`~jaxdp.Session` uses a :class:`~jaxdp.Ledger`: its budget is the
dataset's, resumed when the session is made, and each release's charge is
committed before the release runs.

:func:`attach` registers (or finds) the dataset and returns the session's accountant
at the dataset's state. :meth:`Link.reserve` commits a release's charge and returns
the accountant to run it from (the dataset's state just before the charge, which
other processes may have moved on); a refusal raises before anything runs.
:meth:`Link.settle` checks that the release charged exactly what was committed. A
release that raises after its charge was committed keeps the charge (its answer
might have been computed).
"""

from __future__ import annotations

from typing import Any

from jaxdp import _checks
from jaxdp.accounting import Accountant
from jaxdp.ledger import records
from jaxdp.ledger.errors import LedgerError
from jaxdp.ledger.ledger import Ledger

__all__ = ["Link", "NoLink", "attach"]


class NoLink:
  """A session without a ledger: its budget lives in the process only."""

  def reserve(self, acct: Accountant, mech: Any, shape: tuple) -> Accountant:
    return acct

  def settle(self, acct: Accountant) -> Accountant:
    return acct


class Link:
  """A session's dataset in a ledger."""

  def __init__(self, ledger: Ledger, dataset: str):
    self.ledger, self.dataset, self._expected = ledger, dataset, None

  def reserve(self, acct: Accountant, mech: Any, shape: tuple) -> Accountant:
    """Commits the charge; returns the accountant to release from.

    Raises:
      ReleaseRefusedError, BudgetExceededError, LedgerError: as
        :meth:`jaxdp.Ledger.charge` (nothing is run).
    """
    self._expected = None
    pre = self.ledger.charge(self.dataset, acct, mech, shape, label="Session")
    self._expected = self.ledger.committed(self.dataset)
    return pre

  def settle(self, acct: Accountant) -> Accountant:
    """``acct`` after the release, checked against the committed state.

    Raises:
      LedgerError: the release charged otherwise than committed (the committed
        charge stays; nothing is answered).
    """
    expected, self._expected = self._expected, None
    if expected is None or records.state_of(acct) != expected:
      raise LedgerError(
        "the release's charge differs from the one committed to the ledger; the "
        "committed charge stays and nothing is answered."
      )
    return acct


def attach(
  ledger: Ledger | None, dataset: str | None, data: Any, acct: Accountant
) -> tuple[Accountant, Link | NoLink]:
  """The session's accountant and link for ``ledger`` and ``dataset``.

  Raises:
    ValueError: ``dataset`` without ``ledger`` or the other way round, or as
      :meth:`jaxdp.Ledger.accountant`.
    LedgerError: as :meth:`jaxdp.Ledger.accountant`.
  """
  if ledger is None and dataset is None:
    return acct, NoLink()
  if ledger is None or dataset is None:
    raise ValueError(
      "ledger= and dataset= go together: pass a jaxdp.Ledger and the dataset's name "
      "(or neither: the budget then lives in this process only)."
    )
  if not isinstance(ledger, Ledger):
    raise _checks.ArgTypeError(
      f"ledger must be a jaxdp.Ledger; got {type(ledger).__name__}."
    )
  resumed = ledger.resume(dataset, data, acct)
  return resumed, Link(ledger, dataset)
