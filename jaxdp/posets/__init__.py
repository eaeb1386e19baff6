"""Finite partially ordered sets: the order relation, poset files, the NHIS survey
posets, random DAGs and the series-parallel decomposition.

A :class:`Poset` on ``d`` elements stores its order relation ``order[i][j] = True``
iff ``p_i <= p_j``; a data row is a *filter* (up-set). See
:class:`~jaxdp.posets.relation.Poset` for which way the order goes in survey terms.
"""

from jaxdp.posets import canonical, decomposition, formats, graphs, nhis
from jaxdp.posets.random_dags import random_dag, random_dags
from jaxdp.posets.relation import MAX_ENUMERATE_D, Poset

__all__ = [
  "MAX_ENUMERATE_D",
  "Poset",
  "canonical",
  "decomposition",
  "formats",
  "graphs",
  "nhis",
  "random_dag",
  "random_dags",
]
