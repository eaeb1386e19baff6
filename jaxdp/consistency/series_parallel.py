"""Exact batched isotonic regression on a series-parallel poset: clamps at junctions.

With ``n`` on top, the order of a series-parallel poset is series-parallel, built
from single nodes by parallel composition (no relation across) and series
composition (every node of the lower part below every node of the upper part). Its
isotonic regression follows the decomposition tree bottom-up. A parallel
composition leaves the parts' solutions alone. A series composition of a solved
lower part ``P`` below a solved upper part ``Q`` pools the values of ``P`` above
``s*`` with those of ``Q`` below it, for the one ``s*`` with

    sum_{i in Q} (s* - v_i)^+  =  sum_{i in P} (v_i - s*)^+,

that is, ``v <- min(v, s*)`` on ``P`` and ``v <- max(v, s*)`` on ``Q`` (``s*`` the
mean of the pooled values). Every level set ``{v > s}`` of the result is then a
maximum-weight upper set for the weights ``y - s`` (by induction over the tree:
upper sets of a series composition are those of ``Q`` and ``Q`` with an upper set
of ``P``), which characterises the isotonic regression. A series node of ``k``
children is a balanced tree of ``k - 1`` such junctions; junctions on disjoint
nodes run together, one round per height. ``s*`` is found exactly among the
values: the largest value ``t`` with ``h(t) <= 0`` (``h`` the difference above,
increasing) fixes the pooled set. Clamps are exact in floating point, so the
result satisfies every constraint exactly.

Multipliers: a junction's pooled excess ``v_i - s*`` flows from each node of ``P``
up to a maximal node of ``P`` along fixed upper covers, across the cover edges to
the minimal nodes of ``Q`` (in proportion to what arrives and what is needed), and
up to each node of ``Q`` short of ``s*`` along fixed lower covers, reversed. Every
node on those paths ends in the pooled block (values above ``s*`` in ``P``, below
it in ``Q``), so the flow uses tight edges only; summed over the junctions it
gives ``y - w = A^T lam`` and a certificate with a gap at rounding level.

References:
  R. E. Barlow, D. J. Bartholomew, J. M. Bremner, H. D. Brunk, "Statistical
  Inference under Order Restrictions", Wiley 1972 (level sets as maximum upper
  sets); J. Valdes, R. E. Tarjan, E. L. Lawler, "The recognition of series
  parallel digraphs", SIAM J. Comput. 11 (1982).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp._cache import value_cache
from jaxdp.consistency.certificate import Certificate, certify
from jaxdp.consistency.graph import ConstraintGraph
from jaxdp.posets.decomposition import decompose, prime_nodes
from jaxdp.posets.relation import Poset

__all__ = ["PAIRWISE_MAX", "SPPlan", "pairwise_size", "sp_isotonic", "sp_plan"]

CHUNK = 128  # vectors per step (the pairwise candidate tests are (M, M) per group)
PAIRWISE_MAX = 16  # group size up to which every value is tested as s*


class SPPlan(NamedTuple):
  """The static junction schedule of a series-parallel constraint graph.

  Attributes:
    rounds: per round, per bucket of equally padded groups, ``(index, side)``:
      ``(G, M)`` node indices (``dim`` pads) and 1 for ``P``, 2 for ``Q``, 0 a pad.
    paths: ``(K, 2)``: per edge of a path from a node of a junction's ``P`` to a
      maximal node of ``P`` (or from a minimal node of its ``Q``), the round-major
      index of the node (``round * dim + node``) and the edge.
    ends: per round-major node index, the round-major index of its path's end.
    cross: ``(X, 4)``: per cover edge across a junction, the round-major indices of
      its ends, its edge and its junction.
    junction: per round-major node index, its junction when it is in a ``P``, else
      the number of junctions (a slot never read).
  """

  rounds: tuple
  paths: np.ndarray
  ends: np.ndarray
  cross: np.ndarray
  junction: np.ndarray


@value_cache(maxsize=64)
def sp_plan(graph: ConstraintGraph) -> SPPlan | None:
  """The :class:`SPPlan` of ``graph``, or None when its order is not series-parallel."""
  dim = graph.dim
  root = decompose(Poset.from_edges(dim, list(zip(graph.lo, graph.hi))))
  if prime_nodes(root):
    return None
  junctions = []  # (round, P nodes, Q nodes)

  def solve(node) -> int:
    """The round after which ``node`` is solved."""
    done = [solve(c) for c in node.children]
    if node.kind != "series":
      return max(done, default=0)
    return fold(node.children, done)

  def fold(parts, done) -> int:
    if len(parts) == 1:
      return done[0]
    mid = len(parts) // 2
    r = 1 + max(fold(parts[:mid], done[:mid]), fold(parts[mid:], done[mid:]))
    low = [e for p in parts[:mid] for e in p.elements]
    high = [e for p in parts[mid:] for e in p.elements]
    junctions.append((r, low, high))
    return r

  count = solve(root)
  edge = {(a, b): e for e, (a, b) in enumerate(zip(graph.lo, graph.hi))}
  down = [[] for _ in range(dim)]
  for a, b in zip(graph.lo, graph.hi):
    down[b].append(a)
  rounds = []
  paths = []
  ends = np.arange(count * dim, dtype=np.int32)
  junction = np.full(count * dim, len(junctions), np.int32)
  cross = []
  for r in range(1, count + 1):
    groups = [(p, q) for rr, p, q in junctions if rr == r]
    rounds.append(_buckets(groups, dim))
  for j, (r, low, high) in enumerate(junctions):
    off = (r - 1) * dim
    p_set, q_set = set(low), set(high)
    tops = [i for i in low if not p_set.intersection(graph.up[i])]
    bottoms = [i for i in high if not q_set.intersection(down[i])]
    for side, nodes, step in ((low, low, graph.up), (high, high, down)):
      inside = set(side)
      for k in nodes:
        i = k
        while inside.intersection(step[i]):
          nxt = step[i][0]  # any cover of i inside the part stays inside it
          paths.append((off + k, edge[(i, nxt) if side is low else (nxt, i)]))
          i = nxt
        ends[off + k] = off + i
    junction[[off + i for i in low]] = j
    cross += [(off + m, off + b, edge[(m, b)], j) for m in tops for b in bottoms]
  paths = np.asarray(paths, np.int32).reshape(-1, 2)
  cross = np.asarray(cross, np.int32).reshape(-1, 4)
  for a in (paths, ends, cross, junction):
    a.setflags(write=False)
  return SPPlan(tuple(rounds), paths, ends, cross, junction)


def _buckets(groups, dim):
  """The groups of one round, padded to a few sizes (a power of two or 1.5 times
  one), as ``(index, side)`` arrays per size."""
  by_size = {}
  for p, q in groups:
    m = len(p) + len(q)
    size = 1 << max(0, (m - 1).bit_length())
    if m <= 3 * size // 4:
      size = 3 * size // 4
    by_size.setdefault(size, []).append((p, q))
  out = []
  for size, members in sorted(by_size.items()):
    index = np.full((len(members), size), dim, np.int32)
    side = np.zeros((len(members), size), np.int8)
    for g, (p, q) in enumerate(members):
      index[g, : len(p) + len(q)] = list(p) + list(q)
      side[g, : len(p)] = 1
      side[g, len(p) : len(p) + len(q)] = 2
    index.setflags(write=False)
    side.setflags(write=False)
    out.append((index, side))
  return tuple(out)


def sp_isotonic(
  y: jax.Array, graph: ConstraintGraph, tol: float
) -> tuple[jax.Array, jax.Array, Certificate]:
  """The isotonic regression of each row of ``y`` (``(B, dim)`` float) on a
  series-parallel graph, ``CHUNK`` rows at a time.

  Returns:
    ``(w, lam, certificate)``.

  Raises:
    ValueError: the order is not series-parallel.
  """
  plan = sp_plan(graph)
  if plan is None:
    raise ValueError("the series-parallel path needs a series-parallel poset.")
  b = y.shape[0]
  if b <= CHUNK:
    return _solve(y, graph, plan, tol)
  k = -(-b // CHUNK)
  pad = jnp.concatenate([y, jnp.broadcast_to(y[:1], (k * CHUNK - b, y.shape[1]))])
  out = jax.lax.map(
    lambda v: _solve(v, graph, plan, tol), pad.reshape(k, CHUNK, y.shape[1])
  )
  return jax.tree.map(lambda a: a.reshape((k * CHUNK,) + a.shape[2:])[:b], out)


def _solve(y, graph, plan, tol):
  b, dim = y.shape
  v = y
  pushed, pulled = [], []  # per round: v - new on P (>= 0), new - v on Q (>= 0)
  for buckets in plan.rounds:
    ext = jnp.concatenate([v, jnp.zeros((b, 1), v.dtype)], 1)
    parts = [v]
    for index, side in buckets:
      vv = ext[:, index]  # (B, G, M)
      in_p, in_q = jnp.asarray(side == 1), jnp.asarray(side == 2)
      kind = _kind(side)
      if kind == "top":
        new = _single_top(vv, in_p, in_q)
      elif kind == "bottom":  # the same, upside down
        new = -_single_top(-vv, in_q, in_p)
      else:
        new = _junction(vv, in_p, in_q)
      parts.append(new.reshape(b, -1))
    # a round's groups are disjoint: each node reads its group's clamp, or itself (one
    # gather, no scatter); a clamp only lowers P and raises Q, so the excesses are
    # the round's changes, by sign
    new_v = jnp.concatenate(parts, 1)[:, _sources(buckets, dim)]
    pushed.append(jnp.maximum(v - new_v, 0.0))
    pulled.append(jnp.maximum(new_v - v, 0.0))
    v = new_v
  lam = _multipliers(jnp.concatenate(pushed, 1), jnp.concatenate(pulled, 1), graph, plan)
  return v, lam, certify(y, v, lam, graph, tol)


def _sources(buckets, dim: int) -> np.ndarray:
  """Where each node's value after a round is, in ``[v, bucket 1's clamps flattened,
  ...]``: its group's clamp, or ``v`` for a node in no group."""
  src = np.arange(dim)
  offset = dim
  for index, side in buckets:
    flat, used = index.reshape(-1), side.reshape(-1) > 0
    src[flat[used]] = offset + np.nonzero(used)[0]
    offset += flat.size
  return src


def _kind(side: np.ndarray) -> str:
  """How a bucket's ``s*`` is found: ``"pairs"`` (every value tested) for small
  groups, else ``"top"`` / ``"bottom"`` (Newton) when one side is a single node in
  every group, else ``"pairs"``, in blocks of candidates."""
  if side.shape[1] > PAIRWISE_MAX:
    if np.all((side == 2).sum(1) == 1):
      return "top"
    if np.all((side == 1).sum(1) == 1):
      return "bottom"
  return "pairs"


def pairwise_size(plan: SPPlan) -> int:
  """The largest group of ``plan`` whose ``s*`` is found by testing every value
  (``M^2`` work per group), 0 when none."""
  sizes = [i.shape[1] for r in plan.rounds for i, s in r if _kind(s) == "pairs"]
  return max(sizes, default=0)


def _junction(vv, in_p, in_q):
  """The clamped values of each group (``(B, G, M)``; ``in_p``, ``in_q`` masks)."""
  m = vv.shape[-1]
  u = vv[..., None, :]  # the values; candidates s* in blocks of PAIRWISE_MAX

  def h_of(t):
    return jnp.sum(
      jnp.where(in_q[:, None, :], jnp.maximum(t[..., None] - u, 0.0), 0.0)
      - jnp.where(in_p[:, None, :], jnp.maximum(u - t[..., None], 0.0), 0.0),
      axis=-1,
    )

  if m <= PAIRWISE_MAX:
    h = h_of(vv)
  else:
    blocks = -(-m // PAIRWISE_MAX)
    t = jnp.pad(vv, [(0, 0)] * (vv.ndim - 1) + [(0, blocks * PAIRWISE_MAX - m)])
    t = jnp.moveaxis(t.reshape(t.shape[:-1] + (blocks, PAIRWISE_MAX)), -2, 0)
    h = jax.lax.map(h_of, t)  # (blocks, B, G, PAIRWISE_MAX): bounded memory
    h = jnp.moveaxis(h, 0, -2).reshape(vv.shape[:-1] + (-1,))[..., :m]
  valid = in_p | in_q
  top = jnp.max(jnp.where(valid & (h <= 0), vv, -jnp.inf), axis=-1, keepdims=True)
  pooled = (in_q & (vv <= top)) | (in_p & (vv > top))
  count = jnp.sum(pooled, axis=-1, keepdims=True)
  mean = jnp.sum(jnp.where(pooled, vv, 0.0), axis=-1, keepdims=True) / jnp.maximum(count, 1)
  s = jnp.where(count > 0, mean, top)
  return jnp.where(in_p, jnp.minimum(vv, s), jnp.where(in_q, jnp.maximum(vv, s), vv))


def _single_top(vv, in_p, in_q):
  """:func:`_junction` for groups whose ``Q`` is one node ``q``: Newton's method on
  ``h``, concave and increasing from ``s = v_q`` on, from the left: ``s <- mean(v_q,
  {v_i > s : i in P})`` until that set stops shrinking (``s`` never decreases, so
  at most ``M`` steps), then ``s`` is the pooled mean."""
  top = jnp.sum(jnp.where(in_q, vv, 0.0), axis=-1, keepdims=True)

  def step(state):
    s, count, _ = state
    above = in_p & (vv > s)
    new = jnp.sum(above, axis=-1, keepdims=True, dtype=jnp.int32)
    total = top + jnp.sum(jnp.where(above, vv, 0.0), axis=-1, keepdims=True)
    return jnp.maximum(s, total / (1.0 + new)), new, jnp.any(new != count)

  count = jnp.full(top.shape, -1, jnp.int32)
  s, _, _ = jax.lax.while_loop(lambda st: st[2], step, (top, count, jnp.array(True)))
  return jnp.where(in_p, jnp.minimum(vv, s), jnp.where(in_q, jnp.maximum(vv, s), vv))


def _multipliers(pushed, pulled, graph, plan):
  """``lam`` from the per-round excesses (``(B, rounds * dim)`` each)."""
  b = pushed.shape[0]
  lam = jnp.zeros((b, graph.num_edges), pushed.dtype)
  if len(plan.paths):
    node, edge = plan.paths.T
    lam = lam.at[:, edge].add(pushed[:, node] + pulled[:, node])
  if not len(plan.cross):
    return lam
  ends = jnp.asarray(plan.ends)
  out = jnp.zeros_like(pushed).at[:, ends].add(pushed)  # at the maximal nodes of P
  into = jnp.zeros_like(pulled).at[:, ends].add(pulled)  # at the minimal nodes of Q
  total = jnp.zeros((b, int(plan.junction.max()) + 1), pushed.dtype)
  total = total.at[:, jnp.asarray(plan.junction)].add(pushed)  # per junction
  top, bottom, edge, junction = plan.cross.T
  amount = total[:, junction]
  flow = out[:, top] * into[:, bottom] / jnp.where(amount > 0, amount, 1.0)
  return lam.at[:, edge].add(flow)
