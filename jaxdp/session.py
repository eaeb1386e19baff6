"""A host-side session for an untrusted analyst: it holds the data and the accountant.

The functional :class:`~jaxdp.Accountant` trusts the code that threads it: a caller
can keep an old accountant value and release from it again (same key, same noise,
spend counted once). A :class:`Session` is the entry point for an analyst who is
*not* trusted. It owns the data, the accountant and its key; the analyst only sends
queries and receives noisy answers. There is no method that returns the accountant,
its key or the data, and a session cannot be copied or pickled, so its state cannot
be rewound or replayed: every answer uses fresh noise.

What a session guarantees, whatever functions the analyst sends:

* **One row at a time.** Every function the analyst passes (``rows``, ``by``, a
  predicate) is traced once on one abstract row (its shape and dtype, the public
  schema), and the traced program is checked against an *allowlist* of JAX
  primitives known to act on that row alone: elementwise arithmetic, comparisons,
  casts, selection, reductions and indexing within the row, ``cond``, ``scan`` and
  ``jit`` whose bodies pass the same check. Anything else is refused with
  :class:`UnsafeQueryError` naming the primitive: host callbacks
  (``jax.debug.print``, ``pure_callback``), ``custom_vmap`` rules (which would see
  the whole batch), collectives, effects, random-number primitives, ``while_loop``
  (its running time depends on the data without bound) and any primitive the list
  does not know. Exactly the checked program is then applied to every row with
  ``jax.vmap``.
* **Bounded contributions.** Each row's contribution is clipped into the mechanism's
  sensitivity ball before summing (:func:`jaxdp.release_partitioned`); non-finite
  contributions count as 0 and poset answers other than 1 as 0 (a row that is not a
  filter is replaced by the largest filter it contains). Sums are taken in a dtype
  that cannot overflow and clipped (l_p; exact poset counts saturate after the noise).
* **Errors that disclose nothing.** Every error a query can raise is decided from the
  query, its privacy parameters, the budget and the public schema (row shape and
  dtype), before any data is read; none depends on the data or on the number of
  rows: :class:`UnsafeQueryError` (a refused function), ``ValueError`` /
  ``TypeError`` (bad arguments, checked against the schema),
  :class:`~jaxdp.BudgetExceededError` (one release costs more than the whole budget)
  and :class:`~jaxdp.ReleaseRefusedError` (the release would take the total past the
  budget; Dwork, Lemma 2.6: the refusal depends only on the parameters). Rows are
  evaluated in chunks of a fixed size (:mod:`jaxdp.session_rows`): a query's memory
  does not grow with the rows, its chunk program runs on stand-in rows before anything
  is charged (failing there: refused, free), and a run-time failure on the data is
  charged and raises one fixed :class:`UnsafeQueryError`. The data's own limits (rows
  the release dtype counts exactly, integer ranges) are checked at creation.
* **Disjoint parts.** Parallel composition splits the held data by a row-wise part
  index, so the parts are disjoint by construction.
* **Only jaxdp's mechanisms**, built again with their balls and posets
  (:mod:`jaxdp.session_mechanisms`): no subclass (it could override the noise), no
  instance attribute shadowing a method (a ball's ``norm``), only plain values.

What it does not protect against: side channels of the host process (timing, memory use),
an analyst with access to the Python process itself (who can read any attribute), and the
floating-point leak of the float mechanisms (use ``secure=True`` for releases to publish).

Checked, compiled queries are cached (keyed by the checked program and the
mechanism): a repeated query compiles nothing (one call per block of rows).

References:
  C. Dwork, "Differential privacy", ICALP 2006 (Lemma 2.6, the budgeted curator).
  F. McSherry, "Privacy integrated queries", SIGMOD 2009 (stable transformations,
  parallel composition).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, _data_checks, accounting, session_mechanisms, session_rows
from jaxdp.accounting import Accountant, BudgetExceededError, ReleaseRefusedError, guard
from jaxdp.accounting.keys import consumed_on_success
from jaxdp.accounting.rules import CompositionRule, check_own_rule
from jaxdp.ledger import Ledger, link
from jaxdp.mechanisms import LaplaceMechanism, Mechanism, PosetCountMechanism
from jaxdp.posets import Poset
from jaxdp.queries import charged, compiled, contributions
from jaxdp.rowwise import (  # noqa: F401 (public here)
  LRU,
  UnsafeQueryError,
  check_rowwise,
  checked_query,
  not_traced,
)
from jaxdp.typing import ArrayLike, KeyArray

__all__ = ["Session", "UnsafeQueryError"]


class Session:
  """Holds a dataset and a privacy budget; answers noisy queries until it is spent.

  A session cannot be copied, deep-copied or pickled (two copies would answer with
  the same noise and each count only its own spend).

  Args:
    data: the dataset, one row per person (a 2-D array, or 1-D for one value each).
      Kept on the device; never returned.
    eps_budget: total eps (Dwork, Lemma 2.6 refusals).
    delta_budget: as for :meth:`jaxdp.Accountant.create`.
    group_size: as for :meth:`jaxdp.Accountant.create`.
    composition: one of jaxdp's rule names (as for
      :meth:`jaxdp.Accountant.create`) or an instance of exactly one of jaxdp's rule
      classes (:mod:`jaxdp.accounting.rules`; no subclass, no rule of one's own: an
      untrusted analyst is answered under jaxdp's proved composition theorems only).
    max_releases: as for :meth:`jaxdp.Accountant.create`.
    delta_prime: as for :meth:`jaxdp.Accountant.create`.
    orders: as for :meth:`jaxdp.Accountant.create`.
    key: the PRNG key; ``None`` (the default, and the only choice for a real release)
      draws one from the operating system. With ``secure``, only ``None``. A given
      key is consumed only if the session is made (a ledger's refusal keeps it).
    secure: releases meant to be published: a ChaCha20 key and exact, integer (or
      grid) noise for every query (see ``secure`` in
      :meth:`jaxdp.Accountant.create`).
    allow_test_key: with ``secure``, accept any ChaCha20 key (a test's fixed key;
      as for :meth:`jaxdp.Accountant.create`).
    ledger: a :class:`~jaxdp.Ledger`: the budget is ``dataset``'s there, resumed now,
      each charge committed before its release runs (:mod:`jaxdp.ledger.link`).
    dataset: the dataset's name in ``ledger``.

  Raises:
    ValueError: data of the wrong rank, or with more rows than the default float
      dtype counts exactly (2**24 in float32; enable x64 for more), a budget or
      option out of range, a ``composition`` that is not jaxdp's own (an
      ``ArgTypeError``, which is also a ValueError), or with ``secure``, a given key
      and no ``allow_test_key``.

  Example:
    >>> s = Session(np.arange(1000), eps_budget=1.0)
    >>> s.count(lambda v: v < 500, eps=0.4)          # doctest: +SKIP
    498.3
  """

  def __init__(
    self,
    data: ArrayLike,
    eps_budget: float,
    *,
    delta_budget: float = 0.0,
    group_size: int = 1,
    key: KeyArray | None = None,
    composition: str | CompositionRule = "basic",
    max_releases: int | None = None,
    delta_prime: float = 0.0,
    secure: bool = False,
    allow_test_key: bool = False,
    orders: Sequence[float] | None = None,
    ledger: Ledger | None = None,
    dataset: str | None = None,
  ) -> None:
    check_own_rule(
      composition,
      "for a Session: an untrusted analyst is answered under jaxdp's proved "
      "composition theorems only",
    )
    data = _data_checks.check_data(data)
    if data.ndim not in (1, 2):
      raise ValueError(
        f"data must be 1-D or 2-D (one row per person); got shape {tuple(data.shape)}."
      )
    limit = _data_checks.exact_limit(jnp.result_type(float))
    if data.shape[0] > limit:
      raise ValueError(
        f"data has {data.shape[0]:,} rows, more than {limit:,}, the counts the "
        f"default float dtype ({jnp.dtype(jnp.result_type(float))}) holds exactly: "
        "a query's error or rounding could then depend on the number of rows. "
        "Enable x64 (jax.config.update('jax_enable_x64', True)) or split the data."
      )
    # a ledger's refusal keeps the key; a bad flag or key is refused first
    with consumed_on_success(key, secure=secure, allow_test_key=allow_test_key) as own:
      acct = Accountant.create(
        eps_budget,
        delta_budget=delta_budget,
        group_size=group_size,
        key=own,
        composition=composition,
        max_releases=max_releases,
        delta_prime=delta_prime,
        secure=secure,
        allow_test_key=allow_test_key,
        orders=orders,
        on_refusal=accounting.FillOnRefusal(),  # the session raises its own error
      )
      acct = dataclasses.replace(acct, lineage=None)  # held, never handed out
      self._acct, self._link = link.attach(ledger, dataset, data, acct)
    self._held = session_rows.hold(data)  # in blocks of rows (jaxdp.session_rows)
    self._row = jax.ShapeDtypeStruct(data.shape[1:], data.dtype)
    self._lock = threading.RLock()

  def __copy__(self):
    raise TypeError(_NO_COPY)

  def __deepcopy__(self, memo):
    raise TypeError(_NO_COPY)

  def __reduce_ex__(self, protocol):
    raise TypeError(_NO_COPY)

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

  def release(
    self,
    mech: Mechanism,
    rows: Callable | None = None,
    *,
    by: Callable | None = None,
    num_parts: int | None = None,
  ) -> jax.Array:
    """Releases ``mech`` on the sum of per-row contributions.

    Args:
      mech: a mechanism: :class:`~jaxdp.LaplaceMechanism`,
        :class:`~jaxdp.GaussianMechanism`, :class:`~jaxdp.KNormMechanism` (l_p or query
        ball) on clipped contribution sums, :class:`~jaxdp.DiscreteGaussianMechanism` on
        integer contributions, or :class:`~jaxdp.PosetCountMechanism` on 0/1 rows.
        An exact :class:`~jaxdp.LaplaceMechanism` with a ``grid`` snaps each row's
        clipped contribution to the grid and sums the grid units exactly (the noise
        is scaled for the snapping).
      rows: a function of one row giving its contribution (a scalar or a vector);
        ``None`` uses the rows themselves.
      by: a function of one row giving its part index (an integer scalar in
        ``[0, num_parts)``; others are dropped): one release per part, at the cost
        of one (parallel composition). ``None``: one part.
      num_parts: the number of parts, with ``by``.

    Returns:
      The noisy statistic as a numpy array (one per part, stacked, with ``by``).

    Raises:
      UnsafeQueryError: ``rows`` or ``by`` uses a construct outside the allowlist.
      ValueError, TypeError: a bad argument (decided from the arguments and the
        row's shape and dtype).
      BudgetExceededError: the release alone costs more than the whole budget.
      ReleaseRefusedError: the release would exceed the budget (nothing was spent).
        None of these errors depends on the data or on the number of rows.
    """
    return self._release(mech, rows, by, num_parts, ("rows", "by", "num_parts"))

  def _release(self, mech, rows, by, num_parts, names, scalar=False):
    """The release of :meth:`release`; ``names``: the caller's names for ``rows``,
    ``by`` and ``num_parts``, which its errors use."""
    with self._lock:  # one query at a time: threads would read one key and budget
      not_traced()
      if (by is None) != (num_parts is None):
        raise ValueError(f"{names[1]} and {names[2]} go together: pass both or neither.")
      mech = session_mechanisms.own_mechanism(mech)  # checked, and the session's own
      num_parts = (
        1 if num_parts is None else _checks.check_int(num_parts, names[2], minimum=1)
      )
      if num_parts > accounting.MAX_PARTS:
        raise ValueError(
          f"{names[2]} must be at most {accounting.MAX_PARTS:,}; got {num_parts:,}."
        )
      rows_q = checked_query(rows, names[0], self._row) if rows is not None else None
      by_q = checked_query(by, names[1], self._row) if by is not None else None
      if by_q is not None and (
        by_q.out.shape != () or not jnp.issubdtype(by_q.out.dtype, jnp.integer)
      ):
        raise ValueError(
          f"{names[1]} must return one integer per row; got {by_q.out.dtype} "
          f"values of shape {by_q.out.shape}."
        )
      out_aval = rows_q.out if rows_q is not None else self._row
      if scalar and out_aval.shape != ():
        raise ValueError(
          f"{names[0]} must return a scalar per row; got values of shape {out_aval.shape}."
        )
      mech, prepare, unit = contributions(mech, out_aval)
      args = (rows_q.consts if rows_q else (), by_q.consts if by_q else ())
      run = compiled(mech, rows_q, by_q, num_parts, prepare, self._row, args)
      session_rows.prechecked(run, self._held, self._row, args)  # before any charge
      guard.check_unused(self._acct.key)
      self._acct = self._link.reserve(self._acct, mech, out_aval.shape)  # before any noise
      try:
        session_rows.traced(run, self._acct)  # the release's own errors: nothing drawn
      except BudgetExceededError:
        self._acct = dataclasses.replace(self._acct, refusals=self._acct.refusals + 1)
        raise
      failed = False
      try:
        acct, out = session_rows.run_on(run, self._held, self._acct, args)
      except Exception:  # on the held data, whatever its type (a host check's own)
        failed = True
      if failed:  # raised outside the handler: the error is not chained
        self._acct = charged(self._acct, mech, out_aval.shape, self._link)
        session_rows.failed_on_the_data()
      guard.mark_used(self._acct.key)
      self._acct = self._link.settle(acct)
      if not bool(acct.last_answered):
        raise ReleaseRefusedError(
          f"refused: this release's eps would take the total past the budget "
          f"({self.spent:g} of {self.eps_budget:g} spent). Nothing was spent."
        )
      out = np.asarray(out)
      if unit is not None:  # grid units back to values (exact: a power of two)
        out = out.astype(np.float64) * unit
      return out if by is not None else out[0]

  def count(self, predicate: Callable, eps: float) -> int | float:
    """Noisy number of rows where ``predicate(row)`` holds (Laplace, sensitivity 1):
    a float, or an exact int in a secure session. Raises as :meth:`release`."""
    out = self._release(
      LaplaceMechanism(eps, exact=self.secure),
      lambda r: jnp.asarray(predicate(r)).astype(bool),
      None,
      None,
      ("predicate", "by", "num_parts"),
      scalar=True,
    )
    return int(out) if self.secure else float(out)

  def histogram(self, bin_of: Callable, num_bins: int, eps: float) -> jax.Array:
    """Noisy counts of rows per bin (``bin_of(row)`` in ``[0, num_bins)``), cost eps.
    Raises as :meth:`release`."""
    return self._release(
      LaplaceMechanism(eps, exact=self.secure),
      lambda r: jnp.ones((), bool),
      bin_of,
      num_bins,
      ("rows", "bin_of", "num_bins"),
    )

  def sum(
    self, value_of: Callable, eps: float, *, bound: float, grid: float | None = None
  ) -> float:
    """Noisy sum of ``value_of(row)``, each value clipped to ``[-bound, bound]``.

    In a secure session the sum is exact on a grid: ``grid=2.0**-k`` for real values
    (snapped to the grid, the noise scaled for it), or integer values and ``grid=None``.
    Its total is clipped to +-2**30 units (integers, or grid units) before the noise,
    silently (an error would depend on the data): keep rows * bound / grid under 2**30.
    Raises as :meth:`release`."""
    mech = LaplaceMechanism(
      eps, bound, exact=self.secure, grid=grid if self.secure else None
    )
    return float(
      self._release(
        mech, value_of, None, None, ("value_of", "by", "num_parts"), scalar=True
      )
    )

  def poset_counts(
    self,
    poset: Poset,
    eps: float,
    *,
    noise: str = "poset",
    columns: Callable | None = None,
    by: Callable | None = None,
    num_parts: int | None = None,
  ) -> jax.Array:
    """Noisy (n, c_1, ..., c_d) of poset-ordered 0/1 answers (the poset-ball mechanism).

    Answers other than 1 count as 0 and a row that is not a filter is replaced by the
    largest filter it contains (``on_invalid="clip"``): a session never raises on,
    or prints, a data row.

    Args:
      poset: as for :class:`~jaxdp.PosetCountMechanism`.
      eps: as for :class:`~jaxdp.PosetCountMechanism`.
      noise: as for :class:`~jaxdp.PosetCountMechanism`.
      columns: a function of one row giving its d answers; ``None``: the row itself.
      by: as for :meth:`release`.
      num_parts: as for :meth:`release`.

    Raises what :meth:`release` raises.
    """
    mech = PosetCountMechanism(
      poset, eps, noise=noise, on_invalid="clip", exact=self.secure
    )
    return self._release(mech, columns, by, num_parts, ("columns", "by", "num_parts"))


_NO_COPY = (
  "a Session cannot be copied or pickled: a copy would answer with the same "
  "noise as the original while each counts only its own spend. Keep one "
  "Session per dataset and budget."
)
