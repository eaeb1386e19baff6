"""DP-SGD's aggregation step as an optax ``GradientTransformation`` that enforces a
privacy budget.

:func:`dp_aggregate` follows ``optax.contrib.differentially_private_aggregate``'s
convention: ``update`` receives per-example gradients (a leading batch axis on every
leaf) and returns one noisy mean gradient, so it goes first in ``optax.chain``. Unlike
it, the state carries the accounting (:class:`DPAggregateState`), the step that would
take the run past its budget is refused (a tree of zeros, ``refused`` set, no NaN),
and the noisy sum is divided by the expected batch size q n, not by the number of
examples given: with Poisson sampling the realized batch size depends on who is in
the data, so dividing by it would release that count without noise.

Each answered step: clip every example's gradient to l2 norm C
(:func:`jaxdp.training.clip_per_example`), sum, add N(0, (sigma C)^2) to every
coordinate, divide by q n. The privacy claim needs the batch to be a Poisson sample
(:func:`jaxdp.training.poisson_batch`) and every example to be one person's data.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.accounting import guard
from jaxdp.accounting.errors import StaleAccountantError
from jaxdp.composition.dpsgd import PldAccounting, RdpAccounting
from jaxdp.training.clipping import clipped_sum
from jaxdp.training.plan import TrainingPlan
from jaxdp.training.sampling import max_batch_size
from jaxdp.training.state import DPAggregateState
from jaxdp.typing import KeyArray

try:  # optax is optional: without it, a NamedTuple of the same shape
  from optax import GradientTransformation
except ImportError:  # pragma: no cover - optax is installed by the test extra

  class GradientTransformation(NamedTuple):
    """optax's ``GradientTransformation``: an ``init`` and an ``update`` function."""

    init: object
    update: object


__all__ = ["GradientTransformation", "dp_aggregate"]

_INT32_MAX = 2**31 - 1


def dp_aggregate(
  l2_norm_clip: float,
  noise_multiplier: float,
  *,
  sampling_rate: float,
  dataset_size: int,
  eps_budget: float,
  delta: float,
  key: KeyArray,
  accounting: RdpAccounting | PldAccounting,
) -> GradientTransformation:
  """DP-SGD's clipped, noised mean of per-example gradients, within a budget.

  Args:
    l2_norm_clip: C in [2**-60, 2**60]; each example's gradient is scaled into the l2
      ball of radius C (norm over the whole gradient pytree).
    noise_multiplier: sigma > 0; the noise on the sum has standard deviation sigma C.
    sampling_rate: q in (0, 1], each example's probability of joining a step's
      Poisson-sampled batch.
    dataset_size: n, the number of examples; the noisy sum is divided by q n.
    eps_budget: the total eps of the whole run's (eps, delta)-DP budget.
    delta: its delta, in (0, 1); typically below 1 / dataset_size.
    key: a PRNG key for the noise, owned by the state (split every step); not the
      key that samples the batches.
    accounting: ``jaxdp.RdpAccounting(...)`` (Rényi DP, a valid upper bound) or
      ``jaxdp.PldAccounting(...)`` (privacy-loss distributions of the fixed plan:
      tighter, more steps for the same budget).

  Returns:
    An optax ``GradientTransformation``. ``update(per_example_grads, state,
    params=None)`` returns the noisy mean gradient (float32 leaves shaped like one
    example's gradient) and the new :class:`DPAggregateState`; once ``max_steps``
    steps are answered, every further update is refused: all zeros, ``refused``
    True, ``refusals`` + 1, the step count and the privacy spent unchanged.

  Raises:
    ValueError: an argument is out of range, or no step fits the budget; from
      ``update``: a batch axis longer than :func:`max_batch_size` of
      ``(dataset_size, sampling_rate)`` (sampled at a larger rate than the plan's).
  """
  _checks.check_key(key)
  plan = TrainingPlan.create(
    l2_norm_clip,
    noise_multiplier,
    sampling_rate,
    dataset_size,
    eps_budget,
    delta,
    accounting,
  )

  try:
    key = guard.own_key(key)  # consumed: a second transformation from it is refused
  except StaleAccountantError:
    raise StaleAccountantError(
      "dp_aggregate's key was already used (by a release, an accountant or another "
      "dp_aggregate): two transformations from one key add the same noise. Give "
      "each its own key (jax.random.split)."
    ) from None
  inits = []

  def init(params):
    del params
    if inits:  # the key is the state's: a second init would replay the first's noise
      raise StaleAccountantError(
        "this dp_aggregate transformation was already initialised: a second state "
        "from it starts from the same key (the same noise) and a fresh budget. "
        "Continue from the state its updates returned, or build a new dp_aggregate "
        "with a new key."
      )
    inits.append(True)
    zero = jnp.zeros((), jnp.int32)
    return DPAggregateState(key, zero, zero, jnp.zeros((), jnp.bool_), plan)

  def update(updates, state, params=None):
    del params
    if not isinstance(state, DPAggregateState) or state.plan != plan:
      raise ValueError(
        "state must be the DPAggregateState this transformation's init returned (or "
        "a later one): its plan differs or it is another kind of state."
      )
    _check_batch(updates, plan)
    try:
      guard.check_unused(state.key)
    except StaleAccountantError:
      raise StaleAccountantError(
        "this DPAggregateState was already used by an earlier update: updating from a "
        "stale state adds the same noise again while counting the step once more. "
        "Always continue from the state the last update returned."
      ) from None
    state = _one_key_per_lane(state, updates)
    out, new_state = _step(updates, state)
    guard.mark_used(state.key)
    return out, new_state

  return GradientTransformation(init, update)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Keyed:
  """The key and a counter, in the shape :func:`guard.one_key_per_lane` reads."""

  key: jax.Array
  answered: jax.Array


def _one_key_per_lane(state: DPAggregateState, updates) -> DPAggregateState:
  """``state``, after the accountant's trace-time check that the noise key varies
  wherever the data does: ``jax.vmap`` of an update over batches with one shared state
  (every lane would add the same noise), a state closed over by a jitted function or
  loop body (every run the same noise), or ``pmap`` / ``shard_map(check_vma=False)``
  raise :class:`jaxdp.StaleAccountantError` before any noise is drawn."""
  try:
    probe = guard.one_key_per_lane(_Keyed(state.key, state.steps), updates)
  except StaleAccountantError as e:
    raise StaleAccountantError(
      f"dp_aggregate's update: {e} (Here the accountant is the DPAggregateState: give "
      "every lane a state of its own, made from its own key, and pass the state as an "
      "argument or loop carry.)"
    ) from None
  return dataclasses.replace(state, steps=probe.answered)


def _check_batch(updates, plan: TrainingPlan) -> None:
  """Refuses a batch axis longer than :func:`max_batch_size` of the plan's dataset
  size and rate: a Poisson sample at the plan's rate fills more rows with probability
  at most 2**-64, so a longer batch was sampled at a larger rate than the plan charges
  (or padded past need, which the shape alone cannot tell apart)."""
  sizes = {jnp.shape(x)[0] for x in jax.tree_util.tree_leaves(updates) if jnp.ndim(x)}
  limit = max_batch_size(plan.dataset_size, plan.sampling_rate)
  if sizes and max(sizes) > limit:
    raise ValueError(
      f"the per-example gradients hold {max(sizes)} rows, more than "
      f"max_batch_size(dataset_size={plan.dataset_size}, "
      f"sampling_rate={plan.sampling_rate}) = {limit}: a Poisson sample at the "
      "plan's rate fills more rows than that with probability at most 2**-64, so "
      "this batch was sampled at a larger rate than the plan charges, or padded "
      "past that size. Sample each batch with jaxdp.training.poisson_batch(key, "
      "dataset_size, sampling_rate) at the plan's rate, with its default max_batch."
    )


@jax.jit  # one compiled program for eager updates; inlined in a caller's jit
def _step(updates, state: DPAggregateState):
  plan = state.plan
  answer = state.steps < plan.max_steps  # integer rule, decided before any noise
  key, noise_key = jax.random.split(state.key)
  leaves, treedef = jax.tree_util.tree_flatten(clipped_sum(updates, plan.l2_norm_clip))
  keys = jax.random.split(noise_key, len(leaves))
  std = plan.noise_multiplier * plan.l2_norm_clip
  scale = 1.0 / plan.expected_batch_size
  noisy = [
    jnp.where(answer, (s + std * jax.random.normal(k, s.shape, s.dtype)) * scale, 0.0)
    for s, k in zip(leaves, keys)
  ]
  new_state = dataclasses.replace(
    state,
    key=key,
    steps=state.steps + answer.astype(jnp.int32),
    # saturating: 2**31 refused steps must not wrap the count to negative
    refusals=state.refusals + (~answer & (state.refusals < _INT32_MAX)).astype(jnp.int32),
    refused=~answer,
  )
  return jax.tree_util.tree_unflatten(treedef, noisy), new_state
