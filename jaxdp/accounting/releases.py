"""Releases: the functions that charge an accountant and randomize.

:func:`release` takes an accountant, a mechanism and data and returns a new
accountant and the output; nothing mutates, so it works under ``jit``, ``vmap``,
``lax.scan`` and across repeated jitted calls. A refused release (Dwork, Lemma 2.6)
does what the accountant's ``on_refusal`` says (:mod:`jaxdp.accounting.refusal`):
raise :class:`ReleaseRefusedError` (the default), or return a data-independent fill
(NaN; an integer release: its dtype's minimum), spending nothing, with
``last_answered`` False and ``refusals`` one higher.

References:
  C. Dwork, the chapter on postprocessing, composition and group privacy
  (Proposition 2.4, Lemma 2.6). F. McSherry, "Privacy integrated queries", SIGMOD
  2009 (parallel composition).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp import random as dprandom
from jaxdp.accounting import planning
from jaxdp.accounting.accountant import Accountant
from jaxdp.accounting.errors import ReleaseRefusedError
from jaxdp.accounting.guard import (
  Lineage,
  check_lineage,
  check_unused,
  consume,
  drawing,
  one_key_per_lane,
)
from jaxdp.accounting.refusal import check_policy
from jaxdp.accounting.rules import RULES, bound_rule
from jaxdp.mechanisms import Mechanism, PosetCountMechanism, QueryMechanism
from jaxdp.mechanisms.base import charged_statistic
from jaxdp.mechanisms.publishable import PUBLISHABLE_TEXT, publishable_problem
from jaxdp.typing import ArrayLike

__all__ = [
  "release",
  "release_partitioned",
  "release_part_statistics",
  "release_parallel_unchecked",
  "raise_if_refused",
  "postprocess",
  "MAX_PARTS",
  "spend",
  "mechanism_cost",
  "mechanism_event",
]

MAX_PARTS = 2**24  # parts of one partitioned release (their noise is one array)


def release(acct: Accountant, mech: Mechanism, data: Any) -> tuple[Accountant, Any]:
  """Charges ``mech``'s cost to ``acct`` and returns ``(new_acct, output)``.

  The charge is what the accountant's composition rule makes of the mechanism
  (``mech.cost(acct.group_size)`` under basic composition, ``mech.zcdp_cost`` under
  zCDP, ``mech.rdp_cost`` at the accountant's orders under the Rényi filter). If it
  would take the total past the budget, or a traced parameter is outside the range
  the mechanism's sampler supports (``mech.valid``: a scale the exact sampler cannot
  take, NaN, a subnormal eps, ...), the release is refused (Lemma 2.6). The decision
  uses only the parameters, never the data. By default (``on_refusal``
  :class:`~jaxdp.RaiseOnRefusal`) a refusal raises; with
  :class:`~jaxdp.FillOnRefusal` the output is NaN (an exact integer release: its
  dtype's minimum) with the mechanism's output shape, nothing is spent,
  ``last_answered`` is False and ``refusals`` grows by one.

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
      rebuilt from its leaves skips its constructor's checks), an ``acct`` whose
      rule is not the one bound to its budgets (changed by ``dataclasses.replace``
      after :meth:`~jaxdp.Accountant.create`), or a secure ``acct`` whose key is not
      ChaCha20, whose rule is not one of jaxdp's classes or a mechanism that is not
      publishable (not exactly one of jaxdp's exact classes, a subclass whatever its
      ``exact`` says, :func:`jaxdp.mechanisms.publishable_problem`), or K-norm or
      elliptic ``data`` not of shape ``(d,)``; before anything is spent or drawn.
    ReleaseRefusedError: under :class:`~jaxdp.RaiseOnRefusal`, a refused release:
      on the host before any noise is drawn (``acct`` is unchanged and still
      usable); inside a traced program when it runs (JAX raises it as
      ``JaxRuntimeError``).
    StaleAccountantError: before any noise, when ``acct``'s key was already used
      (eagerly, or at trace time by another release in the same traced program, or
      given to another accountant); at trace
      time, when ``jax.vmap`` or ``jax.shard_map`` maps the release over ``mech``,
      ``data`` or ``acct``'s counters but not over its key (every lane would get the
      same noise), under ``jax.pmap`` or ``shard_map(check_vma=False)``, and when
      ``acct`` is a constant of the traced program while ``data`` or ``mech`` are
      traced (every run or loop step would reuse its key).
  """
  data = charged_statistic(mech, data)
  ok, sub, new = spend(
    acct,
    *mechanism_cost(acct, mech, _shape(data)),
    mechanism_event(acct, mech),
    (mech, data),
  )
  with drawing(acct.key):
    out = _fill_refused(ok, mech.randomize(sub, data))
  consume(acct)
  return new, planning.mark_if_planning(out)


def release_partitioned(
  acct: Accountant, mech: Mechanism, rows: ArrayLike, part: ArrayLike, num_parts: int
) -> tuple[Accountant, Any]:
  """Parallel composition by construction: one release per part of one dataset.

  Each row of ``rows`` belongs to exactly one part, ``part[i]`` (rows whose part is
  outside ``[0, num_parts)`` are dropped), so adding or removing one person changes
  one part's statistic only, and the whole release costs what one part costs.
  Part statistics are sums over the part's rows:

  * :class:`~jaxdp.PosetCountMechanism`: ``rows`` are 0/1 respondent rows; each part
    gets its exact integer counts (n_j, c_1, ..., c_d).
  * A query mechanism (:class:`~jaxdp.CountQueryMechanism`, ...): ``rows`` are the
    query's rows (checked, never clipped); each part gets its column totals.
  * :class:`~jaxdp.LaplaceMechanism`, :class:`~jaxdp.GaussianMechanism`,
    :class:`~jaxdp.KNormMechanism` with an :class:`~jaxdp.LpBall` or a query ball:
    ``rows`` are per-person contribution vectors ``(n, k)`` (or ``(n,)``), each
    clipped into the mechanism's sensitivity ball (l_1, l_2, l_p or the query ball's
    norm at most ``sensitivity``) before summing, so the sensitivity holds whatever
    the rows hold.

  Args:
    acct: the accountant.
    mech: the mechanism applied to every part (fresh noise per part).
    rows: the dataset's rows.
    part: integer part index of each row, shape ``(n,)``.
    num_parts: the number of parts (static).

  Returns:
    ``(acct, outputs)`` with outputs of shape ``(num_parts, dim)``, all invalid (NaN,
    or an integer dtype's minimum) if refused under :class:`~jaxdp.FillOnRefusal`.

  Raises:
    BudgetExceededError, ReleaseRefusedError, StaleAccountantError: as
      :func:`release`.
    ValueError: ``num_parts`` above :data:`MAX_PARTS` (2**24), or as :func:`release`.

  References:
    McSherry (2009), Theorem 4 (parallel composition).
  """
  num_parts = _checks.check_int(num_parts, "num_parts", minimum=1)
  if num_parts > MAX_PARTS:
    raise ValueError(
      f"num_parts must be at most {MAX_PARTS:,} (2**24): the noise of "
      f"every part is drawn at once; got {num_parts:,}. Merge parts or "
      "release them in several partitioned releases of disjoint rows."
    )
  return _release_summed(
    acct,
    mech,
    _shape(rows)[1:],
    (mech, rows, part),
    lambda: mech.part_statistics(rows, part, num_parts),
    num_parts,
  )


def release_part_statistics(
  acct: Accountant, mech: Mechanism, stat: Any, row_shape: tuple
) -> tuple[Accountant, Any]:
  """:func:`release_partitioned` of statistics already summed by part: ``stat`` is
  what ``mech.part_statistics`` gives for rows of shape ``row_shape`` (a
  :class:`~jaxdp.Session` sums it in chunks of rows).

  Returns and raises as :func:`release_partitioned`.
  """
  num_parts = int(np.shape(stat)[0])
  return _release_summed(
    acct, mech, tuple(row_shape), (mech, stat), lambda: stat, num_parts
  )


def _release_summed(acct, mech, row_shape, inputs, statistic, num_parts):
  """Charges ``mech`` for rows of ``row_shape`` and randomizes ``statistic()``."""
  cost = mechanism_cost(acct, mech, row_shape)
  ok, sub, new = spend(acct, *cost, mechanism_event(acct, mech), inputs)
  stat = statistic()
  summed = isinstance(mech, (PosetCountMechanism, QueryMechanism))  # stat: summed rows
  noise_mech = mech.inner if summed else mech
  with drawing(acct.key):
    if getattr(noise_mech, "grid", None) is None:
      # every mechanism draws independent noise for each leading index: one call
      # (under vmap the exact samplers' rare host refinement would run every time)
      out = noise_mech.randomize(sub, stat)
    else:  # snapping slack is counted per part's statistic
      out = jax.vmap(noise_mech.randomize)(jax.random.split(sub, num_parts), stat)
  consume(acct)
  return new, planning.mark_if_planning(_fill_refused(ok, out))


def release_parallel_unchecked(
  acct: Accountant, pairs: Sequence[tuple[Mechanism, Any]]
) -> tuple[Accountant, list]:
  """Releases mechanisms on parts the **caller asserts** are disjoint, at the cost of one.

  Nothing checks the assertion but that no array object is passed twice (``x + 0``
  is another); one person in two parts costs the sum. Prefer :func:`release_partitioned`.

  Args:
    acct: the accountant (not secure).
    pairs: a sequence of ``(mech, data_part)``.

  Returns:
    ``(acct, outputs)``, a tuple, all invalid if refused (as :func:`release`).

  Raises:
    ValueError: a secure ``acct`` (a release to publish rests on proved composition).
    BudgetExceededError, ReleaseRefusedError, StaleAccountantError: as :func:`release`.
  """
  if isinstance(acct, Accountant) and acct.secure:
    raise ValueError(
      "this accountant is secure (releases to publish) and refuses "
      "release_parallel_unchecked: its parts are disjoint only on the caller's word. "
      "Nothing was spent. Use release_partitioned(acct, mech, rows, part, num_parts)."
    )
  if not pairs:
    raise ValueError("pairs must hold at least one (mechanism, data) pair.")
  if len({id(x) for _, x in pairs}) != len(pairs):
    raise ValueError(
      "pairs passes the same data object twice: parts that share data are not disjoint "
      "(the cost would be the sum). Use release_partitioned to split one dataset into parts."
    )
  pairs = [(m, charged_statistic(m, x)) for m, x in pairs]
  costs = [mechanism_cost(acct, m, _shape(x)) for m, x in pairs]
  ok, sub, new = spend(
    acct,
    _max([c[0] for c in costs]),
    _max([c[1] for c in costs]),
    functools.reduce(lambda a, b: a & b, [c[2] for c in costs]),
    parallel_event([mechanism_event(acct, m) for m, _ in pairs]),
    pairs,
  )
  keys = jax.random.split(sub, len(pairs))
  with drawing(acct.key):
    outs = tuple(m.randomize(k, x) for k, (m, x) in zip(keys, pairs))
  consume(acct)
  return new, planning.mark_if_planning(_fill_refused(ok, outs))


def raise_if_refused(acct: Accountant, output: Any = None) -> Any:
  """Outside jit: raises :class:`ReleaseRefusedError` if the last release was refused
  (for an accountant with :class:`~jaxdp.FillOnRefusal`; with the default
  :class:`~jaxdp.RaiseOnRefusal` the release itself raised).

  Args:
    acct: the accountant returned together with ``output``.
    output: the release's output, returned unchanged when it was answered.

  Returns:
    ``output``.
  """
  if not isinstance(acct, Accountant):
    raise TypeError(
      "raise_if_refused takes the accountant returned with the output: "
      f"raise_if_refused(acct, output); got {type(acct).__name__}."
    )
  if not bool(jnp.all(acct.last_answered)):
    raise ReleaseRefusedError(
      "the release was refused: its cost would exceed the remaining privacy budget "
      "(Dwork, Lemma 2.6)."
    )
  return output


def postprocess(fn: Callable, *outputs, **kwargs) -> Any:
  """Applies ``fn`` to released outputs; costs nothing.

  Proposition 2.4 (closure under postprocessing): if M is eps-DP then f(M(x)) is
  eps-DP for any f that does not look at the data again. ``fn`` must only use the
  released outputs (and public information), never the raw data.
  """
  return fn(*outputs, **kwargs)


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
  """NaN in refused float outputs, the dtype's minimum in refused integer (exact) ones."""
  return jax.tree_util.tree_map(lambda o: _checks.mark_invalid(ok, o), out)


def _max(values):
  """The largest cost (elementwise for Rényi curves: parallel composition holds at
  each order)."""
  if all(_checks.is_concrete(v) for v in values):
    return (
      np.max(np.stack([np.asarray(v, np.float64) for v in values]), axis=0)
      if np.ndim(values[0])
      else max(float(v) for v in values)
    )
  return jnp.max(jnp.stack([jnp.asarray(v) for v in values]), axis=0)


def mechanism_cost(acct, mech, shape=()):
  """``mech``'s cost in the accountant's currency and whether its parameters are
  valid: ``(eps, delta, valid)`` (``(rho, 0, valid)`` under zCDP; see the rule's
  ``cost``).

  The accountant's rule must be the one bound to it
  (:func:`jaxdp.accounting.rules.bound_rule`). A secure accountant first refuses a
  key that is not ChaCha20, a rule that is not exactly one of jaxdp's classes and a
  mechanism that is not publishable: an instance of exactly one of jaxdp's exact
  mechanism classes in an exact configuration
  (:func:`jaxdp.mechanisms.publishable_problem`; all static: checked at trace
  time). ``valid`` is the mechanism's :meth:`~jaxdp.LaplaceMechanism.valid` for a
  statistic of ``shape`` (True for a mechanism without one): a release with invalid
  parameters is refused, spending nothing, so an out-of-range scale never reaches the
  sampler's output.

  Raises:
    ValueError: a rule changed after binding, a secure accountant with another key,
      a custom rule or a mechanism that is not publishable, or a static parameter
      out of range.
  """
  if acct.secure and not dprandom.is_secure_key(acct.key):
    raise ValueError(
      "this accountant is secure (releases to publish) but its key is not a ChaCha20 "
      f"key (got {_key_name(acct.key)}): its noise would not be cryptographically "
      "secure. Continue from the accountant the last release returned, or create "
      "one with Accountant.create(..., secure=True) (a fresh key from the OS)."
    )
  if acct.secure and type(acct.rule) not in RULES.values():
    raise ValueError(
      f"this accountant is secure (releases to publish) but its rule "
      f"{type(acct.rule).__qualname__} is not one of jaxdp's rule classes: a "
      "published release rests on jaxdp's proved composition theorems. Build the "
      "accountant with Accountant.create(..., secure=True, composition=...) and a "
      "name or an instance of a class of jaxdp.accounting.rules."
    )
  valid = mech.valid(shape) if hasattr(mech, "valid") else True  # options' own errors
  if acct.secure:
    problem = publishable_problem(mech)
    if problem is not None:
      raise ValueError(
        f"this accountant is secure (releases to publish) and refuses "
        f"{type(mech).__qualname__}: {problem}. Float noise leaks through which "
        f"floats it can produce; {PUBLISHABLE_TEXT}."
      )
  return (*bound_rule(acct).cost(mech, acct.group_size), valid)


def mechanism_event(acct, mech):
  """The mechanism's event for groups of the accountant's size (() if unknown)."""
  event = getattr(mech, "event", None)
  return event(acct.group_size) if event is not None else ()


def parallel_event(events):
  """One event that dominates every part's (parallel composition: the largest)."""
  kinds = {e[0] for e in events if e}
  if not all(events) or len(kinds) != 1 and not kinds <= {"laplace", "pure"}:
    return ()
  if any(not _checks.is_concrete(e[1]) for e in events):
    return ()
  kind = kinds.pop() if len(kinds) == 1 else "pure"
  values = [float(e[1]) for e in events]
  return (kind, min(values) if kind == "gaussian" else max(values))


def spend(acct, eps, delta, valid, event, inputs):
  """What every release does before randomizing: refuse a stale key and a release
  mapped over ``inputs`` (the mechanisms and data) but not over the accountant, then
  let the accountant's rule refuse a static over-budget cost, record the release for
  :func:`plan`, split the key and charge (nothing where ``valid``, the mechanisms'
  parameter check, is False), and apply the accountant's refusal policy (not while
  planning: a plan reports refusals).

  Returns:
    ``(ok, key for the mechanism, the accountant after the charge)``.
  """
  rule = bound_rule(acct)
  policy = check_policy(acct.on_refusal)
  check_unused(acct.key)
  check_lineage(acct)
  acct = one_key_per_lane(acct, inputs)
  ok, sub, new = rule.spend(acct, eps, delta, valid, event)
  planning.note_mechanisms(inputs)
  settled = ok if planning.current() is not None else policy.settle(ok)
  if settled is not ok:  # a run-time check: the counters depend on it too
    ok, new = settled, dataclasses.replace(new, last_answered=new.last_answered & settled)
  lineage = None if acct.lineage is None else Lineage(new.key)  # a Session's: none
  return ok, sub, dataclasses.replace(new, lineage=lineage)
