"""Differentially private mechanisms as pytrees.

Every mechanism follows the :class:`Mechanism` protocol:

* ``cost(group_size=1)`` -> ``(eps, delta)``: its privacy cost for groups of that
  size (Dwork, Lemma 2.8: an eps-DP mechanism is k eps-DP for groups of k; an
  (eps, delta)-DP one is (k eps, k e^((k-1) eps) delta)-DP).
* ``randomize(key, data)``: one noisy answer. It does not charge anything; use
  :func:`jaxdp.release` with an :class:`~jaxdp.Accountant` to spend a budget.
* ``part_statistics(rows, part, num_parts)``: the per-part statistics that
  :func:`jaxdp.release_partitioned` noises.

A mechanism is a pytree: its numbers (eps, delta, sensitivity) are leaves and its
structure (the ball, the poset, the noise kind, the invalid-row policy) is static.
So a mechanism can be a ``jit`` argument, a ``vmap`` input (one eps per replicate) or
a ``lax.scan`` carry, and ``LaplaceMechanism(eps)`` accepts a traced eps. Arguments are
validated when you build a mechanism; JAX rebuilds one from its leaves without that,
and a traced value cannot be checked then, so every mechanism also has
``valid(shape)``: an allowlist of the parameter ranges its sampler supports (a
normal float32 eps, sensitivity and noise scale; an exact sampler's scale at most
:data:`jaxdp.exact.MAX_SCALE`). A static parameter out of range raises ValueError; a
traced one makes ``randomize`` return the invalid fill (NaN, or an integer output's
minimum, never the statistic plus a fill) and :func:`jaxdp.release` refuse the
release, spending nothing. Never weaker noise.

References:
  C. Dwork, "Differential privacy", ICALP 2006; C. Dwork, A. Roth, "The Algorithmic
  Foundations of Differential Privacy" (2014), Sections 2-3.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, renyi
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp._poset_tables import exact_tables
from jaxdp.composition import _bisect, group_cost, zcdp_budget
from jaxdp.balls import LpBall, PosetBall
from jaxdp.posets import Poset

__all__ = ["Mechanism", "LaplaceMechanism", "KNormMechanism", "GaussianMechanism",
           "ZCDPGaussianMechanism", "DiscreteGaussianMechanism", "PosetCountMechanism", "COUNT_NOISES"]

COUNT_NOISES = ("poset", "linf", "l2", "laplace")
EXACT_COUNT_NOISES = ("poset", "linf", "laplace")


@runtime_checkable
class Mechanism(Protocol):
  """What :func:`jaxdp.release`, :func:`jaxdp.release_partitioned` and
  :func:`jaxdp.plan` need of a mechanism."""

  def cost(self, group_size: int = 1) -> tuple[Any, Any]:
    """``(eps, delta)`` for groups of ``group_size``."""

  def zcdp_cost(self, group_size: int = 1) -> Any:
    """rho (zero-concentrated DP) for groups of ``group_size``."""

  def rdp_cost(self, orders, group_size: int = 1) -> Any:
    """Rényi DP at each of ``orders`` for groups of ``group_size``."""

  def event(self, group_size: int = 1) -> tuple:
    """What the mechanism is, for fixed-plan accounting and export: ``("laplace",
    eps)``, ``("pure", eps)`` (any eps-DP mechanism), ``("gaussian", sigma /
    sensitivity)`` or ``("zcdp", rho)``, for groups of ``group_size``."""

  def randomize(self, key: jax.Array, data: Any) -> jax.Array:
    """One noisy answer (charges nothing)."""


def _pytree(*leaves: str):
  """Registers a frozen dataclass as a pytree: ``leaves`` are children, the other
  fields static. Unflattening bypasses ``__init__``, so validation runs when a user
  builds a mechanism, never on JAX's placeholders."""

  def wrap(cls):
    static = tuple(f.name for f in dataclasses.fields(cls) if f.name not in leaves)

    def flatten(m):
      return ([getattr(m, n) for n in leaves], tuple(getattr(m, n) for n in static))

    def flatten_with_keys(m):
      return ([(jax.tree_util.GetAttrKey(n), getattr(m, n)) for n in leaves],
              tuple(getattr(m, n) for n in static))

    def unflatten(aux, children):
      m = object.__new__(cls)
      for n, v in zip(leaves + static, list(children) + list(aux)):
        object.__setattr__(m, n, v)
      return m

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls

  return wrap


_TINY = float(np.finfo(np.float32).tiny)   # the normal float32 range: noise, scales
_HUGE = float(np.finfo(np.float32).max)    # and budgets are computed in float32


_REBUILT = ("(A mechanism rebuilt from its leaves, e.g. by jax.tree_util, skips its "
            "constructor's checks.)")


class _Valid:
  """The allowlist of parameter ranges a mechanism's sampler supports."""

  def valid(self, shape=()):
    """Whether the parameters lie in the ranges the noise sampler supports.

    The constructor's checks again (JAX skips them when it rebuilds a mechanism from
    its leaves) and, for every parameter and the noise scale derived from them, a
    range (a normal float32 number; an exact sampler's scale at most
    :data:`jaxdp.exact.MAX_SCALE`), which a traced value is compared with. Where it
    is False, :meth:`randomize` returns the invalid fill and :func:`jaxdp.release`
    refuses the release: nothing is spent. It reads the parameters only, never data.

    Args:
      shape: the statistic's shape, as ``randomize`` gets it (a grid's snapping
        slack, one unit per entry, widens the exact noise).

    Returns:
      True when every parameter is static, else a traced bool.

    Raises:
      ValueError: a static option or parameter out of range.
    """
    self._check_options()
    ok = True
    for name, value, lo, hi, below in self._ranges(tuple(shape)):
      value = value() if callable(value) else value  # derived: after the others passed
      if jnp.ndim(value) != 0:  # a rebuilt mechanism may carry an array leaf
        raise ValueError(f"{name} must be a scalar; got shape {jnp.shape(value)}. "
                         f"{_REBUILT}")
      ok = ok & _checks.in_range(name, value, lo, hi, below=below, hint=_REBUILT)
    return ok

  def _check_options(self):
    """The static options' checks (the constructor runs them too)."""

  def _ranges(self, shape):
    """``(name, value, lo, hi, below)``: ``lo <= value <= hi`` (``< hi`` if below)."""
    return [("eps", self.eps, _TINY, _HUGE, False),
            ("sensitivity", self.sensitivity, _TINY, _HUGE, False)]


class _Mechanism(_Valid):
  """Shared behaviour: parameter validation and the pure-DP ``cost``."""

  def _check_eps(self):
    _checks.check_eps(self.eps, "eps")
    if _checks.is_concrete(self.eps):
      object.__setattr__(self, "eps", float(self.eps))

  def _check_sensitivity(self):
    object.__setattr__(self, "sensitivity", _checks.check_eps(self.sensitivity,
                                                              "sensitivity"))

  def cost(self, group_size: int = 1):
    """``(eps, delta)`` for groups of ``group_size`` (floats when eps is static)."""
    return group_cost(self.eps, getattr(self, "delta", 0.0), group_size)

  def zcdp_cost(self, group_size: int = 1):
    """rho for groups of ``group_size``: a k eps-DP mechanism is (k eps)^2 / 2-zCDP.

    References:
      Bun & Steinke (2016), Proposition 1.4.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return (k * self.eps) ** 2 / 2

  def rdp_cost(self, orders, group_size: int = 1):
    """RDP at each order for groups of ``group_size``: a k eps-DP mechanism has at
    most randomized response's curve at k eps.

    References:
      Bun & Steinke (2016), Proposition 3.3; :func:`jaxdp.renyi.pure_rdp`.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return renyi.pure_rdp(k * self.eps, orders)

  def event(self, group_size: int = 1):
    """``("pure", k eps)``: accounted as the worst k eps-DP mechanism (randomized
    response), whatever its noise."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return ("pure", k * self.eps)


@_pytree("eps", "sensitivity")
@dataclasses.dataclass(frozen=True)
class LaplaceMechanism(_Mechanism):
  """Adds i.i.d. Laplace(sensitivity / eps) noise to every entry of the statistic.

  With ``exact=True`` the release is safe to publish from floating-point hardware:
  the statistic is an integer array (or is snapped to the grid ``grid = 2**-k``) and
  the noise is the exact rounding of real Laplace noise to that grid
  (:func:`jaxdp.exact.laplace`), so the output is ``statistic + integer noise``,
  an int32 array (a float array of grid multiples when ``grid`` is given). Snapping
  moves each of the m entries by at most half a grid step, so the noise is scaled
  for sensitivity ``sensitivity + m * grid``. Refused exact releases hold int32's
  minimum (or NaN on a grid).

  Attributes:
    eps: privacy parameter (> 0).
    sensitivity: l_1 sensitivity of the whole statistic (> 0).
    exact: the publishable, float-safe form (static).
    grid: for ``exact=True`` on a real-valued statistic: a power of two 2**-k
      (static). ``None``: the statistic must have an integer dtype.
  """

  eps: Any
  sensitivity: float = 1.0
  exact: bool = False
  grid: float | None = None

  def __post_init__(self):
    self._check_eps()
    self._check_sensitivity()
    self._check_options()
    if self.grid is not None:  # a Python float: a mutable array could change later
      object.__setattr__(self, "grid", float(self.grid))

  def _check_options(self):
    _check_exact_options(self.exact, self.grid)

  def _ranges(self, shape):
    if self.exact:
      scale = ("the exact noise scale (sensitivity in grid units / eps)", exact.MAX_SCALE)
    else:
      scale = ("the noise scale sensitivity / eps", _HUGE)
    return super()._ranges(shape) + [
        (scale[0], lambda: self._noise_scale(shape), _TINY, scale[1], False)]

  def _noise_scale(self, shape):
    """The Laplace scale: sensitivity / eps, or for exact noise the scale in grid
    units (snapping to a grid adds one unit of slack per entry)."""
    if not self.exact:
      return self.sensitivity / self.eps
    slack = 0 if self.grid is None else math.prod(shape)
    return _exact_scale(self.sensitivity / (self.grid or 1.0) + slack, self.eps)

  norm = 1.0  # the sensitivity's norm (for clipping per-row contributions)

  def rdp_cost(self, orders, group_size: int = 1):
    """The Laplace mechanism's own RDP curve at k eps (a group of k moves the
    statistic by at most k sensitivity; exact releases round it: postprocessing).

    References:
      Mironov (2017), Proposition 6; :func:`jaxdp.renyi.laplace_rdp`.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return renyi.laplace_rdp(k * self.eps, orders)

  def event(self, group_size: int = 1):
    """``("laplace", k eps)``: the Laplace mechanism at scale sensitivity / eps."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return ("laplace", k * self.eps)

  def randomize(self, key, data):
    if self.exact:
      return self._randomize_exact(key, data)
    data = _statistic(data)
    ok = self.valid(data.shape)
    noise = dprandom.laplace(key, data.shape, data.dtype)
    ok, out = _noisy(ok, data, noise * self._noise_scale(data.shape))
    return _checks.mark_invalid(ok, out)

  def _randomize_exact(self, key, data):
    units, _ = _grid_units(data, self.grid)
    ok = self.valid(units.shape)
    noise = exact.laplace(key, units.shape, scale=self._noise_scale(units.shape))
    ok, out = _noisy(ok, units, noise)
    if self.grid is not None:
      out = out.astype(jnp.result_type(float)) * self.grid
    return _checks.mark_invalid(ok, out)

  def part_statistics(self, rows, part, num_parts):
    """Per-part sums of rows clipped to l_1 norm ``sensitivity``.

    Exact releases without a grid need integer (or bool) rows and keep integer sums:
    a row whose l_1 norm exceeds ``sensitivity`` counts as 0 (scaling it would leave
    the integers)."""
    if self.exact and self.grid is None:
      return _integer_part_sums(rows, part, num_parts, self.sensitivity)
    return _clipped_part_sums(rows, part, num_parts, self.norm, self.sensitivity)


@_pytree("eps", "sensitivity")
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
  exact: bool = False

  def __post_init__(self):
    self._check_options()
    self._check_eps()
    self._check_sensitivity()

  def _check_options(self):
    if not isinstance(self.ball, (PosetBall, LpBall)):
      raise _checks.ArgTypeError(
          f"ball must be a jaxdp.PosetBall or jaxdp.LpBall; got {self.ball!r}.")
    _check_exact_options(self.exact, None)
    if self.exact and not (isinstance(self.ball, PosetBall) or self.ball.p in (1, math.inf)):
      raise ValueError(
          f"exact=True is available for the poset ball, the l_1 ball (i.i.d. Laplace) "
          f"and the l_inf ball; got {self.ball!r}, whose noise the exact sampler "
          "cannot bound in intervals yet (the l_2 ball needs normal variates).")

  def _ranges(self, shape):
    if self.exact:
      scale = ("the exact noise scale sensitivity / eps",
               lambda: _exact_scale(self.sensitivity, self.eps), exact.MAX_SCALE)
    else:
      scale = ("the noise scale sensitivity / eps",
               lambda: self.sensitivity / self.eps, _HUGE)
    return super()._ranges(shape) + [(scale[0], scale[1], _TINY, scale[2], False)]

  @property
  def norm(self):
    if isinstance(self.ball, PosetBall):
      raise ValueError(
          "per-row contributions cannot be clipped into a poset ball here; release "
          "poset counts by part with PosetCountMechanism.")
    return self.ball.p

  def part_statistics(self, rows, part, num_parts):
    """Per-part sums of rows clipped to K-norm ``sensitivity`` (l_p balls only)."""
    return _clipped_part_sums(rows, part, num_parts, self.norm, self.sensitivity)

  def randomize(self, key, data):
    if self.exact:
      units, _ = _grid_units(data, None)
      self._check_dim(units)
      ok = self.valid(units.shape)
      scale = _exact_scale(self.sensitivity, self.eps)
      if isinstance(self.ball, PosetBall):
        noise = exact.poset_knorm(key, self.ball.poset, scale, units.shape[:-1])
      elif self.ball.p == math.inf:
        noise = exact.linf_knorm(key, self.ball.d, scale, units.shape[:-1])
      else:
        noise = exact.laplace(key, units.shape, scale=scale)
      return _checks.mark_invalid(*_noisy(ok, units, noise))
    data = _statistic(data)
    self._check_dim(data)
    ok = self.valid(data.shape)
    noise = dprandom.knorm(key, self.ball, self.eps, data.shape[:-1], data.dtype)
    return _checks.mark_invalid(*_noisy(ok, data, self.sensitivity * noise))

  def _check_dim(self, data):
    if data.shape[-1:] != (self.ball.dim,):
      raise ValueError(
          f"data must have last dimension {self.ball.dim} (the ball's); got shape "
          f"{data.shape}.")


class _GaussianNoise(_Valid):
  """What Gaussian noise of standard deviation ``self.sigma`` costs, whatever set
  sigma: zCDP, Rényi curve, event, and l_2-clipped part sums."""

  norm = 2.0

  def zcdp_cost(self, group_size: int = 1):
    """rho = (k sensitivity)^2 / (2 sigma^2): a group of k moves the statistic by at
    most k sensitivity (sensitivity scaling, tighter than Lemma 2.8).

    References:
      Bun & Steinke (2016), Proposition 1.6.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return (k * self.sensitivity) ** 2 / (2 * self.sigma ** 2)

  def rdp_cost(self, orders, group_size: int = 1):
    """alpha rho at each order (Mironov 2017, Proposition 7)."""
    return renyi.gaussian_rdp(self.zcdp_cost(group_size), orders)

  def event(self, group_size: int = 1):
    """``("gaussian", sigma / (k sensitivity))``: the noise multiplier."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return ("gaussian", self.sigma / (k * self.sensitivity))

  def part_statistics(self, rows, part, num_parts):
    """Per-part sums of rows clipped to l_2 norm ``sensitivity``."""
    return _clipped_part_sums(rows, part, num_parts, self.norm, self.sensitivity)


@_pytree("eps", "delta", "sensitivity")
@dataclasses.dataclass(frozen=True)
class GaussianMechanism(_GaussianNoise, _Mechanism):
  """The Gaussian mechanism, (eps, delta)-DP.

  ``calibration="classical"`` (default): sigma = sensitivity sqrt(2 ln(1.25 / delta)) /
  eps (Dwork & Roth, Theorem A.1), which requires 0 < eps < 1. ``"analytic"``: the
  smallest sigma with Phi(D/(2 sigma) - eps sigma/D) - e^eps Phi(-D/(2 sigma) -
  eps sigma/D) <= delta (Balle & Wang 2018, Theorem 8; exact, any eps > 0, always at
  most the classical sigma); eps, delta and sensitivity must then be static.

  Attributes:
    eps, delta: privacy parameters.
    sensitivity: l_2 sensitivity of the statistic.
    calibration: ``"classical"`` or ``"analytic"`` (static).

  References:
    B. Balle, Y.-X. Wang, "Improving the Gaussian mechanism for differential privacy:
    analytical calibration and optimal denoising", ICML 2018.
  """

  eps: Any
  delta: Any
  sensitivity: Any = 1.0
  calibration: str = "classical"

  def __post_init__(self):
    self._check_eps()
    self._check_options()
    if self.calibration == "classical" and _checks.is_concrete(self.eps) and \
        not self.eps < 1:
      raise ValueError(
          f"eps must be < 1 for the classical Gaussian mechanism; got {self.eps}. "
          "Use calibration='analytic' (any eps > 0), a smaller eps, or a pure-DP "
          "mechanism.")
    delta = _checks.check_eps(self.delta, "delta")
    if _checks.is_concrete(delta):
      if delta >= 1:
        raise ValueError(f"delta must be in (0, 1); got {delta}.")
      delta = float(delta)
    object.__setattr__(self, "delta", delta)
    self._check_sensitivity()

  def _check_options(self):
    if self.calibration not in ("classical", "analytic"):
      raise ValueError(f"calibration must be 'classical' or 'analytic'; got "
                       f"{self.calibration!r}.")
    if self.calibration == "analytic" and not all(
        _checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
      raise ValueError("calibration='analytic' needs static eps, delta and "
                       "sensitivity (sigma is solved for on the host).")

  def _ranges(self, shape):
    classical = self.calibration == "classical"  # Dwork & Roth's sigma needs eps < 1
    return [("eps", self.eps, _TINY, 1.0 if classical else _HUGE, classical),
            ("delta", self.delta, _TINY, 1.0, True),
            ("sensitivity", self.sensitivity, _TINY, _HUGE, False),
            ("sigma", lambda: self.sigma, _TINY, _HUGE, False)]

  @property
  def sigma(self):
    """The noise's standard deviation (a float when eps, delta, sensitivity are static)."""
    if self.calibration == "analytic":
      if not all(_checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
        raise ValueError("calibration='analytic' needs static eps, delta and sensitivity; "
                         "pass the mechanism as a static jit argument.")
      return self.sensitivity * _analytic_sigma(float(self.eps), float(self.delta))
    if all(_checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
      return self.sensitivity * math.sqrt(2 * math.log(1.25 / self.delta)) / self.eps
    return self.sensitivity * jnp.sqrt(2 * jnp.log(1.25 / self.delta)) / self.eps

  def randomize(self, key, data):
    data = _statistic(data)
    ok = self.valid(data.shape)
    noise = dprandom.gaussian(key, data.shape, data.dtype)
    return _checks.mark_invalid(*_noisy(ok, data, noise * self.sigma))


@_pytree("sigma", "sensitivity")
@dataclasses.dataclass(frozen=True)
class ZCDPGaussianMechanism(_GaussianNoise):
  """Gaussian noise of a given standard deviation, accounted in zCDP / RDP / PLD.

  The mechanism deep-learning users know (a noise multiplier, not an (eps, delta)):
  adding N(0, sigma^2) to a statistic of l_2 sensitivity Delta is
  Delta^2 / (2 sigma^2)-zCDP, and its privacy profile is the Gaussian's. It has no
  single (eps, delta), so an accountant with basic or advanced composition refuses
  it (ValueError at trace time); use ``composition="zcdp"``, ``"rdp"`` or a plan.
  ``sigma`` may be traced (a leaf).

  Attributes:
    sigma: the noise's standard deviation (> 0).
    sensitivity: l_2 sensitivity of the statistic.

  References:
    Bun & Steinke (2016), Proposition 1.6; Mironov (2017), Proposition 7.
  """

  sigma: Any
  sensitivity: Any = 1.0

  exact = False

  def __post_init__(self):
    object.__setattr__(self, "sigma", _checks.check_eps(self.sigma, "sigma"))
    object.__setattr__(self, "sensitivity", _checks.check_eps(self.sensitivity,
                                                              "sensitivity"))

  def _ranges(self, shape):
    return [("sigma", self.sigma, _TINY, _HUGE, False),
            ("sensitivity", self.sensitivity, _TINY, _HUGE, False)]

  def cost(self, group_size: int = 1):
    raise ValueError(
        "ZCDPGaussianMechanism has a zCDP cost, not one (eps, delta): use an "
        "accountant with composition='zcdp' or 'rdp' (or a plan), or "
        "GaussianMechanism(eps, delta) under basic composition.")

  def randomize(self, key, data):
    data = _statistic(data)
    ok = self.valid(data.shape)
    noise = dprandom.gaussian(key, data.shape, data.dtype)
    return _checks.mark_invalid(*_noisy(ok, data, noise * self.sigma))


@_pytree("eps", "delta", "sensitivity")
@dataclasses.dataclass(frozen=True)
class DiscreteGaussianMechanism(_Mechanism):
  """The discrete Gaussian mechanism: integer statistic + N_Z(0, s^2), exact.

  Publishable (``exact`` is always True): integer arithmetic and exact Bernoulli
  trials only (:func:`jaxdp.exact.discrete_gaussian`). sigma is calibrated on the
  host through zero-concentrated DP: rho is the largest value whose conversion
  (:func:`jaxdp.composition.zcdp_epsilon`) is at most eps at ``delta``, sigma =
  sensitivity / sqrt(2 rho), and the sampler's s^2 rounds sigma^2 up to a quarter.
  Adding N_Z(0, s^2) to each entry of an integer statistic of l_2 sensitivity Delta
  is Delta^2 / (2 s^2)-zCDP (CKS, Theorem 4; for vectors, by composition over the
  entries, since the divergence bound holds for every integer shift).

  Attributes:
    eps, delta: the target (eps, delta) (static).
    sensitivity: l_2 sensitivity of the integer statistic (static).

  References:
    C. Canonne, G. Kamath, T. Steinke, "The discrete Gaussian for differential
    privacy", NeurIPS 2020.
  """

  eps: Any
  delta: Any
  sensitivity: Any = 1.0

  exact = True
  norm = 2.0

  def __post_init__(self):
    self._check_eps()
    delta = _checks.check_eps(self.delta, "delta")
    if not all(_checks.is_concrete(v) for v in (self.eps, delta, self.sensitivity)):
      raise ValueError("DiscreteGaussianMechanism needs static eps, delta and "
                       "sensitivity (sigma and the sampler's integer tables are set on "
                       "the host).")
    if not 0 < float(delta) < 1:
      raise ValueError(f"delta must be in (0, 1); got {delta}.")
    object.__setattr__(self, "delta", float(delta))
    self._check_sensitivity()
    if self.sigma > exact.MAX_SIGMA:
      raise ValueError(
          f"eps = {self.eps:g} at delta = {self.delta:g} and sensitivity "
          f"{self.sensitivity:g} need sigma = {self.sigma:.4g}, above the exact "
          f"sampler's {exact.MAX_SIGMA:g}; use a larger eps or a coarser statistic.")

  def _check_options(self):
    if not all(_checks.is_concrete(v) for v in (self.eps, self.delta, self.sensitivity)):
      raise ValueError(
          "DiscreteGaussianMechanism needs static eps, delta and sensitivity (sigma and "
          "the sampler's integer tables are set on the host); got traced ones. Pass "
          "the mechanism as a static argument (or close over it) instead of as a "
          "traced jit, vmap or scan input.")

  def _ranges(self, shape):
    return [("eps", self.eps, _TINY, _HUGE, False),
            ("delta", self.delta, _TINY, 1.0, True),
            ("sensitivity", self.sensitivity, _TINY, _HUGE, False),
            ("sigma", lambda: self.sigma, _TINY, exact.MAX_SIGMA, False)]

  @property
  def sigma(self) -> float:
    """sensitivity / sqrt(2 rho) (before the sampler rounds sigma^2 up to a quarter)."""
    return _dg_sigma(float(self.eps), float(self.delta), float(self.sensitivity))

  def zcdp_cost(self, group_size: int = 1):
    """rho = (k sensitivity)^2 / (2 s^2) with the sampler's s^2 (at most the
    calibrated rho for k = 1)."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    s2 = exact.sigma_quarters(self.sigma) / 4
    return (k * self.sensitivity) ** 2 / (2 * s2)

  def rdp_cost(self, orders, group_size: int = 1):
    """alpha rho at each order (Canonne, Kamath & Steinke 2020, Theorem 4)."""
    return renyi.gaussian_rdp(self.zcdp_cost(group_size), orders)

  def event(self, group_size: int = 1):
    """``("zcdp", rho)``: the discrete Gaussian's privacy profile is not the
    continuous one's, so it is accounted through its zCDP guarantee only."""
    return ("zcdp", self.zcdp_cost(group_size))

  def randomize(self, key, data):
    units, _ = _grid_units(data, None)
    ok = self.valid(units.shape)
    noise = exact.discrete_gaussian(key, units.shape, sigma=self.sigma)
    return _checks.mark_invalid(*_noisy(ok, units, noise))

  def part_statistics(self, rows, part, num_parts):
    """Per-part int32 sums of integer rows; a row of l_2 norm above ``sensitivity``
    counts as 0."""
    return _integer_part_sums(rows, part, num_parts, self.sensitivity, p=2)


@functools.lru_cache(maxsize=256)
def _dg_sigma(eps: float, delta: float, sensitivity: float) -> float:
  rho = zcdp_budget(eps, delta)
  return sensitivity / math.sqrt(2 * rho) if rho > 0 else math.inf  # eps too small


@_pytree("eps")
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
  exact: bool = False

  def __post_init__(self):
    self._check_eps()
    self._check_options()

  def _check_options(self):
    if not isinstance(self.poset, Poset):
      raise _checks.ArgTypeError(f"poset must be a jaxdp.Poset; got {self.poset!r}.")
    if self.noise not in COUNT_NOISES:
      raise ValueError(f"noise must be one of {COUNT_NOISES}; got {self.noise!r}.")
    _check_exact_options(self.exact, None)
    if self.exact and self.noise not in EXACT_COUNT_NOISES:
      raise ValueError(
          f"exact=True supports noise in {EXACT_COUNT_NOISES}; got {self.noise!r}.")
    if self.exact and self.noise == "poset":
      exact_tables(self.poset)  # the exact sampler's limits, checked now
    if self.on_invalid not in ("raise", "clip"):
      raise ValueError(f"on_invalid must be 'raise' or 'clip'; got {self.on_invalid!r}.")

  def valid(self, shape=()):
    """:meth:`KNormMechanism.valid` of the noise mechanism (:attr:`inner`), after
    this mechanism's own options; ``shape`` (the rows') is not needed."""
    self._check_options()
    return self.inner.valid((self.dim,))

  @property
  def dim(self) -> int:
    return self.poset.d + 1

  @property
  def inner(self):
    """The mechanism that noises the (d + 1,) count vector."""
    d1 = self.dim
    if self.noise == "poset":
      return KNormMechanism(PosetBall(self.poset), self.eps, exact=self.exact)
    if self.noise == "linf":
      return KNormMechanism(LpBall(d1, math.inf), self.eps, exact=self.exact)
    if self.noise == "l2":
      return KNormMechanism(LpBall(d1, 2.0), self.eps, math.sqrt(d1))
    return LaplaceMechanism(self.eps, float(d1), exact=self.exact)

  def statistic(self, data):
    """(n, c_1..c_d) after validating (or clipping) the rows, exactly.

    The counts are sums of 0/1 values in the default float dtype, and there may be
    at most as many rows as that dtype holds integers exactly (2**24 for float32,
    2**53 with x64): every partial sum is then an integer it represents, so every
    addition is exact in any order. More rows is an error, never a rounded count.
    """
    rows, ok = self._validated(data)
    counts = _exact_counts(jnp.sum(rows, axis=0), rows.shape[0], ok)
    return _as_int_counts(counts) if self.exact else counts

  def part_statistics(self, data, part, num_parts):
    """Exact (n_j, c_1..c_d) of the rows of each part j, shape ``(num_parts, d + 1)``."""
    rows, ok = self._validated(data)
    part = _part_index(part, rows.shape[0], num_parts)
    ext = jnp.concatenate([jnp.ones((rows.shape[0], 1), rows.dtype), rows], axis=1)
    counts = _exact_counts(_part_sums(ext, part, num_parts), rows.shape[0], ok,
                           with_n=False)
    return _as_int_counts(counts) if self.exact else counts

  def randomize(self, key, data):
    self._check_options()
    stat = self.statistic(data)
    return self.inner.randomize(key, stat)

  def rdp_cost(self, orders, group_size: int = 1):
    """The noise mechanism's curve (Laplace's own for ``noise="laplace"``)."""
    return self.inner.rdp_cost(orders, group_size)

  def event(self, group_size: int = 1):
    return self.inner.event(group_size)

  def _validated(self, data):
    d = self.poset.d
    if not hasattr(data, "shape"):
      data = np.asarray(data)
    if data.ndim != 2 or data.shape[1] != d:
      raise ValueError(
          f"data must have shape (n, {d}) (one 0/1 row per respondent); got "
          f"{tuple(data.shape)}.")
    x = _checks.check_data(data)
    order = jnp.asarray(self.poset.order, jnp.float32)
    binary = jnp.all((x == 0) | (x == 1), axis=1)
    xf = x.astype(jnp.float32)
    # violations[r, i] = number of j above i (p_i <= p_j) with x_j = 0, where x_i = 1
    missing = (1.0 - xf) @ order.T
    is_filter = jnp.all((xf == 0) | (missing == 0), axis=1)
    passed = jnp.asarray(True)
    if _checks.is_concrete(x):
      nb = np.nonzero(~np.asarray(binary))[0]
      if nb.size:
        r = int(nb[0])
        c = int(np.nonzero(~np.asarray((x[r] == 0) | (x[r] == 1)))[0][0])
        raise ValueError(f"data must hold 0/1 values; row {r} does not (column {c}).")
      if self.on_invalid == "raise":
        bad = np.nonzero(~np.asarray(is_filter))[0]
        if bad.size:
          r = int(bad[0])
          raise ValueError(
              f"data row {r} is not a filter of the poset ({bad.size} such rows): "
              f"{self.poset.explain_violation(np.asarray(x[r]))}. Fix the data, or "
              "pass on_invalid='clip' to replace each row by the largest filter it "
              "contains.")
    elif not (x.dtype == jnp.bool_ and self.on_invalid == "clip"):  # else nothing to check
      ok = jnp.all(binary) & (jnp.all(is_filter) | (self.on_invalid == "clip"))
      passed = _runtime_check(ok, binary, is_filter)
    if self.on_invalid == "clip":
      xf = jnp.where(missing == 0, xf, 0.0)
    # 0/1 rows in the default float dtype, and whether the run-time check passed
    return (xf * binary[:, None]).astype(jnp.result_type(float)), passed


def _runtime_check(ok, binary, is_filter):
  """Under jit: fail at run time if rows are bad; False (NaN output) as a second guard.

  One host call per batch under ``vmap`` (``broadcast_all``): the callback sees every
  dataset of the batch at once and names the first bad row of the first bad one.
  """

  def check(ok_, binary_, is_filter_):
    ok_, binary_, is_filter_ = (np.asarray(v) for v in (ok_, binary_, is_filter_))
    if ok_.all():
      return np.ones(ok_.shape, bool)
    first = np.unravel_index(int(np.argmin(ok_.ravel())), ok_.shape)
    where = f" (batch element {tuple(int(i) for i in first)})" if ok_.ndim else ""
    nb = np.nonzero(~binary_[first])[0]
    if nb.size:
      raise ValueError(f"data must hold 0/1 values; row {int(nb[0])} does not{where}.")
    bad = np.nonzero(~is_filter_[first])[0]
    raise ValueError(
        f"data row {int(bad[0])} is not a filter of the poset ({bad.size} such rows)"
        f"{where}; fix the data or use on_invalid='clip'.")

  passed = jax.pure_callback(check, jax.ShapeDtypeStruct((), jnp.bool_), ok, binary,
                             is_filter, vmap_method="broadcast_all")
  return passed & ok


def _normal_cdf(x: float) -> float:
  return 0.5 * math.erfc(-x / math.sqrt(2))


def _analytic_delta(eps: float, s: float) -> float:
  """delta of Gaussian noise of standard deviation s on sensitivity 1 at eps
  (Balle & Wang 2018, Theorem 8)."""
  a, b = 1 / (2 * s) - eps * s, -1 / (2 * s) - eps * s
  tail = _normal_cdf(b)
  second = 0.0 if tail == 0.0 else math.exp(min(eps + math.log(tail), 700.0))
  return _normal_cdf(a) - second


@functools.lru_cache(maxsize=256)
def _analytic_sigma(eps: float, delta: float) -> float:
  """The smallest standard deviation (sensitivity 1) that is (eps, delta)-DP; rounded
  up, so the returned sigma is never below the exact one."""
  hi = 1.0
  while _analytic_delta(eps, hi) > delta:  # delta(sigma) decreases in sigma
    hi *= 2
  return _bisect(lambda s: _analytic_delta(eps, s) <= delta, hi, 1e-6)


def _statistic(data, name="data"):
  """A statistic as the default float dtype: no float16, NaN or silent rounding.

  Concrete integers, and floats the cast narrows (float64 with x64 off), must lie
  within the float's exact integer range (+-2**24 for float32), whatever their
  width or shape: beyond it neighbouring integers round together or apart, and the
  sensitivity no longer holds.
  """
  f = jnp.result_type(float)
  x = _checks.check_data(data, name, limit=_checks.exact_limit(f),
                         reason=_checks.float_reason(f))
  return _checks.as_exact_float(x, name)


def _exact_counts(counts, n: int, ok, *, with_n: bool = True):
  """Counts of n 0/1 rows (default float dtype), refusing n beyond its exact range.

  Checked before any sum is used: with n within the range every partial sum is an
  integer the dtype holds, so the sums are exact.
  """
  f = jnp.result_type(float)
  limit = _checks.exact_limit(f)
  if n > limit:
    raise ValueError(
        f"data has {n:,} rows, more than {limit:,}: counts that large are not exact "
        f"in {jnp.dtype(f)} (noise would be added to a rounded count). Enable x64 "
        "(jax.config.update('jax_enable_x64', True)) or split the data.")
  if with_n:
    counts = jnp.concatenate([jnp.full((1,), n, counts.dtype), counts])
  return jnp.where(ok, counts, jnp.nan)  # NaN: a failed run-time check


def _part_index(part, n: int, num_parts: int):
  """The part index of each row as a JAX integer array.

  Indices outside ``[0, num_parts)`` drop their row. A concrete index of a dtype that
  JAX narrows (int64 or uint64 with x64 off) is mapped to -1 there on the host, in
  its own dtype, before the conversion, which would wrap 2**32 + 1 into part 1.
  """
  if not hasattr(part, "dtype"):
    part = np.asarray(part)
  if part.shape != (n,) or not jnp.issubdtype(part.dtype, jnp.integer):
    raise ValueError(f"part must be an integer array of shape ({n},), one part index "
                     f"per row; got {part.dtype}{tuple(part.shape)}.")
  target = jax.dtypes.canonicalize_dtype(part.dtype)
  if _checks.is_concrete(part) and target != part.dtype:
    host = np.asarray(part)
    keep = (host >= 0) & (host < num_parts)
    part = np.where(keep, np.where(keep, host, 0).astype(np.int64), -1)
    part = part.astype(jax.dtypes.canonicalize_dtype(np.int64))
  return jnp.asarray(part)


def _part_sums(x, part, num_parts: int):
  """Sums of the rows of ``x`` by part (rows whose part is outside
  ``[0, num_parts)`` are dropped): a masked reduction for one part (a scatter-add
  is several times slower on the CPU), ``segment_sum`` otherwise."""
  if num_parts == 1:
    return jnp.sum(jnp.where((part == 0)[:, None], x, 0), axis=0, dtype=x.dtype)[None]
  return jax.ops.segment_sum(x, part, num_parts)


def _clipped_part_sums(rows, part, num_parts: int, p: float, bound: float):
  """Per-part sums of rows, each row first scaled into the l_p ball of radius bound.

  Scaling a row into the ball bounds what one person adds to one part's sum, so the
  sum's l_p sensitivity is ``bound`` whatever the rows hold (sums in the default
  float dtype).
  """
  x = _checks.check_data(rows, "rows")
  if not jnp.issubdtype(x.dtype, jnp.floating) and _checks.is_concrete(bound) and \
      x.shape[0] * bound > _checks.exact_limit(jnp.result_type(float)):
    raise ValueError(
        f"rows: {x.shape[0]:,} integer contributions of up to {bound:g} each can add "
        f"up to more than {_checks.exact_limit(jnp.result_type(float)):,}, beyond the "
        "exact range of the default float dtype. Enable x64 or split the data.")
  x = x.astype(jnp.result_type(float))
  x = jnp.where(jnp.isfinite(x), x, 0.0)  # a non-finite contribution counts as 0
  scalar = x.ndim == 1
  if scalar:
    x = x[:, None]
  if x.ndim != 2:
    raise ValueError(f"rows must have shape (n,) or (n, k); got {tuple(x.shape)}.")
  part = _part_index(part, x.shape[0], num_parts)
  a = jnp.abs(x)
  if p == math.inf:
    norm = jnp.max(a, axis=1)
  elif p == 1:
    norm = jnp.sum(a, axis=1)
  else:
    norm = jnp.sum(a ** p, axis=1) ** (1.0 / p)
  factor = jnp.where(norm > bound, bound / jnp.where(norm > 0, norm, 1.0), 1.0)
  big = float(jnp.finfo(x.dtype).max)
  with jax.enable_x64(True):  # accumulated in float64, clipped to the float's range
    sums = _part_sums((x * factor[:, None]).astype(jnp.float64), part,
                      num_parts)  # (1-Lipschitz: the sensitivity holds)
    sums = jnp.clip(sums, -big, big).astype(x.dtype)
  return sums[:, 0] if scalar else sums


# ------------------------------------------------------------------ exact releases
def _check_exact_options(is_exact, grid):
  if not isinstance(is_exact, bool):
    raise _checks.ArgTypeError(f"exact must be True or False; got {is_exact!r}.")
  if grid is None:
    return
  if not is_exact:
    raise ValueError("grid is an option of exact=True releases; pass exact=True too.")
  g = _checks.check_positive(grid, "grid")
  if math.frexp(g)[0] != 0.5 or not 2.0 ** -60 <= g <= 2.0 ** 20:
    raise ValueError(f"grid must be a power of two 2**-k (between 2**-60 and 2**20) so "
                     f"snapping is exact; got {grid!r}.")


def _grid_units(data, grid):
  """The statistic in int32 grid units, and the snapping slack in units.

  ``grid`` None: ``data`` must have an integer dtype (no snapping, slack 0).
  Otherwise real data is snapped to the nearest multiple of ``grid`` (exact: grid
  is a power of two), each entry moving by at most half a unit, so neighbouring
  statistics differ by at most ``sensitivity / grid + m`` units in l_1 (slack m,
  the number of entries).

  A concrete statistic is checked and snapped on the host, in its own dtype (a
  float64 one is not rounded to float32 first: that could move it by many units):
  beyond +-2^30 units it is an error, since clipping it silently would hide a
  mistake. A traced one is clipped to +-2^30 units, a 1-Lipschitz map that keeps the
  sensitivity (an error there would depend on the data, e.g. inside
  :func:`jaxdp.release_partitioned`) and leaves room for the noise in int32.
  """
  if not hasattr(data, "dtype"):
    data = np.asarray(data)
  if grid is None and not jnp.issubdtype(data.dtype, jnp.integer) and \
      data.dtype != object:
    _checks.check_data(data)  # a dtype error first
    raise ValueError(
        f"exact=True needs an integer statistic (counts); got dtype {data.dtype}. Cast "
        "counts to an integer dtype, or pass grid=2.0**-k to snap a real-valued "
        "statistic to a grid.")
  too_big = ("the largest |statistic| an exact release holds (int32, with room for "
             "the noise). Clip it yourself if that is meant (clipping keeps the "
             "sensitivity), or use a coarser unit" + (" or grid." if grid else "."))
  if grid is None:
    x = _checks.check_data(data, limit=exact.LIMIT, reason=too_big)
    return _checks.clip_integers(x, exact.LIMIT).astype(jnp.int32), 0
  x = _checks.check_data(data)
  if _checks.is_concrete(x):
    host = np.asarray(data).astype(np.float64)  # exact for every value check_data passes
    units = np.round(host / grid)                # exact: grid is a power of two
    i = _checks.first_index(np.abs(units) > exact.LIMIT)
    if i is not None:
      raise ValueError(
          f"data{'' if i == () else f' at index {i}'} is {host[i]}, {units[i]:.0f} "
          f"units of grid {grid!r}, beyond {exact.LIMIT:,} = 2**30 units, {too_big}")
    return jnp.asarray(units.astype(np.int32)), math.prod(x.shape)
  xf = _checks.as_exact_float(x)
  xf = jnp.where(jnp.isfinite(xf), xf, 0.0)  # a non-finite statistic counts as 0
  units = jnp.clip(jnp.round(xf / grid), -exact.LIMIT, exact.LIMIT)
  return units.astype(jnp.int32), math.prod(x.shape)


def _exact_scale(units, eps):
  """The Laplace / K-norm scale units / eps, rounded up so the noise is never
  narrower than the privacy analysis assumes (a static eps: two float64 ulps up; a
  traced eps: float32 arithmetic, 2^-20 relative up; NaN if eps is bad)."""
  if _checks.is_concrete(eps) and _checks.is_concrete(units):
    scale = math.nextafter(math.nextafter(float(units) / float(eps), math.inf), math.inf)
    if scale > exact.MAX_SCALE:
      raise ValueError(
          f"exact noise of scale {scale:g} (sensitivity in grid units / eps) exceeds "
          f"{exact.MAX_SCALE:g}; use a larger eps or a coarser grid.")
    return scale
  scale = jnp.asarray(units, jnp.float32) / eps * (1 + 2.0 ** -20)
  return _checks.guard_positive(eps, scale)


def _noisy(ok, stat, noise):
  """``(ok, stat + noise)``, where ``ok`` (the parameters are valid, see
  :meth:`_Valid.valid`) is narrowed to entries whose integer noise is not an exact
  sampler's fill (its dtype's minimum, never a noise value: they stay within
  +-2^30), and the noise is replaced by 0 where not ``ok``, so no fill enters
  arithmetic with the data. The caller puts the invalid fill where not ``ok``."""
  noise = jnp.asarray(noise)
  if jnp.issubdtype(noise.dtype, jnp.integer):
    ok = ok & (noise != jnp.iinfo(noise.dtype).min)
  return ok, stat + jnp.where(ok, noise, jnp.zeros((), noise.dtype))


def _as_int_counts(counts):
  """Exact float counts (NaN after a failed run-time check) as int32 (int32's minimum
  for NaN), clipped to +-2^30 (1-Lipschitz, so the sensitivity holds)."""
  ok = jnp.isfinite(counts)
  c = jnp.clip(jnp.where(ok, counts, 0), -exact.LIMIT, exact.LIMIT).astype(jnp.int32)
  return _checks.mark_invalid(ok, c)


def _integer_part_sums(rows, part, num_parts: int, bound, p: int = 1):
  """Per-part int32 sums of integer rows; rows of l_p norm (p = 1 or 2) above
  ``bound`` count as 0.

  The sums are taken in int64 and clipped to +-2^30 (a 1-Lipschitz map, so the
  sensitivity holds): no row count can overflow them or raise an error that would
  reveal it.
  """
  x = _checks.check_data(rows, "rows")
  if not (jnp.issubdtype(x.dtype, jnp.integer) or x.dtype == jnp.bool_):
    raise ValueError(
        f"rows: an exact release without a grid sums integer contributions; got dtype "
        f"{x.dtype}. Return integers (or booleans) per row, or give the mechanism "
        "grid=2.0**-k.")
  scalar = x.ndim == 1
  x2 = x[:, None] if scalar else x
  if x2.ndim != 2:
    raise ValueError(f"rows must have shape (n,) or (n, k); got {tuple(x.shape)}.")
  part = _part_index(part, x.shape[0], num_parts)
  with jax.enable_x64(True):
    x2 = x2.astype(jnp.int64)
    if p == 1:
      keep = jnp.sum(jnp.abs(x2), axis=1) <= bound
    else:  # l_2: the sum of squares against bound^2, in float64
      keep = jnp.sum(x2.astype(jnp.float64) ** 2, axis=1) <= float(bound) ** 2
    sums = _part_sums(jnp.where(keep[:, None], x2, 0), part, num_parts)
    sums = jnp.clip(sums, -exact.LIMIT, exact.LIMIT).astype(jnp.int32)
  return sums[:, 0] if scalar else sums
