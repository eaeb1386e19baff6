"""Group privacy for a household of 3 (Dwork, Lemma 2.8).

A survey is answered per person; a household of 3 shares it. With per-person eps-DP
queries, the household as a whole is protected only at 3 eps. To protect the
household at eps, calibrate each query at eps / 3, which the accountant does when
created with group_size=3: it charges every release 3 times its per-person eps.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxdp

EPS = 0.6


def main():
  rng = np.random.default_rng(0)
  smokers = rng.random(3_000) < 0.2  # 1,000 households of 3 people
  print(
    f"per-person eps = {EPS}: a household of 3 is protected at "
    f"{jaxdp.group_cost(EPS, 0.0, 3)[0]:.1f}"
  )

  # Protect households at EPS: per-person eps / 3, charged as a group of 3.
  per_person = EPS / 3
  acct = jaxdp.Accountant.create(EPS, group_size=3, key=jax.random.key(0))
  mech = jaxdp.LaplaceMechanism(per_person)
  acct, count = jaxdp.release(acct, mech, jnp.sum(smokers))
  print(
    f"calibrated: per-person eps {per_person:.2f}, charged "
    f"{float(acct.spent_eps):.2f} for the household (budget {EPS}); "
    f"released {float(count):.1f} (true {int(smokers.sum())})"
  )

  # An uncalibrated query at per-person EPS costs 3 EPS for households: refused
  # before any data is read.
  try:
    jaxdp.release(
      jaxdp.Accountant.create(EPS, group_size=3, key=jax.random.key(1)),
      jaxdp.LaplaceMechanism(EPS),
      jnp.sum(smokers),
    )
  except jaxdp.BudgetExceededError as e:
    print(f"uncalibrated query refused: {e}")


if __name__ == "__main__":
  main()
