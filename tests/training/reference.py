"""dp_accounting's figures for the Poisson-subsampled Gaussian, the independent
reference the training tests compare with."""

from __future__ import annotations

import functools

import dp_accounting as dpa
from dp_accounting import pld, rdp


def _event(q, sigma, steps):
  return dpa.SelfComposedDpEvent(
    dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps
  )


@functools.cache
def rdp_epsilon(q, sigma, steps, delta, orders):
  acct = rdp.RdpAccountant(list(orders))
  acct.compose(_event(q, sigma, steps))
  return acct.get_epsilon(delta)


@functools.cache
def pld_epsilon(q, sigma, steps, delta, h=1e-4):
  acct = pld.PLDAccountant(value_discretization_interval=h)
  acct.compose(_event(q, sigma, steps))
  return acct.get_epsilon(delta)
