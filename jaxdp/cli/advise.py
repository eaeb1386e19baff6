"""``jaxdp advise``: which noise to use for a poset's counts or a sum, count or vote
query's totals, and how large its error is.

Reads no data and spends no budget: the comparison is a function of the poset (or the
query's d and k), eps and delta (:func:`jaxdp.advise`).
"""

from __future__ import annotations

import json

import jax

from jaxdp import CountBall, SumBall, VoteBall
from jaxdp.cli.inputs import load_poset
from jaxdp.cli.parser import UsageError
from jaxdp.reporting import advise, default_counts


def query_ball(args):
  """The query ball ``--query``, ``--d`` and ``--k`` name, after checking that the
  flags go together.

  Raises:
    UsageError: naming the flags.
  """
  q = args.query
  if args.poset is not None:
    raise UsageError(f"--query {q} does not take --poset; drop one of the two")
  if args.d is None:
    raise UsageError(f"--query {q} needs --d: the number of columns")
  if q == "vote":
    if args.k is not None:
      raise UsageError("--query vote does not take --k (a vote ranks every candidate)")
    return VoteBall(args.d)
  if args.k is None:
    raise UsageError(f"--query {q} needs --k: the most non-zero entries of one row")
  return (SumBall if q == "sum" else CountBall)(args.d, args.k)


def run_advise(args) -> int:
  """Prints the comparison as a table, or as JSON with ``--json``."""
  key = jax.random.key(args.seed)
  if args.query is not None:
    result = advise(
      query_ball(args), args.eps, args.delta, key=key, num_samples=args.samples
    )
  else:
    if args.poset is None:
      raise UsageError(
        "advise needs --poset (a poset's counts) or --query (a query's totals)"
      )
    if args.d is not None or args.k is not None:
      raise UsageError("--d and --k are options of --query")
    poset = load_poset(args.poset)
    result = advise(
      poset,
      args.eps,
      args.delta,
      assumed_counts=default_counts(poset, args.respondents),
      key=key,
      num_samples=args.samples,
    )
  print(json.dumps(result.to_dict(), indent=2) if args.json else result)
  return 0
