"""Attacks on the release products an agency publishes beside a survey table: the error
bars (``jaxdp.error_bars``), the bootstrap bars of a consistent table
(``jaxdp.consistent_error_bars``), the advice (``jaxdp.advise``) and their inputs.
Each failed on the code it was written against.

Coverage is checked against independent computations: scipy's Gamma and Beta laws
for the l_inf and l_2 balls' coordinates (a K-norm coordinate is ``b R Z_i``, R ~
Gamma(D + 1), Z uniform in the ball: for the l_2 ball ``Z_i^2 ~ Beta(1/2, (D + 1)/2)``,
for the l_inf ball ``Z_i`` uniform on [-1, 1]).
"""

import collections
import itertools
import math

import jax
import numpy as np
import pytest
from scipy import integrate, stats

import jaxdp
from jaxdp.mechanisms.base import exact_scale
from jaxdp.reporting import bars as bars_module
from jaxdp.samplers.balls import LpBall

POSET = jaxdp.Poset.from_prerequisites({"a": [], "b": ["a"]}, name="two")


@pytest.fixture
def fresh_cache(monkeypatch):
  """An empty error-bar cache for the test (the honest entry must not be there yet)."""
  monkeypatch.setattr(bars_module, "_CACHE", collections.OrderedDict())


def _linf_abs_cdf(t: float, dim: int, scale: float) -> float:
  """P(|b R U| <= t), R ~ Gamma(dim + 1), U uniform on [-1, 1], by quadrature."""
  inside = stats.gamma.cdf(t, dim + 1, scale=scale)
  tail = integrate.quad(
    lambda r: t / r * stats.gamma.pdf(r, dim + 1, scale=scale), t, np.inf, epsrel=1e-11
  )[0]
  return inside + tail


def _l2_miss(s: float, dim: int, scale: float) -> float:
  """P(|b R Z_1| >= s) for Z uniform in the l_2 ball of R^dim, by quadrature."""

  def f(r):
    u = min(1.0, (s / (scale * r)) ** 2)
    return stats.gamma.pdf(r, dim + 1) * stats.beta.sf(u, 0.5, (dim + 1) / 2)

  return integrate.quad(f, s / scale, np.inf, limit=400, epsabs=0, epsrel=1e-10)[0]


def _try(fn):
  """Run a forger's call; its own error (a refusal) is the forger's concern."""
  try:
    fn()
  except (TypeError, ValueError):
    pass


class _Grid(float):
  """A grid of 0.5 that compares and hashes as 0.5 but scales the bars by 1/1000."""

  def __eq__(self, other):
    return float(self) == other

  def __hash__(self):
    return hash(float(self))

  def __mul__(self, other):
    return float(self) * other / 1000

  def __rmul__(self, other):
    return other * float(self) / 1000


def test_a_forged_grid_does_not_poison_an_honest_mechanisms_error_bars(fresh_cache):
  # The error-bar cache is keyed by the noise law, whose ``unit`` was the mechanism's
  # grid object itself: a float subclass equal to 0.5 in == and hash made the forger's
  # law equal to the honest one, and the bars it computed (1000 times narrower) were
  # served to every honest caller of the same mechanism.
  forged = jaxdp.LaplaceMechanism(1.0, exact=True, grid=0.5)
  object.__setattr__(forged, "grid", _Grid(0.5))
  _try(lambda: jaxdp.error_bars(forged, shape=(3,)))
  honest = jaxdp.LaplaceMechanism(1.0, exact=True, grid=0.5)
  got = jaxdp.error_bars(honest, shape=(3,))
  # 3.5 grid units of sensitivity at eps = 1, rounded noise: smallest integer t with
  # 1 - exp(-(t + 1/2) / b) >= 0.95, widened by half a step
  b = exact_scale(1.0 / 0.5 + 3, 1.0)
  t = math.ceil(-b * math.log(0.05) - 0.5)
  assert float(got.upper) == pytest.approx(t * 0.5 + 0.25)


class _FalseButTruthy(int):
  """0 that compares and hashes as False but is true: ``rounded`` for the forger."""

  def __eq__(self, other):
    return other is False or other == 0

  def __ne__(self, other):
    return not self.__eq__(other)

  def __hash__(self):
    return hash(False)

  def __bool__(self):
    return True


def test_a_forged_exact_flag_does_not_give_a_float_mechanism_integer_bars(fresh_cache):
  # ``rounded`` came from the mechanism's ``exact`` as it was: an int that equals False
  # but is truthy (and an eps two ulps larger, so the exact scale equals the honest
  # float scale) made a law equal to the honest float law whose bars were computed as
  # integer ones: t = 5 for l_inf noise in 3 dimensions, whose real 0.95 quantile is
  # 5.19, so the honest caller's intervals covered less than 95%.
  eps = 1.0
  while exact_scale(1.0, eps) != 1.0:
    eps = math.nextafter(eps, 2.0)
  forged = jaxdp.KNormMechanism(LpBall(3, math.inf), 1.0)
  object.__setattr__(forged, "exact", _FalseButTruthy(0))
  object.__setattr__(forged, "eps", eps)
  _try(lambda: jaxdp.error_bars(forged))
  got = jaxdp.error_bars(jaxdp.KNormMechanism(LpBall(3, math.inf), 1.0))
  for t in got.upper:
    assert _linf_abs_cdf(float(t), 3, 1.0) >= 0.95 - 1e-9


class _Ball(LpBall):
  """An l_inf ball that claims to be the honest one but reports another dimension
  after the first read (its law keeps dim 3; its quantiles are computed for dim 1)."""

  reads = itertools.count()

  def __eq__(self, other):
    return isinstance(other, LpBall) and (other.d, other.p) == (self.d, self.p)

  def __hash__(self):
    return hash(LpBall(self.d, self.p))

  @property
  def dim(self):
    return 3 if next(_Ball.reads) == 0 else 1


def test_a_ball_subclass_does_not_share_an_honest_balls_error_bars(fresh_cache):
  # KNormMechanism accepts subclasses of the balls, and the law compared its ball
  # with the ball's own ==: a subclass claiming equality shared the honest entry.
  _try(lambda: jaxdp.error_bars(jaxdp.KNormMechanism(_Ball(3, math.inf), 1.0)))
  got = jaxdp.error_bars(jaxdp.KNormMechanism(LpBall(3, math.inf), 1.0))
  for t in got.upper:
    assert _linf_abs_cdf(float(t), 3, 1.0) == pytest.approx(0.95, abs=1e-9)


class _Label(str):
  def __format__(self, spec):
    return "FORGED"

  def __str__(self):
    return "FORGED"


def test_forged_question_labels_do_not_reach_an_honest_callers_table(fresh_cache):
  # A poset's labels do not take part in its equality; the law's names were the label
  # objects themselves, so str subclasses that equal "a" and "b" but print otherwise
  # were printed in the honest caller's table of bars.
  forged = jaxdp.Poset.from_prerequisites({"a": [], "b": ["a"]}, name="two")
  object.__setattr__(forged, "labels", (_Label("a"), _Label("b")))
  _try(lambda: jaxdp.error_bars(jaxdp.PosetCountMechanism(forged, 1.0, exact=True)))
  got = jaxdp.error_bars(jaxdp.PosetCountMechanism(POSET, 1.0, exact=True))
  assert "FORGED" not in str(got)
  assert all(type(n) is str for n in got.names)


def test_monte_carlo_bars_do_not_claim_a_level_their_draws_cannot_bound(fresh_cache):
  # The l_2 ball's bars are Monte Carlo: integer t above the upper end of the
  # quantile's 95% confidence interval, "so that P(|round(Y_i)| <= t) >= level holds
  # with 95% confidence". At level 0.999 from 1,000 draws that rank is past the last
  # draw and was clipped to it: t was the largest draw, below the 0.999 quantile with
  # probability 0.999^1000 = 0.37, and coverage read 1.0. With this key one
  # coordinate's interval missed with probability 0.0034, 3.4 times 1 - level.
  # Such bars must be refused, or hold.
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, noise="l2", exact=True)
  scale = jaxdp.reporting.noise_law(mech).scale
  try:
    got = jaxdp.error_bars(mech, 0.999, num_samples=1_000)
  except ValueError as e:
    assert "num_samples" in str(e) and "0.999" in str(e)
    return
  for t in got.upper:
    assert _l2_miss(float(t) + 0.5, mech.dim, scale) <= 1e-3


def test_enough_draws_for_a_high_level_still_give_bars(fresh_cache):
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, noise="l2", exact=True)
  scale = jaxdp.reporting.noise_law(mech).scale
  got = jaxdp.error_bars(mech, 0.99, num_samples=20_000)
  for t in got.upper:
    assert _l2_miss(float(t) + 0.5, mech.dim, scale) <= 1e-2


@pytest.mark.parametrize("level", ["0.95", b"0.95"])
def test_a_level_given_as_text_is_refused(level):
  # float("0.95") reads a string: the level was accepted from text silently.
  mech = jaxdp.LaplaceMechanism(1.0)
  with pytest.raises(TypeError, match="level must be a number"):
    jaxdp.error_bars(mech, level)


@pytest.mark.parametrize(
  "released",
  [
    np.array([3.0, 2.0, np.inf]),
    np.array([3, 2, np.iinfo(np.int32).min], np.int64),  # a refused int32, widened
  ],
)
def test_an_interval_is_not_given_around_a_refused_or_infinite_release(released):
  # interval() refused NaN and the dtype's own minimum, but not an infinity nor a
  # refused int32 release stored in int64 (jaxdp.consistent refuses both): it gave
  # intervals around -2**31 or inf.
  bars = jaxdp.error_bars(jaxdp.PosetCountMechanism(POSET, 1.0, exact=True))
  with pytest.raises(ValueError, match="refused release"):
    bars.interval(released)


@pytest.mark.parametrize("released", [["3", "2", "1"], [True, True, False]])
def test_an_interval_is_not_given_around_text_or_booleans(released):
  # np.asarray(released, float64) converted strings and bools silently.
  bars = jaxdp.error_bars(jaxdp.PosetCountMechanism(POSET, 1.0, exact=True))
  with pytest.raises(TypeError, match="released must hold"):
    bars.interval(released)


def test_bootstrap_bars_refuse_a_level_their_replicates_cannot_reach():
  # The bootstrap's ends are the (1 -+ level) / 2 percentiles of the replicates, with
  # the order-statistic ranks of their 95% confidence intervals as mc_error. At level
  # 0.999 from 1,000 replicates the upper rank (about 999.5 + 1.4) was clipped to the
  # last replicate: the end was the largest of 1,000 values (below the 0.9995
  # quantile with probability 0.61), and mc_error the half-distance between clipped
  # ranks.
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, exact=True)
  z = np.array([50, 20, 5])
  with pytest.raises(ValueError, match="num_samples = 1,000 .* level 0.999"):
    jaxdp.consistent_error_bars(z, mech, 0.999, integer=True, num_samples=1_000)
  bars = jaxdp.consistent_error_bars(z, mech, 0.9, integer=True, num_samples=1_000)
  assert bars.mc_error.shape == (3,)


@pytest.mark.parametrize(
  "counts, error, match",
  [
    ([True, True, False], TypeError, "assumed_counts must hold numbers"),
    (["10", "3", "1"], TypeError, "assumed_counts must hold numbers"),
    ([1e300, 1e299, 1e298], ValueError, "at most 2\\*\\*53.*1e\\+300 at index 0"),
    ([10.0, -1.0, 0.0], ValueError, "-1.0 at index 1"),
  ],
)
def test_advice_refuses_assumed_counts_that_are_not_counts(counts, error, match):
  # Booleans and strings were converted to counts silently; at 1e300 respondents
  # float64 swallows the noise, and the error after consistency read 0 (no error at
  # all) for every mechanism. The message did not name the bad value.
  with pytest.raises(error, match=match):
    jaxdp.advise(POSET, 1.0, assumed_counts=counts, num_samples=500)


@pytest.mark.parametrize(
  "poset",
  [jaxdp.Poset.nhis(1), jaxdp.Poset.from_edges(4, [(0, 2), (1, 2), (1, 3)])],
  ids=["series-parallel", "N"],
)
@pytest.mark.parametrize("jitted", [False, True])
def test_consistent_takes_an_empty_batch(poset, jitted):
  # An empty batch of a series-parallel poset (NHIS) failed with "ZeroDivisionError:
  # integer modulo by zero" (a reshape(0, -1) in the junction solver); the other
  # paths returned an empty batch.
  y = np.zeros((0, poset.d + 1), np.float32)

  def run(v):
    return jaxdp.consistent(v, poset, integer=True)

  z = (jax.jit(run) if jitted else run)(y)
  assert z.shape == (0, poset.d + 1)
  z, cert = jaxdp.consistent(y, poset, certificate=True)
  assert z.shape == (0, poset.d + 1) and cert.ok.shape == (0,)


def test_consistent_refuses_a_certificate_flag_that_is_not_a_bool():
  # certificate="no" is truthy: a pair came back where counts were expected.
  with pytest.raises(TypeError, match="certificate must be True or False; got 'no'"):
    jaxdp.consistent(np.ones(3), POSET, certificate="no")


@pytest.mark.parametrize("shape", ["abc", (2.5,), (-1,), 7])
def test_error_bars_check_a_shape_they_do_not_need(shape):
  # shape is read only by an exact Laplace mechanism on a grid; for every other
  # mechanism any value, a string included, was accepted and ignored.
  with pytest.raises((TypeError, ValueError), match="shape"):
    jaxdp.error_bars(jaxdp.LaplaceMechanism(1.0), shape=shape)


def test_a_poset_changed_while_its_bars_are_computed_does_not_file_them_as_another(
  fresh_cache, monkeypatch
):
  # The law (the cache's key) held the caller's poset itself, and the key was hashed
  # when the bars were stored, after they were computed: another thread that changed
  # the poset's relation meanwhile (object.__setattr__) filed the chain's bars under
  # the antichain's relation, for every honest caller of the antichain, whose
  # follow-ups' noise is wider (+-5 at 95%, against the chain's +-3 and +-4).
  chain = jaxdp.Poset.from_edges(3, [(0, 1), (1, 2)])
  antichain = jaxdp.Poset.from_edges(3, [])
  victim = jaxdp.Poset.from_edges(3, [(0, 1), (1, 2)])
  compute = bars_module._compute

  def racing(*args):
    out = compute(*args)
    object.__setattr__(victim, "relation", antichain.relation)  # the other thread
    return out

  monkeypatch.setattr(bars_module, "_compute", racing)
  _try(lambda: jaxdp.error_bars(jaxdp.PosetCountMechanism(victim, 1.0, exact=True)))
  monkeypatch.setattr(bars_module, "_compute", compute)
  got = jaxdp.error_bars(jaxdp.PosetCountMechanism(antichain, 1.0, exact=True))
  monkeypatch.setattr(bars_module, "_CACHE", collections.OrderedDict())
  want = jaxdp.error_bars(jaxdp.PosetCountMechanism(antichain, 1.0, exact=True))
  other = jaxdp.error_bars(jaxdp.PosetCountMechanism(chain, 1.0, exact=True))
  assert not np.array_equal(want.upper, other.upper)  # the attack would show
  np.testing.assert_array_equal(got.upper, want.upper)


@pytest.mark.parametrize("bad", [[10, 5, "2"], [10, 5, True]])
def test_bootstrap_refuses_text_and_booleans_inside_an_object_array(bad):
  # An object array (numpy's dtype for mixed Python values) passed the dtype check and
  # was converted by np.asarray(..., float64): the string "2" was bootstrapped as 2.
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, exact=True)
  with pytest.raises(TypeError, match="released must hold counts"):
    jaxdp.consistent_error_bars(np.array(bad, dtype=object), mech, 0.9, num_samples=500)
