"""Which mechanism should I use? The expected error of each count mechanism on a poset.

:func:`advise` compares the noises a poset-count release can take (the poset ball,
the l_inf and l_2 balls, Laplace and, for delta > 0, spherical and elliptic Gaussian
noise at that delta) by their expected squared error, total and per coordinate, exact
where a closed form exists (:mod:`jaxdp.reporting.moments`), and by their Monte Carlo
error after the order-consistent projection :func:`jaxdp.consistent` at assumed true
counts. Like the error bars it reads no data and spends no budget.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025,
  Section 5 (Figure 4).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax
import numpy as np

from jaxdp import _checks
from jaxdp.consistency import consistent
from jaxdp.mechanisms import (
  GaussianMechanism,
  PosetCountGaussianMechanism,
  PosetCountMechanism,
)
from jaxdp.posets import Poset
from jaxdp.reporting import moments, simulate
from jaxdp.reporting.bars import check_samples, format_table
from jaxdp.reporting.laws import noise_law
from jaxdp.reporting.query_advice import QUERY_BALLS, QueryAdvice, advise_query
from jaxdp.samplers.balls import PosetBall
from jaxdp.samplers.ellipse import has_ellipse
from jaxdp.typing import ArrayLike, KeyArray

__all__ = [
  "NOISE_LABELS",
  "Advice",
  "MechanismError",
  "advise",
  "consistent_sq_errors",
  "default_counts",
]

NOISE_LABELS = {
  "poset": "K-norm, poset ball",
  "linf": "K-norm, l_inf ball",
  "l2": "K-norm, l_2 ball",
  "laplace": "Laplace (l_1)",
  "gaussian": "Gaussian (analytic)",
  "elliptic": "Gaussian, elliptic (analytic)",
}
DEFAULT_RESPONDENTS = 10_000
MAX_COUNT = 2.0**53  # float64 holds every integer count up to here


@dataclasses.dataclass(frozen=True)
class MechanismError:
  """The expected squared error of one mechanism, raw and after consistency.

  Attributes:
    noise: ``"poset"``, ``"linf"``, ``"l2"``, ``"laplace"``, ``"gaussian"``
      (spherical) or ``"elliptic"``.
    mechanism: the mechanism compared (eps, delta and sensitivity set).
    per_coordinate: ``E[(y_i - x_i)^2]`` of the raw release, respondents first.
    stderr: its Monte Carlo standard error (0 where exact).
    method: how ``per_coordinate`` was computed.
    consistent_per_coordinate: ``E[(z_i - x_i)^2]`` after the projection, at the
      assumed counts (Monte Carlo).
    consistent_stderr: its standard error.
    consistent_total_stderr: the standard error of :attr:`consistent_total`.
    total_se: the standard error of :attr:`total` (:attr:`SquaredError.total_se
      <jaxdp.reporting.SquaredError.total_se>`); None: not known, and
      :attr:`total_stderr` adds the coordinates' errors (an upper bound).
  """

  noise: str
  mechanism: Any
  per_coordinate: np.ndarray
  stderr: np.ndarray
  method: str
  consistent_per_coordinate: np.ndarray
  consistent_stderr: np.ndarray
  consistent_total_stderr: float
  total_se: float | None = None

  @property
  def total(self) -> float:
    """``E||y - x||^2`` of the raw release."""
    return float(np.sum(self.per_coordinate))

  @property
  def total_stderr(self) -> float:
    """The standard error of :attr:`total` (the coordinates' errors are correlated:
    without :attr:`total_se` they are added, an upper bound)."""
    return moments.total_stderr(self.stderr, self.total_se)

  @property
  def consistent_total(self) -> float:
    """``E||z - x||^2`` after the projection (Monte Carlo, at the assumed counts)."""
    return float(np.sum(self.consistent_per_coordinate))


@dataclasses.dataclass(frozen=True)
class Advice:
  """What :func:`advise` found.

  Attributes:
    poset: the poset.
    eps: the privacy parameter.
    delta: the delta (0: pure DP; Gaussian noise is then not compared).
    options: one :class:`MechanismError` per mechanism, best raw error first.
    recommended: the noise with the smallest expected squared error of the raw
      release (exact, data-free).
    recommended_consistent: the noise with the smallest Monte Carlo error after the
      projection, at :attr:`assumed_counts` (None if that was not simulated).
    assumed_counts: the true counts the consistency simulation assumed.
    num_samples: simulated releases per mechanism for the consistency column.
    assumed_default: whether :attr:`assumed_counts` are :func:`default_counts`.
  """

  poset: Poset
  eps: float
  delta: float
  options: tuple[MechanismError, ...]
  recommended: str
  recommended_consistent: str | None
  assumed_counts: np.ndarray
  num_samples: int
  assumed_default: bool

  def option(self, noise: str) -> MechanismError:
    """The :class:`MechanismError` of ``noise``."""
    for o in self.options:
      if o.noise == noise:
        return o
    raise KeyError(f"no option {noise!r}; have {[o.noise for o in self.options]}.")

  def to_dict(self) -> dict:
    """A JSON-serialisable form."""
    names = ["respondents", *self.poset.element_names]
    return {
      "poset": repr(self.poset),
      "eps": self.eps,
      "delta": self.delta,
      "recommended": self.recommended,
      "recommended_after_consistency": self.recommended_consistent,
      "assumed_counts": dict(zip(names, self.assumed_counts.tolist())),
      "num_samples": self.num_samples,
      "options": [
        {
          "noise": o.noise,
          "label": NOISE_LABELS[o.noise],
          "expected_sq_error": o.total,
          "expected_sq_error_stderr": o.total_stderr,
          "method": o.method,
          "per_coordinate": dict(zip(names, o.per_coordinate.tolist())),
          "consistent_expected_sq_error": o.consistent_total,
          "consistent_stderr": o.consistent_total_stderr,
          "consistent_per_coordinate": dict(
            zip(names, o.consistent_per_coordinate.tolist())
          ),
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
          NOISE_LABELS[o.noise] + (" *" if o.noise == self.recommended else ""),
          f"{o.total:.6g}{se}",
          f"{math.sqrt(o.total / len(o.per_coordinate)):.4g}",
          f"{o.consistent_total:.4g} +- {o.consistent_total_stderr:.2g}",
          o.method,
        )
      )
    head = (
      f"Expected squared error of a release of {self.poset!r} at eps = {self.eps:g}"
      + (f", delta = {self.delta:g}" if self.delta else "")
      + " (sum over the respondent count and every question):"
    )
    table = format_table(
      ("mechanism", "E||y - x||^2", "rms/coord", "after consistency", "method"), rows
    )
    n = int(self.assumed_counts[0])
    foot = (
      f"* recommended: {NOISE_LABELS[self.recommended]} (the smallest expected squared "
      "error of the raw release; it does not depend on the data)."
    )
    best, second = self.options[0], self.options[1] if len(self.options) > 1 else None
    if second is not None and second.total - best.total < 3 * math.hypot(
      best.total_stderr, second.total_stderr
    ):
      foot += f" Within Monte Carlo error of {NOISE_LABELS[second.noise]}."
    if self.recommended_consistent is None:
      foot += "\nAfter consistency: not simulated."
    else:
      foot += (
        f"\nAfter consistency: Monte Carlo over {self.num_samples:,} releases at assumed "
        f"true counts ({n:,} respondents"
        + (", each question yes for half of those eligible" if self.assumed_default else "")
        + f"); smallest there: {NOISE_LABELS[self.recommended_consistent]}."
      )
    return f"{head}\n{table}\n{foot}"


def default_counts(poset: Poset, respondents: int = DEFAULT_RESPONDENTS) -> np.ndarray:
  """Feasible counts of a typical survey: ``n`` respondents, and each question
  answered yes by half of those who answered yes to everything it requires:
  ``c_q = n 2^-(1 + #questions q requires)``, so deep follow-ups are rare."""
  above = np.asarray(poset.order).sum(axis=1)  # q itself and everything it requires
  return np.concatenate([[float(respondents)], respondents * 0.5**above])


def check_counts(poset: Poset, counts) -> np.ndarray:
  """``counts`` as a feasible float64 ``(d + 1,)`` vector, else a ValueError naming the
  first broken constraint."""
  raw = np.asarray(counts)
  if not (np.issubdtype(raw.dtype, np.integer) or np.issubdtype(raw.dtype, np.floating)):
    raise _checks.ArgTypeError(
      f"assumed_counts must hold numbers (true counts); got dtype {raw.dtype}."
    )
  x = raw.astype(np.float64)
  if x.shape != (poset.d + 1,):
    raise ValueError(
      f"assumed_counts must have shape ({poset.d + 1},) (respondents, then one count "
      f"per question); got {x.shape}."
    )
  bad = ~(np.isfinite(x) & (x >= 0) & (x <= MAX_COUNT))
  if np.any(bad):
    i = int(np.argmax(bad))
    raise ValueError(
      "assumed_counts must be finite, >= 0 and at most 2**53 (float64 holds every "
      f"count exactly up to it); got {float(x[i])!r} at index {i}."
    )
  names = poset.element_names
  if np.any(x[1:] > x[0]):
    q = int(np.argmax(x[1:] > x[0]))
    raise ValueError(f"assumed_counts: {names[q]} exceeds the respondent count.")
  req = np.argwhere(np.asarray(poset.order) & (x[1:, None] > x[None, 1:]))
  if req.size:
    q, p = (int(i) for i in req[0])
    raise ValueError(
      f"assumed_counts are not consistent: {names[q]} requires {names[p]} but has "
      "the larger count."
    )
  return x


def consistent_sq_errors(x: np.ndarray, noise: np.ndarray, poset: Poset) -> np.ndarray:
  """``(consistent(x + noise) - x)^2`` per draw and coordinate, computed in float64.

  The counts can be far larger than the noise (up to 10^12 respondents against
  noise of order 1/eps): in float32 ``x + noise`` and the projection would round
  to ulps of the counts. Here the sum, the projection and the difference are
  float64, and the certificate's tolerance is set relative to the noise (about
  1e-3 of its rms, never below float64 rounding), so the projection is accurate to
  a small fraction of the noise whatever the counts.
  """
  y = x + noise
  rms = float(np.sqrt(np.mean(np.square(noise)))) or 1.0
  top = max(1.0, float(np.max(np.abs(y))))
  floor = 64.0 * math.sqrt(x.shape[-1]) * float(np.finfo(np.float64).eps)
  tol = min(1e-8, max(floor, 1e-3 * rms / top))
  with jax.enable_x64(True):
    z = np.asarray(consistent(np.asarray(y, np.float64), poset, tol=tol), np.float64)
  return (z - x) ** 2


def _mechanisms(poset, eps, delta):
  out = {
    n: PosetCountMechanism(poset, eps, noise=n) for n in ("poset", "linf", "l2", "laplace")
  }
  if delta > 0:
    dim = poset.d + 1  # ||(1, 1_F)||_2 <= sqrt(d + 1)
    out["gaussian"] = GaussianMechanism(eps, delta, math.sqrt(dim), calibration="analytic")
    if has_ellipse(PosetBall(poset)):
      out["elliptic"] = PosetCountGaussianMechanism(poset, eps, delta)
  return out


def advise(
  poset: Poset | Any,
  eps: float,
  delta: float = 0.0,
  *,
  assumed_counts: ArrayLike | None = None,
  key: KeyArray | None = None,
  num_samples: int | None = None,
  consistency: bool = True,
) -> Advice | QueryAdvice:
  """The expected error of each count mechanism on ``poset``, and a recommendation.

  Given a query ball (:class:`~jaxdp.SumBall`, :class:`~jaxdp.CountBall`,
  :class:`~jaxdp.VoteBall`) instead of a poset, it compares the query's mechanisms
  (:func:`~jaxdp.reporting.query_advice.advise_query`): there is no consistency
  simulation, so ``assumed_counts`` must be None and ``consistency`` is not used.

  Args:
    poset: the questionnaire's :class:`~jaxdp.Poset`, or a query ball.
    eps: the privacy parameter of the release.
    delta: 0 for pure DP; > 0 adds Gaussian noise at that delta (analytic
      calibration) to the comparison: spherical (l_2 sensitivity sqrt(d + 1)) and,
      for posets of at most :data:`~jaxdp.samplers.ellipse.MAX_ELLIPSE_FILTERS`
      filters, elliptic (:class:`~jaxdp.PosetCountGaussianMechanism`).
    assumed_counts: true counts ``(n, c_1, ..., c_d)`` for the consistency
      simulation (default :func:`default_counts`: 10,000 respondents, each question
      yes for half of those eligible). The raw errors do not depend on them.
    key: the simulations' PRNG key (default: a fixed public key).
    num_samples: simulated releases per mechanism (consistency), and uniform points
      of a poset ball too large to enumerate (default 4,000; fewer for long
      questionnaires, at least 500 and at most 2^18 simulated values: 870 for 300
      questions, whose projections dominate the run time).
    consistency: False skips the consistency simulation (its columns are NaN and
      :attr:`Advice.recommended_consistent` is None); for a poset ball small enough
      to enumerate, every error is then exact and nothing is compiled.

  Returns:
    :class:`Advice` (print it for a table); for a query ball a
    :class:`~jaxdp.reporting.query_advice.QueryAdvice`.

  Raises:
    TypeError: ``poset`` is not a :class:`~jaxdp.Poset` or a query ball.
    ValueError: a bad eps, delta, count vector or sample count.
  """
  if type(poset) in QUERY_BALLS:
    if assumed_counts is not None:
      raise ValueError(
        f"assumed_counts is for poset counts (the consistency simulation); a query "
        f"({poset!r}) has none. Drop assumed_counts."
      )
    return advise_query(poset, eps, delta, key=key, num_samples=num_samples)
  if not isinstance(poset, Poset):
    raise _checks.ArgTypeError(
      "poset must be a jaxdp.Poset or a query ball (SumBall, CountBall, VoteBall); got "
      f"{type(poset).__name__}."
    )
  eps = float(_checks.check_positive(eps, "eps"))
  if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 <= delta < 1:
    raise ValueError(f"delta must be a number in [0, 1) (0: pure DP); got {delta!r}.")
  if num_samples is None:
    num_samples = min(4_000, max(500, (1 << 18) // (poset.d + 1)))
  n = check_samples(num_samples, poset.d + 1)
  if not isinstance(consistency, bool):
    raise _checks.ArgTypeError(f"consistency must be True or False; got {consistency!r}.")
  given = assumed_counts is not None
  x = check_counts(poset, assumed_counts) if given else default_counts(poset)
  key = simulate.simulation_key(key)
  dim = poset.d + 1
  options = []
  for i, (noise, mech) in enumerate(_mechanisms(poset, eps, float(delta)).items()):
    law = noise_law(mech)
    k_moment, k_release = jax.random.split(jax.random.fold_in(key, i))
    raw = moments.squared_error(law, dim, key=k_moment, num_samples=n)
    if consistency:
      err = consistent_sq_errors(x, simulate.noise_draws(k_release, law, n, dim), poset)
      cons = err.mean(axis=0), err.std(axis=0, ddof=1) / math.sqrt(n)
      cons_se = float(err.sum(axis=1).std(ddof=1) / math.sqrt(n))
    else:
      cons, cons_se = (np.full(dim, np.nan), np.full(dim, np.nan)), math.nan
    options.append(
      MechanismError(
        noise,
        mech,
        raw.per_coordinate,
        raw.stderr,
        raw.method,
        *cons,
        cons_se,
        raw.total_stderr,
      )
    )
  options.sort(key=lambda o: o.total)
  best_consistent = (
    min(options, key=lambda o: o.consistent_total).noise if consistency else None
  )
  return Advice(
    poset,
    eps,
    float(delta),
    tuple(options),
    options[0].noise,
    best_consistent,
    x,
    n,
    not given,
  )
