"""Samples per second of each JAX PRNG implementation against numpy's Generator.

  python benchmarks/generators.py [--n 1000000] [--out DIR] [--only words]

For every generator (Threefry, jaxdp's unrolled Threefry, JAX's rbg, ChaCha20,
jaxdp's ChaCha8) and for numpy's default Generator (PCG64), in one run, at a batch
of n: raw 32-bit words, uniform floats, Gaussian and Laplace floats (n x 16 each),
l_inf and l_2 K-norm noise at d = 16 (n vectors), and the NHIS-3 poset ball (n
vectors). numpy's K-norm rows use the same construction (uniform direction in the
ball times a Gamma(d + 1) radius) written with its vectorised calls; its poset-ball
row runs jaxdp's general sampler's algorithm (from its subset table: a binary trie
walk for the down-set, top-down linear extensions by inverse CDF, Dirichlet weights on the
simplex) vectorised over the batch in numpy,
and both poset rows record E||Z||^2 / (d / 3) over the batch, which must agree
(0.372 for NHIS-3), as a check that the numpy peer samples the same ball.
The two Threefry columns draw the same numbers: "threefry2x32" is a plain
``jax.random.key``, which ``jax.random`` (raw and uniform rows) computes with JAX's
own code and jaxdp's samplers (the other rows) swap for the unrolled implementation
on the CPU (``jaxdp.prng.threefry.fast_key``); "threefry2x32_unrolled" uses that
implementation's key throughout. Writes <out>/generators.{json,md}.

``--only words`` times raw 32-bit words alone (n x 16 per call) for the unrolled
Threefry (what ``fast_key`` gives jaxdp's samplers on the CPU), ChaCha20 and ChaCha8,
interleaved (every generator called once per round, best of the rounds), by wall
time and by process CPU time (all threads), with each kernel's compile time: the
ratios to Threefry compare calls made under the same load
(<out>/generators_words.{json,md}).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, interleaved_best, machine, write_results
from folders import add_out

import jaxdp
from jaxdp import LpBall, Poset
from jaxdp.samplers.general import general_tables
from jaxdp.samplers.subsets import extension_counts, object_weights

D = 16


def numpy_poset_ball(rng, poset, n):
  """(n, d + 1) exactly uniform points of the poset ball, numpy, vectorised over n:
  the algorithm of jaxdp's general sampler on its tables (float32 weights)."""
  t = general_tables(poset)
  d = poset.d
  w = object_weights(extension_counts(poset))
  trie = np.empty((1 << d) - 1)  # P(next bit of A is 1 | bits so far)
  for level in range(d):
    sums = w.reshape(1 << (level + 1), -1).sum(axis=1)
    trie[(1 << level) - 1 : (1 << (level + 1)) - 1] = sums[1::2] / sums.reshape(-1, 2).sum(
      1
    )
  trie = trie.astype(np.float32)
  u = rng.random((n, d), np.float32)
  a = np.zeros(n, np.int64)
  for level in range(d):  # the down-set A, one trie level per element
    a = 2 * a + (u[:, level] < trie[(1 << level) - 1 + a])
  k = np.bitwise_count(a)
  rest, s_set = a ^ ((1 << d) - 1), a
  bits = np.int64(1) << np.arange(d)
  strict_up = t.strict_up.astype(np.int64)
  v = rng.random((n, d), np.float32)
  seq = np.empty((n, d), np.int64)
  for s in range(d):  # linear extensions of A, then of the rest, top down
    s_set = np.where(k == s, rest, s_set)
    top = ((s_set[:, None] & bits) != 0) & ((s_set[:, None] & strict_up) == 0)
    c = np.cumsum(np.where(top, t.ext[s_set[:, None] ^ bits], 0), axis=1)
    past = top & (c > v[:, s, None] * c[:, -1:])
    x = np.where(past.any(axis=1), past.argmax(axis=1), d - 1 - top[:, ::-1].argmax(axis=1))
    s_set = s_set ^ (np.int64(1) << x)
    seq[:, s] = x
  expo = rng.standard_exponential((n, d + 2), np.float32)
  f = np.zeros((n, d), bool)
  coord = np.zeros((n, d), np.float32)
  for s in range(d):  # sum_i E_i v_i over the simplex's vertices
    f = np.where((k == s)[:, None], False, f) | t.up[seq[:, s]]
    coord += np.where(s < k, expo[:, s + 1], -expo[:, s + 2])[:, None] * f
  root = np.where(np.arange(d + 2) <= k[:, None], expo, -expo).sum(axis=1)
  return np.concatenate([root[:, None], coord], axis=1) / expo.sum(axis=1, keepdims=True)


def _ratio(z):
  """E||Z_{1..d}||^2 over the d-cube's d / 3 (the root dropped), and its standard
  error over the batch."""
  z = np.asarray(z, np.float64)[:, 1:]
  r = np.sum(z * z, axis=1) / (z.shape[1] / 3)
  return float(np.mean(r)), float(np.std(r) / math.sqrt(r.size))


def _numpy_cases(n, nhis):
  rng = np.random.default_rng(0)

  def linf():
    return rng.uniform(-1, 1, (n, D)).astype(np.float32) * rng.standard_gamma(
      D + 1, (n, 1)
    ).astype(np.float32)

  def l2():
    g = rng.standard_normal((n, D), np.float32)
    u = rng.random((n, 1), np.float32) ** (1 / D)
    r = rng.standard_gamma(D + 1, (n, 1)).astype(np.float32)
    return g / np.linalg.norm(g, axis=1, keepdims=True) * u * r

  return {
    "raw 32-bit words": (lambda: rng.integers(0, 2**32, n * D, np.uint32), n * D),
    "uniform float32": (lambda: rng.random(n * D, np.float32), n * D),
    "gaussian float32": (lambda: rng.standard_normal(n * D, np.float32), n * D),
    "laplace": (lambda: rng.laplace(size=n * D).astype(np.float32), n * D),
    "knorm l_inf d=16": (linf, n),
    "knorm l_2 d=16": (l2, n),
    "poset ball NHIS-3": (lambda: numpy_poset_ball(rng, nhis, n), n),
  }


def _jax_cases(n, nhis):
  return {
    "raw 32-bit words": (lambda k: jax.random.bits(k, (n * D,), jnp.uint32), n * D),
    "uniform float32": (lambda k: jax.random.uniform(k, (n * D,)), n * D),
    "gaussian float32": (lambda k: jaxdp.random.gaussian(k, (n * D,)), n * D),
    "laplace": (lambda k: jaxdp.random.laplace(k, (n * D,)), n * D),
    "knorm l_inf d=16": (lambda k: jaxdp.random.knorm(k, LpBall(D, jnp.inf), 1.0, (n,)), n),
    "knorm l_2 d=16": (lambda k: jaxdp.random.knorm(k, LpBall(D, 2.0), 1.0, (n,)), n),
    "poset ball NHIS-3": (lambda k: jaxdp.random.poset_ball(k, nhis, (n,)), n),
  }


def _words_only(args):
  """``--only words``: raw 32-bit words per second, interleaved, wall and CPU time."""
  count = args.n * D
  keys = {
    "threefry2x32_unrolled": jax.random.key(0, impl=jaxdp.prng.threefry.THREEFRY_UNROLLED),
    "chacha20": jaxdp.random.secure_key(bytes(32)),
    "chacha8": jax.random.key(0, impl=jaxdp.prng.chacha.CHACHA8),
  }
  fns, compile_s = {}, {}
  for name, key in keys.items():
    t0 = time.perf_counter()
    f = jax.jit(lambda k: jax.random.bits(k, (count,), jnp.uint32)).lower(key).compile()
    compile_s[name] = time.perf_counter() - t0
    fns[name] = lambda f=f, key=key: f(key)
  wall = interleaved_best(fns, rounds=args.rounds)
  cpu = interleaved_best(fns, rounds=args.rounds, clock=time.process_time)
  base = "threefry2x32_unrolled"
  rows = {
    name: {
      "words_per_s_wall": count / wall[name],
      "words_per_s_cpu": count / cpu[name],
      "time_over_threefry_wall": wall[name] / wall[base],
      "time_over_threefry_cpu": cpu[name] / cpu[base],
      "compile_s": compile_s[name],
    }
    for name in keys
  }
  lines = [
    f"Raw 32-bit words, {count:,} per call, best of {args.rounds} interleaved rounds "
    "(wall time, then process CPU time over all threads), and the compile time of "
    "each kernel:",
    "",
    "| generator | words/s (wall) | time / Threefry (wall) | words/s (CPU) "
    "| time / Threefry (CPU) | compile s |",
    "|---|---|---|---|---|---|",
  ]
  for name, r in rows.items():
    lines.append(
      f"| {name} | {r['words_per_s_wall']:,.0f} | {r['time_over_threefry_wall']:.2f} "
      f"| {r['words_per_s_cpu']:,.0f} | {r['time_over_threefry_cpu']:.2f} "
      f"| {r['compile_s']:.2f} |"
    )
  write_results(
    args.out,
    "generators_words",
    {"machine": machine(), "n_words": count, "rounds": args.rounds, "rows": rows},
    "\n".join(lines),
  )


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1_000_000)
  add_out(ap)
  ap.add_argument("--only", choices=["words"], help="only raw words, interleaved")
  ap.add_argument(
    "--rounds", type=int, default=10, help="interleaved rounds (--only words)"
  )
  args = ap.parse_args(argv)
  if args.only == "words":
    return _words_only(args)
  n = args.n
  nhis = Poset.nhis(3)
  impls = ["threefry2x32", "threefry2x32_unrolled", "rbg", "chacha20", "chacha8"]
  keys = {
    "threefry2x32": jax.random.key(0),
    "threefry2x32_unrolled": jax.random.key(0, impl=jaxdp.prng.threefry.THREEFRY_UNROLLED),
    "rbg": jax.random.key(0, impl="rbg"),
    "chacha20": jaxdp.random.secure_key(bytes(32)),
    "chacha8": jax.random.key(0, impl=jaxdp.prng.chacha.CHACHA8),
  }
  table, ratios = {}, {}
  for name, (fn, count) in _numpy_cases(n, nhis).items():
    table.setdefault(name, {})["numpy PCG64"] = count / best_time(fn)
    if name.startswith("poset"):
      ratios["numpy PCG64"] = _ratio(fn())
  for impl in impls:
    for name, (fn, count) in _jax_cases(n, nhis).items():
      f = jax.jit(fn)
      table.setdefault(name, {})[impl] = count / best_time(lambda f=f: f(keys[impl]))
      print(impl, name, f"{table[name][impl]:,.0f}/s", flush=True)
      if name.startswith("poset"):
        ratios[impl] = _ratio(f(keys[impl]))
  cols = ["numpy PCG64"] + impls
  lines = [
    f"Samples (or vectors) per second, batch n = {n:,} (x 16 for scalar rows):",
    "",
    "| draw | " + " | ".join(cols) + " | unrolled / numpy | best JAX / numpy |",
    "|---|" + "---|" * (len(cols) + 2),
  ]
  for name, row in table.items():
    cells = [f"{row[c]:,.0f}" if c in row else "-" for c in cols]
    best = max(impls, key=lambda c: row[c])
    if "numpy PCG64" in row:
      ratio = f"{row['threefry2x32_unrolled'] / row['numpy PCG64']:.2f}"
      vs = f"{row[best] / row['numpy PCG64']:.2f} ({best})"
    else:
      ratio, vs = "-", f"- ({best})"
    lines.append(f"| {name} | " + " | ".join(cells) + f" | {ratio} | {vs} |")
  lines += [
    "",
    "Check that every poset-ball row samples the same ball: E||Z||^2 / (d / 3) "
    "over its batch, ± one standard error (NHIS-3: 0.3718 ± 0.0002 in the "
    "README's study of 10^6 draws):",
    "",
    "| " + " | ".join(cols) + " |",
    "|" + "---|" * len(cols),
    "| " + " | ".join("{:.4f} ± {:.4f}".format(*ratios[c]) for c in cols) + " |",
  ]
  write_results(
    args.out,
    "generators",
    {"machine": machine(), "n": n, "rows": table, "poset_ball_ratio": ratios},
    "\n".join(lines),
  )


if __name__ == "__main__":
  main()
