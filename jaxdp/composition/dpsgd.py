"""Accounting for DP-SGD: T steps of the Poisson-subsampled Gaussian mechanism.

Two policies, one class each, with the same methods:

* :class:`RdpAccounting`: Rényi DP at a fixed tuple of orders (Mironov, Talwar &
  Zhang 2019), converted with Canonne, Kamath & Steinke (2020), Proposition 12
  (the conversion dp_accounting's ``compute_epsilon`` also uses). Per-step costs are
  also available traced (:meth:`RdpAccounting.step_rdp`), so a training loop can
  add them up inside jit and refuse the step that would pass the budget.
* :class:`PldAccounting`: privacy-loss distributions of both add/remove directions
  (:mod:`.subsampled_pld`), for a plan fixed in advance: the tightest figure.

References:
  M. Abadi et al., "Deep learning with differential privacy", CCS 2016.
  I. Mironov, K. Talwar, L. Zhang, arXiv:1908.10530, 2019. C. Canonne, G. Kamath,
  T. Steinke, NeurIPS 2020. Y. Zhu, J. Dong, Y.-X. Wang, AISTATS 2022.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np

from jaxdp import _checks
from jaxdp.composition.renyi import check_orders, conversion_tail, rdp_epsilon
from jaxdp.composition.subsampled import check_sampling, subsampled_gaussian_rdp
from jaxdp.composition.subsampled_pld import (
  DEFAULT_TAIL,
  PLDPair,
  product,
  subsampled_gaussian_pld,
)
from jaxdp.typing import Scalar

__all__ = ["DPSGD_ORDERS", "RdpAccounting", "PldAccounting", "dpsgd_epsilon"]

DPSGD_ORDERS = (
  1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0,
  10.0, 10.5, 12.0, 14.0, 16.0, 20.0, 24.0, 28.0, 32.0, 40.0, 48.0, 64.0, 128.0, 256.0,
)  # fmt: skip
MAX_STEPS = 2**40  # the answer of max_steps when a step costs nothing


def _check_steps(steps) -> int:
  return _checks.check_int(steps, "steps", minimum=0)


def _check_budget(eps, delta) -> tuple[float, float]:
  eps = _checks.check_positive(eps, "eps")
  delta = _checks.check_delta(delta, "delta")
  if not delta > 0:
    raise ValueError("delta must be > 0 for DP-SGD accounting; got 0.")
  return eps, delta


@dataclasses.dataclass(frozen=True)
class RdpAccounting:
  """Rényi-DP accounting of DP-SGD at fixed orders.

  Attributes:
    orders: the Rényi orders (> 1, integer or fractional), sorted on creation.
  """

  orders: tuple = DPSGD_ORDERS

  def __post_init__(self):
    object.__setattr__(self, "orders", check_orders(self.orders))

  def step_rdp(self, q: Scalar, noise_multiplier: Scalar) -> np.ndarray | jax.Array:
    """RDP of one step at each of :attr:`orders` (traced values allowed; see
    :func:`~jaxdp.composition.subsampled.subsampled_gaussian_rdp`)."""
    return subsampled_gaussian_rdp(q, noise_multiplier, self.orders)

  def epsilon(self, q: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """eps after ``steps`` steps at ``delta`` (CKS conversion at the best order)."""
    steps = _check_steps(steps)
    delta = _check_budget(1.0, delta)[1]
    rdp = steps * self.step_rdp(*check_sampling(q, noise_multiplier))
    return 0.0 if not np.any(rdp > 0) else rdp_epsilon(rdp, self.orders, delta)

  def max_steps(self, q: float, noise_multiplier: float, eps: float, delta: float) -> int:
    """The most steps whose :meth:`epsilon` is at most ``eps`` (0 if none;
    :data:`MAX_STEPS` if a step costs nothing)."""
    eps, delta = _check_budget(eps, delta)
    rdp = self.step_rdp(*check_sampling(q, noise_multiplier))
    if not np.any(rdp > 0):
      return MAX_STEPS
    # At each order, T rdp_a + tail_a <= eps; the best order allows the most steps.
    with np.errstate(divide="ignore"):
      bound = np.floor((eps - conversion_tail(self.orders, delta)) / rdp)
    steps = int(min(max(np.max(np.where(rdp > 0, bound, -1.0)), 0.0), MAX_STEPS))
    while steps > 0 and self.epsilon(q, noise_multiplier, steps, delta) > eps:
      steps -= 1  # float rounding of the closed form, either way
    while steps < MAX_STEPS and self.epsilon(q, noise_multiplier, steps + 1, delta) <= eps:
      steps += 1
    return steps


@dataclasses.dataclass(frozen=True)
class PldAccounting:
  """PLD accounting of DP-SGD for a fixed number of steps (host side).

  Attributes:
    h: the loss grid; 1e-4 matches dp_accounting's default (1e-3 is ~10x faster and,
      on the tested grid, within 0.1% of it).
    tail: the mass moved per tail and product in self-composition (it ends up as
      infinite loss or rounded-up loss, so it only loosens the figure).
  """

  h: float = 1e-4
  tail: float = DEFAULT_TAIL

  def __post_init__(self):
    if not 0 < float(self.h) < 1:
      raise ValueError(f"h (the loss grid) must be in (0, 1); got {self.h!r}.")
    if not 0 <= float(self.tail) < 1e-6:
      raise ValueError(f"tail must be in [0, 1e-6); got {self.tail!r}.")

  def pld(self, q: float, noise_multiplier: float) -> PLDPair:
    """The PLDs of one step."""
    return subsampled_gaussian_pld(q, noise_multiplier, self.h)

  def epsilon(self, q: float, noise_multiplier: float, steps: int, delta: float) -> float:
    """eps after ``steps`` steps at ``delta``, the worse of the two directions."""
    steps = _check_steps(steps)
    delta = _check_budget(1.0, delta)[1]
    if steps == 0:
      return 0.0
    return self.pld(q, noise_multiplier).self_compose(steps, self.tail).epsilon(delta)

  def max_steps(self, q: float, noise_multiplier: float, eps: float, delta: float) -> int:
    """The most steps whose :meth:`epsilon` is at most ``eps`` (0 if none;
    :data:`MAX_STEPS` if a step costs nothing). Doubles, then sets lower bits from
    the highest down, reusing the powers, so the answer's figure is computed by the
    same products as :meth:`epsilon` does."""
    eps, delta = _check_budget(eps, delta)
    pair = self.pld(q, noise_multiplier)
    if all(len(p.pmf) == 1 and p.offset == 0 and p.inf == 0 for p in pair):
      return MAX_STEPS
    tables = [[p] for p in pair]

    def fits(pair_):
      return PLDPair(*pair_).epsilon(delta) <= eps

    if not fits([t[0] for t in tables]):
      return 0
    top = 0
    while top < MAX_STEPS.bit_length() - 1:
      nxt = [product(t[-1], t[-1], self.tail) for t in tables]
      if not fits(nxt):
        break
      for t, n in zip(tables, nxt):
        t.append(n)
      top += 1
    steps, current = 1 << top, [t[-1] for t in tables]
    for b in range(top - 1, -1, -1):
      trial = [product(c, t[b], self.tail) for c, t in zip(current, tables)]
      if fits(trial):
        steps, current = steps | (1 << b), trial
    return min(steps, MAX_STEPS)


def dpsgd_epsilon(
  q: float,
  noise_multiplier: float,
  steps: int,
  delta: float,
  accountant: RdpAccounting | PldAccounting | None = None,
) -> float:
  """eps of ``steps`` DP-SGD steps (sampling rate q, noise multiplier sigma) at delta.

  Args:
    q: the Poisson sampling rate, in [0, 1].
    noise_multiplier: noise standard deviation over the l2 clip norm.
    steps: the number of steps (>= 0).
    delta: the target delta, in (0, 1).
    accountant: :class:`RdpAccounting` (the default, at :data:`DPSGD_ORDERS`) or
      :class:`PldAccounting`.

  Returns:
    eps as a Python float.
  """
  accountant = RdpAccounting() if accountant is None else accountant
  if not isinstance(accountant, (RdpAccounting, PldAccounting)):
    raise _checks.ArgTypeError(
      f"accountant must be RdpAccounting(...) or PldAccounting(...); got {accountant!r}."
    )
  return float(accountant.epsilon(q, noise_multiplier, steps, delta))
