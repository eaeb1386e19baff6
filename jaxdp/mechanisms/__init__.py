"""Differentially private mechanisms as pytrees.

Every mechanism follows the :class:`Mechanism` protocol:

* ``cost(group_size=1)`` -> ``(eps, delta)``: its privacy cost for groups of that
  size (Dwork, Lemma 2.8: an eps-DP mechanism is k eps-DP for groups of k; an
  (eps, delta)-DP one is (k eps, k e^((k-1) eps) delta)-DP).
* ``randomize(key, data)``: one noisy answer. It does not charge anything; use
  :func:`jaxdp.release` with an :class:`~jaxdp.Accountant` to spend a budget.
* ``part_statistics(rows, part, num_parts)``: the per-part statistics that
  :func:`jaxdp.release_partitioned` noises.

A mechanism is a pytree: its numbers (eps, delta, sensitivity) are leaves and its
structure (the ball, the poset, the noise kind, the invalid-row policy) is static.
So a mechanism can be a ``jit`` argument, a ``vmap`` input (one eps per replicate) or
a ``lax.scan`` carry, and ``LaplaceMechanism(eps)`` accepts a traced eps. Arguments are
validated when you build a mechanism; JAX rebuilds one from its leaves without that,
and a traced value cannot be checked then, so every mechanism also has
``valid(shape)``: an allowlist of the parameter ranges its sampler supports (a
normal float32 eps, sensitivity and noise scale; an exact sampler's scale, the
ratio rounded up, at most :func:`jaxdp.exact.max_scale` of the noise's dimension,
so a ratio of exactly :data:`jaxdp.exact.MAX_SCALE` is refused). A static
parameter out of range raises ValueError; a traced one makes ``randomize`` return
the invalid fill (NaN, or an integer output's minimum, never the statistic plus a
fill) and :func:`jaxdp.release` refuse the release, spending nothing. Never weaker noise.

Modules: :mod:`~jaxdp.mechanisms.base` (the protocol, pytree registration, the
allowlist, exact-option checks), :mod:`~jaxdp.mechanisms.statistics` (statistics and
per-part sums), one module per family (``laplace``, ``knorm``, ``gaussian``,
``elliptic``, ``discrete_gaussian``, ``poset_count``, ``poset_gaussian``, ``queries``:
sum, count and vote) and
:mod:`~jaxdp.mechanisms.publishable` (the allowlist of exact mechanisms a secure
accountant accepts: by exact class and validated fields, never by a caller-settable
``exact`` flag alone).

References:
  C. Dwork, "Differential privacy", ICALP 2006; C. Dwork, A. Roth, "The Algorithmic
  Foundations of Differential Privacy" (2014), Sections 2-3.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from jaxdp.mechanisms.base import Mechanism
from jaxdp.mechanisms.discrete_gaussian import DiscreteGaussianMechanism
from jaxdp.mechanisms.elliptic import (
  EllipticGaussianMechanism,
  EllipticZCDPGaussianMechanism,
)
from jaxdp.mechanisms.gaussian import GaussianMechanism, ZCDPGaussianMechanism
from jaxdp.mechanisms.knorm import KNormMechanism
from jaxdp.mechanisms.laplace import LaplaceMechanism
from jaxdp.mechanisms.poset_count import (
  COUNT_NOISES,
  EXACT_COUNT_NOISES,
  PosetCountMechanism,
)
from jaxdp.mechanisms.poset_gaussian import (
  GAUSSIAN_COUNT_NOISES,
  PosetCountGaussianMechanism,
)
from jaxdp.mechanisms.publishable import is_publishable, publishable_problem
from jaxdp.mechanisms.queries import (
  EXACT_QUERY_NOISES,
  QUERY_NOISES,
  CountQueryMechanism,
  QueryMechanism,
  SumQueryMechanism,
  VoteQueryMechanism,
)

__all__ = [
  "Mechanism",
  "LaplaceMechanism",
  "KNormMechanism",
  "GaussianMechanism",
  "EXACT_COUNT_NOISES",
  "ZCDPGaussianMechanism",
  "DiscreteGaussianMechanism",
  "EllipticGaussianMechanism",
  "EllipticZCDPGaussianMechanism",
  "GAUSSIAN_COUNT_NOISES",
  "PosetCountMechanism",
  "PosetCountGaussianMechanism",
  "COUNT_NOISES",
  "QueryMechanism",
  "SumQueryMechanism",
  "CountQueryMechanism",
  "VoteQueryMechanism",
  "QUERY_NOISES",
  "EXACT_QUERY_NOISES",
  "is_publishable",
  "publishable_problem",
]
