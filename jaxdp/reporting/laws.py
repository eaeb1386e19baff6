"""The noise law of a mechanism: what an error bar is computed from.

An additive mechanism releases ``statistic + noise``, and the law of the noise is a
function of the mechanism's parameters alone (eps, delta, sensitivity, the ball): it
reads no data and spends no budget. :func:`noise_law` turns a mechanism into that law,
per coordinate; everything in :mod:`jaxdp.reporting` works from it.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from jaxdp import _checks, exact
from jaxdp._cache import plain
from jaxdp._identity import FieldIdentity
from jaxdp.mechanisms import (
  DiscreteGaussianMechanism,
  EllipticGaussianMechanism,
  EllipticZCDPGaussianMechanism,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  PosetCountMechanism,
  QueryMechanism,
  ZCDPGaussianMechanism,
)
from jaxdp.mechanisms.base import exact_scale
from jaxdp.samplers.balls import LpBall, PosetBall
from jaxdp.samplers.ellipse import ellipse
from jaxdp.samplers.norm_ball import NormBall

__all__ = ["FAMILIES", "NoiseLaw", "check_shape", "noise_law", "private_ball"]

FAMILIES = ("laplace", "gaussian", "discrete_gaussian", "knorm", "elliptic")
SUPPORTED = (
  "PosetCountMechanism, SumQueryMechanism, CountQueryMechanism, VoteQueryMechanism, "
  "LaplaceMechanism, KNormMechanism, GaussianMechanism, ZCDPGaussianMechanism, "
  "EllipticGaussianMechanism, EllipticZCDPGaussianMechanism or DiscreteGaussianMechanism"
)


@dataclasses.dataclass(frozen=True, eq=False)
class NoiseLaw(FieldIdentity):
  """The law of an additive mechanism's noise, coordinate by coordinate.

  A law is the key of the error bars' cache, shared by every caller in the process,
  so it compares and hashes each field's type with its value
  (:class:`~jaxdp._identity.FieldIdentity`), and its names are stored
  as plain strings: a mechanism whose field was replaced (``object.__setattr__``) by
  a float subclass, or its ``exact`` flag by an int that compares as False, never
  shares an entry with an honest mechanism's law.

  Attributes:
    family: ``"laplace"`` (i.i.d. Laplace(scale) coordinates), ``"gaussian"``
      (i.i.d. N(0, scale^2)), ``"discrete_gaussian"`` (i.i.d. N_Z(0, scale^2) on the
      integers) or ``"knorm"`` (``scale * R Z`` with R ~ Gamma(dim + 1) and Z
      uniform in ``ball``: density proportional to exp(-||y||_K / scale)) or
      ``"elliptic"`` (N(0, scale^2 A), A the ellipse of ``ball``,
      :func:`jaxdp.ellipse`: coordinate i is N(0, scale^2 A_ii)).
    scale: the scale above, in units of the statistic's grid.
    ball: the K-norm ball, or the ball whose ellipse shapes the noise.
    dim: the number of coordinates (None: i.i.d. noise on a statistic of any shape).
    rounded: the noise is the exact rounding of the ideal real noise to the integers
      (an ``exact=True`` mechanism); the discrete Gaussian is integer by nature.
    unit: the grid step the integer noise is counted in (1 for integer statistics).
    names: one label per coordinate (the respondent count first, for poset counts).
    snap: how far the mechanism may move each entry of the statistic before adding
      the noise, in the statistic's units: half a grid step for an exact mechanism on
      a grid (which snaps the statistic to it), else 0. Error bars widen each end
      by it, so that they cover the statistic itself and not its snapped value.
  """

  family: str
  scale: float
  ball: Any = None
  dim: int | None = None
  rounded: bool = False
  unit: float = 1.0
  names: tuple[str, ...] = ()
  snap: float = 0.0

  def __post_init__(self):
    if self.family not in FAMILIES:
      raise ValueError(f"family must be one of {FAMILIES}; got {self.family!r}.")
    for name in ("scale", "unit"):
      value = getattr(self, name)
      if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise ValueError(
          f"the noise {name} must be a finite number > 0; got {value!r} (a mechanism "
          "rebuilt from bad leaves?)."
        )
    if not (isinstance(self.snap, (int, float)) and 0 <= self.snap < math.inf):
      raise ValueError(f"the snap must be a finite number >= 0; got {self.snap!r}.")
    if not isinstance(self.rounded, (bool, np.bool_)):
      raise _checks.ArgTypeError(f"rounded must be True or False; got {self.rounded!r}.")
    object.__setattr__(self, "rounded", bool(self.rounded))
    if not all(isinstance(n, str) for n in self.names):
      raise _checks.ArgTypeError(f"names must be strings; got {self.names!r}.")
    object.__setattr__(self, "names", plain(tuple(self.names)))  # plain str each

  @property
  def integer(self) -> bool:
    """Whether the noise takes integer values (in units of :attr:`unit`)."""
    return self.rounded or self.family == "discrete_gaussian"

  def describe(self) -> str:
    """One line: the family, the ball and the scale."""
    what = {
      "laplace": "i.i.d. Laplace noise",
      "gaussian": "i.i.d. Gaussian noise",
      "discrete_gaussian": "i.i.d. discrete Gaussian noise",
      "knorm": f"K-norm noise with the {ball_name(self.ball)}",
      "elliptic": f"elliptic Gaussian noise for the {ball_name(self.ball)}",
    }[self.family]
    rounded = ", rounded exactly to integers" if self.rounded else ""
    return f"{what} (scale {self.scale:.6g}{rounded})"

  def coordinate_sd(self) -> np.ndarray:
    """The standard deviation of each coordinate of elliptic Gaussian noise:
    ``scale sqrt(A_ii)``."""
    if self.family != "elliptic":
      raise ValueError(
        f"coordinate_sd is for elliptic Gaussian noise; got {self.family!r}."
      )
    return self.scale * np.sqrt(ellipse(self.ball).diagonal())


def ball_name(ball) -> str:
  """``"poset ball"``, a query ball's :attr:`~jaxdp.NormBall.name` (``"sum ball"``,
  ...), ``"l_inf ball"``, ``"l_2 ball"`` or ``"l_p ball"``."""
  if isinstance(ball, PosetBall):
    return "poset ball"
  if isinstance(ball, NormBall):
    return ball.name
  if ball is None:
    return "no ball"
  return "l_inf ball" if ball.p == math.inf else f"l_{ball.p:g} ball"


def private_ball(ball: Any) -> Any:
  """A copy of ``ball`` that no caller holds (a poset ball's on a fresh poset of its
  relation): a law is the key of a shared cache, hashed when the bars it describes
  are stored, so it must hold nothing another thread could change meanwhile
  (``object.__setattr__`` on the caller's ball or poset)."""
  if isinstance(ball, PosetBall):
    poset = ball.poset
    return dataclasses.replace(ball, poset=type(poset).from_key(poset.key))
  return dataclasses.replace(ball)


def _static(mech, *names):
  for name in names:
    if not _checks.is_concrete(getattr(mech, name)):
      raise ValueError(
        f"error bars need a mechanism with static parameters; {name} of {mech!r} is "
        "traced. Build the mechanism outside jit (its noise law is computed on the host)."
      )
  return [float(getattr(mech, n)) for n in names]


def check_shape(shape: Any) -> tuple[int, ...]:
  """``shape`` as a tuple of ints >= 0 (a statistic's shape), else an error naming it."""
  if not isinstance(shape, (tuple, list)):
    raise _checks.ArgTypeError(
      f"shape must be the statistic's shape, a tuple of ints such as (10,); got {shape!r}."
    )
  return tuple(_checks.check_int(n, "each entry of shape", minimum=0) for n in shape)


def noise_law(mechanism: Any, shape: tuple[int, ...] | None = None) -> NoiseLaw:
  """The noise law of ``mechanism``: a function of its parameters, never of data.

  Args:
    mechanism: a :class:`~jaxdp.PosetCountMechanism` (or
      :class:`~jaxdp.PosetCountGaussianMechanism`), a query mechanism
      (:class:`~jaxdp.SumQueryMechanism`, ...), :class:`~jaxdp.LaplaceMechanism`,
      :class:`~jaxdp.KNormMechanism`, :class:`~jaxdp.GaussianMechanism`,
      :class:`~jaxdp.ZCDPGaussianMechanism`, :class:`~jaxdp.EllipticGaussianMechanism`,
      :class:`~jaxdp.EllipticZCDPGaussianMechanism` or
      :class:`~jaxdp.DiscreteGaussianMechanism` with static (not traced) parameters.
    shape: the statistic's shape (checked whenever given); needed only by an exact
      Laplace mechanism on a grid (whose noise is widened by one grid step per entry).

  Returns:
    The :class:`NoiseLaw`.

  Raises:
    TypeError: another kind of mechanism.
    ValueError: traced parameters, or a missing or bad ``shape`` where it is needed
      (a tuple of ints >= 0).
  """
  if shape is not None:  # checked whether or not this mechanism's law needs it
    shape = check_shape(shape)
  if isinstance(mechanism, PosetCountMechanism):
    names = ("respondents",) + tuple(mechanism.poset.element_names)
    inner = noise_law(mechanism.inner, (mechanism.dim,))
    return dataclasses.replace(inner, dim=mechanism.dim, names=names)
  if isinstance(mechanism, QueryMechanism):
    label = {"sum": "column", "count": "box", "vote": "candidate"}[mechanism.kind]
    names = tuple(f"{label} {i}" for i in range(mechanism.dim))
    inner = noise_law(mechanism.inner, (mechanism.dim,))
    return dataclasses.replace(inner, dim=mechanism.dim, names=names)
  if isinstance(mechanism, LaplaceMechanism):
    eps, sens = _static(mechanism, "eps", "sensitivity")
    if not mechanism.exact:
      return NoiseLaw("laplace", sens / eps)
    grid = mechanism.grid
    if grid is not None and shape is None:
      raise ValueError(
        "shape is needed for the error bars of an exact Laplace mechanism on a grid "
        "(its noise is scaled for one grid step of slack per entry); pass the "
        "statistic's shape, e.g. shape=(10,)."
      )
    slack = 0 if grid is None else math.prod(shape)
    scale = exact_scale(sens / (grid or 1.0) + slack, eps)
    snap = 0.0 if grid is None else grid / 2  # snapping moves an entry <= half a step
    return NoiseLaw("laplace", scale, rounded=True, unit=grid or 1.0, snap=snap)
  if isinstance(mechanism, KNormMechanism):
    eps, sens = _static(mechanism, "eps", "sensitivity")
    ball = private_ball(mechanism.ball)
    scale = exact_scale(sens, eps) if mechanism.exact else sens / eps
    family = "laplace" if isinstance(ball, LpBall) and ball.p == 1 else "knorm"
    return NoiseLaw(
      family, scale, None if family == "laplace" else ball, ball.dim, mechanism.exact
    )
  if isinstance(mechanism, DiscreteGaussianMechanism):
    return NoiseLaw(
      "discrete_gaussian", math.sqrt(exact.sigma_quarters(mechanism.sigma) / 4)
    )
  if isinstance(mechanism, (EllipticGaussianMechanism, EllipticZCDPGaussianMechanism)):
    (sigma,) = _static(mechanism, "sigma")
    return NoiseLaw("elliptic", sigma, private_ball(mechanism.ball), mechanism.dim)
  if isinstance(mechanism, (GaussianMechanism, ZCDPGaussianMechanism)):
    (sigma,) = _static(mechanism, "sigma")
    return NoiseLaw("gaussian", sigma)
  raise _checks.ArgTypeError(
    f"mechanism must be a {SUPPORTED}; got {type(mechanism).__name__}."
  )
