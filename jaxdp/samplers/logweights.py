"""Host-side arithmetic on log-weights shared by the samplers' tables (numpy)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["cdf", "log_binom", "logconv", "logsumexp"]


def logsumexp(x):
  """log(sum(exp(x))) of a 1-D array, -inf when every entry is."""
  m = np.max(x)
  return m + np.log(np.sum(np.exp(x - m))) if np.isfinite(m) else m


def logconv(a, b):
  """The convolution of two sequences of weights, in logs."""
  out = np.full(len(a) + len(b) - 1, -np.inf)
  for i, v in enumerate(a):
    if np.isfinite(v):
      out[i : i + len(b)] = np.logaddexp(out[i : i + len(b)], v + b)
  return out


def cdf(logw):
  """The CDF of the weights exp(logw), exactly 1 from the last positive one on."""
  p = np.exp(logw - np.max(logw))
  c = np.cumsum(p) / p.sum()
  last = np.nonzero(p)[0][-1]
  c[last:] = 1.0
  return c


def log_binom(n, k):
  """log C(n, k) for integer arrays 0 <= k <= n."""
  n, k = np.asarray(n), np.asarray(k)
  top = int(n.max()) + 1
  lf = np.array([math.lgamma(i + 1) for i in range(top)])
  return lf[n] - lf[k] - lf[n - k]
