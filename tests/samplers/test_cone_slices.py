"""The cube slices' proposals for the cone measure (the count ball's halves) against
the cone measure's exact law and the proposal's exact acceptance, in rational
arithmetic."""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp.samplers.cube_slice import (
  fold_proposal,
  log_slice_volumes,
  rejection_fill,
  shell_proposal,
  slice_moments,
)
from jaxdp.samplers.slice_kernel import proposal_table
from tests.helpers.slices import two_group_candidates

Z_MAX = 5.0  # every stated test: within 5 standard errors


def irwin_hall(n, s, power=None):
  """P(U_1 + ... + U_n <= s) (``power`` = n) or its density (``power`` = n - 1, times
  1 / (n - 1)! instead of 1 / n!) at an integer s, exactly."""
  power = n if power is None else power
  total = sum((-1) ** i * math.comb(n, i) * Fraction(s - i) ** power for i in range(s + 1))
  return total / math.factorial(power)


def sum_face_probability(m, k):
  """The cone measure of the face sum(x) = k of S(m, k) (m > k): the volume of the
  cone over it, (k / m) f_m(k) (height k / sqrt(m), area sqrt(m) f_m(k), f_m the
  Irwin-Hall density), over vol S(m, k)."""
  return Fraction(k, m) * irwin_hall(m, k, m - 1) / irwin_hall(m, k)


def exact_acceptance(m, k, a):
  """The shell proposal's acceptance in rational arithmetic: vol S(m, k) m! / a^m
  sum_i P(floor(k g) = i) C(a + m - 1 - i, m), g ~ Beta(m, 1)."""
  mean = sum(
    (Fraction(i + 1, k) ** m - Fraction(i, k) ** m) * math.comb(a + m - 1 - i, m)
    for i in range(k)
  )
  return irwin_hall(m, k) * math.factorial(m) * mean / Fraction(a) ** m


def test_sum_face_probability_and_the_cube_faces_make_up_the_volume():
  """The cone over the sum face and the m cones over the cube faces x_i = 1 (height
  1, base S(m - 1, k - 1)) fill S(m, k): (k / m) f_m(k) + F_(m-1)(k - 1) = F_m(k)."""
  for m, k in [(7, 4), (9, 4), (25, 10), (40, 13)]:
    cube_faces = irwin_hall(m - 1, k - 1)
    assert sum_face_probability(m, k) + cube_faces / irwin_hall(m, k) == 1


@pytest.mark.parametrize("m, k", [(7, 4), (9, 4), (25, 10), (30, 13), (60, 7)])
def test_shell_proposal_takes_the_best_a_and_states_its_exact_acceptance(m, k):
  """``shell_proposal``'s a maximises the exact (rational) acceptance over every
  integer a in [k, k + 64 m], its stated acceptance is that one's (relative 1e-9),
  and it is at least the uniform target's (the threshold of floor(sum(x)) alone)."""
  a, thresholds, log_acc = shell_proposal(m, k, log_slice_volumes(m, k)[m])
  exact = {b: exact_acceptance(m, k, b) for b in range(k, k + 64 * m + 1)}
  assert a == max(exact, key=exact.get)
  assert math.isclose(math.log(exact[a]), log_acc, rel_tol=1e-9, abs_tol=1e-9)
  uniform = (
    irwin_hall(m, k) * math.factorial(m) * math.comb(a + m - k, m) / Fraction(a) ** m
  )
  assert exact[a] > uniform
  want = [math.log(math.comb(a + m - 1 - i, m) / math.comb(a + m - k, m)) for i in range(k)]
  np.testing.assert_allclose(thresholds, want, rtol=1e-12, atol=1e-12)


def test_the_cone_table_takes_the_best_proposal_for_each_size():
  """For the count ball (d = 16, k = 4): sizes 5 to 8 take the folded cube and 9 to
  16 the shell proposal, each the one of the largest stated acceptance among the
  folded cube, the shell and the uniform target's best, and above the uniform
  target's best; sizes at most k stay the cube; the sum ball's table (uniform
  points) has neither."""
  d, k = 16, 4
  cone, uniform = proposal_table(d, k, cone=True), proposal_table(d, k)
  assert not np.any(uniform.shell) and not np.any(uniform.fold)
  assert np.array_equal(np.flatnonzero(cone.fold), np.arange(5, 9))
  assert np.array_equal(np.flatnonzero(cone.shell), np.arange(9, 17))
  logvol = log_slice_volumes(d, k)
  for m in range(k + 1, d + 1):
    options = [
      fold_proposal(m, k, logvol[m]),
      shell_proposal(m, k, logvol[m])[2],
      uniform.log_acc[m],
    ]
    assert cone.log_acc[m] == max(options) > uniform.log_acc[m]
  assert np.all(cone.a[:5] == 0) and np.all(cone.lam[:5] == 0)
  assert np.all(cone.a[5:9] == 0) and np.all(cone.lam[5:9] == 0)


def test_fold_acceptance_at_m_2k_is_one():
  """At m = 2 k the folded cube accepts every proposal: vol S(2 k, k) = 1/2 (the
  Irwin-Hall law is symmetric about k), and the fold maps the upper half of the cube
  onto the lower one, so its stated acceptance 2 vol S is 1."""
  for k in (1, 3, 10, 40):
    assert irwin_hall(2 * k, k) == Fraction(1, 2)
    log_acc = fold_proposal(2 * k, k, log_slice_volumes(2 * k, k)[2 * k])
    assert abs(log_acc) < 1e-9


def fill_halves(d, k, sizes, key):
  """Rows of two groups (the first ``sizes`` coordinates and the rest), each filled
  by its first accepted proposal of the count ball's table; also the first round's
  acceptance of each group."""
  candidates = two_group_candidates(proposal_table(d, k, cone=True), k, sizes, d)

  @jax.jit
  def fill(key):
    k_fill, k_first = jax.random.split(key)
    first = candidates(k_first, None)[1]
    return rejection_fill(candidates, k_fill, len(sizes), d, 2, jnp.float32), first

  x, first = fill(key)
  return np.asarray(x, np.float64), np.asarray(first)


def cone_half_scores(d, k, sizes, n, key):
  """Rows of two groups of sizes j | d - j for j in ``sizes`` (n / len(sizes) rows
  each, the count ball's table): per half size m, the z-scores (observed minus exact,
  over the standard error) of the first round's acceptance (the table's) and of the
  direction u = x / g(x) of its halves against the cone measure's exact law: the
  probability of the sum face (sum(u) = k, :func:`sum_face_probability`), E[u_1] =
  E[x_1] (m + 1) / m and E[u_1^2] = E[x_1^2] (m + 2) / m for x uniform in S(m, k)
  (x = g u, g ~ Beta(m, 1) independent of u; exact moments from
  :func:`slice_moments`). An acceptance of 1 scores the rejections' count."""
  row_sizes = np.tile(sizes, n // len(sizes))
  x, first = fill_halves(d, k, row_sizes, key)
  table = proposal_table(d, k, cone=True)
  halves, accepted = {}, {}
  for j in sizes:
    rows, acc = x[row_sizes == j], first[row_sizes == j]
    for group, m, part in ((0, j, rows[:, :j]), (1, d - j, rows[:, j:])):
      halves.setdefault(m, []).append(part)
      accepted.setdefault(m, []).append(acc[:, group])
  scores = {}
  for m, parts in halves.items():
    acc = np.concatenate(accepted[m])
    p = math.exp(table.log_acc[m])
    if p > 1 - 1e-9:  # (log_acc rounds within 1e-15 of 0)
      z = [float(np.sum(~acc))]
    else:
      z = [(acc.mean() - p) / math.sqrt(p * (1 - p) / len(acc))]
    h = np.concatenate(parts)
    s, big = h.sum(axis=1), h.max(axis=1)
    assert np.all(big <= 1) and np.all(s <= k + 1e-5)
    g = np.maximum(big, s / k)
    u = h / g[:, None]
    on_sum = k * big < s
    q = float(sum_face_probability(m, k))
    z.append((on_sum.mean() - q) / math.sqrt(q * (1 - q) / len(h)))
    _, ex1, ex2, _ = slice_moments(m, k)
    for got, want in (
      (u[:, 0], ex1 * Fraction(m + 1, m)),
      (u[:, 0] ** 2, ex2 * Fraction(m + 2, m)),
    ):
      z.append((got.mean() - float(want)) / (got.std() / math.sqrt(len(h))))
    scores[m] = z
  return scores


@pytest.mark.statistical
def test_shell_halves_follow_the_cone_measure():
  """d = 20, k = 4, 30,000 rows of sizes 9 and 11 (halves 9 | 11 and 11 | 9, the
  shell proposal with a = 5 and 4, gathered per row): for each half size, 30,000
  halves, the first round's acceptance and the direction's law
  (:func:`cone_half_scores`) within 5 standard errors. Accepting every proposal in
  S(m, k) moves the sum face's probability by 45 and 49 standard errors (m = 9,
  11) and the first round's acceptance by 74 and 75; the uniform target's
  thresholds (floor(sum(x)) alone) keep the law but move the acceptance by 79 and
  131."""
  table = proposal_table(20, 4, cone=True)
  assert table.shell[9] and table.shell[11] and (table.a[9], table.a[11]) == (5, 4)
  scores = cone_half_scores(20, 4, [9, 11], 30_000, jax.random.key(2024))
  assert sorted(scores) == [9, 11]
  for z in scores.values():
    assert max(abs(v) for v in z) < Z_MAX


@pytest.mark.statistical
def test_folded_halves_follow_the_cone_measure():
  """d = 14, k = 4, 30,000 rows of sizes 6 and 7 (halves 6 | 8 and 7 | 7, all three
  sizes the folded cube): for each half size, its first round's acceptance and the
  direction's law (:func:`cone_half_scores`) within 5 standard errors (15,000,
  30,000 and 15,000 halves); at m = 8 = 2 k every proposal is accepted. Without the
  thinning by one half (every folded point in S(m, k) accepted) the first round's
  acceptance moves by 33 and 76 standard errors (m = 6, 7) and the sum face's
  probability by 20 (m = 7); without the fold (the cube alone) the acceptance moves
  by 7 and 49, and m = 8 rejects about half its proposals."""
  table = proposal_table(14, 4, cone=True)
  assert np.array_equal(np.flatnonzero(table.fold), np.arange(5, 9))
  scores = cone_half_scores(14, 4, [6, 7], 30_000, jax.random.key(31))
  assert sorted(scores) == [6, 7, 8]
  assert scores[8][0] == 0  # no m = 8 proposal rejected
  for z in scores.values():
    assert max(abs(v) for v in z) < Z_MAX


@pytest.mark.statistical
def test_count_ball_noise_with_shell_and_folded_halves_has_the_exact_second_moment():
  """K-norm noise of CountBall(16, 4) (halves of 5 to 8 coordinates from the folded
  cube, of 9 to 16 from the shell proposal): E[Y Y^T] = (d + 1)(d + 2) E[Z Z^T] at
  eps = 1 (the ball's exact second moment, :meth:`CountBall.second_moment`), the
  diagonal's and the off-diagonal's means within 5 standard errors, 200,000 draws.
  Accepting every proposal in S(m, k) moves them by 19 and 12 standard errors."""
  ball, n = jaxdp.CountBall(16, 4), 200_000
  y = np.asarray(jaxdp.random.knorm(jax.random.key(77), ball, 1.0, (n,)), np.float64)
  want = (ball.d + 1) * (ball.d + 2) * ball.second_moment()
  d = ball.d
  diag = (y**2).mean(axis=1)
  off = (y.sum(axis=1) ** 2 - (y**2).sum(axis=1)) / (d * (d - 1))
  for got, target in ((diag, want[0, 0]), (off, want[0, 1])):
    assert abs(got.mean() - target) < Z_MAX * got.std() / math.sqrt(n)
