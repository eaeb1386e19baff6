"""Attacks on the CPU's scalar ChaCha rounds (``chacha._scalar_rounds``, the reduce used
from ``SCALAR_MIN_BLOCKS`` blocks) through the public API and ordinary JAX usage.

Every keystream is compared with OpenSSL's ChaCha20 (the ``cryptography`` package) or
with an independent NumPy implementation of the block function below, never with the
library's own output. The compile-time tests check that XLA does not evaluate the
rounds while compiling a large draw whose key is a constant of the program (a key
closed over by a jitted function, or a study key made inside one), and that a draw
whose value is cancelled compiles (in a subprocess, so that a crash fails the test).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jaxdp import random as dprandom
from jaxdp.prng import chacha

ciphers = pytest.importorskip("cryptography.hazmat.primitives.ciphers")

N_BLOCKS = chacha.SCALAR_MIN_BLOCKS
KEY = bytes(range(1, 33))
M32 = 0xFFFFFFFF


def _openssl(key_bytes, n_words):
  """OpenSSL's ChaCha20 keystream (nonce 0, counter from 0) as little-endian words."""
  cipher = ciphers.Cipher(ciphers.algorithms.ChaCha20(key_bytes, bytes(16)), mode=None)
  return np.frombuffer(cipher.encryptor().update(bytes(4 * n_words)), "<u4")


def _np_blocks(key_words, counters, nonce, rounds=20):
  """An independent ChaCha block function in NumPy (uint64 arithmetic, masked)."""
  c = np.asarray(counters, np.uint64)
  n = c.shape[0]
  sigma = (0x61707865, 0x3320646E, 0x79622D32, 0x6B206574)
  st = [np.full(n, w, np.uint64) for w in sigma]
  st += [np.full(n, int(k), np.uint64) for k in key_words]
  st += [c & np.uint64(M32)] + [np.full(n, int(w), np.uint64) for w in nonce]
  x = [s.copy() for s in st]
  m = np.uint64(M32)

  def rot(v, r):
    return ((v << np.uint64(r)) | (v >> np.uint64(32 - r))) & m

  def quarter(a, b, c, d):
    x[a] = (x[a] + x[b]) & m
    x[d] = rot(x[d] ^ x[a], 16)
    x[c] = (x[c] + x[d]) & m
    x[b] = rot(x[b] ^ x[c], 12)
    x[a] = (x[a] + x[b]) & m
    x[d] = rot(x[d] ^ x[a], 8)
    x[c] = (x[c] + x[d]) & m
    x[b] = rot(x[b] ^ x[c], 7)

  quarters = (
    (0, 4, 8, 12),
    (1, 5, 9, 13),
    (2, 6, 10, 14),
    (3, 7, 11, 15),
    (0, 5, 10, 15),
    (1, 6, 11, 12),
    (2, 7, 8, 13),
    (3, 4, 9, 14),
  )
  for _ in range(rounds // 2):
    for q in quarters:
      quarter(*q)
  return np.stack([(a + b) & m for a, b in zip(x, st)], 1).astype(np.uint32)


def _key_words(key):
  return np.asarray(jax.random.key_data(key))


def test_reference_helpers_match_rfc8439():
  """The NumPy reference is itself RFC 8439 (section 2.3.2's block) and agrees with
  OpenSSL, so the other tests compare with two independent implementations."""
  key_words = np.frombuffer(bytes(range(32)), "<u4")
  block = _np_blocks(key_words, [1], (0x09000000, 0x4A000000, 0))[0]
  assert block[0] == 0xE4E7F110 and block[15] == 0x4E3C50A2
  np.testing.assert_array_equal(
    _np_blocks(np.frombuffer(KEY, "<u4"), np.arange(3), (0, 0, 0)).reshape(-1),
    _openssl(KEY, 48),
  )


@pytest.mark.parametrize("n_words", [16 * N_BLOCKS - 1, 16 * N_BLOCKS, 16 * N_BLOCKS + 7])
def test_word_draws_around_the_threshold_are_openssl(n_words):
  """Draws just below, at and above SCALAR_MIN_BLOCKS blocks (the switch between the
  array and the scalar rounds, and a partial last block) are OpenSSL's keystream."""
  got = np.asarray(jax.random.bits(dprandom.secure_key(KEY), (n_words,), jnp.uint32))
  np.testing.assert_array_equal(got, _openssl(KEY, n_words))


def test_narrow_and_wide_draws_on_the_scalar_path_are_openssl():
  """8-, 16- and (with x64) 64-bit draws of odd sizes on the scalar path are the
  keystream's bytes, halves and little-endian word pairs."""
  k = dprandom.secure_key(KEY)
  ref = _openssl(KEY, 16 * (N_BLOCKS + 40))
  n8, n16, n64 = 64 * N_BLOCKS + 3, 32 * N_BLOCKS + 1, 8 * N_BLOCKS + 5
  got8 = np.asarray(jax.random.bits(k, (n8,), jnp.uint8))
  np.testing.assert_array_equal(got8, np.frombuffer(ref.tobytes(), np.uint8)[:n8])
  got16 = np.asarray(jax.random.bits(k, (n16,), jnp.uint16))
  np.testing.assert_array_equal(got16, np.frombuffer(ref.tobytes(), "<u2")[:n16])
  with jax.enable_x64(True):
    got64 = np.asarray(jax.random.bits(k, (n64,), jnp.uint64))
  np.testing.assert_array_equal(got64, np.frombuffer(ref.tobytes(), "<u8")[:n64])


def test_vmap_over_keys_gives_each_key_its_own_stream():
  """``jax.vmap`` (and a nested ``vmap`` under ``jit``) over a batch of keys on the
  scalar path: each row is that key's OpenSSL stream, not a shared or repeated one."""
  raw = [bytes([i]) * 32 for i in range(3)] + [KEY]
  keys = jnp.stack([dprandom.secure_key(b) for b in raw])
  n = 16 * N_BLOCKS + 5
  ref = np.stack([_openssl(b, n) for b in raw])
  draw = lambda kk: jax.random.bits(kk, (n,), jnp.uint32)
  np.testing.assert_array_equal(np.asarray(jax.vmap(draw)(keys)), ref)
  nested = jax.jit(jax.vmap(jax.vmap(draw)))(keys.reshape(2, 2))
  np.testing.assert_array_equal(np.asarray(nested), ref.reshape(2, 2, n))


@pytest.mark.filterwarnings("ignore:Some donated buffers were not usable")
def test_loops_transformations_and_donation_keep_the_stream():
  """Scalar-path draws in a ``scan`` body over keys, a ``fori_loop`` body over
  ``fold_in`` keys, under ``jax.checkpoint``, nested ``jit`` with a slice, and with
  the key data donated: each equals the OpenSSL / NumPy reference."""
  n = 16 * N_BLOCKS + 1
  raw = [bytes([i + 7]) * 32 for i in range(2)]
  keys = jnp.stack([dprandom.secure_key(b) for b in raw])
  _, ys = jax.lax.scan(lambda c, kk: (c, jax.random.bits(kk, (n,), jnp.uint32)), 0, keys)
  np.testing.assert_array_equal(np.asarray(ys), np.stack([_openssl(b, n) for b in raw]))

  k = dprandom.secure_key(KEY)
  body = lambda i, acc: acc ^ jax.random.bits(jax.random.fold_in(k, i), (n,), jnp.uint32)
  got = jax.jit(lambda kk: jax.lax.fori_loop(0, 2, body, jnp.zeros(n, jnp.uint32)))(k)
  ref = np.zeros(n, np.uint32)
  for i in range(2):
    child = _np_blocks(_key_words(k), [i], (chacha.FOLD_IN, 0, 0))[0, :8]
    ref ^= _openssl(child.astype("<u4").tobytes(), n)
  np.testing.assert_array_equal(np.asarray(got), ref)

  stream = _openssl(KEY, n)
  ckpt = jax.jit(jax.checkpoint(lambda kk: jax.random.bits(kk, (n,), jnp.uint32)))
  np.testing.assert_array_equal(np.asarray(ckpt(k)), stream)
  inner = jax.jit(lambda kk: jax.random.bits(kk, (n,), jnp.uint32))
  sliced = jax.jit(lambda kk: inner(kk)[-3:][::-1])(k)
  np.testing.assert_array_equal(np.asarray(sliced), stream[-3:][::-1])

  def from_data(d):
    return jax.random.bits(jax.random.wrap_key_data(d, impl=chacha.CHACHA20), (n,))

  donated = jax.jit(from_data, donate_argnums=0)(jnp.array(_key_words(k)))
  np.testing.assert_array_equal(np.asarray(donated), stream)


def test_large_split_and_fold_in_are_the_block_function():
  """``split`` into >= SCALAR_MIN_BLOCKS children (flat, 2-d and under ``vmap``) and
  a ``vmap`` of ``fold_in`` over 5000 data: each child is the first 8 words of the
  NumPy block at its counter under the split / fold_in nonce."""
  k = dprandom.secure_key(KEY)
  kw = _key_words(k)
  ref = _np_blocks(kw, np.arange(64 * 65), (chacha.SPLIT, 0, 0))[:, :8]
  got = _key_words(jax.random.split(k, (64, 65)))
  np.testing.assert_array_equal(got, ref.reshape(64, 65, 8))
  batched = jax.vmap(lambda kk: jax.random.key_data(jax.random.split(kk, N_BLOCKS)))
  got = np.asarray(batched(jnp.stack([k, k])))
  np.testing.assert_array_equal(got, np.stack([ref[:N_BLOCKS]] * 2))
  xs = np.arange(5000, dtype=np.uint32) * np.uint32(7919)
  folded = _key_words(jax.vmap(lambda x: jax.random.fold_in(k, x))(jnp.asarray(xs)))
  np.testing.assert_array_equal(folded, _np_blocks(kw, xs, (chacha.FOLD_IN, 0, 0))[:, :8])


def test_shard_map_and_export_keep_the_stream():
  """A scalar-path draw inside ``shard_map`` on a one-device mesh (keys sharded over
  the mesh axis), and an exported program for both CPU and CUDA called on the CPU
  (``platform_dependent`` resolved at lowering), equal OpenSSL's stream."""
  n = 16 * N_BLOCKS + 3
  mesh = jax.make_mesh((1,), ("x",))
  keys = jax.device_put(jnp.stack([dprandom.secure_key(KEY)]), NamedSharding(mesh, P("x")))
  draw = jax.vmap(lambda kk: jax.random.bits(kk, (n,), jnp.uint32))
  f = jax.shard_map(draw, mesh=mesh, in_specs=P("x"), out_specs=P("x"))
  np.testing.assert_array_equal(np.asarray(jax.jit(f)(keys)), _openssl(KEY, n)[None])

  def from_data(d):
    return jax.random.bits(jax.random.wrap_key_data(d, impl=chacha.CHACHA20), (n,))

  exported = jax.export.export(jax.jit(from_data), platforms=("cpu", "cuda"))(
    jax.ShapeDtypeStruct((8,), jnp.uint32)
  )
  got = exported.call(jnp.asarray(_key_words(dprandom.secure_key(KEY))))
  np.testing.assert_array_equal(np.asarray(got), _openssl(KEY, n))


def test_chacha8_scalar_path_is_the_8_round_block_function():
  """ChaCha8 study keys on the scalar path (a draw, a ``vmap`` over two keys and a
  split of SCALAR_MIN_BLOCKS children) equal the NumPy 8-round block function."""
  n_blocks = N_BLOCKS + 2
  n = 16 * n_blocks - 3
  seeds = (12345, -7)
  keys = jnp.stack([dprandom.study_key(s, "chacha8") for s in seeds])
  refs = np.stack(
    [
      _np_blocks(_key_words(k), np.arange(n_blocks), (0, 0, 0), 8).reshape(-1)[:n]
      for k in keys
    ]
  )
  got = jax.vmap(lambda kk: jax.random.bits(kk, (n,), jnp.uint32))(keys)
  np.testing.assert_array_equal(np.asarray(got), refs)
  np.testing.assert_array_equal(np.asarray(jax.random.bits(keys[0], (n,))), refs[0])
  split = _key_words(jax.random.split(keys[0], N_BLOCKS))
  ref = _np_blocks(_key_words(keys[0]), np.arange(N_BLOCKS), (chacha.SPLIT, 0, 0), 8)
  np.testing.assert_array_equal(split, ref[:, :8])


def _compiled_with_a_live_reduce(f):
  """``f`` (no arguments) compiled, and whether its program still computes the
  scalar rounds (a reduce) rather than holding their result as a folded constant."""
  compiled = jax.jit(f).lower().compile()
  return compiled, " reduce(" in compiled.as_text() or "reduce_fusion" in compiled.as_text()


def test_closed_over_secure_key_large_draw_is_not_folded_while_compiling():
  """Attacks compile time: a jitted function that closes over a secure key (the key
  is then a constant of the program) and draws SCALAR_MIN_BLOCKS blocks. XLA's
  constant folder would evaluate the scalar rounds' reduce in its interpreter (about
  2.6 ms a block: ``jax.jit(lambda x: x + jax.random.normal(key, (2**20,)))`` took
  minutes to compile). The compiled program must still compute the rounds (no
  folded constant) and give OpenSSL's stream."""
  k = dprandom.secure_key(KEY)
  n = 16 * N_BLOCKS
  compiled, live = _compiled_with_a_live_reduce(
    lambda: jax.random.bits(k, (n,), jnp.uint32)
  )
  np.testing.assert_array_equal(np.asarray(compiled()), _openssl(KEY, n))
  assert live


def test_closed_over_secure_key_large_split_is_not_folded_while_compiling():
  """Attacks compile time through ``split``: SCALAR_MIN_BLOCKS children of a key
  closed over by a jitted function (the scalar rounds with a constant key). The
  program must still compute the rounds and give the NumPy children."""
  k = dprandom.secure_key(KEY)
  compiled, live = _compiled_with_a_live_reduce(
    lambda: jax.random.key_data(jax.random.split(k, N_BLOCKS))
  )
  ref = _np_blocks(_key_words(k), np.arange(N_BLOCKS), (chacha.SPLIT, 0, 0))[:, :8]
  np.testing.assert_array_equal(np.asarray(compiled()), ref)
  assert live


def test_chacha8_study_key_made_inside_jit_is_not_folded_while_compiling():
  """Attacks compile time with the ordinary Monte Carlo pattern: a ChaCha8 study key
  made from an integer seed inside a jitted function (a constant key), drawing
  2 * SCALAR_MIN_BLOCKS blocks. The program must still compute the rounds and be
  the NumPy stream."""
  n_blocks = 2 * N_BLOCKS
  compiled, live = _compiled_with_a_live_reduce(
    lambda: jax.random.bits(dprandom.study_key(3, "chacha8"), (16 * n_blocks,))
  )
  kw = _key_words(dprandom.study_key(3, "chacha8"))
  ref = _np_blocks(kw, np.arange(n_blocks), (0, 0, 0), 8).reshape(-1)
  np.testing.assert_array_equal(np.asarray(compiled()), ref)
  assert live


# The cancelling uses, each compiled as its own program in one child process.
CANCELLED = ("bits * jnp.uint32(0)", "bits - bits", "bits ^ bits")

_CHILD = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jaxdp import random as dprandom
from jaxdp.prng import chacha
n = 16 * chacha.SCALAR_MIN_BLOCKS
k = dprandom.secure_key(bytes(range(1, 33)))
for i, expr in enumerate(sys.argv[2:]):
  def f(kk):
    bits = jax.random.bits(kk, (n,), jnp.uint32)  # a draw whose value is cancelled
    return eval(expr), jax.random.bits(kk, (n,), jnp.uint32)  # the same draw, live
  dead, bits = jax.jit(f)(k)
  np.asarray(bits).astype("<u4").tofile(f"{sys.argv[1]}.{i}")
  print(expr, "dead", int(np.asarray(dead).astype(np.uint64).sum()), flush=True)
"""


def test_a_draw_whose_value_simplifies_away_compiles(tmp_path):
  """Attacks the compiler with a scalar-path draw whose value some use cancels
  (``bits * 0``, ``bits - bits``, ``bits ^ bits``, each its own program), next to a
  second, live draw of the same key and shape. The cancelled draw's reduce is left
  with no live result, and compiling crashed the Python process (a segmentation
  fault for ``* 0``, "LLVM ERROR: Failed to infer result type(s)" for ``b - b``; the
  array rounds compile). Run in a subprocess: it must exit cleanly, each cancelled
  value be 0 and each live draw OpenSSL's stream."""
  import os
  import pathlib
  import subprocess
  import sys

  root = pathlib.Path(__file__).resolve().parents[2]
  env = dict(os.environ, PYTHONPATH=str(root))
  out = tmp_path / "bits"
  proc = subprocess.run(
    [sys.executable, "-c", _CHILD, str(out), *CANCELLED],
    env=env,
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr[-2000:])
  stream = _openssl(KEY, 16 * N_BLOCKS)
  for i, expr in enumerate(CANCELLED):
    assert f"{expr} dead 0" in proc.stdout, (expr, proc.stdout)
    np.testing.assert_array_equal(np.fromfile(f"{out}.{i}", "<u4"), stream)
