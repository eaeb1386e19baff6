"""A Session queried from several threads at once.

Every thread read the same key and the same spent budget before any wrote them back:
all were answered, one charge was recorded, and the answers shared one noise draw,
so the difference of two answers was an exact count.
"""

import threading

import jax
import numpy as np

import jaxdp


def _race(session, eps, threads, calls):
  """Runs ``calls`` count queries in each of ``threads`` threads started together."""
  barrier = threading.Barrier(threads)
  answers, refused = [], []

  def go(i):
    barrier.wait()
    for j in range(calls):
      try:
        answers.append(session.count(lambda a, t=60 + i + j: a > t, eps=eps))
      except jaxdp.ReleaseRefusedError:
        refused.append(i)

  ts = [threading.Thread(target=go, args=(i,)) for i in range(threads)]
  for t in ts:
    t.start()
  for t in ts:
    t.join()
  return answers, refused


def test_threads_cannot_overspend_or_share_noise():
  ages = np.random.default_rng(0).integers(18, 90, size=1000)
  s = jaxdp.Session(ages, eps_budget=1.0, key=jax.random.key(3))
  s.count(lambda a: a > 10, eps=0.1)  # compile the query path once
  answers, refused = _race(s, eps=0.3, threads=6, calls=2)
  # 0.9 left at 0.3 each: exactly three answers, every other call refused.
  assert len(answers) == 3, (len(answers), s.spent)
  assert len(refused) == 9
  assert s.answered == 4
  assert abs(s.spent - 1.0) < 1e-6
