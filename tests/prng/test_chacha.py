"""ChaCha20 as a JAX PRNG: RFC 8439 vectors, an independent implementation, streams.

References: RFC 8439 sections 2.3.2, 2.4.2 and appendix A.1 (the vectors below are
copied from the RFC); the ``cryptography`` package (OpenSSL) as a second
implementation.
"""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import random as dprandom
from jaxdp.prng import chacha


def _hex(s):
  return bytes.fromhex(s.replace(" ", "").replace("\n", ""))


def _stream_bytes(key_bytes, n_bytes):
  k = dprandom.secure_key(key_bytes)
  return np.asarray(jax.random.bits(k, (n_bytes,), jnp.uint8)).tobytes()


def _words(b):
  return np.frombuffer(b, "<u4")


def _openssl(key_bytes, n_bytes):
  """The first ``n_bytes`` of OpenSSL's ChaCha20 keystream (via ``cryptography``) for
  ``key_bytes``, nonce 0 and counter 0 (the test is skipped without the package)."""
  ciphers = pytest.importorskip("cryptography.hazmat.primitives.ciphers")
  cipher = ciphers.Cipher(ciphers.algorithms.ChaCha20(key_bytes, bytes(16)), mode=None)
  return cipher.encryptor().update(bytes(n_bytes))


A1 = [  # (key, counter, 64-byte keystream block) from RFC 8439 appendix A.1, nonce 0
  (
    bytes(32),
    0,
    "76b8e0ada0f13d90405d6ae55386bd28bdd219b8a08ded1aa836efcc8b770dc7"
    "da41597c5157488d7724e03fb8d84a376a43b8f41518a11cc387b669b2ee6586",
  ),
  (
    bytes(32),
    1,
    "9f07e7be5551387a98ba977c732d080dcb0f29a048e3656912c6533e32ee7aed"
    "29b721769ce64e43d57133b074d839d531ed1f28510afb45ace10a1f4b794d6f",
  ),
  (
    bytes(31) + b"\x01",
    1,
    "3aeb5224ecf849929b9d828db1ced4dd832025e8018b8160b82284f3c949aa5a"
    "8eca00bbb4a73bdad192b5c42f73f2fd4e273644c8b36125a64addeb006c13a0",
  ),
  (
    b"\x00\xff" + bytes(30),
    2,
    "72d54dfbf12ec44b362692df94137f328fea8da73990265ec1bbbea1ae9af0ca"
    "13b25aa26cb4a648cb9b9d1be65b2c0924a66c54d545ec1b7374f4872e99f096",
  ),
]


@pytest.mark.parametrize("key,counter,expected", A1)
def test_rfc8439_a1_keystream_through_jax_random_bits(key, counter, expected):
  got = _stream_bytes(key, 64 * (counter + 1))[64 * counter :]
  assert got.hex() == expected


RFC_232 = (
  "e4e7f110 15593bd1 1fdd0f50 c47120a3 c7f4d1c7 0368c033 9aaa2204 4e6cd4c3 "
  "466482d2 09aa9f07 05d7c214 a2028bd9 d19c12b5 b94e16de e883d0cb 4e3c50a2"
).split()


def test_rfc8439_232_block_function():
  key = _words(bytes(range(32)))
  nonce = _words(_hex("000000090000004a00000000"))
  out = np.asarray(chacha.block(key, jnp.array([1], jnp.uint32), tuple(nonce)))[0]
  assert [f"{int(w):08x}" for w in out] == RFC_232


@pytest.mark.parametrize("rounds_fn", ["_scalar_rounds", "_vector_rounds"])
def test_rfc8439_232_through_each_implementation_of_the_rounds(rounds_fn):
  """Both forms of the rounds (the CPU's scalar reduce for large draws, the array
  loop elsewhere) give RFC 8439's block 2.3.2, here on 3 copies of its input."""
  key = _words(bytes(range(32)))
  nonce = tuple(_words(_hex("000000090000004a00000000")))
  state = chacha._state(key, jnp.array([1, 1, 1], jnp.uint32), nonce)
  out = np.asarray(jax.jit(getattr(chacha, rounds_fn), static_argnums=1)(state, 20))
  for row in out:
    assert [f"{int(w):08x}" for w in row] == RFC_232


def test_the_scalar_rounds_reducer_gives_the_block_in_every_order():
  """The reduce's computation gives the block, tagged DONE, however a reduce combines
  the two copies of an input state with its identity: left or right folds, with
  ``init`` on either side or not at all, and the finished block combined with
  either (each order XLA may choose for a reduce of two elements)."""
  key = _words(bytes(range(32)))
  nonce = tuple(_words(_hex("000000090000004a00000000")))
  words = [w[0] for w in chacha._state(key, jnp.array([1], jnp.uint32), nonce)]
  f = jax.jit(chacha._combine(20))
  x = (jnp.uint32(chacha.RAW), *words)
  e = (jnp.uint32(0),) * 17
  orders = {
    "f(f(e, x), x)": lambda: f(f(e, x), x),
    "f(x, x)": lambda: f(x, x),
    "f(f(x, e), x)": lambda: f(f(x, e), x),
    "f(x, f(x, e))": lambda: f(x, f(x, e)),
    "f(f(x, x), e)": lambda: f(f(x, x), e),
    "f(e, f(x, x))": lambda: f(e, f(x, x)),
    "f(f(e, x), f(e, x))": lambda: f(f(e, x), f(e, x)),
    "f(f(e, x), f(x, e))": lambda: f(f(e, x), f(x, e)),
    "f(f(x, e), f(x, e))": lambda: f(f(x, e), f(x, e)),
  }
  for name, run in orders.items():
    tag, *out = run()
    assert int(tag) == chacha.DONE, name
    assert [f"{int(w):08x}" for w in out] == RFC_232, name


def test_rfc8439_242_encryption():
  key = _words(bytes(range(32)))
  nonce = tuple(_words(_hex("000000000000004a00000000")))
  plain = (
    b"Ladies and Gentlemen of the class of '99: If I could offer you only one "
    b"tip for the future, sunscreen would be it."
  )
  blocks = np.asarray(chacha.block(key, jnp.array([1, 2], jnp.uint32), nonce))
  stream = blocks.astype("<u4").tobytes()
  cipher = bytes(p ^ s for p, s in zip(plain, stream))
  assert cipher[:48].hex() == (
    "6e2e359a2568f98041ba0728dd0d6981e97e7aec1d4360c20a27afccfd9fae0b"
    "f91b65c5524733ab8f593dabcd62b357"
  )
  assert len(cipher) == 114


def test_matches_an_independent_implementation_on_random_keys():
  """OpenSSL's ChaCha20 (via ``cryptography``) on 8 random keys, 5 blocks each, and
  the 8-, 16-, 32- and 64-bit views of the stream."""
  rng = np.random.default_rng(20261130)
  for _ in range(8):
    key = rng.bytes(32)
    ref = _openssl(key, 320)
    k = dprandom.secure_key(key)
    assert _stream_bytes(key, 320) == ref
    w32 = np.asarray(jax.random.bits(k, (80,), jnp.uint32)).astype("<u4").tobytes()
    w16 = np.asarray(jax.random.bits(k, (160,), jnp.uint16)).astype("<u2").tobytes()
    assert w32 == ref and w16 == ref
    with jax.enable_x64(True):
      w64 = np.asarray(jax.random.bits(k, (40,), jnp.uint64)).astype("<u8").tobytes()
    assert w64 == ref
    # an odd length is a prefix of the stream
    assert (
      np.asarray(jax.random.bits(k, (7,), jnp.uint32)).astype("<u4").tobytes() == ref[:28]
    )


def test_large_draws_run_scalar_and_stay_the_stream():
  """A draw of more than 2 LOOP_BLOCKS blocks (computed in steps, then a rest) and
  one just past SCALAR_MIN_BLOCKS (the CPU's scalar rounds in one pass) are OpenSSL's
  ChaCha20 keystream (via ``cryptography``) word for word; the latter also equals
  the array rounds block by block."""
  key_bytes = bytes(range(32))
  k = dprandom.secure_key(key_bytes)
  # in steps of LOOP_BLOCKS, and a rest: OpenSSL's keystream too
  n_steps = 2 * chacha.LOOP_BLOCKS + 3
  bits = np.asarray(jax.random.bits(k, (16 * n_steps - 7,), jnp.uint32))
  assert bits.astype("<u4").tobytes() == _openssl(key_bytes, 4 * bits.size)
  n_blocks = chacha.SCALAR_MIN_BLOCKS + 3
  bits = np.asarray(jax.random.bits(k, (16 * n_blocks - 5,), jnp.uint32))
  assert bits.astype("<u4").tobytes() == _openssl(key_bytes, 4 * bits.size)
  state = chacha._state(
    jax.random.key_data(k), jnp.arange(n_blocks, dtype=jnp.uint32), (0, 0, 0)
  )
  ref = np.asarray(jax.jit(chacha._vector_rounds, static_argnums=1)(state, 20))
  np.testing.assert_array_equal(bits, ref.reshape(-1)[: bits.size])


def test_split_and_fold_in_streams_do_not_collide():
  """4096 split children, 4096 fold_in children and the parent: 8193 distinct 256-bit
  keys, and the first 64 bits of their 8193 streams are distinct (a collision of
  random 64-bit values among 8193 has probability 2e-12)."""
  k = dprandom.secure_key(bytes(range(32)))
  children = jax.random.split(k, 4096)
  folded = jax.vmap(lambda i: jax.random.fold_in(k, i))(jnp.arange(4096, dtype=jnp.uint32))
  keys = jnp.concatenate([children, folded, k[None]])
  data = np.asarray(jax.random.key_data(keys))
  assert len({row.tobytes() for row in data}) == 8193
  first = np.asarray(jax.vmap(lambda kk: jax.random.bits(kk, (2,), jnp.uint32))(keys))
  assert len({row.tobytes() for row in first}) == 8193
  # split is a prefix-consistent counter: split(k, 3) are the first 3 of split(k, 4096)
  np.testing.assert_array_equal(jax.random.key_data(jax.random.split(k, 3)), data[:3])
  # fold_in(k, x) differs from split child x (their own nonces)
  assert not np.array_equal(data[5], data[4096 + 5])


def test_jax_random_functions_accept_the_key_under_jit_and_vmap():
  k = dprandom.secure_key(bytes(32))
  u = jax.jit(lambda kk: jax.random.uniform(kk, (100_000,)))(k)
  assert 0 <= float(u.min()) and float(u.max()) < 1
  assert abs(float(u.mean()) - 0.5) < 5 * (1 / 12 / 1e5) ** 0.5
  z = jax.vmap(lambda kk: jax.random.normal(kk, (1000,)))(jax.random.split(k, 50))
  assert z.shape == (50, 1000) and abs(float(z.mean())) < 5 / (5e4) ** 0.5
  assert dprandom.is_secure_key(k) and not dprandom.is_secure_key(jax.random.key(0))


@pytest.mark.statistical
def test_byte_frequencies_pass_a_chi_square_test():
  """2^20 keystream bytes of a fixed key: chi-square over 256 cells, 255 dof; the
  statistic must lie in [180, 340] (two-sided p about 1e-5)."""
  b = np.frombuffer(_stream_bytes(bytes(range(1, 33)), 1 << 20), np.uint8)
  counts = np.bincount(b, minlength=256)
  e = b.size / 256
  chi2 = float(((counts - e) ** 2 / e).sum())
  assert 180 < chi2 < 340, chi2


def test_integer_seeds_and_bad_seed_bytes_are_refused():
  with pytest.raises(TypeError, match="secure_key"):
    jax.random.key(0, impl=chacha.CHACHA20)
  for bad in (b"short", bytes(33), "x" * 32, 12345):
    with pytest.raises(ValueError, match="32 bytes"):
      dprandom.secure_key(bad)
  a, b = dprandom.secure_key(), dprandom.secure_key()
  assert not np.array_equal(jax.random.key_data(a), jax.random.key_data(b))


def test_streams_longer_than_2_32_blocks_are_an_error():
  k = dprandom.secure_key(bytes(32))
  with pytest.raises(ValueError, match="2\\*\\*32-block"):
    jax.jit(lambda kk: jax.random.bits(kk, (16 * 2**32 + 1,), jnp.uint32)).lower(k)
  with pytest.raises(ValueError, match="2\\*\\*32-block"):
    jax.jit(lambda kk: jax.random.split(kk, 2**32 + 1)).lower(k)


# ------------------------------------------------------------------ ChaCha8 (studies)
def test_chacha8_is_the_published_8_round_keystream():
  """ChaCha8 of the all-zero 256-bit key and IV, blocks 0 and 1 (Strombergson,
  draft-strombergson-chacha-test-vectors, TC1, 8 rounds): the same code as ChaCha20
  with 8 rounds, and jax.random.bits of an all-zero ChaCha8 key is that stream."""
  expected = bytes.fromhex(
    "3e00ef2f895f40d67f5bb8e81f09a5a12c840ec3ce9a7f3b181be188ef711a1e"
    "984ce172b9216f419f445367456d5619314a42a3da86b001387bfdb80e0cfe42"
    "d2aefa0deaa5c151bf0adb6c01f2a5adc0fd581259f9a2aadcf20f8fd566a26b"
    "5032ec38bbc5da98ee0c6f568b872a65a08abf251deb21bb4b56e5d8821e68aa"
  )
  key = jax.random.wrap_key_data(jnp.zeros(8, jnp.uint32), impl=jaxdp.chacha.CHACHA8)
  words = np.asarray(jax.random.bits(key, (32,), jnp.uint32))
  assert words.astype("<u4").tobytes() == expected
  # a draw long enough for the CPU's scalar rounds: the same two blocks first, and
  # every block equal to the array rounds'
  n_blocks = chacha.SCALAR_MIN_BLOCKS + 1
  long = np.asarray(jax.random.bits(key, (16 * n_blocks,), jnp.uint32))
  assert long[:32].astype("<u4").tobytes() == expected
  state = chacha._state(
    jnp.zeros(8, jnp.uint32), jnp.arange(n_blocks, dtype=jnp.uint32), (0, 0, 0)
  )
  ref = np.asarray(jax.jit(chacha._vector_rounds, static_argnums=1)(state, 8))
  np.testing.assert_array_equal(long, ref.reshape(-1))


@pytest.mark.slow
@pytest.mark.statistical
def test_chacha8_study_keys_and_a_statistical_battery():
  """Integer seeds give distinct streams; split, fold_in and the stream never share
  a block. A small battery on 2^22 words of one key (thresholds: |z| < 5 or
  chi-square p > 1e-6): monobit, byte frequencies (255 dof), adjacent-word byte pairs
  (65535 dof), lag-1 correlation of uniforms, runs up/down count."""
  from scipy import stats

  k = jaxdp.random.study_key(5, "chacha8")
  assert jax.random.key_impl(k) == jaxdp.chacha.CHACHA8
  firsts = {
    tuple(
      np.asarray(jax.random.bits(jaxdp.random.study_key(s, "chacha8"), (4,), jnp.uint32))
    )
    for s in (0, 1, -1, 2**31 - 1)
  }
  assert len(firsts) == 4
  with pytest.raises(ValueError, match="would collide"):
    jaxdp.random.study_key(2**32, "chacha8")  # jax.random.key keeps 32 bits
  kids = jax.random.key_data(jax.random.split(k, 64))
  folded = jax.vmap(lambda i: jax.random.key_data(jax.random.fold_in(k, i)))(jnp.arange(64))
  allk = np.concatenate([np.asarray(kids), np.asarray(folded)])
  assert len({tuple(r) for r in allk}) == 128
  with pytest.raises(ValueError, match="generator must be one of"):
    jaxdp.random.study_key(0, "chacha20")
  w = np.asarray(jax.random.bits(k, (1 << 22,), jnp.uint32))
  n_bits = 32 * w.size
  ones = int(np.unpackbits(w.view(np.uint8)).sum())
  assert abs(ones - n_bits / 2) / math.sqrt(n_bits / 4) < 5
  b = w.view(np.uint8)
  assert stats.chisquare(np.bincount(b, minlength=256)).pvalue > 1e-6
  pairs = (w[:-1:2] & 0xFF).astype(np.int64) * 256 + (w[1::2] & 0xFF)
  assert stats.chisquare(np.bincount(pairs, minlength=65536)).pvalue > 1e-6
  u = w / 2.0**32
  r = np.corrcoef(u[:-1], u[1:])[0, 1]
  assert abs(r) * math.sqrt(u.size) < 5
  ups = np.diff(u) > 0
  runs = 1 + int(np.sum(ups[1:] != ups[:-1]))
  n = u.size
  mean, var = (2 * n - 1) / 3, (16 * n - 29) / 90  # runs up and down (Wald-Wolfowitz)
  assert abs(runs - mean) / math.sqrt(var) < 5
