"""The utility studies of Joseph, Ribero & Yu, run with the exact sampler.

The paper measures the poset ball by the ratio of its mean squared l_2 norm (root
coordinate dropped) to that of the d-dimensional l_inf ball, d/3: below 1, the poset
mechanism adds less noise than the l_inf baseline. Each study here reports that ratio
with its standard error, beside the ratio the published (non-uniform) insertion
sampler gives, and the end-to-end mean squared error of the count mechanisms.

References:
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025,
  Section 5 (Figures 2-4).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import montecarlo
from jaxdp import random as dprandom
from jaxdp._identity import FieldIdentity
from jaxdp.experiments import baselines
from jaxdp.mechanisms import COUNT_NOISES, PosetCountMechanism
from jaxdp.posets import Poset, random_dags
from jaxdp.reporting import simulate
from jaxdp.samplers.balls import LpBall

__all__ = [
  "norm_ratio",
  "insertion_norm_ratio",
  "mechanism_mse",
  "poset_study",
  "nhis_study",
  "random_by_dimension",
  "random_by_structure",
]


def norm_ratio(
  key,
  poset: Poset,
  num_samples: int,
  *,
  chunk_size: int = 1 << 20,
  devices=None,
  progress=None,
):
  """E||Z_(1:)||^2 / (d/3) for Z exactly uniform in the poset ball.

  Returns:
    ``(ratio, stderr)``.
  """
  chunk_size = min(chunk_size, _round_up(num_samples, 16))
  est = montecarlo.estimate(
    key,
    _PosetBallDraw(poset),
    _SquaredNorm(1, poset.d / 3.0),
    num_samples,
    chunk_size=chunk_size,
    devices=devices,
    progress=progress,
    label=f"{poset.name or 'poset'}: exact-sampler E||Z||^2 ratio",
  )
  return float(est.mean), float(est.stderr)


# Draws and statistics as frozen dataclasses: equal values hash equal, so repeated
# studies reuse montecarlo's compiled chunk function instead of compiling again. That
# cache is the process's: they compare their fields' types with their values
# (FieldIdentity), and a draw holds the mechanism's plain description, not the
# mechanism, so a forged field never shares an honest study's compiled function.
@dataclasses.dataclass(frozen=True, eq=False)
class _PosetBallDraw(FieldIdentity):
  poset: Poset

  def __call__(self, key, m):
    return dprandom.poset_ball(key, self.poset, (m,))


@dataclasses.dataclass(frozen=True, eq=False)
class _NoiseDraw(FieldIdentity):
  poset: Poset
  eps: float
  noise: str  # the count mechanism's noise; its inner mechanism draws

  def __call__(self, key, m):
    inner = PosetCountMechanism(self.poset, self.eps, noise=self.noise).inner
    return inner.randomize(key, jnp.zeros((m, self.poset.d + 1)))  # the noise itself


@dataclasses.dataclass(frozen=True, eq=False)
class _SquaredNorm(FieldIdentity):
  start: int  # first coordinate counted
  scale: float  # divided by

  def __call__(self, z):
    return jnp.sum(z[:, self.start :] ** 2, axis=1) / self.scale


def insertion_norm_ratio(seed: int | np.random.Generator, poset: Poset, num_samples: int):
  """The same ratio from the published insertion sampler (sequential numpy).

  Args:
    seed: a numpy seed or generator (the studies pass
      :func:`jaxdp.reporting.simulate.host_rng` of their key, so the draws follow it).
    poset: the poset.
    num_samples: draws.

  Returns:
    ``(ratio, stderr)``.
  """
  z = baselines.insertion_poset_ball(np.random.default_rng(seed), poset, num_samples)
  r = np.sum(z[:, 1:] ** 2, axis=1) / (poset.d / 3.0)
  return float(r.mean()), float(r.std(ddof=1) / math.sqrt(len(r)))


def exact_mse(poset: Poset, eps: float, noise: str, poset_sq_norm: float | None = None):
  """Exact E||noise||^2 (root included) of a count mechanism, where known.

  l_inf: (D+1)(D+2)/eps^2 * D/3; l_2 (sensitivity sqrt(D)): (D+1)(D+2)/eps^2 *
  D/(D+2) * D; Laplace (l_1 sensitivity D): D * 2 (D/eps)^2; poset:
  (D+1)(D+2)/eps^2 * E||Z||^2 given ``poset_sq_norm`` = E||Z||^2. D = d + 1.
  """
  dim = poset.d + 1
  scale = (dim + 1) * (dim + 2) / eps**2
  if noise == "linf":
    return scale * LpBall(dim, math.inf).expected_sq_norm()
  if noise == "l2":
    return scale * LpBall(dim, 2).expected_sq_norm() * dim
  if noise == "laplace":
    return dim * 2 * (dim / eps) ** 2
  return None if poset_sq_norm is None else scale * poset_sq_norm


def mechanism_mse(
  key,
  poset: Poset,
  eps: float,
  noises: Sequence[str],
  num_samples: int,
  *,
  devices=None,
  progress=None,
):
  """Monte Carlo E||M(X) - T(X)||^2 of each count mechanism (root included).

  Returns:
    ``{noise: (mse, stderr, exact_or_None)}``.
  """
  out = {}
  for i, noise in enumerate(noises):
    mech = PosetCountMechanism(poset, eps, noise=noise)  # checks eps and noise
    est = montecarlo.estimate(
      jax.random.fold_in(key, i),
      _NoiseDraw(poset, mech.eps, noise),
      _SquaredNorm(0, 1.0),
      num_samples,
      chunk_size=min(1 << 18, _round_up(num_samples, 16)),
      devices=devices,
      progress=progress,
      label=f"{poset.name or 'poset'}: MSE of {noise} noise at eps {eps:g}",
    )
    out[noise] = (float(est.mean), float(est.stderr), exact_mse(poset, eps, noise))
  return out


def poset_study(
  key,
  poset: Poset,
  *,
  num_samples: int = 1_000_000,
  insertion_samples: int = 20_000,
  eps: float = 1.0,
  noises: Sequence[str] = COUNT_NOISES,
  devices=None,
  progress=None,
):
  """Ratio (exact and insertion sampler) and mechanism MSEs for one poset.

  Returns:
    A dict row (JSON-serialisable).
  """
  k_ratio, k_mse, k_ins = jax.random.split(key, 3)
  ratio, se = norm_ratio(k_ratio, poset, num_samples, devices=devices, progress=progress)
  row = {
    "poset": poset.name or repr(poset),
    "d": poset.d,
    "depth": poset.depth,
    "cover_edges": poset.num_cover_edges,
    "exact_ratio": ratio,
    "exact_ratio_se": se,
    "samples": num_samples,
  }
  if insertion_samples:
    ins, ins_se = insertion_norm_ratio(simulate.host_rng(k_ins), poset, insertion_samples)
    row.update(
      insertion_ratio=ins,
      insertion_ratio_se=ins_se,
      insertion_samples=insertion_samples,
      difference_z=(ins - ratio) / math.hypot(se, ins_se),
    )
  if noises:
    mses = mechanism_mse(
      k_mse, poset, eps, noises, num_samples, devices=devices, progress=progress
    )
    row["eps"] = eps
    for noise, (mse, mse_se, exact) in mses.items():
      row[f"mse_{noise}"] = mse
      row[f"mse_{noise}_se"] = mse_se
      if exact is not None:
        row[f"mse_{noise}_exact"] = exact
  return row


def nhis_study(key, sections: Sequence[int] = (1, 2, 3), **kw):
  """:func:`poset_study` for the NHIS posets with 1, 2 and 3 sections (Figure 4)."""
  return [poset_study(jax.random.fold_in(key, s), Poset.nhis(s), **kw) for s in sections]


# ------------------------------------------------------------------ random posets
@jax.jit
def _ratio_moments(z):
  """Mean and second moment of ||Z_(1:)||^2 / (d/3) over uniform draws ``z``."""
  d = z.shape[-1] - 1
  r = jnp.sum(z[:, 1:] ** 2, axis=1) / (d / 3.0)
  return jnp.mean(r), jnp.mean(r * r)


def _random_poset_rows(key, d, num_posets, num_samples, insertion_samples):
  adj = random_dags(jax.random.fold_in(key, 0), d, num_posets)
  rows = []
  for i, g in enumerate(adj):
    edges = [(int(a), int(b)) for a, b in zip(*np.nonzero(g))]
    poset = Poset.from_edges(d, edges, name=f"random{d}-{i}")
    # the public sampler: its tables are data, so all posets of this d share one
    # compilation
    z = dprandom.poset_ball(
      jax.random.fold_in(key, i + 1), poset, (num_samples,), method="general"
    )
    m1, m2 = jax.device_get(_ratio_moments(z))
    m1, m2 = float(m1), float(m2)
    se = math.sqrt(max(m2 - m1 * m1, 0.0) / max(num_samples - 1, 1))
    row = {
      "d": d,
      "poset": i,
      "dag_edges": len(edges),
      "depth": poset.depth,
      "exact_ratio": m1,
      "exact_ratio_se": se,
    }
    if insertion_samples:
      row["insertion_ratio"], row["insertion_ratio_se"] = insertion_norm_ratio(
        simulate.host_rng(jax.random.fold_in(key, num_posets + 1 + i)),
        poset,
        insertion_samples,
      )
    rows.append(row)
  return rows


def random_by_dimension(
  key,
  dims: Sequence[int] = (4, 6, 8, 10, 12),
  *,
  posets_per_dim: int = 20,
  num_samples: int = 20_000,
  insertion_samples: int = 1_000,
):
  """Figure 2: the ratio for random posets (Melancon DAGs) by dimension.

  Returns:
    ``(summary_rows, per_poset_rows)``: per d, the mean over posets of the exact and
    insertion ratios with standard errors (over posets).
  """
  per = []
  for d in dims:
    per += _random_poset_rows(
      jax.random.fold_in(key, d), d, posets_per_dim, num_samples, insertion_samples
    )
  return _group(per, "d"), per


def random_by_structure(
  key,
  d: int = 10,
  *,
  num_posets: int = 5000,
  num_samples: int = 2_000,
  insertion_samples: int = 200,
  min_group: int = 100,
):
  """Figure 3: the ratio for ``num_posets`` random posets of fixed d, by depth and
  by number of DAG edges (groups with fewer than ``min_group`` posets are dropped,
  as in the paper).

  Returns:
    ``(by_depth, by_edges, per_poset_rows)``.
  """
  per = _random_poset_rows(key, d, num_posets, num_samples, insertion_samples)
  by_depth = [g for g in _group(per, "depth") if g["posets"] >= min_group]
  by_edges = [g for g in _group(per, "dag_edges") if g["posets"] >= min_group]
  return by_depth, by_edges, per


def _group(rows, field):
  out = []
  for value in sorted({r[field] for r in rows}):
    sel = [r for r in rows if r[field] == value]
    g = {field: value, "posets": len(sel)}
    for col in ("exact_ratio", "insertion_ratio"):
      vals = np.array([r[col] for r in sel if col in r])
      if vals.size:
        g[col] = float(vals.mean())
        g[col + "_se"] = (
          float(vals.std(ddof=1) / math.sqrt(len(vals))) if len(vals) > 1 else float("nan")
        )
    paired = np.array(
      [r["insertion_ratio"] - r["exact_ratio"] for r in sel if "insertion_ratio" in r]
    )
    if paired.size > 1:  # same posets, so the paired difference is the sharper test
      g["difference"] = float(paired.mean())
      g["difference_se"] = float(paired.std(ddof=1) / math.sqrt(paired.size))
    out.append(g)
  return out


def _round_up(n, m):
  return -(-n // m) * m
