"""The flags of ``jaxdp advise`` and the error-bar flags of ``jaxdp release``.

The flag types (``number_flag``, ``integer_flag``) come from :mod:`jaxdp.cli.parser`,
which calls these functions while it builds the parser.
"""

from __future__ import annotations

import argparse

from jaxdp.cli.query_flags import add_advise_query_flags

MIN_LEVEL, MAX_LEVEL = 0.5, 0.9999
MAX_ERROR_SAMPLES = 10**7


def add(sub, release, number_flag, integer_flag, eps, seed, poset_help, devices):
  """The release flags below on ``release``, and the ``advise`` command on ``sub``
  (with the hidden ``--devices`` every command has)."""
  add_release_flags(release, number_flag, integer_flag)
  p = add_advise_parser(
    sub,
    eps=eps,
    seed=seed,
    poset_help=poset_help,
    number_flag=number_flag,
    integer_flag=integer_flag,
  )
  p.add_argument("--devices", type=devices, default=None, help=argparse.SUPPRESS)


def add_release_flags(p, number_flag, integer_flag):
  """``--level``, ``--consistent`` and ``--error-samples`` of ``jaxdp release``."""
  p.add_argument(
    "--level",
    type=number_flag(MIN_LEVEL, MAX_LEVEL),
    default=0.95,
    help=f"level of each count's interval, {MIN_LEVEL:g} to {MAX_LEVEL:g}",
  )
  p.add_argument(
    "--consistent",
    action="store_true",
    help="also publish the order-consistent counts (jaxdp.consistent, integers) with "
    "approximate parametric-bootstrap intervals (postprocessing: costs nothing)",
  )
  p.add_argument(
    "--error-samples",
    type=integer_flag(1000, MAX_ERROR_SAMPLES),
    default=20_000,
    help="simulated noise vectors for Monte Carlo intervals (poset ball) and the "
    "bootstrap, 1,000 to 10^7",
  )


def add_advise_parser(sub, *, eps, seed, poset_help, number_flag, integer_flag):
  """The ``jaxdp advise`` command."""
  p = sub.add_parser(
    "advise",
    help="which mechanism to use: expected error of each noise on a poset",
    description="Compares the expected squared error (total and per count) of the "
    "poset ball, the l_inf and l_2 balls, Laplace and, with --delta > 0, Gaussian "
    "noise for a release of POSET's counts at --eps, exact where a closed form exists, "
    "and the error after the order-consistent projection (Monte Carlo at assumed true "
    "counts). Reads no data; costs nothing.",
  )
  p.add_argument("--poset", default=None, help="required unless --query: " + poset_help)
  add_advise_query_flags(p, integer_flag)
  p.add_argument("--eps", type=eps, required=True, help="privacy parameter, 1e-06 to 1000")
  p.add_argument(
    "--delta",
    type=number_flag(0.0, 0.5),
    default=0.0,
    help="0 (pure DP) or the delta that Gaussian noise may use, 0 to 0.5",
  )
  p.add_argument(
    "--respondents",
    type=integer_flag(1, 10**12),
    default=10_000,
    help="1 to 10^12: the respondents the consistency simulation assumes (each "
    "question yes for half of those eligible)",
  )
  p.add_argument(
    "--samples",
    type=integer_flag(100, MAX_ERROR_SAMPLES),
    default=None,
    help="simulated releases per mechanism, 100 to 10^7 (default: 4,000, fewer for "
    "long questionnaires: 870 for 300 questions)",
  )
  p.add_argument("--seed", type=seed, default=0, help="simulation seed, -2^31 to 2^31 - 1")
  p.add_argument("--json", action="store_true", help="print JSON instead of a table")
  return p
