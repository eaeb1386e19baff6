"""Differentially private training in the way optax users expect.

:func:`dp_aggregate` is an optax ``GradientTransformation`` (DP-SGD's aggregation:
per-example clipping, Gaussian noise, the mean over the expected batch size) whose
state carries the privacy accounting and refuses the step that would pass the budget.
It reads per-example gradients (:func:`per_example_grads`) of a Poisson-sampled batch
(:func:`poisson_batch`), and goes first in ``optax.chain``::

  tx = optax.chain(
    jaxdp.training.dp_aggregate(
      1.0, 1.1, sampling_rate=q, dataset_size=n, eps_budget=3.0, delta=1e-5,
      key=noise_key, accounting=jaxdp.composition.RdpAccounting(),
    ),
    optax.adam(1e-3),
  )

Modules: :mod:`.clipping` (per-example l2 clipping), :mod:`.grads` (per-example
gradients), :mod:`.sampling` (Poisson batches), :mod:`.plan` (the static
:class:`TrainingPlan`), :mod:`.state` (the optimiser state) and :mod:`.aggregate`
(the transformation). optax itself is optional: without it ``dp_aggregate`` returns a
NamedTuple with the same ``init`` and ``update`` fields.

References:
  M. Abadi et al., "Deep learning with differential privacy", CCS 2016.
  I. Mironov, K. Talwar, L. Zhang, "Rényi differential privacy of the sampled
  Gaussian mechanism", 2019.
"""

from __future__ import annotations

from jaxdp.training.aggregate import GradientTransformation, dp_aggregate
from jaxdp.training.clipping import clip_per_example, clipped_sum, per_example_norms
from jaxdp.training.grads import per_example_grads
from jaxdp.training.plan import TrainingPlan, noise_multiplier_for
from jaxdp.training.sampling import max_batch_size, poisson_batch
from jaxdp.training.state import DPAggregateState, find_state

__all__ = [
  "DPAggregateState",
  "GradientTransformation",
  "TrainingPlan",
  "clip_per_example",
  "clipped_sum",
  "dp_aggregate",
  "find_state",
  "max_batch_size",
  "noise_multiplier_for",
  "per_example_grads",
  "per_example_norms",
  "poisson_batch",
]
