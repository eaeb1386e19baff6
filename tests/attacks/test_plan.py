"""Attacks on :func:`jaxdp.plan` through control flow, and what must stay allowed.

A release inside a ``lax.cond`` branch or a ``lax.while_loop`` whose index or
predicate is computed from the data runs or not depending on the data, and every
later refusal (and the spend the accountant reports) shows it: a bit of the data per
query. ``plan`` must reject such queries, naming the release and the data argument;
it must still plan branches that make the same releases, control flow on released
outputs (postprocessing) and control flow on public Python values.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import Accountant, GaussianMechanism, LaplaceMechanism, release
from jaxdp.accounting.refusal import FillOnRefusal

lax = jax.lax
L, G = LaplaceMechanism, GaussianMechanism


def _acct(eps=1.0, delta=0.0):
  return Accountant.create(
    eps, delta_budget=delta, key=jax.random.key(0), on_refusal=FillOnRefusal()
  )


def _nothing(a):
  return a, jnp.float32(0)


def _leaves(acct):
  """The accountant's state as NumPy arrays (the key as its raw bits)."""
  is_key = lambda x: jnp.issubdtype(x.dtype, jax.dtypes.prng_key)
  return [
    np.asarray(jax.random.key_data(x) if is_key(x) else x)
    for x in jax.tree_util.tree_leaves(acct)
  ]


# ------------------------------------------------------------------ the three attacks
def _one_branch_then_release(a, x):
  a, _ = lax.cond(x.sum() > 5, lambda a: release(a, L(0.6), x.sum()), _nothing, a)
  return release(a, L(0.6), x.sum())


def test_a_release_in_one_branch_of_a_data_cond_is_rejected():
  """The second output is refused exactly when sum(x) > 5."""
  run = jax.jit(_one_branch_then_release)
  low, high = (run(_acct(), jnp.full(3, v))[1] for v in (0.0, 10.0))
  assert np.isfinite(low) and np.isnan(high)  # the leak the plan must prevent
  with pytest.raises(
    jaxdp.DataDependentCostError, match=r"release #0 runs inside a lax\.cond.*argument 0"
  ):
    jaxdp.plan(_one_branch_then_release, _acct(), jnp.zeros(3))


def _while_releases(a, x):
  n = jnp.minimum(x.sum(), 3).astype(jnp.int32)

  def body(s):
    i, a = s
    return i + 1, release(a, L(0.5), x.sum())[0]

  return lax.while_loop(lambda s: s[0] < n, body, (0, a))[1]


def _fori_releases(a, x, *, n):
  return lax.fori_loop(0, n, lambda i, a: release(a, L(0.5), x.sum())[0], a)


def test_b_while_loop_with_a_data_trip_count_is_rejected():
  """The number answered is 0 or 2 (of 3 run), by the data."""
  run = jax.jit(_while_releases)
  assert [int(run(_acct(), jnp.full(3, v)).answered) for v in (0.0, 10.0)] == [0, 2]
  with pytest.raises(
    jaxdp.DataDependentCostError,
    match=r"release #0 runs inside a lax\.while_loop.*argument 0",
  ):
    jaxdp.plan(_while_releases, _acct(), jnp.zeros(3))
  # a fori_loop with a traced bound is a while_loop; the bound is named
  with pytest.raises(
    jaxdp.DataDependentCostError,
    match=r"release #0 runs inside a lax\.while_loop.*argument 'n'",
  ):
    jaxdp.plan(_fori_releases, _acct(), jnp.zeros(3), n=jnp.int32(2))


def _laplace_or_gaussian(a, x):
  a, _ = lax.cond(
    x.sum() > 5,
    lambda a: release(a, L(0.5), x.sum()),
    lambda a: release(a, G(0.5, 1e-3), x.sum()),
    a,
  )
  return release(a, G(0.5, 1e-3), x.sum())


def test_c_mechanism_chosen_by_the_data_is_rejected():
  """Laplace leaves the delta budget for the last Gaussian; a first Gaussian does not."""
  run = jax.jit(_laplace_or_gaussian)
  gauss, lap = (run(_acct(1.0, 1e-3), jnp.full(3, v))[1] for v in (0.0, 10.0))
  assert np.isnan(gauss) and np.isfinite(lap)
  with pytest.raises(
    jaxdp.DataDependentCostError, match=r"release #0 runs inside a lax\.cond.*argument 0"
  ):
    jaxdp.plan(_laplace_or_gaussian, _acct(1.0, 1e-3), jnp.zeros(3))


# ------------------------------------------------------------------ more of the family
def _switch(a, x):
  i = jnp.clip(x.sum(), 0, 2).astype(jnp.int32)
  return lax.switch(
    i,
    [
      lambda a: release(a, L(0.1), x.sum()),
      lambda a: release(a, L(0.2), x.sum()),
      _nothing,
    ],
    a,
  )


def _other_parameters(a, x):
  return lax.cond(
    x.sum() > 5,
    lambda a: release(a, L(0.3), x.sum()),
    lambda a: release(a, L(0.5), x.sum()),
    a,
  )


def _other_mechanism(a, x):
  return lax.cond(
    x.sum() > 5,
    lambda a: release(a, L(0.5), x[:1]),
    lambda a: release(a, jaxdp.KNormMechanism(jaxdp.LpBall(1, 1.0), 0.5), x[:1]),
    a,
  )


def _other_count(a, x):
  two = lambda a: release(release(a, L(0.3), x.sum())[0], L(0.3), x[0])
  return lax.cond(x.sum() > 5, lambda a: release(a, L(0.3), x.sum()), two, a)


def _other_order(a, x):
  ab = lambda a: release(release(a, L(0.3), x.sum())[0], L(0.2), x[0])
  ba = lambda a: release(release(a, L(0.2), x.sum())[0], L(0.3), x[0])
  return lax.cond(x.sum() > 5, ab, ba, a)


def _scan_body_conds_on_data(a, x):
  def step(a, xi):
    return lax.cond(xi > 0, lambda a: release(a, L(0.2), xi), _nothing, a)

  return lax.scan(step, a, x)


def _nested_jit_and_cond(a, x):
  @jax.jit
  def inner(a):
    return lax.cond(x[0] > 0, jax.jit(lambda a: release(a, L(0.2), x[1])), _nothing, a)

  return lax.cond(True, inner, _nothing, a)


@pytest.mark.parametrize(
  "query",
  [
    _switch,
    _other_parameters,
    _other_mechanism,
    _other_count,
    _other_order,
    _scan_body_conds_on_data,
    _nested_jit_and_cond,
  ],
)
def test_branches_that_release_differently_on_the_data_are_rejected(query):
  with pytest.raises(
    jaxdp.DataDependentCostError,
    match=r"release #0 runs inside a lax\.cond or lax\.switch branch "
    r"whose index depends on the data \(argument 0\)",
  ):
    jaxdp.plan(query, _acct(), jnp.zeros(3))


def _where_rewinds(a, x):
  """Forgets the first release when sum(x) > 5: the second is then answered."""
  a1, _ = release(a, L(0.6), x.sum())
  a = jax.tree_util.tree_map(lambda new, old: jnp.where(x.sum() > 5, new, old), a1, a)
  return release(a, L(0.6), x.sum())


def _branch_keeps_the_old_accountant(a, x):
  """Both branches release the same, but one returns the accountant from before."""
  keep = lambda a: release(a, L(0.3), x.sum())
  drop = lambda a: (a, release(a, L(0.3), x.sum())[1])
  a, _ = lax.cond(x.sum() > 5, keep, drop, a)
  return release(a, L(0.6), x.sum())


def _branch_advances_the_key(a, x):
  """Both branches release the same; one also splits the key."""

  def split(a):
    a, y = release(a, L(0.3), x.sum())
    return dataclasses.replace(a, key=jax.random.split(a.key)[0]), y

  a, _ = lax.cond(x.sum() > 5, lambda a: release(a, L(0.3), x.sum()), split, a)
  return release(a, L(0.3), x.sum())


def _vmapped_cond(a, x):
  """Under vmap a cond on a batched predicate becomes a select of both branches."""
  accts = jax.vmap(lambda k: Accountant.create(1.0, key=k, on_refusal=FillOnRefusal()))(
    jax.random.split(jax.random.key(1), 3)
  )
  return jax.vmap(
    lambda a, xi: lax.cond(xi > 0, lambda a: release(a, L(0.3), xi), _nothing, a)
  )(accts, x)


@pytest.mark.parametrize(
  "query, index",
  [
    (_where_rewinds, 1),
    (_branch_keeps_the_old_accountant, 2),
    (_branch_advances_the_key, 2),
    (_vmapped_cond, 0),
  ],
)
def test_an_accountant_state_chosen_by_the_data_is_rejected(query, index):
  with pytest.raises(
    jaxdp.DataDependentCostError,
    match=rf"release #{index} starts from an accountant state .*"
    r"computed from the data \(argument 0\)",
  ):
    jaxdp.plan(query, _acct(), jnp.zeros(3))


def test_a_returned_accountant_chosen_by_the_data_is_rejected():
  def query(a, x):
    a1, y = release(a, L(0.6), x.sum())
    return jax.tree_util.tree_map(lambda n, o: jnp.where(x.sum() > 5, n, o), a1, a), y

  with pytest.raises(
    jaxdp.DataDependentCostError,
    match=r"accountant the query function returns .*argument 0",
  ):
    jaxdp.plan(query, _acct(), jnp.zeros(3))


# ------------------------------------------------------------------ allowed patterns
def _same_in_both(a, x):
  a, _ = lax.cond(
    x.sum() > 5,
    lambda a: release(a, L(0.4), x.sum()),
    lambda a: release(a, L(0.4), x[0]),
    a,
  )
  return release(a, L(0.5), x.sum())


def test_the_same_releases_in_every_branch_are_planned_once():
  """The cond runs one release of 0.4 whatever the data; the plan counts it once (0.4
  twice would refuse the 0.5), and the accountant after it is the same, key
  included."""
  p = jaxdp.plan(_same_in_both, _acct(), jnp.zeros(3))
  assert [(r.eps, r.refused) for r in p.releases] == [(0.4, False), (0.5, False)]
  run = jax.jit(_same_in_both)
  low, high = (run(_acct(), jnp.full(3, v))[0] for v in (0.0, 10.0))
  assert all(np.array_equal(u, v) for u, v in zip(_leaves(low), _leaves(high)))
  assert int(low.answered) == 2

  def switch(a, x):  # two releases in each of three branches
    def two(d):
      return lambda a: release(release(a, L(0.2), d)[0], G(0.5, 1e-6), d)

    return lax.switch(
      jnp.clip(x.sum(), 0, 2).astype(jnp.int32), [two(x[0]), two(x[1]), two(x.sum())], a
    )

  p = jaxdp.plan(switch, _acct(1.0, 1e-5), jnp.zeros(3))
  assert [(r.eps, r.delta) for r in p.releases] == [(0.2, 0.0), (0.5, 1e-6)]


def test_control_flow_on_released_outputs_is_postprocessing():
  """Not a DataDependentCostError; branches that release differently have no fixed
  plan (ValueError), and the query runs."""

  def same(a, x):
    a, y = release(a, L(0.3), x.sum())
    return lax.cond(
      y > 0, lambda a: release(a, L(0.3), x[0]), lambda a: release(a, L(0.3), x[1]), a
    )

  p = jaxdp.plan(same, _acct(), jnp.zeros(3))
  assert [(r.eps, r.refused) for r in p.releases] == [(0.3, False), (0.3, False)]

  def differ(a, x):
    a, y = release(a, L(0.3), x.sum())
    return lax.cond(y > 0, lambda a: release(a, L(0.3), x[0]), _nothing, a)

  def loop(a, x):
    a, y = release(a, L(0.3), x.sum())
    return lax.while_loop(
      lambda s: s[1] < 2,
      lambda s: (release(s[0], L(0.1), x.sum())[0], s[1] + 1 + y),
      (a, y),
    )

  for query, where in [(differ, "lax.cond"), (loop, "lax.while_loop")]:
    with pytest.raises(
      ValueError,
      match=rf"release #1 runs inside a {where}.*no fixed "
      "sequence",
    ) as info:
      jaxdp.plan(query, _acct(), jnp.zeros(3))
    assert not isinstance(info.value, jaxdp.DataDependentCostError)
  assert int(jax.jit(differ)(_acct(), jnp.zeros(3))[0].answered) in (1, 2)


def test_control_flow_on_public_python_values_is_resolved_while_tracing():
  """Non-array arguments are public; a cond on a Python bool or int, or a switch on a
  Python int, runs one branch. A cond on the data without a release stays allowed."""

  def query(a, x, flag, which):
    a, _ = lax.cond(flag, lambda a: release(a, L(0.1), x), _nothing, a)
    a, _ = lax.cond(
      int(flag), lambda a: release(a, L(0.2), x), lambda a: release(a, L(0.05), x), a
    )
    a, _ = lax.switch(
      which,
      [lambda a: release(a, L(0.3), x), lambda a: release(a, L(0.15), x), _nothing],
      a,
    )
    s = lax.cond(x > 5, lambda: x, lambda: -x)  # data, into a release's data input
    return release(a, L(0.25), s)

  eps = lambda p: [r.eps for r in p.releases]
  assert eps(jaxdp.plan(query, _acct(), jnp.zeros(()), True, 1)) == [0.1, 0.2, 0.15, 0.25]
  assert eps(jaxdp.plan(query, _acct(), jnp.zeros(()), False, 0)) == [0.05, 0.3, 0.25]
