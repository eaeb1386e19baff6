"""Private counts of NHIS-shaped survey answers with each count mechanism.

Synthetic respondents answer the three NHIS sections (15 yes/no questions whose
answers obey "q2 may be yes only if q1 is yes" and so on). We release the vector
(respondents, yes-count per question) once per mechanism at the same eps, then
compare errors over many releases.

  python examples/nhis_counts.py                 float noise (research, utility)
  python examples/nhis_counts.py --publishable   exact integer noise, ChaCha20 key

The publishable mode uses a secure accountant (a ChaCha20 key from the OS, exact
mechanisms only): each release is the integer counts plus the exact rounding of the
ideal noise, so it can be published.
"""

import dataclasses
import sys

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


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  if "--publishable" in argv:
    return publishable()
  poset, data = synthetic_nhis(np.random.default_rng(0), N)
  truth = np.concatenate([[N], data.sum(0)])
  print(f"{N} respondents, d = {poset.d} questions; true counts: {truth.tolist()}\n")
  acct = jaxdp.Accountant.create(4 * EPS, key=jax.random.key(0))
  print(f"{'mechanism':>9} | one release (first 5 coordinates) | RMSE over 2000 releases")
  for noise in jaxdp.mechanisms.COUNT_NOISES:
    mech = jaxdp.PosetCountMechanism(poset, EPS, noise=noise)
    acct, out = jaxdp.release(acct, mech, data)
    # Postprocessing (free): error statistics from many independent draws of the
    # same mechanism on the same data (one batched draw of 2000 noise vectors on the
    # statistic), to show its accuracy.
    stat = mech.statistic(data)
    many = jax.jit(mech.inner.randomize)(
      jax.random.key(1), jnp.broadcast_to(stat, (2000, *stat.shape))
    )
    rmse = float(jnp.sqrt(jnp.mean(jnp.sum((many - truth) ** 2, axis=1))))
    first = ", ".join(f"{v:.1f}" for v in np.asarray(out[:5]))
    print(f"{noise:>9} | [{first}] | {rmse:8.1f}")
  print(f"\nbudget spent: eps = {float(acct.spent_eps):.1f} (4 releases at eps {EPS})")


def publishable():
  poset, data = synthetic_nhis(np.random.default_rng(0), N)
  truth = np.concatenate([[N], data.sum(0)])
  print(f"{N} respondents; true counts: {truth.tolist()}\n")
  noises = jaxdp.mechanisms.EXACT_COUNT_NOISES
  acct = jaxdp.Accountant.create(len(noises) * EPS, secure=True)  # ChaCha20 key, OS
  print(
    f"{'mechanism':>9} | one publishable release (first 5) | RMSE exact vs float "
    "(500 draws)"
  )
  for noise in noises:
    mech = jaxdp.PosetCountMechanism(poset, EPS, noise=noise, exact=True)
    acct, out = jaxdp.release(acct, mech, data)
    out = jaxdp.raise_if_refused(acct, out)
    # Utility of the exact mechanism against the float one (postprocessing: error
    # statistics over many draws on the same data, with a study key).
    # One batched draw of 500 noise vectors on the same statistic (not a vmap over
    # keys: under vmap the exact sampler's rare host refinement would run always).
    rmse = {}
    for name, m in (("exact", mech), ("float", dataclasses.replace(mech, exact=False))):
      stat = m.statistic(data)
      many = jax.jit(m.inner.randomize)(
        jax.random.key(1), jnp.broadcast_to(stat, (500, *stat.shape))
      )
      rmse[name] = float(jnp.sqrt(jnp.mean(jnp.sum((many - truth) ** 2, axis=1))))
    print(
      f"{noise:>9} | {np.asarray(out[:5]).tolist()} (int32) | "
      f"{rmse['exact']:.1f} vs {rmse['float']:.1f}"
    )
  print(
    f"\nbudget spent: eps = {float(acct.spent_eps):.1f}; a float mechanism would "
    "be refused by this accountant."
  )


if __name__ == "__main__":
  main()
