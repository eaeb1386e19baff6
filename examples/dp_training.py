"""DP-SGD on scikit-learn's digits: a small MLP trained at eps 1, 3 and 8 (delta 1e-5).

  python examples/dp_training.py [--quick] [--accounting rdp|pld] [--out results]

Each run draws a Poisson batch every step (``jaxdp.training.poisson_batch``), takes
per-example gradients (``per_example_grads``), and updates with
``optax.chain(jaxdp.training.dp_aggregate(...), optax.adam(...))``. The noise
multiplier is the smallest for which the planned number of steps fits the budget
(``noise_multiplier_for``); the transformation would refuse any step past it. The
whole run is one jitted ``lax.scan``. Test accuracy is reported beside a non-private
run of the same model and schedule (mean gradient of the same Poisson batches,
no clipping, no noise), averaged over ``--seeds`` seeds.

Needs the ``examples`` extra (optax, scikit-learn).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax
from sklearn.datasets import load_digits

import jaxdp
from jaxdp import training

DELTA = 1e-5
CLIP = 1.0
HIDDEN = 32


def load(seed: int = 0):
  """Digits scaled to [0, 1], split 80/20 (a fixed permutation)."""
  x, y = load_digits(return_X_y=True)
  order = np.random.default_rng(seed).permutation(len(y))
  x, y = (x[order] / 16.0).astype(np.float32), y[order].astype(np.int32)
  cut = int(0.8 * len(y))
  return (jnp.asarray(x[:cut]), jnp.asarray(y[:cut])), (jnp.asarray(x[cut:]), y[cut:])


def init_params(key):
  k1, k2 = jax.random.split(key)
  return {
    "w1": jax.random.normal(k1, (64, HIDDEN)) / 8.0,
    "b1": jnp.zeros(HIDDEN),
    "w2": jax.random.normal(k2, (HIDDEN, 10)) / np.sqrt(HIDDEN),
    "b2": jnp.zeros(10),
  }


def logits(params, x):
  return jnp.tanh(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def loss(params, x, y):
  """Cross-entropy of ONE example (no batch axis)."""
  return optax.softmax_cross_entropy_with_integer_labels(logits(params, x), y)


def train(data, steps, q, lr, key, noise_multiplier=None, eps=None, accounting=None):
  """``steps`` steps on Poisson batches; DP when ``noise_multiplier`` is given.
  Returns the parameters and the DP state (None for the non-private run)."""
  (x, y), n = data, data[0].shape[0]
  init_key, noise_key, batch_key = jax.random.split(key, 3)
  params = init_params(init_key)
  grads_of = training.per_example_grads(loss)
  if noise_multiplier is None:
    opt = optax.adam(lr)
  else:
    opt = optax.chain(
      training.dp_aggregate(
        CLIP,
        noise_multiplier,
        sampling_rate=q,
        dataset_size=n,
        eps_budget=eps,
        delta=DELTA,
        key=noise_key,
        accounting=accounting,
      ),
      optax.adam(lr),
    )
  max_batch = training.max_batch_size(n, q)

  def step(carry, sample_key):
    params, opt_state = carry
    idx, mask = training.poisson_batch(sample_key, n, q, max_batch)
    g = grads_of(params, x[idx], y[idx], mask=mask)
    if noise_multiplier is None:  # mean over the realized batch
      count = jnp.maximum(jnp.sum(mask), 1)
      g = jax.tree_util.tree_map(lambda v: jnp.sum(v, axis=0) / count, g)
    updates, opt_state = opt.update(g, opt_state, params)
    return (optax.apply_updates(params, updates), opt_state), None

  run = jax.jit(lambda c, ks: jax.lax.scan(step, c, ks)[0])
  params, opt_state = run((params, opt.init(params)), jax.random.split(batch_key, steps))
  return params, (None if noise_multiplier is None else training.find_state(opt_state))


def accuracy(params, test):
  x, y = test
  return float(np.mean(np.asarray(jnp.argmax(logits(params, x), axis=1)) == y))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--quick", action="store_true", help="a few steps, one seed (smoke)")
  ap.add_argument("--accounting", choices=("rdp", "pld"), default="rdp")
  ap.add_argument("--seeds", type=int, default=3)
  ap.add_argument("--out", default=None, help="write dp_training.{json,md} here")
  args = ap.parse_args(argv)
  epochs, seeds = (2, 1) if args.quick else (40, args.seeds)
  q, lr = 0.1, 0.01
  steps = int(round(epochs / q))
  accounting = (
    jaxdp.composition.RdpAccounting()
    if args.accounting == "rdp"
    else jaxdp.composition.PldAccounting()
  )
  train_set, test = load()
  n = train_set[0].shape[0]
  print(
    f"digits: {n} training / {len(test[1])} test examples; MLP 64-{HIDDEN}-10; "
    f"q = {q} (expected batch {q * n:.0f}), {steps} steps, clip {CLIP}, "
    f"delta {DELTA}, {args.accounting.upper()} accounting, {seeds} seed(s)"
  )
  rows = []
  for eps in (None, 1.0, 3.0, 8.0):
    t0 = time.perf_counter()
    sigma = (
      None
      if eps is None
      else training.noise_multiplier_for(q, steps, eps, DELTA, accounting)
    )
    accs, spent, refusals = [], None, 0
    for seed in range(seeds):
      params, state = train(
        train_set, steps, q, lr, jax.random.key(100 + seed), sigma, eps, accounting
      )
      accs.append(accuracy(params, test))
      if state is not None:
        spent, refusals = state.epsilon(), refusals + int(state.refusals)
    row = {
      "eps_budget": eps,
      "noise_multiplier": sigma,
      "eps_spent": spent,
      "refused_steps": refusals,
      "accuracy_mean": float(np.mean(accs)),
      "accuracy_min": float(np.min(accs)),
      "accuracy_max": float(np.max(accs)),
      "seconds": time.perf_counter() - t0,
    }
    rows.append(row)
    label = "non-private" if eps is None else f"eps {eps:g}"
    extra = "" if eps is None else f"  sigma {sigma:.3f}, spent eps {spent:.3f}"
    print(
      f"{label:>12}: test accuracy {row['accuracy_mean']:.3f} "
      f"[{row['accuracy_min']:.3f}, {row['accuracy_max']:.3f}]{extra}"
    )
  if args.out:
    _write(
      Path(args.out), args, dict(q=q, lr=lr, steps=steps, epochs=epochs, seeds=seeds), rows
    )
  return rows


def _write(out: Path, args, setup, rows):
  out.mkdir(parents=True, exist_ok=True)
  payload = {
    "command": "python examples/dp_training.py"
    + (" --quick" if args.quick else "")
    + f" --accounting {args.accounting} --seeds {setup['seeds']}",
    "machine": {
      "cpu_count": os.cpu_count(),
      "platform": platform.platform(),
      "jax": jax.__version__,
      "backend": jax.default_backend(),
    },
    "setup": {**setup, "clip": CLIP, "delta": DELTA, "hidden": HIDDEN},
    "rows": rows,
  }
  (out / "dp_training.json").write_text(json.dumps(payload, indent=2))
  lines = [
    "# dp_training (examples/dp_training.py)",
    "",
    f"`{payload['command']}`; {setup['steps']} steps at q = {setup['q']}, clip {CLIP}, "
    f"delta {DELTA}; test accuracy over {setup['seeds']} seeds (mean [min, max]). "
    f"{os.cpu_count()} CPUs, backend {jax.default_backend()}, jax {jax.__version__}; "
    "seconds include calibrating sigma and compiling.",
    "",
    "| eps budget | noise multiplier | eps spent | accuracy | seconds |",
    "|---|---|---|---|---|",
  ]
  for r in rows:
    eps = "non-private" if r["eps_budget"] is None else f"{r['eps_budget']:g}"
    sigma = "-" if r["noise_multiplier"] is None else f"{r['noise_multiplier']:.3f}"
    spent = "-" if r["eps_spent"] is None else f"{r['eps_spent']:.3f}"
    lines.append(
      f"| {eps} | {sigma} | {spent} | {r['accuracy_mean']:.3f} "
      f"[{r['accuracy_min']:.3f}, {r['accuracy_max']:.3f}] | {r['seconds']:.1f} |"
    )
  (out / "dp_training.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
  main()
