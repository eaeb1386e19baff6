"""Accountant, mechanisms and budget-enforced releases (Dwork, Lemmas 2.5-2.8).

Statistical checks use fixed keys and state test, sample size and threshold.
"""

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import (
  Accountant,
  BudgetExceededError,
  GaussianMechanism,
  KNormMechanism,
  LaplaceMechanism,
  LpBall,
  Poset,
  PosetBall,
  PosetCountMechanism,
  release,
)
from jaxdp.accounting.refusal import FillOnRefusal

Z_MAX = 5.0


def _acct(budget=1.0, **kw):
  return Accountant.create(budget, key=jax.random.key(0), **kw, on_refusal=FillOnRefusal())


def _zscore(sample_mean, target, sample_sd, n):
  return abs(sample_mean - target) / (sample_sd / math.sqrt(n))


# ------------------------------------------------------------------ budget rule
def test_scan_of_ten_releases_answers_exactly_six():
  # 6 * 0.15 = 0.9 <= 1 < 1.05: rounds 7..10 are refused.
  mech = LaplaceMechanism(0.15)

  def step(a, _):
    return release(a, mech, jnp.zeros(3))

  acct, outs = jax.jit(lambda a: jax.lax.scan(step, a, None, length=10))(_acct())
  answered = ~np.isnan(np.asarray(outs)).any(axis=1)
  assert answered.tolist() == [True] * 6 + [False] * 4
  assert int(acct.refusals) == 4 and int(acct.answered) == 6
  assert float(acct.spent_eps) == pytest.approx(0.9)


SLACK = 2.0**-20  # documented bound: answered costs add up to <= budget (1 + 2^-20)


def test_vmap_over_1000_accountants_matches_exact_lemma_2_6():
  """1000 accountants x 12 random traced eps each, under jit(vmap(scan)).

  Reference: Lemma 2.6 in exact rational arithmetic (Python fractions) on the eps
  actually passed (float32 values). A release must be answered when the exact total
  stays below budget (1 - 2^-20), refused when it exceeds budget (1 + 2^-20); in the
  band between, the documented rounding decides (counted, must be rare). The spent
  eps reported equals the exact sum of answered costs within a relative 2^-20.
  """
  from fractions import Fraction

  rng = np.random.default_rng(0)
  eps = rng.uniform(0.02, 0.6, size=(1000, 12)).astype(np.float32)

  def run(acct, eps_row):
    def step(a, e):
      a, out = release(a, LaplaceMechanism(e), jnp.zeros(()))
      return a, a.last_answered

    return jax.lax.scan(step, acct, eps_row)

  keys = jax.random.split(jax.random.key(1), 1000)
  accts = jax.vmap(lambda k: Accountant.create(1.0, key=k, on_refusal=FillOnRefusal()))(
    keys
  )
  accts, answered = jax.jit(jax.vmap(run))(accts, jnp.asarray(eps))
  answered = np.asarray(answered)
  lo, hi = Fraction(1) * (1 - Fraction(SLACK)), Fraction(1) * (1 + Fraction(SLACK))
  in_band = 0
  for i in range(1000):
    spent = Fraction(0)
    for j in range(12):
      total = spent + Fraction(float(eps[i, j]))
      if total <= lo:
        assert answered[i, j], (i, j)
      elif total > hi:
        assert not answered[i, j], (i, j)
      else:
        in_band += 1
      if answered[i, j]:
        spent = total
    reported = Fraction(float(accts.spent_eps[i]))
    assert spent * (1 - Fraction(SLACK)) <= reported * (
      1 + Fraction(2.0**-23)
    ) and reported <= spent * (1 + Fraction(2.0**-23)), i
    assert int(accts.refusals[i]) == int((~answered[i]).sum())
  assert in_band <= 3


@pytest.mark.parametrize("jit", [False, True])
def test_refusal_fill_is_data_independent_and_spends_nothing(jit):
  rel = jax.jit(release, static_argnums=1) if jit else release
  outs = []
  for data in (jnp.ones(4), jnp.full(4, 7.0)):  # two runs, same key, different data
    acct = _acct(0.5)
    acct, _ = rel(acct, LaplaceMechanism(0.4), data)
    a1, out1 = rel(acct, LaplaceMechanism(0.2), data)
    outs.append(out1)
    assert not bool(a1.last_answered) and int(a1.refusals) == 1
    assert float(a1.spent_eps) == float(acct.spent_eps) == pytest.approx(0.4)
    with pytest.raises(jaxdp.ReleaseRefusedError):
      jaxdp.raise_if_refused(a1, out1)
    # A cheaper later round can still be answered.
    a3, out3 = rel(a1, LaplaceMechanism(0.1), data)
    assert np.isfinite(jaxdp.raise_if_refused(a3, out3)).all()
  assert np.isnan(outs[0]).all() and np.isnan(outs[1]).all()


def test_single_release_over_budget_raises_at_trace_time():
  with pytest.raises(BudgetExceededError, match="no data was read"):
    release(_acct(1.0), LaplaceMechanism(1.5), jnp.zeros(2))
  with pytest.raises(BudgetExceededError):
    jax.jit(release, static_argnums=1)(_acct(1.0), LaplaceMechanism(2.0), jnp.zeros(2))
  # group privacy: eps 0.5 for groups of 3 costs 1.5 > 1
  with pytest.raises(BudgetExceededError):
    release(_acct(1.0, group_size=3), LaplaceMechanism(0.5), jnp.zeros(2))


def test_traced_eps_over_budget_is_refused_not_raised():
  f = jax.jit(lambda a, e: release(a, LaplaceMechanism(e), jnp.zeros(2)))
  acct, out = f(_acct(1.0), 3.0)
  assert np.isnan(out).all() and int(acct.refusals) == 1
  acct, out = f(_acct(1.0), -1.0)  # an invalid traced eps is refused too
  assert np.isnan(out).all() and float(acct.spent_eps) == 0


def test_mechanisms_are_pytrees():
  """eps and sensitivity are leaves (jit argument, vmap input and output, scan carry);
  the ball, poset and policies are static. Unflattening does not re-validate."""
  m = PosetCountMechanism(Poset.nhis(1), 0.5, noise="l2")
  leaves, treedef = jax.tree_util.tree_flatten(m)
  assert leaves == [0.5]
  assert jax.tree_util.tree_unflatten(treedef, [object()]).noise == "l2"  # no checks
  mechs = jax.vmap(LaplaceMechanism)(jnp.array([0.1, 0.2, 0.3]))
  assert mechs.eps.shape == (3,) and isinstance(mechs, LaplaceMechanism)
  accts = jax.vmap(lambda k: Accountant.create(0.25, key=k, on_refusal=FillOnRefusal()))(
    jax.random.split(jax.random.key(0), 3)
  )
  accts, outs = jax.jit(jax.vmap(lambda a, mm: release(a, mm, jnp.zeros(2))))(accts, mechs)
  assert np.asarray(accts.last_answered).tolist() == [True, True, False]

  def step(carry, _):
    a, mm = carry
    a, _ = release(a, mm, jnp.zeros(()))
    return (a, LaplaceMechanism(mm.eps * 2)), a.last_answered

  (_, last), flags = jax.lax.scan(
    step, (_acct(1.0), LaplaceMechanism(0.1)), None, length=4
  )  # 0.1, 0.2, 0.4 answered; 0.8 refused
  assert np.asarray(flags).tolist() == [True, True, True, False]
  assert float(last.eps) == pytest.approx(1.6)
  traced = jax.jit(lambda m: m.randomize(jax.random.key(0), jnp.zeros(3)))(
    LaplaceMechanism(0.5)
  )  # a jit argument: eps traced
  assert np.isfinite(np.asarray(traced)).all()
  bad = jax.jit(lambda e: LaplaceMechanism(e).randomize(jax.random.key(0), jnp.zeros(3)))
  assert np.isnan(np.asarray(bad(-1.0))).all()


def test_group_size_charges_k_eps():
  acct, _ = release(_acct(10.0, group_size=3), LaplaceMechanism(0.5), jnp.zeros(2))
  assert float(acct.spent_eps) == pytest.approx(1.5)
  assert GaussianMechanism(0.5, 1e-6).cost(3) == pytest.approx(
    (1.5, 3 * math.exp(1.0) * 1e-6)
  )
  assert jaxdp.group_cost(0.5, 0.0, 3) == pytest.approx((1.5, 0.0))


def test_keys_are_split_never_reused():
  acct = _acct(10.0)
  a1, o1 = release(acct, LaplaceMechanism(1.0), jnp.zeros(5))
  a2, o2 = release(a1, LaplaceMechanism(1.0), jnp.zeros(5))
  assert not np.allclose(o1, o2)
  assert not np.array_equal(jax.random.key_data(acct.key), jax.random.key_data(a1.key))
  k1 = Accountant.create(1.0, on_refusal=FillOnRefusal()).key
  k2 = Accountant.create(1.0, on_refusal=FillOnRefusal()).key
  assert not np.array_equal(jax.random.key_data(k1), jax.random.key_data(k2))


@pytest.mark.slow
def test_jit_matches_eager_and_does_not_retrace():
  mech = PosetCountMechanism(Poset.nhis(1), 1.0)
  data = np.array([[1, 1, 0, 1], [1, 0, 0, 0], [0, 0, 0, 0]])
  eager = release(_acct(), mech, data)
  traced = jax.jit(release, static_argnums=1)(_acct(), mech, data)
  chex.assert_trees_all_close(eager[1], traced[1], rtol=1e-5)

  @jax.jit
  @chex.assert_max_traces(n=1)
  def step(acct, x):
    return release(acct, LaplaceMechanism(0.1), x)

  acct = _acct()
  for _ in range(3):
    acct, _ = step(acct, jnp.zeros(2))
  assert float(acct.spent_eps) == pytest.approx(0.3)


def test_unchecked_parallel_composition_costs_the_maximum():
  acct, outs = jaxdp.release_parallel_unchecked(
    _acct(), [(LaplaceMechanism(0.3), jnp.zeros(2)), (LaplaceMechanism(0.5), jnp.ones(3))]
  )
  assert float(acct.spent_eps) == pytest.approx(0.5) and len(outs) == 2


def test_postprocessing_is_free():
  """The plan of a query that postprocesses a release costs that release only, and
  postprocess (which never sees the accountant) returns fn's value."""

  def query(acct, x):
    acct, out = release(acct, LaplaceMechanism(0.5), x)
    return acct, jaxdp.postprocess(lambda y: jnp.clip(y, 0, None).sum(), out)

  p = jaxdp.plan(query, _acct(), jnp.ones(3))
  assert len(p.releases) == 1 and p.eps == pytest.approx(0.5)
  acct, total = query(_acct(), jnp.ones(3))
  assert float(acct.spent_eps) == pytest.approx(0.5) and float(total) >= 0


def test_plan_reports_spend_and_refusals_without_data():
  def query(acct, x):
    acct, a = release(acct, LaplaceMechanism(0.5), x)
    acct, b = release(acct, LaplaceMechanism(0.6), x)
    acct, c = release(acct, LaplaceMechanism(0.3), x)
    return a, b, c

  p = jaxdp.plan(query, _acct(1.0), jnp.zeros(3))
  assert p.eps == pytest.approx(0.8) and p.refused == (1,)


# ------------------------------------------------------------------ advanced composition
def test_advanced_composition_formula():
  eps, d = jaxdp.advanced_composition(0.01, 0.0, 1000, 1e-6)
  assert eps == pytest.approx(
    0.01 * math.sqrt(2000 * math.log(1e6)) + 10 * (math.e**0.01 - 1)
  )
  assert d == pytest.approx(1e-6)


def test_advanced_accountant_answers_more_than_basic():
  mech = LaplaceMechanism(0.01)

  def run(acct, n):
    return jax.lax.scan(lambda a, _: release(a, mech, jnp.zeros(())), acct, None, length=n)

  basic, _ = run(_acct(2.0, delta_budget=1e-5), 1001)
  adv, _ = run(
    _acct(
      2.0, delta_budget=1e-5, composition="advanced", max_releases=1000, delta_prime=1e-6
    ),
    1001,
  )
  assert int(basic.answered) == 200
  assert int(adv.answered) == 1000 and int(adv.refusals) == 1
  g_eps, g_delta = adv.guarantee()
  assert g_eps <= 2.0 and g_delta <= 1e-5
  assert adv.eps_cap > 0.01  # the cap advanced composition allows per release
  with pytest.raises(BudgetExceededError, match="per-release cap"):
    release(adv, LaplaceMechanism(0.05), jnp.zeros(()))


def test_remaining_and_derived_config_never_go_stale():
  a, _ = release(_acct(1.0), LaplaceMechanism(0.25), jnp.zeros(()))
  assert float(a.remaining()[0]) == pytest.approx(0.75, rel=1e-5)
  b = dataclasses.replace(a, eps_budget=2.0)  # capacities are derived, never stored
  assert float(b.remaining()[0]) == pytest.approx(1.75, rel=1e-5)
  adv = _acct(
    2.0, delta_budget=1e-5, composition="advanced", max_releases=2, delta_prime=1e-6
  )
  cap = adv.eps_cap
  assert float(adv.remaining()[0]) == pytest.approx(cap)
  for _ in range(2):
    adv, _ = release(adv, LaplaceMechanism(0.01), jnp.zeros(()))
  assert [float(v) for v in adv.remaining()] == [0.0, 0.0]
  assert (
    dataclasses.replace(adv, rule=dataclasses.replace(adv.rule, max_releases=4)).eps_cap
    < cap
  )
  g = adv.guarantee()
  assert all(isinstance(v, jax.Array) for v in g + _acct(1.0).guarantee())
  # configuration is static (hashable aux data), state the leaves; unflattening with
  # placeholders runs no validation
  leaves, treedef = jax.tree_util.tree_flatten(_acct(1.0))
  assert len(leaves) == 7 and hash(treedef)
  assert jax.tree_util.tree_unflatten(treedef, [object()] * 7).eps_budget == 1.0


# ------------------------------------------------------------------ noise scales
@pytest.mark.statistical
def test_laplace_mechanism_variance():
  """Sample variance vs 2 (s/eps)^2, n = 200_000; z < 5 with Var(s^2) ~ 20 b^4 / n."""
  m = LaplaceMechanism(0.5, sensitivity=2.0)
  x = np.asarray(m.randomize(jax.random.key(3), jnp.zeros(200_000)), np.float64)
  b = 4.0
  assert _zscore(x.var(), 2 * b * b, math.sqrt(20) * b * b, len(x)) < Z_MAX


@pytest.mark.statistical
def test_gaussian_mechanism_variance():
  m = GaussianMechanism(0.5, 1e-5, sensitivity=1.0)
  x = np.asarray(m.randomize(jax.random.key(4), jnp.zeros(200_000)), np.float64)
  assert _zscore(x.var(), m.sigma**2, math.sqrt(2) * m.sigma**2, len(x)) < Z_MAX


@pytest.mark.statistical
@pytest.mark.parametrize("noise", ["poset", "linf", "l2", "laplace"])
def test_poset_count_mechanisms_end_to_end(noise):
  """Synthetic NHIS-1 data (n = 500). Over 100_000 releases: mean error per coordinate
  has |z| < 5, and the mean squared error equals its exact value within z < 5:
  poset (D+1)(D+2)/eps^2 E||Z||^2 (exact enumeration), l_inf (D+1)(D+2)/eps^2 D/3,
  l_2 (D+1)(D+2)/eps^2 D/(D+2) (D+1), Laplace D 2 (D/eps)^2; D = d + 1."""
  p = Poset.nhis(1)
  eps = 0.8
  rng = np.random.default_rng(5)
  filters = p.filters()
  data = filters[rng.integers(len(filters), size=500)]
  mech = PosetCountMechanism(p, eps, noise=noise)
  truth = np.concatenate([[500], data.sum(0)]).astype(np.float64)
  keys = jax.random.split(jax.random.key(6), 100_000)
  out = np.asarray(jax.jit(jax.vmap(lambda k: mech.randomize(k, data)))(keys), np.float64)
  err = out - truth
  assert np.all(np.abs(err.mean(0)) / (err.std(0) / math.sqrt(len(err))) < Z_MAX)
  dim = p.d + 1
  scale = (dim + 1) * (dim + 2) / eps**2
  expected = {
    "poset": scale * np.trace(jaxdp.exact_second_moment(p)),
    "linf": scale * dim / 3,
    "l2": scale * dim / (dim + 2) * dim,
    "laplace": dim * 2 * (dim / eps) ** 2,
  }[noise]
  sq = (err**2).sum(1)
  assert _zscore(sq.mean(), expected, sq.std(), len(sq)) < Z_MAX


def test_knorm_mechanism_sensitivity_scales_noise():
  ball = LpBall(3, math.inf)
  a = KNormMechanism(ball, 1.0, sensitivity=2.0).randomize(jax.random.key(0), jnp.zeros(3))
  b = KNormMechanism(ball, 1.0, sensitivity=1.0).randomize(jax.random.key(0), jnp.zeros(3))
  chex.assert_trees_all_close(a, 2 * b, rtol=1e-6)


# ------------------------------------------------------------------ poset data
def test_invalid_rows_raise_with_row_named():
  mech = PosetCountMechanism(Poset.nhis(1), 1.0)
  bad = np.array([[1, 1, 0, 0], [0, 1, 0, 0]])  # row 1: q2 yes without q1
  with pytest.raises(ValueError, match="row 1 is not a filter.*'q2' is 1 but 'q1'") as e:
    release(_acct(), mech, bad)
  assert "[0, 1, 0, 0]" not in str(e.value)  # the rule it breaks, not the row's values
  with pytest.raises(Exception, match="not a filter"):
    jax.block_until_ready(jax.jit(release, static_argnums=1)(_acct(), mech, bad))
  with pytest.raises(ValueError, match=r"0/1 values; row 0 does not \(column 1\)") as e:
    release(_acct(), mech, np.array([[1, 2, 0, 0]]))
  assert "[1, 2, 0, 0]" not in str(e.value)
  # under jit(vmap): one host check for the batch, naming the bad dataset
  good = np.array([[1, 1, 0, 0], [1, 0, 0, 0]])
  batched = jax.jit(jax.vmap(mech.statistic))
  np.testing.assert_array_equal(batched(np.stack([good, good]))[1], [2, 2, 1, 0, 0])
  with pytest.raises(Exception, match=r"row 1 is not a filter.*batch element \(1,\)"):
    jax.block_until_ready(batched(np.stack([good, bad])))


def test_clip_replaces_rows_by_largest_contained_filter():
  p = Poset.nhis(1)
  mech = PosetCountMechanism(p, 1.0, on_invalid="clip")
  bad = np.array([[0, 1, 1, 1], [1, 0, 1, 1], [1, 1, 1, 1]])
  stat = np.asarray(mech.statistic(bad))
  # row 0 -> {} ; row 1 -> {q1, q4} ; row 2 unchanged
  np.testing.assert_array_equal(stat, [3, 2, 1, 1, 2])
  stat_jit = np.asarray(jax.jit(mech.statistic)(bad))
  np.testing.assert_array_equal(stat_jit, stat)


def test_wrong_shapes_and_dtypes():
  mech = PosetCountMechanism(Poset.nhis(1), 1.0)
  with pytest.raises(ValueError, match=r"shape \(n, 4\)"):
    release(_acct(), mech, np.zeros((3, 5)))
  with pytest.raises(ValueError, match="dtype"):
    release(_acct(), mech, np.array([["a"] * 4]))
  with pytest.raises(ValueError, match="last dimension"):
    KNormMechanism(PosetBall(Poset.nhis(1)), 1.0).randomize(jax.random.key(0), jnp.zeros(4))


# ------------------------------------------------------------------ bad parameters
@pytest.mark.parametrize("eps", [0.0, -0.1, float("nan"), float("inf"), "x", True])
def test_bad_eps_everywhere(eps):
  for make in (
    lambda: LaplaceMechanism(eps),
    lambda: KNormMechanism(LpBall(2, 1), eps),
    lambda: PosetCountMechanism(Poset.nhis(1), eps),
    lambda: GaussianMechanism(eps, 1e-5),
  ):
    with pytest.raises(ValueError, match="eps"):
      make()


@pytest.mark.parametrize("sens", [0.0, -1.0, float("nan"), float("inf")])
def test_bad_sensitivity(sens):
  with pytest.raises(ValueError, match="sensitivity"):
    LaplaceMechanism(1.0, sens)


@pytest.mark.parametrize("k", [0, -1, 1.5, True, "2"])
def test_bad_group_size(k):
  with pytest.raises(ValueError, match="group_size"):
    Accountant.create(1.0, group_size=k, on_refusal=FillOnRefusal())
  with pytest.raises(ValueError, match="group_size"):
    LaplaceMechanism(1.0).cost(k)


def test_bad_budgets_and_options():
  for bad in (0.0, -1.0, float("nan"), float("inf")):
    with pytest.raises(ValueError, match="eps_budget"):
      Accountant.create(bad, on_refusal=FillOnRefusal())
  with pytest.raises(ValueError, match="delta_budget"):
    Accountant.create(1.0, delta_budget=1.5, on_refusal=FillOnRefusal())
  with pytest.raises(ValueError, match="max_releases"):
    Accountant.create(
      1.0,
      composition="advanced",
      delta_prime=1e-6,
      delta_budget=1e-5,
      on_refusal=FillOnRefusal(),
    )
  with pytest.raises(ValueError, match="composition"):
    Accountant.create(1.0, composition="rdp", on_refusal=FillOnRefusal())
  with pytest.raises(ValueError, match="eps must be < 1"):
    GaussianMechanism(1.5, 1e-5)
  with pytest.raises(ValueError, match="single PRNG key"):
    Accountant.create(
      1.0, key=jax.random.split(jax.random.key(0), 2), on_refusal=FillOnRefusal()
    )
  with pytest.raises(ValueError, match="eps_budget must be between"):
    Accountant.create(1e-30, on_refusal=FillOnRefusal())


# ------------------------------------------------------------------ interpretations
def test_hypothesis_test_bound():
  assert jaxdp.hypothesis_test_bound(math.log(2), 0.05) == pytest.approx(0.1)
  assert jaxdp.hypothesis_test_bound(math.log(2), 0.9) == pytest.approx(0.95)
  assert jaxdp.hypothesis_test_bound(10.0, 0.5) == pytest.approx(1 - 0.5 * math.exp(-10))
  assert jaxdp.hypothesis_test_bound(1.0, 0.2, delta=0.9) == 1.0
  with pytest.raises(ValueError, match="alpha"):
    jaxdp.hypothesis_test_bound(1.0, 1.5)


def test_plan_sees_releases_inside_an_already_compiled_jit():
  mech = PosetCountMechanism(Poset.nhis(1), 0.25)
  data = np.ones((5, 4), np.int8)

  @jax.jit
  def five(acct, x):
    for _ in range(5):
      acct, _ = release(acct, mech, x)
    return acct

  five(_acct(), data)  # compiled and cached
  p = jaxdp.plan(five, _acct(1.0), data)
  assert p.eps == pytest.approx(1.0) and p.refused == (4,)


def test_plan_applies_the_advanced_composition_rule():
  acct = _acct(
    2.0, delta_budget=1e-5, composition="advanced", max_releases=2, delta_prime=1e-6
  )

  def three(a, x):
    for _ in range(3):
      a, _ = release(a, LaplaceMechanism(0.01), x)
    return a

  assert jaxdp.plan(three, acct, jnp.zeros(())).refused == (2,)
  assert int(three(acct, jnp.zeros(())).refusals) == 1


def test_nested_plan():
  """A plan inside a planned function keeps its own rows (a contextvar; 0.1 crashed)."""
  m = LaplaceMechanism(0.3)

  def inner(a, x):
    return release(a, m, x)

  def outer(a, x):
    p = jaxdp.plan(
      inner, Accountant.create(1.0, key=jax.random.key(1), on_refusal=FillOnRefusal()), x
    )
    assert len(p.releases) == 1
    return release(a, m, x)[0]

  p = jaxdp.plan(outer, _acct(1.0), jnp.zeros(2))
  assert len(p.releases) == 1 and p.eps == pytest.approx(0.3, rel=1e-5)
