"""The series-parallel kernel's size choices and stored values against direct
references: every node's inverse-CDF choice (read as one window of its depth's widest
row) equals a count over the node's own row, for every A-count and for uniforms at
the rows' edges; ``stored_call`` returns what its function returns, under ``jit`` and
``vmap``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdp import Poset
from jaxdp.samplers import sp_plan, sp_sizes, sp_tables, words

# two N-shaped blocks and two free elements: the last internal node's rows are
# narrower than its depth's widest, so its last window runs past its own rows
_N2 = Poset.from_edges(10, [(0, 1), (2, 1), (2, 3), (4, 5), (6, 5), (6, 7)])


@pytest.mark.parametrize("poset", [_N2], ids=["N+N"])
def test_split_count_reads_each_nodes_own_row(poset):
  """For each depth with internal nodes, each node and each A-count a = 0 .. n_v,
  the left child's count equals a count of the entries <= u of the node's own CDF row
  (numpy, from the flat table by offset and width), for u on both sides of every
  entry. A window clipped at the end of the table (no padding) reads a shifted row."""
  tables, layout = sp_tables.sp_tables(poset)
  plan = sp_plan.LevelPlan(layout)
  cdf = np.asarray(tables.split_cdf)
  f = jax.jit(sp_sizes.split_count, static_argnums=6)
  checked = 0
  for info in plan.levels:
    if not len(info["inner"]):
      continue
    sizes = np.asarray(layout.size)[info["inner"]]
    widmax = int(info["wid"].max())
    a = np.concatenate([np.arange(s + 1) for s in sizes])  # every node's counts
    node = np.repeat(np.arange(len(sizes)), sizes + 1)
    for side in (-1, 1):
      start = info["off"][node] + a * info["wid"][node]
      j = np.arange(widmax)[None, :]
      entry = np.where(j < info["wid"][node][:, None], start[:, None] + j, start[:, None])
      u = np.nextafter(cdf[entry], np.float32(side)).astype(np.float32)
      u = np.clip(u, 0, np.nextafter(np.float32(1), np.float32(0)))
      # each column of u: one uniform per (node, a); rows of the call: the nodes
      for col in range(widmax):
        grid = np.zeros((len(sizes), len(a)), np.int32)
        uu = np.zeros((len(sizes), len(a)), np.float32)
        grid[node, np.arange(len(a))] = a
        uu[node, np.arange(len(a))] = u[:, col]
        got = np.asarray(
          f(
            tables,
            jnp.asarray(grid),
            info["off"],
            info["wid"],
            info["small_left"],
            jnp.asarray(uu),
            widmax,
          )
        )[node, np.arange(len(a))]
        row_ok = j < info["wid"][node][:, None]
        a_s = ((cdf[entry] <= u[:, col][:, None]) & row_ok).sum(axis=1)
        want = np.where(info["small_left"][node], a_s, a - a_s)
        np.testing.assert_array_equal(got, want)
        checked += len(a)
  assert checked > 50


def test_stored_call_returns_its_function_value():
  """``stored_call(fn, args, word)`` is ``fn(*args)``: eagerly, under jit and under
  vmap (where its conditional becomes a select and the other branch's zeros must not
  be chosen)."""

  def fn(x, y):
    return x * 2.0 + y, (x - y).astype(jnp.int32)

  x = jnp.arange(6.0).reshape(2, 3)
  y = jnp.full((2, 3), 0.5)
  word = jnp.uint32(0)  # the predicate (word | 1) != 0 holds for every word
  want = fn(x, y)
  for got in (
    words.stored_call(fn, (x, y), word),
    jax.jit(lambda a, b: words.stored_call(fn, (a, b), word))(x, y),
    jax.vmap(lambda a, b: words.stored_call(fn, (a, b), word))(x, y),
  ):
    for g, w in zip(got, want):
      np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
