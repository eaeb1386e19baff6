"""A functional privacy accountant that threads through jit-compiled query code.

:class:`Accountant` is a pytree: its budgets, group size and composition rule are
static fields (known at trace time; changing them retraces), while what has been
spent, its PRNG key and its counters are leaves. :func:`release` takes an accountant,
a mechanism and data and returns a new accountant and the output; nothing mutates, so
it works under ``jit``, ``vmap`` (a batch of accountants), ``lax.scan`` and across
repeated jitted calls.

The rules, from Dwork's chapter "Postprocessing, Composition and Group Privacy":

* Composition (Lemma 2.5): epsilons and deltas add, also when later queries are
  chosen from earlier answers and across datasets for people present in several.
* Budget (Lemma 2.6): the curator answers until the first round whose cost would take
  the total past the budget, and refuses that round. The decision depends only on
  the privacy parameters, never on the data, so refusing discloses nothing. A refused
  release returns a data-independent fill (NaN; an integer release: its dtype's
  minimum), spends nothing, sets
  ``last_answered`` to False and adds one to ``refusals``. Later, cheaper rounds may
  still be answered. (:func:`plan` rejects a cost computed from the data.)
* Group privacy (Lemma 2.8): with ``group_size = k`` every release is charged its
  cost for groups of k (k eps for pure DP), resolved at trace time.
* Postprocessing (Proposition 2.4): anything computed from released outputs without
  touching the data again is free; :func:`postprocess` marks such code.
* Parallel composition: :func:`release_partitioned` splits one dataset by a partition
  key, so disjointness holds by construction, and charges the largest part's cost.

**Arithmetic.** Spending is counted in integer units, not floats (see
:mod:`jaxdp._budget`): every cost > 0 spends at least one unit, nothing is answered
once all units are spent, and the costs of the answered releases add up to at most
``eps_budget * (1 + 2**-20)`` (the slack forgives float32's rounding of decimals such
as 0.1, so 10 x 0.1 fits 1.0; a release of exactly the budget is charged all but
2**-22 of it, which tiny releases may still use within that bound).

**Keys and stale state.** The accountant owns its key and splits it on every
release, so releases threaded correctly never share noise. Releasing twice from the
*same* accountant value would reuse its key (same noise, spend counted once). This is
detected where JAX allows: eagerly, a second release from an accountant whose key
was already used raises :class:`StaleAccountantError` (the check follows the key
object, like JAX's own key-reuse checker: an accountant rebuilt from the key's raw
bits is not recognised). Inside ``jit`` nothing is visible to Python; run trusted
code once with ``jax.config.update("jax_debug_key_reuse", True)`` and JAX's checker
raises ``KeyReuseError`` on a replay. A release mapped by ``jax.vmap`` over its data,
mechanism or counters with one accountant (its key unbatched) would be one release
per lane with the same noise, which JAX's checker does not see: it raises
:class:`StaleAccountantError` at trace time, jitted or not, and so does a release in
``jax.shard_map`` whose inputs vary over a mesh axis its key does not; under
``jax.pmap`` or ``shard_map(check_vma=False)``, where JAX does not say which inputs
differ across devices, every release is refused, and so is a release whose
accountant is a constant of the traced program (closed over by a ``jit``,
``lax.map`` or loop body, which would reuse its key on every run or step). A batch
of accountants made by copying one (``jnp.broadcast_to``) is a replay the
accountant cannot see: make batches from split keys.
For an untrusted analyst use
:class:`jaxdp.Session`, which holds the data and the accountant and cannot be
rewound.

**Control flow.** Whether a release inside a ``lax.cond`` branch or a
``lax.while_loop`` body runs decides what is spent, refused and split afterwards, so
a branch index or loop predicate computed from the data leaks through the refusals.
:func:`release` under ``jit`` does not refuse such code: there every value is a
tracer, and JAX tells a release at most that it is traced for a cond branch or a loop
body, not whether the predicate comes from the data, from released outputs (adaptive
queries: postprocessing) or from public values. :func:`plan` tells them apart (it
traces with the data abstract) and rejects a release under data-dependent control
flow: run it on a query function first, or use :class:`jaxdp.Session`.

References:
  C. Dwork, "Differential privacy", ICALP 2006, and the chapter on postprocessing,
  composition and group privacy. C. Dwork, G. Rothblum, S. Vadhan, "Boosting and
  differential privacy", FOCS 2010 (advanced composition). L. Wasserman, S. Zhou,
  "A statistical framework for differential privacy", JASA 2010. F. McSherry,
  "Privacy integrated queries", SIGMOD 2009 (parallel composition).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Callable

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _budget, _checks, planning, renyi
from jaxdp import random as dprandom
from jaxdp.composition import (_advanced_caps, advanced_composition, zcdp_budget,
                               zcdp_epsilon)
from jaxdp.mechanisms import Mechanism, PosetCountMechanism

__all__ = [
    "Accountant", "BudgetExceededError", "ReleaseRefusedError", "StaleAccountantError",
    "release", "release_partitioned", "release_parallel_unchecked", "raise_if_refused",
    "postprocess",
]

MAX_PARTS = 2 ** 24  # parts of one partitioned release (their noise is one array)
COMPOSITIONS = ("basic", "advanced", "zcdp", "rdp", "planned")


class BudgetExceededError(ValueError):
  """A single release costs more than the whole budget (known at trace time)."""


class ReleaseRefusedError(RuntimeError):
  """A release was refused: its cost would take the total past the budget."""


class StaleAccountantError(RuntimeError):
  """A release from an accountant value whose key an earlier release already used."""


def _static(**kw):
  return dataclasses.field(metadata=dict(static=True), **kw)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class Accountant:
  """Privacy budget state. Build with :meth:`create`.

  Leaves (state): ``spent_units`` and ``spent_delta_units`` (int32 units of the
  budgets, see the module docstring), ``key``, ``refusals``, ``answered`` and
  ``last_answered`` (whether the most recent release was answered).
  Static fields (configuration): ``eps_budget``, ``delta_budget``, ``group_size``,
  ``composition``, ``max_releases``, ``delta_prime`` and the unit exponents fixed at
  creation. Everything else (capacities, the advanced-composition caps, the spent
  eps as a float) is derived from these on demand, so nothing can go stale.
  """

  spent_units: jax.Array
  spent_delta_units: jax.Array
  key: jax.Array
  refusals: jax.Array
  answered: jax.Array
  last_answered: jax.Array
  log: jax.Array
  eps_budget: float = _static(default=1.0)
  delta_budget: float = _static(default=0.0)
  group_size: int = _static(default=1)
  composition: str = _static(default="basic")
  max_releases: int = _static(default=0)
  delta_prime: float = _static(default=0.0)
  unit_exponent: int | tuple = _static(default=0)
  delta_unit_exponent: int = _static(default=0)
  secure: bool = _static(default=False)
  orders: tuple = _static(default=())
  planned: tuple = _static(default=())
  history: int = _static(default=0)

  @classmethod
  def create(cls, eps_budget, *, delta_budget=0.0, group_size: int = 1, key=None,
             composition: str = "basic", max_releases: int | None = None,
             delta_prime: float = 0.0, secure: bool = False,
             orders=None, plan=None, history: int = 0) -> "Accountant":
    """A fresh accountant.

    Args:
      eps_budget: total epsilon allowed (finite, in [2**-60, 2**60]).
      delta_budget: total delta allowed (>= 0, < 1).
      group_size: size k of the groups to protect; every release is charged its
        group cost (k eps for pure DP).
      key: PRNG key the accountant owns and splits. ``None`` draws a key carrying the
        generator's full state from the operating system
        (:func:`jaxdp.random.os_key`).
      composition: ``"basic"`` (Lemma 2.5, epsilons add; Lemma 2.6 refusals) or
        ``"advanced"`` (Dwork-Rothblum-Vadhan). Advanced composition needs the
        number of releases k and one fixed per-release eps declared in advance, so
        the accountant derives a per-release cap: the largest eps* with
        ``advanced_composition(eps*, delta*, k, delta_prime)`` within the budget
        (or budget / k if that is larger), delta* = (delta_budget - delta') / k.
        It answers at most k releases, each costing at most the caps.
        ``"zcdp"``: a zero-concentrated-DP privacy filter. Each release is charged
        its rho (``mech.zcdp_cost``: (k eps)^2 / 2 for pure DP, (k Delta)^2 /
        (2 sigma^2) for Gaussian noise) against the largest rho whose conversion
        (:func:`jaxdp.composition.zcdp_epsilon`, Canonne-Kamath-Steinke) fits
        ``(eps_budget, delta_budget)``. Valid for adaptively chosen parameters: a
        sum of rho_i below rho bounds every Renyi order at once, and the Renyi filter
        of Feldman & Zrnic (2021) holds at each order. 92 releases of
        Laplace(0.1) fit (5, 1e-6), against 50 under basic composition.
        ``"rdp"``: a Rényi privacy filter over the fixed ``orders``. Each release is
        charged its RDP curve (``mech.rdp_cost``: Laplace's own curve for
        :class:`~jaxdp.LaplaceMechanism`, randomized response's for other pure-DP
        mechanisms, alpha rho for Gaussian noise; see :mod:`jaxdp.renyi`); each of
        the m orders kept gets delta_budget / m and the budget B_a whose
        Canonne-Kamath-Steinke conversion at delta_budget / m is eps_budget
        (:func:`jaxdp.renyi.filter_budgets`). A release is answered iff some order
        still holds it within B_a. Valid for adaptively chosen parameters: at each
        order exp((a-1)(L_t - sum of the charges)) is a supermartingale (Feldman &
        Zrnic 2021, the Rényi filter), and since the run ends with some order
        within its budget, the hockey-stick divergence at eps_budget is at most the
        sum over orders of each order's CKS bound, delta_budget / m each (the union
        bound over orders of Lécuyer 2021). One order (``orders=(a,)``) is Feldman
        and Zrnic's filter at that order with all of delta: 100 releases of
        Laplace(0.1) fit (5, 1e-6) at a = 6; the default 8 orders fit 89.
        ``"planned"``: enforces a fixed plan (:func:`jaxdp.plan` of the query
        function, run against any accountant) at its tightest figure,
        ``plan.epsilon(delta_budget)`` (PLD, Kairouz-Oh-Viswanath, ...), which
        must be at most ``eps_budget``. The i-th release (answered or refused) is
        answered iff the plan answered its i-th release and the mechanism is
        dominated by the planned one: the same kind (Laplace, Gaussian, zCDP) or
        a Laplace / pure release on a pure row, with eps at most the planned eps
        (sigma / sensitivity at least the planned one, rho at most). Valid because
        the parameters are fixed before the run and a dominated mechanism's
        privacy profile lies below the planned one's (Laplace: delta(eps') = 1 -
        e^((eps' - eps) / 2) grows with eps; Gaussian: more noise is
        postprocessing); composition preserves that order (Dong, Roth & Su
        2022, f-DP composition). Anything else, or more releases than planned,
        is refused.
      max_releases: for advanced composition, the number k of releases declared in
        advance.
      plan: for ``composition="planned"``, the :class:`~jaxdp.Plan` to enforce.
      history: keep the first ``history`` answered releases' events (kind and
        parameter, :meth:`jaxdp.Mechanism.event`) as a leaf, so a run, also under
        jit, can be exported with :meth:`to_dp_event`. 0 (default): none.
      orders: for ``composition="rdp"``, the Rényi orders (> 1) of the filter
        (default :data:`jaxdp.renyi.DEFAULT_ORDERS`, 2, 4, ..., 256). Fewer orders
        pay less for the union bound; orders whose budget would be <= 0 are
        dropped.
      delta_prime: for advanced composition, the slack delta' > 0.
      secure: releases meant to be published. The key is a ChaCha20 key from the
        OS (:func:`jaxdp.random.secure_key`; a ``key`` passed in must be one), and
        every release must use an exact, float-safe mechanism (``exact=True``):
        any other is refused with a ValueError when the release is traced, before
        anything is spent or drawn, and so is a release from a secure accountant
        whose key was swapped for another generator's (``dataclasses.replace``,
        ``jax.tree_util``).

    Returns:
      The :class:`Accountant`.

    Raises:
      ValueError: for a budget, group size or option out of range.
    """
    eps_budget = _check_budget(eps_budget, "eps_budget")
    delta_budget = _checks.check_delta(delta_budget, "delta_budget")
    if 0 < delta_budget < _budget.MIN_BUDGET:
      raise ValueError(f"delta_budget must be 0 or at least 2**-60; got {delta_budget!r}.")
    group_size = _checks.check_int(group_size, "group_size", minimum=1)
    if composition not in COMPOSITIONS:
      raise ValueError(f"composition must be one of {COMPOSITIONS}; got {composition!r}.")
    eps_scale, delta_scale = eps_budget, delta_budget
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
      eps_cap, delta_cap = _advanced_caps(eps_budget, delta_budget, max_releases,
                                          delta_prime)
      # units large enough to count k releases at the caps
      eps_scale = max(eps_budget, max_releases * eps_cap)
      delta_scale = max(delta_budget, max_releases * delta_cap)
    else:
      max_releases = 0 if max_releases is None else _checks.check_int(
          max_releases, "max_releases", minimum=0)
      delta_prime = 0.0
    if composition in ("zcdp", "rdp") and not delta_budget > 0:
      raise ValueError(f"composition={composition!r} needs delta_budget > 0: the budget "
                       "is the one whose (eps, delta) conversion fits (eps_budget, "
                       "delta_budget).")
    if composition == "zcdp":
      eps_scale, delta_scale = zcdp_budget(eps_budget, delta_budget), 0.0
    if (plan is not None) != (composition == "planned"):
      raise ValueError("composition='planned' needs plan=jaxdp.plan(...), and plan is "
                       f"only for it; got composition={composition!r}, plan={plan!r}.")
    planned = _planned_events(plan, eps_budget, delta_budget) if plan is not None \
        else ()
    if orders is not None and composition != "rdp":
      raise ValueError(f"orders is for composition='rdp'; got composition="
                       f"{composition!r}.")
    if composition == "rdp":
      orders, budgets = renyi.filter_budgets(
          eps_budget, delta_budget,
          renyi.check_orders(renyi.DEFAULT_ORDERS if orders is None else orders))
      if not orders:
        raise ValueError(
            f"no Rényi order can hold anything within (eps={eps_budget:g}, delta="
            f"{delta_budget:g}): each order's conversion alone exceeds eps_budget. "
            "Raise the budget or pass larger orders.")
      delta_scale = 0.0
    else:
      orders = ()
    history = _checks.check_int(history, "history", minimum=0)
    if not isinstance(secure, bool):
      raise _checks.ArgTypeError(f"secure must be True or False; got {secure!r}.")
    with jax.ensure_compile_time_eval():  # concrete even when created inside a trace
      if key is None:
        key = dprandom.secure_key() if secure else dprandom.os_key()
      elif secure and not dprandom.is_secure_key(key):
        raise ValueError(
            "secure=True needs a ChaCha20 key: pass key=None (a fresh key from the OS) "
            "or jaxdp.random.secure_key(); got a key of another generator.")
      else:
        _checks.check_key(key)
        if not jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
          key = jax.random.wrap_key_data(key)
      zero = jnp.zeros((), jnp.int32)
      last = jnp.ones((), bool)
      spent = jnp.zeros((len(orders),), jnp.int32) if orders else zero
      log = jnp.zeros((history, 2), jnp.float32)
    if orders:
      exponent = tuple(_budget.unit_exponent(b) for b in budgets)
    else:
      exponent = _budget.unit_exponent(eps_scale)
    return cls(spent_units=spent, spent_delta_units=zero, key=key, refusals=zero,
               answered=zero, last_answered=last, log=log, history=history,
               eps_budget=eps_budget, delta_budget=delta_budget,
               group_size=group_size, composition=composition,
               max_releases=max_releases, delta_prime=delta_prime,
               unit_exponent=exponent,
               delta_unit_exponent=_budget.unit_exponent(delta_scale), secure=secure,
               orders=orders, planned=planned)

  # -------------------------------------------------------------- derived config
  @property
  def rho_budget(self) -> float:
    """zCDP: the rho budget derived from (eps_budget, delta_budget); else nan."""
    if self.composition != "zcdp":
      return math.nan
    return zcdp_budget(self.eps_budget, self.delta_budget)

  @property
  def rdp_budgets(self) -> tuple:
    """Rényi filter: the budget B_a of each order in :attr:`orders`; else ()."""
    if self.composition != "rdp":
      return ()
    return renyi.filter_budgets(self.eps_budget, self.delta_budget, self.orders)[1]

  @property
  def eps_capacity(self) -> int | tuple:
    """The budget in units (int32-safe): of eps, of rho under zCDP, or one per order
    under the Rényi filter."""
    if self.composition == "rdp":
      return tuple(min(_budget.capacity(b, e), 2 ** 31 - 1)
                   for b, e in zip(self.rdp_budgets, self.unit_exponent))
    budget = self.rho_budget if self.composition == "zcdp" else self.eps_budget
    return min(_budget.capacity(budget, self.unit_exponent), 2 ** 31 - 1)

  @property
  def delta_capacity(self) -> int:
    if self.composition in ("zcdp", "rdp"):
      return 0  # delta enters through the conversion, not per release
    return min(_budget.capacity(self.delta_budget, self.delta_unit_exponent),
               2 ** 31 - 1)

  @property
  def eps_cap(self) -> float:
    """Advanced composition: the per-release eps cap (inf under basic composition)."""
    if self.composition != "advanced":
      return math.inf
    return _advanced_caps(self.eps_budget, self.delta_budget, self.max_releases,
                          self.delta_prime)[0]

  @property
  def delta_cap(self) -> float:
    if self.composition != "advanced":
      return math.inf
    return _advanced_caps(self.eps_budget, self.delta_budget, self.max_releases,
                          self.delta_prime)[1]

  @property
  def spent_eps(self) -> jax.Array:
    """Spent eps (units times the unit: the requested costs' sum within the unit
    arithmetic's relative 2**-20, see :mod:`jaxdp._budget`). Under zCDP: the eps of
    the spent rho at ``delta_budget``. Under the Rényi filter: the smallest
    conversion at ``delta_budget`` of :attr:`spent_rdp` over the orders still
    within their budgets (an order over its budget bounds nothing, so it is
    skipped; one order always holds the last answered release), capped at
    ``eps_budget``, and 0 before anything was answered.

    Both figures are valid for a sequence of releases whose parameters were fixed
    before the run: the spent rho or RDP sums the fixed mechanisms' curves
    (Canonne-Kamath-Steinke convert them), and the filter's
    ``(eps_budget, delta_budget)`` holds for any run, so their minimum holds. With
    adaptively chosen parameters only the filter's ``(eps_budget, delta_budget)``
    holds (Feldman & Zrnic 2021). Planned: the plan's figure once something was
    answered (each answered release is dominated by its planned row), else 0."""
    if self.composition == "planned":
      return self.guarantee()[0]
    spent = _in_cost(self.spent_units, self.unit_exponent)
    if self.composition == "zcdp":
      return jnp.asarray(zcdp_epsilon(spent, self.delta_budget), spent.dtype)
    if self.composition == "rdp":
      best = renyi.rdp_epsilon(self.spent_rdp, self.orders, self.delta_budget)
      return jnp.where(jnp.any(self.spent_units > 0, axis=-1),
                       jnp.minimum(best, self.eps_budget), 0.0).astype(spent.dtype)
    return spent

  @property
  def spent_rdp(self) -> jax.Array:
    """Rényi filter: the spent RDP at each order, the sum of the answered releases'
    charges (each its curve in units, see :mod:`jaxdp._budget`), or ``inf`` for an
    order that a
    release went past: such an order is over its budget for good (the filter never
    charges it again) and its sum is no longer kept."""
    spent = _in_cost(self.spent_units, self.unit_exponent)
    over = self.spent_units > jnp.asarray(self.eps_capacity, jnp.int32)
    return jnp.where(over, jnp.inf, spent)

  @property
  def spent_rho(self) -> jax.Array:
    """zCDP: the spent rho."""
    return _in_cost(self.spent_units, self.unit_exponent)

  @property
  def spent_delta(self) -> jax.Array:
    """Spent delta: the deltas' sum; ``delta_budget`` once something was answered
    under zCDP, the Rényi filter and a plan (their conversions use all of it)."""
    if self.composition == "planned":
      return self.guarantee()[1]
    if self.composition in ("zcdp", "rdp"):
      spent = self.spent_units if self.composition == "zcdp" else \
          jnp.any(self.spent_units > 0, axis=-1)
      return jnp.where(spent > 0, self.delta_budget, 0.0).astype(
          jnp.result_type(float))
    return _in_cost(self.spent_delta_units, self.delta_unit_exponent)

  def remaining(self) -> tuple[jax.Array, jax.Array]:
    """The largest ``(eps, delta)`` one more release could be charged now.

    Basic composition: the budget minus what is spent. Advanced composition: the
    per-release caps while fewer than ``max_releases`` were answered, else 0. zCDP:
    the pure eps whose rho (eps^2 / 2) is left, and 0. Rényi filter: a pure eps
    that is surely answered (the largest sqrt(2 left_a / a) over the orders, since
    any eps-DP curve is below a eps^2 / 2), and 0. Planned: the eps of the plan's
    next row when it is a Laplace or pure row (a Laplace release of at most that
    eps fits it), else 0 (also once the plan is used up), and 0.
    """
    f = jnp.result_type(float)
    if self.composition == "planned":
      rows = [r[1] if r and r[0] in ("laplace", "pure") else 0.0 for r in self.planned]
      index = jnp.minimum(self.answered + self.refusals, len(self.planned))
      return (jnp.asarray(rows + [0.0], f)[index],
              jnp.zeros(jnp.shape(self.answered), f))
    left = _in_cost(jnp.asarray(self.eps_capacity) - self.spent_units, self.unit_exponent)
    if self.composition == "rdp":
      a = jnp.asarray(self.orders, f)
      return (jnp.max(jnp.sqrt(2 * jnp.maximum(left, 0.0) / a), axis=-1),
              jnp.zeros(jnp.shape(left)[:-1], f))
    if self.composition == "zcdp":
      return jnp.sqrt(2 * left), jnp.zeros((), f)
    if self.composition == "advanced":
      more = self.answered < self.max_releases
      return (jnp.where(more, self.eps_cap, 0.0).astype(f),
              jnp.where(more, self.delta_cap, 0.0).astype(f))
    return left, _in_cost(self.delta_capacity - self.spent_delta_units,
                          self.delta_unit_exponent)

  def events(self) -> list:
    """The logged events of the answered releases, oldest first (``history`` > 0).

    Raises:
      ValueError: no history was kept, more releases were answered than it holds,
        or the accountant is traced or batched.
    """
    if self.history == 0:
      raise ValueError("this accountant keeps no history: create it with history=K.")
    if not _checks.is_concrete(self.log) or self.log.ndim != 2:
      raise ValueError("events() needs one concrete accountant (not traced, not a "
                       "vmapped batch: index it first).")
    n = int(self.answered)
    if n > self.history:
      raise ValueError(f"{n} releases were answered but the history holds "
                       f"{self.history}: create the accountant with history >= {n}.")
    log = np.asarray(self.log[:n], np.float64)
    return [(_KINDS[int(code) - 1], float(value)) for code, value in log]

  def to_dp_event(self, pure_as: str = "randomized_response"):
    """The answered releases as a dp_accounting ``ComposedDpEvent`` (see
    :meth:`jaxdp.Plan.to_dp_event` for the mapping). Needs ``history`` > 0."""
    return planning.to_dp_event(self.events(), pure_as)

  def guarantee(self) -> tuple[jax.Array, jax.Array]:
    """The ``(eps, delta)`` guarantee, as arrays in the default float dtype.

    Basic composition: the spent totals (what was answered so far). zCDP and the
    Rényi filter: :attr:`spent_eps` and ``delta_budget`` (0 before anything was
    answered), valid for releases whose parameters were fixed before the run;
    with adaptively chosen parameters the filters guarantee ``(eps_budget,
    delta_budget)``. Advanced: the bound for everything the accountant may
    answer, the declared k releases at the per-release caps
    (Dwork-Rothblum-Vadhan needs k fixed in advance), or basic composition if that
    is smaller. Planned: the plan's figure (:meth:`jaxdp.Plan.epsilon`) and
    ``delta_budget`` once something was answered.
    """
    if self.composition == "planned":
      f = jnp.result_type(float)
      eps = _planned_epsilon(self.planned, self.delta_budget)
      return (jnp.where(self.answered > 0, eps, 0.0).astype(f),
              jnp.where(self.answered > 0, self.delta_budget, 0.0).astype(f))
    if self.composition != "advanced":
      return self.spent_eps, self.spent_delta
    k = self.max_releases
    adv = advanced_composition(self.eps_cap, self.delta_cap, k, self.delta_prime)
    f = jnp.result_type(float)
    return tuple(jnp.asarray(v, f)
                 for v in min(adv, (k * self.eps_cap, k * self.delta_cap)))


def release(acct: Accountant, mech: Mechanism, data):
  """Charges ``mech``'s cost to ``acct`` and returns ``(new_acct, output)``.

  The charge is ``mech.cost(acct.group_size)`` (``mech.zcdp_cost`` under zCDP,
  ``mech.rdp_cost`` at the accountant's orders under the Rényi filter). If
  it would take the total past the
  budget, or a traced parameter is outside the range the mechanism's sampler
  supports (``mech.valid``: a scale the exact sampler cannot take, NaN, a subnormal
  eps, ...), the release is refused (Lemma 2.6): the output is NaN (an exact integer
  release: its dtype's minimum) with the mechanism's
  output shape, nothing is spent, ``last_answered`` is False and ``refusals`` grows
  by one. The decision uses only the parameters, never the data.

  Args:
    acct: the :class:`Accountant` returned by the previous release (never an older
      value: that would reuse its key).
    mech: a mechanism (see :mod:`jaxdp.mechanisms`).
    data: the mechanism's input.

  Returns:
    ``(acct, output)``.

  Raises:
    BudgetExceededError: when the cost is known at trace time and exceeds the whole
      budget (or the advanced-composition cap for one release), before any data is
      read.
    ValueError: a static parameter or option of ``mech`` out of range (a mechanism
      rebuilt from its leaves skips its constructor's checks), or a secure ``acct``
      whose key is not ChaCha20 or a mechanism that is not exact; before anything is
      spent or drawn.
    StaleAccountantError: eagerly, when ``acct``'s key was already used; at trace
      time, when ``jax.vmap`` or ``jax.shard_map`` maps the release over ``mech``,
      ``data`` or ``acct``'s counters but not over its key (every lane would get the
      same noise), under ``jax.pmap`` or ``shard_map(check_vma=False)``, and when
      ``acct`` is a constant of the traced program while ``data`` or ``mech`` are
      traced (every run or loop step would reuse its key).
  """
  ok, sub, new = _spend(acct, *_cost(acct, mech, _shape(data)), _event(acct, mech),
                        (mech, data))
  out = _fill_refused(ok, mech.randomize(sub, data))
  _mark_used(acct.key)
  return new, planning.mark_if_planning(out)


def release_partitioned(acct: Accountant, mech: Mechanism, rows, part, num_parts: int):
  """Parallel composition by construction: one release per part of one dataset.

  Each row of ``rows`` belongs to exactly one part, ``part[i]`` (rows whose part is
  outside ``[0, num_parts)`` are dropped), so adding or removing one person changes
  one part's statistic only, and the whole release costs what one part costs.
  Part statistics are sums over the part's rows:

  * :class:`~jaxdp.PosetCountMechanism`: ``rows`` are 0/1 respondent rows; each part
    gets its exact integer counts (n_j, c_1, ..., c_d).
  * :class:`~jaxdp.LaplaceMechanism`, :class:`~jaxdp.GaussianMechanism`,
    :class:`~jaxdp.KNormMechanism` with an :class:`~jaxdp.LpBall`: ``rows`` are
    per-person contribution vectors ``(n, k)`` (or ``(n,)``), each clipped into the
    mechanism's sensitivity ball (l_1, l_2, l_p norm at most ``sensitivity``) before
    summing, so the sensitivity holds whatever the rows hold.

  Args:
    acct: the accountant.
    mech: the mechanism applied to every part (fresh noise per part).
    rows: the dataset's rows.
    part: integer part index of each row, shape ``(n,)``.
    num_parts: the number of parts (static).

  Returns:
    ``(acct, outputs)`` with outputs of shape ``(num_parts, dim)``, all invalid (NaN,
    or an integer dtype's minimum) if refused.

  Raises:
    BudgetExceededError, StaleAccountantError: as :func:`release`.
    ValueError: ``num_parts`` above :data:`MAX_PARTS` (2**24), or as :func:`release`.

  References:
    McSherry (2009), Theorem 4 (parallel composition).
  """
  num_parts = _checks.check_int(num_parts, "num_parts", minimum=1)
  if num_parts > MAX_PARTS:
    raise ValueError(f"num_parts must be at most {MAX_PARTS:,} (2**24): the noise of "
                     f"every part is drawn at once; got {num_parts:,}. Merge parts or "
                     "release them in several partitioned releases of disjoint rows.")
  ok, sub, new = _spend(acct, *_cost(acct, mech, _shape(rows)[1:]),
                        _event(acct, mech), (mech, rows, part))
  stat = mech.part_statistics(rows, part, num_parts)
  noise_mech = mech.inner if isinstance(mech, PosetCountMechanism) else mech
  if getattr(noise_mech, "grid", None) is None:
    # every mechanism draws independent noise for each leading index: one call
    # (under vmap the exact samplers' rare host refinement would run every time)
    out = noise_mech.randomize(sub, stat)
  else:  # snapping slack is counted per part's statistic
    out = jax.vmap(noise_mech.randomize)(jax.random.split(sub, num_parts), stat)
  _mark_used(acct.key)
  return new, planning.mark_if_planning(_fill_refused(ok, out))


def release_parallel_unchecked(acct: Accountant, pairs):
  """Releases mechanisms on parts the **caller asserts** are disjoint, at the cost of one.

  Nothing checks the assertion: if one person's data is in two parts, the true cost
  is the sum, not the maximum, and the guarantee is void. Prefer
  :func:`release_partitioned`, which makes the parts disjoint by construction. The
  only check made is that no array object is passed twice.

  Args:
    acct: the accountant.
    pairs: a sequence of ``(mech, data_part)``.

  Returns:
    ``(acct, outputs)`` with outputs a tuple, all invalid (NaN, or an integer dtype's
    minimum) if refused.

  Raises:
    BudgetExceededError, StaleAccountantError: as :func:`release`.
  """
  if not pairs:
    raise ValueError("pairs must hold at least one (mechanism, data) pair.")
  ids = [id(x) for _, x in pairs]
  if len(set(ids)) != len(ids):
    raise ValueError("pairs passes the same data object twice: parts that share data "
                     "are not disjoint (the cost would be the sum). Use "
                     "release_partitioned to split one dataset into parts.")
  costs = [_cost(acct, m, _shape(x)) for m, x in pairs]
  ok, sub, new = _spend(acct, _max([c[0] for c in costs]), _max([c[1] for c in costs]),
                        functools.reduce(lambda a, b: a & b, [c[2] for c in costs]),
                        _parallel_event([_event(acct, m) for m, _ in pairs]), pairs)
  keys = jax.random.split(sub, len(pairs))
  outs = tuple(m.randomize(k, x) for k, (m, x) in zip(keys, pairs))
  _mark_used(acct.key)
  return new, planning.mark_if_planning(_fill_refused(ok, outs))


def raise_if_refused(acct: Accountant, output=None):
  """Outside jit: raises :class:`ReleaseRefusedError` if the last release was refused.

  Args:
    acct: the accountant returned together with ``output``.
    output: the release's output, returned unchanged when it was answered.

  Returns:
    ``output``.
  """
  if not isinstance(acct, Accountant):
    raise TypeError("raise_if_refused takes the accountant returned with the output: "
                    f"raise_if_refused(acct, output); got {type(acct).__name__}.")
  if not bool(jnp.all(acct.last_answered)):
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


def _check_budget(value, name):
  v = _checks.check_positive(value, name)
  if not _budget.MIN_BUDGET <= v <= _budget.MAX_BUDGET:
    raise ValueError(f"{name} must be between 2**-60 and 2**60; got {v!r}.")
  return v


def _max(values):
  """The largest cost (elementwise for Rényi curves: parallel composition holds at
  each order)."""
  if all(_checks.is_concrete(v) for v in values):
    return np.max(np.stack([np.asarray(v, np.float64) for v in values]), axis=0) \
        if np.ndim(values[0]) else max(float(v) for v in values)
  return jnp.max(jnp.stack([jnp.asarray(v) for v in values]), axis=0)


def _in_cost(units, exponent) -> jax.Array:
  """Integer units as a cost in the default float dtype (one exponent per entry
  under the Rényi filter)."""
  return jnp.asarray(units).astype(jnp.result_type(float)) * np.ldexp(
      1.0, np.asarray(exponent))


def _cost(acct, mech, shape=()):
  """``mech``'s cost in the accountant's currency and whether its parameters are
  valid: ``(eps, delta, valid)``, or ``(rho, 0, valid)`` under zCDP.

  A secure accountant first refuses a key that is not ChaCha20 and a mechanism that
  is not exact (both static: checked at trace time). ``valid`` is the mechanism's
  :meth:`~jaxdp.LaplaceMechanism.valid` for a statistic of ``shape`` (True for a
  mechanism without one): a release with invalid parameters is refused, spending
  nothing, so an out-of-range scale never reaches the sampler's output.

  Raises:
    ValueError: a secure accountant with another key or a mechanism that is not
      exact, or a static parameter out of range.
  """
  if acct.secure and not dprandom.is_secure_key(acct.key):
    raise ValueError(
        "this accountant is secure (releases to publish) but its key is not a ChaCha20 "
        f"key (got {_key_name(acct.key)}): its noise would not be cryptographically "
        "secure. Continue from the accountant the last release returned, or create "
        "one with Accountant.create(..., secure=True) (a fresh key from the OS).")
  if acct.secure and getattr(mech, "exact", False) is not True:
    raise ValueError(
        f"this accountant is secure (releases to publish) and refuses "
        f"{type(mech).__name__} without exact=True: float noise leaks through which "
        "floats it can produce. Use an exact mechanism (LaplaceMechanism, "
        "KNormMechanism or PosetCountMechanism with exact=True, or "
        "DiscreteGaussianMechanism).")
  valid = mech.valid(shape) if hasattr(mech, "valid") else True
  if acct.composition == "zcdp":
    return mech.zcdp_cost(acct.group_size), 0.0, valid
  if acct.composition == "rdp":
    return mech.rdp_cost(acct.orders, acct.group_size), 0.0, valid
  if acct.composition == "planned":  # judged by its event against the plan's row
    return 0.0, 0.0, valid
  return (*mech.cost(acct.group_size), valid)


def _shape(data) -> tuple:
  """The shape of a mechanism's input (() for a pytree of several arrays)."""
  try:
    return tuple(np.shape(data))
  except ValueError:
    return ()


def _key_name(key) -> str:
  """The key's generator, for messages."""
  if isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    return f"a {jax.random.key_impl(key)} key"
  return f"{type(key).__name__} {getattr(key, 'dtype', '')}{getattr(key, 'shape', '')}"


def _fill_refused(ok, out):
  """NaN in refused float outputs; the dtype's minimum in refused integer outputs
  (exact releases keep their integer dtype)."""
  return jax.tree_util.tree_map(lambda o: _checks.mark_invalid(ok, o), out)


def _check_static_cost(acct, eps, delta):
  """Raises BudgetExceededError for a static cost that no state could answer."""
  if not (_checks.is_concrete(eps) and _checks.is_concrete(delta)):
    return
  ve, ce = _budget.charge_host(eps, acct.unit_exponent, positive=True)
  vd, cd = _budget.charge_host(delta, acct.delta_unit_exponent, positive=False)
  e_limit, d_limit = _budget.limits(acct)
  if not ve and np.all(np.asarray(eps, np.float64) > 0):
    raise BudgetExceededError(
        f"one release's cost {np.asarray(eps, np.float64)} (its {acct.composition} cost "
        f"for groups of {acct.group_size}) is positive but underflows float32, the "
        "precision of the budget's arithmetic: it cannot be charged, so the release "
        "would always be refused. Use a larger eps; no data was read.")
  if not (ve and vd) or np.all(ce > np.asarray(e_limit)) or cd > d_limit:
    if acct.composition == "advanced":
      what = ("the per-release cap of advanced composition over "
              f"{acct.max_releases} releases (eps={acct.eps_cap:g}, "
              f"delta={acct.delta_cap:g})")
    elif acct.composition == "zcdp":
      what = (f"the whole zCDP budget (rho={acct.rho_budget:g}, from eps="
              f"{acct.eps_budget:g} at delta={acct.delta_budget:g})")
    elif acct.composition == "rdp":
      what = (f"the whole Rényi budget at every order (orders {acct.orders}, "
              f"budgets {tuple(round(b, 6) for b in acct.rdp_budgets)}, from eps="
              f"{acct.eps_budget:g} at delta={acct.delta_budget:g})")
    else:
      what = f"the whole budget (eps={acct.eps_budget:g}, delta={acct.delta_budget:g})"
    if acct.composition == "zcdp":
      cost = f"rho={float(eps):g}"
    elif acct.composition == "rdp":
      cost = f"RDP {tuple(round(float(c), 6) for c in np.asarray(eps))}"
    else:
      cost = f"(eps={float(eps):g}, delta={float(delta):g})"
    raise BudgetExceededError(
        f"one release costs {cost} for groups of {acct.group_size}, more than {what}. "
        "Lower eps or raise the budget; no data was read.")


def _ledger(key) -> bool:
  """Whether the eager host ledger applies: a concrete key, not while planning."""
  return _checks.is_concrete(key) and planning.current() is None


def _check_unused(key):
  """Eager host ledger: raises if an earlier release already used this key object."""
  if _ledger(key) and getattr(key, "_jaxdp_used", False):
    raise StaleAccountantError(
        "this accountant's key was already used by an earlier release: releasing "
        "from a stale accountant value would reuse its noise and undercount the "
        "spend. Always continue from the accountant that the last release returned.")


_SHARED_KEY = (
    "{what}, but the accountant's key is the same on every {lane}: every {lane} would "
    "add the same noise (differences between {lane}s give the differences of their "
    "data exactly) while each returned accountant counts one release. Release the "
    "stacked statistic in one call (one mechanism over all of it, or "
    "release_partitioned for disjoint parts), or give every {lane} its own accountant "
    "(its own key).")


def _one_key_per_lane(acct, inputs):
  """``acct``, after refusing a release that ``jax.vmap`` or ``jax.shard_map`` maps
  over its mechanisms, data or counters but not over its key: that is one release
  per lane from one accountant value, all with the same noise (a stale replay:
  Lemma 2.6's count is broken). Raises :class:`StaleAccountantError` at trace time,
  before any noise is drawn. ``pmap`` and ``shard_map`` with ``check_vma=False`` do
  not say which values differ across devices, so a release under them is refused
  too (an allowlist: only mesh axes whose variation JAX tracks are accepted)."""
  key = acct.key
  others = [x for x in jax.tree_util.tree_leaves((inputs, acct))
            if isinstance(x, jax.Array) and x is not key]
  if all(map(_checks.is_concrete, others + [key])):
    return acct                        # no transformation is tracing this release
  if _checks.is_concrete(key) and planning.current() is None:
    raise StaleAccountantError(
        "this release's accountant is a constant of the traced program (closed over, "
        "or created inside it) while its data or mechanism are traced: every run of "
        "the program, and every step of a lax.map, fori_loop or while_loop body, would "
        "add the same noise. Pass the accountant as an argument (or a loop carry) and "
        "continue from the one each release returns.")
  untracked = _untracked_axes()
  if untracked:
    raise StaleAccountantError(
        f"this release runs under jax.pmap or jax.shard_map(check_vma=False) (mesh axes "
        f"{sorted(untracked)}), where JAX does not track which values differ across "
        "devices, so jaxdp cannot tell whether every device would add the same noise. "
        "Use jax.shard_map with check_vma=True (the default), with the accountant's "
        "key sharded over the axis (one accountant per device).")
  varying = lambda x: _checks.varying_axes(jax.typeof(x))
  spread = frozenset().union(*map(varying, others)) - varying(key)
  if spread:
    raise StaleAccountantError(_SHARED_KEY.format(
        what=f"this release is mapped over mesh axes {sorted(spread)} by shard_map "
             "(its data, mechanism or counters differ across them)", lane="shard"))
  if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
    key = jax.random.key_data(key)   # unwrapping does not consume the key
  # the batching rule runs when jax.vmap meets this call; the result feeds the
  # counters, so no transformation can drop the call
  return dataclasses.replace(acct, answered=_lanes(acct.answered, key,
                                                   jax.lax.stop_gradient(others)))


def _untracked_axes() -> frozenset:
  """The manual mesh axes of the enclosing ``shard_map`` or ``pmap`` along which JAX
  does not track variation (``check_vma=False``): a value cast to varying over them
  stays unvarying."""
  axes = tuple(jax.sharding.get_abstract_mesh().manual_axes)
  if not axes:
    return frozenset()
  probe = jax.lax.pcast(jnp.zeros((), jnp.int32), axes, to="varying")
  return frozenset(axes) - _checks.varying_axes(jax.typeof(probe))


@jax.custom_batching.custom_vmap
def _lanes(token, key, others):
  """``token``; under ``jax.vmap`` the batching rule refuses batched ``others`` with
  an unbatched ``key``."""
  del key, others
  return token


@_lanes.def_vmap
def _lanes_vmap(axis_size, in_batched, token, key, others):
  del axis_size
  token_batched, key_batched, others_batched = in_batched
  if not key_batched and any(jax.tree_util.tree_leaves(others_batched)):
    raise StaleAccountantError(_SHARED_KEY.format(
        what="this release is mapped by jax.vmap over its data, mechanism or the "
             "accountant's counters", lane="lane"))
  return token, token_batched


def _mark_used(key):
  """Eager host ledger: marks the key object used, once its release has produced
  output (a release that raised on bad input leaves the accountant usable)."""
  if _ledger(key):
    try:
      object.__setattr__(key, "_jaxdp_used", True)
    except (AttributeError, TypeError):  # pragma: no cover - key type without a dict
      pass


def _event(acct, mech):
  """The mechanism's event for groups of the accountant's size (() if unknown)."""
  event = getattr(mech, "event", None)
  return event(acct.group_size) if event is not None else ()


def _parallel_event(events):
  """One event that dominates every part's (parallel composition: the largest)."""
  kinds = {e[0] for e in events if e}
  if not all(events) or len(kinds) != 1 and not kinds <= {"laplace", "pure"}:
    return ()
  if any(not _checks.is_concrete(e[1]) for e in events):
    return ()
  kind = kinds.pop() if len(kinds) == 1 else "pure"
  values = [float(e[1]) for e in events]
  return (kind, min(values) if kind == "gaussian" else max(values))


def _spend(acct, eps, delta, valid, event, inputs):
  """What every release does before randomizing: refuse a release mapped over
  ``inputs`` (the mechanisms and data) but not over the accountant, refuse a static
  over-budget cost, record the release for :func:`plan`, split the key and charge
  (nothing where ``valid``, the mechanisms' parameter check, is False).

  Returns:
    ``(ok, key for the mechanism, the accountant after the charge)``.
  """
  _check_unused(acct.key)
  acct = _one_key_per_lane(acct, inputs)
  if acct.composition == "planned":
    return _spend_planned(acct, event, valid)
  _check_static_cost(acct, eps, delta)
  state = planning.current()
  if state is not None:
    eps, delta, acct = planning.record(state, eps, delta, event, acct)
  key, sub = jax.random.split(acct.key)
  ok, leaves = _charge((acct.spent_units, acct.spent_delta_units, acct.answered,
                        acct.refusals, acct.last_answered), eps, delta, valid,
                       rule=_budget.rule_of(acct))
  spent, spent_delta, answered, refusals, last = leaves
  return ok, sub, dataclasses.replace(
      acct, spent_units=spent, spent_delta_units=spent_delta, answered=answered,
      refusals=refusals, last_answered=last, key=key, log=_logged(acct, ok, event))


_KINDS = ("laplace", "pure", "gaussian", "zcdp")


def _logged(acct, ok, event):
  """The history leaf after a release: an answered one writes (kind code, value) at
  row ``answered`` while there is room."""
  if acct.history == 0:
    return acct.log
  if not event:
    raise ValueError("history needs mechanisms with a known event (Laplace, "
                     "Gaussian, discrete Gaussian, pure eps-DP).")
  row = jnp.stack([jnp.float32(_KINDS.index(event[0]) + 1),
                   jnp.asarray(event[1], jnp.float32)])
  write = ok & (acct.answered < acct.history)
  index = jnp.minimum(acct.answered, acct.history - 1)
  return jnp.where(write, acct.log.at[index].set(row), acct.log)


def _planned_events(plan, eps_budget, delta_budget):
  """The plan's events (() for a refused row), after checking its figure fits."""
  if not isinstance(plan, planning.Plan):
    raise _checks.ArgTypeError(f"plan must be a jaxdp.Plan (from jaxdp.plan); got "
                               f"{type(plan).__name__}.")
  rows = [() if r.refused else r.event for r in plan.releases]
  if any(not r.refused and not r.event for r in plan.releases):
    raise ValueError("the plan has releases whose mechanism is unknown (planned with "
                     "traced costs); plan with static eps.")
  eps = _planned_epsilon(tuple(rows), delta_budget)
  if eps > eps_budget:
    raise ValueError(f"the plan needs eps = {eps:.6g} at delta = {delta_budget:g} "
                     f"(its tightest figure), more than eps_budget = {eps_budget:g}.")
  return tuple(rows)


@functools.lru_cache(maxsize=64)
def _planned_epsilon(rows, delta):
  return planning.events_epsilon([r for r in rows if r], delta)


# Which planned kinds a release of each kind may use (it must be dominated).
_FITS = {"laplace": ("laplace", "pure"), "pure": ("pure",), "gaussian": ("gaussian",),
         "zcdp": ("zcdp",)}


def _spend_planned(acct, event, valid):
  """The planned rule: the i-th release fits the plan's i-th row and has ``valid``
  parameters, or is refused."""
  if not event:
    raise ValueError("composition='planned' needs mechanisms with a known event "
                     "(Laplace, Gaussian, discrete Gaussian, pure eps-DP).")
  if planning.current() is not None:
    raise ValueError("plan() with a composition='planned' accountant: plan against "
                     "the accountant the plan was made with.")
  kind, value = event
  limits = np.array([r[1] if r and r[0] in _FITS[kind] else np.nan
                     for r in acct.planned] + [np.nan], np.float64)
  index = jnp.minimum(acct.answered + acct.refusals, len(acct.planned))
  more = kind == "gaussian"  # sigma must be at least the planned one; else at most
  if _checks.is_concrete(value):  # compared in float64, row by row, now
    v = float(value)
    fits = jnp.asarray((v >= limits) if more else (v <= limits))[index]
  else:  # float32: the budget's 2**-22 slack forgives the rounding of a decimal
    # eps (see jaxdp._budget); the limits are then rounded toward refusing
    slack = 1 + 2.0 ** -_budget.SLACK_BITS
    limits = limits / slack if more else limits * slack
    limit32 = limits.astype(np.float32)
    limit32 = np.where(limit32 < limits if more else limit32 > limits,
                       np.nextafter(limit32, np.float32(np.inf if more else 0)),
                       limit32)
    value = jnp.asarray(value, jnp.float32)
    limit = jnp.asarray(limit32)[index]
    fits = (value >= limit if more else value <= limit) & jnp.isfinite(value) & (value > 0)
  key, sub = jax.random.split(acct.key)
  ok = jnp.broadcast_to(fits & valid, jnp.shape(acct.last_answered))
  return ok, sub, dataclasses.replace(
      acct, key=key, log=_logged(acct, ok, event),
      answered=acct.answered + ok.astype(jnp.int32),
      refusals=acct.refusals + (~ok).astype(jnp.int32), last_answered=ok)


@functools.partial(jax.jit, static_argnames=("rule",))
def _charge(leaves, eps, delta, valid, *, rule: _budget.Rule):
  """The charge on the accountant's counters (one compiled call when eager); nothing
  is charged unless ``valid``."""
  spent, spent_delta, answered, refusals, last = leaves
  ve, ce = _budget.charge(eps, rule.unit_exponent, positive=True)
  vd, cd = _budget.charge(delta, rule.delta_unit_exponent, positive=False)
  ok = valid & ve & vd & _budget.allowed(rule, spent, spent_delta, answered, ce, cd)
  return ok, (jnp.where(ok, _budget.add(rule, spent, ce), spent),
              jnp.where(ok, spent_delta + cd, spent_delta),
              answered + ok.astype(jnp.int32), refusals + (~ok).astype(jnp.int32),
              jnp.broadcast_to(ok, jnp.shape(last)))
