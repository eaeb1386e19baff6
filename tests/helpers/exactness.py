"""Small statistical helpers for the exactness tests (stated tests, fixed keys)."""

import itertools
import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
from scipy import stats

from jaxdp import exact
from jaxdp import random as dprandom
from jaxdp.exact.intervals import UNSETTLED


def brute_objects(poset):
  """Every object (|A|, A top down, B top down), by enumerating permutations."""
  d, strict = poset.d, poset.order & ~np.eye(poset.d, dtype=bool)
  ok = lambda s: (
    not any(strict[s[t], s[u]] for t, u in itertools.combinations(range(len(s)), 2))
  )
  out = []
  for mask in range(1 << d):
    a = [x for x in range(d) if mask >> x & 1]
    b = [x for x in range(d) if not mask >> x & 1]
    pas = [p for p in itertools.permutations(a) if ok(p)]
    pbs = [p for p in itertools.permutations(b) if ok(p)]
    out += [(len(a),) + pa + pb for pa in pas for pb in pbs]
  return out


def object_index(seq, k, ref_seq, ref_k):
  """Maps sampled objects to their row in the exact enumeration (-1 if absent).

  Each object (its sequence and k) is read as the digits of one integer in base
  b = max(d + 1, largest entry + 1), so two objects get the same code exactly when
  they are equal; an object with an entry outside [0, b) of the enumeration's digits
  is absent. Codes are matched by a sorted search (a dict of tuples for d too large
  for int64 codes)."""
  seq, k = np.asarray(seq), np.asarray(k)
  ref_seq, ref_k = np.asarray(ref_seq), np.asarray(ref_k)
  ref = np.concatenate([ref_seq.reshape(len(ref_k), -1), ref_k.reshape(-1, 1)], axis=1)
  got = np.concatenate([seq.reshape(len(k), -1), k.reshape(-1, 1)], axis=1)
  if ref.shape[1] != got.shape[1]:
    return np.full(len(k), -1)
  base = int(max(ref.shape[1], ref.max(initial=0) + 1))
  if ref.shape[1] * math.log2(base) >= 62:
    table = {tuple(r): i for i, r in enumerate(ref.tolist())}
    return np.array([table.get(tuple(r), -1) for r in got.tolist()])
  weights = base ** np.arange(ref.shape[1], dtype=np.int64)
  ref_code = ref.astype(np.int64) @ weights
  inside = ((got >= 0) & (got < base)).all(axis=1)
  code = np.where(inside[:, None], got, 0).astype(np.int64) @ weights
  order = np.argsort(ref_code, kind="stable")
  pos = np.searchsorted(ref_code, code, sorter=order).clip(0, len(ref_code) - 1)
  found = inside & (ref_code[order[pos]] == code)
  return np.where(found, order[pos], -1)


def optimized(fn, *args):
  """``fn(*args)``, compiled by XLA with its optimisations on (level 1) instead of the
  suite's level 0: for the few large draws whose kernel runs far longer at level 0
  than the optimisations take to compile (the forest kernel on a chain of 6: 200,000
  points in 7 s at level 0, 0.2 s at level 1, for 1 s more compiling). The same
  program, so the same law; floats may differ from level 0's in the last bits."""
  options = {"xla_backend_optimization_level": 1}
  return jax.jit(fn).lower(*args).compile(compiler_options=options)(*args)


def lp_norm(z, p):
  """l_p norms of the rows of z in float64, scaled by each row's largest entry (no
  underflow at large p)."""
  z = np.abs(np.asarray(z, np.float64))
  top = z.max(axis=1)
  if p == math.inf:
    return top
  return top * np.sum((z / np.where(top > 0, top, 1.0)[:, None]) ** p, axis=1) ** (1 / p)


def chi_square_uniform_pvalue(idx, num):
  """Pearson chi-square p-value of category counts against the uniform law."""
  counts = np.bincount(idx, minlength=num)
  return stats.chisquare(counts).pvalue


def second_moment_zscores(z, exact):
  """z-scores of the sample E[Z_i Z_j] against the exact matrix (upper triangle)."""
  z = np.asarray(z, np.float64)
  iu = np.triu_indices(z.shape[1])
  prods = z[:, iu[0]] * z[:, iu[1]]
  mean = prods.mean(axis=0)
  se = prods.std(axis=0, ddof=1) / np.sqrt(len(z))
  return (mean - exact[iu]) / se


def random_series_parallel(rng, d, n_block=False):
  """Edges of a random series-parallel poset on d elements (random binary series /
  parallel compositions); with ``n_block`` the first group of four elements met is an
  N instead (a prime piece), so the result is not series-parallel."""
  edges = []
  need_n = [n_block]

  def build(items):
    if len(items) == 1:
      return items
    if need_n[0] and len(items) == 4:
      need_n[0] = False
      a, b, c, e = items
      edges.extend([(a, b), (c, b), (c, e)])
      return items
    cut = int(rng.integers(1, len(items)))
    lo, hi = build(items[:cut]), build(items[cut:])
    if rng.random() < 0.5:  # series: all of lo below all of hi
      edges.extend((x, y) for x in lo for y in hi)
    return lo + hi

  build([int(x) for x in rng.permutation(d)])
  return edges


def record_host_refinements(monkeypatch, refine_module):
  """Wraps ``refine_module.host_refine`` so each call records how many samples it
  refines (the unsettled entries of its third argument); returns that list."""
  calls = []
  real = refine_module.host_refine

  def counting(*args):
    calls.append(int(np.sum(~np.asarray(args[2]))))
    return real(*args)

  monkeypatch.setattr(refine_module, "host_refine", counting)
  return calls


def without_second_pass(monkeypatch, refine_module, draw, module, name):
  """``draw()`` twice, counting the samples the host refines: as it is, then with the
  device's 52-digit second pass settling nothing (``module.name``, the fast pass it
  calls again on two words per uniform, returns every coordinate unsettled on two
  words). Returns ``((release, host count), (release, host count))``; the jit
  caches are cleared around each run, so the kernel is traced with the patches."""
  calls = record_host_refinements(monkeypatch, refine_module)
  real = getattr(module, name)

  def first_pass_only(words, *args):
    k = real(words, *args)
    return k if words.shape[-1] == 1 else jnp.full_like(k, UNSETTLED)

  out = []
  for patch in (False, True):
    if patch:
      monkeypatch.setattr(module, name, first_pass_only)
    jax.clear_caches()
    release = np.asarray(draw())
    out.append((release, sum(calls)))
    calls.clear()
  jax.clear_caches()
  return tuple(out)


def batch_temp_bytes(key, poset, chunk, path):
  """XLA's temporary bytes of one compiled exact poset K-norm draw of two chunks and
  a partial one (``2 * chunk + 5`` samples) on ``path``, after checking that the
  output is the batch's int32 noise alone; None where the backend reports no memory
  analysis."""
  n = 2 * chunk + 5
  draw = lambda k: exact.poset_knorm(k, poset, 1.0, (n,), path=path)
  mem = jax.jit(draw).lower(key).compile().memory_analysis()
  if mem is None:
    return None
  assert mem.output_size_in_bytes == 4 * n * (poset.d + 1)
  return mem.temp_size_in_bytes


def box_volume(low, high, k):
  """Exact vol{x : low <= x <= high, sum(x) <= k} (rationals): inclusion-exclusion
  over the coordinates at their upper bound."""
  d = len(low)
  total = Fraction(0)
  for mask in itertools.product((0, 1), repeat=d):
    corner = sum(h if m else lo for m, lo, h in zip(mask, low, high))
    total += (-1) ** sum(mask) * max(Fraction(k) - corner, 0) ** d
  return total / math.factorial(d)


def slice_cell_pvalue(x, d, k, side):
  """Chi-square p-value of the cells (side 1/side per coordinate) of points x against
  the uniform law on S(d, k)."""
  cells = list(itertools.product(range(side), repeat=d))
  probs = [
    box_volume([Fraction(c, side) for c in cell], [Fraction(c + 1, side) for c in cell], k)
    for cell in cells
  ]
  total = sum(probs)
  keep = [i for i, p in enumerate(probs) if p > 0]
  idx = np.minimum((x * side).astype(int), side - 1) @ (side ** np.arange(d)[::-1])
  counts = np.bincount(idx, minlength=len(cells))
  assert counts[[i for i, p in enumerate(probs) if p == 0]].sum() == 0
  expected = np.array([float(probs[i] / total) for i in keep]) * len(x)
  return stats.chisquare(counts[keep], expected).pvalue


def indexed_key(seed: bytes, offset: int, i: int = 0, secure: bool = True):
  """Key ``offset + i`` folded into ``seed``'s key: a secure (ChaCha20) key where the
  mechanisms (and a release) are tested; a Threefry key (kernels compiling about
  twice as fast) where it only supplies the uniform bits of a law or of an equality
  check (batching, forced host paths)."""
  base = (
    dprandom.secure_key(seed) if secure else jax.random.key(int.from_bytes(seed[:4], "big"))
  )
  return jax.random.fold_in(base, offset + i)
