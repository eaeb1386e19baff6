"""The hot paths' programs make the choices an accelerator needs, checked on the CPU:
no host callbacks, no loop over the batch, no float64 in the float32 samplers that do
not need it, ChaCha's non-CPU path in one vectorised pass, and chunks sized from the
device's memory."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import LpBall, Poset, PosetBall
from jaxdp.prng import chacha
from jaxdp.samplers import chunks, dispatch

CALLBACKS = ("pure_callback", "io_callback", "callback", "debug_callback")


def _eqns(jaxpr):
  """Every equation of a (closed) jaxpr and of the programs nested in it."""
  jaxpr = getattr(jaxpr, "jaxpr", jaxpr)
  for eqn in jaxpr.eqns:
    yield eqn
    for v in eqn.params.values():
      for sub in v if isinstance(v, (tuple, list)) else (v,):
        if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
          yield from _eqns(sub)


def _loops(jaxpr):
  """(primitive, trip count) of every loop: scans by length, while loops as such."""
  out = []
  for e in _eqns(jaxpr):
    if e.primitive.name == "scan":
      out.append(("scan", e.params["length"]))
    elif e.primitive.name == "while":
      out.append(("while", None))
  return sorted(out, key=str)


def _samplers():
  nhis, sp = Poset.nhis(3), Poset.from_edges(6, [(0, 2), (1, 2), (2, 3)])
  gen = PosetBall(Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)]), "general")  # an N
  return {
    "forest": lambda n: lambda k: jaxdp.random.poset_ball(k, nhis, (n,)),
    "forest_knorm": lambda n: lambda k: jaxdp.random.knorm(k, PosetBall(nhis), 1.0, (n,)),
    "sp": lambda n: lambda k: jaxdp.random.poset_ball(k, sp, (n,), method="sp"),
    "general": lambda n: (
      lambda k: jaxdp.random.poset_ball(k, gen.poset, (n,), method="general")
    ),
    "general_knorm": lambda n: lambda k: jaxdp.random.knorm(k, gen, 1.0, (n,)),
    "linf": lambda n: lambda k: jaxdp.random.knorm(k, LpBall(5, np.inf), 1.0, (n,)),
    "laplace": lambda n: lambda k: jaxdp.random.laplace(k, (n, 5)),
  }


@pytest.mark.parametrize("name", sorted(_samplers()))
def test_hot_paths_have_no_callback_no_batch_loop_and_no_needless_float64(name):
  """For a batch within one chunk the program is the same whatever its size: its
  loops (the series-parallel kernel's scans over depths) have the same trip counts
  at n = 64 and n = 4096, so none runs over the batch; no equation is a host
  callback; the float32 samplers other than the series-parallel one (whose times
  are float64 by design) compute nothing in float64."""
  make = _samplers()[name]
  key = jax.random.key(0)
  small, large = (jax.make_jaxpr(make(n))(key) for n in (64, 4096))
  assert _loops(small) == _loops(large)
  prims = {e.primitive.name for e in _eqns(large)}
  assert not prims & set(CALLBACKS), prims & set(CALLBACKS)
  if name != "sp":
    f64 = [
      e.primitive.name
      for e in _eqns(large)
      if any(getattr(v.aval, "dtype", None) == jnp.float64 for v in e.outvars)
    ]
    assert not f64, f64


def test_chacha_runs_one_vectorised_pass_off_the_cpu():
  """sequential_blocks chooses the map over chunks only on the CPU and only past
  CPU_CHUNK blocks; the program it gives a "gpu" draw of 4 CPU_CHUNK blocks holds
  the ten double rounds' loop and no loop over chunks, the "cpu" one a map of 4."""
  big = 4 * chacha.CPU_CHUNK
  assert chacha.sequential_blocks(big, "cpu")
  assert not chacha.sequential_blocks(chacha.CPU_CHUNK, "cpu")
  for platform in ("gpu", "tpu", "cuda", "rocm"):
    assert not chacha.sequential_blocks(big, platform)
  key = jnp.arange(8, dtype=jnp.uint32)
  gpu = jax.make_jaxpr(lambda k: chacha._blocks(k, big, 0, 20, platform="gpu"))(key)
  cpu = jax.make_jaxpr(lambda k: chacha._blocks(k, big, 0, 20, platform="cpu"))(key)
  assert [n for _, n in _loops(gpu)] == [10]
  assert sorted(n for _, n in _loops(cpu)) == [4, 10]


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
