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
