"""The budgeted interactive curator of Dwork's Lemma 2.6.

Budget 1.0; three counting queries at eps 0.4 each. The first two are answered
(total 0.8); the third would take the total to 1.2 > 1.0 and is refused. The refusal
depends only on the epsilons asked for, so it reveals nothing about the data.
"""

import jax
import numpy as np

import jaxdp


def main():
  curator = jaxdp.Curator(np.arange(1000), eps_budget=1.0, key=jax.random.key(0))
  queries = [("v < 500", lambda v: v < 500), ("v < 100", lambda v: v < 100),
             ("v > 900", lambda v: v > 900)]
  for name, q in queries:
    answer = curator.count(q, 0.4)
    shown = "refused" if answer is None else f"{answer:.1f}"
    print(f"count({name}) at eps 0.4 -> {shown}   (spent {curator.spent:.1f} of 1.0)")
  assert answer is None


if __name__ == "__main__":
  main()
