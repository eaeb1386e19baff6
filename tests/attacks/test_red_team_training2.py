"""Red-team attacks on jaxdp.training, second round (public API only). Each test
failed on the code it was written against because of the weakness it names."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import training
from tests.attacks.test_red_team_training import N, Q, make_tx


def _dot_precisions(jaxpr):
  """The precision of every ``dot_general`` in ``jaxpr`` and its sub-jaxprs."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "dot_general":
      found.append(eqn.params["precision"])
    for p in eqn.params.values():
      for sub in p if isinstance(p, (tuple, list)) else (p,):
        if isinstance(sub, jax.extend.core.ClosedJaxpr):
          found += _dot_precisions(sub.jaxpr)
        elif isinstance(sub, jax.extend.core.Jaxpr):
          found += _dot_precisions(sub)
  return found


def test_clipped_sum_contracts_examples_at_highest_precision():
  """The clipping bound ("every example's exact norm is at most C, float rounding
  included") assumes float32 products; the norm is computed at ``HIGHEST`` for that
  reason. Before: the sum over examples, ``w @ x``, ran at the default precision,
  which on accelerators (TF32 on GPUs, one bfloat16 pass on TPUs, or anywhere under
  ``jax_default_matmul_precision="bfloat16"``) rounds each weight and entry to 10 or 8
  bits: an example's contribution to the sum could exceed C by ~2**-8 relative while
  the noise is calibrated to C. XLA:CPU ignores the setting, so the test reads the
  traced program: every contraction must ask for ``HIGHEST``."""
  grads = {"w": jnp.ones((4, 3, 2), jnp.float32), "b": jnp.ones((4, 2), jnp.bfloat16)}
  highest = (jax.lax.Precision.HIGHEST, jax.lax.Precision.HIGHEST)
  tx = make_tx(jax.random.key(0))
  state = tx.init(None)
  update = lambda g, s: tx.update(g, s)[0]
  clip = lambda g: training.clip_per_example(g, 1.0)
  with jax.default_matmul_precision("bfloat16"):
    for fn, args in ((update, (grads, state)), (clip, (grads,))):
      jaxpr = jax.make_jaxpr(fn)(*args).jaxpr
      precisions = _dot_precisions(jaxpr)
      assert precisions
      assert all(p == highest for p in precisions), precisions


def test_noise_key_reused_to_sample_the_batch_is_refused():
  """The guide: give ``poisson_batch`` "a key of its own ..., never dp_aggregate's".
  Before: nothing enforced it, in either order, so a trainer who passed one key to
  both drew the batch from the key whose children make the noise (the sample and
  the noise are then not independent, as the subsampling accounting assumes); every
  other use of a consumed key (a second transformation, an accountant) is refused."""
  key = jax.random.key(11)
  make_tx(key)
  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    training.poisson_batch(key, N, Q)
  key = jax.random.key(12)
  training.poisson_batch(key, N, Q)
  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    make_tx(key)


def test_one_sampling_key_for_two_batches_is_refused():
  """The accounting assumes a fresh, independent Poisson sample every step. Before:
  a loop that forgot to split its batch key (``poisson_batch(key, ...)`` every step,
  eagerly, or twice in one traced step) drew the same batch every time, and each
  step was charged as an independent subsample at rate q (T steps on one fixed
  batch cost far more than that)."""
  key = jax.random.key(13)
  training.poisson_batch(key, N, Q)
  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    training.poisson_batch(key, N, Q)

  def twice(k):
    return training.poisson_batch(k, N, Q), training.poisson_batch(k, N, Q)

  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    jax.jit(twice)(jax.random.key(14))


def test_sampling_key_closed_over_by_a_loop_body_is_refused():
  """Before: a ``lax.scan`` training loop whose body closed over one batch key (or a
  jitted step that did) traced ``poisson_batch`` once with a constant key: every
  step, and every call, trained on the same batch, each charged as an independent
  Poisson sample at rate q."""
  key, key16 = jax.random.key(15), jax.random.key(16)

  def body(c, _):
    idx, mask = training.poisson_batch(key, N, Q)
    return c + jnp.sum(jnp.where(mask, idx, 0)), None

  with pytest.raises(jaxdp.StaleAccountantError, match="constant"):
    jax.lax.scan(body, 0, None, length=3)
  with pytest.raises(jaxdp.StaleAccountantError, match="constant"):
    jax.jit(lambda x: training.poisson_batch(key16, N, Q)[1] & x)(True)


def test_sampling_key_closed_over_by_an_eager_vmap_is_refused():
  """An eager ``jax.vmap`` over steps (or models) whose function closes over one batch
  key: the key is concrete there and so is ``jnp.zeros``, so the "constant of a
  traced program" check did not see the transformation, and every lane drew the same
  batch, each charged as an independent Poisson sample."""
  key = jax.random.key(18)

  def lane(i):
    idx, mask = training.poisson_batch(key, N, Q)
    return jnp.sum(jnp.where(mask, idx, 0)) + i

  with pytest.raises(jaxdp.StaleAccountantError, match="constant"):
    jax.vmap(lane)(jnp.arange(3))
  keys = jax.random.split(jax.random.key(19), 3)  # one key a lane: answered
  idx, mask = jax.vmap(lambda k: training.poisson_batch(k, N, Q))(keys)
  assert idx.shape[0] == 3 and not all(
    np.array_equal(np.asarray(mask[0]), np.asarray(m)) for m in mask[1:]
  )


def test_forgotten_mask_is_refused_not_counted_as_example_zero():
  """The guide's step with ``mask=mask`` left out: poisson_batch pads its indices
  with example 0, so an unmasked sum would count example 0 once per padded row (with
  one-hot data, coordinate 0 of the clipped sum). The mask is now a required
  argument: leaving it out is refused, and with it example 0 counts at most once
  (C = 1)."""
  x = jnp.eye(N, dtype=jnp.float32)
  loss = lambda w, xi: jnp.dot(w, xi)  # gradient = the example itself, norm 1
  idx, mask = training.poisson_batch(jax.random.key(17), N, Q)
  assert int(jnp.sum(~mask)) > 1  # padded rows, each example 0
  grads_of = training.per_example_grads(loss)
  with pytest.raises(ValueError, match="mask="):
    grads_of(jnp.zeros(N), x[idx])  # mask forgotten
  g = grads_of(jnp.zeros(N), x[idx], mask=mask)
  assert float(training.clipped_sum(g, 1.0)[0]) <= 1.0
  unmasked = grads_of(jnp.zeros(N), x[idx], mask=None)  # what a forgotten mask gave
  assert float(training.clipped_sum(unmasked, 1.0)[0]) > 1.0


def test_batch_sampled_at_a_larger_rate_than_charged_is_refused():
  """The plan charges q = 0.01 per step; the loop samples at 0.1 (a typo, or a rate
  changed in one place only): every row of the batch can hold an example, up to
  max_batch_size(N, 0.1) = 46 of them, while a Poisson sample at 0.01 holds more than
  max_batch_size(N, 0.01) rows with probability at most 2**-64."""
  q_plan, q_used = 0.01, 0.1
  tx = make_tx(jax.random.key(18), q=q_plan, eps=30.0)
  state = tx.init(None)
  idx, mask = training.poisson_batch(jax.random.key(19), N, q_used)
  assert idx.shape[0] > training.max_batch_size(N, q_plan)
  g = {"w": jnp.where(mask[:, None], 1.0, 0.0) * jnp.ones((idx.shape[0], 2))}
  with pytest.raises(ValueError, match="max_batch_size"):
    tx.update(g, state)
  with pytest.raises(ValueError, match="max_batch_size"):  # under jit: a static shape
    jax.jit(tx.update)(g, state)
  # the refused update loses nothing: a batch at the plan's rate is then answered
  idx, mask = training.poisson_batch(jax.random.key(20), N, q_plan)
  assert idx.shape[0] == training.max_batch_size(N, q_plan)
  g = {"w": jnp.where(mask[:, None], 1.0, 0.0) * jnp.ones((idx.shape[0], 2))}
  _, state = tx.update(g, state)
  assert int(state.steps) == 1


def test_numpy_raw_key_is_consumed_like_a_jax_key():
  """A legacy raw key held as a NumPy array (``np.load`` of a saved key, or
  ``np.asarray(jax.random.PRNGKey(0))``) is accepted as a key. Before: it could not
  be marked used (a NumPy array takes no attribute), so two ``dp_aggregate``
  transformations, or two accountants, from the same key object were both accepted:
  the same noise on every step, and a fresh budget for each."""
  key = np.array([0, 42], np.uint32)
  make_tx(key)
  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    make_tx(key)
  key = np.array([0, 43], np.uint32)
  jaxdp.Accountant.create(1.0, key=key)
  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    jaxdp.Accountant.create(1.0, key=key)
  key = np.array([0, 44], np.uint32)
  training.poisson_batch(key, N, Q)
  with pytest.raises(jaxdp.StaleAccountantError, match="key"):
    training.poisson_batch(key, N, Q)
