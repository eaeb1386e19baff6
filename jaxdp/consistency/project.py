"""``jaxdp.consistent``: order-consistent poset counts by Euclidean projection."""

from __future__ import annotations

import functools
import numbers

import jax
import jax.numpy as jnp
import numpy as np

from jaxdp import _checks
from jaxdp._data_checks import first_index
from jaxdp.consistency.certificate import Certificate
from jaxdp.consistency.exact import isotonic_host
from jaxdp.consistency.graph import constraint_graph
from jaxdp.consistency.solver import isotonic_batched
from jaxdp.posets import Poset
from jaxdp.typing import ArrayLike

__all__ = ["METHODS", "check_integer_range", "consistent", "default_tol", "integer_limit"]

METHODS = ("auto", "exact", "batched")


def default_tol(dtype: jnp.dtype) -> float:
  """The default relative tolerance: 1e-4 in float32 (and narrower), 1e-8 in float64."""
  return 1e-8 if jnp.finfo(dtype).bits >= 64 else 1e-4


def consistent(
  y: ArrayLike,
  poset: Poset,
  *,
  integer: bool = False,
  tol: float | None = None,
  method: str = "auto",
  certificate: bool = False,
) -> jax.Array | tuple[jax.Array, Certificate]:
  """The order-consistent counts closest to ``y``: its Euclidean projection.

  ``y = (n, c_1, ..., c_d)`` (respondents first, then one count per question, the
  statistic of :class:`~jaxdp.PosetCountMechanism`; any leading batch axes) is
  projected onto the counts a dataset can have: ``0 <= c_q <= c_p`` whenever q
  requires p (``p_q <= p_p``) and ``c_q <= n``. The true counts satisfy these, so
  the projection ``z*`` has ``||z* - x|| <= ||y - x||`` for every draw (projection
  onto a convex set is non-expansive; ``integer=True`` then rounds, which can add
  up to ``sqrt(D) / 2``, see below); it is post-processing, so it costs no privacy budget
  (Dwork & Roth 2014, Proposition 2.1). It is biased near the constraints: a count
  whose true value is near 0 comes out larger on average.

  Paths (``method``):
    * ``"exact"``: the minimum-cut partitioning algorithm on the host in float64,
      one vector at a time (:mod:`jaxdp.consistency.exact`); concrete input only.
    * ``"batched"``: the jitted solver (:mod:`jaxdp.consistency.solver`),
      chosen by the poset's structure: exact pool-adjacent-violators on a chain
      (:mod:`jaxdp.consistency.chain`, ``O(d)`` per vector) or a forest
      (:mod:`jaxdp.consistency.tree`), exact junction clamps on any other
      series-parallel poset (:mod:`jaxdp.consistency.series_parallel`); on a poset
      with an induced N, dual accelerated projected gradient, then block means;
      fixed-shape, runs under ``jit`` and ``vmap``.
    * ``"auto"`` (default): ``"exact"`` for one concrete vector, ``"batched"``
      otherwise; concrete batched vectors the solver does not certify within
      ``tol`` are solved again with ``"exact"``. Under ``jit`` only the batched
      solver runs: check ``certificate.ok`` there (non-finite input, which cannot
      be refused under ``jit``, gives non-finite output and ``ok`` False; with
      ``integer=True`` a non-finite or out-of-range vector gives ``ok`` False and
      integers that mean nothing: discard them).

  Tolerance: every returned vector satisfies the order constraints exactly in
  floating point, and the certificate bounds its distance to the exact projection:
  ``||z - z*||_2 <= distance_bound``; ``ok`` means ``distance_bound <= tol *
  max(1, max|y|)``. The exact path solves the values given, in float64 (not ``y``
  narrowed to float32 with x64 off), and its certificate is that of its float64
  solution; casting it to a float32 result moves each coordinate by at most half a
  unit in the last place and keeps it consistent (rounding is monotone), and with
  ``integer=True`` its integers are rounded from the float64 solution, exact up to
  :func:`integer_limit` whatever the float dtype (2**25 + 1 is not rounded to 2**25
  first). The batched solver works on ``y`` in the float dtype.

  Args:
    y: noisy counts, shape ``(..., d + 1)``, finite real values. Concrete ``y`` is
      converted on the host, value by value, to the float dtype of the computation:
      integers of any width (int64, uint64, Python ints of any size) become the
      nearest float, as the same values in float64 do, never wrapped through JAX's
      int32 with x64 off. A jitted caller converts its arguments itself: with x64 off
      ``jax.jit`` wraps an int64 argument to int32 before ``consistent`` sees it, so
      pass float64 there.
    poset: the :class:`~jaxdp.Poset` of the questions.
    integer: round each coordinate to the nearest integer (half to even) after
      projecting; rounding is monotone, so the result is still consistent, and it
      moves each coordinate by at most 1/2 (``sqrt(D) / 2`` in norm for ``D``
      coordinates), so the integer result need not be closer to the true counts
      than ``y``. The result has the default integer dtype (int32, counts up to
      :func:`integer_limit` = 2**31 - 1; int64 with x64): concrete ``y`` beyond it is
      refused, and under ``jit`` the certificate's ``ok`` is False there.
    tol: relative tolerance of the certificate (default :func:`default_tol` of the
      computation dtype).
    method: ``"auto"``, ``"exact"`` or ``"batched"`` (see above).
    certificate: also return the :class:`~jaxdp.consistency.Certificate`.

  Returns:
    The consistent counts, shape of ``y``, in ``y``'s float dtype (the default float
    dtype for integer input: float32 holds integers exactly only up to 2**24), or
    integers with ``integer=True``; with
    ``certificate=True`` the pair ``(counts, certificate)``, the certificate's
    fields of shape ``y.shape[:-1]``.

  Raises:
    ArgTypeError: ``poset`` is not a Poset, ``y`` not numeric (bool included),
      ``integer`` or ``certificate`` not a bool.
    ValueError: ``y``'s last axis is not ``d + 1``, ``y`` has NaN or inf, finite
      values beyond the computation's float dtype (float64 past float32's range
      with x64 off, Python ints past float64's) or past its largest value over
      ``d + 1`` (a vector's sums could overflow; concrete input), or, for signed
      integer ``y``, its dtype's minimum or JAX integer dtype's (a refused
      release's mark, also when stored wider), or
      values beyond :func:`integer_limit` with ``integer=True`` (concrete input);
      ``method`` or ``tol`` is invalid.

  References:
    Barlow, Bartholomew, Bremner & Brunk, "Statistical Inference under Order
    Restrictions" (1972); Hay, Rastogi, Miklau & Suciu, "Boosting the accuracy of
    differentially private histograms through consistency", VLDB 2010.
  """
  if not isinstance(poset, Poset):
    raise _checks.ArgTypeError(f"poset must be a jaxdp.Poset; got {poset!r}.")
  if method not in METHODS:
    raise ValueError(f"method must be one of {METHODS}; got {method!r}.")
  if not isinstance(integer, bool):
    raise _checks.ArgTypeError(f"integer must be True or False; got {integer!r}.")
  if not isinstance(certificate, bool):
    raise _checks.ArgTypeError(f"certificate must be True or False; got {certificate!r}.")
  y, wide = _as_float(y, poset)
  concrete = wide is not None
  if tol is None:
    tol = default_tol(y.dtype)
  elif not (isinstance(tol, (int, float)) and 0 < tol < 1):
    raise ValueError(f"tol must be a number in (0, 1); got {tol!r}.")
  if method == "exact" and not concrete:
    raise ValueError(
      "method='exact' runs on the host and needs concrete y (not under jit)."
    )
  if integer and concrete:
    check_integer_range(wide(), "y")
  graph = constraint_graph(poset)
  if y.size == 0:  # an empty batch: nothing to solve (the solvers' chunks need a row)
    return _empty(y, integer, certificate)
  flat = y if y.ndim == 2 else y.reshape(-1, graph.dim)
  if method == "exact" or (method == "auto" and concrete and y.ndim == 1):
    z, rows = None, np.arange(flat.shape[0])
    w_host, cert = _exact_rows(wide().reshape(flat.shape), rows, graph, tol)
    cert = Certificate(*(jnp.asarray(c) for c in cert))
  else:
    z, cert, all_ok = _batched(flat, graph, tol)
    rows = np.zeros(0, int)
    if concrete and not bool(all_ok):
      host = wide()  # refuses non-finite input, naming the first entry
      if method == "auto":
        rows = np.nonzero(~np.asarray(cert.ok))[0]
        w_host, cert_bad = _exact_rows(host.reshape(flat.shape), rows, graph, tol)
        cert = Certificate(
          *(c.at[rows].set(jnp.asarray(v)) for c, v in zip(cert, cert_bad))
        )
  if flat.shape[:-1] != y.shape[:-1]:
    cert = Certificate(*(c.reshape(y.shape[:-1]) for c in cert))
  # the host rows are rounded (or cast) from their float64 solution: exact integers
  # up to integer_limit() in any float dtype (their range was checked above)
  out = jnp.result_type(int) if integer else y.dtype
  if z is None:
    z = jnp.zeros(flat.shape, out)
  else:
    if integer:
      z = jnp.round(z)
      fits = jnp.all(jnp.isfinite(z) & (z < float(integer_limit()) + 1.0), axis=-1)
      fits = fits.at[rows].set(True)  # the host rows replace these; checked above
      z = z.astype(out)
      cert = cert._replace(ok=cert.ok & fits.reshape(y.shape[:-1]))
  if rows.size:
    host = np.maximum(w_host, 0.0)
    z = z.at[rows].set(jnp.asarray(np.round(host) if integer else host, out))
  if z.shape != y.shape:
    z = z.reshape(y.shape)
  if not certificate:
    return z
  return z, cert


def _empty(y, integer, certificate):
  """The result for ``y`` with no vectors: empty counts, and an empty certificate."""
  z = jnp.zeros(y.shape, jnp.result_type(int) if integer else y.dtype)
  if not certificate:
    return z
  zeros = jnp.zeros(y.shape[:-1], y.dtype)
  return z, Certificate(zeros, zeros, zeros, zeros, jnp.ones(y.shape[:-1], bool))


@functools.partial(jax.jit, static_argnames=("graph",))
def _batched(flat: jax.Array, graph, tol) -> tuple[jax.Array, Certificate, jax.Array]:
  """The batched solver's counts clipped at 0, its certificate, and whether every
  vector is finite and certified: one program (one dispatch, one pass over the
  counts)."""
  w, _, cert = isotonic_batched(flat, graph, tol)
  return jnp.maximum(w, 0.0), cert, jnp.all(cert.ok & jnp.all(jnp.isfinite(flat), -1))


def integer_limit() -> int:
  """The largest count ``integer=True`` can return: that of the default integer
  dtype (2**31 - 1 for int32; 2**63 - 1 with x64)."""
  return int(jnp.iinfo(jnp.result_type(int)).max)


def check_integer_range(y: np.ndarray, name: str) -> None:
  """Refuse ``y`` (concrete) whose projection could round past :func:`integer_limit`.

  The projection's coordinates lie in ``[0, max(y)]`` (block means of ``y``, clipped
  at 0), so ``max(y)`` rounded must be at most the limit.
  """
  top = float(np.max(y)) if y.size else 0.0
  limit = integer_limit()
  if round(top) > limit:
    raise ValueError(
      f"{name} has a value {top:.6g} larger than {limit} = 2**{limit.bit_length()} - 1, "
      f"the largest count of the integer dtype {jnp.result_type(int)} that "
      "integer=True returns; enable x64 (jax.config.update('jax_enable_x64', True)) "
      "for int64, or use integer=False."
    )


def _as_float(y, poset):
  """``(y, wide)``: ``y`` checked and in the computation's float dtype, and, when
  concrete, a function giving its values in float64 on the host (None when traced).
  Concrete input is converted on the host, value by value: ``jnp.asarray`` would
  first store int64 as int32 with x64 off, wrapping 2**32 + 7 to 7. A JAX array
  already in the float dtype JAX computes in stays on the device: ``wide`` reads it
  (and refuses a non-finite entry) only when it is called, which the batched path
  does when a vector is not certified (as a non-finite one is not)."""
  if not hasattr(y, "dtype"):
    try:
      y = np.asarray(y)
    except (TypeError, ValueError):
      raise _checks.ArgTypeError(f"y must be an array of numbers; got {y!r}.") from None
  if y.dtype == object:
    y = _object_floats(y)
  if not (jnp.issubdtype(y.dtype, jnp.floating) or jnp.issubdtype(y.dtype, jnp.integer)):
    raise _checks.ArgTypeError(f"y must hold real numbers; got dtype {y.dtype}.")
  dim = poset.d + 1
  if y.ndim == 0 or y.shape[-1] != dim:
    raise ValueError(
      f"y must have shape (..., {dim}): n then one count per question of the poset "
      f"(d = {poset.d}); got shape {tuple(y.shape)}."
    )
  if _checks.is_concrete(y):
    if isinstance(y, jax.Array) and y.dtype == jnp.result_type(float):
      return y, functools.cache(lambda: _host_checked(np.asarray(y)))
    wide = np.asarray(y)
    host = _host_float(wide)
    keep = isinstance(y, jax.Array) and y.dtype == host.dtype
    wide = wide.astype(np.float64)
    return (y if keep else jnp.asarray(host)), lambda: wide
  if jnp.issubdtype(y.dtype, jnp.signedinteger):  # its minimum marks a refused
    return jnp.where(  # release, as NaN does
      y == jnp.iinfo(y.dtype).min, jnp.nan, y.astype(jnp.result_type(float))
    ), None
  float_y = y.astype(jnp.result_type(float)) if jnp.issubdtype(y.dtype, jnp.integer) else y
  return float_y, None


def _host_checked(y: np.ndarray) -> np.ndarray:
  """Concrete ``y`` in float64, after :func:`_host_float`'s checks."""
  _host_float(y)
  return y.astype(np.float64)


def _host_float(y: np.ndarray) -> np.ndarray:
  """Concrete ``y`` as a numpy array of the float dtype JAX computes in (``y``'s own
  float dtype, narrowed to float32 with x64 off; the default float dtype for
  integers): each value the nearest float, or an error naming the first bad entry."""
  if jnp.issubdtype(y.dtype, jnp.signedinteger):
    # the minimum of y's dtype, or of JAX's integer dtype (int32 with x64 off: a
    # refused int32 release stored wider), marks a refused release, as NaN does
    jax_int = jnp.dtype(jnp.result_type(int))
    marks = [np.iinfo(y.dtype).min, jnp.iinfo(jax_int).min]
    _refuse_first(
      np.isin(y, marks),
      y,
      "{entry} is the mark of a refused or invalid integer release (the minimum of "
      f"{y.dtype} or of {jax_int}, JAX's integer dtype: as NaN is for floats), not a "
      "count",
    )
  if jnp.issubdtype(y.dtype, jnp.integer):
    return y.astype(jnp.result_type(float))
  _refuse_first(~np.isfinite(y), y, "y must be finite; {entry}")
  target = jax.dtypes.canonicalize_dtype(y.dtype)
  with np.errstate(over="ignore"):  # overflow is the refusal below
    narrowed = y.astype(target)
  _refuse_first(
    ~np.isfinite(narrowed),
    y,
    f"{{entry}} is beyond {float(jnp.finfo(target).max):.4g}, the largest {target} "
    f"(JAX's dtype for {y.dtype} with x64 off); rescale the counts, or "
    "enable x64 (jax.config.update('jax_enable_x64', True))",
  )
  # a vector's sums (block sums, the exact path's) must stay finite too
  limit = float(jnp.finfo(target).max) / y.shape[-1]
  _refuse_first(
    np.abs(narrowed) > limit,
    y,
    f"{{entry}} is beyond {limit:.4g}, the largest {target} over the {y.shape[-1]} "
    "counts of a vector: their sums could overflow; rescale the counts",
  )
  return narrowed


def _refuse_first(bad: np.ndarray, y: np.ndarray, message: str) -> None:
  """A ValueError naming the first True entry of ``bad`` as ``{entry}`` in
  ``message`` (a released count is public), and how many there are."""
  i = first_index(bad)
  if i is not None:
    entry = f"y[{', '.join(map(str, i))}] = {y[i]}"
    raise ValueError(f"{message.format(entry=entry)} ({np.count_nonzero(bad)} in all).")


def _object_floats(y: np.ndarray) -> np.ndarray:
  """A numpy object array of Python ints and floats (numpy stores ints past 64 bits,
  or int64 and uint64 values together, as objects) as float64, each the nearest
  float; anything else is left for the dtype check to refuse."""
  if not y.size or not all(
    isinstance(v, (numbers.Integral, float)) and not isinstance(v, (bool, np.bool_))
    for v in y.flat
  ):
    return y
  out = np.empty(y.shape, np.float64)
  for i, v in np.ndenumerate(y):
    try:
      out[i] = float(v)
    except OverflowError:
      raise ValueError(
        f"y[{', '.join(map(str, i))}] = {v} is beyond {np.finfo(np.float64).max:.4g}, "
        "the largest float64: no float dtype holds it. Rescale the counts."
      ) from None
  return out


def _exact_rows(flat: np.ndarray, rows, graph, tol):
  """The host algorithm on ``flat[rows]``; its float64 certificate (numpy)."""
  rows = list(rows)
  a = graph.incidence
  w = np.empty((len(rows), graph.dim))
  lam = np.empty((len(rows), graph.num_edges))
  for k, r in enumerate(rows):
    w[k], lam[k] = isotonic_host(flat[r], graph)
  y = flat[rows]
  diff = w @ a.T
  lam = np.where(diff == 0, np.maximum(lam, 0.0), 0.0)
  violation = np.maximum(diff.max(axis=1), 0.0)
  res = y - lam @ a - w
  gap = 0.5 * np.sum(res**2, axis=1)
  bound = np.sqrt(2.0 * gap)
  tolerance = tol * np.maximum(1.0, np.abs(y).max(axis=1))
  ok = (violation == 0) & (bound <= tolerance)
  return w, (violation, gap, bound, tolerance, ok)
