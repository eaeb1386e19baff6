"""The stored random words of the float kernels (``jaxdp.samplers.words``): both
words of a Threefry hash, from one hash per element computed at the 32-bit width."""

import re

import jax
import numpy as np

from jaxdp.prng.threefry import fast_key, words64
from jaxdp.samplers import words

SHAPE = (4, 1024)


def _hash_fusions(fn, key):
  """Per fused computation of ``fn``'s CPU program that holds an xor (the hash's
  rounds): its xor count and the element types it computes in."""
  txt = jax.jit(fn).lower(key).compile().as_text()
  comps, cur = {}, None
  for line in txt.splitlines():
    m = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
    if m:
      cur = m.group(1)
      comps[cur] = []
    elif cur and line.startswith("  "):
      comps[cur].append(line)
  return [
    (sum(" xor(" in x for x in lines), set(re.findall(r"= ([usf]\d+)\[", "\n".join(lines))))
    for name, lines in comps.items()
    if name.startswith("fused") and any(" xor(" in x for x in lines)
  ]


def test_word_pairs_are_the_words_of_words64():
  """Bit for bit the two words of one hash per element (``words64``), for the fast
  key and for JAX's own Threefry key, and packed into one uint64 as ``hi << 32 | lo``."""
  for key in (jax.random.key(5), fast_key(jax.random.key(5))):
    want = [np.asarray(w) for w in words64(key, SHAPE)]
    got = [np.asarray(w) for w in jax.jit(lambda k: words.word_pairs(k, SHAPE))(key)]
    assert [w.dtype for w in got] == [np.uint32, np.uint32]
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    with jax.enable_x64(True):
      packed = np.asarray(jax.jit(lambda k: words.packed_words(k, SHAPE))(key))
    want64 = (want[0].astype(np.uint64) << np.uint64(32)) | want[1].astype(np.uint64)
    np.testing.assert_array_equal(packed, want64)


def test_word_pairs_hash_once_per_element_in_32_bit_lanes_on_the_cpu():
  """The CPU program computes the hash in one fusion, once per element (as many
  xors as the program of the sum of its two words, one fusion) and in 32-bit types
  only: a fusion that also computes in 64 bits (the words packed into one uint64)
  vectorises at the 64-bit width, half the lanes for the hash's 32-bit operations."""
  if jax.default_backend() != "cpu":
    return
  key = fast_key(jax.random.key(0))
  pair = _hash_fusions(lambda k: words.word_pairs(k, SHAPE), key)
  one = _hash_fusions(lambda k: sum(words64(k, SHAPE)), key)
  assert len(pair) == 1, pair
  assert pair[0][0] == sum(x for x, _ in one), (pair, one)
  assert pair[0][1] <= {"u32", "s32", "f32"}, pair
