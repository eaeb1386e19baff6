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


def test_the_cone_table_takes_the_shell_where_it_accepts_more_and_only_then():
  """For the count ball (d = 16, k = 4) the sizes 7 to 16 take the shell proposal
  (each accepting more than the uniform target's best proposal); sizes at most k
  stay the cube, and the sum ball's table (uniform points) has no shell."""
  cone, uniform = proposal_table(16, 4, cone=True), proposal_table(16, 4)
  assert not np.any(uniform.shell)
  assert np.array_equal(np.flatnonzero(cone.shell), np.arange(7, 17))
  assert np.all(cone.log_acc[7:] > uniform.log_acc[7:])
  assert np.all(cone.a[:5] == 0) and np.all(cone.lam[:5] == 0)


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


@pytest.mark.statistical
def test_shell_halves_follow_the_cone_measure():
  """d = 16, k = 4, 30,000 rows of sizes 7 and 9 (halves 7 | 9 and 9 | 7, the shell
  proposal with a = 22 and 5, gathered per row). For each half size m, the
  direction u = x / g(x) of its 30,000 halves against the cone measure's exact law:
  the probability of the sum face (sum(u) = k, :func:`sum_face_probability`),
  E[u_1] = E[x_1] (m + 1) / m and E[u_1^2] = E[x_1^2] (m + 2) / m for x uniform in
  S(m, k) (x = g u, g ~ Beta(m, 1) independent of u; exact moments from
  :func:`slice_moments`), each within 5 standard errors. The first round's
  acceptance of each size is the table's, within 5 binomial standard errors.
  Accepting every proposal in S(m, k) moves the sum face's probability by 9.6 and
  47 standard errors (m = 7, 9); the uniform target's thresholds (floor(sum(x))
  alone) keep the law but move the first round's acceptance by 11 to 54."""
  d, k, n = 16, 4, 30_000
  sizes = np.tile([7, 9], n // 2)
  x, first = fill_halves(d, k, sizes, jax.random.key(2024))
  table = proposal_table(d, k, cone=True)
  halves = {7: [], 9: []}
  for j in (7, 9):
    rows = x[sizes == j]
    halves[j].append(rows[:, :j])
    halves[d - j].append(rows[:, j:])
    acc = first[sizes == j]
    for group, m in ((0, j), (1, d - j)):
      p = math.exp(table.log_acc[m])
      assert abs(acc[:, group].mean() - p) < Z_MAX * math.sqrt(p * (1 - p) / len(acc))
  for m, parts in halves.items():
    h = np.concatenate(parts)
    assert len(h) == n
    s, big = h.sum(axis=1), h.max(axis=1)
    assert np.all(big <= 1) and np.all(s <= k + 1e-5)
    g = np.maximum(big, s / k)
    u = h / g[:, None]
    on_sum = k * big < s
    p = float(sum_face_probability(m, k))
    assert abs(on_sum.mean() - p) < Z_MAX * math.sqrt(p * (1 - p) / n)
    _, ex1, ex2, _ = slice_moments(m, k)
    for got, want in (
      (u[:, 0], ex1 * Fraction(m + 1, m)),
      (u[:, 0] ** 2, ex2 * Fraction(m + 2, m)),
    ):
      assert abs(got.mean() - float(want)) < Z_MAX * got.std() / math.sqrt(n)


@pytest.mark.statistical
def test_count_ball_noise_with_shell_halves_has_the_exact_second_moment():
  """K-norm noise of CountBall(16, 4) (every half of more than 6 coordinates from
  the shell proposal): E[Y Y^T] = (d + 1)(d + 2) E[Z Z^T] at eps = 1 (the ball's
  exact second moment, :meth:`CountBall.second_moment`), the diagonal's and the
  off-diagonal's means within 5 standard errors, 200,000 draws. Accepting every
  proposal in S(m, k) moves them by 24 and 15 standard errors."""
  ball, n = jaxdp.CountBall(16, 4), 200_000
  y = np.asarray(jaxdp.random.knorm(jax.random.key(77), ball, 1.0, (n,)), np.float64)
  want = (ball.d + 1) * (ball.d + 2) * ball.second_moment()
  d = ball.d
  diag = (y**2).mean(axis=1)
  off = (y.sum(axis=1) ** 2 - (y**2).sum(axis=1)) / (d * (d - 1))
  for got, target in ((diag, want[0, 0]), (off, want[0, 1])):
    assert abs(got.mean() - target) < Z_MAX * got.std() / math.sqrt(n)
