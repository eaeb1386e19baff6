"""Cost of budget-enforced releases: a batch of accountants scanning releases.

  python benchmarks/accounting.py [--accountants 10000] [--releases 100] [--out results]

``jax.vmap`` over accountants (each with its own traced eps sequence) of a
``lax.scan`` of ``jaxdp.release`` with a Laplace mechanism on a 16-vector, beside the
same noise drawn with no accounting. Writes results/accounting.{json,md}.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import best_time, machine, write_results  # noqa: E402

import jaxdp  # noqa: E402


def main(argv=None):
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--accountants", type=int, default=10_000)
  ap.add_argument("--releases", type=int, default=100)
  ap.add_argument("--out", default="results")
  args = ap.parse_args(argv)
  a, r = args.accountants, args.releases
  eps = jax.random.uniform(jax.random.key(0), (a, r), minval=0.005, maxval=0.02)
  mech = jaxdp.LaplaceMechanism(1.0)
  data = jnp.zeros(16)

  def run(acct, eps_row):
    return jax.lax.scan(lambda s, e: jaxdp.release(s, mech.with_eps(e), data), acct,
                        eps_row)

  accts = jax.vmap(lambda k: jaxdp.Accountant.create(1.0, key=k))(
      jax.random.split(jax.random.key(1), a))
  with_acct = jax.jit(jax.vmap(run))
  t_acct = best_time(lambda: with_acct(accts, eps))
  plain = jax.jit(lambda k: jax.random.laplace(k, (a, r, 16)) / eps[..., None])
  t_plain = best_time(lambda: plain(jax.random.key(2)))
  rows = [{"how": "vmap(scan(release)) with accountant", "releases": a * r,
           "seconds": t_acct, "releases_per_s": a * r / t_acct},
          {"how": "same Laplace noise, no accounting", "releases": a * r,
           "seconds": t_plain, "releases_per_s": a * r / t_plain}]
  lines = ["| how | releases | seconds | releases/s |", "|---|---|---|---|"]
  lines += [f"| {x['how']} | {x['releases']:,} | {x['seconds']:.3f} | "
            f"{x['releases_per_s']:,.0f} |" for x in rows]
  write_results(args.out, "accounting", {"machine": machine(), "rows": rows},
                "\n".join(lines))


if __name__ == "__main__":
  main()
