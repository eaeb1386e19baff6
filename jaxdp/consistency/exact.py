"""The exact host algorithm: isotonic regression on a DAG by minimum-cut partitioning.

The least-squares isotonic regression is constant on blocks, each the mean of ``y``
over the block. The partitioning algorithm splits a candidate block ``S`` of mean
``m`` at the upper set ``U`` of ``S`` (closed under the edges inside ``S``) that
maximises ``sum_{i in U} (y_i - m)``: a maximum-weight closure, found by one maximum
flow. When no upper set has positive weight, ``S`` is a block of the solution and
the maximum flow on its edges is the block's Lagrange multipliers (the KKT
certificate); otherwise ``U`` and ``S \\ U`` are solved separately (the solution on
``U`` lies above that on ``S \\ U``). It runs in float64 on the host, one vector at a
time: the path for a single release.

References:
  R. E. Barlow, D. J. Bartholomew, J. M. Bremner, H. D. Brunk, "Statistical
  Inference under Order Restrictions", Wiley 1972 (block means, Section 1.3).
  W. L. Maxwell, J. A. Muckstadt, "Establishing consistent and realistic reorder
  intervals in production-distribution systems", Oper. Res. 33 (1985).
  D. S. Hochbaum, M. Queyranne, "Minimum cut procedures for the isotonic
  regression problem" (partitioning), 2003; J. Spouge, H. Wan, W. J. Wilbur, "Least
  squares isotonic regression in two dimensions", J. Optim. Theory Appl. 117 (2003).
"""

from __future__ import annotations

import collections
import math

import numpy as np

from jaxdp.consistency.graph import ConstraintGraph

__all__ = ["isotonic_host"]


def isotonic_host(y: np.ndarray, graph: ConstraintGraph) -> tuple[np.ndarray, np.ndarray]:
  """The isotonic regression ``w`` of one vector on ``graph`` and its multipliers.

  Args:
    y: a finite float64 vector of length ``graph.dim``.
    graph: the constraint graph.

  Returns:
    ``(w, lam)``: ``w`` minimises ``||w - y||`` subject to ``w_lo <= w_hi`` on every
    edge (no lower bound: clip at 0 afterwards); ``lam >= 0`` has one multiplier per
    edge with ``y - w = A^T lam`` up to rounding.
  """
  y = np.asarray(y, np.float64)
  w = np.empty_like(y)
  lam = np.zeros(graph.num_edges)
  scale = 1.0 + float(np.max(np.abs(y)))
  stack = [list(range(graph.dim))]
  while stack:
    nodes = stack.pop()
    m = math.fsum(y[nodes]) / len(nodes)
    weight = {i: float(y[i] - m) for i in nodes}
    upper, flows = _max_closure(nodes, weight, graph, 1e-12 * scale * len(nodes))
    if upper is None:
      w[nodes] = m
      for e, f in flows.items():
        lam[e] = f
    else:
      stack.append(upper)
      stack.append([i for i in nodes if i not in set(upper)])
  return w, lam


def _max_closure(nodes, weight, graph, tol):
  """The upper set of positive weight (``(U, None)``), or ``(None, flows)`` when none
  has weight above ``tol``: ``flows[e]`` is the maximum flow on each edge inside."""
  inside = set(nodes)
  edges = [
    e for e, (a, b) in enumerate(zip(graph.lo, graph.hi)) if a in inside and b in inside
  ]
  if not edges:  # no constraint inside: the positive nodes split off
    upper = [v for v in nodes if weight[v] > 0]
    gain = math.fsum(weight[v] for v in upper)
    return (upper, None) if upper and len(upper) < len(nodes) and gain > tol else (None, {})
  net = _FlowNetwork(len(nodes) + 2)
  index = {v: k for k, v in enumerate(nodes)}
  source, sink = len(nodes), len(nodes) + 1
  for v in nodes:
    if weight[v] > 0:
      net.add(source, index[v], weight[v])
    elif weight[v] < 0:
      net.add(index[v], sink, -weight[v])
  arc_of = {e: net.add(index[graph.lo[e]], index[graph.hi[e]], math.inf) for e in edges}
  net.max_flow(source, sink, tol * 1e-3)
  reach = net.reachable(source, tol * 1e-3)
  upper = [v for v in nodes if index[v] in reach]
  gain = math.fsum(weight[v] for v in upper)
  if upper and len(upper) < len(nodes) and gain > tol:
    return upper, None
  return None, {e: net.flow(arc) for e, arc in arc_of.items()}


class _FlowNetwork:
  """Dinic's maximum flow on float capacities (residual graph as arc lists)."""

  def __init__(self, n):
    self.n = n
    self.head = [[] for _ in range(n)]
    self.to, self.cap, self.cap0 = [], [], []

  def add(self, a, b, c):
    arc = len(self.to)
    self.to += [b, a]
    self.cap += [c, 0.0]
    self.cap0 += [c, 0.0]
    self.head[a].append(arc)
    self.head[b].append(arc + 1)
    return arc

  def flow(self, arc):
    return self.cap[arc + 1]  # the reverse arc's residual is the flow sent

  def _levels(self, s, t, eps):
    level = [-1] * self.n
    level[s] = 0
    queue = collections.deque([s])
    while queue:
      u = queue.popleft()
      for arc in self.head[u]:
        v = self.to[arc]
        if level[v] < 0 and self.cap[arc] > eps:
          level[v] = level[u] + 1
          queue.append(v)
    return level if level[t] >= 0 else None

  def max_flow(self, s, t, eps):
    while (level := self._levels(s, t, eps)) is not None:
      it = [0] * self.n
      while (pushed := self._push(s, t, math.inf, level, it, eps)) > eps:
        del pushed

  def _push(self, s, t, limit, level, it, eps):
    # iterative DFS along level-increasing arcs; returns the flow sent on one path
    path, u = [], s
    while True:
      if u == t:
        f = min([limit] + [self.cap[a] for a in path])
        for a in path:
          self.cap[a] -= f
          self.cap[a ^ 1] += f
        return f
      arcs = self.head[u]
      while it[u] < len(arcs):
        a = arcs[it[u]]
        v = self.to[a]
        if self.cap[a] > eps and level[v] == level[u] + 1:
          break
        it[u] += 1
      else:
        if not path:
          return 0.0
        level[u] = -1  # dead end: never visit again in this phase
        a = path.pop()
        u = self.to[a ^ 1]
        it[u] += 1
        continue
      path.append(arcs[it[u]])
      u = self.to[arcs[it[u]]]

  def reachable(self, s, eps):
    seen = {s}
    queue = collections.deque([s])
    while queue:
      u = queue.popleft()
      for arc in self.head[u]:
        v = self.to[arc]
        if v not in seen and self.cap[arc] > eps:
          seen.add(v)
          queue.append(v)
    return seen
