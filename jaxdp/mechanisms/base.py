"""What every mechanism shares: the protocol, the pytree registration, the allowlist of
parameter ranges (``valid``), the pure-DP costs and the exact-noise checks.

References:
  C. Dwork, "Differential privacy", ICALP 2006 (Lemma 2.8, group privacy).
  M. Bun, T. Steinke, "Concentrated differential privacy", TCC 2016.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks, exact
from jaxdp.composition import group_cost, renyi
from jaxdp.typing import ArrayLike, Scalar, Shape


@runtime_checkable
class Mechanism(Protocol):
  """What :func:`jaxdp.release`, :func:`jaxdp.release_partitioned` and
  :func:`jaxdp.plan` need of a mechanism."""

  def cost(self, group_size: int = 1) -> tuple[Any, Any]:
    """``(eps, delta)`` for groups of ``group_size``."""

  def zcdp_cost(self, group_size: int = 1) -> Any:
    """rho (zero-concentrated DP) for groups of ``group_size``."""

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> Any:
    """Rényi DP at each of ``orders`` for groups of ``group_size``."""

  def event(self, group_size: int = 1) -> tuple:
    """What the mechanism is, for fixed-plan accounting and export: ``("laplace",
    eps)``, ``("pure", eps)`` (any eps-DP mechanism), ``("gaussian", sigma /
    sensitivity)`` or ``("zcdp", rho)``, for groups of ``group_size``."""

  def randomize(self, key: jax.Array, data: Any) -> jax.Array:
    """One noisy answer (charges nothing)."""


def pytree(*leaves: str):
  """Registers a frozen dataclass as a pytree: ``leaves`` are children, the other
  fields static. Unflattening bypasses ``__init__``, so validation runs when a user
  builds a mechanism, never on JAX's placeholders."""

  def wrap(cls):
    static = tuple(f.name for f in dataclasses.fields(cls) if f.name not in leaves)

    def flatten(mech):
      return (
        [getattr(mech, name) for name in leaves],
        tuple(getattr(mech, name) for name in static),
      )

    def flatten_with_keys(mech):
      return (
        [(jax.tree_util.GetAttrKey(name), getattr(mech, name)) for name in leaves],
        tuple(getattr(mech, name) for name in static),
      )

    def unflatten(aux, children):
      mech = object.__new__(cls)
      for name, value in zip(leaves + static, list(children) + list(aux)):
        object.__setattr__(mech, name, value)
      return mech

    jax.tree_util.register_pytree_with_keys(cls, flatten_with_keys, unflatten, flatten)
    return cls

  return wrap


TINY = float(np.finfo(np.float32).tiny)  # the normal float32 range: noise, scales
HUGE = float(np.finfo(np.float32).max)  # and budgets are computed in float32


REBUILT = (
  "(A mechanism rebuilt from its leaves, e.g. by jax.tree_util, skips its "
  "constructor's checks.)"
)


class RangeChecked:
  """The allowlist of parameter ranges a mechanism's sampler supports."""

  def valid(self, shape: Shape = ()) -> jax.Array:
    """Whether the parameters lie in the ranges the noise sampler supports.

    The constructor's checks again (JAX skips them when it rebuilds a mechanism from
    its leaves) and, for every parameter and the noise scale derived from them, a
    range (a normal float32 number; an exact sampler's scale, rounded up, at most
    :func:`jaxdp.exact.max_scale` of the noise's dimension), which a traced value is
    compared with. Where it
    is False, :meth:`Mechanism.randomize` returns the invalid fill and :func:`jaxdp.release`
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
      # a rebuilt mechanism may carry an array leaf (a Python float is a scalar)
      if type(value) is not float and jnp.ndim(value) != 0:
        raise ValueError(
          f"{name} must be a scalar; got shape {jnp.shape(value)}. {REBUILT}"
        )
      ok = ok & _checks.in_range(name, value, lo, hi, below=below, hint=REBUILT)
    return ok

  def _check_options(self):
    """The static options' checks (the constructor runs them too)."""

  def _ranges(self, shape):
    """``(name, value, lo, hi, below)``: ``lo <= value <= hi`` (``< hi`` if below)."""
    return [
      ("eps", self.eps, TINY, HUGE, False),
      ("sensitivity", self.sensitivity, TINY, HUGE, False),
    ]


class EpsMechanism(RangeChecked):
  """Shared behaviour: parameter validation and the pure-DP ``cost``."""

  def _check_eps(self):
    _checks.check_eps(self.eps, "eps")
    if _checks.is_concrete(self.eps):
      object.__setattr__(self, "eps", float(self.eps))

  def _check_sensitivity(self):
    object.__setattr__(
      self, "sensitivity", _checks.check_eps(self.sensitivity, "sensitivity")
    )

  def cost(self, group_size: int = 1) -> tuple[Scalar, Scalar]:
    """``(eps, delta)`` for groups of ``group_size`` (floats when eps is static)."""
    return group_cost(self.eps, getattr(self, "delta", 0.0), group_size)

  def zcdp_cost(self, group_size: int = 1) -> Scalar:
    """rho for groups of ``group_size``: a k eps-DP mechanism is (k eps)^2 / 2-zCDP.

    References:
      Bun & Steinke (2016), Proposition 1.4.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return (k * self.eps) ** 2 / 2

  def rdp_cost(self, orders: ArrayLike, group_size: int = 1) -> jax.Array:
    """RDP at each order for groups of ``group_size``: a k eps-DP mechanism has at
    most randomized response's curve at k eps.

    References:
      Bun & Steinke (2016), Proposition 3.3; :func:`jaxdp.composition.renyi.pure_rdp`.
    """
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return renyi.pure_rdp(k * self.eps, orders)

  def event(self, group_size: int = 1) -> tuple:
    """``("pure", k eps)``: accounted as the worst k eps-DP mechanism (randomized
    response), whatever its noise."""
    k = _checks.check_int(group_size, "group_size", minimum=1)
    return ("pure", k * self.eps)


def check_exact_options(is_exact, grid):
  if not isinstance(is_exact, bool):
    raise _checks.ArgTypeError(f"exact must be True or False; got {is_exact!r}.")
  if grid is None:
    return
  if not is_exact:
    raise ValueError("grid is an option of exact=True releases; pass exact=True too.")
  step = _checks.check_positive(grid, "grid")
  if math.frexp(step)[0] != 0.5 or not 2.0**-60 <= step <= 2.0**20:
    raise ValueError(
      f"grid must be a power of two 2**-k (between 2**-60 and 2**20) so "
      f"snapping is exact; got {grid!r}."
    )


def exact_scale(units, eps):
  """The Laplace / K-norm scale units / eps, rounded up so the noise is never
  narrower than the privacy analysis assumes (a static eps: two float64 ulps up; a
  traced eps: float32 arithmetic, 2^-20 relative up; NaN if eps is bad)."""
  if _checks.is_concrete(eps) and _checks.is_concrete(units):
    scale = math.nextafter(math.nextafter(float(units) / float(eps), math.inf), math.inf)
    if scale > exact.MAX_SCALE:
      raise ValueError(
        f"exact noise of scale {scale!r} (sensitivity in grid units / eps = "
        f"{units!r} / {eps!r}, rounded up by two float64 ulps) must be at most "
        f"MAX_SCALE = {exact.MAX_SCALE!r}; use a larger eps or a coarser grid."
      )
    return scale
  scale = jnp.asarray(units, jnp.float32) / eps * (1 + 2.0**-20)
  return _checks.guard_positive(eps, scale)


def noisy(ok, stat, noise, add=operator.add):
  """``(ok, add(stat, noise))``, where ``ok`` (the parameters are valid, see
  :meth:`RangeChecked.valid`) is narrowed to entries whose integer noise is not an exact
  sampler's fill (its dtype's minimum, never a noise value: they stay within
  +-2^30), and the noise is replaced by 0 where not ``ok``, so no fill enters
  arithmetic with the data. The caller puts the invalid fill where not ``ok``."""
  noise = jnp.asarray(noise)
  if jnp.issubdtype(noise.dtype, jnp.integer):
    ok = ok & (noise != jnp.iinfo(noise.dtype).min)
  return ok, add(stat, jnp.where(ok, noise, jnp.zeros((), noise.dtype)))


def charged_statistic(mech, data):
  """``data`` as a release of ``mech`` may be charged for it: any shape for a mechanism
  whose sensitivity bounds the whole statistic (Laplace, Gaussian); exactly
  ``mech.statistic_shape`` for one that declares it (K-norm and elliptic noise: the
  sensitivity is a norm of one vector's change), checked on the array the noise is
  drawn for (anything but a JAX array is read once, as numpy: an object cannot
  report one shape and convert to another).

  Raises:
    ValueError: another shape (leading axes would get a noise each for one charge).
  """
  want = getattr(mech, "statistic_shape", None)
  if want is None:
    return data
  if not isinstance(data, jax.Array):
    data = np.asarray(data)
  if tuple(data.shape) != tuple(want):
    raise ValueError(
      f"data must have shape {tuple(want)} for {type(mech).__name__}: a release is "
      f"charged for one vector of sensitivity {mech.sensitivity} in its ball's norm; "
      f"got shape {tuple(data.shape)} (every leading row would get its own noise for "
      "that one charge). Release each vector on its own, or the sums of disjoint parts "
      "with release_partitioned."
    )
  return data
