"""Exact, float-safe noise: the ideal real noise rounded exactly to the integers, and
the discrete Gaussian.

Floating-point noise leaks (Mironov 2012): the set of floats that ``x + noise`` can
produce depends on ``x``. The samplers here return *integers*: the exact rounding of
the ideal real noise (a real Laplace variate, a real K-norm vector) in units of a
grid. Rounding is postprocessing, so adding the integer noise to an integer
statistic is exactly as private as the ideal real mechanism, and no float ever
touches the data. The law of the integer noise does not depend on the data at all.

How the exact rounding is computed (interval refining):

* Each exponential variate is ``E = -log U`` with ``U = 1 - V`` and ``V`` uniform in
  [0, 1), whose binary digits are random bits. The fast pass reads the first 52
  digits, so ``V`` lies in a dyadic interval ``[j, j + 1) 2^-52`` whose ends are
  exact floats, and ``E`` in an interval computed with float64 ``log``.
* The noise is ``b * sum_i c_i E_i`` with integer coefficients ``c_i`` in {-1, 0, 1}
  (Laplace: one signed exponential; the poset-ball K-norm noise: ``D + 1``
  exponentials on the vertices of a uniformly chosen simplex, see
  :mod:`jaxdp.samplers`), or ``b * R * Z`` for the l_inf ball (R a sum of
  exponentials, Z = 2U - 1 with U's digits read like V's), the sum ball (Z a
  uniform point of the cube slice with random signs, by rejection whose every
  decision is exact, :mod:`jaxdp.exact.slices`), the vote ball (Z linear in the
  uniforms once the lattice rounding's choice is decided exactly) and the l_2 ball (Z from
  Box-Muller normals, intervals widened at every step, see :mod:`jaxdp.exact.l2`),
  so every coordinate gets an interval. It is widened by
  ``MARGIN * b * sum_i |c_i| E_i`` (2^-40 relative), which bounds every float64
  rounding in the sum (at most 2^-47 relative for up to 64 terms) plus the
  platform's ``log`` error.
* If the interval of every coordinate lies strictly inside one rounding cell
  ``(k - 1/2, k + 1/2)``, the rounding is ``k``: settled. Otherwise the sample is
  *refined*: 192 more digits of each ``V`` are drawn and a host callback recomputes
  the intervals with Python's ``decimal`` at 100 significant digits (its ``ln`` is
  correctly rounded) plus an absolute margin of 1e-80. A sample still unsettled
  then (probability below 2^-150) raises an error; nothing is ever guessed.
* Every sampler refuses, before drawing, a scale above :func:`max_scale` of the
  noise's dimension (:mod:`~jaxdp.exact.limits`), so the noise leaves +-2^30 (which
  the host refinement refuses at run time) with probability below 2^-128.

What is proved and what is assumed:

* Proved (given a uniform bit source): every discrete choice is exact (the object of
  the poset ball is an exactly uniform integer rank in [0, N(P)) unranked with
  integer tables, in 128-bit limbs when N(P) >= 2^61 (:mod:`~jaxdp.exact.wide`);
  for a forest numbered in preorder the rank gives A and an exactly uniform
  permutation both extensions (:mod:`~jaxdp.exact.forest`); for larger
  series-parallel posets, exact lazy choices down the decomposition tree
  (:mod:`~jaxdp.exact.tree`); the Laplace sign is one bit), the fast pass's
  intervals contain the ideal values when the platform's float64 ``log`` has
  relative error at most 2^-44, and the host refinement is rigorous.
* Assumed: that ``log`` error bound on the platform (and for l_2 noise, float64
  ``cos``/``sin`` within 2^-44 absolute on [0, 2 pi) and ``sqrt``, ``/`` within a
  few ulps). The test suite measures it
  against ``mpmath`` at 200 bits over 4 * 10^5 inputs (observed: 0.5 ulp = 2^-53 on
  XLA:CPU) and checks the fast pass against a ``decimal`` recomputation from the same
  bits; the margin is 2^9 times the bound.
* Not covered: timing. Refinement makes the run time depend on the random bits
  (never on the data); the rare host round trip is observable.

The discrete Gaussian (:func:`discrete_gaussian`, Canonne, Kamath & Steinke 2020) needs
no rounding: it is drawn by inversion of its exact distribution function, from a
64-bit table on the device and, in the rare case the table does not settle a
sample, in ``decimal`` on the host (:mod:`~jaxdp.exact.gaussian`).

Modules: :mod:`~jaxdp.exact.samplers` (Laplace, poset-ball and l_inf K-norm noise),
:mod:`~jaxdp.exact.sum_ball` (sum-ball K-norm noise), :mod:`~jaxdp.exact.slices`
(uniform cube-slice points by exactly decided rejection), :mod:`~jaxdp.exact.vote_ball`
(vote-ball K-norm noise, the lattice rounding decided exactly),
:mod:`~jaxdp.exact.limits` (the scale limits per dimension),
:mod:`~jaxdp.exact.l2` (l_2 K-norm noise and its fast pass),
:mod:`~jaxdp.exact.intervals` (the fast pass), :mod:`~jaxdp.exact.refine` (the host
refinement), :mod:`~jaxdp.exact.decimal_trig` (pi, cos and sin in ``decimal``),
:mod:`~jaxdp.exact.choices` (exact discrete choices),
:mod:`~jaxdp.exact.forest` (a forest's extensions from a uniform permutation),
:mod:`~jaxdp.exact.wide` (128-bit integer ranks and their unranking),
:mod:`~jaxdp.exact.tree` (the decomposition-tree objects) and
:mod:`~jaxdp.exact.gaussian` (the discrete Gaussian).

References:
  I. Mironov, "On significance of the least significant bits for differential
  privacy", CCS 2012.
  C. Haney et al., "Precision-based attacks and interval refining: how to break, then
  fix, differential privacy on finite computers", 2022.
  M. Joseph, M. Ribero, A. Yu, "Privately Counting Partially Ordered Data", ICLR 2025.
"""

from jaxdp.exact.choices import simplex_coefficients, uniform_below, unrank
from jaxdp.exact.count_ball import MAX_COUNT_D, count_knorm
from jaxdp.exact.gaussian import MAX_SIGMA, discrete_gaussian, sigma_quarters
from jaxdp.exact.intervals import (
  FAST_BITS,
  LIMIT,
  MARGIN,
  chain_round,
  knorm_round,
  laplace_round,
  linf_round,
)
from jaxdp.exact.l2 import L2_PAD, MAX_L2_D, TRIG_PAD, l2_knorm, l2_round, l2_rows
from jaxdp.exact.limits import MAX_SCALE, NOISE_LIMIT, max_scale, tail_quantile
from jaxdp.exact.refine import (
  HOST_DIGITS,
  REFINE_WORDS,
  refine_l2_sample,
  refine_linf_sample,
  refine_sample,
)
from jaxdp.exact.samplers import (
  CHUNK,
  laplace,
  linf_knorm,
  poset_knorm,
  poset_path,
)
from jaxdp.exact.sum_ball import MAX_SUM_D, sum_knorm
from jaxdp.exact.vote_ball import MAX_VOTE_D, vote_knorm

__all__ = [
  # the samplers
  "discrete_gaussian",
  "l2_knorm",
  "laplace",
  "linf_knorm",
  "poset_knorm",
  "count_knorm",
  "sum_knorm",
  "vote_knorm",
  # their limits and constants
  "CHUNK",
  "FAST_BITS",
  "HOST_DIGITS",
  "L2_PAD",
  "LIMIT",
  "MARGIN",
  "MAX_COUNT_D",
  "MAX_L2_D",
  "MAX_SCALE",
  "MAX_SIGMA",
  "MAX_SUM_D",
  "MAX_VOTE_D",
  "NOISE_LIMIT",
  "REFINE_WORDS",
  "TRIG_PAD",
  # the exact steps the mechanisms and tests build on
  "chain_round",
  "knorm_round",
  "l2_round",
  "l2_rows",
  "laplace_round",
  "linf_round",
  "max_scale",
  "poset_path",
  "refine_l2_sample",
  "refine_linf_sample",
  "refine_sample",
  "sigma_quarters",
  "simplex_coefficients",
  "tail_quantile",
  "uniform_below",
  "unrank",
]
