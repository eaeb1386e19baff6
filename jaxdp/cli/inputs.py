"""Posets named on the command line (``--poset``)."""

from __future__ import annotations

from pathlib import Path

import jax

from jaxdp import Poset
from jaxdp.cli.parser import BUILT_IN_POSETS, UsageError
from jaxdp.experiments.questionnaire import synthetic_questionnaire
from jaxdp.samplers.general import GENERAL_MAX_D

MAX_QUESTIONNAIRE_D = 512


def _sized_spec(src: str, kind: str, max_d: int):
  """``(d, seed)`` from ``KIND:D`` or ``KIND:D:SEED``, with 1 <= d <= max_d."""
  parts = src.split(":")
  try:
    if len(parts) > 3:
      raise ValueError
    d = int(parts[1])
    seed = int(parts[2]) if len(parts) > 2 else 0
  except (IndexError, ValueError):
    raise UsageError(f"--poset {src!r}: expected {kind}:D or {kind}:D:SEED") from None
  if not 1 <= d <= max_d:
    raise UsageError(f"--poset {src!r}: {kind} posets need 1 <= D <= {max_d}")
  if not -(2**31) <= seed < 2**31:
    raise UsageError(f"--poset {src!r}: SEED must be in [-2^31, 2^31)")
  return d, seed


def load_poset(src: str) -> Poset:
  """The poset ``--poset SRC`` names.

  Args:
    src: ``nhis1|nhis2|nhis3``, ``random:D[:SEED]`` (a random DAG's poset, D up to the
      general sampler's limit), ``questionnaire:D[:SEED]`` (a synthetic questionnaire)
      or a file :meth:`jaxdp.Poset.load` reads.

  Returns:
    The poset.

  Raises:
    UsageError: a malformed name, a missing or unreadable file, or an invalid poset.
  """
  if src in BUILT_IN_POSETS:
    return Poset.nhis(int(src[-1]))
  if src.startswith("random:"):
    d, seed = _sized_spec(src, "random", GENERAL_MAX_D)
    return Poset.random(jax.random.key(seed), d)
  if src.startswith("questionnaire:"):
    d, seed = _sized_spec(src, "questionnaire", MAX_QUESTIONNAIRE_D)
    return synthetic_questionnaire(seed, d)
  path = Path(src)
  if not path.exists():
    raise UsageError(
      f"--poset: no such file: {src} (a poset is nhis1|nhis2|nhis3, "
      "random:D[:SEED], questionnaire:D[:SEED], or a JSON/text file)"
    )
  if not path.is_file():
    raise UsageError(f"--poset: not a file: {src}")
  try:
    return Poset.load(path)
  except ValueError as e:
    raise UsageError(f"--poset: {e}") from None
