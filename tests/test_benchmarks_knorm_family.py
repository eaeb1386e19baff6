"""benchmarks/knorm_family.py's tables: the sensitivities against the balls' vertices,
the exact baselines against closed forms derived here, the K-norm entries where a
ball is an l_p ball, the paper's elliptic-to-spherical ratios, and the Markdown
(Monte Carlo and missing entries labelled)."""

import json
import math
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.helpers.modules import load_script

ROOT = Path(__file__).resolve().parents[1]


def load():
  return load_script("benchmarks/knorm_family.py")


kf = load()


@pytest.mark.parametrize(
  "query,d,k",
  [("sum", 6, k) for k in range(1, 7)]
  + [("count", 6, k) for k in range(1, 7)]
  + [("vote", d, None) for d in (2, 3, 5)],
)
def test_sensitivities_are_the_largest_norms_of_the_balls_vertices(query, d, k):
  hull = kf.ball(query, d, k).hull_points()
  s = kf.sensitivities(query, d, k)
  assert s["l1"] == pytest.approx(np.abs(hull).sum(1).max(), rel=1e-12)
  assert s["linf"] == pytest.approx(np.abs(hull).max(), rel=1e-12)
  assert s["l2"] == pytest.approx(np.sqrt((hull**2).sum(1)).max(), rel=1e-12)


def normal_cdf(x):
  return 0.5 * math.erfc(-x / math.sqrt(2))


def gaussian_delta(eps, sigma):
  """Balle & Wang (2018), Theorem 8, sensitivity 1."""
  a, b = 1 / (2 * sigma), eps * sigma
  return normal_cdf(a - b) - math.exp(eps) * normal_cdf(-a - b)


@pytest.mark.parametrize(
  "query,d,k", [("sum", 10, 3), ("count", 50, 25), ("vote", 7, None)]
)
@pytest.mark.parametrize("eps", [0.5, 2.0])
def test_baselines_match_closed_forms(query, d, k, eps):
  """l_1: d i.i.d. Laplace(Delta_1 / eps) coordinates, variance 2 (Delta_1 / eps)^2 each;
  l_inf: R U with U uniform in the cube, E R^2 = (d+1)(d+2) / eps^2 and E U_i^2 = 1/3;
  l_2: E||U||^2 = d / (d + 2) in the Euclidean ball; Gaussian: d sigma^2 with sigma the
  least noise meeting Balle & Wang's condition."""
  delta = 1e-6
  if query == "vote":
    l1, linf, l2sq = d * (d - 1) / 2, d - 1, sum(i * i for i in range(d))
  else:
    l1, linf, l2sq = k, 1, k
  b = kf.baselines(query, d, k, eps, delta)
  assert b["l1"] == pytest.approx(2 * d * (l1 / eps) ** 2, rel=1e-12)
  assert b["linf"] == pytest.approx((d + 1) * (d + 2) / eps**2 * d / 3 * linf**2, rel=1e-12)
  assert b["l2"] == pytest.approx(d * (d + 1) * l2sq / eps**2, rel=1e-12)
  sigma = math.sqrt(b["gaussian"] / d / l2sq)  # per unit of l_2 sensitivity (rounded)
  assert (
    gaussian_delta(eps, sigma * (1 + 1e-9)) <= delta < gaussian_delta(eps, sigma * 0.999)
  )


@pytest.mark.statistical
@pytest.mark.parametrize(
  "query,d,k,equal_to", [("sum", 4, 1, "l1"), ("count", 4, 1, "l1"), ("sum", 4, 4, "linf")]
)
def test_knorm_entry_where_the_ball_is_an_lp_ball(query, d, k, equal_to):
  """The sum and count balls with k = 1 are the l_1 ball and the sum ball with k = d
  the cube, so the optimal K-norm mechanism is that l_p baseline: exactly where the
  ball has a closed form, else within 5 standard errors of the Monte Carlo mean
  (fixed key)."""
  row = kf.error_row(query, d, k, 1.0, 1e-6, mc_n=20_000, key=jax.random.key(3))
  if row["knorm_se"] is None:
    assert row["knorm"] == pytest.approx(row[equal_to], rel=1e-9)
  else:
    assert row["knorm_source"].startswith("Monte Carlo")
    assert abs(row["knorm"] - row[equal_to]) <= 5 * row["knorm_se"]
  ratio = row["knorm"] / min(row["l1"], row["linf"])
  assert row["x_best_l1_linf"] == pytest.approx(ratio, rel=1e-12)


def paper_ellipse_ratio(query, d, k):
  """Joseph & Yu (2024), Lemma 4.7 with Theorems 8.9 (count, k <= d/2) and 9.10
  (vote): the optimal ellipse's E||noise||^2 over the spherical one's is
  (|v_1| + sqrt(d - 1) |v_2|)^2 / (d r^2), with v_1, v_2 a vertex's parts along and
  across the all-ones direction and r the l_2 sensitivity."""
  if query == "count":
    v1, v2, r2 = k / math.sqrt(d), math.sqrt(k * (d - k) / d), k
  else:
    v1, v2 = math.sqrt(d) * (d - 1) / 2, math.sqrt(d * (d * d - 1) / 12)
    r2 = (d - 1) * d * (2 * d - 1) / 6
  return (v1 + math.sqrt(d - 1) * v2) ** 2 / (d * r2)


@pytest.mark.parametrize(
  "query,d,k", [("count", 10, 2), ("count", 50, 25), ("vote", 10, None)]
)
def test_elliptic_over_spherical_is_the_papers_ratio(query, d, k):
  b = kf.baselines(query, d, k, 1.0, 1e-6)
  if b["elliptic"] is None:
    pytest.skip("this jaxdp has no EllipticGaussianMechanism for the ball")
  assert b["elliptic_x_gaussian"] == pytest.approx(
    paper_ellipse_ratio(query, d, k), rel=1e-6
  )


def test_paper_ratio_reference_values():
  """The closed form at d = 2, worked by hand: count with k = 1 has v_1 = v_2 =
  1 / sqrt(2) and r^2 = 1, vote has v_1 = v_2 = sqrt(2) / 2 and r^2 = 1, so both are
  (sqrt(2))^2 / 2 = 1 (in the plane the optimal ellipse of these balls is the circle)."""
  assert paper_ellipse_ratio("count", 2, 1) == pytest.approx(1.0)
  assert paper_ellipse_ratio("vote", 2, None) == pytest.approx(1.0)
  assert paper_ellipse_ratio("vote", 50, None) < 1.0


def fake_row(query, d, k, se):
  return {
    "query": query,
    "d": d,
    "k": k,
    "eps": 1.0,
    "delta": 1e-6,
    "knorm": 12.5,
    "knorm_source": "exact" if se is None else "Monte Carlo (10 points)",
    "knorm_se": se,
    **kf.baselines(query, d, k, 1.0, 1e-6),
    "x_best_l1_linf": 0.5,
    "x_best_lp": 0.25,
  }


def test_error_table_labels_monte_carlo_and_missing_entries():
  rows = [fake_row("sum", 4, 2, None), fake_row("vote", 4, None, 0.75)]
  rows[0]["elliptic"], rows[0]["elliptic_x_gaussian"] = None, None
  rows[1]["elliptic"], rows[1]["elliptic_x_gaussian"] = 8.0, 0.5
  ref = [{"query": "vote", "d": 4, "k": None, "reference_mc": 13.0, "reference_mc_se": 2.0}]
  lines = kf.error_table(rows, ref).splitlines()
  exact, mc = lines[2], lines[3]
  assert exact.startswith("| sum | 4 | 2 | 12.5 |") and "MC" not in exact
  assert exact.count("not run") == 3  # elliptic, its ratio, the reference
  assert mc.startswith("| vote | 4 | - | 12.5 ± 0.75 (MC) |")
  assert "| 8.0 | 0.500 | 13 ± 2 |" in mc
  assert "Monte Carlo" in lines[-1]
  assert "Monte Carlo" not in kf.error_table(rows[:1])


def test_speed_table_says_when_the_reference_did_not_run():
  row = {
    "query": "count",
    "d": 50,
    "k": 5,
    "n": 1000,
    "knorm_samples_per_s": 2e6,
    "uniform_samples_per_s": 3e6,
    "reference_samples_per_s": None,
    "x_reference": None,
  }
  text = kf.speed_table([row], [], {"status": "no --reference given", "calls": 3})
  assert "| count | 50 | 5 | 2,000,000 | 3,000,000 | not run | not run |" in text
  assert "not run (no --reference given)" in text
  row.update(reference_samples_per_s=400.0, x_reference=5000.0)
  ran = {"status": "run", "commit": "abc", "calls": 3}
  assert "| 400 | 5,000 |" in kf.speed_table([row], [], ran)


def test_sizes():
  assert kf.sizes([10], (1, 5)) == [
    ("sum", 10, 1),
    ("sum", 10, 5),
    ("count", 10, 1),
    ("count", 10, 5),
    ("vote", 10, None),
  ]
  assert ("sum", 4, 5) not in kf.sizes([4], (1, 5))  # k <= d only
  assert kf.sizes([50], (5,), half=False) == [
    ("sum", 50, 5),
    ("count", 50, 5),
    ("vote", 50, None),
  ]


@pytest.fixture
def stub_reference(tmp_path, monkeypatch):
  """A folder with a stub ``k_norm`` package whose mechanisms return fixed vectors."""
  pkg = tmp_path / "k_norm"
  pkg.mkdir()
  (pkg / "lp_mechanism.py").write_text("")
  (pkg / "sum_mechanism.py").write_text(
    "import numpy as np\n"
    "def compute_eulerian_numbers(d):\n  return np.zeros((d + 1, d + 1))\n"
    "def sum_mechanism(v, e, k, eps):\n  return v + 2.0\n"
  )
  (pkg / "count_mechanism.py").write_text(
    "import numpy as np\n"
    "def count_mechanism(v, e, k, eps, num_samples):\n"
    "  return v + np.arange(num_samples)[:, None] % 2\n"
  )
  (pkg / "vote_mechanism.py").write_text("def vote_mechanism(v, eps):\n  return v - 1.0\n")
  monkeypatch.setattr(sys, "path", list(sys.path))
  for name in [m for m in sys.modules if m == "k_norm" or m.startswith("k_norm.")]:
    monkeypatch.delitem(sys.modules, name)
  yield tmp_path
  for name in [m for m in sys.modules if m == "k_norm" or m.startswith("k_norm.")]:
    del sys.modules[name]


def test_reference_rows_come_from_the_reference_samples(stub_reference):
  mods, why = kf.load_reference(stub_reference)
  assert why is None
  _, mean, se = kf.time_reference(mods, "sum", 3, 2, calls=5)
  assert (mean, se) == (12.0, 0.0)  # ||(2, 2, 2)||^2
  _, mean, se = kf.time_reference(mods, "count", 4, 2, calls=4)  # rows 0, 1, 0, 1
  assert mean == 2.0 and se == pytest.approx(math.sqrt(16 / 3) / 2)
  _, mean, _ = kf.time_reference(mods, "vote", 5, None, calls=2)
  assert mean == 5.0


def test_a_missing_reference_is_reported_not_raised(tmp_path, monkeypatch):
  monkeypatch.setattr(sys, "path", list(sys.path))
  assert kf.load_reference(None) == (None, "no --reference given")
  mods, why = kf.load_reference(tmp_path / "nowhere")
  assert mods is None and "ModuleNotFoundError" in why


def test_floors_summary_judges_d50_against_the_reference(tmp_path):
  """The floors summary reads knorm_family.json: each K-norm rate beside the
  reference's, the issue's target (>= 10^6/s and >= 1000x) at d = 50 only."""
  floors = load_script("benchmarks/floors.py")
  speed = [
    {"query": "sum", "d": 50, "k": 5, "n": 10, "knorm_samples_per_s": 2e6},
    {"query": "vote", "d": 50, "k": None, "n": 10, "knorm_samples_per_s": 9e5},
    {"query": "count", "d": 50, "k": 5, "n": 10, "knorm_samples_per_s": 2e6},
    {"query": "count", "d": 10, "k": 5, "n": 10, "knorm_samples_per_s": 1.0},
  ]
  refs = [(400.0, 5000.0), (300.0, 3000.0), (4000.0, 500.0), (1.0, 1.0)]
  for row, (rate, x) in zip(speed, refs):
    row.update(reference_samples_per_s=rate, x_reference=x)
  machine = {"cpu": "AMD EPYC", "cpu_count": 2, "backend": "cpu", "devices": ["cpu:cpu"]}
  payload = {"machine": machine, "reference": {"status": "run"}, "speed": speed}
  (tmp_path / "knorm_family.json").write_text(json.dumps(payload))
  rows = {r["path"]: r for r in floors.summary(tmp_path)["rows"]}
  met = {path.split(", ")[1]: r["met"] for path, r in rows.items()}
  assert met == {
    "sum ball d = 50 k = 5": True,
    "vote ball d = 50": False,  # under 10^6/s
    "count ball d = 50 k = 5": False,  # under 1000x
    "count ball d = 10 k = 5": None,  # no target
  }
  assert rows["jaxdp.random.knorm, sum ball d = 50 k = 5"]["ratio"] == 5000.0
  for row in speed:
    row.update(reference_samples_per_s=None, x_reference=None)
  payload["reference"] = {"status": "no --reference given"}
  (tmp_path / "knorm_family.json").write_text(json.dumps(payload))
  rows = floors.summary(tmp_path)["rows"]
  assert all(r["met"] is None and "not measured" in r["floor"] for r in rows)
