"""A host-side session for an untrusted analyst: it holds the data and the accountant.

The functional :class:`~jaxdp.Accountant` trusts the code that threads it: a caller
can keep an old accountant value and release from it again (same key, same noise,
spend counted once). A :class:`Session` is the entry point for an analyst who is
*not* trusted. It owns the data, the accountant and its key; the analyst only sends
queries and receives noisy answers. There is no method that returns the accountant
or its key, so the state cannot be rewound or replayed, and every answer uses fresh
noise.

Queries are built so that their sensitivity holds whatever the analyst writes:

* every function the analyst passes sees **one row at a time** (it is applied with
  ``jax.vmap``), so it cannot combine rows;
* each row's contribution is clipped into the mechanism's sensitivity ball before
  summing (:func:`jaxdp.release_partitioned`); non-finite contributions count as 0
  and poset answers other than 1 as 0, so no data value can raise an error (an
  error that depends on the data would itself disclose it);
* parallel composition splits the held data by a row-wise part index, so the parts
  are disjoint by construction;
* a function that calls back to the host (``jax.debug.print``, ``pure_callback``,
  ``io_callback``) could copy rows out, and is refused before it runs;
* only jaxdp's own mechanism classes are accepted (a subclass could override the
  noise), and their parameters are validated again.

A refused release raises :class:`~jaxdp.ReleaseRefusedError` (the refusal depends only
on the eps asked for, so raising discloses nothing) and counts in ``refusals``.

What it does not protect against: side channels of the host process (timing,
memory), an analyst with access to the Python process itself, and float noise (see
the README's floating-point section).

References:
  C. Dwork, "Differential privacy", ICALP 2006 (Lemma 2.6, the budgeted curator).
  F. McSherry, "Privacy integrated queries", SIGMOD 2009 (stable transformations,
  parallel composition).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend import core as jex_core

from jaxdp import _checks
from jaxdp.accounting import (Accountant, BudgetExceededError, ReleaseRefusedError,
                              release_partitioned)
from jaxdp.mechanisms import (DiscreteGaussianMechanism, GaussianMechanism, KNormMechanism,
                              LaplaceMechanism, PosetCountMechanism)
from jaxdp.posets import Poset

__all__ = ["Session", "UnsafeQueryError"]


_MECHANISMS = (LaplaceMechanism, GaussianMechanism, KNormMechanism, PosetCountMechanism,
               DiscreteGaussianMechanism)


class UnsafeQueryError(ValueError):
  """A query function calls back to the host, which could copy data out."""


class Session:
  """Holds a dataset and a privacy budget; answers noisy queries until it is spent.

  Args:
    data: the dataset, one row per person (a 2-D array, or 1-D for one value each).
      Kept on the device; never returned.
    eps_budget: total eps (Dwork, Lemma 2.6 refusals).
    delta_budget, group_size, composition, max_releases, delta_prime, orders: as
      for :meth:`jaxdp.Accountant.create`.
    key: the PRNG key; ``None`` (the default, and the only choice for a real release)
      draws one from the operating system.
    secure: releases meant to be published: a ChaCha20 key and exact, integer (or
      grid) noise for every query (see ``secure`` in
      :meth:`jaxdp.Accountant.create`).

  Example:
    >>> s = Session(np.arange(1000), eps_budget=1.0)
    >>> s.count(lambda v: v < 500, eps=0.4)          # doctest: +SKIP
    498.3
  """

  def __init__(self, data, eps_budget, *, delta_budget=0.0, group_size: int = 1,
               key=None, composition: str = "basic", max_releases=None,
               delta_prime: float = 0.0, secure: bool = False, orders=None):
    self._data = _checks.check_data(data)
    if self._data.ndim not in (1, 2):
      raise ValueError(f"data must be 1-D or 2-D (one row per person); got shape "
                       f"{tuple(self._data.shape)}.")
    self._acct = Accountant.create(eps_budget, delta_budget=delta_budget,
                                   group_size=group_size, key=key,
                                   composition=composition, max_releases=max_releases,
                                   delta_prime=delta_prime, secure=secure,
                                   orders=orders)

  # -------------------------------------------------------------- read-only state
  @property
  def spent(self) -> float:
    """Spent eps."""
    return float(self._acct.spent_eps)

  @property
  def spent_delta(self) -> float:
    return float(self._acct.spent_delta)

  @property
  def eps_budget(self) -> float:
    return self._acct.eps_budget

  @property
  def secure(self) -> bool:
    """Whether releases are publishable (ChaCha20 key, exact mechanisms only)."""
    return self._acct.secure

  @property
  def answered(self) -> int:
    return int(self._acct.answered)

  @property
  def refusals(self) -> int:
    return int(self._acct.refusals)

  # -------------------------------------------------------------- queries
  def release(self, mech, rows: Callable | None = None, *,
              by: Callable | None = None, num_parts: int | None = None):
    """Releases ``mech`` on the sum of per-row contributions.

    Args:
      mech: a mechanism: :class:`~jaxdp.LaplaceMechanism`,
        :class:`~jaxdp.GaussianMechanism`, :class:`~jaxdp.KNormMechanism` (l_p ball)
        on clipped contribution sums, or :class:`~jaxdp.PosetCountMechanism` on 0/1
        rows.
      rows: a function of one row giving its contribution (a scalar or a vector);
        ``None`` uses the rows themselves.
      by: a function of one row giving its part index (an integer in
        ``[0, num_parts)``; others are dropped): one release per part, at the cost
        of one (parallel composition). ``None``: one part.
      num_parts: the number of parts, with ``by``.

    Returns:
      The noisy statistic as a numpy array (one per part, stacked, with ``by``).

    Raises:
      ReleaseRefusedError: the release would exceed the budget (nothing was spent).
      BudgetExceededError: the release alone costs more than the whole budget.
      UnsafeQueryError: ``rows`` or ``by`` calls back to the host.
    """
    if (by is None) != (num_parts is None):
      raise ValueError("by and num_parts go together: pass both or neither.")
    if type(mech) not in _MECHANISMS:  # a subclass could override randomize or cost
      raise _checks.ArgTypeError(
          f"mech must be one of jaxdp's mechanisms "
          f"({', '.join(m.__name__ for m in _MECHANISMS)}); got {type(mech).__name__}.")
    mech = dataclasses.replace(mech)  # validated again (a pytree may skip validation)
    contrib = self._rowwise(rows, "rows") if rows is not None else self._data
    if isinstance(mech, PosetCountMechanism):
      # never raise on (or print) a row: answers other than 1 count as 0, and each
      # row is replaced by the largest filter it contains (row-wise, stable)
      mech = dataclasses.replace(mech, on_invalid="clip")
      contrib = (contrib == 1).astype(jnp.int8)
    elif getattr(mech, "exact", False) and getattr(mech, "grid", None) is None and (
        jnp.issubdtype(contrib.dtype, jnp.integer) or contrib.dtype == jnp.bool_):
      pass  # integer contributions of an exact release: summed exactly as int32
    else:
      contrib = _sanitized(contrib)
    if by is None:
      part = jnp.zeros((self._data.shape[0],), jnp.int32)
    else:
      part = self._rowwise(by, "by")
      if not jnp.issubdtype(part.dtype, jnp.integer) or part.ndim != 1:
        raise ValueError(f"by must return one integer per row; got {part.dtype} "
                         f"values of shape {tuple(part.shape[1:])}.")
    try:
      acct, out = release_partitioned(self._acct, mech, contrib, part, num_parts or 1)
    except BudgetExceededError:
      self._acct = dataclasses.replace(self._acct, refusals=self._acct.refusals + 1)
      raise
    self._acct = acct
    if not bool(acct.last_answered):
      raise ReleaseRefusedError(
          f"refused: this release's eps would take the total past the budget "
          f"({self.spent:g} of {self.eps_budget:g} spent). Nothing was spent.")
    out = np.asarray(out)
    return out if by is not None else out[0]

  def count(self, predicate: Callable, eps: float):
    """Noisy number of rows where ``predicate(row)`` holds (Laplace, sensitivity 1):
    a float, or an exact int in a secure session."""
    out = self.release(LaplaceMechanism(eps, exact=self.secure),
                       lambda r: predicate(r).astype(bool))
    return int(out) if self.secure else float(out)

  def histogram(self, bin_of: Callable, num_bins: int, eps: float):
    """Noisy counts of rows per bin (``bin_of(row)`` in ``[0, num_bins)``), cost eps."""
    return self.release(LaplaceMechanism(eps, exact=self.secure),
                        lambda r: jnp.ones((), bool), by=bin_of, num_parts=num_bins)

  def sum(self, value_of: Callable, eps: float, *, bound: float,
          grid: float | None = None):
    """Noisy sum of ``value_of(row)``, each value clipped to ``[-bound, bound]``.

    In a secure session the sum is exact on a grid: ``grid=2.0**-k`` for real values
    (the noise is scaled for the snapping, see :class:`~jaxdp.LaplaceMechanism`), or
    integer values and ``grid=None``.
    """
    mech = LaplaceMechanism(eps, bound, exact=self.secure, grid=grid if self.secure
                            else None)
    return float(self.release(mech, value_of))

  def poset_counts(self, poset: Poset, eps: float, *, noise: str = "poset",
                   columns: Callable | None = None,
                   by: Callable | None = None, num_parts: int | None = None):
    """Noisy (n, c_1, ..., c_d) of poset-ordered 0/1 answers (the poset-ball mechanism).

    Answers other than 1 count as 0 and a row that is not a filter is replaced by the
    largest filter it contains (``on_invalid="clip"``): a session never raises on,
    or prints, a data row.

    Args:
      poset, eps, noise: as for :class:`~jaxdp.PosetCountMechanism`.
      columns: a function of one row giving its d answers; ``None``: the row itself.
      by, num_parts: as for :meth:`release`.
    """
    mech = PosetCountMechanism(poset, eps, noise=noise, on_invalid="clip",
                               exact=self.secure)
    return self.release(mech, columns, by=by, num_parts=num_parts)

  # -------------------------------------------------------------- internals
  def _rowwise(self, fn: Callable, name: str):
    """Applies ``fn`` to each row separately, after refusing host callbacks."""
    if not callable(fn):
      raise _checks.ArgTypeError(f"{name} must be a function of one row; got {fn!r}.")
    closed, shape = jax.make_jaxpr(jax.vmap(fn), return_shape=True)(self._data)
    bad = _host_calls(closed.jaxpr)
    if bad:
      raise UnsafeQueryError(
          f"{name} calls back to the host ({bad}): such a call could copy rows out "
          "of the session. Use only jax.numpy and jax.lax operations.")
    # run the jaxpr just checked (no second trace that could differ from it)
    out = jex_core.jaxpr_as_fun(closed)(self._data)
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), out)


def _sanitized(x):
  """Contributions that no data value can turn into an error: non-finite values
  become 0 and integers are clipped to the float's exact range (both row-wise)."""
  f = jnp.result_type(float)
  if jnp.issubdtype(x.dtype, jnp.floating):
    x = x.astype(f)
    return jnp.where(jnp.isfinite(x), x, 0.0)
  if x.dtype == jnp.bool_:
    return x
  limit = _checks.exact_limit(f)
  return _checks.clip_integers(x, limit).astype(f)


def _host_calls(jaxpr) -> str:
  """The first primitive in ``jaxpr`` (recursively) that runs Python on the host."""
  for eqn in jaxpr.eqns:
    if "callback" in eqn.primitive.name or eqn.effects:
      return eqn.primitive.name
    for sub in jex_core.jaxprs_in_params(eqn.params):
      found = _host_calls(sub)
      if found:
        return found
  return ""
