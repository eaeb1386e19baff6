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
from jaxdp import (Accountant, BudgetExceededError, LaplaceMechanism, PosetCountMechanism,
                   StaleAccountantError, release)
from jaxdp import _budget


@pytest.mark.parametrize("eps", [1e30, 1.8e36, 1e37, 3e37])
def test_a_huge_static_eps_costs_more_than_the_budget(eps):
  """Before: ``LaplaceMechanism(1e37, exact=True)`` on a secure accountant was
  answered for 9.3e-10 of a budget of 1 and returned the statistic with no noise
  (about 10^9 such releases fit)."""
  for exact, secure in ((True, True), (False, False)):
    acct = Accountant.create(1.0, secure=secure,
                             key=None if secure else jax.random.key(0))
    stat = np.array([42, 7], np.int32) if exact else np.array([42.0, 7.0], np.float32)
    with pytest.raises(BudgetExceededError):
      release(acct, LaplaceMechanism(eps, exact=exact), stat)
  with pytest.raises(BudgetExceededError):
    release(Accountant.create(1.0, secure=True),
            PosetCountMechanism(jaxdp.Poset.nhis(1), 3e37, exact=True),
            np.array([[1, 1, 0, 0]] * 5, np.int32))


@pytest.mark.parametrize("composition", ["basic", "advanced", "rdp", "zcdp"])
def test_a_huge_traced_eps_is_refused_and_spends_nothing(composition):
  kw = dict(delta_budget=1e-6)
  if composition == "advanced":
    kw.update(max_releases=10, delta_prime=1e-7)
  acct = Accountant.create(1.0, composition=composition, key=jax.random.key(0), **kw)

  @jax.jit
  def many(a, e, x):
    return jax.lax.scan(lambda a, _: release(a, LaplaceMechanism(e, exact=True), x), a,
                        None, length=20)

  for eps in (1e30, 3e37, 3e38):
    after, outs = many(acct, jnp.float32(eps), jnp.array([42], jnp.int32))
    assert int(after.answered) == 0 and int(after.refusals) == 20
    assert np.all(np.asarray(outs) == np.iinfo(np.int32).min)
    assert float(after.spent_eps) == 0.0


def test_host_and_traced_charges_agree_on_huge_costs():
  exponent = _budget.unit_exponent(2.0 ** -60)  # the finest unit: scaling by 2^90
  for x in (1e-30, 1.0, 1e10, 1e30, 3e38):
    host = _budget.charge_host(x, exponent, positive=True)
    traced = jax.jit(lambda v: _budget.charge(v, exponent, positive=True))(
        jnp.float32(x))
    assert host[0] == bool(traced[0]) and host[1] == int(traced[1])
    assert x < 1e-20 or host[1] > 2 ** 30  # beyond any capacity


def test_a_release_under_shard_map_without_vma_checks_is_refused():
  """Before: with ``check_vma=False`` the data split over a mesh axis and one
  replicated accountant, every shard drew the same noise (the shards' outputs came
  out exactly the data's difference apart), JAX's key-reuse checker on or not."""
  mesh = jax.make_mesh((1,), ("i",))
  acct = Accountant.create(1.0, key=jax.random.key(0))
  body = lambda a, d: release(a, LaplaceMechanism(1.0), d)[1]  # noqa: E731
  f = jax.shard_map(body, mesh=mesh, in_specs=(P(), P("i")), out_specs=P("i"),
                    check_vma=False)
  with pytest.raises(StaleAccountantError, match="check_vma=False"):
    jax.jit(f)(acct, jax.device_put(jnp.array([10.0, 11.0]),
                                    jax.NamedSharding(mesh, P("i"))))
  checked = jax.shard_map(body, mesh=mesh, in_specs=(P(), P()), out_specs=P())
  assert np.isfinite(np.asarray(jax.jit(checked)(acct, jnp.array([10.0])))).all()
