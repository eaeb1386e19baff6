"""Red team: the sensitivity side of the K-norm and elliptic Gaussian mechanisms.

Every change one person can make to a released statistic must lie in the ball the
noise is calibrated to (K-norm noise), or in the ellipse that whitens to l_2
sensitivity 1 (elliptic Gaussian noise). These tests look for a neighbouring change
that lands outside, as the library computes the statistic.
"""

import jax
import numpy as np
import pytest

import jaxdp
from jaxdp import VoteBall, exact
from tests.helpers.forged import claiming


def test_exact_vote_totals_are_not_clipped_before_vote_ball_noise(monkeypatch):
  """Attack: with x64 on, an exact vote query sums its rows in float64 (up to 2^53)
  and turned the totals into int32 clipped to +-2^30 (``as_int_counts`` without
  ``wide``) before adding vote-ball noise. Clipping is 1-Lipschitz in l_p and keeps
  the sum- and count-ball norms (they are monotone in each |coordinate|), but not
  the vote-ball norm: a voter (2, 1, 0) added to totals (t, 2^30 + a, 2^30 + b)
  moves the clipped totals by (2, 0, 0), whose vote-ball norm is 4/3 (the centred
  vector (4/3, -2/3, -2/3): its largest entry over s (d - s) / 2 = 1). The release
  was then 4/3 eps-DP, not eps-DP. (KNormMechanism itself takes a vote-ball
  statistic wide, refuses it past 2^30 on the host and saturates after the noise
  under jit, as for the poset ball; the vote query bypassed that.)

  The totals needed are 2^30 (about 2^30 / (d - 1) voters); ``jaxdp.exact.LIMIT``
  is lowered to 4 here to stand in for 2^30, every clip and check reading it. The
  independent reference: ``VoteBall(3).norm`` of the change between neighbours,
  checked against an LP over the vote ball's vertices in the red-team notes (they
  agree to 5e-15 on random vectors).

  Fixed: the vote query's exact totals (noise="ball") are wide, as the poset
  counts' are: past 2^30 the host release is an error and a jitted one saturates
  after the noise.
  """
  monkeypatch.setattr(exact, "LIMIT", 4)
  mech = jaxdp.VoteQueryMechanism(3, eps=1.0, exact=True)
  rows = np.array([[0, 2, 1], [0, 1, 2]] * 2)  # totals (0, 6, 6)
  neighbour = np.concatenate([rows, [[2, 1, 0]]])  # one more voter
  with jax.enable_x64(True):
    change = np.asarray(mech.statistic(neighbour)) - np.asarray(mech.statistic(rows))
    assert float(VoteBall(3).norm(change.astype(np.float64))) <= 1.0, change
    with pytest.raises(ValueError, match="vote-ball release"):
      mech.randomize(jax.random.key(0), rows)  # past the limit: refused, not clipped


def test_a_forged_ball_does_not_poison_the_ellipse_of_an_honest_ball():
  """Attack: one caller makes ``CountBall(10, 5)`` and sets its ``k`` (frozen
  dataclass, ``object.__setattr__``) to an int subclass that is 1 but compares and
  hashes as 5, then builds ``EllipticGaussianMechanism`` on it. The lru-cached
  ellipse is computed from k = 1 (A = I, trace 10) and stored under a key equal to
  ``CountBall(10, 5)``. A later honest caller's ``CountBall(10, 5)`` gets that
  ellipse: its vertex with five ones has v^T A^-1 v = 5 (independent reference:
  ``gauge_sq`` of ``hull_points``; the clean ellipse gives 0.999999, trace 40), so
  the noise is calibrated to l_2 sensitivity 1 while the change has sqrt(5) after
  whitening. The same happens through ``jaxdp.random.knorm``'s jit cache (static
  ball): after a forged ``SumBall(10, 5)`` draw, honest sum-ball noise had mean norm
  2.94 instead of 10 (Gamma(10) at eps = 1), and the honest mechanism's draw hung.
  The poset tables are safe (keyed and rebuilt from canonical bytes).
  """
  from jaxdp.samplers import ellipse as ellipse_module

  forged = jaxdp.CountBall(10, 5)
  object.__setattr__(forged, "k", claiming(1, 5))
  ellipse_module._cached_ellipse.cache_clear()
  try:
    try:
      jaxdp.EllipticGaussianMechanism(forged, 1.0, 1e-6)
    except (TypeError, ValueError):
      pass  # refusing the forged ball is a fix too
    honest = jaxdp.CountBall(10, 5)
    worst = np.max(ellipse_module.ellipse(honest).gauge_sq(honest.hull_points()))
    assert worst <= 1.0, worst
    # every cache and jit compilation keyed by a ball (static argument) tells them
    # apart: equality and hashing compare the fields' types too
    assert forged != honest and honest == jaxdp.CountBall(10, 5)
    assert len({forged, honest, jaxdp.CountBall(10, 5)}) == 2
  finally:
    ellipse_module._cached_ellipse.cache_clear()


@pytest.mark.parametrize(
  "make, field, fake",
  [
    (lambda: jaxdp.SumBall(10, 5), "k", claiming(1, 5)),
    (lambda: jaxdp.VoteBall(5), "d", claiming(1, 5)),
    (lambda: jaxdp.LpBall(5, 2.0), "p", claiming(1.0, 2.0)),
  ],
)
def test_a_ball_with_a_forged_field_is_not_equal_to_the_honest_one(make, field, fake):
  """The same forgery on the other balls that key caches and jit compilations: a
  field replaced by a subclass that compares and hashes as the honest value. The
  forged ball must differ from the honest one, so they share no cache entry; honest
  balls built alike stay equal, with equal hashes."""
  forged = make()
  object.__setattr__(forged, field, fake)
  honest = make()
  assert forged != honest and honest == make() and hash(honest) == hash(make())
  assert len({forged, honest, make()}) == 2
