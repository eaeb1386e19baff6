"""Fingerprints of the lowered programs of a set of samplers and a release.

  PYTHONPATH=<checkout> python tools/compare_programs.py

Run it in two checkouts and compare the lines: equal fingerprints mean the same
StableHLO (source locations stripped), so the same draws and the same speed. A
refactoring that should not change the kernels is checked this way.
"""

import hashlib

import jax
import jax.numpy as jnp

import jaxdp
from jaxdp.experiments.questionnaire import synthetic_questionnaire

k = jax.random.key(0)
cases = {
  "poset_ball nhis3 forest": lambda: jax.jit(
    lambda k: jaxdp.random.poset_ball(k, jaxdp.Poset.nhis(3), (100000,))
  ).lower(k),
  "poset_ball nhis3 general": lambda: jax.jit(
    lambda k: jaxdp.random.poset_ball(k, jaxdp.Poset.nhis(3), (100000,), method="general")
  ).lower(k),
  "poset_ball q300 sp": lambda: jax.jit(
    lambda k: jaxdp.random.poset_ball(k, synthetic_questionnaire(0, 300), (10000,))
  ).lower(k),
  "knorm nhis3": lambda: jax.jit(
    lambda k: jaxdp.random.knorm(k, jaxdp.PosetBall(jaxdp.Poset.nhis(3)), 1.0, (100000,))
  ).lower(k),
  "lp inf": lambda: jax.jit(
    lambda k: jaxdp.random.lp_ball(k, 16, float("inf"), (100000,))
  ).lower(k),
  "exact laplace": lambda: jax.jit(
    lambda k: jaxdp.exact.laplace(k, (100000,), scale=3.0)
  ).lower(k),
  "chacha bits": lambda: jax.jit(
    lambda k: jax.random.bits(k, (1 << 20,), jnp.uint32)
  ).lower(jaxdp.random.secure_key(bytes(32))),
  "release scan": lambda: jax.jit(
    lambda a, x: jax.lax.scan(
      lambda s, _: jaxdp.release(s, jaxdp.LaplaceMechanism(0.1), x), a, None, length=20
    )
  ).lower(jaxdp.Accountant.create(5.0, key=jax.random.key(1)), jnp.zeros(())),
}
for name, f in cases.items():
  text = f().as_text()
  # module/function names carry the Python module path: strip locations
  lines = [
    l.split(" loc(")[0] for l in text.splitlines() if not l.strip().startswith("#loc")
  ]
  print(
    f"{name:28s} {hashlib.sha1(chr(10).join(lines).encode()).hexdigest()[:12]} {len(lines)}"
  )
