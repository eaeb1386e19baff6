"""A Monte Carlo utility study sharded over devices, identical on 1 and 4 devices.

On a CPU-only machine we ask XLA for 4 host devices (set before JAX starts). The
study estimates the NHIS (3 sections) ratio E||Z||^2 / (d/3) from 2 million exactly
uniform poset-ball draws (``--n`` to change), streamed in chunks, on 1 device and on
all 4.
"""

import argparse
import os

_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
  os.environ["XLA_FLAGS"] = f"{_flags} --xla_force_host_platform_device_count=4".strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import jaxdp  # noqa: E402
from jaxdp import montecarlo  # noqa: E402


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--n", type=int, default=2_000_000, help="draws per estimate")
  args = ap.parse_args(argv)
  poset = jaxdp.Poset.nhis(3)
  draw = lambda k, m: jaxdp.random.poset_ball(k, poset, (m,))
  ratio = lambda z: jnp.sum(z[:, 1:] ** 2, axis=1) / (poset.d / 3)
  results = {}
  for n_dev in sorted({1, len(jax.devices())}):
    est = montecarlo.estimate(
      jax.random.key(0),
      draw,
      ratio,
      args.n,
      chunk_size=1 << 18,
      devices=jax.devices()[:n_dev],
    )
    results[n_dev] = est
    print(f"{n_dev} device(s): ratio = {est.mean:.6f} ± {est.stderr:.6f} ({est.n:,} draws)")
  first, last = results[min(results)], results[max(results)]
  assert first.mean == last.mean, "estimates differ across device counts"
  print("identical estimates on every device count")


if __name__ == "__main__":
  main()
