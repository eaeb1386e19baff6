"""Key hygiene of every release path: each PRNG key a release derives has one use.

The rule: a key is drawn from once, or split once, or folded (each time with other
data), never two of these and never drawn from twice; and no two derivations give
the same key. With Threefry (JAX's default, and jaxdp.threefry's unrolled form of it)
the rule is not a formality: ``split(k, n)[i]`` is the same key as ``fold_in(k, i)``,
and the children's key words are the very words ``k`` draws (``words64(k, (n,))``, or
``bits(k, (n,), uint64)``; a 32-bit draw is their xor), so a key both drawn from and
split hands its children out as noise. ChaCha20 keys keep the three uses apart by
nonce, but the rule is the same.

How the keys are seen: every ``jax.random`` sampler draws through the key primitives
``random_split``, ``random_fold_in`` and ``random_bits``, and jaxdp's one shortcut
around them is :func:`jaxdp.threefry.words64` (it hashes the key data itself). The
:func:`recorder` fixture wraps these to record, at run time (``jax.debug.callback``:
inside jit, loops and conditionals too, only the branches that run), the concrete key
data that each use consumes and derives. A release then runs eagerly from a fixed
key, and :func:`_violations` checks the record.

``release_partitioned`` draws every part's noise in one call, except for a grid
mechanism, which it maps over its parts with ``jax.vmap``; here that map runs part by
part (``_per_part``), the program's meaning for each part. Under
``vmap`` a conditional on a batched predicate computes both branches and selects
per part, and a batched while loop keeps computing (and discarding) the steps of the
parts already done, so the run-time record of a vmapped sampler also holds draws
that reach no output. JAX's own checker (``jax_debug_key_reuse``, on for these tests
as a second line of defence) rejects every ``vmap`` of a ``lax.cond`` that takes a
key (the batching rule selects each operand once per branch, and it counts a select
as a use: "In select_n, argument 2 is already consumed", JAX 0.10.2), so it too sees
release_partitioned part by part. The instruments wrap a private JAX module
(``jax._src.random.prng``, JAX 0.10).
"""

import collections
import functools
import importlib
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.random import prng

import jaxdp
from jaxdp import (
  Accountant,
  DiscreteGaussianMechanism,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  Poset,
  PosetBall,
  PosetCountMechanism,
  ZCDPGaussianMechanism,
  exact,
  threefry,
)
from jaxdp.exact import intervals as exact_intervals
from jaxdp.exact import samplers as exact_samplers
from jaxdp.random import secure_key

releases = importlib.import_module("jaxdp.accounting.releases")
sp_kernels = importlib.import_module("jaxdp.samplers.sp_kernel")

FOREST = Poset.nhis(1)  # d = 4
SERIES_PARALLEL = Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
N_SHAPE = Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)])
NUM_PARTS = 3


# ------------------------------------------------------------------ the recorder
class _Record:
  """Uses of keys: ``(kind, parent key data, detail, [derived key data])``."""

  def __init__(self):
    self.uses = []


_CURRENT = [None]  # the record that the instrumented primitives append to


def _rows(data):
  data = np.asarray(data)
  return [tuple(int(w) for w in row) for row in data.reshape(-1, data.shape[-1])]


def _log(kind, parents, detail, children):
  record = _CURRENT[0]
  if record is None:
    return
  children = children or [[] for _ in parents]
  for p, d, c in zip(parents, detail, children):
    record.uses.append((kind, p, d, c))


def _on_split(parent, child):
  parents = _rows(parent)
  child = np.asarray(child).reshape(len(parents), -1, child.shape[-1])
  _log("split", parents, [None] * len(parents), [_rows(c) for c in child])


def _on_fold(parent, msg, child):
  children = _rows(child)
  parents = _rows(
    np.broadcast_to(np.asarray(parent), np.asarray(child).shape[:-1] + parent.shape[-1:])
  )
  msgs = np.broadcast_to(np.asarray(msg), np.asarray(child).shape[:-1]).reshape(-1)
  _log("fold", parents, [int(m) for m in msgs], [[c] for c in children])


def _on_bits(what, parent):
  parents = _rows(parent)
  _log("bits", parents, [what] * len(parents), None)


@pytest.fixture(scope="class")
def recorder():
  """Instruments the key primitives and ``words64`` for the class's tests, with JAX's
  key-reuse checker on; jit caches are cleared before and after, so every kernel is
  traced with both and no other test runs an instrumented one."""
  mp = pytest.MonkeyPatch()
  split0, fold0, bits0, words0 = (
    prng.random_split,
    prng.random_fold_in,
    prng.random_bits,
    threefry.words64,
  )
  inside_words64 = [0]

  def split(keys, shape):
    out = split0(keys, shape=shape)
    if not inside_words64[0]:
      jax.debug.callback(_on_split, jax.random.key_data(keys), jax.random.key_data(out))
    return out

  def fold_in(keys, msgs):
    out = fold0(keys, msgs)
    if not inside_words64[0]:
      jax.debug.callback(
        _on_fold, jax.random.key_data(keys), msgs, jax.random.key_data(out)
      )
    return out

  def bits(keys, bit_width, shape):
    out = bits0(keys, bit_width=bit_width, shape=shape)
    if not inside_words64[0]:
      jax.debug.callback(
        lambda p: _on_bits((bit_width, tuple(shape)), p), jax.random.key_data(keys)
      )
    return out

  def words64(key, shape):  # one draw, whichever way words64 makes it
    jax.debug.callback(
      lambda p: _on_bits(("words64", tuple(shape)), p), jax.random.key_data(key)
    )
    inside_words64[0] += 1
    try:
      return words0(key, shape)
    finally:
      inside_words64[0] -= 1

  mp.setattr(prng, "random_split", split)
  mp.setattr(prng, "random_fold_in", fold_in)
  mp.setattr(prng, "random_bits", bits)
  mp.setattr(threefry, "words64", words64)
  mp.setattr(sp_kernels, "words64", words64)
  checker = jax.config.jax_debug_key_reuse
  jax.config.update("jax_debug_key_reuse", True)
  jax.clear_caches()
  try:
    yield _record
  finally:
    mp.undo()
    jax.config.update("jax_debug_key_reuse", checker)
    jax.clear_caches()


def _record(fn, *args):
  """Runs ``fn(*args)`` and returns ``(its result, the record of its key uses)``."""
  record = _Record()
  _CURRENT[0] = record
  try:
    out = jax.block_until_ready(fn(*args))
    jax.effects_barrier()
  finally:
    _CURRENT[0] = None
  return out, record


def _data(key):
  return tuple(int(w) for w in np.asarray(jax.random.key_data(key)).reshape(-1))


def _violations(record, roots):
  """What breaks the rule in ``record``, whose keys descend from ``roots`` (key data)."""
  derived = collections.Counter(roots)
  uses = collections.defaultdict(list)
  for kind, parent, detail, children in record.uses:
    uses[parent].append((kind, detail))
    derived.update(children)
  found = [f"key {k} derived {n} times" for k, n in derived.items() if n > 1]
  for parent, used in uses.items():
    kinds = {kind for kind, _ in used}
    if parent not in derived:
      found.append(f"key {parent} used but not derived from the release's key: {used}")
    if len(kinds) > 1 or (kinds != {"fold"} and len(used) > 1):
      found.append(f"key {parent} used {len(used)} times: {used}")
    elif kinds == {"fold"} and len({d for _, d in used}) < len(used):
      found.append(f"key {parent} folded twice with the same data: {used}")
  return found


def _per_part(fn):
  """``jax.vmap(fn)`` computed part by part (each part's program as it reads)."""

  def mapped(*args):
    n = jax.tree_util.tree_leaves(args)[0].shape[0]
    outs = [fn(*jax.tree_util.tree_map(lambda a: a[i], args)) for i in range(n)]
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *outs)

  return mapped


class _JaxPerPart:
  """The ``jax`` module as jaxdp.accounting.releases sees it, ``vmap`` run part by part."""

  def __getattr__(self, name):
    return _per_part if name == "vmap" else getattr(jax, name)


# ------------------------------------------------------------------ the cases
def _ints(shape):
  return jnp.asarray(np.arange(math.prod(shape)).reshape(shape) % 3, jnp.int32)


def _floats(shape):
  return jnp.asarray(np.arange(math.prod(shape)).reshape(shape) % 3 * 0.25, jnp.float32)


def _filters(poset, n):
  """n rows of 0/1 filters of ``poset`` (its up-sets of single elements and empty)."""
  order = np.asarray(poset.order, np.int32)  # order[i, j] = 1 iff i <= j
  rows = [np.zeros(poset.d, np.int32)] + [order[i] for i in range(poset.d)]
  return jnp.asarray(np.stack([rows[i % len(rows)] for i in range(n)]), jnp.float32)


# name -> (mechanism, statistic for release, rows for release_partitioned or None
# where the mechanism has no per-row statistic). Every statistic has 5 entries, as
# the counts of the 4-element posets, so the mechanisms that noise the same way share
# compiled samplers.
DIM = 5
CASES = {
  "laplace": (LaplaceMechanism(0.5), _floats((DIM,)), _floats((6, DIM))),
  "laplace-exact": (LaplaceMechanism(0.5, exact=True), _ints((DIM,)), _ints((6, DIM))),
  "laplace-grid": (
    LaplaceMechanism(0.5, exact=True, grid=2.0**-4),
    _floats((DIM,)),
    _floats((6, DIM)),
  ),
  "gaussian": (GaussianMechanism(0.5, 1e-5), _floats((DIM,)), _floats((6, DIM))),
  "zcdp-gaussian": (ZCDPGaussianMechanism(2.0), _floats((DIM,)), _floats((6, DIM))),
  "discrete-gaussian": (
    DiscreteGaussianMechanism(0.5, 1e-5),
    _ints((DIM,)),
    _ints((6, DIM)),
  ),
  "knorm-l1": (KNormMechanism(LpBall(DIM, 1), 0.5), _floats((DIM,)), _floats((6, DIM))),
  "knorm-l2": (KNormMechanism(LpBall(DIM, 2), 0.5), _floats((DIM,)), _floats((6, DIM))),
  "knorm-linf": (
    KNormMechanism(LpBall(DIM, math.inf), 0.5),
    _floats((DIM,)),
    _floats((6, DIM)),
  ),
  # exact l_p K-norm noise has no integer per-part statistic (its clipped sums are
  # floats), so release_partitioned refuses it
  "knorm-l1-exact": (KNormMechanism(LpBall(DIM, 1), 0.5, exact=True), _ints((DIM,)), None),
  "knorm-linf-exact": (
    KNormMechanism(LpBall(DIM, math.inf), 0.5, exact=True),
    _ints((DIM,)),
    None,
  ),
  # the poset ball clips no rows: PosetCountMechanism's cases partition it
  "knorm-poset-forest": (
    KNormMechanism(PosetBall(FOREST, "forest"), 0.5),
    _floats((DIM,)),
    None,
  ),
  "knorm-poset-sp": (
    KNormMechanism(PosetBall(SERIES_PARALLEL, "sp"), 0.5),
    _floats((DIM,)),
    None,
  ),
  "knorm-poset-general": (
    KNormMechanism(PosetBall(N_SHAPE, "general"), 0.5),
    _floats((DIM,)),
    None,
  ),
  "knorm-poset-exact": (
    KNormMechanism(PosetBall(N_SHAPE), 0.5, exact=True),
    _ints((DIM,)),
    None,
  ),
}
for _noise in ("poset", "linf", "l2", "laplace"):
  CASES[f"count-{_noise}"] = (
    PosetCountMechanism(FOREST, 0.5, noise=_noise),
    _filters(FOREST, 6),
    _filters(FOREST, 6),
  )
for _noise in ("poset", "linf", "l2", "laplace"):
  CASES[f"count-{_noise}-exact"] = (
    PosetCountMechanism(N_SHAPE, 0.5, noise=_noise, exact=True),
    _filters(N_SHAPE, 6),
    _filters(N_SHAPE, 6),
  )

KEYS = {
  "threefry": lambda: jax.random.key(7),
  "chacha20": lambda: secure_key(bytes(range(32))),
}


def _accountant(name, key_kind):
  mech = CASES[name][0]
  secure = key_kind == "chacha20" and getattr(mech, "exact", False) is True
  comp = "zcdp" if isinstance(mech, ZCDPGaussianMechanism) else "basic"
  return Accountant.create(
    100.0,
    delta_budget=1e-2,
    composition=comp,
    secure=secure,
    key=KEYS[key_kind](),
    allow_test_key=secure,
  )


def _releases(acct, name):
  """release twice, then release_partitioned (where it applies), then
  release_parallel_unchecked (which a secure accountant refuses), each from the
  accountant the one before returned."""
  mech, stat, rows = CASES[name]
  acct, a = jaxdp.release(acct, mech, stat)
  acct, b = jaxdp.release(acct, mech, stat)
  outs = [a, b]
  if rows is not None:
    part = jnp.arange(rows.shape[0]) % NUM_PARTS
    acct, c = jaxdp.release_partitioned(acct, mech, rows, part, NUM_PARTS)
    outs.append(c)
  if acct.secure:
    return acct, outs
  halves = (
    (stat[:3], stat[3:]) if isinstance(mech, PosetCountMechanism) else (stat, stat + 1)
  )
  acct, d = jaxdp.release_parallel_unchecked(acct, [(mech, halves[0]), (mech, halves[1])])
  return acct, outs + list(d)


def _normal_draw(key, m):
  return jax.random.normal(key, (m, 2))


def _first_column(x):
  return x[:, 0]


def _check(record, root, acct, outs):
  assert _violations(record, [root]) == []
  for out in outs:  # every release was answered
    out = np.asarray(out)
    assert not (
      np.isnan(out).any()
      if out.dtype.kind == "f"
      else (out == np.iinfo(out.dtype).min).any()
    )
  # the next release's key is fresh: derived here and not yet used
  derived = {c for *_, children in record.uses for c in children}
  assert _data(acct.key) in derived
  assert _data(acct.key) not in {parent for _, parent, _, _ in record.uses}


# ------------------------------------------------------------------ premises
@functools.partial(jax.jit, static_argnums=1)
def _three_uses(key, draws):
  """The key data of ``split(key, 5)`` and of ``fold_in(key, i)`` for i < 5, and
  ``draws`` uint32 words drawn from ``key`` (one program, not one per operation)."""
  children = jax.random.key_data(jax.random.split(key, 5))
  folds = jnp.stack([jax.random.key_data(jax.random.fold_in(key, i)) for i in range(5)])
  return children, folds, jax.random.bits(key, (draws,), jnp.uint32)


_words64 = jax.jit(threefry.words64, static_argnums=1)


@pytest.mark.parametrize("swap", [False, True], ids=["jax-threefry", "jaxdp-unrolled"])
def test_threefry_split_is_fold_in_and_children_are_drawn_words(swap):
  key = jax.random.key(11)
  if swap:
    key = jax.random.wrap_key_data(
      jax.random.key_data(key), impl=threefry.THREEFRY_UNROLLED
    )
  children, folds, bits = (np.asarray(v) for v in _three_uses(key, 5))
  np.testing.assert_array_equal(children, folds)
  hi, lo = _words64(key, (5,))
  np.testing.assert_array_equal(np.stack([hi, lo], axis=1), children)
  np.testing.assert_array_equal(bits, children[:, 0] ^ children[:, 1])


def test_chacha20_keeps_split_fold_in_and_stream_apart():
  key = secure_key(bytes(range(32)))
  children, folds, stream = (np.asarray(v) for v in _three_uses(key, 5 * 8))
  stream = stream.reshape(5, 8)
  assert not (children[:, None] == folds[None]).all(-1).any()
  assert not (children[:, None] == stream[None]).all(-1).any()
  assert not (folds[:, None] == stream[None]).all(-1).any()


# ------------------------------------------------------------------ the checks
@pytest.mark.usefixtures("recorder")
class TestKeyHygiene:
  """Every case runs under the recorder and JAX's checker (``jax_debug_key_reuse``:
  it follows typed keys through each jitted kernel's jaxpr; it does not count
  fold_in or words64 as uses, so it is the second line)."""

  def test_recorder_flags_every_kind_of_misuse(self, recorder):
    """The instruments see draws, splits, folds and words64 inside jit, and the check
    flags each misuse (so the release tests below can fail); JAX's checker is on."""
    key = threefry.fast_key(jax.random.key(3))
    root = [_data(key)]

    def clean(k):
      a, b = jax.random.split(k)
      return jax.random.normal(a, (2,)), threefry.words64(jax.random.fold_in(b, 4), (2,))

    misuses = {
      "draw and split": lambda k: (jax.random.uniform(k), jax.random.split(k)),
      "draw twice": lambda k: (jax.random.normal(k), jax.random.normal(k)),
      "words64 and split": lambda k: (threefry.words64(k, (2,)), jax.random.split(k)),
      "split and fold_in": lambda k: (jax.random.split(k, 3), jax.random.fold_in(k, 1)),
      "fold_in twice": lambda k: (
        jax.random.normal(jax.random.fold_in(k, 1)),
        jax.random.uniform(jax.random.fold_in(k, 1)),
      ),
    }
    _, record = recorder(jax.jit(clean), key)
    assert len(record.uses) == 4 and _violations(record, root) == []
    for name, fn in misuses.items():
      with jax.debug_key_reuse(False):
        _, record = recorder(jax.jit(fn), key)
      assert _violations(record, root), name
    for name in ("draw and split", "draw twice"):  # the two JAX's checker sees
      with pytest.raises(jax.errors.KeyReuseError):
        jax.jit(misuses[name])(key)

  @pytest.mark.slow
  @pytest.mark.parametrize("key_kind", list(KEYS))
  @pytest.mark.parametrize("name", list(CASES))
  def test_every_release_path_uses_each_key_once(
    self, recorder, monkeypatch, name, key_kind
  ):
    monkeypatch.setattr(releases, "jax", _JaxPerPart())
    acct = _accountant(name, key_kind)
    root = _data(acct.key)
    (acct, outs), record = recorder(_releases, acct, name)
    draws = [u for u in record.uses if u[0] == "bits"]  # at least one per output
    parallel = 0 if acct.secure else 2  # a secure accountant refuses it
    assert len(draws) >= 2 + parallel + (CASES[name][2] is not None)
    _check(record, root, acct, outs)

  def test_monte_carlo_blocks_use_each_key_once(self, recorder):
    """jaxdp.montecarlo.estimate: 20 draws in 3 chunks of 4 blocks, one key each.
    (Without JAX's checker: it counts the ``pvary`` that ``shard_map`` puts on the
    key inside the block loop as a use, once per block.)"""
    key = jax.random.key(5)
    with jax.debug_key_reuse(False):
      _, record = recorder(
        lambda k: (
          jaxdp.montecarlo.estimate(
            k, _normal_draw, _first_column, 20, chunk_size=8, blocks=4
          ).mean
        ),
        key,
      )
    assert _violations(record, [_data(key)]) == []
    assert sum(u[0] == "bits" for u in record.uses) == 3 * 4

  @pytest.mark.parametrize("key_kind", list(KEYS))
  def test_chunks_and_exact_refinement_use_each_key_once(
    self, recorder, monkeypatch, key_kind
  ):
    """A batch of several chunks (one split key each) and the exact samplers' host
    refinement (more digits from the chunk's own key): with chunks of 4 samples and a
    margin of 1, where the fast pass never settles, 7 samples take 2 chunks, both
    refined. (Last in the class: it clears the jit caches.)"""
    monkeypatch.setattr(exact_samplers, "CHUNK", 4)
    monkeypatch.setattr(exact_intervals, "MARGIN", 1.0)
    jax.clear_caches()
    acct = Accountant.create(100.0, key=KEYS[key_kind]())
    root = _data(acct.key)
    (acct, out), record = recorder(
      jaxdp.release, acct, LaplaceMechanism(0.5, exact=True), _ints((7,))
    )
    splits = [u for u in record.uses if u[0] == "split"]
    assert [len(u[3]) for u in splits] == [2, 2, 2, 2]  # accountant, chunks, 2 chunks'
    refined = [
      u for u in record.uses if u[0] == "bits" and u[2][1][-1:] == (exact.REFINE_WORDS,)
    ]
    assert len(refined) == 2
    _check(record, root, acct, [out])
    jax.clear_caches()
