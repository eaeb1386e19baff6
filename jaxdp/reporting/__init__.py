"""What comes with a release: error bars, intervals for a consistent release, and
advice on which mechanism to use.

All of it is postprocessing or a function of the mechanism alone: nothing here reads
private data or spends budget (closure under postprocessing, Dwork, Proposition 2.4).

Modules: :mod:`~jaxdp.reporting.laws` (a mechanism's noise law),
:mod:`~jaxdp.reporting.quantiles` (exact and Monte Carlo quantiles),
:mod:`~jaxdp.reporting.poset_law` (the exact law of a small poset ball's coordinates),
:mod:`~jaxdp.reporting.simulate` (simulated noise), :mod:`~jaxdp.reporting.bars`
(:func:`error_bars`), :mod:`~jaxdp.reporting.bootstrap`
(:func:`consistent_error_bars`), :mod:`~jaxdp.reporting.moments` (expected squared
errors), :mod:`~jaxdp.reporting.advice` (:func:`advise`) and
:mod:`~jaxdp.reporting.query_advice` (its comparison for sum, count and vote queries).
"""

from jaxdp.reporting.advice import Advice, MechanismError, advise, default_counts
from jaxdp.reporting.bars import ErrorBars, error_bars
from jaxdp.reporting.bootstrap import consistent_error_bars
from jaxdp.reporting.laws import NoiseLaw, noise_law
from jaxdp.reporting.moments import SquaredError, squared_error
from jaxdp.reporting.query_advice import QueryAdvice, QueryOption, advise_query

__all__ = [
  "Advice",
  "ErrorBars",
  "MechanismError",
  "NoiseLaw",
  "QueryAdvice",
  "QueryOption",
  "SquaredError",
  "advise",
  "advise_query",
  "consistent_error_bars",
  "default_counts",
  "error_bars",
  "noise_law",
  "squared_error",
]
