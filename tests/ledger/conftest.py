"""Fixtures shared by the ledger's command-line tests."""

import numpy as np
import pytest

import jaxdp
from jaxdp.accounting.releases import mechanism_cost, mechanism_event, spend


@pytest.fixture
def quick_noise(monkeypatch):
  """The release's accounting as it is, its exact noise replaced by zeros (the
  sampler is tested elsewhere; compiling it here would cost seconds)."""

  def release(acct, mech, rows):
    cost = mechanism_cost(acct, mech, np.shape(rows))
    _, _, acct = spend(acct, *cost, mechanism_event(acct, mech), (mech, rows))
    return acct, np.zeros(1 + np.shape(rows)[1], np.int32)

  monkeypatch.setattr(jaxdp.cli.release, "release", release)
