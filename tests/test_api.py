"""The public boundary: what `import jaxdp` exposes, and the error types."""

import subprocess
import sys
import types

import jax
import pytest

import jaxdp


@pytest.mark.subprocess
def test_importing_jaxdp_does_not_import_the_experiments():
  code = (
    "import sys, jaxdp; "
    "print([m for m in sys.modules if m.startswith('jaxdp.experiments')])"
  )
  out = subprocess.run(
    [sys.executable, "-c", code], capture_output=True, text=True, check=True
  ).stdout.strip()
  assert out == "[]"


def test_all_is_complete_and_resolves():
  for name in jaxdp.__all__:
    assert getattr(jaxdp, name) is not None
  from jaxdp import accounting, composition, mechanisms, posets, session
  from jaxdp.samplers import balls

  for module in (accounting, balls, composition, mechanisms, posets, session):
    missing = [
      n
      for n in module.__all__
      if n not in jaxdp.__all__
      and not isinstance(getattr(module, n), types.ModuleType)
      and n
      not in (
        "COUNT_NOISES",
        "EXACT_COUNT_NOISES",
        "QUERY_NOISES",
        "EXACT_QUERY_NOISES",
        "GAUSSIAN_COUNT_NOISES",
        "COMPOSITIONS",
        "MAX_PARTS",
        "MAX_OBJECTS",
        "MAX_ENUMERATE_D",
        "check_rowwise",
      )
    ]
    assert not missing, (module.__name__, missing)
  public = {n for n in dir(jaxdp) if not n.startswith("_")}
  assert all(
    isinstance(getattr(jaxdp, n), types.ModuleType) for n in public - set(jaxdp.__all__)
  )  # only submodules once imported


@pytest.mark.parametrize(
  "call",
  [
    lambda: jaxdp.LaplaceMechanism("x"),
    lambda: jaxdp.LaplaceMechanism(True),
    lambda: jaxdp.Accountant.create(1.0, group_size=1.5),
    lambda: jaxdp.random.laplace(123),
    lambda: jaxdp.random.laplace(jax.random.key(0), (2,), jax.numpy.int32),
    lambda: jaxdp.KNormMechanism("ball", 1.0),
    lambda: jaxdp.PosetCountMechanism("poset", 1.0),
  ],
)
def test_wrong_types_raise_type_error(call):
  with pytest.raises(TypeError):
    call()


@pytest.mark.parametrize(
  "call",
  [
    lambda: jaxdp.LaplaceMechanism(-1.0),
    lambda: jaxdp.Accountant.create(1.0, group_size=0),
    lambda: jaxdp.random.laplace(jax.random.key(0), (2,), scale=0.0),
    lambda: jaxdp.Accountant.create(1.0, delta_budget=1.5),
  ],
)
def test_wrong_values_raise_value_error_not_type_error(call):
  with pytest.raises(ValueError) as info:
    call()
  assert not isinstance(info.value, TypeError)
