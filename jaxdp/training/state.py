"""The optimiser state of :func:`jaxdp.training.dp_aggregate`: a pytree whose leaves
are the key and the counters and whose static field is the :class:`TrainingPlan`."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax

from jaxdp import _checks
from jaxdp.training.plan import TrainingPlan

__all__ = ["DPAggregateState", "find_state"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class DPAggregateState:
  """State of a DP aggregation. Leaves: ``key`` (split on every step, never drawn
  from), ``steps`` (int32, answered steps), ``refusals`` (int32, refused steps) and
  ``refused`` (bool, whether the last step was refused). Static field: ``plan``.

  Threading the state from step to step never reuses noise. A stale state given to
  ``update`` again would add the same noise as before: eagerly this raises
  :class:`jaxdp.StaleAccountantError`, and so do, at trace time, one state shared by
  ``jax.vmap`` lanes and a state closed over by a jitted function; a replay of a
  state passed into ``jit`` is not visible to Python, so always continue from the
  state the last update returned.
  """

  key: jax.Array
  steps: jax.Array
  refusals: jax.Array
  refused: jax.Array
  plan: TrainingPlan = dataclasses.field(metadata=dict(static=True))

  def epsilon(self) -> float:
    """The eps of (eps, delta)-DP spent by the answered steps (host, float64; a
    refused step spends nothing). Call outside ``jit``."""
    if not _checks.is_concrete(self.steps):
      raise ValueError(
        "DPAggregateState.epsilon() runs on the host: call it outside jit (on the "
        "state a jitted step returned)."
      )
    return self.plan.epsilon(int(self.steps))

  @property
  def steps_left(self) -> jax.Array:
    """How many more steps fit the budget."""
    return self.plan.max_steps - self.steps


def find_state(opt_state: Any) -> DPAggregateState:
  """The :class:`DPAggregateState` inside an optax state (``optax.chain`` nests the
  states of its transformations in tuples).

  Raises:
    ValueError: there is none, or more than one.
  """
  found = [
    s
    for s in jax.tree_util.tree_leaves(
      opt_state, is_leaf=lambda x: isinstance(x, DPAggregateState)
    )
    if isinstance(s, DPAggregateState)
  ]
  if len(found) != 1:
    raise ValueError(
      f"opt_state must hold exactly one DPAggregateState (from "
      f"jaxdp.training.dp_aggregate); found {len(found)}."
    )
  return found[0]
