"""The accountant's history leaf: the events of its first answered releases."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from jaxdp import _checks

__all__ = ["KINDS", "logged"]

KINDS = ("laplace", "pure", "gaussian", "zcdp")  # event kinds, coded 1, 2, 3, 4


def logged(acct, ok, event):
  """The history leaf after a release: an answered one writes (kind code, value) at
  row ``answered`` while there is room."""
  if acct.history == 0:
    return acct.log
  if not event:
    raise ValueError(
      "history needs mechanisms with a known event (Laplace, "
      "Gaussian, discrete Gaussian, pure eps-DP)."
    )
  row = jnp.stack([jnp.float32(KINDS.index(event[0]) + 1), _logged_value(*event)])
  write = ok & (acct.answered < acct.history)
  index = jnp.minimum(acct.answered, acct.history - 1)
  return jnp.where(write, acct.log.at[index].set(row), acct.log)


def _logged_value(kind, value):
  """``value`` in float32, a static one rounded toward the costlier event (eps and
  rho up, a Gaussian's noise multiplier down), so the log never understates a
  release; a traced one is already the float32 the release used."""
  if not _checks.is_concrete(value):
    return jnp.asarray(value, jnp.float32)
  up = kind != "gaussian"
  value = float(value)
  v = np.float32(value)
  if (float(v) < value) if up else (float(v) > value):  # compared in float64
    v = np.nextafter(v, np.float32(np.inf if up else 0.0))
  return jnp.asarray(v)
