"""The charge protocol: decide and append charges inside one exclusive transaction.

:func:`commit` reads the dataset's current state (after every committed entry,
verified), lets the accountant's own rule decide each charge (the integer arithmetic
the release itself runs: its host twin,
:func:`~jaxdp.accounting.planning.spend_host`, where the rule's ``spend`` is
:class:`~jaxdp.accounting.rules.UnitRule`'s, else ``rule.spend`` on the accountant at
that state) and appends the charges; the transaction commits with
``synchronous=FULL`` before the caller runs anything. A refused charge rolls the
transaction back (nothing is written), except under a plan
(:data:`~jaxdp.ledger.records.POSITIONAL`), whose position counts refusals: there
the refusal is written.

Each charge entry stores a fresh 128-bit nonce from the OS (``os.urandom``, in the
entry's body, so the hash chain covers it). The accountant returned holds the
caller's key with the ledger's id, the dataset's fingerprint, the number of the
first entry committed and its nonce folded in (:func:`release_key`): the noise of a
charge is reproducible from the key and the ledger entry, and never repeated, even
from one fixed key in two processes or after an older copy of the ledger (a backup)
is put back, which repeats entry numbers but not nonces (two releases of nearly the
same query with one noise would reveal their difference). Entries written before
nonces were stored verify as before; their noise folded in no nonce.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from jaxdp import _checks
from jaxdp._cache import plain
from jaxdp.accounting import Accountant, budget, guard
from jaxdp.accounting.planning import spend_host
from jaxdp.accounting.rules import UnitRule, bound_rule
from jaxdp.ledger import records
from jaxdp.ledger.errors import LedgerError, LedgerTamperedError
from jaxdp.ledger.index import Index, initial_state, verify_row
from jaxdp.ledger.store import Store

__all__ = ["check_call", "check_lineage", "commit", "new_nonce", "plan_rows", "release_key"]


def check_call(acct: Any, label: Any) -> None:
  """Refuses a charge while tracing, a non-accountant and a bad label.

  Raises:
    LedgerError: inside a JAX transformation (a charge made while tracing would be
      made once, for a program that may run many times).
    StaleAccountantError: ``acct``'s key was already used by a release (the release
      of this charge would be refused, after the charge).
    ArgTypeError: ``acct`` or ``label`` of the wrong type, or a label holding a
      character that is not printable (a control, line-break or format character).
  """
  if _checks.in_transformation():
    raise LedgerError(
      "a ledger charges only outside JAX transformations (jit, vmap, ...): a charge "
      "made while tracing would be made once for every run of the program."
    )
  if not isinstance(acct, Accountant):
    raise _checks.ArgTypeError(
      f"acct must be a jaxdp.Accountant; got {type(acct).__name__}."
    )
  guard.check_unused(acct.key)  # its release would be refused: charge nothing
  if not isinstance(label, str) or len(label) > 10_000:
    raise _checks.ArgTypeError("label must be a string of at most 10,000 characters.")
  bad = next((c for c in label if not c.isprintable()), None)
  if bad is not None:  # a newline, CR or escape would forge `jaxdp ledger show`
    raise _checks.ArgTypeError(
      f"label must hold printable characters only; got {bad!r} at position "
      f"{label.index(bad)}: remove control, line-break and format characters."
    )


def commit(
  index: Index,
  store: Store,
  dataset: str,
  acct: Accountant,
  rows: list | Callable,
  label: str,
  all_or_nothing: bool = False,
) -> tuple[Accountant, bool]:
  """One exclusive transaction: the charges of ``rows`` on ``dataset``.

  Args:
    index: the ledger's index.
    store: the ledger's file.
    dataset: the dataset (registered).
    acct: its accountant (configuration and key).
    rows: ``(cost, delta, valid, event, body)`` per release, in the rule's currency,
      or a function of the accountant at the current state giving them.
    label: stored with each charge.
    all_or_nothing: a refusal writes nothing under every rule (a batch that is not
      run at all); otherwise a positional rule writes its refusal.

  Returns:
    ``(the accountant at the state before, whether every charge was answered)``;
    ``(None, False)`` where a refusal wrote nothing.

  Raises:
    KeyError: no such dataset.
    ValueError: ``acct``'s rule is not one a ledger stores (:func:`records.check_rule`),
      or ``rows`` is empty.
    BudgetMismatchError: ``acct`` has another budget than the dataset.
    BudgetExceededError: one release costs more than the whole budget.
  """
  if isinstance(rows, list) and not rows:  # its key would fold in no entry's nonce
    raise ValueError("mechs must hold at least one mechanism; got none: charge nothing.")
  records.check_rule(acct, rebuilds=False)  # the rebuild was checked at resume
  rule = bound_rule(acct)
  record = _budget_record(acct)
  try:
    return _commit(index, store, dataset, acct, rows, label, all_or_nothing, rule, record)
  except _Refused:  # rolled back: nothing written
    return None, False


_RECORDS: dict = {}


def _budget_record(acct: Accountant) -> dict:
  """:func:`records.budget_record` of ``acct``, kept per rule (compared by its fields'
  types and values), budgets, group size and unit exponents (their plain values):
  what it is a function of, once the rule is bound (:func:`bound_rule`). Read only."""
  static = (  # plain values: a subclass claiming the honest value keys its own
    acct.rule,
    *plain(
      (
        acct.eps_budget,
        acct.delta_budget,
        acct.group_size,
        acct.unit_exponent,
        acct.delta_unit_exponent,
      )
    ),
  )
  if static not in _RECORDS:
    if len(_RECORDS) >= 256:
      _RECORDS.clear()
    _RECORDS[static] = records.budget_record(acct)
  return _RECORDS[static]


class _Refused(Exception):
  """A refusal that rolls the transaction back."""


def new_nonce() -> str:
  """A fresh 128-bit nonce from the OS, as 32 hex digits (stored in a charge entry)."""
  return os.urandom(16).hex()


@functools.partial(jax.jit, static_argnames="shape")
def _fold_words(key: jax.Array, words: jax.Array, counters=None, shape=()) -> tuple:
  """``key`` with each of ``words`` (uint32) folded in, in order (the same bits as
  one ``jax.random.fold_in`` per word), and ``counters`` (int32: the spent units,
  of ``shape``, then each other counter) as the accountant's arrays, in one call."""
  for i in range(words.shape[0]):
    key = jax.random.fold_in(key, words[i])
  if counters is None:
    return key, ()
  n = math.prod(shape)
  return key, (counters[:n].reshape(shape), *(counters[i] for i in range(n, len(counters))))


def _digest_words(ledger_id: str, fingerprint: str, seq: int, nonce: str) -> np.ndarray:
  """The four 32-bit big-endian words of a release key's digest (see
  :func:`release_key`)."""
  text = f"jaxdp-release-key\x00{ledger_id}\x00{fingerprint}\x00{int(seq)}".encode()
  if nonce:
    text += f"\x00{nonce}".encode()
  digest = hashlib.sha256(text).digest()
  return np.frombuffer(digest[:16], ">u4").astype(np.uint32)


def release_key(
  key: jax.Array, ledger_id: str, fingerprint: str, seq: int, nonce: str = ""
) -> jax.Array:
  """``key`` with a ledger entry's identity folded in (128 bits of a SHA-256 of the
  ledger's id, the dataset's fingerprint, the entry's number and its nonce; an
  empty nonce for an entry written before nonces were stored), as four 32-bit
  big-endian words, one ``jax.random.fold_in`` each."""
  return _fold_words(key, _digest_words(ledger_id, fingerprint, seq, nonce))[0]


def check_lineage(index: Index, tx: Any, path: str, dataset: str, state: dict) -> None:
  """Raises unless ``state`` (an accountant's counters, :func:`records.state_of`) is
  a state the dataset has held (the committed one, or an earlier one: an accountant
  made before other charges). An accountant that released something other than
  what was charged (a dearer mechanism from the accountant a charge returned, or a
  release never charged) holds a state the ledger never committed. Only a charge
  made from that same accountant (or one derived from it) can see this: an
  accountant resumed from the ledger afterwards holds the committed state.

  Every charge or refusal entry counts one answer or one refusal, so an earlier
  state after ``k = answered + refusals`` of the dataset's entries can only be the
  state after its ``k``-th: that one entry is read. Any other state is looked for
  in every entry of the dataset before it is refused. An entry's state is believed
  only once its keyed hash is verified (:func:`~jaxdp.ledger.index.verify_row`).

  Raises:
    LedgerError: naming the dataset and the contract.
    LedgerTamperedError: an entry read is missing or does not match its hash.
  """
  if state == index.states[dataset]:
    return
  entry, seqs = index.datasets[dataset], index.positions[dataset]
  k = state["answered"] + state["refusals"]
  if 0 < k <= len(seqs):
    rows = [tx.row_at(seqs[k - 1])]
  else:
    rows = []
  held = [initial_state(entry["budget"])] + _afters(rows, index.chain.key)
  if state not in held:  # any other held state, however unlikely
    rows = [
      r
      for r in tx.entries_after(entry["seq"])
      if r[1] == dataset and r[2] in ("charge", "refusal")
    ]
    held += _afters(rows, index.chain.key)
  if state not in held:
    raise LedgerError(
      f"ledger {path}: the accountant for dataset {dataset!r} holds a spend the "
      "ledger never committed: a release ran from it that was not charged (release "
      "from the accountant a charge returns exactly the mechanisms charged, in "
      "order). Nothing was charged; resume with Ledger.accountant and audit the "
      "releases made."
    )


def _commit(index, store, dataset, acct, rows, label, all_or_nothing, rule, record):
  ok, nonces = True, []
  with index.writing(store) as tx:
    if dataset not in index.datasets:
      raise KeyError(f"ledger {store.path} has no dataset {dataset!r}.")
    records.check_budget(index.datasets[dataset]["budget"], record, dataset)
    state = records.state_of(acct)
    check_lineage(index, tx, store.path, dataset, state)
    fp, first = index.datasets[dataset]["fingerprint"]["dataset"], index.chain.seq + 1
    committed = index.states[dataset]
    # a rule whose charge has an exact host twin is decided on the host (no JAX)
    host = type(rule).spend is UnitRule.spend
    pre = _at(acct, state, committed) if callable(rows) or not host else None
    cur, before = committed if host else pre, committed  # before: the state of cur
    for cost, delta, valid, event, body in rows(pre) if callable(rows) else rows:
      if host:
        answered, cur, after = _decide(rule, acct, cur, cost, delta, valid)
      else:
        answered, _, cur = rule.spend(cur, cost, delta, valid, event)
        after = records.state_of(cur)
      ok = bool(answered)
      if not ok and (all_or_nothing or rule.name not in records.POSITIONAL):
        raise _Refused()
      _, delta_units = budget.charge_host(delta, acct.delta_unit_exponent, positive=False)
      body = dict(
        body,
        before=before,
        after=after,
        units=_units(cost, acct.unit_exponent, rule.name),
        delta_units=int(delta_units),
        label=label,
        nonce=new_nonce(),  # fresh per entry: a restored copy repeats numbers only
      )
      nonces.append(body["nonce"])
      index.append(tx, dataset, "charge" if ok else "refusal", body)
      before = body["after"]
      if not ok:
        break
  words = _digest_words(store.ledger_id, fp, first, nonces[0] if nonces else "")
  if pre is not None:
    return dataclasses.replace(pre, key=_fold_words(acct.key, words)[0]), ok
  return _released_from(acct, state, committed, words), ok


def _decide(rule, acct, state, cost, delta, valid):
  """:func:`~jaxdp.accounting.planning.spend_host` on a ledger state, after the
  rule's check of a static cost (as ``rule.spend``): ``(answered, state, state)``."""
  caps = rule.capacity(acct)
  rule.check_static_cost(acct, caps, cost, delta)  # BudgetExceededError
  spent = state["spent"]
  counters = (np.asarray(spent, np.int64) if isinstance(spent, list) else spent,)
  counters += (state["spent_delta"], state["answered"])
  exponents = (acct.unit_exponent, acct.delta_unit_exponent)
  answered, (spent, spent_delta, n) = spend_host(
    rule, caps, exponents, counters, cost, delta
  )
  answered = answered and bool(valid)
  if not answered:
    return False, state, state
  after = {
    "spent": records.jsonable(spent),
    "spent_delta": int(spent_delta),
    "answered": int(n),
    "refusals": state["refusals"],
  }
  return True, after, after


def _released_from(acct: Accountant, state: dict, committed: dict, words) -> Accountant:
  """``acct`` at the committed state (as :func:`_at`) with the release key folded
  from ``words``, in one compiled call."""
  if _holds(acct, state, committed):
    return dataclasses.replace(acct, key=_fold_words(acct.key, words)[0])
  spent = committed["spent"]
  counters = [*spent] if isinstance(spent, list) else [spent]
  counters += [committed["spent_delta"], committed["answered"]]
  refusals = acct.refusals  # kept, as records.resume keeps it, unless the rule counts
  if acct.rule.name in records.POSITIONAL:
    counters.append(committed["refusals"])
  elif not _int32(refusals):
    counters.append(int(np.asarray(refusals)))
  shape = tuple(np.shape(acct.spent_units))
  key, out = _fold_words(acct.key, words, np.array(counters, np.int32), shape=shape)
  return dataclasses.replace(
    acct,
    key=key,
    spent_units=out[0],
    spent_delta_units=out[1],
    answered=out[2],
    refusals=out[3] if len(out) > 3 else refusals,
  )


def _afters(rows: list, key: bytes) -> list:
  """The ``after`` states of stored entries, each entry's keyed hash verified first.

  Raises:
    LedgerTamperedError: an entry is missing or does not match its hash.
  """
  out = []
  for row in rows:
    if row is None:
      raise LedgerTamperedError("an entry this process read is missing: it was deleted.")
    verify_row(row, key)
    out.append(json.loads(row[4])["after"])
  return out


def _int32(c: Any) -> bool:
  """Whether ``c`` is a counter as :func:`records.resume` makes it (an int32 array)."""
  return isinstance(c, jax.Array) and c.dtype == np.int32 and not c.weak_type


def _holds(acct: Accountant, state: dict, committed: dict) -> bool:
  """Whether ``acct`` holds the committed state as :func:`records.resume` makes it."""
  counters = (acct.spent_units, acct.spent_delta_units, acct.answered, acct.refusals)
  return state == committed and all(_int32(c) for c in counters)


def _at(acct: Accountant, state: dict, committed: dict) -> Accountant:
  """``acct`` at the committed state: ``acct`` itself where it already holds it."""
  return acct if _holds(acct, state, committed) else records.resume(acct, committed)


def plan_rows(p: Any, rule_name: str) -> list:
  """The rows :func:`commit` charges for the releases of a plan (every one answered
  in the plan), in the rule's currency."""
  currency = {"zcdp": "rho", "rdp": "rdp"}.get(rule_name, "eps")
  out = []
  for r in p.releases:
    cost = np.asarray(r.rdp) if currency == "rdp" else getattr(r, currency)
    delta = r.delta if currency == "eps" else 0.0
    desc = {
      "kind": "planned release",
      "params": {},
      "cost": records.jsonable(cost),
      "event": records.jsonable(r.event),
    }
    out.append((cost, delta, True, r.event, {"mechanism": desc}))
  return out


def _units(cost, exponent, rule_name):
  """The rule's integer units of a cost (one per order under the Rényi filter)."""
  if rule_name in records.POSITIONAL:
    return None
  _, units = budget.charge_host(cost, exponent, positive=True)
  return records.jsonable(units)
