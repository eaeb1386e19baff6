"""K-norm noise for the sum, count and vote queries: samples per second of jaxdp's
samplers side by side with the published reference code, and the squared-error table
against the l_1, l_inf, l_2 and Gaussian baselines.

  python benchmarks/knorm_family.py [--out DIR] [--quick] [--reference PATH]
      [--n 1000000] [--ds 10,50,100] [--ref-calls 300]

Speed rows: K-norm noise (``jaxdp.random.knorm``, eps = 1) and uniform points
(``jaxdp.random.sum_ball`` / ``count_ball`` / ``vote_ball``) of the sum and count
balls (k in 1, 5 and d // 2) and the vote ball at each d, as samples per second of a
jit-compiled call of ``--n`` samples (best of ``--repeats`` calls after a warm-up,
blocked until ready); then K-norm noise of the l_1, l_inf and l_2 balls at d = 50, the
floors. The reference code of Joseph & Yu (``k_norm/`` of google-research: one sample
per Python call from numpy's global generator; its count mechanism loops inside one
call) is imported from ``--reference`` (the folder holding its ``k_norm`` package, e.g.
a checkout of google-research; default: the ``KNORM_REFERENCE`` environment
variable), its commit recorded (git's, or ``--reference-commit``), and timed on
``--ref-calls`` samples in the same run; "x reference" is the ratio of the two
rates. Without ``--reference`` (or when its import fails) the reference rows say
"not run".

The squared-error table is exact where a closed form exists: E||noise||_2^2 of K-norm
noise is (d + 1)(d + 2) / eps^2 E||Z||_2^2 with Z uniform in the ball (the Gamma(d + 1)
radius' second moment), from the ball's ``expected_sq_norm`` (a Monte Carlo estimate
of jaxdp's uniform points, labelled as such with its standard error, for a ball that
has none). The baselines are K-norm noise of the l_1 ball (i.i.d. Laplace), the l_inf
and the l_2 ball scaled by the query's sensitivity in that norm (:func:`sensitivities`),
and at (eps, delta) Gaussian noise: spherical (the analytic calibration of
``jaxdp.GaussianMechanism`` on the l_2 sensitivity) and elliptic (where jaxdp has
``EllipticGaussianMechanism``). "reference MC" is the mean squared norm of the
reference code's noise samples from the speed run, with its standard error.
Writes <out>/knorm_family.json and .md, and the two tables alone as
knorm_family_speed.md and knorm_family_error.md (the K-norm guide includes them).

References:
  M. Joseph, A. Yu, "Some constructions of private, efficient, and optimal K-norm and
  elliptic Gaussian noise", COLT 2024.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, machine, write_results
from folders import add_out

import jaxdp
from jaxdp import CountBall, LpBall, SumBall, VoteBall

QUERIES = ("sum", "count", "vote")
NOT_RUN = "not run"


def sizes(ds, ks=(1, 5), half=True, queries=QUERIES) -> list[tuple[str, int, int | None]]:
  """The (query, d, k) rows: sum and count with k in ``ks`` and (with ``half``)
  d // 2, those <= d; then vote (k None); for each d, of the ``queries`` named."""
  out = []
  for d in ds:
    for query in ("sum", "count"):
      kd = {*ks, max(d // 2, 1)} if half else set(ks)
      out += [(query, d, k) for k in sorted(kd) if k <= d and query in queries]
    out += [("vote", d, None)] if "vote" in queries else []
  return out


def ball(query: str, d: int, k: int | None):
  """The query's optimal K-norm ball (its sensitivity space)."""
  if query == "sum":
    return SumBall(d, k)
  if query == "count":
    return CountBall(d, k)
  if query == "vote":
    return VoteBall(d)
  raise ValueError(f"query must be one of {QUERIES}; got {query!r}.")


def sensitivities(query: str, d: int, k: int | None) -> dict:
  """The query's l_1, l_inf and l_2 sensitivities: the largest norm of a change one
  person makes (a vertex of its ball): k, 1, sqrt(k) for sum and count (at most k
  entries of size at most 1); for vote a permutation of the Borda scores 0..d-1:
  d(d-1)/2, d-1, sqrt((d-1)d(2d-1)/6)."""
  if query in ("sum", "count"):
    return {"l1": float(k), "linf": 1.0, "l2": math.sqrt(k)}
  if query == "vote":
    return {
      "l1": d * (d - 1) / 2,
      "linf": float(d - 1),
      "l2": math.sqrt((d - 1) * d * (2 * d - 1) / 6),
    }
  raise ValueError(f"query must be one of {QUERIES}; got {query!r}.")


def uniform_points(key, query, d, k, n):
  """``(n, d)`` uniform points of the query's ball from jaxdp's public samplers."""
  if query == "sum":
    return jaxdp.random.sum_ball(key, d, k, (n,))
  if query == "count":
    return jaxdp.random.count_ball(key, d, k, (n,))
  return jaxdp.random.vote_ball(key, d, (n,))


def ball_sq_norm(query, d, k, mc_n, key) -> tuple[float, float | None]:
  """E||Z||_2^2 for Z uniform in the ball and its standard error: exact (error None)
  from ``expected_sq_norm``, else a Monte Carlo mean of ``mc_n`` uniform points."""
  try:
    return float(ball(query, d, k).expected_sq_norm()), None
  except NotImplementedError:
    pass
  z = uniform_points(key, query, d, k, mc_n)
  sq = np.asarray(jax.numpy.sum(jax.numpy.square(z), axis=-1), np.float64)
  return float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(mc_n))


def elliptic_sq_error(query, d, k, eps, delta) -> float | None:
  """E||noise||_2^2 of jaxdp's elliptic Gaussian noise N(0, sigma^2 A) for the
  query's ball at (eps, delta): sigma^2 tr(A); None where jaxdp has no
  ``EllipticGaussianMechanism`` or it takes no such ball."""
  cls = getattr(jaxdp, "EllipticGaussianMechanism", None)
  if cls is None:
    return None
  try:
    mech = cls(ball(query, d, k), eps, delta)
    return float(mech.sigma) ** 2 * float(mech.ellipse.trace)
  except (TypeError, ValueError, AttributeError, NotImplementedError):
    return None


def baselines(query, d, k, eps, delta) -> dict:
  """E||noise||_2^2 of the baselines for one query: K-norm noise of the l_1 ball
  (i.i.d. Laplace), l_inf and l_2 balls scaled by the query's sensitivity in that
  norm (exact: (d + 1)(d + 2) / eps^2 sensitivity^2 E||Z||^2), spherical Gaussian
  noise at (eps, delta) and elliptic Gaussian noise (None where jaxdp has none)."""
  s = sensitivities(query, d, k)
  gamma2 = (d + 1) * (d + 2) / eps**2  # E[R^2], R ~ Gamma(d + 1, scale 1 / eps)
  out = {
    name: gamma2 * s[name] ** 2 * LpBall(d, p).expected_sq_norm()
    for name, p in (("l1", 1), ("linf", math.inf), ("l2", 2))
  }
  sigma = jaxdp.GaussianMechanism(eps, delta, s["l2"], calibration="analytic").sigma
  out["gaussian"] = d * sigma**2
  out["elliptic"] = elliptic_sq_error(query, d, k, eps, delta)
  out["elliptic_x_gaussian"] = (
    None if out["elliptic"] is None else out["elliptic"] / out["gaussian"]
  )
  return out


def error_row(query, d, k, eps, delta, mc_n=1_000_000, key=None) -> dict:
  """One row of the squared-error table: E||noise||_2^2 of the optimal K-norm
  mechanism (exact, or Monte Carlo with ``mc_n`` points and its standard error) and
  of the :func:`baselines`, and the ratios of K-norm to the best l_p baselines."""
  key = jax.random.key(d * 1000 + (k or 0)) if key is None else key
  gamma2 = (d + 1) * (d + 2) / eps**2
  z2, se = ball_sq_norm(query, d, k, mc_n, key)
  base = baselines(query, d, k, eps, delta)
  knorm = gamma2 * z2
  return {
    "query": query,
    "d": d,
    "k": k,
    "eps": eps,
    "delta": delta,
    "knorm": knorm,
    "knorm_source": "exact" if se is None else f"Monte Carlo ({mc_n:,} points)",
    "knorm_se": None if se is None else gamma2 * se,
    **base,
    "x_best_l1_linf": knorm / min(base["l1"], base["linf"]),
    "x_best_lp": knorm / min(base["l1"], base["linf"], base["l2"]),
  }


def load_reference(path):
  """The reference modules ``(lp, sum, count, vote)`` from ``path`` (the folder with
  the ``k_norm`` package) and its commit, or ``(None, reason)``."""
  if path is None:
    return None, "no --reference given"
  path = Path(path).resolve()
  sys.path.insert(0, str(path))
  try:
    mods = tuple(
      importlib.import_module(f"k_norm.{m}_mechanism")
      for m in ("lp", "sum", "count", "vote")
    )
  except Exception as e:  # a broken or missing checkout: the rows say "not run"
    return None, f"import from {path} failed: {type(e).__name__}: {e}"
  return mods, None


def reference_commit(path, given=None) -> str:
  """``given``, else the git commit of the checkout at ``path``."""
  if given:
    return given
  try:
    out = subprocess.run(
      ["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True
    )
  except OSError:
    return "not recorded"
  return out.stdout.strip() if out.returncode == 0 else "not recorded (not a git checkout)"


def time_reference(mods, query, d, k, calls, seed=0):
  """Seconds per sample of the reference K-norm mechanism (eps = 1) over ``calls``
  samples, and the mean squared norm of those samples with its standard error."""
  _, summ, count, vote = mods
  np.random.seed(seed)
  zeros = np.zeros(d)
  euler = None if query == "vote" else summ.compute_eulerian_numbers(d)  # set-up
  t0 = time.perf_counter()
  if query == "sum":
    out = [summ.sum_mechanism(zeros, euler, k, 1.0) for _ in range(calls)]
  elif query == "vote":
    out = [vote.vote_mechanism(zeros, 1.0) for _ in range(calls)]
  elif "num_samples" in inspect.signature(count.count_mechanism).parameters:
    out = count.count_mechanism(zeros, euler, k, 1.0, calls)
  else:  # an older signature: one sample per call
    out = [count.count_mechanism(zeros, euler, k, 1.0) for _ in range(calls)]
  per = (time.perf_counter() - t0) / calls
  sq = np.sum(np.square(np.asarray(out, np.float64)), axis=1)
  return per, float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(calls))


def speed_row(key, query, d, k, n, repeats, ref_mods, ref_calls):
  """Samples per second of jaxdp's K-norm noise and uniform points, and of the
  reference code, at one (query, d, k)."""
  b = ball(query, d, k)
  noise = jax.jit(lambda kk: jaxdp.random.knorm(kk, b, 1.0, (n,)))
  points = jax.jit(lambda kk: uniform_points(kk, query, d, k, n))
  t_noise = best_time(lambda: noise(key), repeats)
  t_points = best_time(lambda: points(key), repeats)
  row = {
    "query": query,
    "d": d,
    "k": k,
    "n": n,
    "knorm_samples_per_s": n / t_noise,
    "uniform_samples_per_s": n / t_points,
    "reference_samples_per_s": None,
    "x_reference": None,
  }
  if ref_mods is not None:
    per, mean, se = time_reference(ref_mods, query, d, k, ref_calls)
    row.update(
      reference_samples_per_s=1 / per,
      x_reference=per * n / t_noise,
      reference_calls=ref_calls,
      reference_mc=mean,
      reference_mc_se=se,
    )
  return row


def floor_rows(key, n, repeats, d=50):
  """K-norm noise of the l_1, l_inf and l_2 balls at d, for scale."""
  rows = []
  for name, p in (("l_1", 1), ("l_inf", math.inf), ("l_2", 2)):
    f = jax.jit(lambda kk, p=p: jaxdp.random.knorm(kk, LpBall(d, p), 1.0, (n,)))
    t = best_time(lambda: f(key), repeats)
    rows.append({"ball": name, "d": d, "n": n, "knorm_samples_per_s": n / t})
    print(rows[-1], flush=True)
  return rows


def _num(x, fmt="{:,.0f}"):
  return NOT_RUN if x is None else fmt.format(x)


def _sq(x):
  """A squared error: one decimal below 1000, whole numbers above."""
  return f"{x:,.1f}" if abs(x) < 1000 else f"{x:,.0f}"


def _k(k):
  return "-" if k is None else str(k)


def speed_table(rows, floors, reference) -> str:
  """The speed table in Markdown."""
  lines = [
    "| query | d | k | K-norm noise samples/s | uniform points samples/s | "
    "reference samples/s | x reference |",
    "|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    lines.append(
      f"| {r['query']} | {r['d']} | {_k(r['k'])} | {r['knorm_samples_per_s']:,.0f} | "
      f"{r['uniform_samples_per_s']:,.0f} | {_num(r['reference_samples_per_s'])} | "
      f"{_num(r['x_reference'])} |"
    )
  lines += ["", "| floor: K-norm noise of | d | samples/s |", "|---|---|---|"]
  lines += [
    f"| {r['ball']} ball | {r['d']} | {r['knorm_samples_per_s']:,.0f} |" for r in floors
  ]
  ref = (
    f"Reference code: commit `{reference['commit']}`, {reference['calls']} samples per row."
    if reference["status"] == "run"
    else f"Reference code: not run ({reference['status']})."
  )
  n = rows[0]["n"] if rows else 0
  return "\n".join([*lines, "", f"jaxdp: {n:,} samples per call, eps = 1. {ref}"])


def error_table(rows, reference_rows=()) -> str:
  """The squared-error table in Markdown (E||noise||_2^2 of each mechanism)."""
  ref = {(r["query"], r["d"], r["k"]): r for r in reference_rows}
  lines = [
    "| query | d | k | K-norm (optimal) | l_1 (Laplace) | l_inf | l_2 | "
    "K-norm / min(l_1, l_inf) | K-norm / best l_p | spherical Gaussian | "
    "elliptic Gaussian | elliptic / spherical | reference MC |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ]
  for r in rows:
    knorm = _sq(r["knorm"]) + (
      "" if r["knorm_se"] is None else f" ± {r['knorm_se']:.2g} (MC)"
    )
    m = ref.get((r["query"], r["d"], r["k"]), {})
    refmc = (
      f"{m['reference_mc']:,.0f} ± {m['reference_mc_se']:,.0f}"
      if m.get("reference_mc") is not None
      else NOT_RUN
    )
    lines.append(
      f"| {r['query']} | {r['d']} | {_k(r['k'])} | {knorm} | {_sq(r['l1'])} | "
      f"{_sq(r['linf'])} | {_sq(r['l2'])} | {r['x_best_l1_linf']:.3f} | "
      f"{r['x_best_lp']:.3f} | {_sq(r['gaussian'])} | "
      f"{NOT_RUN if r['elliptic'] is None else _sq(r['elliptic'])} | "
      f"{_num(r['elliptic_x_gaussian'], '{:.3f}')} | {refmc} |"
    )
  first = rows[0] if rows else {"eps": 1.0, "delta": 1e-6}
  mc = [r for r in rows if r["knorm_se"] is not None]
  note = (
    f"E||noise||_2^2 at eps = {first['eps']:g} (Gaussian: delta = {first['delta']:g}). "
    "The l_1, l_inf and l_2 columns are exact, (d + 1)(d + 2) / eps^2 sensitivity^2 "
    "E||Z||^2; so is K-norm, (d + 1)(d + 2) / eps^2 E||Z||^2 from the ball's "
    "expected_sq_norm"
    + (
      ", except in the rows marked MC: Monte Carlo means of jaxdp's uniform points "
      "± one standard error, for balls without a closed form in this jaxdp."
      if mc
      else "."
    )
  )
  return "\n".join([*lines, "", note])


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=1_000_000, help="samples per jaxdp call")
  ap.add_argument("--ds", default="10,50,100", help="comma-separated dimensions")
  ap.add_argument("--repeats", type=int, default=3, help="best of this many calls")
  ap.add_argument("--queries", default="sum,count,vote", help="comma-separated queries")
  ap.add_argument(
    "--reference",
    default=os.environ.get("KNORM_REFERENCE"),
    help="folder holding the reference k_norm package (default: $KNORM_REFERENCE)",
  )
  ap.add_argument("--reference-commit", default=None, help="its commit (default: git's)")
  ap.add_argument("--ref-calls", type=int, default=300, help="reference samples per row")
  ap.add_argument("--mc-n", type=int, default=1_000_000, help="Monte Carlo points")
  ap.add_argument("--eps", type=float, default=1.0, help="eps of the error table")
  ap.add_argument("--delta", type=float, default=1e-6, help="delta of the Gaussians")
  ap.add_argument(
    "--quick",
    action="store_true",
    help="a smoke run: d = 10 and 50, k = 5, 10^5 samples, 30 reference samples",
  )
  add_out(ap)
  args = ap.parse_args(argv)
  ds = [int(d) for d in ("10,50" if args.quick else args.ds).split(",")]
  n, ref_calls, mc_n, repeats = args.n, args.ref_calls, args.mc_n, args.repeats
  ks, half = (1, 5), True
  if args.quick:
    n, ref_calls, mc_n, repeats, ks, half = 100_000, 30, 100_000, 1, (5,), False
  mods, why = load_reference(args.reference)
  reference = {
    "path": args.reference,
    "status": "run" if mods else why,
    "commit": reference_commit(args.reference, args.reference_commit) if mods else None,
    "calls": ref_calls,
  }
  print(f"reference: {reference}", flush=True)
  key = jax.random.key(0)
  rows, errors = [], []
  queries = args.queries.split(",")
  if set(queries) - set(QUERIES):
    ap.error(f"--queries: unknown {sorted(set(queries) - set(QUERIES))}; use {QUERIES}")
  for query, d, k in sizes(ds, ks, half, queries):
    rows.append(speed_row(key, query, d, k, n, repeats, mods, ref_calls))
    print(rows[-1], flush=True)
    errors.append(error_row(query, d, k, args.eps, args.delta, mc_n))
    print(errors[-1], flush=True)
  floors = floor_rows(key, n, repeats)
  speed_md, error_md = speed_table(rows, floors, reference), error_table(errors, rows)
  out = Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  m = machine()
  where = (
    f"Measured on {m['cpu']}, {m['cpu_count']} CPUs, backend {m['backend']}, "
    f"jax {m['jax']}."
  )
  (out / "knorm_family_speed.md").write_text(f"{speed_md}\n\n{where}\n")
  (out / "knorm_family_error.md").write_text(error_md + "\n")
  payload = {
    "machine": m,
    "reference": reference,
    "speed": rows,
    "floors": floors,
    "errors": errors,
  }
  write_results(
    out,
    "knorm_family",
    payload,
    "## Speed\n\n" + speed_md + "\n\n## Squared error\n\n" + error_md,
  )


if __name__ == "__main__":
  main()
