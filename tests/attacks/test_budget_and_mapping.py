"""Attacks on the accountant's arithmetic and its refusal of mapped releases.

Each test failed before its fix: a huge eps was charged one unit (its scaled cost
overflowed float32 and became NaN), and a release under ``shard_map(check_vma=False)``
drew the same noise on every device.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxdp
from jaxdp import (
  Accountant,
  BudgetExceededError,
  LaplaceMechanism,
  PosetCountMechanism,
  StaleAccountantError,
  release,
)
from jaxdp.accounting import budget as _budget
from jaxdp.accounting.refusal import FillOnRefusal


@pytest.mark.parametrize("eps", [1e30, 1.8e36, 1e37, 3e37])
def test_a_huge_static_eps_costs_more_than_the_budget(eps):
  """Before: ``LaplaceMechanism(1e37, exact=True)`` on a secure accountant was
  answered for 9.3e-10 of a budget of 1 and returned the statistic with no noise
  (about 10^9 such releases fit)."""
  for exact, secure in ((True, True), (False, False)):
    acct = Accountant.create(
      1.0,
      secure=secure,
      key=None if secure else jax.random.key(0),
      on_refusal=FillOnRefusal(),
    )
    stat = np.array([42, 7], np.int32) if exact else np.array([42.0, 7.0], np.float32)
    with pytest.raises(BudgetExceededError):
      release(acct, LaplaceMechanism(eps, exact=exact), stat)
  with pytest.raises(BudgetExceededError):
    release(
      Accountant.create(1.0, secure=True, on_refusal=FillOnRefusal()),
      PosetCountMechanism(jaxdp.Poset.nhis(1), 3e37, exact=True),
      np.array([[1, 1, 0, 0]] * 5, np.int32),
    )


@pytest.mark.parametrize("composition", ["basic", "advanced", "rdp", "zcdp"])
def test_a_huge_traced_eps_is_refused_and_spends_nothing(composition):
  kw = dict(delta_budget=1e-6)
  if composition == "advanced":
    kw.update(max_releases=10, delta_prime=1e-7)
  acct = Accountant.create(
    1.0, composition=composition, key=jax.random.key(0), **kw, on_refusal=FillOnRefusal()
  )

  @jax.jit
  def many(a, e, x):
    return jax.lax.scan(
      lambda a, _: release(a, LaplaceMechanism(e, exact=True), x), a, None, length=20
    )

  for eps in (1e30, 3e37, 3e38):
    after, outs = many(acct, jnp.float32(eps), jnp.array([42], jnp.int32))
    assert int(after.answered) == 0 and int(after.refusals) == 20
    assert np.all(np.asarray(outs) == np.iinfo(np.int32).min)
    assert float(after.spent_eps) == 0.0


def test_host_and_traced_charges_agree_on_huge_costs():
  exponent = _budget.unit_exponent(2.0**-60)  # the finest unit: scaling by 2^90
  for x in (1e-30, 1.0, 1e10, 1e30, 3e38):
    host = _budget.charge_host(x, exponent, positive=True)
    traced = jax.jit(lambda v: _budget.charge(v, exponent, positive=True))(jnp.float32(x))
    assert host[0] == bool(traced[0]) and host[1] == int(traced[1])
    assert x < 1e-20 or host[1] > 2**30  # beyond any capacity


def test_cached_host_charges_of_equal_scalars_agree_with_the_traced_charge():
  """Static scalar costs are looked up in a cache keyed by value: a float64 and its
  float32 copy, 0.0 and -0.0 share an entry. Either order, each is charged what the
  traced charge of its float32 value gives."""
  exponent = _budget.unit_exponent(1.0)
  traced = jax.jit(lambda v, p: _budget.charge(v, exponent, positive=p), static_argnums=1)
  pairs = [(0.5, np.float32(0.5)), (np.float32(0.1), 0.1), (0.0, -0.0), (-0.0, 0.0)]
  for pair in pairs:
    for positive in (True, False):
      for x in pair:
        host = _budget.charge_host(x, exponent, positive=positive)
        valid, units = traced(jnp.float32(x), positive)
        assert host == (bool(valid), int(units)) and type(host[1]) is int


def test_a_release_under_shard_map_without_vma_checks_is_refused():
  """Before: with ``check_vma=False`` the data split over a mesh axis and one
  replicated accountant, every shard drew the same noise (the shards' outputs came
  out exactly the data's difference apart), JAX's key-reuse checker on or not."""
  mesh = jax.make_mesh((1,), ("i",))
  acct = Accountant.create(1.0, key=jax.random.key(0), on_refusal=FillOnRefusal())
  body = lambda a, d: release(a, LaplaceMechanism(1.0), d)[1]
  f = jax.shard_map(
    body, mesh=mesh, in_specs=(P(), P("i")), out_specs=P("i"), check_vma=False
  )
  with pytest.raises(StaleAccountantError, match="check_vma=False"):
    jax.jit(f)(
      acct, jax.device_put(jnp.array([10.0, 11.0]), jax.NamedSharding(mesh, P("i")))
    )
  checked = jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P())
  assert np.isfinite(np.asarray(jax.jit(checked)(acct, jnp.array([10.0])))).all()


def test_a_batch_of_distinct_accountants_is_answered_with_distinct_noise():
  """A batch of accountants from split keys, mapped by ``jax.vmap``, is one release
  per lane with its own noise: equal data in lanes 0, 2 and 3 gives three equal
  exact Laplace(0.5) outputs with probability < 0.1 per run, so 20 runs all equal
  has probability < 1e-20. (A batch made by copying one accountant, with
  ``jnp.broadcast_to``, is a replay of it, which the accountant cannot see: the
  documented limit of trusted code.)"""
  mech = LaplaceMechanism(0.5, exact=True)
  data = jnp.array([[10], [11], [10], [10]], jnp.int32)
  run = jax.jit(jax.vmap(lambda a, d: release(a, mech, d)))
  same = 0
  for seed in range(20):
    batch = jax.vmap(lambda k: Accountant.create(1.0, key=k, on_refusal=FillOnRefusal()))(
      jax.random.split(jax.random.key(seed), 4)
    )
    new, out = run(batch, data)
    out = np.asarray(out).ravel()
    same += out[0] == out[2] == out[3]
    assert np.asarray(new.answered).tolist() == [1, 1, 1, 1]
  assert same < 20


@pytest.mark.parametrize("loop", ["lax.map", "fori_loop", "jit closure"])
def test_an_accountant_closed_over_by_a_traced_program_is_refused(loop):
  """Before: ``lax.map(lambda d: release(acct, mech, d)[1], data)`` with ``acct``
  from outside ran the release once per row with the same key (neighbours came out
  exactly 1 apart), eagerly, with no error; so did a jitted function closing over
  the accountant, on every call."""
  acct = Accountant.create(1.0, key=jax.random.key(0), on_refusal=FillOnRefusal())
  mech = LaplaceMechanism(0.5, exact=True)
  data = jnp.array([[10], [11]], jnp.int32)
  with pytest.raises(StaleAccountantError, match="constant of the traced program"):
    if loop == "lax.map":
      jax.lax.map(lambda d: release(acct, mech, d)[1], data)
    elif loop == "fori_loop":
      jax.lax.fori_loop(
        0, 2, lambda i, o: o + release(acct, mech, data[i])[1], jnp.zeros(1, jnp.int32)
      )
    else:
      jax.jit(lambda d: release(acct, mech, d)[1])(data[0])
  acct2, out = jax.jit(lambda a, d: release(a, mech, d))(acct, data[0])  # passed in
  assert bool(acct2.last_answered)


def test_a_rebuilt_mechanism_with_an_array_parameter_is_refused():
  """Before: ``tree_unflatten`` with a sensitivity leaf of shape (2, 1) gave a
  second output row with noise of scale 1e-6, charged as one release."""
  leaves, treedef = jax.tree_util.tree_flatten(LaplaceMechanism(1.0))
  bad = jax.tree_util.tree_unflatten(treedef, [leaves[0], jnp.array([[1.0], [1e-6]])])
  with pytest.raises(ValueError, match="must be a scalar"):
    jax.jit(release)(
      Accountant.create(1.0, key=jax.random.key(0), on_refusal=FillOnRefusal()),
      bad,
      jnp.array([10.0, 20.0, 30.0]),
    )


def test_a_positive_cost_below_float32s_normal_range_spends_a_unit():
  """Before: under the Rényi filter, group_size 2^25 and eps 1e-30 gave curve values
  near 1e-44 that XLA flushed to zero in one comparison and not in another: 1000
  releases answered, 0 units spent."""
  acct = Accountant.create(
    1.0,
    delta_budget=1e-6,
    composition="rdp",
    group_size=2**25,
    key=jax.random.key(0),
    on_refusal=FillOnRefusal(),
  )
  for _ in range(3):
    acct, _ = release(acct, LaplaceMechanism(1e-30), jnp.zeros(1))
  assert int(acct.answered) == 3
  assert np.all(np.asarray(acct.spent_units) == 3)
  _, units = jax.jit(lambda x: _budget.charge(x, 0, positive=True))(
    jnp.asarray([1e-45, 1e-40, 1e-38], jnp.float32)
  )
  assert np.asarray(units).tolist() == [1, 1, 1]
