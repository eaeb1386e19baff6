"""Private counts of NHIS-shaped survey answers with each count mechanism.

Synthetic respondents answer the three NHIS sections (15 yes/no questions whose
answers obey "q2 may be yes only if q1 is yes" and so on). We release the vector
(respondents, yes-count per question) once per mechanism at the same eps, then
compare errors over many releases.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxdp

EPS = 1.0
N = 5_000


def synthetic_nhis(rng, n):
  """Rows that are filters of Poset.nhis(3): each answer needs its parent's yes."""
  poset = jaxdp.Poset.nhis(3)
  rows = np.zeros((n, poset.d), np.int8)
  for i, parent in enumerate(poset.parents):
    p_yes = 0.6 if parent < 0 else 0.5
    allowed = np.ones(n, bool) if parent < 0 else rows[:, parent] == 1
    rows[:, i] = allowed & (rng.random(n) < p_yes)
  assert all(poset.is_filter(r) for r in rows[:50])
  return poset, rows


def main():
  poset, data = synthetic_nhis(np.random.default_rng(0), N)
  truth = np.concatenate([[N], data.sum(0)])
  print(f"{N} respondents, d = {poset.d} questions; true counts: {truth.tolist()}\n")
  acct = jaxdp.Accountant.create(4 * EPS, key=jax.random.key(0))
  print(f"{'mechanism':>9} | one release (first 5 coordinates) | RMSE over 2000 releases")
  for noise in jaxdp.mechanisms.COUNT_NOISES:
    mech = jaxdp.PosetCountMechanism(poset, EPS, noise=noise)
    acct, out = jaxdp.release(acct, mech, data)
    # Postprocessing (free): error statistics from many independent draws of the
    # same mechanism on the same data, to show its accuracy.
    keys = jax.random.split(jax.random.key(1), 2000)
    many = jax.jit(jax.vmap(lambda k: mech.randomize(k, data)))(keys)
    rmse = float(jnp.sqrt(jnp.mean(jnp.sum((many - truth) ** 2, axis=1))))
    first = ", ".join(f"{v:.1f}" for v in np.asarray(out[:5]))
    print(f"{noise:>9} | [{first}] | {rmse:8.1f}")
  print(f"\nbudget spent: eps = {float(acct.spent_eps):.1f} (4 releases at eps {EPS})")


if __name__ == "__main__":
  main()
