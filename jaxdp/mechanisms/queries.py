"""Private sum, count and vote queries: K-norm noise with the query's own ball, and
baselines with their correct sensitivities.

Each person contributes one row and is added or removed (add/remove neighbours):

* sum: a vector in [-1, 1]^d with at most k non-zero entries;
* count: a 0/1 vector (boxes ticked) with at most k ones;
* vote: a ranking of d candidates as Borda scores, a permutation of 0, ..., d - 1.

The statistic is the column sums. One row moves it by that row, so the convex hull
of the rows (and their negatives) is the sensitivity ball: the sum, count and vote
balls, with sensitivity 1 in their own norms, the optimal K-norm noise.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024, Sections 7-9.
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, _data_checks
from jaxdp.exact.refine import raise_if
from jaxdp.mechanisms.base import EpsMechanism, check_exact_options, pytree
from jaxdp.mechanisms.knorm import KNormMechanism
from jaxdp.mechanisms.laplace import LaplaceMechanism
from jaxdp.mechanisms.poset_count import sqrt_up
from jaxdp.mechanisms.statistics import as_int_counts, part_index, part_sums
from jaxdp.samplers.balls import LpBall
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.norm_ball import check_query_size
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall
from jaxdp.typing import ArrayLike, KeyArray, Shape

__all__ = [
  "EXACT_QUERY_NOISES",
  "QUERY_NOISES",
  "CountQueryMechanism",
  "QueryMechanism",
  "SumQueryMechanism",
  "VoteQueryMechanism",
]

QUERY_NOISES = ("ball", "linf", "l2", "laplace")
EXACT_QUERY_NOISES = ("linf", "l2", "laplace")  # every query's exact baselines


class QueryMechanism(EpsMechanism):
  """What the sum, count and vote mechanisms share: the noise options, the row
  checks (on the host, or at run time under jit) and the statistic.

  Subclasses define ``ball``, :meth:`sensitivities`, :meth:`row_ok` (a row rule in
  numpy or jax.numpy), :meth:`explain` and ``row_rule``.
  """

  row_rule = ""
  integer_rows = False  # the rows' entries are integers (column sums exact)
  exact_noises = EXACT_QUERY_NOISES  # the noises with an exact sampler

  def __post_init__(self):
    self._check_eps()
    self._check_options()

  def _check_options(self):
    self._check_size()
    if self.noise not in QUERY_NOISES:
      raise ValueError(f"noise must be one of {QUERY_NOISES}; got {self.noise!r}.")
    check_exact_options(self.exact, None)
    if self.exact and self.noise not in self.exact_noises:
      raise ValueError(
        f"exact=True supports noise in {self.exact_noises}: the {self.ball.name} has "
        "no exact sampler (exact samplers exist for the poset, l_1, l_2, l_inf, sum, "
        f"count and vote balls); got noise={self.noise!r}. Use exact=False, or a baseline "
        "noise."
      )

  @property
  def dim(self) -> int:
    return self.d

  def sensitivities(self) -> dict[str, int]:
    """``{"linf": s, "l2sq": s^2, "l1": s}``: the largest norm of a row, exact."""
    raise NotImplementedError

  def row_ok(self, xp: Any, x: Any) -> Any:
    """Whether each row of ``x`` follows the rule, computed with ``xp`` (numpy on the
    host, jax.numpy under jit); NaN breaks every rule."""
    raise NotImplementedError

  def explain(self, row: np.ndarray) -> str:
    """What is wrong with a bad ``row``, naming a column, never a value."""
    raise NotImplementedError

  @property
  def inner(self) -> LaplaceMechanism | KNormMechanism:
    """The mechanism that noises the ``(d,)`` column sums."""
    d, s = self.d, self.sensitivities()
    if self.noise == "ball":
      return KNormMechanism(self.ball, self.eps, exact=self.exact)
    if self.noise == "linf":
      return KNormMechanism(LpBall(d, math.inf), self.eps, float(s["linf"]), self.exact)
    if self.noise == "l2":
      # exact: the smallest float64 >= the root, never a sensitivity rounded down
      sens = sqrt_up(s["l2sq"]) if self.exact else math.sqrt(s["l2sq"])
      return KNormMechanism(LpBall(d, 2.0), self.eps, sens, exact=self.exact)
    return LaplaceMechanism(self.eps, float(s["l1"]), exact=self.exact)

  def valid(self, shape: Shape = ()) -> jax.Array:
    """:meth:`KNormMechanism.valid` of :attr:`inner` after this mechanism's options."""
    self._check_options()
    return self.inner.valid((self.d,))

  def statistic(self, data: ArrayLike) -> jax.Array:
    """The column sums of the checked rows, ``(d,)``.

    Integer rows (count, vote, and sum rows of an exact release) are summed in the
    default float dtype, with at most as many rows as keep every partial sum within
    its exact integer range (an error otherwise, never a rounded sum); real sum rows
    are summed in float64 and rounded once. Exact releases get int32 sums clipped to
    +-2^30 (which keeps the sum- and count-ball and l_p norms); for vote-ball noise,
    whose norm clipping does not keep, wider ones (int64 with x64), which the release
    refuses past 2^30 on the host and saturates after the noise under jit.
    """
    rows, ok = self._checked(data)
    return self._sums(rows, ok, lambda x: jnp.sum(x, axis=0))

  def part_statistics(self, data: ArrayLike, part: ArrayLike, num_parts: int) -> jax.Array:
    """The column sums of the rows of each part, ``(num_parts, d)``."""
    rows, ok = self._checked(data)
    part = part_index(part, rows.shape[0], num_parts)
    return self._sums(rows, ok, lambda x: part_sums(x, part, num_parts))

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    self._check_options()
    return self.inner.randomize(key, self.statistic(data))

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> jax.Array:
    """The noise mechanism's curve (Laplace's own for ``noise="laplace"``)."""
    return self.inner.rdp_cost(orders, group_size)

  def event(self, group_size: int = 1) -> tuple:
    return self.inner.event(group_size)

  def _sums(self, rows, ok, total):
    float_dtype = jnp.result_type(float)
    if self.integer_rows or self.exact:
      limit = _data_checks.exact_limit(float_dtype)
      top = self.sensitivities()["linf"]
      if rows.shape[0] * top > limit:
        raise ValueError(
          f"data has {rows.shape[0]:,} rows of entries up to {top}: their sums can "
          f"exceed {limit:,}, beyond the exact integers of {jnp.dtype(float_dtype)}. "
          "Enable x64 (jax.config.update('jax_enable_x64', True)) or split the data."
        )
      sums = total(rows.astype(float_dtype))
    else:
      with jax.enable_x64(True):
        sums = total(rows.astype(jnp.float64)).astype(float_dtype)
    sums = jnp.where(ok, sums, jnp.nan)  # NaN: a failed run-time check
    if not self.exact:
      return sums
    # the vote ball's norm is not kept by clipping the totals (clipping (2, 1, 0) to
    # (2, 0, 0) takes it to 4/3): wide totals, which the release refuses on the host
    # past 2^30 or saturates after the noise, as for the poset ball
    return as_int_counts(
      sums, wide=isinstance(self.ball, VoteBall) and self.noise == "ball"
    )

  def _checked(self, data):
    """The rows as a JAX array, and whether a run-time check passed (True on the
    host, where a bad row is an error now)."""
    d = self.d
    if not hasattr(data, "shape"):
      data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != d:
      raise ValueError(
        f"data must have shape (n, {d}) (one row per person: {self.row_rule}); got "
        f"{tuple(data.shape)}."
      )
    if _checks.is_concrete(data):
      # one read of the data, checked and then summed: an array-like that reads its
      # source again (a lazy array, a memory map being written) cannot pass one
      # value and sum another (JAX arrays are immutable, numpy arrays are the
      # caller's own)
      if not isinstance(data, (jax.Array, np.ndarray)) or isinstance(data, np.memmap):
        data = np.array(data)
      self._check_rows_on_host(np.asarray(data))
      return _data_checks.check_data(data), True
    x = _data_checks.check_data(data)
    good = self.row_ok(jnp, x)
    if good.shape[-1] == 0:
      return x, True
    info = (jnp.argmin(good, axis=-1), jnp.sum(~good, axis=-1))
    return x, raise_if(~jnp.all(good), self._run_time_error, *info)

  def _check_rows_on_host(self, rows: np.ndarray):
    """The row rule in numpy on the data's own values (also when it is closed over
    under ``jit``), before any conversion.

    Raises:
      ValueError: naming the first bad row, what is wrong with it and how many rows
        are bad.
    """
    if rows.dtype == object or not (
      rows.dtype == np.bool_ or np.issubdtype(rows.dtype, np.number)
    ):
      _data_checks.check_data(rows)  # the dtype's own error
    with np.errstate(invalid="ignore"):
      good = self.row_ok(np, rows)
    bad = np.nonzero(~good)[0]
    if bad.size:
      r = int(bad[0])
      raise ValueError(
        f"data row {r} is not a {self.kind} row ({bad.size} such rows): "
        f"{self.explain(rows[r])}; each row must be {self.row_rule}. Fix the data."
      )

  def _run_time_error(self, bad, first_bad, num_bad) -> ValueError:
    first = np.unravel_index(int(np.argmax(bad.ravel())), bad.shape)
    where = f" (batch element {tuple(int(i) for i in first)})" if bad.ndim else ""
    return ValueError(
      f"data row {int(first_bad[first])} is not a {self.kind} row "
      f"({int(num_bad[first])} such rows){where}; each row must be {self.row_rule}."
    )


def _check_k(mech):
  d, k = check_query_size(mech.d, mech.k)
  object.__setattr__(mech, "d", d)
  object.__setattr__(mech, "k", k)


@pytree("eps")
@dataclasses.dataclass(frozen=True)
class SumQueryMechanism(QueryMechanism):
  """Private column sums of rows in [-1, 1]^d with at most k non-zero entries.

  Attributes:
    d: the number of columns.
    k: the most non-zero entries of a row (1 <= k <= d).
    eps: privacy parameter.
    noise: ``"ball"`` (K-norm with the sum ball, the default and most accurate), or
      a baseline with its correct sensitivity: ``"linf"`` (l_inf ball, 1), ``"l2"``
      (l_2 ball, sqrt(k)), ``"laplace"`` (Laplace, l_1 sensitivity k).
    exact: integer rows (entries -1, 0, 1) and exactly rounded noise (int32); every
      noise (the sum ball's for d <= 1024, :func:`jaxdp.exact.sum_knorm`).

  References:
    Joseph & Yu (2024), Section 7.
  """

  d: int
  k: int
  eps: Any
  noise: str = "ball"
  exact: bool = False

  kind = "sum"
  exact_noises = ("ball", *EXACT_QUERY_NOISES)

  def _check_size(self):
    _check_k(self)

  @property
  def row_rule(self) -> str:
    entries = "-1, 0 or 1" if self.exact else "in [-1, 1]"
    return f"{self.d} entries {entries}, at most k = {self.k} of them non-zero"

  @property
  def ball(self) -> SumBall:
    return SumBall(self.d, self.k)

  def sensitivities(self) -> dict[str, int]:
    return {"linf": 1, "l2sq": self.k, "l1": self.k}

  def row_ok(self, xp: Any, x: Any) -> Any:
    ok = xp.all(xp.abs(x) <= 1, axis=-1) & (xp.sum(x != 0, axis=-1) <= self.k)
    if self.exact:
      ok = ok & xp.all(x == xp.round(x), axis=-1)
    return ok

  def explain(self, row: np.ndarray) -> str:
    off = np.nonzero(~(np.abs(row) <= 1))[0]
    if off.size:
      return f"column {int(off[0])} is not a number in [-1, 1]"
    if self.exact and np.any(row != np.round(row)):
      c = int(np.nonzero(row != np.round(row))[0][0])
      return f"column {c} is not an integer (an exact release sums -1, 0 or 1)"
    return f"it has {int(np.sum(row != 0))} non-zero entries, more than k = {self.k}"


@pytree("eps")
@dataclasses.dataclass(frozen=True)
class CountQueryMechanism(QueryMechanism):
  """Private counts of 0/1 rows (boxes ticked) with at most k ones.

  Attributes:
    d: the number of boxes.
    k: the most boxes one person ticks (1 <= k <= d).
    eps: privacy parameter.
    noise: ``"ball"`` (K-norm with the count ball, the default and most accurate),
      or a baseline with its correct sensitivity: ``"linf"`` (l_inf ball, 1),
      ``"l2"`` (l_2 ball, sqrt(k)), ``"laplace"`` (Laplace, l_1 sensitivity k).
    exact: integer counts and exactly rounded noise (int32); every noise (the count
      ball's for d <= 1024, :func:`jaxdp.exact.count_knorm`).

  References:
    Joseph & Yu (2024), Section 8.
  """

  d: int
  k: int
  eps: Any
  noise: str = "ball"
  exact: bool = False

  kind = "count"
  integer_rows = True
  exact_noises = ("ball", *EXACT_QUERY_NOISES)

  def _check_size(self):
    _check_k(self)

  @property
  def row_rule(self) -> str:
    return f"{self.d} entries 0 or 1, at most k = {self.k} of them 1"

  @property
  def ball(self) -> CountBall:
    return CountBall(self.d, self.k)

  def sensitivities(self) -> dict[str, int]:
    return {"linf": 1, "l2sq": self.k, "l1": self.k}

  def row_ok(self, xp: Any, x: Any) -> Any:
    binary = xp.all((x == 0) | (x == 1), axis=-1)
    return binary & (xp.sum(x == 1, axis=-1) <= self.k)

  def explain(self, row: np.ndarray) -> str:
    off = np.nonzero(~((row == 0) | (row == 1)))[0]
    if off.size:
      return f"column {int(off[0])} is not 0 or 1"
    return f"it has {int(np.sum(row == 1))} ones, more than k = {self.k}"


@pytree("eps")
@dataclasses.dataclass(frozen=True)
class VoteQueryMechanism(QueryMechanism):
  """Private Borda totals: each row ranks d candidates, a permutation of 0..d-1.

  Attributes:
    d: the number of candidates (at least 2).
    eps: privacy parameter.
    noise: ``"ball"`` (K-norm with the vote ball, the default and most accurate),
      or a baseline with its correct sensitivity: ``"linf"`` (l_inf ball, d - 1),
      ``"l2"`` (l_2 ball, sqrt((d - 1) d (2d - 1) / 6)), ``"laplace"`` (Laplace,
      l_1 sensitivity d (d - 1) / 2).
    exact: integer totals and exactly rounded noise (int32); every noise (the vote
      ball's for d <= 1024, :func:`jaxdp.exact.vote_knorm`, its sum saturated at
      +-(2^31 - 1), as for the poset ball).

  References:
    Joseph & Yu (2024), Section 9.
  """

  d: int
  eps: Any
  noise: str = "ball"
  exact: bool = False

  kind = "vote"
  integer_rows = True
  exact_noises = ("ball", *EXACT_QUERY_NOISES)

  def _check_size(self):
    object.__setattr__(self, "d", VoteBall(self.d).d)  # the ball's checks: 2 <= d

  @property
  def row_rule(self) -> str:
    return f"a permutation of 0, 1, ..., {self.d - 1} (Borda scores)"

  @property
  def ball(self) -> VoteBall:
    return VoteBall(self.d)

  def sensitivities(self) -> dict[str, int]:
    d = self.d
    return {"linf": d - 1, "l2sq": (d - 1) * d * (2 * d - 1) // 6, "l1": d * (d - 1) // 2}

  def row_ok(self, xp: Any, x: Any) -> Any:
    return xp.all(xp.sort(x, axis=-1) == xp.arange(self.d), axis=-1)

  def explain(self, row: np.ndarray) -> str:
    values = np.sort(row)
    c = int(np.argmax(values != np.arange(self.d)))
    return (
      f"sorted, its entry {c} should be {c} (a permutation of 0..{self.d - 1} holds "
      "each score once)"
    )
