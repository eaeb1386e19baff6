"""Publishable releases: ChaCha20 against Threefry, exact (float-safe) noise against
float noise, and OpenDP's float-safe Laplace when it is installed, in one run.

  python benchmarks/secure.py [--n 1000000] [--out DIR] [--only nhis3|tree|l2|fence]

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
  its floor (the ChaCha20 bits it reads, two words per sample) and OpenDP's
  ``make_gaussian`` on an int vector (its discrete Gaussian) at the same sigma, 1 and
  sqrt(16.5);
* a 300-question synthetic questionnaire's and a random forest's (d = 128) K-norm
  noise at eps = 1 (``--n-tree`` samples): float ``jaxdp.random.knorm`` (the ``sp``
  and the forest sampler) and exact ``jaxdp.exact.poset_knorm`` (the
  decomposition-tree path), both with ChaCha20;
* a 22-element fence (not series-parallel, N(P) > 2^64) K-norm noise at eps = 1
  (``--n-wide`` samples): float ``jaxdp.random.knorm`` (the ``general`` sampler) and
  exact ``jaxdp.exact.poset_knorm`` (the 128-bit ranks), both with ChaCha20, and the
  host build time of the 128-bit tables;
* OpenDP (optional): ``make_laplace`` on a float vector (float-safe) and on an int
  vector, best of 3 calls for ``--opendp-n`` values.
Each row's function is compiled once, timed, and its peak memory per output read
from the same executable: XLA's temporary + output bytes over the output's bytes
(``common.compiled_peak_ratio``), for the exact rows also over their float form's.
The host share of every exact row is measured on the fast pass from ChaCha20 bits
(samples it could not settle, which the host then refines): 10^7 Laplace draws,
10^6 of NHIS-3 (counted at the kernel's host refinement), of the 22-element
fence and of each l_2 case, ``--n-host`` (10^6) of each tree-path poset,
where also the samples whose discrete choices the first pass left undecided are
counted, and 10^7 discrete Gaussian draws at sigma 1 and 2047. Writes
<out>/secure.json and .md. ``--only nhis3`` writes the NHIS-3 K-norm rows alone,
with the exact sampler's rate at eps = 1, 0.1 and 0.01 and, of 10^6 samples, those
its one-word fast pass leaves and those the host refines (<out>/secure_nhis3.*),
``--only tree`` the two tree-path posets' rows and host shares with the load
average around them (<out>/secure_tree.*), ``--only l2``
the l_2 K-norm rows and their host shares with the load average around them, and
D = 17 at the three eps as for NHIS-3 (<out>/secure_l2.*), ``--only fence`` the
22-element fence's rows, their peak memory and host share with the load average
around them (<out>/secure_fence.*),
``--only dg`` the discrete Gaussian beside its floor (<out>/secure_dg.*).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (
  best_time,
  compiled_peak_ratio,
  interleaved_best,
  machine,
  write_results,
)
from folders import add_out

import jaxdp
from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact import gaussian as exact_gaussian
from jaxdp.exact import l2 as exact_l2
from jaxdp.exact import refine as exact_refine
from jaxdp.exact import samplers as exact_samplers
from jaxdp.exact import tree as exact_tree
from jaxdp.exact.intervals import UNSETTLED, tree_round
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from jaxdp.samplers.exact_tree_tables import exact_tree_tables
from jaxdp.samplers.exact_wide_tables import exact_wide_tables


def _measure(fn, key, n, out_bytes):
  """(samples/s, peak memory per output) of ``jit(fn)(key)``, compiled once."""
  compiled = jax.jit(fn).lower(key).compile()
  return n / best_time(lambda: compiled(key)), compiled_peak_ratio(compiled, out_bytes)


def _pair(rows, mem, what, key, n, out_bytes, flt, ext, flt_name="float, ChaCha20"):
  """A float row and its exact row (rate ratio and memory ratio to the float)."""
  f, fm = _measure(flt, key, n, out_bytes)
  x, xm = _measure(ext, key, n, out_bytes)
  rows += [(what, flt_name, f, None, fm, None), (what, "exact, ChaCha20", x, x / f, xm, fm)]
  mem[what] = {"float": fm, "exact": xm}
  return f, x


def _unsettled_laplace(key, n, scale):
  with jax.enable_x64(True):
    words = jax.random.bits(key, (n, 1, 2), jnp.uint32)
    _, settled, _ = jax.jit(exact.laplace_round)(words, scale)
    return int(jnp.sum(~settled))


def _unsettled_discrete_gaussian(key, n, sigma):
  """Samples of ``exact.discrete_gaussian`` that the 64-bit table leaves for the host
  (the device pass, ``exact.gaussian.lookup``, on ChaCha20 words)."""
  table = exact_gaussian.law(exact.sigma_quarters(sigma))
  with jax.enable_x64(True):
    words = jax.random.bits(key, (n, 2), jnp.uint32)
    u = (words[:, 0].astype(jnp.uint64) << 32) | words[:, 1].astype(jnp.uint64)
    _, settled = jax.jit(lambda u: exact_gaussian.lookup(u, table))(u)
    return int(jnp.sum(~settled))


def _unsettled_poset(key, poset, n, scale, second_pass=True):
  """Samples of ``exact.poset_knorm`` (the kernel the K-norm rows time, whichever
  path it takes for ``poset``) that reach the host refinement (after the device's
  52-digit second pass where the fast pass read one word per uniform): the
  unsettled samples each call of ``host_refine`` receives. Without ``second_pass``
  (a one-word kernel only: NHIS-3's), that pass settles nothing, so the count is the
  samples the one-word pass left."""
  draw = lambda: exact.poset_knorm(key, poset, scale, (n,))
  return _host_count(draw, None if second_pass else (exact_samplers, "tree_round_marked"))


def _host_count(draw, fast=None):
  """The samples ``draw()`` sends to ``host_refine``. With ``fast`` (module, name of
  the fast pass that the device's second pass calls again on two words per
  uniform), that pass settles nothing. The jit caches are cleared around it so the
  kernel is traced with the counting callback."""
  calls = []
  real = exact_refine.host_refine
  real_round = None if fast is None else getattr(*fast)

  def counting(*args):  # host_refine(refine_one, k, settled, ...)
    calls.append(int(np.sum(~np.asarray(args[2]))))
    return real(*args)

  def first_pass_only(words, *args):
    k = real_round(words, *args)
    return k if words.shape[-1] == 1 else jnp.full_like(k, UNSETTLED)

  jax.clear_caches()
  exact_refine.host_refine = counting
  if fast is not None:
    setattr(*fast, first_pass_only)
  try:
    jax.block_until_ready(draw())
  finally:
    exact_refine.host_refine = real
    if fast is not None:
      setattr(*fast, real_round)
    jax.clear_caches()
  return sum(calls)


def _unsettled_tree(key, poset, n, scale, chunk=16384):
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
    out[name] = n / best_time(lambda m=m, data=data: m(data))
  return out


def _unsettled_l2(key, d, n, scale):
  with jax.enable_x64(True):

    @jax.jit
    def count(k):
      words = jax.random.bits(k, (n, exact.l2_rows(d), 1), jnp.uint32)  # the kernel's
      return jnp.sum(~exact.l2_round(words, scale, d)[1])

    return int(sum(count(k) for k in jax.random.split(key, 10)))  # 10 x n samples


def _l2_knorm_rows(rows, mem, cc, n):
  """Float and exact l_2 K-norm noise (ChaCha20 keys) at D = 17 and 5, eps = 1, and
  the exact samples the one-word fast pass leaves unsettled (10^6 each; the device's
  second pass settles most of them before the host)."""
  out = {}
  for name, dim in (("NHIS-3 counts", 17), ("NHIS-1 counts", 5)):
    ball = jaxdp.LpBall(dim, 2.0)
    f, x = _pair(
      rows,
      mem,
      f"l2 K-norm, {name} (D = {dim})",
      cc,
      n,
      4 * n * dim,
      lambda k, b=ball: dprandom.knorm(k, b, 1.0, (n,)),
      lambda k, dd=dim: exact.l2_knorm(k, dd, 1.0, (n,)),
    )
    out[str(dim)] = {"float_chacha20": f, "exact_chacha20": x}
    out[f"unsettled_of_1e6_d{dim}"] = _unsettled_l2(
      jax.random.fold_in(cc, 4 + dim), dim, 100_000, 1.0
    )
  return out


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
  return n / best_time(lambda: m(data))


def _discrete_gaussian_rows(rows, mem, cc, n, opendp_n):
  """jaxdp's exact discrete Gaussian (ChaCha20) beside OpenDP's make_gaussian on
  integers, in the same run, at sigma 1 and sqrt(16.5) (both exact quarters), and
  its floor: the ChaCha20 words it reads (two a sample)."""
  floor, _ = _measure(lambda k: jax.random.bits(k, (n, 2), jnp.uint32), cc, n, 8 * n)
  rows.append(
    ("discrete Gaussian", "ChaCha20 bits it uses (floor)", floor, None, None, None)
  )
  out = {"floor_chacha20_2words": floor}
  for label, sigma in (("1", 1.0), ("sqrt(16.5)", math.sqrt(16.5))):
    fn = lambda k, s=sigma: exact.discrete_gaussian(k, (n,), sigma=s)
    mine, peak = _measure(fn, cc, n, 4 * n)
    peer = _opendp_gaussian(opendp_n, sigma)
    out[label] = {"exact_chacha20": mine, "opendp_make_gaussian_int": peer}
    mem[f"discrete Gaussian, sigma {label}"] = {"float": None, "exact": peak}
    rows.append(
      ("discrete Gaussian", f"exact, ChaCha20, sigma {label}", mine, None, peak, None)
    )
    if peer:
      name = f"OpenDP make_gaussian, int vector, sigma {label}"
      rows.append(("discrete Gaussian", name, peer, mine / peer, None, None))
  return out


def _fence(d):
  return jaxdp.Poset.from_edges(
    d, [(i, i + 1) if i % 2 == 0 else (i + 1, i) for i in range(d - 1)], name=f"fence{d}"
  )


def _wide_rows(rows, mem, cc, n):
  """Float (``general``) and exact (128-bit ranks) K-norm noise of a 22-element fence
  (ChaCha20, eps = 1) and the seconds its 128-bit tables take to build."""
  fence = _fence(22)
  exact_wide_tables.cache_clear()
  t0 = time.perf_counter()
  exact_wide_tables(fence)
  build = time.perf_counter() - t0
  ball = jaxdp.PosetBall(fence)
  f, x = _pair(
    rows,
    mem,
    "22-element fence K-norm",
    cc,
    n,
    4 * n * 23,
    lambda k: dprandom.knorm(k, ball, 1.0, (n,)),
    lambda k: exact.poset_knorm(k, fence, 1.0, (n,)),
    "float general, ChaCha20",
  )
  return {"float_chacha20": f, "exact_chacha20": x, "table_build_s": build}


def _nhis3_rows(rows, mem, cc, fry, n):
  """The NHIS-3 K-norm rows: float (Threefry, ChaCha20) and exact (ChaCha20), each
  compiled once and timed in turn (``interleaved_best``, 5 rounds), so their ratios
  compare calls made under the same load."""
  nhis = jaxdp.Poset.nhis(3)
  ball = jaxdp.PosetBall(nhis)
  knorm_f = lambda k: dprandom.knorm(k, ball, 1.0, (n,))
  knorm_x = lambda k: exact.poset_knorm(k, nhis, 1.0, (n,))
  runs = {
    "float_threefry": (jax.jit(knorm_f).lower(fry).compile(), fry),
    "float_chacha20": (jax.jit(knorm_f).lower(cc).compile(), cc),
    "exact_chacha20": (jax.jit(knorm_x).lower(cc).compile(), cc),
  }
  best = interleaved_best({k: (lambda f=f, kk=kk: f(kk)) for k, (f, kk) in runs.items()}, 5)
  p = {k: n / t for k, t in best.items()}
  out_bytes = 4 * n * 16
  fm = compiled_peak_ratio(runs["float_chacha20"][0], out_bytes)
  xm = compiled_peak_ratio(runs["exact_chacha20"][0], out_bytes)
  mem["NHIS-3 K-norm"] = {"float": fm, "exact": xm}
  f, x = p["float_chacha20"], p["exact_chacha20"]
  rows.append(("NHIS-3 K-norm", "float, Threefry", p["float_threefry"], None, None, None))
  rows += [
    ("NHIS-3 K-norm", "float, ChaCha20", f, None, fm, None),
    ("NHIS-3 K-norm", "exact, ChaCha20", x, x / f, xm, fm),
  ]
  return p


def _nhis3_scales(cc, n):
  """:func:`_exact_scales` of the exact NHIS-3 K-norm (the forest kernel)."""
  nhis = jaxdp.Poset.nhis(3)
  draw = lambda k, s, m: exact.poset_knorm(k, nhis, s, (m,))
  return _exact_scales(cc, n, draw, (exact_samplers, "tree_round_marked"))


def _exact_scales(cc, n, draw, fast):
  """An exact one-word kernel ``draw(key, scale, n)`` at eps = 1, 0.1 and 0.01
  (scale 1 / eps): samples per second (one compilation, the scale an argument, best
  of 5) and, of 10^6 samples (another key), those its one-word fast pass left
  unsettled and those that reached the host refinement after the device's 52-digit
  second pass (``fast``: :func:`_host_count`)."""
  with jax.enable_x64(True):
    scale = jnp.float64(1.0)
    fn = jax.jit(lambda k, s: draw(k, s, n)).lower(cc, scale).compile()
  out, key = [], jax.random.fold_in(cc, 7)
  for eps in (1.0, 0.1, 0.01):
    with jax.enable_x64(True):
      s = jnp.float64(1.0 / eps)
    per_s = n / best_time(lambda s=s: fn(cc, s), 5)
    once = lambda s=1.0 / eps: draw(key, s, 1_000_000)
    host, first = _host_count(once), _host_count(once, fast)
    out.append(
      {"eps": eps, "scale": 1.0 / eps, "per_s": per_s, "host": host, "one_word": first}
    )
  return out


def _scales_table(name, scales):
  """Markdown lines of :func:`_exact_scales`' rows."""
  lines = [
    f"| {name} | per second | left by the one-word pass, of 10^6 | refined on the "
    "host, of 10^6 |",
    "|---|---:|---:|---:|",
  ]
  return lines + [
    f"| eps = {r['eps']:g} (scale {r['scale']:g}) | {r['per_s']:,.0f} | "
    f"{r['one_word']:,} | {r['host']:,} |"
    for r in scales
  ]


def _nhis3_only(args, n, cc, fry, payload):
  """``--only nhis3``: the NHIS-3 K-norm rows alone (<out>/secure_nhis3.*)."""
  rows = []
  payload["loadavg_before"] = list(os.getloadavg())
  p = payload["nhis3_knorm_per_s"] = _nhis3_rows(rows, {}, cc, fry, n)
  scales = payload["nhis3_small_eps"] = _nhis3_scales(cc, n)
  payload["loadavg_after"] = list(os.getloadavg())
  before, after = payload["loadavg_before"][0], payload["loadavg_after"][0]
  lines = _rows_table(rows) + [""] + _scales_table("exact NHIS-3 K-norm, ChaCha20", scales)
  lines += [
    "",
    f"Batch {n:,}, one run, the three timed in turn (best of 5 rounds); exact / "
    f"float (ChaCha20) = {p['exact_chacha20'] / p['float_chacha20']:.2f}, exact / "
    f"float (Threefry, the default key) = "
    f"{p['exact_chacha20'] / p['float_threefry']:.2f}; load average {before:.1f} -> "
    f"{after:.1f}.",
  ]
  write_results(args.out, "secure_nhis3", payload, "\n".join(lines))


def _random_forest(d):
  rng = np.random.default_rng(0)  # the samplers benchmark's forest of this size
  parents = [-1] + [int(rng.integers(0, i)) for i in range(1, d)]
  return jaxdp.Poset.from_parents(parents, name=f"random forest d={d}")


def _tree_posets():
  return {
    "questionnaire300": synthetic_questionnaire(0, 300),
    "forest128": _random_forest(128),
  }


def _tree_rows(rows, mem, cc, n_tree, payload):
  """The tree-path rows: float (``sp``, forest) and exact K-norm noise of the
  300-question questionnaire and the d = 128 forest (ChaCha20, eps = 1)."""
  tree_posets = _tree_posets()
  for label, what, flt_name in (
    ("questionnaire300", "300-question K-norm", "float sp, ChaCha20"),
    ("forest128", "random forest d = 128 K-norm", "float forest, ChaCha20"),
  ):
    poset = tree_posets[label]
    pb = jaxdp.PosetBall(poset)
    f, x = _pair(
      rows,
      mem,
      what,
      cc,
      n_tree,
      4 * n_tree * (poset.d + 1),
      lambda k, b=pb: dprandom.knorm(k, b, 1.0, (n_tree,)),
      lambda k, pp=poset: exact.poset_knorm(k, pp, 1.0, (n_tree,)),
      flt_name,
    )
    payload[f"{label}_knorm_per_s"] = {"float_chacha20": f, "exact_chacha20": x}
  return tree_posets


def _tree_host_rows(cc, tree_posets, n_host):
  """(what, samples, left for the host) of each tree-path poset: the noise and the
  object choices."""
  host = []
  for i, poset in enumerate(tree_posets.values()):
    choices, noise, m_tree = _unsettled_tree(
      jax.random.fold_in(cc, 40 + i), poset, n_host, 1.0
    )
    host.append((f"{poset.name} K-norm, eps = 1: noise", m_tree, noise))
    host.append((f"{poset.name} K-norm, eps = 1: object choices", m_tree, choices))
  return host


def _rows_table(rows):
  """The Markdown table of rate rows (what, sampler, per second, ratio to float)."""
  lines = ["| what | sampler | per second | ratio |", "|---|---|---:|---:|"]
  for what, name, rate, ratio, _, _ in rows:
    rtxt = "" if ratio is None else f"{ratio:.2f} (x float (ChaCha20))"
    lines.append(f"| {what} | {name} | {rate:,.0f} | {rtxt} |")
  return lines


def _l2_only(args, n, cc, payload):
  """``--only l2``: the l_2 K-norm rows and host shares alone (<out>/secure_l2.*),
  with the load average before and after."""
  rows = []
  payload["loadavg_before"] = list(os.getloadavg())
  p = payload["l2_knorm"] = _l2_knorm_rows(rows, {}, cc, n)
  draw = lambda k, s, m: exact.l2_knorm(k, 17, s, (m,))
  scales = _exact_scales(cc, n, draw, (exact_l2, "l2_round_marked"))
  payload["l2_d17_small_eps"] = scales
  payload["loadavg_after"] = list(os.getloadavg())
  lines = _rows_table(rows)
  lines += ["", "| exact row | samples | left by the one-word pass |", "|---|---:|---:|"]
  lines += [
    f"| l2 K-norm, D = {d} | 1,000,000 | {p[f'unsettled_of_1e6_d{d}']} |" for d in (17, 5)
  ]
  lines += [""] + _scales_table("exact l2 K-norm, D = 17, ChaCha20", scales)
  before, after = payload["loadavg_before"][0], payload["loadavg_after"][0]
  ratios = ", ".join(
    f"D = {d}: {p[str(d)]['exact_chacha20'] / p[str(d)]['float_chacha20']:.2f}"
    for d in (17, 5)
  )
  lines += [
    "",
    f"Batch {n:,}, one run; exact / float (ChaCha20) {ratios}; load average "
    f"{before:.1f} -> {after:.1f}.",
  ]
  write_results(args.out, "secure_l2", payload, "\n".join(lines))


def _dg_only(args, n, cc, payload):
  """``--only dg``: the exact discrete Gaussian beside its floor, the ChaCha20 words
  it reads (two per sample), and OpenDP's, at four sigmas (results/secure_dg.*)."""
  rows = []
  payload["loadavg_before"] = list(os.getloadavg())
  floor, _ = _measure(lambda k: jax.random.bits(k, (n, 2), jnp.uint32), cc, n, 8 * n)
  rows.append(("discrete Gaussian", "floor: ChaCha20, 2 words a sample", floor, None))
  out = {"floor_chacha20_2words": floor}
  for label, sigma in (("1", 1.0), ("sqrt(16.5)", math.sqrt(16.5)), ("100", 100.0)):
    fn = lambda k, s=sigma: exact.discrete_gaussian(k, (n,), sigma=s)
    mine, _ = _measure(fn, cc, n, 4 * n)
    peer = _opendp_gaussian(args.opendp_n, sigma)
    left = _unsettled_discrete_gaussian(jax.random.fold_in(cc, 7), n, sigma)
    out[label] = {"exact_chacha20": mine, "opendp_make_gaussian_int": peer, "left": left}
    rows.append(
      ("discrete Gaussian", f"exact, ChaCha20, sigma {label}", mine, floor / mine)
    )
    if peer:
      name = f"OpenDP make_gaussian, int vector, sigma {label}"
      rows.append(("discrete Gaussian", name, peer, floor / peer))
  payload["loadavg_after"] = list(os.getloadavg())
  payload["discrete_gaussian"] = out
  lines = [
    "| what | sampler | per second | time / floor |",
    "|---|---|---:|---:|",
    *(
      f"| {w} | {name} | {rate:,.0f} | {'' if r is None else f'{r:.2f}'} |"
      for w, name, rate, r in rows
    ),
  ]
  before, after = payload["loadavg_before"][0], payload["loadavg_after"][0]
  left = ", ".join(
    f"sigma {k}: {v['left']}" for k, v in out.items() if k != "floor_chacha20_2words"
  )
  lines += [
    "",
    f"Batch {n:,} (OpenDP {args.opendp_n:,}), best of 3, one run; samples of {n:,} left "
    f"for the host refinement: {left}; load average {before:.1f} -> {after:.1f}.",
  ]
  write_results(args.out, "secure_dg", payload, "\n".join(lines))


def _tree_only(args, cc, payload):
  """``--only tree``: the tree-path rows and host shares alone
  (<out>/secure_tree.*), with the load average before and after."""
  rows, mem = [], {}
  payload["loadavg_before"] = list(os.getloadavg())
  tree_posets = _tree_rows(rows, mem, cc, args.n_tree, payload)
  payload["loadavg_after"] = list(os.getloadavg())
  host = _tree_host_rows(cc, tree_posets, args.n_host)
  payload["unsettled"] = [{"what": w, "samples": m, "left_for_host": c} for w, m, c in host]
  lines = _rows_table(rows)
  lines += ["", "| exact row | samples | left for the host refinement |", "|---|---:|---:|"]
  lines += [f"| {w} | {m:,} | {c} |" for w, m, c in host]
  before, after = payload["loadavg_before"][0], payload["loadavg_after"][0]
  lines += [
    "",
    f"Batch {args.n_tree:,}, one run; load average {before:.1f} -> {after:.1f}.",
  ]
  write_results(args.out, "secure_tree", payload, "\n".join(lines))


def _fence_only(args, cc, payload):
  """``--only fence``: the 22-element fence's rows (rate and peak memory per output)
  and host share alone (<out>/secure_fence.*), with the load average before and
  after."""
  rows, mem = [], {}
  payload["loadavg_before"] = list(os.getloadavg())
  p = payload["fence22_knorm_per_s"] = _wide_rows(rows, mem, cc, args.n_wide)
  payload["loadavg_after"] = list(os.getloadavg())
  payload["memory_ratio"] = mem
  left = _unsettled_poset(jax.random.fold_in(cc, 4), _fence(22), 1_000_000, 1.0)
  payload["unsettled"] = [
    {
      "what": "22-element fence K-norm, eps = 1",
      "samples": 1_000_000,
      "left_for_host": left,
    }
  ]
  lines = [
    "| what | sampler | per second | ratio | peak memory / output |",
    "|---|---|---:|---:|---:|",
  ]
  for what, name, rate, ratio, peak, float_peak in rows:
    rtxt = "" if ratio is None else f"{ratio:.2f} (x float (ChaCha20))"
    mtxt = "" if peak is None else f"{peak:.2f}"
    if peak is not None and float_peak:
      mtxt += f" ({peak / float_peak:.2f}x float)"
    lines.append(f"| {what} | {name} | {rate:,.0f} | {rtxt} | {mtxt} |")
  before, after = payload["loadavg_before"][0], payload["loadavg_after"][0]
  lines += [
    "",
    f"Batch {args.n_wide:,}, one run; the 128-bit tables took {p['table_build_s']:.1f} s "
    f"to build; of 1,000,000 exact samples {left} were left for the host refinement; "
    f"load average {before:.1f} -> {after:.1f}.",
  ]
  write_results(args.out, "secure_fence", payload, "\n".join(lines))


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1_000_000)
  ap.add_argument("--opendp-n", type=int, default=100_000)
  ap.add_argument("--n-tree", type=int, default=50_000)
  ap.add_argument("--n-host", type=int, default=1_000_000)
  ap.add_argument("--n-wide", type=int, default=100_000)
  ap.add_argument(
    "--quick",
    action="store_true",
    help="a smoke run: 2^20 random words, 20,000 samples per host-refinement count",
  )
  add_out(ap)
  ap.add_argument(
    "--only",
    choices=["nhis3", "tree", "l2", "fence", "dg"],
    help="only the NHIS-3 K-norm rows (<out>/secure_nhis3.*), only the "
    "tree-path rows (<out>/secure_tree.*), only the l_2 K-norm rows "
    "(<out>/secure_l2.*), only the 22-element fence's rows "
    "(<out>/secure_fence.*) or only the discrete Gaussian's (<out>/secure_dg.*)",
  )
  args = ap.parse_args(argv)
  n, n_tree = args.n, args.n_tree
  t_start = time.perf_counter()
  fry = jax.random.key(0)
  cc = dprandom.secure_key(bytes(range(32)))
  rows, mem, payload = [], {}, {"machine": machine(), "n": n}
  if args.only == "nhis3":
    return _nhis3_only(args, n, cc, fry, payload)
  if args.only == "tree":
    return _tree_only(args, cc, payload)
  if args.only == "l2":
    return _l2_only(args, n, cc, payload)
  if args.only == "dg":
    return _dg_only(args, n, cc, payload)
  if args.only == "fence":
    return _fence_only(args, cc, payload)

  words = 1 << 20 if args.quick else 1 << 24
  draw_bits = lambda kk: jax.random.bits(kk, (words,), jnp.uint32)
  bits = {
    name: _measure(draw_bits, k, words, 4 * words)[0]
    for name, k in (("threefry", fry), ("chacha20", cc))
  }
  payload["bits_words_per_s"] = bits
  rows.append(
    ("random bits (uint32 words)", "Threefry", bits["threefry"], None, None, None)
  )
  rows.append(
    (
      "random bits (uint32 words)",
      "ChaCha20",
      bits["chacha20"],
      bits["chacha20"] / bits["threefry"],
      None,
      None,
    )
  )

  lap_f = lambda k: dprandom.laplace(k, (n,))
  r = {"float_threefry": _measure(lap_f, fry, n, 4 * n)[0]}
  r["float_chacha20"], r["exact_chacha20"] = _pair(
    rows, mem, "Laplace", cc, n, 4 * n, lap_f, lambda k: exact.laplace(k, (n,), scale=1.0)
  )
  floor_x = lambda k: jax.random.bits(k, (n, 2), jnp.uint32)
  r["chacha20_bits_floor"] = _measure(floor_x, cc, n, 8 * n)[0]
  payload["laplace_per_s"] = r
  rows.insert(-2, ("Laplace", "float, Threefry", r["float_threefry"], None, None, None))
  rows.append(
    ("Laplace", "ChaCha20 bits it uses (floor)", r["chacha20_bits_floor"], None, None, None)
  )

  nhis = jaxdp.Poset.nhis(3)
  payload["nhis3_knorm_per_s"] = _nhis3_rows(rows, mem, cc, fry, n)

  tree_posets = _tree_rows(rows, mem, cc, n_tree, payload)
  payload["fence22_knorm_per_s"] = _wide_rows(rows, mem, cc, args.n_wide)

  od = _opendp(args.opendp_n)
  payload["opendp_laplace_per_s"] = od
  if od:
    rows += [
      (
        "Laplace",
        "OpenDP make_laplace, float vector",
        od["float"],
        r["exact_chacha20"] / od["float"],
        None,
        None,
      ),
      ("Laplace", "OpenDP make_laplace, int vector", od["int"], None, None, None),
    ]
  payload["l2_knorm"] = _l2_knorm_rows(rows, mem, cc, n)
  payload["discrete_gaussian"] = _discrete_gaussian_rows(
    rows, mem, cc, n // 4, args.opendp_n
  )
  payload["memory_ratio"] = mem

  m_refine, m_poset = (20_000, 20_000) if args.quick else (10_000_000, 1_000_000)
  host = [
    (
      "Laplace, scale 1",
      m_refine,
      _unsettled_laplace(jax.random.fold_in(cc, 1), m_refine, 1.0),
    ),
    (
      "Laplace, scale 1000",
      m_refine,
      _unsettled_laplace(jax.random.fold_in(cc, 2), m_refine, 1000.0),
    ),
    (
      "NHIS-3 K-norm, eps = 1",
      m_poset,
      _unsettled_poset(jax.random.fold_in(cc, 3), nhis, m_poset, 1.0),
    ),
    (
      "22-element fence K-norm, eps = 1",
      m_poset,
      _unsettled_poset(jax.random.fold_in(cc, 4), _fence(22), m_poset, 1.0),
    ),
  ]
  host += _tree_host_rows(cc, tree_posets, args.n_host)
  for dim in (17, 5):
    host.append(
      (
        f"l2 K-norm, D = {dim}, eps = 1: left by the one-word pass (the device's "
        "second pass settles most)",
        1_000_000,
        payload["l2_knorm"][f"unsettled_of_1e6_d{dim}"],
      )
    )
  for i, sigma in enumerate((1.0, 2047.0)):
    host.append(
      (
        f"discrete Gaussian, sigma {sigma:g}",
        m_refine,
        _unsettled_discrete_gaussian(jax.random.fold_in(cc, 10 + i), m_refine, sigma),
      )
    )
  payload["unsettled"] = [{"what": w, "samples": m, "left_for_host": c} for w, m, c in host]

  lines = [
    "| what | sampler | per second | ratio | peak memory / output |",
    "|---|---|---:|---:|---:|",
  ]
  ratio_note = {
    "ChaCha20": "x Threefry",
    "exact, ChaCha20": "x float (ChaCha20)",
    "OpenDP make_laplace, float vector": "jaxdp exact / this",
    "OpenDP make_gaussian, int vector, sigma 1": "jaxdp exact / this",
    "OpenDP make_gaussian, int vector, sigma sqrt(16.5)": "jaxdp exact / this",
  }
  for what, name, rate, ratio, peak, float_peak in rows:
    rtxt = f"{ratio:.2f} ({ratio_note.get(name, '')})" if ratio is not None else ""
    mtxt = "" if peak is None else f"{peak:.2f}"
    if peak is not None and float_peak:
      mtxt += f" ({peak / float_peak:.2f}x float)"
    lines.append(f"| {what} | {name} | {rate:,.0f} | {rtxt} | {mtxt} |")
  lines += ["", "| exact row | samples | left for the host refinement |", "|---|---:|---:|"]
  for what, m, c in host:
    lines.append(
      f"| {what} | {m:,} | {c} |" if m else f"| {what} | any | none (no host step) |"
    )
  payload["wall_seconds"] = time.perf_counter() - t_start
  lines.append("")
  lines.append(
    f"Exact Laplace takes {r['chacha20_bits_floor'] / r['exact_chacha20']:.2f}x the "
    f"time of the ChaCha20 bits it consumes. Peak memory is XLA's temporaries + output "
    f"over the output, from the timed executable. Batch {n:,} ({n_tree:,} for the "
    f"tree-path posets, {args.n_wide:,} for the fence, whose 128-bit tables took "
    f"{payload['fence22_knorm_per_s']['table_build_s']:.1f} s to build; discrete "
    f"Gaussian {n // 4:,}; OpenDP {args.opendp_n:,}, best of 3 like every row); "
    f"{payload['wall_seconds']:.0f} s in all."
  )
  write_results(args.out, "secure", payload, "\n".join(lines))


if __name__ == "__main__":
  main()
