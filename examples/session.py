"""An untrusted analyst's session: the budgeted interactive curator of Dwork's Lemma 2.6.

The session holds the data and the budget (1.0); the analyst only sends queries.
Three counting queries at eps 0.4 each: the first two are answered (total 0.8); the
third would take the total to 1.2 > 1.0 and is refused. The refusal depends only on
the epsilons asked for, so it reveals nothing about the data. A histogram by a
row-wise bin costs its eps once (the bins are disjoint by construction), and a query
that tries to print rows to the host is refused before it runs.
"""

import jax
import numpy as np

import jaxdp


def main():
  ages = np.random.default_rng(0).integers(18, 90, size=1000)
  session = jaxdp.Session(ages, eps_budget=1.0)  # key from the OS
  queries = [
    ("age < 40", lambda v: v < 40),
    ("age < 30", lambda v: v < 30),
    ("age > 80", lambda v: v > 80),
  ]
  for name, q in queries:
    try:
      shown = f"{session.count(q, 0.4):.1f}"
    except jaxdp.ReleaseRefusedError:
      shown = "refused"
    print(f"count({name}) at eps 0.4 -> {shown}   (spent {session.spent:.2f} of 1.0)")
  assert shown == "refused"

  decades = jaxdp.Session(ages, eps_budget=1.0)
  hist = decades.histogram(lambda v: v // 10 - 1, num_bins=8, eps=0.5)
  print("ages by decade (18-19 in bin 0), eps 0.5 for all bins:", np.round(hist, 1))

  def leaky(v):
    jax.debug.print("{}", v)
    return v > 50

  try:
    decades.count(leaky, 0.1)
  except jaxdp.UnsafeQueryError as e:
    print("refused a leaky query:", str(e).split(":")[0])
  print(
    f"spent {decades.spent:.2f} of 1.0; answered {decades.answered}, "
    f"refused {decades.refusals}"
  )


if __name__ == "__main__":
  main()
