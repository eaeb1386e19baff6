"""The hot paths' programs make the choices an accelerator needs, checked on the CPU by
walking each program as JAX lowers it for a GPU (``lax.platform_dependent`` resolved
for ``"cuda"``): every host round trip (a ``cond``'s predicate or a ``while``'s
condition, which XLA:GPU reads on the host; a host callback) and every loop is on an
allowlist with its reason, nothing of the sort sits inside a loop, every primitive is
one the device runs, no float64 where a float32 sampler does not need it, no loop over
the batch, ChaCha's blocks in one vectorised pass, and chunks sized from the device's
memory."""

import collections
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import LpBall, Poset, PosetBall, exact
from jaxdp.prng import chacha
from jaxdp.samplers import chunks, dispatch

SYNCS = ("cond", "while")  # XLA:GPU copies the predicate to the host, and waits
CALLBACKS = ("pure_callback", "io_callback", "callback", "debug_callback")
LOOPS = ("scan", "while")

# Every loop, conditional and host call a hot path may hold, by (primitive, the jaxdp
# function that makes it), with its reason. A ``scan`` has a static trip count:
# XLA:GPU runs it without reading a predicate on the host.
SITES = {
  ("scan", "chacha._vector_rounds"): "static: ChaCha's 10 (ChaCha8: 4) double rounds",
  ("scan", "general_points._draw"): "static: the linear extension's d steps",
  ("scan", "choices.unrank"): "static: d unranking steps",
  ("scan", "intervals.chain_round"): "static: d steps of the chain's prefix sums",
  ("scan", "wide.divmod_wide"): "static: one step per bit of the 128-bit division",
  ("scan", "wide.unrank_wide"): "static: d unranking steps",
  ("scan", "tree.tree_objects"): "static: the decomposition tree's height",
  ("scan", "tree._size_pass"): "static: the tree's waves of choices",
  ("scan", "tree._down_set_first"): "static: the tree's height",
  ("scan", "gaussian.lookup"): "static: the binary search's log2(table) steps",
  ("cond", "gamma.gamma_shapes"): "once per chunk: more rejections than the buffer",
  ("cond", "gamma.gamma_radius"): "once per chunk: more rejections than the buffer",
  ("cond", "refine.settle"): "exact mode: the rare host refinement, once per chunk",
  ("cond", "refine.settle_marked"): "exact mode: the rare host refinement, once per chunk",
  ("cond", "refine.settle_marked.refine"): (
    "exact mode: after the device's 52-digit second pass, in a chunk that needed it"
  ),
  ("pure_callback", "host_call.host_call"): (
    "exact mode: the host refinement and the failure checks"
  ),
  ("cond", "tree.size_counts"): "exact mode: the rare refined pass of the choices",
  ("while", "choices.uniform_below_each"): "exact rejection: a 2nd round is rare",
  ("while", "wide.uniform_below_wide"): "exact rejection: a 2nd round is rare",
  ("while", "interleave.interleave"): "exact: redraws tied sort keys (rare)",
  ("cond", "refine.raise_if"): "exact mode: the failure check (p < 1/63!)",
}

# The primitives a hot path may hold (besides SITES'): all run on the device with no
# host round trip. A new one fails the test: add it here if that holds for it.
PRIMITIVES = (
  set(
    "abs add and bitcast_convert_type broadcast_in_dim concatenate convert_element_type "
    "cumsum custom_vmap_call div dot_general dynamic_slice dynamic_update_slice eq "
    "erf_inv exp floor gather ge gt iota is_finite jit le log log1p lt max min mul ne "
    "neg not optimization_barrier or pad platform_index population_count random_bits "
    "random_fold_in random_split random_unwrap random_wrap reduce_and reduce_max "
    "lt_to reduce_min reduce_or reduce_prod reduce_sum rem reshape rev rsqrt scatter scatter-add "
    "scatter-min select_n shift_left shift_right_arithmetic shift_right_logical sign "
    "slice sort sqrt squeeze stack sub transpose xor".split()
  )
  | set(LOOPS)
  | {"cond"}
)

# float64 in a float32 sampler, by module, where a stated precision bound needs it.
F64_MODULES = {
  "sp": "the series-parallel times: their ordering error bound needs float64",
}


# The jaxdp package's folder, resolved: a frame is jaxdp's when its file lies in it,
# wherever the checkout or the virtual environment lives.
PACKAGE_DIR = os.path.dirname(os.path.realpath(jaxdp.__file__))


@functools.cache
def _in_package(file_name: str) -> bool:
  """Whether ``file_name`` is a module of the jaxdp package."""
  path = os.path.realpath(file_name)
  return os.path.commonpath([path, PACKAGE_DIR]) == PACKAGE_DIR


def _site(eqn, parent="?"):
  """``module.function`` of the innermost jaxdp frame that made ``eqn``."""
  tb = eqn.source_info.traceback
  for f in tb.frames if tb else ():
    if _in_package(f.file_name):
      mod = os.path.splitext(os.path.basename(f.file_name))[0]
      return f"{mod}.{f.function_name.replace('.<locals>', '')}"
  return parent


def _audit(jaxpr, platform="cuda"):
  """The program as lowered for ``platform``: (sites: Counter of (primitive, site) of
  its loops, conditionals and host calls; primitives; float64 sites; the syncs that
  sit inside a loop, with the loop)."""
  sites, prims, f64, nested = collections.Counter(), set(), collections.Counter(), []

  def walk(jaxpr, loop, parent):
    for e in getattr(jaxpr, "jaxpr", jaxpr).eqns:
      name, site = e.primitive.name, _site(e, parent)
      plats = e.params.get("branches_platforms") if name == "cond" else None
      if plats:  # lax.platform_dependent: the lowering keeps this platform's branch
        i = next((i for i, p in enumerate(plats) if p and platform in p), None)
        walk(e.params["branches"][plats.index(None) if i is None else i], loop, site)
        continue
      prims.add(name)
      if any(getattr(v.aval, "dtype", None) == jnp.float64 for v in e.outvars):
        f64[site] += 1
      if name in SYNCS + CALLBACKS + LOOPS:
        sites[(name, site)] += 1
        if name in SYNCS and loop:
          nested.append(((name, site), loop))
      inner = (name, site) if name in LOOPS else loop
      for v in e.params.values():
        for sub in v if isinstance(v, (tuple, list)) else (v,):
          if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
            walk(sub, inner, site)

  walk(jaxpr, None, "?")
  return sites, prims, f64, nested


def _hot_paths():
  """name -> n -> a draw of n samples from a key (each within one chunk)."""
  nhis, sp = Poset.nhis(3), Poset.from_edges(6, [(0, 2), (1, 2), (2, 3)])
  gen = Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)])  # an N: the general kernel
  chain5 = Poset.from_edges(5, [(0, 1), (1, 2), (3, 4)])
  rnd = jaxdp.random
  return {
    "forest": lambda n: lambda k: rnd.poset_ball(k, nhis, (n,)),
    "forest_knorm": lambda n: lambda k: rnd.knorm(k, PosetBall(nhis), 1.0, (n,)),
    "sp": lambda n: lambda k: rnd.poset_ball(k, sp, (n,), method="sp"),
    "general": lambda n: lambda k: rnd.poset_ball(k, gen, (n,), method="general"),
    "general_knorm": lambda n: lambda k: rnd.knorm(k, PosetBall(gen, "general"), 1.0, (n,)),
    "linf": lambda n: lambda k: rnd.knorm(k, LpBall(5, np.inf), 1.0, (n,)),
    "l2": lambda n: lambda k: rnd.knorm(k, LpBall(5, 2), 1.0, (n,)),
    "laplace": lambda n: lambda k: rnd.laplace(k, (n, 5)),
    "gaussian": lambda n: lambda k: rnd.gaussian(k, (n, 5)),
    "exact_laplace": lambda n: lambda k: exact.laplace(k, (n,), scale=2.0),
    "exact_ranks": lambda n: (
      lambda k: exact.poset_knorm(k, chain5, 2.0, (n,), path="ranks")
    ),
    "exact_forest": lambda n: lambda k: exact.poset_knorm(k, nhis, 2.0, (n,)),
    "exact_tree": lambda n: lambda k: exact.poset_knorm(k, sp, 2.0, (n,), path="tree"),
    "exact_wide": lambda n: lambda k: exact.poset_knorm(k, gen, 2.0, (n,), path="wide"),
    "exact_linf": lambda n: lambda k: exact.linf_knorm(k, 3, 2.0, (n,)),
    "exact_l2": lambda n: lambda k: exact.l2_knorm(k, 3, 2.0, (n,)),
    "discrete_gaussian": lambda n: lambda k: exact.discrete_gaussian(k, (n,), sigma=3.0),
    # ChaCha's words, as a ChaCha20/ChaCha8 key's random_bits computes them (at least
    # SCALAR_MIN_BLOCKS blocks: the CPU's scalar rounds)
    "chacha20_words": lambda n: lambda k: chacha._random_bits(k, 32, (n * 2**13,), 20),
    "chacha8_words": lambda n: lambda k: chacha._random_bits(k, 32, (n * 2**13,), 8),
  }


def _key(name):
  if name.startswith("chacha"):
    return jnp.arange(8, dtype=jnp.uint32)  # the impl's key data
  return jax.random.key(0)


def test_a_frame_is_jaxdps_by_the_package_folder_not_by_a_name_in_its_path():
  """A checkout in a folder named ``jaxdp`` (``git clone``'s default) holds its virtual
  environment: JAX's own files lie under ``.../jaxdp/.venv/...`` and are not jaxdp's."""
  root = os.path.dirname(PACKAGE_DIR)
  assert _in_package(chunks.__file__) and _in_package(jaxdp.__file__)
  assert not _in_package(jax.__file__)
  clone = os.path.join(os.path.dirname(root), "jaxdp")  # this one, or one beside it
  venv_jax = os.path.join(clone, ".venv", "lib", "jax", "_src", "source_info_util.py")
  assert "/jaxdp/" in venv_jax and not _in_package(venv_jax)
  assert not _in_package(os.path.join(root, "jaxdp_extra", "mod.py"))
  assert not _in_package(os.path.join(root, "tests", "samplers", "jaxdp", "x.py"))


@pytest.mark.parametrize("name", sorted(_hot_paths()))
def test_hot_path_holds_only_allowlisted_loops_syncs_primitives_and_float64(name):
  """Lowered for a GPU, each hot path's program holds only SITES' loops,
  conditionals and host calls (the float samplers no host call and no conditional
  but the Gamma buffer's, once per chunk), none of the conditionals or while loops
  inside a loop (a host round trip per step), only PRIMITIVES, and float64 only in
  the exact mode (its interval pass) or where F64_MODULES names the reason. A float
  sampler's loops are the same at n = 64 and n = 4096 (within one chunk): none runs
  over the batch."""
  make = _hot_paths()[name]
  sites, prims, f64, nested = _audit(jax.make_jaxpr(make(4096))(_key(name)))
  unknown = set(sites) - set(SITES)
  assert not unknown, f"new loops/conditionals/host calls: {unknown}; add to SITES"
  assert not nested, f"a host round trip per loop step: {nested}"
  new = prims - PRIMITIVES - set(CALLBACKS)  # host calls: SITES' only, checked above
  assert not new, f"new primitives {new}; add to PRIMITIVES"
  exact_mode = name.startswith("exact") or name == "discrete_gaussian"
  if not exact_mode:
    assert not {s for s in sites if s[0] in CALLBACKS}
    assert {s for s, _ in sites if s in SYNCS} <= {"cond"}
    if name not in F64_MODULES:
      assert not f64, f"float64 in a float32 sampler: {dict(f64)}"
    small = _audit(jax.make_jaxpr(make(64))(_key(name)))[0]
    assert small == sites


def test_the_gpu_program_has_no_conditional_where_the_cpu_uses_one_as_a_boundary():
  """The general kernel's step loop stores three values per step behind a
  conditional on the CPU (a fusion boundary there), and ChaCha's CPU words run their
  rounds as a reduce's scalar computation; lowered for a GPU the same programs hold
  an optimization barrier and the double rounds' loop instead, so the audit sees the
  platform's own program."""
  gen = Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)])
  j = jax.make_jaxpr(_hot_paths()["general"](64))(jax.random.key(0))
  cpu, gpu = _audit(j, "cpu"), _audit(j, "cuda")
  assert gen.d == 4 and len(cpu[3]) == 3  # three conditionals in the d-step loop
  assert not gpu[3] and "optimization_barrier" in gpu[1]
  words = jax.make_jaxpr(_hot_paths()["chacha20_words"](64))(_key("chacha20"))
  cpu, gpu = _audit(words, "cpu"), _audit(words, "cuda")
  assert "reduce" in cpu[1] and ("scan", "chacha._vector_rounds") not in cpu[0]
  assert "reduce" not in gpu[1] and gpu[0][("scan", "chacha._vector_rounds")] == 1


@pytest.mark.parametrize("rounds", [20, 8])
def test_chacha_runs_scalar_only_for_large_cpu_draws(rounds):
  """From SCALAR_MIN_BLOCKS blocks the program lowered for the CPU computes the
  rounds in a reduce (no loop; from 2 LOOP_BLOCKS to STEPS_MAX_BLOCKS, a loop over
  steps of the draw), and the one lowered for an accelerator in one vectorised pass
  (the double rounds' loop, no reduce); a smaller draw runs that loop on every
  platform."""
  key = jnp.arange(8, dtype=jnp.uint32)
  for num_blocks in (chacha.SCALAR_MIN_BLOCKS, 4 * chacha.SCALAR_MIN_BLOCKS):
    j = jax.make_jaxpr(lambda k, n=num_blocks: chacha._blocks(k, n, 0, rounds))(key)
    cpu, gpu = _audit(j, "cpu"), _audit(j, "cuda")
    assert "reduce" in cpu[1] and not [s for s in cpu[0] if s[0] in LOOPS]
    assert "reduce" not in gpu[1] and dict(gpu[0]) == {("scan", "chacha._vector_rounds"): 1}
    lengths = [e.params["length"] for e in _eqns(j) if e.primitive.name == "scan"]
    assert lengths == [rounds // 2]  # the accelerator's branch
  big = 2 * chacha.LOOP_BLOCKS  # on the CPU, in steps of LOOP_BLOCKS
  j = jax.make_jaxpr(lambda k: chacha._blocks(k, big, 0, rounds))(key)
  cpu, gpu = _audit(j, "cpu"), _audit(j, "cuda")
  assert "reduce" in cpu[1] and [s for s in cpu[0] if s[0] in LOOPS] == [
    ("scan", "chacha._blocks.in_steps")
  ]
  assert "reduce" not in gpu[1] and dict(gpu[0]) == {("scan", "chacha._vector_rounds"): 1}
  # past STEPS_MAX_BLOCKS (a word offset of 2^31 or more), one pass again (traced
  # only: no 8 GiB draw is made)
  huge = chacha.STEPS_MAX_BLOCKS + 1
  j = jax.make_jaxpr(lambda k: chacha._blocks(k, huge, 0, rounds))(key)
  assert not [s for s in _audit(j, "cpu")[0] if s[0] in LOOPS]
  small = chacha.SCALAR_MIN_BLOCKS - 1
  j = jax.make_jaxpr(lambda k: chacha._blocks(k, small, 0, rounds))(key)
  assert "reduce" not in _audit(j, "cpu")[1]
  assert dict(_audit(j, "cpu")[0]) == {("scan", "chacha._vector_rounds"): 1}


def _eqns(jaxpr):
  """Every equation of a (closed) jaxpr and of the programs nested in it."""
  for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
    yield eqn
    for v in eqn.params.values():
      for sub in v if isinstance(v, (tuple, list)) else (v,):
        if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
          yield from _eqns(sub)


class _Device:
  def __init__(self, platform, stats):
    self.platform, self._stats = platform, stats

  def memory_stats(self):
    if isinstance(self._stats, Exception):
      raise self._stats
    return self._stats


def test_chunks_scale_with_device_memory():
  """The CPU and devices without memory statistics take CHUNK; an accelerator takes
  the largest power of two whose working set fits 1/16 of its memory, within
  [CHUNK, MAX_CHUNK]; the float kernels' chunk follows the device."""
  per = 8192
  h200 = _Device("gpu", {"bytes_limit": 141 * 10**9})
  assert chunks.device_chunk(per, _Device("cpu", {"bytes_limit": 10**12})) == chunks.CHUNK
  assert chunks.device_chunk(per, _Device("gpu", None)) == chunks.CHUNK
  assert chunks.device_chunk(per, _Device("gpu", RuntimeError("no stats"))) == chunks.CHUNK
  assert chunks.device_chunk(per, _Device("gpu", {"bytes_limit": 10**6})) == chunks.CHUNK
  c = chunks.device_chunk(per, h200)
  assert c == 1 << 20 and c * per <= 141 * 10**9 / 16 < 2 * c * per
  assert chunks.device_chunk(1, h200) == chunks.MAX_CHUNK
  # the float kernels ask for their chunk: CHUNK on a CPU, more on the H200
  p = Poset.nhis(3)
  _, _, layout = dispatch.tables_and_layout(p, "auto")
  cpu = _Device("cpu", None)
  assert dispatch.device_chunk_size(layout, p.d, cpu) == chunks.CHUNK
  assert dispatch.device_chunk_size(layout, p.d, h200) == 1 << 21
