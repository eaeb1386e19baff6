"""A media-mix model fitted to a DP-released conversions table: fitting is free.

Weekly conversions by channel are counted from user-level data (each user converts at
most once, so the table has l_1 sensitivity 1) and released once with Laplace noise.
A small media-mix regression (conversions ~ base + beta_c * adstocked spend_c) is then
fitted with optax on the released table only. By postprocessing (Dwork, Proposition
2.4) the fit costs no privacy: the accountant shows the same spend before and after.
"""

import jax
import jax.numpy as jnp
import numpy as np
import optax

import jaxdp

WEEKS, CHANNELS, EPS = 52, 3, 0.5


def adstock(spend, decay=0.5):
  def step(carry, x):
    carry = x + decay * carry
    return carry, carry

  return jax.lax.scan(step, jnp.zeros(spend.shape[1]), spend)[1]


def main():
  rng = np.random.default_rng(0)
  spend = rng.gamma(2.0, 50.0, size=(WEEKS, CHANNELS))  # public
  true_beta = np.array([0.8, 0.3, 1.5])
  expected = 40 + np.asarray(adstock(jnp.asarray(spend))) * true_beta
  conversions = rng.poisson(expected)  # private table

  acct = jaxdp.Accountant.create(1.0, key=jax.random.key(0))
  acct, released = jaxdp.release(acct, jaxdp.LaplaceMechanism(EPS), conversions)
  spent_before = float(acct.spent_eps)

  def fit(table):
    x = adstock(jnp.asarray(spend, jnp.float32))
    params = {"base": jnp.zeros(CHANNELS), "beta": jnp.zeros(CHANNELS)}
    opt = optax.adam(0.05)

    def loss(p):
      return jnp.mean((p["base"] + x * p["beta"] - table) ** 2)

    @jax.jit
    def step(carry, _):
      p, s = carry
      g = jax.grad(loss)(p)
      u, s = opt.update(g, s, p)
      return (optax.apply_updates(p, u), s), None

    (params, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, length=3000)
    return params

  params = jaxdp.postprocess(fit, released)
  print("true beta  :", ", ".join(f"{b:.2f}" for b in true_beta))
  print(
    "fitted beta:",
    ", ".join(f"{float(b):.2f}" for b in params["beta"]),
    "(from the DP table)",
  )
  print(
    f"privacy spent: {spent_before:.2f} before fitting, "
    f"{float(acct.spent_eps):.2f} after (postprocessing is free)"
  )
  assert float(acct.spent_eps) == spent_before


if __name__ == "__main__":
  main()
