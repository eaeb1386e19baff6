"""The transformation's budget against dp_accounting (an independent implementation):
the refused step is the one dp_accounting predicts, and the privacy spent it reports
matches dp_accounting's within 1% (RDP) and 0.5% (PLD)."""

import jax
import jax.numpy as jnp
import pytest

from jaxdp import training
from tests.training import reference

DELTA = 1e-5
# (q, sigma, eps budget): 65 RDP steps / 82 PLD steps, and a second regime
PLANS = [(0.05, 2.0, 1.0), (0.01, 0.9, 3.0)]


def _plan(policy, q, sigma, eps):
  tx = training.dp_aggregate(
    1.0,
    sigma,
    sampling_rate=q,
    dataset_size=1000,
    eps_budget=eps,
    delta=DELTA,
    key=jax.random.key(0),
    accounting=policy,
  )
  return tx, tx.init(None)  # the transformation and its one state


@pytest.mark.parametrize("q,sigma,eps", PLANS)
def test_rdp_refuses_at_the_step_dp_accounting_predicts(rdp_policy, q, sigma, eps):
  plan = _plan(rdp_policy, q, sigma, eps)[1].plan
  t, orders = plan.max_steps, rdp_policy.orders
  assert reference.rdp_epsilon(q, sigma, t, DELTA, orders) <= eps
  assert reference.rdp_epsilon(q, sigma, t + 1, DELTA, orders) > eps
  for steps in (1, t // 3, t):
    want = reference.rdp_epsilon(q, sigma, steps, DELTA, orders)
    assert abs(plan.epsilon(steps) / want - 1) < 0.01, (steps, plan.epsilon(steps), want)


@pytest.mark.parametrize("q,sigma,eps", PLANS[:1])
def test_pld_refuses_at_the_step_dp_accounting_predicts(pld_policy, q, sigma, eps):
  plan = _plan(pld_policy, q, sigma, eps)[1].plan
  t = plan.max_steps
  assert reference.pld_epsilon(q, sigma, t, DELTA, 1e-3) <= eps
  assert reference.pld_epsilon(q, sigma, t + 1, DELTA, 1e-3) > eps
  want = reference.pld_epsilon(q, sigma, t, DELTA)  # dp_accounting's default grid
  assert abs(plan.epsilon(t) / want - 1) < 0.005, (plan.epsilon(t), want)


def test_the_state_reports_what_it_spent(rdp_policy):
  """After a jitted run of 10 steps the state's figure is dp_accounting's at 10."""
  q, sigma, eps = PLANS[0]
  tx, state = _plan(rdp_policy, q, sigma, eps)
  g = {"w": jnp.ones((4, 3))}
  run = jax.jit(
    lambda s: jax.lax.scan(lambda s, _: (tx.update(g, s)[1], None), s, None, 10)
  )
  state = run(state)[0]
  want = reference.rdp_epsilon(q, sigma, 10, DELTA, rdp_policy.orders)
  assert abs(state.epsilon() / want - 1) < 0.01


def test_noise_multiplier_for_is_the_smallest_that_fits(rdp_policy):
  q, steps, eps = 0.05, 200, 2.0
  sigma = training.noise_multiplier_for(q, steps, eps, DELTA, rdp_policy)
  assert reference.rdp_epsilon(q, sigma, steps, DELTA, rdp_policy.orders) <= eps
  assert reference.rdp_epsilon(q, sigma * (1 - 1e-3), steps, DELTA, rdp_policy.orders) > eps
  assert _plan(rdp_policy, q, sigma, eps)[1].plan.max_steps >= steps
