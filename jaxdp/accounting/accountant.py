"""A functional privacy accountant that threads through jit-compiled query code.

:class:`Accountant` is a pytree: its budgets, group size and composition rule are
static fields (known at trace time; changing them retraces), while what has been
spent, its PRNG key and its counters are leaves. :func:`release` takes an accountant,
a mechanism and data and returns a new accountant and the output; nothing mutates, so
it works under ``jit``, ``vmap`` (a batch of accountants), ``lax.scan`` and across
repeated jitted calls.

The composition rule is one static field, :attr:`Accountant.rule` (a class of
:mod:`jaxdp.accounting.rules`, each documenting the theorem it relies on). The rules,
from Dwork's chapter "Postprocessing, Composition and Group Privacy":

* Composition (Lemma 2.5): epsilons and deltas add, also when later queries are
  chosen from earlier answers and across datasets for people present in several.
* Budget (Lemma 2.6): the curator answers until the first round whose cost would take
  the total past the budget, and refuses that round. The decision depends only on
  the privacy parameters, never on the data, so refusing discloses nothing. By
  default a refusal raises :class:`ReleaseRefusedError` (``on_refusal``,
  :mod:`jaxdp.accounting.refusal`); with :class:`FillOnRefusal` the output is a
  data-independent fill (NaN; integers: the dtype's minimum), nothing is spent,
  ``last_answered`` is False and ``refusals`` grows by one. Later, cheaper rounds
  may still be answered. (:func:`plan` rejects a cost computed from the data.)
* Group privacy (Lemma 2.8): with ``group_size = k`` every release is charged its
  cost for groups of k (k eps for pure DP), resolved at trace time.
* Postprocessing (Proposition 2.4): anything computed from released outputs without
  touching the data again is free; :func:`postprocess` marks such code.
* Parallel composition: :func:`release_partitioned` splits one dataset by a partition
  key, so disjointness holds by construction, and charges the largest part's cost.

**Arithmetic.** Spending is counted in integer units, not floats (see
:mod:`jaxdp.accounting.budget`): every cost > 0 spends at least one unit, nothing is
answered once all units are spent, and the costs of the answered releases add up to
at most ``eps_budget * (1 + 2**-20)`` (the slack forgives float32's rounding of
decimals such as 0.1, so 10 x 0.1 fits 1.0; a release of exactly the budget is charged all but
2**-22 of it, which tiny releases may still use within that bound).

**Keys and stale state.** The accountant owns its key and splits it on every
release, so releases threaded correctly never share noise. Releasing twice from the
*same* accountant value would reuse its key (same noise, spend counted once):
:mod:`jaxdp.accounting.guard` raises :class:`StaleAccountantError` before any noise,
eagerly and at trace time (two releases holding one key tracer; a value released
from inside a ``lax.cond``, loop body, ``jax.checkpoint``, inner ``jit`` or ``vmap``
and then again outside, through its static ``lineage``; a release mapped by
``jax.vmap`` or ``jax.shard_map`` over its data but not its key; a release whose
accountant is a constant of the traced program; any release under ``jax.pmap``).
:meth:`Accountant.create` consumes the key object it is given. Not detected (see the
trust model): an accountant rebuilt from raw key bits or copied, one passed to two
calls of a jitted function, a replay through a trace JAX takes from its cache: run
trusted code once with ``jax.config.update("jax_debug_key_reuse", True)``.
For an untrusted analyst use
:class:`jaxdp.Session`, which holds the data and the accountant and cannot be rewound.

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
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp.accounting import budget
from jaxdp.accounting.guard import Lineage, register_tracked
from jaxdp.accounting.history import KINDS
from jaxdp.accounting.keys import accountant_key, check_flags, check_key_source
from jaxdp.accounting.planning import Plan
from jaxdp.accounting.refusal import RaiseOnRefusal, check_policy
from jaxdp.accounting.rules import (
  BasicComposition,
  CompositionRule,
  check_own_rule,
  make_rule,
)
from jaxdp.composition.events import to_dp_event
from jaxdp.typing import KeyArray

__all__ = ["Accountant"]


_SECURE_RULES = (
  "for a secure accountant: a release meant to be published rests on jaxdp's proved "
  "composition theorems (a custom rule is for a non-secure accountant)"
)


def _static(**kw):
  return dataclasses.field(metadata=dict(static=True), **kw)


@register_tracked
@dataclasses.dataclass(frozen=True)
class Accountant:
  """Privacy budget state. Build with :meth:`create`.

  Leaves (state): ``spent_units`` and ``spent_delta_units`` (int32 units of the
  budgets, see the module docstring), ``key``, ``refusals``, ``answered``,
  ``last_answered`` (whether the most recent release was answered) and ``log``.
  Static fields (configuration): ``eps_budget``, ``delta_budget``, ``group_size``,
  ``rule`` (the composition rule, :mod:`jaxdp.accounting.rules`), the unit exponents
  fixed at creation, ``secure``, ``history``, ``on_refusal`` and ``lineage`` (which
  value this is, through transformations: :class:`jaxdp.accounting.guard.Lineage`;
  every lineage compares equal). Everything else (capacities, the
  advanced-composition caps, the spent eps as a float) is derived from these on
  demand, so nothing can go stale.
  """

  spent_units: jax.Array
  spent_delta_units: jax.Array
  key: jax.Array = dataclasses.field(repr=False)  # a key in a log is a secret
  refusals: jax.Array
  answered: jax.Array
  last_answered: jax.Array
  log: jax.Array
  eps_budget: float = _static(default=1.0)
  delta_budget: float = _static(default=0.0)
  group_size: int = _static(default=1)
  rule: object = _static(default=BasicComposition())
  unit_exponent: int | tuple = _static(default=0)
  delta_unit_exponent: int = _static(default=0)
  secure: bool = _static(default=False)
  history: int = _static(default=0)
  on_refusal: object = _static(default=RaiseOnRefusal())
  lineage: object = _static(default=None)

  @classmethod
  def create(
    cls,
    eps_budget: float,
    *,
    delta_budget: float = 0.0,
    group_size: int = 1,
    key: KeyArray | None = None,
    composition: str | CompositionRule = "basic",
    max_releases: int | None = None,
    delta_prime: float = 0.0,
    secure: bool = False,
    allow_test_key: bool = False,
    orders: Sequence[float] | None = None,
    plan: Plan | None = None,
    history: int = 0,
    on_refusal: object = RaiseOnRefusal(),
  ) -> Accountant:
    """A fresh accountant.

    Args:
      eps_budget: total epsilon allowed (finite, in [2**-60, 2**60]).
      delta_budget: total delta allowed (>= 0, < 1; 0 or at least 2**-60).
      group_size: size k of the groups to protect; every release is charged its
        group cost (k eps for pure DP; Dwork, Lemma 2.8).
      key: PRNG key the accountant owns and splits; ``None``: a fresh key from the
        OS (:func:`jaxdp.random.os_key`, or :func:`~jaxdp.random.secure_key`), not
        inside ``jit``, ``vmap`` or ``lax.map`` (read once while JAX traces, it would
        be one key for every call: create outside, pass in). A given key object is
        consumed: another accountant made from it raises
        :class:`StaleAccountantError`. With ``secure``, only ``None``.
      composition: a rule of :mod:`jaxdp.accounting.rules`, or its name:
        ``"basic"``, ``"advanced"``, ``"zcdp"``, ``"rdp"`` or ``"planned"``. The
        accountant holds the rule bound to its budgets (:meth:`UnitRule.bind
        <jaxdp.accounting.rules.UnitRule.bind>`); a release refuses a rule or
        budget changed afterwards (``dataclasses.replace``): build a new accountant
        instead. A custom rule (a class of one's own, or a subclass of jaxdp's)
        is accepted only when ``secure`` is False.
      max_releases: for ``"advanced"``, the number k of releases.
      delta_prime: for ``"advanced"``, the slack delta' > 0.
      orders: for ``"rdp"``, the Rényi orders (> 1; default 2, 4, ..., 256).
      plan: for ``"planned"``, the :class:`~jaxdp.Plan` to enforce.
      secure: releases meant to be published: a ChaCha20 key, every release must
        use an instance of exactly one of jaxdp's exact mechanism classes in an
        exact configuration (:func:`jaxdp.publishable_problem`; a subclass, or a
        float mechanism that says it is exact, is refused with a ValueError), and
        ``composition`` must be a name or an instance of exactly one of jaxdp's rule
        classes: a published release rests on jaxdp's proved composition theorems,
        which a custom rule's ``allows`` or ``spend`` need not respect
        (``release_parallel_unchecked``, disjoint on the caller's word, is refused).
      allow_test_key: with ``secure``, accept a given ChaCha20 key (a test's fixed
        key: its releases are reproducible, so not private); the accountant keeps
        no mark of it. True with ``secure=False`` is refused.
      history: keep the first ``history`` answered releases' events (for
        :meth:`events` and :meth:`to_dp_event`); 0: none.
      on_refusal: :class:`~jaxdp.RaiseOnRefusal` (refusals raise
        :class:`ReleaseRefusedError`) or :class:`~jaxdp.FillOnRefusal` (refused
        outputs hold NaN; test ``last_answered``).

    Returns:
      The :class:`Accountant`.

    Raises:
      ValueError: for a budget, group size or option out of range, a custom
        composition rule with ``secure=True`` (an ``ArgTypeError``, which is also a
        ValueError), ``key=None`` inside a transformation, or with ``secure=True`` a
        given key and no ``allow_test_key`` (nothing is consumed).
      StaleAccountantError: ``key`` was already given to an accountant or used by
        a release.
    """
    eps_budget = budget.check_budget(eps_budget, "eps_budget")
    delta_budget = _checks.check_delta(delta_budget, "delta_budget")
    if 0 < delta_budget < budget.MIN_BUDGET:
      raise ValueError(f"delta_budget must be 0 or at least 2**-60; got {delta_budget!r}.")
    group_size = _checks.check_int(group_size, "group_size", minimum=1)
    check_flags(secure, allow_test_key)
    if secure:
      check_own_rule(composition, _SECURE_RULES)
    rule = make_rule(
      composition,
      eps_budget,
      delta_budget,
      max_releases=max_releases,
      delta_prime=delta_prime,
      orders=orders,
      plan=plan,
    )
    history = _checks.check_int(history, "history", minimum=0)
    on_refusal = check_policy(on_refusal)
    check_key_source(key, secure=secure, allow_test_key=allow_test_key)  # sees traces
    with jax.ensure_compile_time_eval():  # concrete even when created inside a trace
      key = accountant_key(key, secure=secure)
      zero = jnp.zeros((), jnp.int32)
      last = jnp.ones((), bool)
      spent = jnp.zeros(rule.state_shape(), jnp.int32)
      log = jnp.zeros((history, 2), jnp.float32)
    exponent, delta_exponent = rule.unit_exponents(eps_budget, delta_budget)
    return cls(
      spent_units=spent,
      spent_delta_units=zero,
      key=key,
      lineage=Lineage(key),
      refusals=zero,
      answered=zero,
      last_answered=last,
      log=log,
      history=history,
      eps_budget=eps_budget,
      delta_budget=delta_budget,
      group_size=group_size,
      rule=rule,
      unit_exponent=exponent,
      delta_unit_exponent=delta_exponent,
      secure=secure,
      on_refusal=on_refusal,
    )

  # -------------------------------------------------------------- derived config
  @property
  def composition(self) -> str:
    """The composition rule's name (``"basic"``, ``"advanced"``, ...)."""
    return self.rule.name

  @property
  def max_releases(self) -> int:
    """Advanced composition: the number of releases declared in advance; else 0."""
    return self.rule.max_releases

  @property
  def delta_prime(self) -> float:
    """Advanced composition: the slack delta'; else 0."""
    return self.rule.delta_prime

  @property
  def orders(self) -> tuple:
    """Rényi filter: the orders kept; else ()."""
    return self.rule.orders

  @property
  def planned(self) -> tuple:
    """Planned: the plan's events (() for a refused row); else ()."""
    return self.rule.planned

  @property
  def rho_budget(self) -> float:
    """zCDP: the rho budget derived from (eps_budget, delta_budget); else nan."""
    return self.rule.rho_budget(self)

  @property
  def rdp_budgets(self) -> tuple:
    """Rényi filter: the budget B_a of each order in :attr:`orders`; else ()."""
    return self.rule.rdp_budgets(self)

  @property
  def eps_capacity(self) -> int | tuple:
    """The budget in units (int32-safe): of eps, of rho under zCDP, or one per order
    under the Rényi filter."""
    return self.rule.capacity(self).eps_capacity

  @property
  def delta_capacity(self) -> int:
    """The delta budget in units (0 where delta enters through a conversion)."""
    return self.rule.capacity(self).delta_capacity

  @property
  def eps_cap(self) -> float:
    """Advanced composition: the per-release eps cap (inf under the other rules)."""
    return self.rule.per_release_caps(self)[0]

  @property
  def delta_cap(self) -> float:
    return self.rule.per_release_caps(self)[1]

  @property
  def spent_eps(self) -> jax.Array:
    """Spent eps (units times the unit: the requested costs' sum within the unit
    arithmetic's relative 2**-20, see :mod:`jaxdp.accounting.budget`). Under zCDP: the
    eps of     the spent rho at ``delta_budget``. Under the Rényi filter: the smallest
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
    return self.rule.spent_eps(self)

  @property
  def spent_rdp(self) -> jax.Array:
    """Rényi filter: the spent RDP at each order, the sum of the answered releases'
    charges (each its curve in units, see :mod:`jaxdp.accounting.budget`), or ``inf``
    for an order that a release went past: such an order is over its budget for good
    (the filter never charges it again) and its sum is no longer kept."""
    spent = budget.in_cost(self.spent_units, self.unit_exponent)
    over = self.spent_units > jnp.asarray(self.eps_capacity, jnp.int32)
    return jnp.where(over, jnp.inf, spent)

  @property
  def spent_rho(self) -> jax.Array:
    """zCDP: the spent rho."""
    return budget.in_cost(self.spent_units, self.unit_exponent)

  @property
  def spent_delta(self) -> jax.Array:
    """Spent delta: the deltas' sum; ``delta_budget`` once something was answered
    under zCDP, the Rényi filter and a plan (their conversions use all of it)."""
    return self.rule.spent_delta(self)

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
    return self.rule.remaining(self)

  def events(self) -> list:
    """The logged events of the answered releases, oldest first (``history`` > 0).

    Raises:
      ValueError: no history was kept, more releases were answered than it holds,
        or the accountant is traced or batched.
    """
    if self.history == 0:
      raise ValueError("this accountant keeps no history: create it with history=K.")
    if not _checks.is_concrete(self.log) or self.log.ndim != 2:
      raise ValueError(
        "events() needs one concrete accountant (not traced, not a "
        "vmapped batch: index it first)."
      )
    n = int(self.answered)
    if n > self.history:
      raise ValueError(
        f"{n} releases were answered but the history holds "
        f"{self.history}: create the accountant with history >= {n}."
      )
    log = np.asarray(self.log[:n], np.float64)
    return [(KINDS[int(code) - 1], float(value)) for code, value in log]

  def to_dp_event(self, pure_as: str = "randomized_response") -> Any:
    """The answered releases as a dp_accounting ``ComposedDpEvent`` (see
    :meth:`jaxdp.Plan.to_dp_event` for the mapping). Needs ``history`` > 0."""
    return to_dp_event(self.events(), pure_as)

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
    return self.rule.guarantee(self)
