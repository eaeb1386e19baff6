"""``--query`` and ``--k`` of ``jaxdp release``: sum, count and vote queries."""

from __future__ import annotations

from jaxdp.samplers.norm_ball import MAX_QUERY_D as MAX_K

QUERIES = ("sum", "count", "vote")


def add_query_flags(p, integer_flag) -> None:
  """Adds ``--query {sum,count,vote}`` and ``--k K`` to the release parser."""
  p.add_argument(
    "--query",
    choices=QUERIES,
    default=None,
    help="release the column totals of a sum, count or vote query instead of poset "
    "counts (--data: a CSV of rows, one per person; sum: entries in {-1, 0, 1} with at "
    "most --k non-zero; count: 0/1 with at most --k ones; vote: each row a permutation "
    "of 0..d-1, Borda scores); exact integer noise (--noise ball, "
    "linf, l2 or laplace)",
  )
  p.add_argument(
    "--k",
    type=integer_flag(1, MAX_K),
    default=None,
    help="with --query sum or count: the most non-zero entries of one row",
  )


def add_advise_query_flags(p, integer_flag) -> None:
  """Adds ``--query``, ``--d`` and ``--k`` to the advise parser."""
  p.add_argument(
    "--query",
    choices=QUERIES,
    default=None,
    help="compare the noises of a sum, count or vote query (needs --d; --k for sum "
    "and count) instead of a poset's",
  )
  p.add_argument(
    "--d",
    type=integer_flag(1, MAX_K),
    default=None,
    help="with --query: the number of columns (boxes, candidates)",
  )
  p.add_argument(
    "--k",
    type=integer_flag(1, MAX_K),
    default=None,
    help="with --query sum or count: the most non-zero entries of one row",
  )
