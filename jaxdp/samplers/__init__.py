"""Exact uniform sampling of the poset ball: the balls, three samplers and a dispatcher.

The poset ball of a poset P on d elements is K = conv{+-(1, 1_F) : F a filter}, a
polytope in R^(d+1). It is tiled by equal-volume simplices, one per *object*
(A, ext(A), ext(B)): an ordered bipartition P = A + B and a linear extension of each
part. Object (A, a_1 < ... < a_k, b_1 < ... < b_l) has the simplex with vertices
(1, 1_F0), ..., (1, 1_Fk), -(1, 1_G0), ..., -(1, 1_Gl), where F_0 = {} and
F_i = F_(i-1) U up(a_(k-i+1)) (A added top down), likewise G from B. So a uniform
point of K is a uniformly random object plus Dirichlet(1, ..., 1) weights on the
vertices of its simplex; with E_0..E_D iid Exp(1), sum_i E_i v_i is that point times
an independent Gamma(D + 1) radius, which is exactly K-norm noise (up to 1/eps).

An object is represented by ``seq`` (the elements in the order they are added: A top
down, then B top down) and ``k = |A|``.

Three exact algorithms choose the object (:mod:`jaxdp.samplers.dispatch` picks one):

* ``general`` (any poset, d <= GENERAL_MAX_D, :mod:`jaxdp.samplers.general` and
  :mod:`jaxdp.samplers.general_points`): with e(S) the number of linear extensions
  of the subposet induced on S (a table over all 2^d subsets), A is drawn with
  probability e(A) e(P \\ A) / N(P) by descending a trie over the bits of A (the
  children's CDF per node, four bits at a time), then a uniform linear extension of
  each part by repeatedly taking a maximal x as the next top with probability
  e(S \\ x) / e(S), reading the counts of the maximal elements only.
* ``forest`` (forests, d <= FOREST_MAX_D, :mod:`jaxdp.samplers.forest`): the weight
  e(A) e(B) factorises over the tree by the hook-length formula, so a tree recursion
  over "how many A-elements lie in this subtree (and in the subtrees of its later
  siblings)" gives N(P) and lets A be drawn top down. Uniform linear extensions of
  both parts come from distinct random keys: top down, each element swaps in the
  smallest key of its part within its subtree, which leaves a uniformly random heap
  order (the hook-length law); the order of the keys is the extension. Points and
  K-norm noise come from the keys' values and two Gamma variates, without the order
  (:mod:`jaxdp.samplers.forest_points`).
* ``sp`` (series-parallel posets, d <= SP_MAX_D, :mod:`jaxdp.samplers.sp_tables` and
  :mod:`jaxdp.samplers.sp_kernel`): the size recursion down the series-parallel
  decomposition, with prime pieces of at most BLOCK_MAX_D elements drawn by the subset
  recursion (:mod:`jaxdp.samplers.subsets`).

Discrete choices compare float32 uniforms (multiples of 2^-23) with float32
conditional probabilities that were computed in float64, so each option of a choice
has its probability up to an absolute error below 2^-22: a small relative error for
the options that carry the mass, a large one for options rarer than about 2^-22.
The forest sampler's random keys carry the element's position in their low bits; a
tie of the random bits, which the position would break, has probability below 7.5e-6
for d <= 32 (one-word keys) and below d^2 2^-57 above (two-word keys). These float
samplers are for studies; publishable draws are :mod:`jaxdp.exact`'s, which have no
such error.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
  M. Hardt, K. Talwar, "On the geometry of differential privacy", STOC 2010.
"""

from jaxdp.samplers import (
  dispatch,
  exact_tables,
  forest,
  forest_points,
  general,
  general_points,
  sp_kernel,
  sp_tables,
)
from jaxdp.samplers.balls import (
  MAX_OBJECTS,
  LpBall,
  PosetBall,
  enumerate_objects,
  exact_second_moment,
  simplex_vertices,
)
from jaxdp.samplers.count_ball import CountBall
from jaxdp.samplers.dispatch import METHODS, num_objects, resolve_method
from jaxdp.samplers.forest import FOREST_MAX_D
from jaxdp.samplers.general import GENERAL_MAX_D
from jaxdp.samplers.norm_ball import MAX_QUERY_D, NormBall
from jaxdp.samplers.sp_tables import BLOCK_MAX_D, SP_MAX_D
from jaxdp.samplers.sum_ball import SumBall
from jaxdp.samplers.vote_ball import VoteBall

__all__ = [
  "BLOCK_MAX_D",
  "CountBall",
  "FOREST_MAX_D",
  "GENERAL_MAX_D",
  "LpBall",
  "MAX_OBJECTS",
  "MAX_QUERY_D",
  "METHODS",
  "NormBall",
  "PosetBall",
  "SP_MAX_D",
  "SumBall",
  "VoteBall",
  "dispatch",
  "enumerate_objects",
  "exact_second_moment",
  "exact_tables",
  "forest",
  "forest_points",
  "general",
  "general_points",
  "num_objects",
  "resolve_method",
  "simplex_vertices",
  "sp_kernel",
  "sp_tables",
]
