"""jaxdp: exact, fast, batched differential-privacy noise for JAX.

``jax.random`` is a statistical, not a cryptographic, generator: see the README before
using jaxdp for a real release. The paper's experiments (studies, the published
insertion sampler, the command line) live in :mod:`jaxdp.experiments`, which this
package does not import.
"""

from jaxdp import calibration, exact, montecarlo, pld, random, renyi
from jaxdp.posets import decomposition
from jaxdp.prng import chacha, threefry
from jaxdp.accounting import (
    Accountant,
    BudgetExceededError,
    ReleaseRefusedError,
    StaleAccountantError,
    postprocess,
    raise_if_refused,
    release,
    release_parallel_unchecked,
    release_partitioned,
)
from jaxdp.samplers.balls import LpBall, PosetBall, enumerate_objects, exact_second_moment
from jaxdp.composition import (
    advanced_composition,
    group_cost,
    hypothesis_test_bound,
    optimal_composition_delta,
    optimal_composition_epsilon,
    zcdp_budget,
    zcdp_epsilon,
)
from jaxdp.mechanisms import (
    DiscreteGaussianMechanism,
    GaussianMechanism,
    KNormMechanism,
    LaplaceMechanism,
    Mechanism,
    PosetCountMechanism,
    ZCDPGaussianMechanism,
)
from jaxdp.planning import (DataDependentCostError, Plan, PlannedRelease, events_epsilon,
                            plan)
from jaxdp.posets import Poset, random_dag, random_dags
from jaxdp.session import Session, UnsafeQueryError

__version__ = "0.1.0"

__all__ = [
    "Accountant",
    "BudgetExceededError",
    "DataDependentCostError",
    "DiscreteGaussianMechanism",
    "GaussianMechanism",
    "KNormMechanism",
    "LaplaceMechanism",
    "LpBall",
    "Mechanism",
    "Plan",
    "PlannedRelease",
    "Poset",
    "PosetBall",
    "PosetCountMechanism",
    "ReleaseRefusedError",
    "Session",
    "StaleAccountantError",
    "UnsafeQueryError",
    "ZCDPGaussianMechanism",
    "advanced_composition",
    "calibration",
    "decomposition",
    "enumerate_objects",
    "events_epsilon",
    "exact_second_moment",
    "group_cost",
    "hypothesis_test_bound",
    "optimal_composition_delta",
    "optimal_composition_epsilon",
    "montecarlo",
    "plan",
    "pld",
    "postprocess",
    "raise_if_refused",
    "random",
    "random_dag",
    "random_dags",
    "renyi",
    "release",
    "release_parallel_unchecked",
    "release_partitioned",
    "threefry",
    "zcdp_budget",
    "zcdp_epsilon",
]
