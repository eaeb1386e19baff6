"""Two hospitals release statistics about overlapping patients (Dwork, Lemma 2.5).

Hospital 1 runs an eps1-DP count over its patients, hospital 2 an eps2-DP count over
its own. Viewed as one mechanism on the combined data, a patient treated at both is
protected at eps1 + eps2: composition holds across datasets for people present in
several. We track that patient's view with one accountant charged by both releases.
"""

import jax
import jax.numpy as jnp
import numpy as np

import jaxdp

EPS1, EPS2 = 0.5, 0.3


def main():
  rng = np.random.default_rng(0)
  patients = np.arange(10_000)
  hosp1 = rng.choice(patients, 6_000, replace=False)
  hosp2 = rng.choice(patients, 5_000, replace=False)
  both = np.intersect1d(hosp1, hosp2)
  diabetic = rng.random(len(patients)) < 0.1

  a1 = jaxdp.Accountant.create(1.0, key=jax.random.key(1))  # hospital 1's own budget
  a2 = jaxdp.Accountant.create(1.0, key=jax.random.key(2))  # hospital 2's own budget
  a1, c1 = jaxdp.release(a1, jaxdp.LaplaceMechanism(EPS1), jnp.sum(diabetic[hosp1]))
  a2, c2 = jaxdp.release(a2, jaxdp.LaplaceMechanism(EPS2), jnp.sum(diabetic[hosp2]))
  print(
    f"hospital 1: {int(diabetic[hosp1].sum())} diabetic, released {float(c1):.1f} "
    f"(eps {EPS1})"
  )
  print(
    f"hospital 2: {int(diabetic[hosp2].sum())} diabetic, released {float(c2):.1f} "
    f"(eps {EPS2})"
  )

  # A patient in both datasets: both releases depend on their record.
  patient_view = jaxdp.Accountant.create(EPS1 + EPS2, key=jax.random.key(3))
  for eps in (EPS1, EPS2):
    patient_view, _ = jaxdp.release(patient_view, jaxdp.LaplaceMechanism(eps), 0.0)
  total = float(patient_view.spent_eps)
  print(
    f"\n{len(both)} patients are in both hospitals; each is protected at "
    f"eps1 + eps2 = {total:.1f}."
  )
  power = jaxdp.hypothesis_test_bound(total, 0.05)
  print(
    f"Any test of one such patient's diagnosis at significance 0.05 has power at most "
    f"{power:.3f} (vs {jaxdp.hypothesis_test_bound(EPS1, 0.05):.3f} for a patient "
    "of hospital 1 only)."
  )


if __name__ == "__main__":
  main()
