"""The figures of each benchmark's JSON beside their floors, and the targets.

One function per results file (:data:`EXTRACTORS`) turns a benchmark's JSON into rows
(:func:`figure`): a path, its size, the figure (a rate per second), what its floor is
and the floor's rate, measured in the same run, their ratio and the target
(:data:`TARGETS`) the figure is judged by. No JAX here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

NOT_MEASURED = "not measured"
FAST_FLOOR = "fast RNG floor: uniforms of the samplers' key, 2(d+1) a sample"
SLOW_FLOOR = "uniforms of JAX's Threefry key, 2(d+1) a sample (not the fast floor)"


@dataclass(frozen=True)
class Target:
  """A figure's target: its ratio to the floor at least ``ratio_min``, its rate at
  least ``rate_min`` (per second), or both; ``accelerator``: set for a GPU/TPU only
  (not judged on a CPU backend)."""

  text: str
  ratio_min: float | None = None
  rate_min: float | None = None
  accelerator: bool = False

  def met(self, rate, ratio, backend: str) -> bool | None:
    """Whether a figure meets the target (None: not judged: no figure, no floor where
    a ratio is asked, or an accelerator's target on the CPU)."""
    if self.accelerator and backend == "cpu":
      return None
    checks = ((self.ratio_min, ratio), (self.rate_min, rate))
    if any(least is not None and value is None for least, value in checks):
      return None
    return all(value >= least for least, value in checks if least is not None)


# The targets of the performance issue, by the path they apply to.
TARGETS = {
  "consistency": Target(">= 10x the reference", ratio_min=10.0),
  "ledger": Target("within 2x of the floor", ratio_min=0.5),
  "sp": Target("<= 3x the floor's time", ratio_min=1 / 3),
  "exact_nhis3": Target(">= 0.5x the float sampler", ratio_min=0.5),
  "chacha_words": Target("within 1.5x of Threefry", ratio_min=1 / 1.5),
  "discrete_gaussian": Target(">= 10,000,000/s", rate_min=1e7),
  "bars": Target(">= 10,000/s", rate_min=1e4),
  "nhis3_accelerator": Target(">= 10^9/s on one H100/H200", rate_min=1e9, accelerator=True),
  "knorm_d50": Target(">= 1,000,000/s and >= 1000x the reference", 1000.0, 1e6),
}


def median_ratio(t: dict, bases: list, clock: str) -> float:
  """The median over rounds of ``t``'s time over the sum of ``bases``' times in the
  same round (``t["rounds"][i][clock]``: calls made under the same load)."""
  return statistics.median(
    r[clock] / sum(b["rounds"][i][clock] for b in bases) for i, r in enumerate(t["rounds"])
  )


def figure(path, size, rate, floor=NOT_MEASURED, floor_rate=None, ratio=None, target=None):
  """One row: ``ratio`` defaults to ``rate / floor_rate`` (None without both)."""
  if ratio is None and rate and floor_rate:
    ratio = rate / floor_rate
  return {
    "path": path,
    "size": size,
    "rate": rate,
    "floor": floor,
    "floor_rate": floor_rate,
    "ratio": ratio,
    "target": target,
  }


def _samplers(p):
  out = []
  for r in p.get("rows", []):
    case = r["case"]
    target = None
    if r["sampler"] == "poset_ball" and case == "NHIS 3 sections (forest)":
      target = TARGETS["nhis3_accelerator"]
    elif "series-parallel" in case or "(sp" in case:
      target = TARGETS["sp"]
    out.append(
      figure(
        f"{r['sampler']}, {case}",
        r["n"],
        r["samples_per_s"],
        FAST_FLOOR,
        r["n"] / r["fast_floor_seconds"],
        1 / r["x_fast_floor"],
        target,
      )
    )
  for r in p.get("large_posets", []):
    out.append(
      figure(
        f"poset_ball, {r['case']}, method {r['method']}",
        r["n"],
        r["samples_per_s"],
        FAST_FLOOR,
        r["n"] / r["fast_floor_seconds"],
        1 / r["x_fast_floor"],
        TARGETS["sp"] if r["method"] == "sp" else None,
      )
    )
  for r in p.get("paired", []):
    out.append(
      figure(
        r["draw"],
        r["n"],
        r["n"] / r["seconds"],
        r["against"],
        r["n"] / r["against_seconds"],
      )
    )
  return out


def _sp_costs(p):
  """Against the fast floor where the results have it (judged), else against the
  floor of JAX's Threefry key (a slower floor: not judged)."""
  out = []
  for r in p.get("compile", []) + p.get("chunks", []):
    where = (
      f"{r['node_rows']:,} node rows a chunk"
      if "node_rows" in r
      else f"{r['scanned_depths']} depths in scans"
    )
    path, rate = f"poset_ball method sp, {r['poset']}, {where}", r["samples_per_s"]
    if "x_fast_floor" in r:
      floor, ratio, target = FAST_FLOOR, 1 / r["x_fast_floor"], TARGETS["sp"]
    else:
      floor, ratio, target = SLOW_FLOOR, 1 / r["x_floor"], None
    out.append(figure(path, r.get("n", 20_000), rate, floor, rate / ratio, ratio, target))
  return out


def _discrete_gaussian(dg, bits_floor, n):
  """Rows of a ``discrete_gaussian`` record: its own floor where it has one, else the
  Laplace row's (the same ChaCha20 words, two a sample, at batch ``4 n``)."""
  floor, what = dg.get("floor_chacha20_2words"), "ChaCha20 words it reads, 2 a sample"
  if floor is None and bits_floor is not None:
    floor, what = bits_floor, what + " (the Laplace row's, batch 4x)"
  return [
    figure(
      f"exact discrete Gaussian, sigma {sigma}",
      n,
      r["exact_chacha20"],
      what if floor else NOT_MEASURED,
      floor,
      target=TARGETS["discrete_gaussian"],
    )
    for sigma, r in dg.items()
    if isinstance(r, dict)
  ]


def _secure(p):
  n, x, knorm = p.get("n"), "exact_chacha20", "float K-norm noise, ChaCha20"
  words = "ChaCha20 words it reads, 2 a sample"
  records = dict(p)
  pairs = [  # (results key, path, size, figure key, floor, floor key, target)
    ("bits_words_per_s", "random bits, ChaCha20 (uint32 words)", None, "chacha20",
     "Threefry words", "threefry", TARGETS["chacha_words"]),
    ("laplace_per_s", "exact Laplace, ChaCha20", n, x,
     words, "chacha20_bits_floor", None),
    ("nhis3_knorm_per_s", "exact NHIS-3 K-norm noise, ChaCha20", n, x,
     "float K-norm noise on the default key", "float_threefry", TARGETS["exact_nhis3"]),
    ("questionnaire300_knorm_per_s", "exact 300-question K-norm noise", None, x,
     knorm, "float_chacha20", None),
    ("forest128_knorm_per_s", "exact random forest d = 128 K-norm noise", None, x,
     knorm, "float_chacha20", None),
    ("fence22_knorm_per_s", "exact 22-element fence K-norm noise", None, x,
     knorm, "float_chacha20", None),
  ]  # fmt: skip
  for dim, r in (p.get("l2_knorm") or {}).items():
    if isinstance(r, dict):
      records[f"l2 {dim}"] = r
      path = f"exact l2 K-norm noise, D = {dim}"
      pairs.append(
        (f"l2 {dim}", path, n, x, "float l2 K-norm noise, ChaCha20", "float_chacha20", None)
      )
  out = [
    figure(path, size, records[key][mine], floor, records[key][floor_key], target=target)
    for key, path, size, mine, floor, floor_key, target in pairs
    if records.get(key)
  ]
  if p.get("discrete_gaussian"):
    lap = p.get("laplace_per_s") or {}
    out += _discrete_gaussian(
      p["discrete_gaussian"], lap.get("chacha20_bits_floor"), n and n // 4
    )
  return out


def _generators(p):
  words = p.get("rows", {}).get("raw 32-bit words", {})
  if "chacha20" not in words:
    return []
  return [
    figure(
      "random bits, ChaCha20 (uint32 words)",
      p.get("n"),
      words["chacha20"],
      "unrolled Threefry words",
      words["threefry2x32_unrolled"],
      target=TARGETS["chacha_words"],
    )
  ]


def _ledger(p):
  per = p.get("seconds_per_release", {})
  alone = per.get("Session.count, no ledger")
  out = []
  for journal in ("delete", "wal"):
    floor = per.get(f"{journal}: floor, one transaction")
    if floor is None:
      continue
    for what, key, bases, words in (
      ("Ledger.charge", "Ledger.charge", [floor], "one durable sqlite transaction"),
      (
        "Session.count with the ledger",
        "Session.count, ledger",
        [floor, alone],
        "one durable sqlite transaction + Session.count with no ledger",
      ),
    ):
      t = per[f"{journal}: {key}"]
      floor_s = sum(b["wall"] for b in bases)
      out.append(
        figure(
          f"{what}, {journal} journal",
          None,
          1 / t["wall"],
          words + " (median of in-round ratios)",
          1 / floor_s,
          1 / median_ratio(t, bases, "wall"),
          TARGETS["ledger"],
        )
      )
  return out


def _consistency(p):
  return [
    figure(
      f"jaxdp.consistent, {r['structure']} d = {r['d']} ({r['jaxdp_path']})",
      r["batch"],
      r["jaxdp_vectors_per_s"],
      f"{r['reference']}, one float64 vector at a time",
      r["reference_vectors_per_s"],
      r["ratio"],
      TARGETS["consistency"],
    )
    for r in p.get("reference_rows", [])
  ]


def _knorm_family(p):
  """K-norm noise of the sum, count and vote balls against the published reference
  code (same run); the issue's target at d = 50."""
  ref = p.get("reference", {})
  floor = (
    "reference code (Joseph & Yu): numpy, one sample at a time"
    if ref.get("status") == "run"
    else f"reference code: {NOT_MEASURED}"
  )
  return [
    figure(
      f"jaxdp.random.knorm, {r['query']} ball d = {r['d']}"
      + ("" if r["k"] is None else f" k = {r['k']}"),
      r["n"],
      r["knorm_samples_per_s"],
      floor,
      r.get("reference_samples_per_s"),
      r.get("x_reference"),
      TARGETS["knorm_d50"] if r["d"] == 50 else None,
    )
    for r in p.get("speed", [])
  ]


def _reporting(p):
  rows = [r for r in p.get("rows", []) if "releases_per_s" in r]
  what = "error_bars(mech).interval(y), one release, {}"
  if not rows:
    return [figure(what.format("nhis3"), None, None, target=TARGETS["bars"])]
  return [
    figure(what.format(r["poset"]), None, r["releases_per_s"], target=TARGETS["bars"])
    for r in rows
  ]


def _accounting(p):
  rows = p.get("rows", [])
  floor = next((r for r in rows if "no accounting" in r["how"]), None)
  out = []
  for r in rows:
    if r is floor or r["how"].startswith("peer") or "(before)" in r["how"]:
      continue
    if r["how"].startswith("traced") and floor:
      what, floor_rate = "the same Laplace noise, no accounting", floor["releases_per_s"]
    else:
      what, floor_rate = NOT_MEASURED, None
    out.append(figure(r["how"], r["releases"], r["releases_per_s"], what, floor_rate))
  return out


def _montecarlo(p):
  rows = p.get("rows", [])
  batch = next((r for r in rows if "one batch" in r["how"]), None)
  return [
    figure(
      r["how"],
      r["n"],
      r["draws_per_s"],
      batch["how"] if batch else NOT_MEASURED,
      batch and batch["draws_per_s"],
    )
    for r in rows
    if r is not batch
  ]


def _session(p):
  return [
    figure(
      f"Session {r['query']}, secure={r['secure']}",
      r["n"],
      1 / r["session_s"],
      "the same query without a Session",
      1 / r["direct_s"],
    )
    for r in p.get("rows", [])
  ]


def _training(p):
  rows = p.get("rows", [])
  free = {r["model"]: r for r in rows if r["contender"] == "non-private"}
  return [
    figure(
      f"DP training step, {r['model']}",
      r["batch"],
      r["steps_per_s"],
      "the non-private step" if r["model"] in free else NOT_MEASURED,
      free[r["model"]]["steps_per_s"] if r["model"] in free else None,
    )
    for r in rows
    if r["contender"] == "jaxdp"
  ]


def _kernels(what, n, kernels, exact_key):
  return figure(
    what,
    n,
    1e6 / kernels[exact_key],
    "float kernel, ChaCha20",
    1e6 / kernels["float, ChaCha20"],
  )


def _exact_profile(p):
  k = p.get("kernels_us", {})
  if "exact, forest kernel" not in k:
    return []
  return [_kernels("exact NHIS-3 forest kernel", p.get("n"), k, "exact, forest kernel")]


def _exact_profile_tree(p):
  return [
    _kernels(f"exact kernel, {name}", p.get("n"), r["kernels_us"], "exact, ChaCha20")
    for name, r in p.get("posets", {}).items()
  ]


def _sampler_profile(p):
  out = []
  for r in p.get("rows", []):
    stages = r["stages"]
    out.append(
      figure(
        f"{r['method']} kernel, {r['case']} (process CPU time)",
        r["chunk"],
        1e9 / stages["points (the kernel)"]["cpu_ns"],
        "uniforms, 2(d+1) a sample (process CPU time)",
        1e9 / stages["floor: uniform 2(d+1)"]["cpu_ns"],
      )
    )
  return out


# Results file name -> its figures; the ``--only`` files of a benchmark included.
EXTRACTORS = {
  "samplers": _samplers,
  "sp_costs": _sp_costs,
  "sampler_profile": _sampler_profile,
  "exact_profile": _exact_profile,
  "exact_profile_tree": _exact_profile_tree,
  "secure": _secure,
  "secure_nhis3": _secure,
  "secure_dg": lambda p: _discrete_gaussian(
    p.get("discrete_gaussian", {}), None, p.get("n")
  ),
  "generators": _generators,
  "consistency": _consistency,
  "ledger": _ledger,
  "reporting": _reporting,
  "accounting": _accounting,
  "montecarlo": _montecarlo,
  "session": _session,
  "training": _training,
  "knorm_family": _knorm_family,
}
