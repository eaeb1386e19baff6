"""Private counts of partially ordered 0/1 data (the poset-ball mechanism and its
baselines).

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import dataclasses
import math
from fractions import Fraction
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, _data_checks
from jaxdp.exact.refine import raise_if
from jaxdp.exact.samplers import poset_path
from jaxdp.mechanisms.base import EpsMechanism, check_exact_options, pytree
from jaxdp.mechanisms.knorm import KNormMechanism
from jaxdp.mechanisms.laplace import LaplaceMechanism
from jaxdp.mechanisms.statistics import as_int_counts, exact_counts, part_index, part_sums
from jaxdp.posets import Poset
from jaxdp.samplers.balls import LpBall, PosetBall
from jaxdp.typing import ArrayLike, KeyArray, Shape

COUNT_NOISES = ("poset", "linf", "l2", "laplace")
EXACT_COUNT_NOISES = ("poset", "linf", "l2", "laplace")


def sqrt_up(n: int) -> float:
  """The smallest float64 >= sqrt(n), for an integer n >= 0 (checked exactly)."""
  s = math.sqrt(n)
  return s if Fraction(s) ** 2 >= n else math.nextafter(s, math.inf)


@pytree("eps")
@dataclasses.dataclass(frozen=True)
class PosetCountMechanism(EpsMechanism):
  """Private counts of partially ordered 0/1 data: (n, c_1, ..., c_d) plus noise.

  ``data`` is an ``(n, d)`` array of 0/1 rows, each a filter of ``poset``. The
  statistic is T = (n, column sums), root first; adding or removing one row moves it
  by +-(1, x), so its sensitivity ball is the poset ball.

  Attributes:
    poset: the :class:`~jaxdp.Poset`.
    eps: privacy parameter.
    noise: ``"poset"`` (K-norm with the poset ball, the default and most accurate),
      or a baseline with its correct sensitivity: ``"linf"`` (K-norm with the
      l_inf ball, sensitivity 1), ``"l2"`` (K-norm with the l_2 ball, sensitivity
      sqrt(d + 1)), ``"laplace"`` (Laplace, l_1 sensitivity d + 1).
    on_invalid: what to do with rows that are not filters. ``"raise"`` (default):
      outside jit a ValueError names the first bad row; under jit the computation
      fails at run time with that message (and the output is NaN should the error
      be swallowed). ``"clip"``: replace each row by the largest filter it
      contains (row-wise, so the sensitivity still holds). Values other than 0/1
      are always an error.

  References:
    Joseph, Ribero & Yu (2025), Sections 2.2 and 3.
  """

  poset: Poset
  eps: Any
  noise: str = "poset"
  on_invalid: str = "raise"
  exact: bool = False

  def __post_init__(self):
    self._check_eps()
    self._check_options()

  def _check_options(self):
    if not isinstance(self.poset, Poset):
      raise _checks.ArgTypeError(f"poset must be a jaxdp.Poset; got {self.poset!r}.")
    self._check_noise()
    if self.on_invalid not in ("raise", "clip"):
      raise ValueError(f"on_invalid must be 'raise' or 'clip'; got {self.on_invalid!r}.")

  def _check_noise(self):
    """The checks of ``noise`` and ``exact``."""
    if self.noise not in COUNT_NOISES:
      raise ValueError(f"noise must be one of {COUNT_NOISES}; got {self.noise!r}.")
    check_exact_options(self.exact, None)
    if self.exact and self.noise not in EXACT_COUNT_NOISES:
      raise ValueError(
        f"exact=True supports noise in {EXACT_COUNT_NOISES}; got {self.noise!r}."
      )
    if self.exact and self.noise == "poset":
      poset_path(self.poset)  # the exact sampler's limits, checked now

  def valid(self, shape: Shape = ()) -> jax.Array:
    """:meth:`KNormMechanism.valid` of the noise mechanism (:attr:`inner`), after
    this mechanism's own options; ``shape`` (the rows') is not needed."""
    self._check_options()
    return self.inner.valid((self.dim,))

  @property
  def dim(self) -> int:
    return self.poset.d + 1

  @property
  def inner(self) -> LaplaceMechanism | KNormMechanism:
    """The mechanism that noises the (d + 1,) count vector."""
    dim = self.dim
    if self.noise == "poset":
      return KNormMechanism(PosetBall(self.poset), self.eps, exact=self.exact)
    if self.noise == "linf":
      return KNormMechanism(LpBall(dim, math.inf), self.eps, exact=self.exact)
    if self.noise == "l2":
      # exact: the smallest float64 >= sqrt(dim), never a sensitivity rounded down
      sens = sqrt_up(dim) if self.exact else math.sqrt(dim)
      return KNormMechanism(LpBall(dim, 2.0), self.eps, sens, exact=self.exact)
    return LaplaceMechanism(self.eps, float(dim), exact=self.exact)

  def statistic(self, data: ArrayLike) -> jax.Array:
    """(n, c_1..c_d) after validating (or clipping) the rows, exactly.

    The counts are sums of 0/1 values in the default float dtype, and there may be
    at most as many rows as that dtype holds integers exactly (2**24 for float32,
    2**53 with x64): every partial sum is then an integer it represents, so every
    addition is exact in any order. More rows is an error, never a rounded count.

    Exact releases get integer counts: int32 clipped to +-2^30 for the l_p noises
    (1-Lipschitz in their norms); for poset-ball noise, whose norm clipping does not
    keep, wider ones (int64 with x64), which the release saturates at
    +-(2^31 - 1) after the noise (postprocessing).
    """
    rows, ok = self._validated(data)
    counts = exact_counts(jnp.sum(rows, axis=0), rows.shape[0], ok)
    return as_int_counts(counts, wide=self.noise == "poset") if self.exact else counts

  def part_statistics(self, data: ArrayLike, part: ArrayLike, num_parts: int) -> jax.Array:
    """Exact (n_j, c_1..c_d) of the rows of each part j, shape ``(num_parts, d + 1)``."""
    rows, ok = self._validated(data)
    part = part_index(part, rows.shape[0], num_parts)
    ext = jnp.concatenate([jnp.ones((rows.shape[0], 1), rows.dtype), rows], axis=1)
    counts = exact_counts(part_sums(ext, part, num_parts), rows.shape[0], ok, with_n=False)
    return as_int_counts(counts, wide=self.noise == "poset") if self.exact else counts

  def randomize(self, key: KeyArray, data: ArrayLike) -> jax.Array:
    self._check_options()
    stat = self.statistic(data)
    return self.inner.randomize(key, stat)

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> jax.Array:
    """The noise mechanism's curve (Laplace's own for ``noise="laplace"``)."""
    return self.inner.rdp_cost(orders, group_size)

  def event(self, group_size: int = 1) -> tuple:
    return self.inner.event(group_size)

  def _validated(self, data):
    d = self.poset.d
    if not hasattr(data, "shape"):
      data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != d:
      raise ValueError(
        f"data must have shape (n, {d}) (one 0/1 row per respondent); got "
        f"{tuple(data.shape)}."
      )
    x = _data_checks.check_data(data)
    order = jnp.asarray(self.poset.order, jnp.float32)
    binary = jnp.all((x == 0) | (x == 1), axis=1)
    xf = x.astype(jnp.float32)
    # violations[r, i] = number of j above i (p_i <= p_j) with x_j = 0, where x_i = 1
    missing = (1.0 - xf) @ order.T
    is_filter = jnp.all((xf == 0) | (missing == 0), axis=1)
    passed = jnp.asarray(True)
    if _checks.is_concrete(x):
      self._check_rows_on_host(np.asarray(x))
    elif not (x.dtype == jnp.bool_ and self.on_invalid == "clip"):  # else nothing to check
      ok = jnp.all(binary) & (jnp.all(is_filter) | (self.on_invalid == "clip"))
      passed = check_rows_at_run_time(ok, binary, is_filter)
    if self.on_invalid == "clip":
      xf = jnp.where(missing == 0, xf, 0.0)
    # 0/1 rows in the default float dtype, and whether the run-time check passed
    return (xf * binary[:, None]).astype(jnp.result_type(float)), passed

  def _check_rows_on_host(self, rows: np.ndarray):
    """The checks of a concrete dataset, in numpy: also when it is closed over under
    ``jit``, where the JAX values computed from it are traced.

    Raises:
      ValueError: a value other than 0/1, or (``on_invalid="raise"``) a row that is
        not a filter, naming the first such row.
    """
    binary = np.all((rows == 0) | (rows == 1), axis=1)
    non_binary = np.nonzero(~binary)[0]
    if non_binary.size:
      r = int(non_binary[0])
      c = int(np.nonzero(~((rows[r] == 0) | (rows[r] == 1)))[0][0])
      raise ValueError(f"data must hold 0/1 values; row {r} does not (column {c}).")
    if self.on_invalid != "raise":
      return
    order = np.asarray(self.poset.order, np.float32)
    missing = (1.0 - rows.astype(np.float32)) @ order.T  # exact: sums of 0/1 values
    bad = np.nonzero(~np.all((rows == 0) | (missing == 0), axis=1))[0]
    if bad.size:
      r = int(bad[0])
      raise ValueError(
        f"data row {r} is not a filter of the poset ({bad.size} such rows): "
        f"{self.poset.explain_violation(rows[r])}. Fix the data, or pass "
        "on_invalid='clip' to replace each row by the largest filter it contains."
      )


def check_rows_at_run_time(ok, binary, is_filter):
  """Under jit: fail at run time if rows are bad; False (NaN output) as a second guard.

  The rows' flags are reduced on the device to four numbers (whether a value is not
  0/1, the first such row, the first row that is not a filter and how many are not),
  and the host is called only when a dataset is bad (:func:`~jaxdp.exact.refine.raise_if`),
  under ``vmap`` too, naming the first bad row of the first bad dataset.
  """
  if binary.shape[-1] == 0:  # no rows: nothing to refuse (argmin needs one)
    return ok
  info = (
    ~jnp.all(binary, axis=-1),
    jnp.argmin(binary, axis=-1),
    jnp.argmin(is_filter, axis=-1),
    jnp.sum(~is_filter, axis=-1),
  )
  return raise_if(~ok, bad_rows_error, *info) & ok


def bad_rows_error(bad, non_binary, first_non_binary, first_bad, num_bad) -> ValueError:
  """The error for the first bad dataset (entry of ``bad``) of a batch: its first
  value other than 0/1, else its first row that is not a filter."""
  first = np.unravel_index(int(np.argmax(bad.ravel())), bad.shape)
  where = f" (batch element {tuple(int(i) for i in first)})" if bad.ndim else ""
  if non_binary[first]:
    return ValueError(
      f"data must hold 0/1 values; row {int(first_non_binary[first])} does not{where}."
    )
  return ValueError(
    f"data row {int(first_bad[first])} is not a filter of the poset "
    f"({int(num_bad[first])} such rows){where}; fix the data or use on_invalid='clip'."
  )
