"""The exact samplers under ``vmap`` inside ``jit``.

The kernels compute in float64/int64 inside ``jax.enable_x64``; an enclosing ``jit``
lowers them with the caller's 32-bit default dtypes, so a primitive whose lowering
builds arrays of the default integer dtype (``argmax``, behind ``jnp.select``) fails
to lower there. Small shapes, threefry keys and one compilation per form keep these
cheap: l_2 noise is checked value for value, the other samplers lower.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdp
from jaxdp import exact
from jaxdp.exact import intervals as exact_intervals
from jaxdp.exact import refine as exact_refine
from tests.helpers.exactness import record_host_refinements

POSET = jaxdp.Poset.nhis(1)  # d = 4: the ranks path, and the tree path on request
ROWS = np.asarray(POSET.filters(), np.int8)  # every filter once: valid rows
KEYS = jax.random.split(jax.random.key(7), 3)


def _count(noise):
  mech = jaxdp.PosetCountMechanism(POSET, 1.0, noise=noise, exact=True)
  return lambda k: mech.randomize(k, ROWS)


def _discrete_gaussian(k):
  mech = jaxdp.DiscreteGaussianMechanism(1.0, 1e-6)
  return mech.randomize(k, jnp.array([3, 5, 8]))


def test_jit_vmap_exact_l2_randomize_equals_the_per_key_loop():
  """jit(vmap) of the exact l_2 count release (which failed to lower) gives, for each
  of 3 keys, the integers that key gives alone; the 3 differ."""
  f = _count("l2")
  loop = np.stack([np.asarray(f(k)) for k in KEYS])
  assert loop.dtype == np.int32 and loop.shape == (3, POSET.d + 1)
  assert len({row.tobytes() for row in loop}) == 3  # one key's draw not broadcast
  np.testing.assert_array_equal(np.asarray(jax.jit(jax.vmap(f))(KEYS)), loop)


CASES = {
  "poset_ranks": _count("poset"),
  "poset_tree": lambda k: exact.poset_knorm(k, POSET, 4.0, path="tree"),
  "linf": _count("linf"),
  "laplace": _count("laplace"),
  "discrete_gaussian": _discrete_gaussian,
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_other_exact_samplers_lower_under_jit_vmap(name):
  """Each lowers under an enclosing jit (its values under vmap are the per-key
  loop's, as for l_2; the batched kernels are not compiled here)."""
  assert exact.poset_path(POSET) == "ranks"
  lowered = jax.jit(jax.vmap(CASES[name])).trace(KEYS).lower()
  assert "func.func" in lowered.as_text()


def _callbacks_outside_a_cond(jaxpr, inside=False):
  """The host callbacks of ``jaxpr`` (and of the programs nested in it) that do not
  sit in a branch of a ``cond``: those run whatever the predicate."""
  out = []
  for eqn in getattr(jaxpr, "jaxpr", jaxpr).eqns:
    if eqn.primitive.name == "pure_callback" and not inside:
      out.append(eqn)
    for v in eqn.params.values():
      for sub in v if isinstance(v, (tuple, list)) else (v,):
        if hasattr(sub, "eqns") or hasattr(getattr(sub, "jaxpr", None), "eqns"):
          out += _callbacks_outside_a_cond(sub, inside or eqn.primitive.name == "cond")
  return out


VMAPPED = {  # the samplers themselves (a mechanism adds its own run-time row check)
  "laplace": lambda k: exact.laplace(k, (8,), scale=2.0),
  "poset_ranks": lambda k: exact.poset_knorm(k, POSET, 4.0),
  "poset_tree": lambda k: exact.poset_knorm(k, POSET, 4.0, path="tree"),
  "linf": lambda k: exact.linf_knorm(k, 3, 4.0),
  "l2": lambda k: exact.l2_knorm(k, 3, 4.0),
  "discrete_gaussian": lambda k: exact.discrete_gaussian(k, (8,), sigma=3.0),
}


@pytest.mark.parametrize("name", sorted(VMAPPED))
def test_under_vmap_the_host_call_stays_behind_a_cond(name):
  """Traced under vmap over keys, every exact sampler's host call
  (the settle step's refinement, the discrete Gaussian's failure check) still sits in
  a branch of a cond: a batched predicate would have made it a select, calling the
  host on every chunk whether or not a sample needs it."""
  f = VMAPPED[name]
  assert not _callbacks_outside_a_cond(jax.make_jaxpr(jax.vmap(f))(KEYS))


def test_settle_under_vmap_calls_the_host_only_when_needed(monkeypatch):
  """Exact Laplace noise, vmapped over 4 keys of 300 samples: with the normal margin
  no sample needs the host refinement and the host is not called at all; with the
  margin widened to 2^-3 (about one sample in five unsettled) it is called once, for
  exactly the unsettled samples of the 4 keys together (the sum of the per-key runs'
  counts), under vmap and under vmap of vmap, and every key's integers are those it
  gives alone, with or without the refinement (both are the exact rounding)."""
  keys = jax.random.split(jax.random.key(11), 4)
  f = lambda k: exact.laplace(k, (300,), scale=0.75)
  calls = record_host_refinements(monkeypatch, exact_refine)
  normal = np.asarray(jax.jit(jax.vmap(f))(keys))
  assert calls == []
  jax.clear_caches()
  monkeypatch.setattr(exact_intervals, "MARGIN", 2.0**-3)
  alone = np.stack([np.asarray(jax.jit(f)(k)) for k in keys])
  per_key, calls[:] = list(calls), []
  assert len(per_key) == 4 and all(c > 20 for c in per_key)
  nested = np.asarray(jax.vmap(jax.vmap(f))(keys.reshape(2, 2))).reshape(4, 300)
  jax.clear_caches()
  assert calls == [sum(per_key)]
  np.testing.assert_array_equal(nested, alone)
  np.testing.assert_array_equal(normal, alone)
