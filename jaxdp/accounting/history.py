"""The accountant's history leaf: the events of its first answered releases."""

from __future__ import annotations

import jax.numpy as jnp

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
  row = jnp.stack(
    [jnp.float32(KINDS.index(event[0]) + 1), jnp.asarray(event[1], jnp.float32)]
  )
  write = ok & (acct.answered < acct.history)
  index = jnp.minimum(acct.answered, acct.history - 1)
  return jnp.where(write, acct.log.at[index].set(row), acct.log)
