"""Poisson sampling of a training batch, padded to a fixed size for ``jit``.

The subsampled Gaussian accounting of :func:`dp_aggregate` holds for Poisson
sampling: every step, every example joins the batch independently with probability
q. A Poisson batch has a random size, which ``jit`` cannot hold, so
:func:`poisson_batch` returns a fixed number of indices and a mask saying which are
in the batch; :func:`jaxdp.training.per_example_grads` zeroes the others.

Two details keep the sampling no more likely than q, as the accounting assumes:

* inclusion compares 32 random bits with ``floor(q 2**32)``, so an example joins with
  probability at most q (``jax.random.bernoulli`` compares a float32 uniform with q,
  which rounds q up to a multiple of 2**-23: 8x q at q = 2**-26);
* the padded size ``max_batch`` must leave a chance of at most 2**-64 that more
  examples are drawn than fit (the Chernoff bound ``exp(-n KL((B+1)/n || q))`` on the
  binomial tail); past it the extra examples would be dropped. The trained model's
  law then differs from exact Poisson sampling's by at most ``steps * 2**-64`` in
  total variation, which adds at most ``(1 + e**eps) steps 2**-64`` to delta
  (negligible beside any delta in use: about 1e-9 at eps 10 and a million steps).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from jaxdp import _checks
from jaxdp.accounting import guard
from jaxdp.accounting.errors import StaleAccountantError
from jaxdp.typing import KeyArray

__all__ = ["check_rate", "max_batch_size", "poisson_batch"]

_OVERFLOW_LOG = -64 * math.log(2)


def check_rate(q) -> float:
  """``sampling_rate`` as a Python float in (0, 1], or ValueError naming it."""
  q = _checks.check_positive(q, "sampling_rate")
  if q > 1:
    raise ValueError(f"sampling_rate must be in (0, 1]; got {q!r}.")
  return q


def _log_tail(n: int, q: float, k: int) -> float:
  """Chernoff bound on log P(Binomial(n, q) >= k), for k > n q."""
  if k > n:
    return -math.inf
  a = k / n
  kl = a * math.log(a / q) + ((1 - a) * math.log((1 - a) / (1 - q)) if a < 1 else 0.0)
  return -n * kl


def max_batch_size(n: int, sampling_rate: float) -> int:
  """The smallest padded batch size B for which the Chernoff bound on the chance that a
  Poisson sample of ``n`` examples at rate q overflows it (more than B drawn) is at
  most 2**-64.

  Args:
    n: the number of examples in the dataset (>= 1).
    sampling_rate: the probability q in (0, 1] that an example joins a step's batch.

  Returns:
    An int in ``[1, n]`` (``n`` itself when q is 1).
  """
  n = _checks.check_int(n, "n", minimum=1)
  q = check_rate(sampling_rate)
  if q == 1:
    return n
  lo, hi = max(1, math.ceil(n * q)), n  # hi always fits: no sample exceeds n
  while lo < hi:
    mid = (lo + hi) // 2
    if _log_tail(n, q, mid + 1) <= _OVERFLOW_LOG:
      hi = mid
    else:
      lo = mid + 1
  return lo


def poisson_batch(
  key: KeyArray, n: int, sampling_rate: float, max_batch: int | None = None
) -> tuple[jax.Array, jax.Array]:
  """A Poisson sample of ``range(n)``, padded to ``max_batch`` indices and a mask.

  Use a key of its own for every batch (split from the training key, never the one
  given to :func:`dp_aggregate`): the key is consumed, so a second batch from the
  same key object (eagerly, or in one traced program) is refused, and so is a key
  already given to :func:`dp_aggregate` or an accountant, or a constant key inside a
  transformation (a loop body, jitted step or vmapped function closing over it: every
  step or lane the same batch). At q = 1 the key is not used.

  Args:
    key: a PRNG key, used once.
    n: the dataset size (static).
    sampling_rate: q in (0, 1] (static), the same as given to :func:`dp_aggregate`.
    max_batch: the padded size (static); default :func:`max_batch_size` of ``(n, q)``.
      :func:`dp_aggregate` refuses a batch of more rows than that default, the
      most that a sample at its rate fills (but with probability 2**-64).

  Returns:
    ``(indices, mask)``: int32 ``(max_batch,)`` indices of the sampled examples in
    increasing order, then zeros; ``mask`` is True on the sampled ones.

  Raises:
    ValueError: ``max_batch`` overflows with probability above 2**-64 (the message
      gives the smallest size that does not).
    StaleAccountantError: ``key`` was already used, or is a constant of a traced
      program.
  """
  _checks.check_key(key)
  n = _checks.check_int(n, "n", minimum=1)
  q = check_rate(sampling_rate)
  need = max_batch_size(n, q)
  if max_batch is None:
    max_batch = need
  max_batch = _checks.check_int(max_batch, "max_batch", minimum=1)
  if max_batch < need:
    raise ValueError(
      f"max_batch={max_batch} is too small for a Poisson sample of n={n} at "
      f"sampling_rate={q}: more examples than that are drawn with probability above "
      f"2**-64, and dropping them would break the sampling the accounting relies "
      f"on. Use max_batch >= {need} (jaxdp.training.max_batch_size(n, q))."
    )
  max_batch = min(max_batch, n)
  if q == 1:  # nothing is drawn from the key: every batch is all of range(n)
    selected = jnp.ones((n,), jnp.bool_)
  else:
    _claim(key)  # consumed: a second batch from it would be the same batch
    threshold = jnp.uint32(math.floor(q * 2**32))  # P(bits < t) = t / 2**32 <= q
    selected = jax.random.bits(key, (n,), jnp.uint32) < threshold
  (indices,) = jnp.nonzero(selected, size=max_batch, fill_value=0)
  count = jnp.sum(selected, dtype=jnp.int32)
  mask = jnp.arange(max_batch) < count
  return indices.astype(jnp.int32), mask


def _claim(key) -> None:
  """Refuses a batch key closed over by a traced program, then consumes it (checked
  and marked used in one step, :func:`jaxdp.accounting.guard.claim`) before anything
  is drawn, refusing one already used (by a batch, ``dp_aggregate`` or an
  accountant); a refused key is left as it was."""
  if _checks.is_concrete(key) and _checks.in_transformation():
    raise StaleAccountantError(
      "poisson_batch's key is a constant of the traced program (closed over by a "
      "jitted function, loop body or vmapped function): every step of a lax.scan or "
      "loop, every call of a jitted step and every vmap lane would sample the same "
      "batch. Pass the batch key as an argument (or the scan's xs, or vmap's "
      "argument: jax.random.split(batch_key, steps))."
    )
  try:
    guard.claim(key)
  except StaleAccountantError:
    raise StaleAccountantError(
      "poisson_batch's key was already used (by an earlier poisson_batch, a "
      "dp_aggregate or an accountant): the accounting needs a fresh sample every "
      "step, independent of the noise. Split a key of its own for every batch "
      "(jax.random.split(batch_key, steps)), never dp_aggregate's."
    ) from None
