"""dp_aggregate: the optax transformation's clipping, noise, refusal and reuse checks.

One plan shape for every test (B = 16 examples of a {w: (8, 4), b: (4,)} gradient), so
each jitted function compiles once.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from scipy import stats

import jaxdp
from jaxdp.training import DPAggregateState, dp_aggregate, find_state

Q, SIGMA, N, EPS, DELTA, CLIP, B = 0.05, 2.0, 200, 1.0, 1e-5, 1.5, 16


def _tx(policy, seed=3):
  return dp_aggregate(
    CLIP,
    SIGMA,
    sampling_rate=Q,
    dataset_size=N,
    eps_budget=EPS,
    delta=DELTA,
    key=jax.random.key(seed),
    accounting=policy,
  )


@pytest.fixture
def tx(rdp_policy):
  """A transformation of each test's own (it is initialised once)."""
  return _tx(rdp_policy)


@pytest.fixture
def update(tx):
  return jax.jit(tx.update)


def _grads(scale=1.0, seed=0, b=B):
  rng = np.random.default_rng(seed)
  return {
    "w": jnp.asarray(rng.standard_normal((b, 8, 4)) * scale, jnp.float32),
    "b": jnp.asarray(rng.standard_normal((b, 4)) * scale, jnp.float32),
  }


def _zeros(b=B):
  return jax.tree_util.tree_map(jnp.zeros_like, _grads(b=b))


def _norm(tree):
  return float(np.sqrt(sum(np.sum(np.asarray(x, np.float64) ** 2) for x in tree.values())))


def _minus(a, b):
  return {k: np.asarray(a[k], np.float64) - np.asarray(b[k], np.float64) for k in a}


def test_one_example_moves_the_update_by_at_most_c_over_qn(tx, update):
  """Same state (same noise) on two batches differing in one example: the updates
  differ by that example's clipped gradient / (q n), whose norm is at most C / (q n);
  a small example passes unclipped."""
  state = tx.init(None)
  base = _zeros()
  for scale, clipped in [(10.0, True), (0.01, False)]:
    one = jax.tree_util.tree_map(lambda z, g: z.at[3].set(g[0]), base, _grads(scale, 1))
    diff = _minus(update(one, state)[0], update(base, state)[0])
    want = {k: np.asarray(one[k][3], np.float64) / (Q * N) for k in one}
    if clipped:
      assert _norm(diff) <= CLIP / (Q * N) * (1 + 1e-5)
      assert _norm(diff) >= CLIP / (Q * N) * (1 - 1e-4)
    else:
      for k in diff:
        np.testing.assert_allclose(diff[k], want[k], rtol=1e-3, atol=1e-7)


@pytest.mark.statistical
def test_noise_std_is_sigma_c_over_qn(rdp_policy):
  """Zero gradients of 20,000 coordinates: the update is pure noise. Its sample
  variance over sigma^2 C^2 / (q n)^2, times (k - 1), is chi-square(k - 1): two-sided
  test at 1e-4 (fixed key), and the mean within 5 standard errors of 0."""
  t = dp_aggregate(
    CLIP,
    SIGMA,
    sampling_rate=Q,
    dataset_size=N,
    eps_budget=EPS,
    delta=DELTA,
    key=jax.random.key(7),
    accounting=rdp_policy,
  )
  g = {"w": jnp.zeros((2, 100, 100)), "b": jnp.zeros((2, 10000))}
  out, _ = t.update(g, t.init(None))
  x = np.concatenate([np.ravel(out["w"]), np.ravel(out["b"])]).astype(np.float64)
  k, std = x.size, SIGMA * CLIP / (Q * N)
  s = (k - 1) * x.var(ddof=1) / std**2
  assert min(stats.chi2.cdf(s, k - 1), stats.chi2.sf(s, k - 1)) > 0.5e-4
  assert abs(x.mean()) < 5 * std / np.sqrt(k)
  np.testing.assert_array_equal(out["w"].shape, (100, 100))


def test_refuses_exactly_after_max_steps_with_zeros_and_a_flag(tx, rdp_policy):
  """Run max_steps + 2 steps in one jitted scan: the first max_steps are answered,
  the rest refused with an update of exact zeros (finite, even for NaN gradients)."""
  state = tx.init(None)
  t_max = state.plan.max_steps
  assert t_max == rdp_policy.max_steps(Q, SIGMA, EPS, DELTA)

  def body(state, i):
    g = _grads(seed=0)
    g = jax.tree_util.tree_map(lambda x: jnp.where(i % 2 == 0, x, jnp.nan), g)
    out, state = tx.update(g, state)
    total = sum(jnp.sum(jnp.abs(x)) for x in jax.tree_util.tree_leaves(out))
    return state, (state.refused, total)

  state, (refused, total) = jax.jit(lambda s: jax.lax.scan(body, s, jnp.arange(t_max + 2)))(
    state
  )
  refused, total = np.asarray(refused), np.asarray(total)
  assert not refused[:t_max].any() and refused[t_max:].all()
  assert (total[t_max:] == 0).all() and np.isfinite(total).all()
  assert (total[:t_max:2] > 0).all()
  assert int(state.steps) == t_max and int(state.refusals) == 2
  assert int(state.steps_left) == 0
  assert state.epsilon() <= EPS < state.plan.epsilon(t_max + 1)


def test_an_example_with_nan_does_not_poison_the_sum(tx, update):
  state = tx.init(None)
  g = _grads(seed=2)
  bad = jax.tree_util.tree_map(lambda x: x.at[5].set(jnp.nan), g)
  without = jax.tree_util.tree_map(lambda x: x.at[5].set(0.0), g)
  got, want = update(bad, state)[0], update(without, state)[0]
  for k in got:
    assert np.isfinite(got[k]).all()
    np.testing.assert_array_equal(got[k], want[k])


def test_chains_with_optax_and_threads_through_repeated_jitted_calls(tx):
  opt = optax.chain(tx, optax.sgd(0.1))
  params = {"w": jnp.zeros((8, 4)), "b": jnp.zeros(4)}
  opt_state = opt.init(params)

  @jax.jit
  def step(params, opt_state, g):
    updates, opt_state = opt.update(g, opt_state, params)
    return optax.apply_updates(params, updates), opt_state

  seen = []
  for i in range(3):
    params, opt_state = step(params, opt_state, _grads(seed=i))
    seen.append(np.asarray(params["b"]))
  dp = find_state(opt_state)
  assert isinstance(dp, DPAggregateState) and int(dp.steps) == 3
  assert not np.allclose(seen[1] - seen[0], seen[2] - seen[1])  # fresh noise each step
  assert params["w"].shape == (8, 4) and params["w"].dtype == jnp.float32


def test_a_stale_state_is_refused_eagerly(rdp_policy):
  tx = _tx(rdp_policy, seed=4)
  state = tx.init(None)
  _, later = tx.update(_grads(), state)
  tx.update(_grads(), later)  # threading the state is fine
  with pytest.raises(jaxdp.StaleAccountantError, match="stale state"):
    tx.update(_grads(), state)
  with pytest.raises(jaxdp.StaleAccountantError):  # a second init: the same key
    tx.update(_grads(), tx.init(None))


def test_epsilon_is_zero_before_training_and_grows(rdp_policy):
  tx = _tx(rdp_policy, seed=5)
  state = tx.init(None)
  assert state.epsilon() == 0.0
  _, state = tx.update(_grads(), state)
  assert 0 < state.epsilon() <= EPS


def test_bad_arguments_name_themselves(rdp_policy):
  kw = dict(
    sampling_rate=Q,
    dataset_size=N,
    eps_budget=EPS,
    delta=DELTA,
    key=jax.random.key(0),
    accounting=rdp_policy,
  )
  for change, name in [
    (dict(sampling_rate=1.5), "sampling_rate"),
    (dict(delta=0.0), "delta"),
    (dict(eps_budget=-1.0), "eps_budget"),
    (dict(dataset_size=0), "dataset_size"),
    (dict(accounting="rdp"), "accounting"),
    (dict(key=3), "key"),
    (dict(eps_budget=1e-3), "not even one step"),
  ]:
    with pytest.raises(ValueError, match=name):
      dp_aggregate(CLIP, SIGMA, **{**kw, **change})
  with pytest.raises(ValueError, match="noise_multiplier"):
    dp_aggregate(CLIP, float("nan"), **kw)


def test_more_examples_than_the_dataset_or_a_foreign_state_is_refused(tx):
  state = tx.init(None)
  with pytest.raises(ValueError, match="dataset_size=200"):
    tx.update(_zeros(b=N + 1), state)
  other = dataclasses.replace(state, plan=dataclasses.replace(state.plan, max_steps=10**6))
  with pytest.raises(ValueError, match="plan differs"):
    tx.update(_zeros(), other)
  with pytest.raises(ValueError, match="exactly one"):
    find_state((optax.EmptyState(),))


def test_the_refusal_count_saturates_instead_of_wrapping(tx, update):
  state = tx.init(None)
  full = dataclasses.replace(
    state,
    steps=jnp.int32(state.plan.max_steps),
    refusals=jnp.int32(2**31 - 1),
  )
  out, after = update(_grads(), full)
  assert bool(after.refused) and int(after.refusals) == 2**31 - 1
  assert int(after.steps) == state.plan.max_steps
  assert all((np.asarray(x) == 0).all() for x in out.values())


def test_one_state_shared_by_vmapped_batches_or_closed_over_is_refused(tx):
  """Every lane (or every run) would add the same noise: refused at trace time."""
  state = tx.init(None)
  lanes = jax.tree_util.tree_map(lambda x: jnp.stack([x, 2 * x]), _grads())
  with pytest.raises(jaxdp.StaleAccountantError, match="same noise"):
    jax.vmap(tx.update, in_axes=(0, None))(lanes, state)
  with pytest.raises(jaxdp.StaleAccountantError, match="constant"):
    jax.jit(lambda g: tx.update(g, state))(_grads())
  # one state per lane, each from its own key, is fine
  keys = jax.random.split(jax.random.key(8), 2)
  states = jax.vmap(lambda k: dataclasses.replace(state, key=k))(keys)
  out, after = jax.vmap(tx.update)(lanes, states)
  assert not np.allclose(out["b"][0] * 2, out["b"][1])
  assert (np.asarray(after.steps) == 1).all()


def test_an_accounting_policy_that_only_looks_like_one_is_refused(rdp_policy):
  """The policy decides how many steps run: an object with the right methods that
  claims a huge ``max_steps``, or a subclass that does, must not be accepted."""

  class Generous:
    def epsilon(self, *args):
      return 0.0

    def max_steps(self, *args):
      return 2**31 - 1

  class GenerousRdp(type(rdp_policy)):
    def max_steps(self, *args):
      return 2**31 - 1

  for policy in (Generous(), GenerousRdp(orders=rdp_policy.orders)):
    with pytest.raises(TypeError, match="accounting must be"):
      _tx(policy)
