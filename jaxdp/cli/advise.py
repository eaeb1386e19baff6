"""``jaxdp advise``: which noise to use for a poset's counts, and how large its error is.

Reads no data and spends no budget: the comparison is a function of the poset, eps and
delta (:func:`jaxdp.advise`).
"""

from __future__ import annotations

import json

import jax

from jaxdp.cli.inputs import load_poset
from jaxdp.reporting import advise, default_counts


def run_advise(args) -> int:
  """Prints the comparison as a table, or as JSON with ``--json``."""
  poset = load_poset(args.poset)
  result = advise(
    poset,
    args.eps,
    args.delta,
    assumed_counts=default_counts(poset, args.respondents),
    key=jax.random.key(args.seed),
    num_samples=args.samples,
  )
  print(json.dumps(result.to_dict(), indent=2) if args.json else result)
  return 0
