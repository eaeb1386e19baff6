"""Review of the release products: advice's Monte Carlo errors, against independent
replications (fixed keys, stated sizes and thresholds)."""

import jax
import numpy as np

import jaxdp

REPS = 40  # independent replications (fixed keys 0 .. REPS - 1)


def test_advice_total_stderr_matches_replications():
  """The raw total's standard error of a simulated poset ball covers the spread of
  the total over independent keys: the coordinates' squared errors come from the
  same draws and are correlated, so their standard errors do not add in quadrature.

  The empirical sd of REPS = 40 totals has relative sd about 1 / sqrt(78) = 0.11;
  a reported standard error below 0.7 of it is more than 2.7 of those below.
  """
  poset = jaxdp.Poset.nhis(2)  # 11 questions: too many simplices to enumerate
  totals, reported = [], []
  for seed in range(REPS):
    advice = jaxdp.advise(
      poset, 1.0, consistency=False, num_samples=200, key=jax.random.key(seed)
    )
    option = advice.option("poset")
    assert option.method.startswith("Monte Carlo")
    totals.append(option.total)
    reported.append(option.total_stderr)
  empirical = float(np.std(totals, ddof=1))
  assert float(np.median(reported)) >= 0.7 * empirical, (np.median(reported), empirical)
