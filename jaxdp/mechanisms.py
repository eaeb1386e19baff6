"""Differentially private mechanisms as immutable, hashable values.

A mechanism holds its parameters (eps, sensitivity, ball, poset) as static
configuration and has two methods:

* ``cost(group_size=1)`` -> ``(eps, delta)``: its privacy cost for groups of that
  size (Dwork, Lemma 2.8: an eps-DP mechanism is k eps-DP for groups of k; an
  (eps, delta)-DP one is (k eps, k e^((k-1) eps) delta)-DP).
* ``randomize(key, data)``: one noisy answer. It does not charge anything; use
  :func:`jaxdp.release` with an :class:`~jaxdp.Accountant` to spend a budget.

``mech.with_eps(eps)`` returns the same mechanism with another eps, which may be a
traced value (one eps per replicate under ``vmap``); a traced eps that is not finite
and positive produces NaN output, never weaker noise.

References:
  C. Dwork, "Differential privacy", ICALP 2006; C. Dwork, A. Roth, "The Algorithmic
  Foundations of Differential Privacy" (2014), Sections 2-3.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.balls import LpBall, PosetBall
from jaxdp.posets import Poset

__all__ = ["LaplaceMechanism", "KNormMechanism", "GaussianMechanism",
           "PosetCountMechanism", "group_cost", "COUNT_NOISES"]

COUNT_NOISES = ("poset", "linf", "l2", "laplace")


def group_cost(eps, delta, group_size: int):
  """(eps, delta)-DP for individuals -> the guarantee for groups of ``group_size``.

  Pure DP: ``k eps``. Approximate DP: ``(k eps, k e^((k-1) eps) delta)``.

  References:
    Dwork (2006), Lemma 2.8; Dwork & Roth (2014), Theorem 2.2.
  """
  k = _checks.check_int(group_size, "group_size", minimum=1)
  if _checks.is_concrete(eps) and _checks.is_concrete(delta):
    d = 0.0 if delta == 0 else k * math.exp((k - 1) * eps) * delta
    return k * eps, d
  return k * eps, k * jnp.exp((k - 1) * eps) * delta


class _Mechanism:
  """Shared behaviour: eps validation, ``with_eps``, pure-DP ``cost``."""

  def _check_eps(self):
    _checks.check_positive(self.eps, "eps", allow_traced=True)
    if _checks.is_concrete(self.eps):
      object.__setattr__(self, "eps", float(self.eps))

  def with_eps(self, eps):
    """The same mechanism with privacy parameter ``eps`` (may be traced)."""
    return dataclasses.replace(self, eps=eps)

  def cost(self, group_size: int = 1):
    """``(eps, delta)`` for groups of ``group_size`` (floats when eps is static)."""
    return group_cost(self.eps, getattr(self, "delta", 0.0), group_size)

  @property
  def eps_is_static(self) -> bool:
    return _checks.is_concrete(self.eps)


@dataclasses.dataclass(frozen=True)
class LaplaceMechanism(_Mechanism):
  """Adds i.i.d. Laplace(sensitivity / eps) noise to every entry of the statistic.

  Attributes:
    eps: privacy parameter (> 0).
    sensitivity: l_1 sensitivity of the whole statistic (> 0).
  """

  eps: Any
  sensitivity: float = 1.0

  def __post_init__(self):
    self._check_eps()
    object.__setattr__(self, "sensitivity",
                       _checks.check_positive(self.sensitivity, "sensitivity"))

  def randomize(self, key, data):
    data = _as_float_array(data, "data")
    noise = dprandom.laplace(key, 1.0, data.shape, data.dtype)
    return data + _checks.guard_positive(self.eps, noise * (self.sensitivity / self.eps))


@dataclasses.dataclass(frozen=True)
class KNormMechanism(_Mechanism):
  """K-norm mechanism: adds noise of density proportional to exp(-eps ||y||_K / s).

  Attributes:
    ball: a :class:`~jaxdp.PosetBall` or :class:`~jaxdp.LpBall` (the unit ball K).
    eps: privacy parameter.
    sensitivity: sensitivity s of the statistic in the K-norm.

  References:
    Hardt & Talwar (2010); Joseph, Ribero & Yu (2025), Lemma 2.2.
  """

  ball: Any
  eps: Any
  sensitivity: float = 1.0

  def __post_init__(self):
    if not isinstance(self.ball, (PosetBall, LpBall)):
      raise ValueError(
          f"ball must be a jaxdp.PosetBall or jaxdp.LpBall; got {self.ball!r}.")
    self._check_eps()
    object.__setattr__(self, "sensitivity",
                       _checks.check_positive(self.sensitivity, "sensitivity"))

  def randomize(self, key, data):
    data = _as_float_array(data, "data")
    if data.shape[-1:] != (self.ball.dim,):
      raise ValueError(
          f"data must have last dimension {self.ball.dim} (the ball's); got shape "
          f"{data.shape}.")
    noise = dprandom.knorm(key, self.ball, self.eps, data.shape[:-1], data.dtype)
    return data + self.sensitivity * noise


@dataclasses.dataclass(frozen=True)
class GaussianMechanism(_Mechanism):
  """The classical Gaussian mechanism, (eps, delta)-DP for eps < 1.

  sigma = sensitivity * sqrt(2 ln(1.25 / delta)) / eps (Dwork & Roth, Theorem A.1),
  which requires 0 < eps < 1 and 0 < delta < 1.

  Attributes:
    eps, delta: privacy parameters.
    sensitivity: l_2 sensitivity of the statistic.
  """

  eps: Any
  delta: float
  sensitivity: float = 1.0

  def __post_init__(self):
    self._check_eps()
    if self.eps_is_static and not self.eps < 1:
      raise ValueError(
          f"eps must be < 1 for the classical Gaussian mechanism; got {self.eps}. "
          "Use a smaller eps or a pure-DP mechanism.")
    delta = _checks.check_positive(self.delta, "delta")
    if delta >= 1:
      raise ValueError(f"delta must be in (0, 1); got {delta}.")
    object.__setattr__(self, "delta", delta)
    object.__setattr__(self, "sensitivity",
                       _checks.check_positive(self.sensitivity, "sensitivity"))

  @property
  def sigma(self):
    return self.sensitivity * math.sqrt(2 * math.log(1.25 / self.delta)) / self.eps

  def randomize(self, key, data):
    data = _as_float_array(data, "data")
    _checks.check_key(key)
    noise = jax.random.normal(key, data.shape, data.dtype)
    ok = jnp.isfinite(self.eps) & (self.eps > 0) & (self.eps < 1)
    return data + jnp.where(ok, noise * self.sigma, jnp.nan)


@dataclasses.dataclass(frozen=True)
class PosetCountMechanism(_Mechanism):
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

  def __post_init__(self):
    if not isinstance(self.poset, Poset):
      raise ValueError(f"poset must be a jaxdp.Poset; got {self.poset!r}.")
    self._check_eps()
    if self.noise not in COUNT_NOISES:
      raise ValueError(f"noise must be one of {COUNT_NOISES}; got {self.noise!r}.")
    if self.on_invalid not in ("raise", "clip"):
      raise ValueError(f"on_invalid must be 'raise' or 'clip'; got {self.on_invalid!r}.")

  @property
  def dim(self) -> int:
    return self.poset.d + 1

  @property
  def inner(self):
    """The mechanism that noises the (d + 1,) count vector."""
    d1 = self.dim
    if self.noise == "poset":
      return KNormMechanism(PosetBall(self.poset), self.eps)
    if self.noise == "linf":
      return KNormMechanism(LpBall(d1, math.inf), self.eps)
    if self.noise == "l2":
      return KNormMechanism(LpBall(d1, 2.0), self.eps, math.sqrt(d1))
    return LaplaceMechanism(self.eps, float(d1))

  def statistic(self, data):
    """(n, c_1..c_d) after validating (or clipping) the rows; float32."""
    data = self._validated(data)
    counts = jnp.sum(data, axis=0, dtype=jnp.float32)
    n = jnp.asarray(data.shape[0], jnp.float32)
    return jnp.concatenate([n[None], counts])

  def randomize(self, key, data):
    stat = self.statistic(data)
    return self.inner.randomize(key, stat)

  def _validated(self, data):
    d = self.poset.d
    if not hasattr(data, "shape"):
      data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != d:
      raise ValueError(
          f"data must have shape (n, {d}) (one 0/1 row per respondent); got "
          f"{tuple(data.shape)}.")
    if not (jnp.issubdtype(data.dtype, jnp.integer) or jnp.issubdtype(data.dtype, bool)
            or jnp.issubdtype(data.dtype, jnp.floating)):
      raise ValueError(f"data must be numeric or bool 0/1; got dtype {data.dtype}.")
    order = jnp.asarray(self.poset.order, jnp.float32)
    x = jnp.asarray(data)
    binary = jnp.all((x == 0) | (x == 1), axis=1)
    xf = x.astype(jnp.float32)
    # violations[r, i] = number of j above i (p_i <= p_j) with x_j = 0, where x_i = 1
    missing = (1.0 - xf) @ order.T
    is_filter = jnp.all((xf == 0) | (missing == 0), axis=1)
    if _checks.is_concrete(x):
      nb = np.nonzero(~np.asarray(binary))[0]
      if nb.size:
        r = int(nb[0])
        raise ValueError(
            f"data must hold 0/1 values; row {r} is {np.asarray(x[r]).tolist()}.")
      if self.on_invalid == "raise":
        bad = np.nonzero(~np.asarray(is_filter))[0]
        if bad.size:
          r = int(bad[0])
          raise ValueError(
              f"data row {r} = {np.asarray(x[r]).astype(int).tolist()} is not a "
              f"filter of the poset ({bad.size} such rows): a 1 at some element "
              "needs 1s at every element above it. Fix the data, or pass "
              "on_invalid='clip' to replace each row by the largest filter it "
              "contains.")
    else:
      ok = jnp.all(binary) & (jnp.all(is_filter) | (self.on_invalid == "clip"))
      xf = _runtime_check(ok, xf, binary, is_filter, self.on_invalid)
    if self.on_invalid == "clip":
      xf = jnp.where((missing == 0)[:, :], xf, 0.0)
    return xf


def _runtime_check(ok, xf, binary, is_filter, on_invalid):
  """Under jit: fail at run time if rows are bad; NaN data as a second guard."""

  def check(ok_, binary_, is_filter_):
    if not bool(ok_):
      nb = np.nonzero(~np.asarray(binary_))[0]
      if nb.size:
        raise ValueError(f"data must hold 0/1 values; row {int(nb[0])} does not.")
      bad = np.nonzero(~np.asarray(is_filter_))[0]
      raise ValueError(
          f"data row {int(bad[0])} is not a filter of the poset ({bad.size} such rows); "
          "fix the data or use on_invalid='clip'.")
    return np.asarray(True)

  passed = jax.pure_callback(check, jax.ShapeDtypeStruct((), jnp.bool_), ok, binary,
                             is_filter, vmap_method="sequential")
  return jnp.where(passed & ok, xf, jnp.nan)


def _as_float_array(data, name):
  x = jnp.asarray(data)
  if not jnp.issubdtype(x.dtype, jnp.floating):
    if jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_:
      return x.astype(jnp.result_type(float))
    raise ValueError(f"{name} must be numeric; got dtype {x.dtype}.")
  return x
