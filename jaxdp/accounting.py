"""A functional privacy accountant that threads through jit-compiled query code.

:class:`Accountant` is a pytree: its budgets, group size and composition rule are
static fields (known at trace time; changing them retraces), while the spent
(eps, delta), its PRNG key and the refusal count are leaves. :func:`release` takes an
accountant, a mechanism and data and returns a new accountant and the output; nothing
mutates, so it works under ``jit``, ``vmap`` (a batch of accountants), ``lax.scan``
and across repeated jitted calls.

The rules, from Dwork's chapter "Postprocessing, Composition and Group Privacy":

* Composition (Lemma 2.5): epsilons and deltas add, also when later queries are
  chosen from earlier answers and across datasets for people present in several.
* Budget (Lemma 2.6): the curator answers until the first round whose cost would take
  the total past the budget, and refuses that round. The decision depends only on
  the epsilons, never on the data, so refusing discloses nothing. A refused output
  is a data-independent fill (NaN), the spent budget is unchanged and the refusal
  count grows by one. Later, cheaper rounds may still be answered.
* Group privacy (Lemma 2.8): with ``group_size = k`` every release is charged its
  cost for groups of k (k eps for pure DP), resolved at trace time.
* Postprocessing (Proposition 2.4): anything computed from released outputs without
  touching the data again is free; :func:`postprocess` marks such code.

The accountant owns its key and splits it on every release, so no two releases
share noise. ``jax.random`` is not a cryptographic generator: see the README.

References:
  C. Dwork, "Differential privacy", ICALP 2006, and the chapter on postprocessing,
  composition and group privacy. C. Dwork, G. Rothblum, S. Vadhan, "Boosting and
  differential privacy", FOCS 2010 (advanced composition). L. Wasserman, S. Zhou,
  "A statistical framework for differential privacy", JASA 2010.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import threading
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.mechanisms import LaplaceMechanism, group_cost

__all__ = [
    "Accountant", "BudgetExceededError", "ReleaseRefusedError", "release",
    "release_parallel", "raise_if_refused", "postprocess", "plan", "Plan",
    "advanced_composition", "hypothesis_test_bound", "group_epsilon",
    "eps_for_group", "Curator",
]

COMPOSITIONS = ("basic", "advanced")


class BudgetExceededError(ValueError):
  """A single release costs more than the whole budget (known at trace time)."""


class ReleaseRefusedError(RuntimeError):
  """Raised by :func:`raise_if_refused` for a refused (NaN-filled) output."""


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Accountant:
  """Privacy budget state. Build with :meth:`create`.

  Static fields: ``eps_budget``, ``delta_budget``, ``group_size``, ``composition``,
  ``max_releases``, ``delta_prime`` and, for advanced composition, the per-release
  caps ``eps_cap`` and ``delta_cap``. Leaves: ``spent_eps``, ``spent_delta``,
  ``key``, ``refusals``, ``answered``.

  Spending is accumulated in the default float dtype (float32 unless x64 is
  enabled) and compared with the budget without tolerance.
  """

  spent_eps: jax.Array
  spent_delta: jax.Array
  key: jax.Array
  refusals: jax.Array
  answered: jax.Array
  eps_budget: float = dataclasses.field(metadata=dict(static=True), default=1.0)
  delta_budget: float = dataclasses.field(metadata=dict(static=True), default=0.0)
  group_size: int = dataclasses.field(metadata=dict(static=True), default=1)
  composition: str = dataclasses.field(metadata=dict(static=True), default="basic")
  max_releases: int = dataclasses.field(metadata=dict(static=True), default=0)
  delta_prime: float = dataclasses.field(metadata=dict(static=True), default=0.0)
  eps_cap: float = dataclasses.field(metadata=dict(static=True), default=math.inf)
  delta_cap: float = dataclasses.field(metadata=dict(static=True), default=math.inf)

  def __post_init__(self):
    for name in ("eps_budget", "delta_budget", "delta_prime"):
      if not isinstance(getattr(self, name), (int, float)) or isinstance(
          getattr(self, name), bool):
        raise ValueError(f"{name} must be a static Python number; got "
                         f"{getattr(self, name)!r}.")

  @classmethod
  def create(cls, eps_budget, *, delta_budget=0.0, group_size: int = 1, key=None,
             composition: str = "basic", max_releases: int | None = None,
             delta_prime: float = 0.0) -> "Accountant":
    """A fresh accountant.

    Args:
      eps_budget: total epsilon allowed (finite, > 0).
      delta_budget: total delta allowed (>= 0, < 1).
      group_size: size k of the groups to protect; every release is charged its
        group cost (k eps for pure DP).
      key: PRNG key the accountant owns and splits. ``None`` seeds from the
        operating system's entropy (``os.urandom``).
      composition: ``"basic"`` (Lemma 2.5, epsilons add; Lemma 2.6 refusals) or
        ``"advanced"`` (Dwork-Rothblum-Vadhan). Advanced composition needs the
        number of releases k and one fixed per-release eps declared in advance, so
        the accountant derives a per-release cap: the largest eps* with
        ``advanced_composition(eps*, delta*, k, delta_prime)`` within the budget
        (or budget / k if that is larger), delta* = (delta_budget - delta') / k.
        It answers at most k releases, each costing at most the caps.
      max_releases: for advanced composition, the number k of releases declared in
        advance.
      delta_prime: for advanced composition, the slack delta' > 0.

    Returns:
      The :class:`Accountant`.
    """
    eps_budget = _checks.check_positive(eps_budget, "eps_budget")
    delta_budget = _check_delta(delta_budget, "delta_budget")
    group_size = _checks.check_int(group_size, "group_size", minimum=1)
    if composition not in COMPOSITIONS:
      raise ValueError(f"composition must be one of {COMPOSITIONS}; got {composition!r}.")
    if composition == "advanced":
      if max_releases is None:
        raise ValueError("composition='advanced' needs max_releases (k, declared in "
                         "advance).")
      max_releases = _checks.check_int(max_releases, "max_releases", minimum=1)
      delta_prime = _checks.check_positive(delta_prime, "delta_prime",
                                           hint="Advanced composition needs delta' > 0.")
      if delta_prime > delta_budget:
        raise ValueError(
            f"delta_prime ({delta_prime}) must not exceed delta_budget "
            f"({delta_budget}); advanced composition spends k delta + delta'.")
    else:
      max_releases = 0 if max_releases is None else _checks.check_int(
          max_releases, "max_releases", minimum=0)
      delta_prime = 0.0
    if key is None:
      key = jax.random.key(int.from_bytes(os.urandom(8), "little") >> 1)
    else:
      _checks.check_key(key)
      if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.wrap_key_data(key)
    eps_cap, delta_cap = math.inf, math.inf
    if composition == "advanced":
      eps_cap, delta_cap = _advanced_caps(eps_budget, delta_budget, max_releases,
                                          delta_prime)
    f = jnp.result_type(float)
    return cls(spent_eps=jnp.zeros((), f), spent_delta=jnp.zeros((), f), key=key,
               refusals=jnp.zeros((), jnp.int32), answered=jnp.zeros((), jnp.int32),
               eps_budget=eps_budget, delta_budget=delta_budget,
               group_size=group_size, composition=composition,
               max_releases=max_releases, delta_prime=delta_prime, eps_cap=eps_cap,
               delta_cap=delta_cap)

  def remaining(self):
    """``(eps, delta)`` left under basic composition."""
    return self.eps_budget - self.spent_eps, self.delta_budget - self.spent_delta

  def guarantee(self):
    """The ``(eps, delta)`` guarantee of everything this accountant may answer.

    Basic composition: the spent totals. Advanced: the bound for k releases at the
    per-release caps (advanced or basic composition, whichever is smaller).
    """
    if self.composition == "advanced":
      k = self.max_releases
      adv = advanced_composition(self.eps_cap, self.delta_cap, k, self.delta_prime)
      return min(adv, (k * self.eps_cap, k * self.delta_cap))
    return self.spent_eps, self.spent_delta


def release(acct: Accountant, mech, data):
  """Charges ``mech``'s cost to ``acct`` and returns ``(new_acct, output)``.

  The charge is ``mech.cost(acct.group_size)``. If it would take the total past the
  budget, the release is refused (Lemma 2.6): the output is NaN with the mechanism's
  output shape, spent is unchanged and ``refusals`` grows by one. The decision uses
  only costs, never the data.

  Args:
    acct: the :class:`Accountant`.
    mech: a mechanism (see :mod:`jaxdp.mechanisms`).
    data: the mechanism's input.

  Returns:
    ``(acct, output)``.

  Raises:
    BudgetExceededError: when the cost is known at trace time and exceeds the whole
      budget (or the advanced-composition bound for one release), before any data
      is read.
  """
  ok, sub, acct = _spend(acct, *mech.cost(acct.group_size))
  out = mech.randomize(sub, data)
  return acct, jax.tree_util.tree_map(lambda o: jnp.where(ok, o, jnp.nan), out)


def release_parallel(acct: Accountant, pairs):
  """Releases several mechanisms on **disjoint** parts of the data at the cost of one.

  Parallel composition: when each individual's data is in at most one part, the
  joint release costs the maximum of the parts' costs. Disjointness is the
  caller's responsibility (e.g. rows split by a public attribute).

  Args:
    acct: the accountant.
    pairs: a sequence of ``(mech, data_part)``.

  Returns:
    ``(acct, outputs)`` with outputs a tuple, all NaN if refused.
  """
  costs = [m.cost(acct.group_size) for m, _ in pairs]
  if not costs:
    raise ValueError("pairs must hold at least one (mechanism, data) pair.")
  ok, sub, acct = _spend(acct, _max([c[0] for c in costs]), _max([c[1] for c in costs]))
  keys = jax.random.split(sub, len(pairs))
  return acct, tuple(jnp.where(ok, m.randomize(k, x), jnp.nan)
                     for k, (m, x) in zip(keys, pairs))


def raise_if_refused(output):
  """Outside jit: raises :class:`ReleaseRefusedError` if ``output`` is a refusal fill.

  Returns the output unchanged otherwise. (A refused output is all NaN; a released
  one is never NaN for finite data.)
  """
  leaves = jax.tree_util.tree_leaves(output)
  if leaves and all(bool(jnp.all(jnp.isnan(x))) for x in leaves):
    raise ReleaseRefusedError(
        "the release was refused: its cost would exceed the remaining privacy budget "
        "(Dwork, Lemma 2.6).")
  return output


def postprocess(fn: Callable, *outputs, **kwargs):
  """Applies ``fn`` to released outputs; costs nothing.

  Proposition 2.4 (closure under postprocessing): if M is eps-DP then f(M(x)) is
  eps-DP for any f that does not look at the data again. ``fn`` must only use the
  released outputs (and public information), never the raw data.
  """
  return fn(*outputs, **kwargs)


# ------------------------------------------------------------------ planning
class Plan(NamedTuple):
  """What a query function would spend: totals and one row per release."""
  eps: float
  delta: float
  releases: tuple  # ((eps, delta, refused), ...)

  @property
  def refused(self) -> tuple:
    return tuple(i for i, r in enumerate(self.releases) if r[2])


_PLAN = threading.local()


def plan(fn: Callable, acct: Accountant, *args, **kwargs) -> Plan:
  """Traces ``fn(acct, *args)`` abstractly and reports what it would spend.

  No data is read: arrays in ``args`` are replaced by their shapes. Costs must be
  static (Python floats) for the report; the refusal rule is applied in order as
  :func:`release` would.

  Returns:
    A :class:`Plan` with the totals it would spend and, per release, its cost and
    whether it would be refused.
  """
  # The accountant's own dtype and rule (_allowed), so plan and release agree.
  state = {"eps": np.asarray(acct.spent_eps), "delta": np.asarray(acct.spent_delta),
           "answered": int(acct.answered)}
  rows = []
  leaves, treedef = jax.tree_util.tree_flatten((args, kwargs))
  is_array = [hasattr(x, "shape") and hasattr(x, "dtype") for x in leaves]
  abstract = [jax.ShapeDtypeStruct(x.shape, x.dtype) for x, a in zip(leaves, is_array)
              if a]

  def run(*arrays):
    it = iter(arrays)
    full = [next(it) if a else x for x, a in zip(leaves, is_array)]
    a, k = jax.tree_util.tree_unflatten(treedef, full)
    return fn(acct, *a, **k)

  _PLAN.state = (acct, state, rows)
  try:
    # disable_jit: jitted helpers inside fn are traced again (a compilation cache
    # hit would otherwise skip their releases).
    with jax.disable_jit():
      jax.eval_shape(run, *abstract)
  finally:
    del _PLAN.state
  return Plan(float(state["eps"]) - float(acct.spent_eps),
              float(state["delta"]) - float(acct.spent_delta), tuple(rows))


def _record_plan(eps, delta):
  state = getattr(_PLAN, "state", None)
  if state is None:
    return
  acct, spent, rows = state
  if not (_checks.is_concrete(eps) and _checks.is_concrete(delta)):
    raise ValueError("plan() needs static (Python float) costs; this release's eps "
                     "is traced.")
  e = np.asarray(eps, spent["eps"].dtype)
  d = np.asarray(delta, spent["delta"].dtype)
  ok, new_eps, new_delta = _allowed(acct, spent["eps"], spent["delta"],
                                    spent["answered"], e, d)
  if ok:
    spent.update(eps=new_eps, delta=new_delta, answered=spent["answered"] + 1)
  rows.append((float(eps), float(delta), not bool(ok)))


# ------------------------------------------------------------------ composition
def advanced_composition(eps, delta, k: int, delta_prime: float):
  """Dwork-Rothblum-Vadhan advanced composition.

  The k-fold adaptive composition of (eps, delta)-DP mechanisms is
  (eps sqrt(2 k ln(1/delta')) + k eps (e^eps - 1), k delta + delta')-DP for any
  delta' > 0. It holds when k is fixed in advance and every mechanism is
  (eps, delta)-DP for the same eps (use the largest); each may be chosen adaptively.
  It beats basic composition (k eps) only for many small releases.

  Returns:
    ``(eps_total, delta_total)``.

  References:
    Dwork, Rothblum & Vadhan (2010); Dwork & Roth (2014), Theorem 3.20.
  """
  eps = _checks.check_positive(eps, "eps", allow_traced=True)
  if _checks.is_concrete(delta):
    delta = _check_delta(delta, "delta")
  k = _checks.check_int(k, "k", minimum=1)
  delta_prime = _checks.check_positive(delta_prime, "delta_prime")
  exp = math.exp if _checks.is_concrete(eps) else jnp.exp
  total = eps * math.sqrt(2 * k * math.log(1 / delta_prime)) + k * eps * (exp(eps) - 1)
  return total, k * delta + delta_prime


def _advanced_caps(eps_budget, delta_budget, k, delta_prime):
  """Largest per-release (eps, delta) whose k-fold composition fits the budget."""
  delta_cap = (delta_budget - delta_prime) / k
  lo, hi = 0.0, eps_budget
  for _ in range(200):  # bisection; advanced_composition is increasing in eps
    mid = (lo + hi) / 2
    if mid > 0 and advanced_composition(mid, delta_cap, k, delta_prime)[0] <= eps_budget:
      lo = mid
    else:
      hi = mid
  return max(lo, eps_budget / k), delta_cap


# ------------------------------------------------------------------ interpretations
def hypothesis_test_bound(eps, alpha, delta: float = 0.0) -> float:
  """Largest power of any test about one individual at significance ``alpha``.

  For an (eps, delta)-DP output, any test of H0 versus H1 about one person's value
  with type I error alpha has power at most
  min(e^eps alpha + delta, 1 - e^-eps (1 - alpha - delta)) (and at most 1): it
  rejects with about the same probability whether or not the hypothesis is true.

  References:
    Wasserman & Zhou (2010); Kairouz, Oh & Viswanath (2015).
  """
  eps = _checks.check_positive(eps, "eps")
  alpha = float(alpha)
  if not 0 <= alpha <= 1:
    raise ValueError(f"alpha must be in [0, 1]; got {alpha}.")
  delta = _check_delta(delta, "delta")
  return float(min(1.0, math.exp(eps) * alpha + delta,
                   1 - math.exp(-eps) * (1 - alpha - delta)))


def group_epsilon(eps, group_size: int) -> float:
  """The epsilon a group of ``group_size`` gets from per-person eps-DP: k eps."""
  return group_cost(_checks.check_positive(eps, "eps"), 0.0, group_size)[0]


def eps_for_group(target_eps, group_size: int) -> float:
  """Per-person eps that protects groups of ``group_size`` at ``target_eps``."""
  k = _checks.check_int(group_size, "group_size", minimum=1)
  return _checks.check_positive(target_eps, "target_eps") / k


# ------------------------------------------------------------------ curator
class Curator:
  """A host-side interactive curator with a budget (Dwork, Lemma 2.6).

  ``count(predicate, eps)`` answers ``predicate(data).sum()`` plus Laplace(1/eps)
  noise (a count has sensitivity 1), or returns ``None`` once a query would exceed
  the budget. Refusals depend only on the epsilons asked for.

  Example:
    >>> c = Curator(np.arange(1000), eps_budget=1.0, key=jax.random.key(0))
    >>> [c.count(lambda v: v < 500, 0.4) is None for _ in range(3)]
    [False, False, True]
  """

  def __init__(self, data, eps_budget: float, key=None, *, group_size: int = 1):
    self._data = np.asarray(data)
    self.accountant = Accountant.create(eps_budget, key=key, group_size=group_size)

  def count(self, predicate: Callable, eps: float):
    """Noisy count of rows where ``predicate`` holds, or None if refused."""
    mech = LaplaceMechanism(eps, 1.0)
    true = np.asarray(predicate(self._data))
    if true.shape[:1] != self._data.shape[:1] or true.dtype != bool:
      raise ValueError("predicate must return one bool per row of the data.")
    try:
      self.accountant, out = release(self.accountant, mech, float(true.sum()))
    except BudgetExceededError:
      self.accountant = dataclasses.replace(self.accountant,
                                            refusals=self.accountant.refusals + 1)
      return None
    out = float(out)
    return None if math.isnan(out) else out

  @property
  def spent(self) -> float:
    return float(self.accountant.spent_eps)


# ------------------------------------------------------------------ internals
def _check_delta(delta, name):
  if isinstance(delta, bool):
    raise ValueError(f"{name} must be a number in [0, 1); got {delta!r}.")
  try:
    v = float(delta)
  except (TypeError, ValueError):
    raise ValueError(f"{name} must be a number in [0, 1); got {delta!r}.") from None
  if not (0 <= v < 1):
    raise ValueError(f"{name} must be in [0, 1); got {v!r}.")
  return v


def _max(values):
  if all(_checks.is_concrete(v) for v in values):
    return max(float(v) for v in values)
  return jnp.max(jnp.stack([jnp.asarray(v) for v in values]))


def _check_static_cost(acct, eps, delta):
  if not (_checks.is_concrete(eps) and _checks.is_concrete(delta)):
    return
  eps, delta = float(eps), float(delta)
  limit = (min(acct.eps_budget, acct.eps_cap), min(acct.delta_budget, acct.delta_cap))
  if eps > limit[0] or delta > limit[1]:
    what = ("the per-release cap of advanced composition over "
            f"{acct.max_releases} releases (eps={acct.eps_cap:g}, "
            f"delta={acct.delta_cap:g})" if acct.composition == "advanced" else
            f"the whole budget (eps={acct.eps_budget:g}, delta={acct.delta_budget:g})")
    raise BudgetExceededError(
        f"one release costs (eps={eps:g}, delta={delta:g}) for groups of "
        f"{acct.group_size}, more than {what}. Lower eps or raise the budget; no data "
        "was read.")


def _spend(acct, eps, delta):
  """What every release does before randomizing: refuse a static over-budget cost,
  record the release for :func:`plan`, split the key and charge.

  Returns:
    ``(ok, key for the mechanism, the accountant after the charge)``.
  """
  _check_static_cost(acct, eps, delta)
  _record_plan(eps, delta)
  key, sub = jax.random.split(acct.key)
  f = acct.spent_eps.dtype
  ok, spent_eps, spent_delta = _allowed(acct, acct.spent_eps, acct.spent_delta,
                                        acct.answered, jnp.asarray(eps, f),
                                        jnp.asarray(delta, f))
  return ok, sub, dataclasses.replace(
      acct,
      spent_eps=jnp.where(ok, spent_eps, acct.spent_eps),
      spent_delta=jnp.where(ok, spent_delta, acct.spent_delta),
      answered=acct.answered + ok.astype(jnp.int32),
      refusals=acct.refusals + (~ok).astype(jnp.int32),
      key=key)


def _allowed(acct, spent_eps, spent_delta, answered, eps, delta):
  """The refusal rule: Lemma 2.6 (basic) or the advanced-composition caps.

  Plain comparisons only, so the same code serves traced values (release) and numpy
  scalars (plan). A NaN, infinite or non-positive cost is refused.

  Returns:
    ``(ok, spent_eps + eps, spent_delta + delta)``.
  """
  valid = (eps > 0) & (eps < math.inf) & (delta >= 0) & (delta < math.inf)
  new_eps, new_delta = spent_eps + eps, spent_delta + delta
  if acct.composition == "advanced":
    ok = valid & (answered < acct.max_releases) & (eps <= acct.eps_cap) & \
        (delta <= acct.delta_cap)
  else:
    ok = valid & (new_eps <= acct.eps_budget) & (new_delta <= acct.delta_budget)
  return ok, new_eps, new_delta
