"""jaxdp: exact, fast, batched differential-privacy noise for JAX.

``jax.random`` is a statistical, not a cryptographic, generator: read
``docs/guides/publishing.md`` before using jaxdp for a real release. The paper's
experiments (studies, the published insertion sampler) live in
:mod:`jaxdp.experiments` and the command line in :mod:`jaxdp.cli`; this package
imports neither.
"""

from jaxdp import (
  accounting,
  composition,
  consistency,
  exact,
  ledger,
  mechanisms,
  montecarlo,
  posets,
  prng,
  random,
  samplers,
  session,
)
from jaxdp._version import __version__  # noqa: F401 (the package version)
from jaxdp.accounting import (
  Accountant,
  AdvancedComposition,
  BasicComposition,
  BudgetExceededError,
  CompositionRule,
  DataDependentCostError,
  Plan,
  PlannedComposition,
  PlannedRelease,
  ReleaseRefusedError,
  RenyiFilter,
  StaleAccountantError,
  ZCDPFilter,
  events_epsilon,
  plan,
  postprocess,
  raise_if_refused,
  release,
  release_parallel_unchecked,
  release_partitioned,
)
from jaxdp.composition import (
  advanced_composition,
  calibration,
  group_cost,
  hypothesis_test_bound,
  optimal_composition_delta,
  optimal_composition_epsilon,
  pld,
  renyi,
  zcdp_budget,
  zcdp_epsilon,
)
from jaxdp.consistency import consistent
from jaxdp.ledger import Ledger
from jaxdp.mechanisms import (
  DiscreteGaussianMechanism,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  Mechanism,
  PosetCountMechanism,
  ZCDPGaussianMechanism,
)
from jaxdp.posets import Poset, decomposition, random_dag, random_dags
from jaxdp.prng import chacha, threefry
from jaxdp.samplers.balls import LpBall, PosetBall, enumerate_objects, exact_second_moment
from jaxdp.session import Session, UnsafeQueryError

__all__ = [
  "Accountant",
  "AdvancedComposition",
  "BasicComposition",
  "BudgetExceededError",
  "CompositionRule",
  "DataDependentCostError",
  "DiscreteGaussianMechanism",
  "GaussianMechanism",
  "KNormMechanism",
  "LaplaceMechanism",
  "Ledger",
  "LpBall",
  "Mechanism",
  "Plan",
  "PlannedComposition",
  "PlannedRelease",
  "Poset",
  "PosetBall",
  "PosetCountMechanism",
  "ReleaseRefusedError",
  "RenyiFilter",
  "Session",
  "StaleAccountantError",
  "UnsafeQueryError",
  "ZCDPFilter",
  "ZCDPGaussianMechanism",
  "accounting",
  "advanced_composition",
  "calibration",
  "chacha",
  "composition",
  "consistency",
  "consistent",
  "decomposition",
  "enumerate_objects",
  "events_epsilon",
  "exact",
  "exact_second_moment",
  "group_cost",
  "hypothesis_test_bound",
  "ledger",
  "mechanisms",
  "montecarlo",
  "optimal_composition_delta",
  "optimal_composition_epsilon",
  "plan",
  "pld",
  "posets",
  "postprocess",
  "prng",
  "raise_if_refused",
  "random",
  "random_dag",
  "random_dags",
  "release",
  "release_parallel_unchecked",
  "release_partitioned",
  "renyi",
  "samplers",
  "session",
  "threefry",
  "zcdp_budget",
  "zcdp_epsilon",
]
