"""Steps per second of DP-SGD: jaxdp.training against optax.contrib and jax_privacy.

  python benchmarks/training.py [--batch 256] [--steps 50] [--large-steps 4]
                                [--rounds 5] [--out DIR]

In one run, side by side, on the same model, data and batch size (B examples each
step, the same for every contender), one jitted ``lax.scan`` of SGD steps per call,
timed in interleaved rounds (:func:`common.interleaved_best`):

* ``jaxdp``: ``per_example_grads`` + ``optax.chain(jaxdp.training.dp_aggregate(...),
  optax.sgd)`` (scaled per-example clipping, non-finite examples dropped, noise, the
  budget check, the RDP plan computed once on the host);
* ``optax.contrib``: ``jax.vmap(jax.grad)`` + ``optax.chain(
  optax.contrib.differentially_private_aggregate(...), optax.sgd)`` (no accounting);
* ``jax_privacy``: ``jax_privacy.clipped_grad`` (clipped sum) + ``optax.chain(
  jax_privacy.noise_addition.gaussian_privatizer(...), optax.scale(1 / B),
  optax.sgd)`` (no accounting), when jax_privacy is installed;
* ``non-private``: ``jax.grad`` of the batch's mean loss + ``optax.sgd``, the floor.

Two models: an MLP 64-32-10 (digits-sized) and 784-256-10 (MNIST-sized), on random
data of those shapes. Writes ``training.{json,md}`` into ``--out`` (default
a fresh folder; pass ``--out results`` to update the committed results).
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import interleaved_best, machine, write_results
from folders import add_out

import jaxdp
from jaxdp import training

try:
  import jax_privacy
  from jax_privacy import noise_addition
except ImportError:  # pragma: no cover - optional peer
  jax_privacy = None

CLIP, SIGMA, LR = 1.0, 1.1, 0.1


def _model(sizes, key):
  keys = jax.random.split(key, len(sizes) - 1)
  return [
    {"w": jax.random.normal(k, (a, b)) / np.sqrt(a), "b": jnp.zeros(b)}
    for k, a, b in zip(keys, sizes[:-1], sizes[1:])
  ]


def _logits(params, x):
  for layer in params[:-1]:
    x = jnp.tanh(x @ layer["w"] + layer["b"])
  return x @ params[-1]["w"] + params[-1]["b"]


def _loss(params, x, y):
  """One example's loss (no batch axis)."""
  return optax.softmax_cross_entropy_with_integer_labels(_logits(params, x), y)


def _batch_loss(params, x, y):
  """A batch's loss with a leading batch axis (jax_privacy's convention)."""
  return jnp.sum(jax.vmap(_loss, in_axes=(None, 0, 0))(params, x, y))


def _runner(grad_fn, opt, params, xs, ys):
  """A jitted function running ``len(xs)`` steps in a scan from ``params``."""

  def step(carry, batch):
    params, state = carry
    updates, state = opt.update(grad_fn(params, *batch), state, params)
    return (optax.apply_updates(params, updates), state), None

  run = jax.jit(lambda c, xs, ys: jax.lax.scan(step, c, (xs, ys))[0])
  carry = (params, opt.init(params))
  return lambda: run(carry, xs, ys)


def contenders(sizes, batch, steps, n):
  key = jax.random.key(0)
  kp, kx, ky, *knoise = jax.random.split(key, 6)
  params = _model(sizes, kp)
  xs = jax.random.normal(kx, (steps, batch, sizes[0]))
  ys = jax.random.randint(ky, (steps, batch), 0, sizes[-1])
  q = batch / n
  dp = training.dp_aggregate(
    CLIP,
    SIGMA,
    sampling_rate=q,
    dataset_size=n,
    eps_budget=1e6,
    delta=1e-5,
    key=knoise[0],
    accounting=jaxdp.composition.RdpAccounting(),
  )
  out = {
    "jaxdp": _runner(
      functools.partial(training.per_example_grads(_loss), mask=None),
      optax.chain(dp, optax.sgd(LR)),
      params,
      xs,
      ys,
    ),
    "optax.contrib": _runner(
      jax.vmap(jax.grad(_loss), in_axes=(None, 0, 0)),
      optax.chain(
        optax.contrib.differentially_private_aggregate(CLIP, SIGMA, key=knoise[1]),
        optax.sgd(LR),
      ),
      params,
      xs,
      ys,
    ),
  }
  if jax_privacy is not None:
    out["jax_privacy"] = _runner(
      jax_privacy.clipped_grad(_batch_loss, l2_clip_norm=CLIP, batch_argnums=(1, 2)),
      optax.chain(
        noise_addition.gaussian_privatizer(stddev=SIGMA * CLIP, prng_key=knoise[2]),
        optax.scale(1.0 / batch),
        optax.sgd(LR),
      ),
      params,
      xs,
      ys,
    )
  out["non-private"] = _runner(
    lambda p, x, y: jax.grad(_batch_loss)(p, x, y), optax.sgd(LR / batch), params, xs, ys
  )
  return out


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--batch", type=int, default=256)
  ap.add_argument("--steps", type=int, default=50, help="steps per call, small MLP")
  ap.add_argument("--large-steps", type=int, default=4, help="steps per call, large MLP")
  ap.add_argument("--rounds", type=int, default=5)
  add_out(ap)
  args = ap.parse_args(argv)
  rows = []
  models = [
    ("MLP 64-32-10", (64, 32, 10), 1437, args.steps),
    ("MLP 784-256-10", (784, 256, 10), 60000, args.large_steps),
  ]
  for name, sizes, n, steps in models:
    fns = contenders(sizes, args.batch, steps, n)
    best = interleaved_best(fns, rounds=args.rounds)
    for who, seconds in best.items():
      rows.append(
        {
          "model": name,
          "params": sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:])),
          "batch": args.batch,
          "contender": who,
          "seconds_per_call": seconds,
          "steps_per_call": steps,
          "steps_per_s": steps / seconds,
          "vs_jaxdp": best["jaxdp"] / seconds,
        }
      )
  versions = {"optax": optax.__version__, "jaxdp": jaxdp.__version__}
  if jax_privacy is not None:
    versions["jax_privacy"] = jax_privacy.__version__
  payload = {
    "machine": machine(),
    "versions": versions,
    "args": vars(args),
    "clip": CLIP,
    "noise_multiplier": SIGMA,
    "rows": rows,
  }
  table = (
    f"Batch {args.batch}; {args.steps} (small MLP) and {args.large_steps} (large MLP) SGD "
    f"steps per jitted call (one lax.scan); best of {args.rounds} interleaved rounds; "
    "versions: "
    + ", ".join(f"{k} {v}" for k, v in versions.items())
    + ". `x jaxdp` > 1: faster than jaxdp.\n\n"
    "| model | params | contender | steps/s | x jaxdp |\n|---|---|---|---|---|\n"
    + "\n".join(
      f"| {r['model']} | {r['params']:,} | {r['contender']} | {r['steps_per_s']:,.1f} "
      f"| {r['vs_jaxdp']:.2f} |"
      for r in rows
    )
  )
  write_results(args.out, "training", payload, table)


if __name__ == "__main__":
  main()
