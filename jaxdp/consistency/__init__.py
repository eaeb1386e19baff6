"""Order-consistent poset counts: the Euclidean projection of a noisy count vector
onto the counts a dataset can have (isotonic regression on the poset), with a
certificate of its accuracy.

Modules: :mod:`~jaxdp.consistency.graph` (the constraint graph of a poset),
:mod:`~jaxdp.consistency.exact` (the exact host algorithm),
:mod:`~jaxdp.consistency.chain` and :mod:`~jaxdp.consistency.tree` (exact batched
pool-adjacent-violators on chains and forests),
:mod:`~jaxdp.consistency.series_parallel` (exact batched junction clamps on
series-parallel posets),
:mod:`~jaxdp.consistency.solver` (the batched jitted solver, any poset),
:mod:`~jaxdp.consistency.certificate` (feasibility and duality gap) and
:mod:`~jaxdp.consistency.project` (:func:`consistent`). The design note is
``docs/design/consistency.md``.
"""

from jaxdp.consistency import (
  certificate,
  chain,
  exact,
  graph,
  project,
  series_parallel,
  solver,
  tree,
)
from jaxdp.consistency.certificate import Certificate
from jaxdp.consistency.graph import ConstraintGraph, constraint_graph
from jaxdp.consistency.project import (
  METHODS,
  check_integer_range,
  consistent,
  default_tol,
  integer_limit,
)

__all__ = [
  "METHODS",
  "Certificate",
  "ConstraintGraph",
  "certificate",
  "chain",
  "check_integer_range",
  "consistent",
  "constraint_graph",
  "default_tol",
  "exact",
  "graph",
  "integer_limit",
  "project",
  "series_parallel",
  "solver",
  "tree",
]
