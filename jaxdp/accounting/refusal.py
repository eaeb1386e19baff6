"""What a refused release does: one class per policy, held by the accountant as its
static field ``on_refusal``.

A release is refused (Dwork, Lemma 2.6) when its cost would take the total past the
budget, or when a traced parameter is outside the range its sampler takes. The
decision depends only on the privacy parameters, never on the data, so raising it
discloses nothing that the accountant's ``refusals`` counter does not.

* :class:`RaiseOnRefusal` (the default): a refusal is an error. Where the decision is
  known on the host (eagerly, or at trace time), :class:`ReleaseRefusedError` is raised
  before any noise is drawn and the accountant is left as it was (its key unused: the
  caller may continue from it, for instance with a cheaper release). Inside a traced
  program (``jit``, ``lax.scan``, ``vmap``) the decision is known only when the
  program runs: a host callback then raises it, and JAX reports the run as failed
  (``jax.errors.JaxRuntimeError``, a ``RuntimeError`` whose message holds
  :class:`ReleaseRefusedError`'s), so no output of the run is returned. That check
  is a conditional per release whose host callback runs only for a refusal (on an
  accelerator the conditional's predicate is still read on the host).
* :class:`FillOnRefusal`: a refused release returns a data-independent fill (NaN in
  float outputs, the dtype's minimum in integer outputs), spends nothing, sets
  ``last_answered`` to False and adds one to ``refusals``. For programs that run until
  the budget is spent and test ``last_answered`` (a ``lax.scan`` of releases, a batch
  of accountants), and for programs without host callbacks (``jax.export``).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.accounting.errors import ReleaseRefusedError
from jaxdp.exact.refine import raise_if

__all__ = ["RaiseOnRefusal", "FillOnRefusal", "REFUSAL_POLICIES", "check_policy"]

_REFUSED = (
  "the release was refused: its cost would take the total past the privacy budget, "
  "or a parameter is outside the range its sampler takes (Dwork, Lemma 2.6). "
  "{what} To receive NaN (an integer release: its dtype's minimum) and "
  "test last_answered instead, create the accountant with "
  "on_refusal=jaxdp.FillOnRefusal()."
)


def _refused_error(flag) -> ReleaseRefusedError:
  """The run-time error of a traced refusal (``flag``: the host copy of ``~ok``)."""
  del flag
  return ReleaseRefusedError(
    _REFUSED.format(what="The run is abandoned: none of its outputs are returned.")
  )


@dataclasses.dataclass(frozen=True)
class RaiseOnRefusal:
  """A refused release raises :class:`ReleaseRefusedError`: on the host before any
  noise is drawn (the accountant unchanged), inside a traced program when it runs
  (a host callback; JAX raises ``JaxRuntimeError``)."""

  def settle(self, ok: jax.Array) -> jax.Array:
    """``ok``, after raising for a refusal known now; for a traced one, ``ok`` and'd
    with a check that calls the host only when the release is refused, and raises
    there (:func:`jaxdp.exact.refine.raise_if`: the release's output and accountant
    are computed from its result, so it cannot be dropped; under ``vmap`` the host is
    called once for the whole batch, only when some lane is refused)."""
    if _checks.is_concrete(ok):
      if not bool(jnp.all(ok)):
        raise ReleaseRefusedError(
          _REFUSED.format(
            what="Nothing was spent, no noise was drawn and the accountant is "
            "unchanged (it may still answer a cheaper release)."
          )
        )
      return ok
    ok = ok.astype(bool)
    return ok & raise_if(~ok, _refused_error)


@dataclasses.dataclass(frozen=True)
class FillOnRefusal:
  """A refused release returns NaN (integer outputs: the dtype's minimum); test
  ``last_answered``."""

  def settle(self, ok: jax.Array) -> jax.Array:
    """``ok``: the release fills its output."""
    return ok


REFUSAL_POLICIES = (RaiseOnRefusal, FillOnRefusal)


def check_policy(policy: object) -> object:
  """``policy`` if it is an instance of exactly one of :data:`REFUSAL_POLICIES`.

  Raises:
    ArgTypeError: anything else (a subclass or another object).
  """
  if type(policy) not in REFUSAL_POLICIES:
    raise _checks.ArgTypeError(
      f"on_refusal must be jaxdp.RaiseOnRefusal() or jaxdp.FillOnRefusal(); got {policy!r}."
    )
  return policy
