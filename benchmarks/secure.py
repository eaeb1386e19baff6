"""Publishable releases: ChaCha20 against Threefry, exact (float-safe) noise against
float noise, and OpenDP's float-safe Laplace when it is installed, in one run.

  python benchmarks/secure.py [--n 1000000] [--out results] [--only nhis3]

Rows (samples/s, best of 3 after a warm-up, one process):
* random bits: ``jax.random.bits`` of 2^24 uint32 words per key type;
* Laplace: float ``jaxdp.random.laplace`` (Threefry and ChaCha20 keys), exact
  ``jaxdp.exact.laplace`` (ChaCha20), and the ChaCha20 bits the exact sampler consumes
  (two words per sample) as its floor;
* NHIS-3 poset-ball K-norm noise at eps = 1: float ``jaxdp.random.knorm`` and exact
  ``jaxdp.exact.poset_knorm``, both with ChaCha20 keys;
* l_2 K-norm noise on NHIS-3's count vector (D = 17) and on NHIS-1's (D = 5) at
  eps = 1: float ``jaxdp.random.knorm`` and exact ``jaxdp.exact.l2_knorm``, both with
  ChaCha20 keys;
* discrete Gaussian: ``jaxdp.exact.discrete_gaussian`` (ChaCha20, batch n/4) beside
  OpenDP's ``make_gaussian`` on an int vector (its discrete Gaussian) at the same
  sigma, 1 and sqrt(16.5);
* a 300-question synthetic questionnaire's K-norm noise at eps = 1 (``--n-tree``
  samples): float ``jaxdp.random.knorm`` (the ``sp`` sampler) and exact
  ``jaxdp.exact.poset_knorm`` (the decomposition-tree path), both with ChaCha20;
* a 22-element fence (not series-parallel, N(P) > 2^64) K-norm noise at eps = 1
  (``--n-wide`` samples): float ``jaxdp.random.knorm`` (the ``general`` sampler) and
  exact ``jaxdp.exact.poset_knorm`` (the 128-bit ranks), both with ChaCha20, and the
  host build time of the 128-bit tables;
* OpenDP (optional): ``make_laplace`` on a float vector (float-safe) and on an int
  vector, one call for ``--opendp-n`` values.
The refinement share is measured on the fast pass from ChaCha20 bits (samples it
could not settle, which the host then refines); for the tree path also the samples
whose discrete choices the first pass left undecided (``--n-host`` samples).
Memory is XLA's compiled temporary + output bytes over the output's bytes. Writes
results/secure.json and .md.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, machine, write_results

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import tree as exact_tree
from jaxdp.exact.intervals import tree_round
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from jaxdp.samplers.exact_tables import exact_tables
from jaxdp.samplers.exact_tree_tables import exact_tree_tables
from jaxdp.samplers.exact_wide_tables import exact_wide_tables


def _rate(fn, n):
  return n / best_time(fn)


def _memory(fn, key, out_bytes):
  mem = jax.jit(fn).lower(key).compile().memory_analysis()
  if mem is None:
    return None
  return (mem.temp_size_in_bytes + mem.output_size_in_bytes) / out_bytes


def _unsettled_laplace(key, n, scale):
  with jax.enable_x64(True):
    words = jax.random.bits(key, (n, 1, 2), jnp.uint32)
    _, settled, _ = jax.jit(exact.laplace_round)(words, scale)
    return int(jnp.sum(~settled))


def _unsettled_poset(key, poset, n, scale):
  tables, total = exact_tables(poset)
  d = poset.d
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)

    @jax.jit
    def count(k):
      k1, k2 = jax.random.split(k)
      seq, size_a = exact.unrank(exact.uniform_below(k1, total, n), t, d)
      words = jax.random.bits(k2, (n, d + 2, 2), jnp.uint32)
      return jnp.sum(~exact.chain_round(words, seq, size_a, t.up, scale)[1])

    return int(count(key))


def _unsettled_tree(key, poset, n, scale, chunk=4096):
  """(samples with a choice the first pass left undecided, samples whose noise the
  fast pass could not settle) over ``n`` tree-path samples."""
  tables, layout = exact_tree_tables(poset)
  d = poset.d
  with jax.enable_x64(True):
    t = jax.tree_util.tree_map(jnp.asarray, tables)

    @jax.jit
    def count(k):
      k1, k2, k3, k4 = jax.random.split(k, 4)
      _, first_ok, _ = exact_tree.size_counts(k1, k2, t, layout, chunk)
      _, size_a, low, failed = exact_tree.tree_objects(k3, t, layout, chunk)
      words = jax.random.bits(k4, (chunk, d + 2, 2), jnp.uint32)
      settled = tree_round(words, low, size_a, scale)[1]
      return jnp.sum(~first_ok), jnp.sum(~settled | failed)

    out = [count(jax.random.fold_in(key, i)) for i in range(-(-n // chunk))]
  return sum(int(a) for a, _ in out), sum(int(b) for _, b in out), len(out) * chunk


def _fence(d):
  return jaxdp.Poset.from_edges(
    d, [(i, i + 1) if i % 2 == 0 else (i + 1, i) for i in range(d - 1)], name=f"fence{d}"
  )


def wide_rows(cc, n):
  """Float and exact K-norm noise of a 22-element fence (ChaCha20 keys, eps = 1) and
  the seconds the 128-bit tables take to build (cache cleared first)."""
  fence = _fence(22)
  exact_wide_tables.cache_clear()
  t0 = time.perf_counter()
  exact_wide_tables(fence)
  build = time.perf_counter() - t0
  ball = jaxdp.PosetBall(fence)
  flt = jax.jit(lambda k: dprandom.knorm(k, ball, 1.0, (n,)))
  ext = lambda k: exact.poset_knorm(k, fence, 1.0, (n,))
  out = {
    "float_chacha20": _rate(lambda: flt(cc), n),
    "exact_chacha20": _rate(lambda: ext(cc), n),
  }
  out["table_build_s"] = build
  what = "22-element fence K-norm"
  rows = [
    (what, "float general, ChaCha20", out["float_chacha20"], None),
    (
      what,
      "exact, ChaCha20",
      out["exact_chacha20"],
      out["exact_chacha20"] / out["float_chacha20"],
    ),
  ]
  return rows, out


def _opendp(n):
  try:
    import opendp.prelude as dp
  except ImportError:
    return None
  dp.enable_features("contrib")
  out = {}
  cases = (
    ("float", float, "l1_distance", dp.m.make_laplace),
    ("int", int, "l1_distance", dp.m.make_laplace),
  )
  for name, t, metric, make in cases:
    m = make(
      dp.vector_domain(
        dp.atom_domain(T=t, nan=False) if t is float else dp.atom_domain(T=t)
      ),
      getattr(dp, metric)(T=t),
      scale=1.0,
    )
    data = [t(0)] * n
    m(data[:100])
    t0 = time.perf_counter()
    m(data)
    out[name] = n / (time.perf_counter() - t0)
  return out


def _unsettled_l2(key, d, n, scale):
  with jax.enable_x64(True):

    @jax.jit
    def count(k):
      words = jax.random.bits(k, (n, exact.l2_rows(d), 2), jnp.uint32)
      return jnp.sum(~exact.l2_round(words, scale, d)[1])

    return int(sum(count(k) for k in jax.random.split(key, 10)))  # 10 x n samples


def _l2_knorm_rows(cc, n):
  """Float and exact l_2 K-norm noise (ChaCha20 keys) at D = 17 and 5, eps = 1, and
  the share of exact samples the fast pass left for the host (10^6 at D = 17)."""
  rows, out = [], {}
  for name, dim in (("NHIS-3 counts", 17), ("NHIS-1 counts", 5)):
    ball = jaxdp.LpBall(dim, 2.0)
    flt = jax.jit(lambda k, b=ball: dprandom.knorm(k, b, 1.0, (n,)))
    ext = lambda k, dd=dim: exact.l2_knorm(k, dd, 1.0, (n,))
    f, x = _rate(lambda: flt(cc), n), _rate(lambda: ext(cc), n)
    out[str(dim)] = {"float_chacha20": f, "exact_chacha20": x}
    what = f"l2 K-norm, {name} (D = {dim})"
    rows += [(what, "float, ChaCha20", f, None), (what, "exact, ChaCha20", x, x / f)]
  out["unsettled_of_1e6_d17"] = _unsettled_l2(jax.random.fold_in(cc, 4), 17, 100_000, 1.0)
  return rows, out


def _opendp_gaussian(n, sigma):
  try:
    import opendp.prelude as dp
  except ImportError:
    return None
  dp.enable_features("contrib")
  m = dp.m.make_gaussian(
    dp.vector_domain(dp.atom_domain(T=int)), dp.l2_distance(T=int), scale=sigma
  )
  data = [0] * n
  m(data[:100])
  t0 = time.perf_counter()
  m(data)
  return n / (time.perf_counter() - t0)


def _discrete_gaussian_rows(cc, n, opendp_n):
  """jaxdp's exact discrete Gaussian (ChaCha20) beside OpenDP's make_gaussian on
  integers, in the same run, at sigma 1 and sqrt(16.5) (both exact quarters)."""
  rows, out = [], {}
  for label, sigma in (("1", 1.0), ("sqrt(16.5)", math.sqrt(16.5))):
    mine = _rate(lambda s=sigma: exact.discrete_gaussian(cc, (n,), sigma=s), n)
    peer = _opendp_gaussian(opendp_n, sigma)
    out[label] = {"exact_chacha20": mine, "opendp_make_gaussian_int": peer}
    rows.append(("discrete Gaussian", f"exact, ChaCha20, sigma {label}", mine, None))
    if peer:
      rows.append(
        (
          "discrete Gaussian",
          f"OpenDP make_gaussian, int vector, sigma {label}",
          peer,
          mine / peer,
        )
      )
  return rows, out


def _nhis3_only(args, n, cc, fry, rows, payload):
  """The NHIS-3 K-norm rows alone: float (Threefry, ChaCha20) and exact (ChaCha20)."""
  nhis = jaxdp.Poset.nhis(3)
  ball = jaxdp.PosetBall(nhis)
  knorm_f = jax.jit(lambda k: dprandom.knorm(k, ball, 1.0, (n,)))
  knorm_x = lambda k: exact.poset_knorm(k, nhis, 1.0, (n,))
  p = {
    "float_chacha20": _rate(lambda: knorm_f(cc), n),
    "exact_chacha20": _rate(lambda: knorm_x(cc), n),
    "float_threefry": _rate(lambda: knorm_f(fry), n),
  }
  payload["nhis3_knorm_per_s"] = p
  ratio = p["exact_chacha20"] / p["float_chacha20"]
  lines = ["| what | sampler | per second | ratio |", "|---|---|---:|---:|"]
  lines.append(f"| NHIS-3 K-norm | float, Threefry | {p['float_threefry']:,.0f} |  |")
  lines.append(f"| NHIS-3 K-norm | float, ChaCha20 | {p['float_chacha20']:,.0f} |  |")
  lines.append(
    f"| NHIS-3 K-norm | exact, ChaCha20 | {p['exact_chacha20']:,.0f} | "
    f"{ratio:.2f} (x float (ChaCha20)) |"
  )
  lines += ["", f"Batch {n:,}, one run."]
  write_results(args.out, "secure_nhis3", payload, "\n".join(lines))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1_000_000)
  ap.add_argument("--opendp-n", type=int, default=100_000)
  ap.add_argument("--n-tree", type=int, default=50_000)
  ap.add_argument("--n-host", type=int, default=200_000)
  ap.add_argument("--n-wide", type=int, default=100_000)
  ap.add_argument("--out", default="results")
  ap.add_argument(
    "--only",
    choices=["nhis3"],
    help="only the NHIS-3 K-norm rows (written as results/secure_nhis3.*)",
  )
  args = ap.parse_args(argv)
  n = args.n
  fry = jax.random.key(0)
  cc = dprandom.secure_key(bytes(range(32)))
  rows, payload = [], {"machine": machine(), "n": n}
  if args.only == "nhis3":
    return _nhis3_only(args, n, cc, fry, rows, payload)

  words = 1 << 24
  draw_bits = jax.jit(lambda kk: jax.random.bits(kk, (words,), jnp.uint32))
  bits = {
    name: _rate(lambda k=k: draw_bits(k), words)
    for name, k in (("threefry", fry), ("chacha20", cc))
  }
  payload["bits_words_per_s"] = bits
  rows.append(("random bits (uint32 words)", "Threefry", bits["threefry"], None))
  rows.append(
    (
      "random bits (uint32 words)",
      "ChaCha20",
      bits["chacha20"],
      bits["chacha20"] / bits["threefry"],
    )
  )

  lap_f = jax.jit(lambda k: dprandom.laplace(k, (n,)))
  lap_x = lambda k: exact.laplace(k, (n,), scale=1.0)
  floor_x = jax.jit(lambda k: jax.random.bits(k, (n, 2), jnp.uint32))
  r = {
    "float_threefry": _rate(lambda: lap_f(fry), n),
    "float_chacha20": _rate(lambda: lap_f(cc), n),
    "exact_chacha20": _rate(lambda: lap_x(cc), n),
    "chacha20_bits_floor": _rate(lambda: floor_x(cc), n),
  }
  payload["laplace_per_s"] = r
  rows += [
    ("Laplace", "float, Threefry", r["float_threefry"], None),
    ("Laplace", "float, ChaCha20", r["float_chacha20"], None),
    (
      "Laplace",
      "exact, ChaCha20",
      r["exact_chacha20"],
      r["exact_chacha20"] / r["float_chacha20"],
    ),
    ("Laplace", "ChaCha20 bits it uses (floor)", r["chacha20_bits_floor"], None),
  ]

  nhis = jaxdp.Poset.nhis(3)
  ball = jaxdp.PosetBall(nhis)
  knorm_f = jax.jit(lambda k: dprandom.knorm(k, ball, 1.0, (n,)))
  knorm_x = lambda k: exact.poset_knorm(k, nhis, 1.0, (n,))
  p = {
    "float_chacha20": _rate(lambda: knorm_f(cc), n),
    "exact_chacha20": _rate(lambda: knorm_x(cc), n),
    "float_threefry": _rate(lambda: knorm_f(fry), n),
  }
  payload["nhis3_knorm_per_s"] = p
  rows += [
    ("NHIS-3 K-norm", "float, Threefry", p["float_threefry"], None),
    ("NHIS-3 K-norm", "float, ChaCha20", p["float_chacha20"], None),
    (
      "NHIS-3 K-norm",
      "exact, ChaCha20",
      p["exact_chacha20"],
      p["exact_chacha20"] / p["float_chacha20"],
    ),
  ]

  quest = synthetic_questionnaire(0, 300)
  n_tree = args.n_tree
  q_ball = jaxdp.PosetBall(quest)
  q_f = jax.jit(lambda k: dprandom.knorm(k, q_ball, 1.0, (n_tree,)))
  q_x = lambda k: exact.poset_knorm(k, quest, 1.0, (n_tree,))
  q = {
    "float_chacha20": _rate(lambda: q_f(cc), n_tree),
    "exact_chacha20": _rate(lambda: q_x(cc), n_tree),
  }
  payload["questionnaire300_knorm_per_s"] = q
  rows += [
    ("300-question K-norm", "float sp, ChaCha20", q["float_chacha20"], None),
    (
      "300-question K-norm",
      "exact, ChaCha20",
      q["exact_chacha20"],
      q["exact_chacha20"] / q["float_chacha20"],
    ),
  ]

  wide_out, payload["fence22_knorm_per_s"] = wide_rows(cc, args.n_wide)
  rows += wide_out

  od = _opendp(args.opendp_n)
  payload["opendp_laplace_per_s"] = od
  if od:
    rows += [
      (
        "Laplace",
        "OpenDP make_laplace, float vector",
        od["float"],
        r["exact_chacha20"] / od["float"],
      ),
      ("Laplace", "OpenDP make_laplace, int vector", od["int"], None),
    ]
  l2_rows, payload["l2_knorm"] = _l2_knorm_rows(cc, n)
  rows += l2_rows
  dg_rows, payload["discrete_gaussian"] = _discrete_gaussian_rows(cc, n // 4, args.opendp_n)
  rows += dg_rows

  m_refine = 10_000_000
  share = {
    "laplace_scale_1": _unsettled_laplace(jax.random.fold_in(cc, 1), m_refine, 1.0),
    "laplace_scale_1000": _unsettled_laplace(jax.random.fold_in(cc, 2), m_refine, 1000.0),
    "nhis3_eps_1": _unsettled_poset(jax.random.fold_in(cc, 3), nhis, 1_000_000, 1.0),
  }
  choices, noise, m_tree = _unsettled_tree(
    jax.random.fold_in(cc, 4), quest, args.n_host, 1.0
  )
  share["questionnaire300_choices"], share["questionnaire300_eps_1"] = choices, noise
  payload["unsettled"] = {
    "laplace_samples": m_refine,
    "poset_samples": 1_000_000,
    "questionnaire300_samples": m_tree,
    **share,
  }
  mem = {
    "exact_laplace": _memory(lambda k: exact.laplace(k, (n,), scale=1.0), cc, 4 * n),
    "exact_nhis3": _memory(lambda k: exact.poset_knorm(k, nhis, 1.0, (n,)), cc, 4 * n * 16),
  }
  payload["memory_ratio"] = mem

  lines = ["| what | sampler | per second | ratio |", "|---|---|---:|---:|"]
  ratio_note = {
    "ChaCha20": "x Threefry",
    "exact, ChaCha20": "x float (ChaCha20)",
    "OpenDP make_laplace, float vector": "jaxdp exact / this",
    "OpenDP make_gaussian, int vector, sigma 1": "jaxdp exact / this",
    "OpenDP make_gaussian, int vector, sigma sqrt(16.5)": "jaxdp exact / this",
  }
  for what, name, rate, ratio in rows:
    rtxt = f"{ratio:.2f} ({ratio_note.get(name, '')})" if ratio is not None else ""
    lines.append(f"| {what} | {name} | {rate:,.0f} | {rtxt} |")
  lines.append("")
  lines.append(
    f"Exact Laplace takes {r['chacha20_bits_floor'] / r['exact_chacha20']:.2f}x the "
    f"time of the ChaCha20 bits it consumes. Fast-pass samples left for the host "
    f"refinement: Laplace scale 1: {share['laplace_scale_1']} of {m_refine:,}; "
    f"scale 1000: {share['laplace_scale_1000']} of {m_refine:,}; NHIS-3 at eps = 1: "
    f"{share['nhis3_eps_1']} of 1,000,000; the 300-question questionnaire at eps = 1: "
    f"{share['questionnaire300_eps_1']} of {m_tree:,} (and {choices} with an object "
    f"choice the first pass left undecided). Peak memory (XLA temporaries + output) / "
    f"output: exact Laplace {mem['exact_laplace'] or float('nan'):.2f}, exact NHIS-3 "
    f"{mem['exact_nhis3'] or float('nan'):.2f}. Exact l2 at D = 17, eps = 1: "
    f"{payload['l2_knorm']['unsettled_of_1e6_d17']} of 1,000,000 left for the host. "
    f"The 22-element fence's 128-bit tables took "
    f"{payload['fence22_knorm_per_s']['table_build_s']:.1f} s to build. "
    f"Batch {n:,} ({n_tree:,} for the questionnaire, {args.n_wide:,} for the fence; "
    f"discrete Gaussian {n // 4:,}; "
    f"OpenDP {args.opendp_n:,})."
  )
  write_results(args.out, "secure", payload, "\n".join(lines))


if __name__ == "__main__":
  main()
