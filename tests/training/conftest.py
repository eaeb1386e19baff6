"""Fixtures shared by the training tests."""

import dataclasses

import pytest

from tests.training import reference


@dataclasses.dataclass(frozen=True)
class StandInRdp:
  """Stand-in policy (dp_accounting) until jaxdp.composition's policies land."""

  orders: tuple = (
    1.5,
    2.0,
    2.5,
    3.0,
    4.0,
    5.0,
    6.0,
    8.0,
    10.0,
    12.0,
    16.0,
    20.0,
    32.0,
    64.0,
  )

  def epsilon(self, q, sigma, steps, delta):
    return reference.rdp_epsilon(q, sigma, steps, delta, self.orders)

  def max_steps(self, q, sigma, eps, delta):
    return reference.largest_steps(lambda t: self.epsilon(q, sigma, t, delta), eps)


@pytest.fixture(scope="session")
def rdp_policy():
  return StandInRdp()
