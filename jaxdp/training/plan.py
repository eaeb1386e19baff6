"""The static side of DP training: clip norm, noise, sampling, budget and accounting.

A :class:`TrainingPlan` is fixed when :func:`jaxdp.training.dp_aggregate` is built. Its
accounting policy (a class of :mod:`jaxdp.composition`) gives, on the host in float64,
the number of steps of the Poisson-subsampled Gaussian mechanism that fit the budget,
``max_steps``: the largest T whose (eps, delta) after T steps is within
``(eps_budget, delta)``. Inside ``jit`` the transformation then only compares its step
count with ``max_steps`` (an integer comparison: no float rounding can let a step
past the budget). The privacy spent so far is :meth:`TrainingPlan.epsilon` of the
step count.

Each step is one Poisson-subsampled Gaussian mechanism: the sum of per-example
gradients clipped to l2 norm C (sensitivity C under adding or removing one example)
plus N(0, (sigma C)^2) noise per coordinate, on a batch where each example is present
independently with probability q (Abadi et al. 2016; Mironov, Talwar & Zhang 2019 for
the RDP of the subsampled Gaussian; the PLD of Koskela et al. 2020 and Doroshenko et
al. 2022 for the fixed plan).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from jaxdp import _checks
from jaxdp._identity import FieldIdentity
from jaxdp.composition import search
from jaxdp.composition.dpsgd import PldAccounting, RdpAccounting
from jaxdp.training.clipping import check_clip
from jaxdp.training.sampling import check_rate

__all__ = ["TrainingPlan", "check_policy", "noise_multiplier_for"]

_INT32_MAX = 2**31 - 1


@dataclasses.dataclass(frozen=True, eq=False)
class TrainingPlan(FieldIdentity):
  """What a DP training run is allowed to do (hashable: a static pytree field).

  Build it with :meth:`create` (which checks every argument and computes
  ``max_steps``). The plan is a static field of the state the compiled step takes,
  shared by every run in the process, so it compares and hashes its fields' types
  with their values (:class:`~jaxdp._identity.FieldIdentity`): a plan
  whose noise multiplier was replaced (``object.__setattr__``) by a float subclass
  that compares as another never shares an honest plan's compiled step.

  Attributes:
    l2_norm_clip: C, the l2 bound on each example's gradient.
    noise_multiplier: sigma; the noise on the sum has standard deviation sigma C.
    sampling_rate: q, each example's probability of joining a step's batch.
    dataset_size: n; the noisy sum is divided by the expected batch size q n.
    eps_budget: the total eps of the run's (eps, delta)-DP budget.
    delta: its delta.
    accounting: the accounting policy (``RdpAccounting`` or ``PldAccounting``).
    max_steps: how many steps fit the budget under that policy.
  """

  l2_norm_clip: float
  noise_multiplier: float
  sampling_rate: float
  dataset_size: int
  eps_budget: float
  delta: float
  accounting: object
  max_steps: int

  @classmethod
  def create(
    cls,
    l2_norm_clip: float,
    noise_multiplier: float,
    sampling_rate: float,
    dataset_size: int,
    eps_budget: float,
    delta: float,
    accounting: RdpAccounting | PldAccounting,
  ) -> TrainingPlan:
    """A checked plan with its ``max_steps``.

    Raises:
      ValueError: an argument is out of range (the message names it), or not even
        one step fits the budget.
    """
    clip = check_clip(l2_norm_clip)
    sigma = _checks.check_positive(noise_multiplier, "noise_multiplier")
    q = check_rate(sampling_rate)
    n = _checks.check_int(dataset_size, "dataset_size", minimum=1)
    eps = _checks.check_eps(eps_budget, "eps_budget")
    delta = _checks.check_delta(delta, "delta")
    if not delta > 0:
      raise ValueError(
        "delta must be > 0: the Gaussian mechanism gives (eps, delta)-DP with "
        "delta > 0 only; a typical choice is below 1 / dataset_size."
      )
    if not clip * sigma < 2.0**64:  # the noise's standard deviation, in float32
      raise ValueError(
        f"noise_multiplier * l2_norm_clip must be below 2**64; got {sigma} * {clip}."
      )
    if not q * n >= 2.0**-64:  # the update is divided by q n, in float32
      raise ValueError(
        f"sampling_rate * dataset_size must be at least 2**-64; got {q} * {n}."
      )
    check_policy(accounting)
    steps = min(int(accounting.max_steps(q, sigma, eps, delta)), _INT32_MAX)
    if steps < 1:
      raise ValueError(
        f"not even one step fits eps_budget={eps} at delta={delta} with "
        f"noise_multiplier={sigma} and sampling_rate={q}: raise the budget or the "
        "noise multiplier, or lower the sampling rate."
      )
    return cls(clip, sigma, q, n, eps, delta, accounting, steps)

  @property
  def expected_batch_size(self) -> float:
    """q n, what the noisy sum of clipped gradients is divided by."""
    return self.sampling_rate * self.dataset_size

  def epsilon(self, steps: int) -> float:
    """The eps of (eps, delta)-DP after ``steps`` answered steps (host, float64);
    0 before the first step."""
    steps = _checks.check_int(steps, "steps", minimum=0)
    if steps == 0:
      return 0.0
    eps = float(
      self.accounting.epsilon(self.sampling_rate, self.noise_multiplier, steps, self.delta)
    )
    return eps if math.isfinite(eps) else math.inf


def check_policy(accounting: Any) -> RdpAccounting | PldAccounting:
  """``accounting`` if it is exactly ``RdpAccounting`` or ``PldAccounting`` (it decides
  how many steps run: a look-alike or a subclass could claim any number)."""
  if type(accounting) not in (RdpAccounting, PldAccounting):  # an allowlist
    raise _checks.ArgTypeError(
      "accounting must be jaxdp.RdpAccounting(...) or jaxdp.PldAccounting(...) "
      f"(exactly, not a subclass: it decides how many steps run); got {accounting!r}."
    )
  return accounting


def noise_multiplier_for(
  sampling_rate: float,
  steps: int,
  eps_budget: float,
  delta: float,
  accounting: RdpAccounting | PldAccounting,
) -> float:
  """The smallest noise multiplier (to a relative 1e-4, from above) for which
  ``steps`` Poisson-subsampled Gaussian steps at rate q fit ``(eps_budget, delta)``
  under ``accounting``: a plan built with it has ``max_steps >= steps``.

  Raises:
    ValueError: an argument is out of range.
  """
  q = check_rate(sampling_rate)
  check_policy(accounting)
  steps = _checks.check_int(steps, "steps", minimum=1)
  eps = _checks.check_eps(eps_budget, "eps_budget")
  delta = _checks.check_delta(delta, "delta")
  fits = lambda log_s: accounting.epsilon(q, math.exp(log_s), steps, delta) <= eps
  hi = 0.0
  while not fits(hi):
    hi += math.log(2)
    if hi > math.log(2.0**40):
      raise ValueError(
        f"no noise multiplier up to 2**40 fits {steps} steps at sampling_rate={q} in "
        f"eps_budget={eps}, delta={delta}."
      )
  lo = hi - math.log(2)
  while fits(lo) and lo > math.log(2.0**-20):
    hi, lo = lo, lo - math.log(2)
  return math.exp(search.bisect(fits, hi, lo, steps=14))  # the side that fits
