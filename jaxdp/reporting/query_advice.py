"""Which noise for a sum, count or vote query? The expected error of each.

:func:`advise_query` compares the noises a query release can take (K-norm noise with
the query's own ball, the l_inf and l_2 balls, Laplace and, for delta > 0, Gaussian
noise, spherical and elliptic, each with its correct sensitivity) by their expected
squared error, total and per coordinate: exact where a closed form exists
(:mod:`jaxdp.reporting.moments`), else Monte Carlo from the ball's exact sampler,
with its standard error.
:func:`jaxdp.advise` calls it when given a query ball. It reads no data and spends no
budget.

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm
  and elliptic Gaussian noise", COLT 2024.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from jaxdp import _checks
from jaxdp.mechanisms import (
  CountQueryMechanism,
  EllipticGaussianMechanism,
  GaussianMechanism,
  SumQueryMechanism,
  VoteQueryMechanism,
)
from jaxdp.reporting import moments, simulate
from jaxdp.reporting.bars import check_samples, format_table
from jaxdp.reporting.laws import noise_law
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall
from jaxdp.typing import KeyArray

__all__ = ["QUERY_BALLS", "QueryAdvice", "QueryOption", "advise_query", "query_mechanisms"]

QUERY_BALLS = (SumBall, CountBall, VoteBall)
LABELS = {
  "linf": "K-norm, l_inf ball",
  "l2": "K-norm, l_2 ball",
  "laplace": "Laplace (l_1)",
  "gaussian": "Gaussian (analytic)",
  "elliptic": "elliptic Gaussian (analytic)",
}


@dataclasses.dataclass(frozen=True)
class QueryOption:
  """The expected squared error of one mechanism for a query.

  Attributes:
    noise: ``"ball"``, ``"linf"``, ``"l2"``, ``"laplace"``, ``"gaussian"`` or
      ``"elliptic"``.
    label: a readable name (``"K-norm, count ball"``, ...).
    mechanism: the mechanism compared.
    per_coordinate: ``E[(y_i - x_i)^2]`` of each total.
    stderr: its Monte Carlo standard error (0 where exact).
    method: how ``per_coordinate`` was computed.
    total_se: the standard error of :attr:`total` (None: not known, and
      :attr:`total_stderr` adds the coordinates' errors, an upper bound).
  """

  noise: str
  label: str
  mechanism: Any
  per_coordinate: np.ndarray
  stderr: np.ndarray
  method: str
  total_se: float | None = None

  @property
  def total(self) -> float:
    """``E||y - x||^2``."""
    return float(np.sum(self.per_coordinate))

  @property
  def total_stderr(self) -> float:
    """The standard error of :attr:`total` (the coordinates' errors are correlated:
    without :attr:`total_se` they are added, an upper bound)."""
    return moments.total_stderr(self.stderr, self.total_se)


@dataclasses.dataclass(frozen=True)
class QueryAdvice:
  """What :func:`advise_query` found.

  Attributes:
    ball: the query's ball (:class:`~jaxdp.SumBall`, ...).
    eps: the privacy parameter.
    delta: the delta (0: pure DP; Gaussian noise is then not compared).
    options: one :class:`QueryOption` per mechanism, smallest error first.
    recommended: the noise with the smallest expected squared error.
  """

  ball: Any
  eps: float
  delta: float
  options: tuple[QueryOption, ...]
  recommended: str

  def option(self, noise: str) -> QueryOption:
    """The :class:`QueryOption` of ``noise``."""
    for o in self.options:
      if o.noise == noise:
        return o
    raise KeyError(f"no option {noise!r}; have {[o.noise for o in self.options]}.")

  def to_dict(self) -> dict:
    """A JSON-serialisable form."""
    return {
      "query": repr(self.ball),
      "eps": self.eps,
      "delta": self.delta,
      "recommended": self.recommended,
      "options": [
        {
          "noise": o.noise,
          "label": o.label,
          "expected_sq_error": o.total,
          "expected_sq_error_stderr": o.total_stderr,
          "method": o.method,
          "per_coordinate": o.per_coordinate.tolist(),
        }
        for o in self.options
      ],
    }

  def __str__(self) -> str:
    rows = []
    for o in self.options:
      se = f" +- {o.total_stderr:.2g}" if o.total_stderr else ""
      rows.append(
        (
          o.label + (" *" if o.noise == self.recommended else ""),
          f"{o.total:.6g}{se}",
          f"{math.sqrt(o.total / len(o.per_coordinate)):.4g}",
          o.method,
        )
      )
    head = (
      f"Expected squared error of a release of the {self.ball.name} query "
      f"{self.ball!r} at eps = {self.eps:g}"
      + (f", delta = {self.delta:g}" if self.delta else "")
      + " (sum over the totals):"
    )
    table = format_table(("mechanism", "E||y - x||^2", "rms/coord", "method"), rows)
    best = self.options[0]
    foot = (
      f"* recommended: {best.label} (the smallest expected squared error; it does not "
      "depend on the data)."
    )
    if len(self.options) > 1:
      second = self.options[1]
      if second.total - best.total < 3 * math.hypot(best.total_stderr, second.total_stderr):
        foot += f" Within Monte Carlo error of {second.label}."
    return f"{head}\n{table}\n{foot}"


def query_mechanisms(ball, eps, delta: float = 0.0) -> dict[str, Any]:
  """The mechanisms compared for ``ball``'s query, by noise name."""
  if isinstance(ball, VoteBall):
    out = {
      n: VoteQueryMechanism(ball.d, eps, noise=n) for n in ("ball", "linf", "l2", "laplace")
    }
  else:
    cls = SumQueryMechanism if isinstance(ball, SumBall) else CountQueryMechanism
    out = {n: cls(ball.d, ball.k, eps, noise=n) for n in ("ball", "linf", "l2", "laplace")}
  if delta > 0:
    l2 = out["l2"].inner.sensitivity
    out["gaussian"] = GaussianMechanism(eps, delta, l2, calibration="analytic")
    out["elliptic"] = EllipticGaussianMechanism(ball, eps, delta)
  return out


def advise_query(
  ball: Any,
  eps: float,
  delta: float = 0.0,
  *,
  key: KeyArray | None = None,
  num_samples: int | None = None,
) -> QueryAdvice:
  """The expected error of each mechanism for the query of ``ball``.

  Args:
    ball: a :class:`~jaxdp.SumBall`, :class:`~jaxdp.CountBall` or
      :class:`~jaxdp.VoteBall` (the query's d and k).
    eps: the privacy parameter.
    delta: 0 for pure DP; > 0 adds spherical Gaussian noise (analytic
      calibration, the query's l_2 sensitivity) and elliptic Gaussian noise
      (:class:`~jaxdp.EllipticGaussianMechanism`) to the comparison.
    key: the simulation's PRNG key (default: a fixed public key).
    num_samples: uniform points of the ball where its second moment has no closed
      form (default 20,000, at least 100).

  Returns:
    :class:`QueryAdvice` (print it for a table).

  Raises:
    TypeError: ``ball`` is not a query ball.
    ValueError: a bad eps, delta or sample count.
  """
  if type(ball) not in QUERY_BALLS:
    raise _checks.ArgTypeError(
      f"ball must be a jaxdp.SumBall, CountBall or VoteBall; got {type(ball).__name__}."
    )
  eps = float(_checks.check_positive(eps, "eps"))
  if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1:
    raise ValueError(f"delta must be a number in [0, 1) (0: pure DP); got {delta!r}.")
  n = check_samples(20_000 if num_samples is None else num_samples, ball.dim)
  key = simulate.simulation_key(key)
  options = []
  for i, (noise, mech) in enumerate(query_mechanisms(ball, eps, float(delta)).items()):
    err = moments.squared_error(
      noise_law(mech), ball.dim, key=jax.random.fold_in(key, i), num_samples=n
    )
    label = f"K-norm, {ball.name}" if noise == "ball" else LABELS[noise]
    options.append(
      QueryOption(
        noise, label, mech, err.per_coordinate, err.stderr, err.method, err.total_stderr
      )
    )
  options.sort(key=lambda o: o.total)
  return QueryAdvice(ball, eps, float(delta), tuple(options), options[0].noise)
