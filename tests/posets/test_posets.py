import json

import jax
import numpy as np
import pytest
from scipy import stats

import jaxdp
from jaxdp import Poset, samplers
from jaxdp.posets import formats


def test_constructors_agree_and_hash():
  a = Poset.from_edges(3, [(0, 1), (1, 2)])
  b = Poset.from_order([[1, 1, 1], [0, 1, 1], [0, 0, 1]])
  c = Poset.from_parents([1, 2, -1])
  assert a == b == c and hash(a) == hash(b) == hash(c)
  assert {a: 1}[c] == 1
  assert a.order.dtype == bool and not a.order.flags.writeable


def test_nhis():
  for sections, d in [(1, 4), (2, 11), (3, 15)]:
    p = Poset.nhis(sections)
    assert p.d == d and p.is_forest
  p = Poset.nhis(1)
  # q2 requires q1: a filter with q2 = yes has q1 = yes.
  assert p.is_filter([1, 1, 0, 0]) and not p.is_filter([0, 1, 0, 0])
  assert p.depth == 3 and len(p.filters()) == 7
  with pytest.raises(ValueError, match="sections"):
    Poset.nhis(4)


def test_properties():
  diamond = Poset.from_edges(4, [(0, 1), (0, 2), (1, 3), (2, 3)])
  assert not diamond.is_forest and diamond.depth == 3
  assert diamond.num_cover_edges == 4
  assert len(diamond.filters()) == 6
  anti = Poset.from_edges(3, [])
  assert anti.is_forest and anti.depth == 1 and len(anti.filters()) == 8


def test_filters_are_exactly_the_up_sets():
  p = Poset.random(jax.random.key(3), 6)
  filt = {tuple(r) for r in p.filters()}
  for mask in range(1 << 6):
    x = [(mask >> i) & 1 for i in range(6)]
    assert p.is_filter(x) == (tuple(x) in filt)


@pytest.mark.parametrize(
  "edges,match",
  [
    ([(0, 1), (1, 2), (2, 0)], r"cycle: p0 < p1 < p2 < p0"),
    ([(0, 0)], "self-loop"),
    ([(0, 5)], "out of range"),
    ([(0,)], "pair"),
  ],
)
def test_bad_edges(edges, match):
  with pytest.raises(ValueError, match=match):
    Poset.from_edges(3, edges)


@pytest.mark.parametrize(
  "order,match",
  [
    ([[1, 0, 0], [0, 1, 0]], "square"),
    ([[1, 1], [1, 1]], "antisymmetric"),
    ([[1, 1, 0], [0, 1, 1], [0, 0, 1]], r"not transitive: order\[0\]\[2\]"),
    ([[0, 0], [0, 1]], "reflexive"),
    ([[1, 2], [0, 1]], "0/1"),
  ],
)
def test_bad_order(order, match):
  with pytest.raises(ValueError, match=match):
    Poset.from_order(order)


def test_bad_parents():
  with pytest.raises(ValueError, match="parents"):
    Poset.from_parents([3, -1])
  with pytest.raises(ValueError, match="cycle"):
    Poset.from_parents([1, 0])


def test_random_is_reproducible_and_a_dag():
  a = Poset.random(jax.random.key(0), 8)
  b = Poset.random(jax.random.key(0), 8)
  assert a == b and a.d == 8
  adj = jaxdp.random_dags(jax.random.key(1), 6, 20)
  assert adj.shape == (20, 6, 6)
  for g in adj:  # from_edges raises on a cycle
    Poset.from_edges(6, list(zip(*np.nonzero(g))))


@pytest.mark.statistical
def test_melancon_chain_is_uniform_on_labelled_dags():
  """There are 25 labelled DAGs on 3 nodes; 20_000 independent chains (90 steps each)
  land on each equally often (chi-square, p > 1e-4)."""
  adj = jaxdp.random_dags(jax.random.key(2), 3, 20_000)
  codes = (adj.reshape(len(adj), -1) * (1 << np.arange(9))).sum(axis=1)
  _, counts = np.unique(codes, return_counts=True)
  assert len(counts) == 25
  assert stats.chisquare(counts).pvalue > 1e-4


def test_prerequisites_by_name_and_edge_direction():
  """'q2 requires q1' is p_q2 <= p_q1: the edge (q2, q1). NHIS section 1 said by name."""
  p = Poset.from_prerequisites({"q1": [], "q2": ["q1"], "q3": ["q2"], "q4": ["q1"]})
  assert p == Poset.nhis(1) and p.labels == ("q1", "q2", "q3", "q4")
  assert p.order[1, 0] and not p.order[0, 1]
  assert p.is_filter([1, 1, 0, 0]) and not p.is_filter([0, 1, 0, 0])
  assert p.explain_violation([0, 1, 0, 0]) == "'q2' is 1 but 'q1', which it requires, is 0"
  with pytest.raises(TypeError, match=r"write \['q1'\]"):
    Poset.from_prerequisites({"q2": "q1"})
  with pytest.raises(ValueError, match="distinct"):
    Poset.from_edges(2, [], labels=("a", "a"))


def test_empty_poset_is_a_clear_error():
  with pytest.raises(ValueError, match="d must be >= 1"):
    Poset.from_edges(0, [])
  with pytest.raises(ValueError, match="at least one element"):
    Poset(())


def test_load_formats_and_errors(tmp_path):
  nhis1 = Poset.nhis(1)
  files = {
    "order.json": json.dumps(
      {"order": nhis1.order.astype(int).tolist(), "labels": ["a", "b", "c", "d"]}
    ),
    "edges.json": json.dumps({"d": 4, "edges": [[1, 0], [2, 1], [3, 0]]}),
    "requires.json": json.dumps(
      {"requires": {"q1": [], "q2": ["q1"], "q3": ["q2"], "q4": ["q1"]}}
    ),
    "edges.txt": "# NHIS 1\nd 4\n1 0\n2 1\n3 0\n",
    "order.txt": "\n".join(" ".join(str(int(v)) for v in row) for row in nhis1.order),
  }
  for name, text in files.items():
    (tmp_path / name).write_text(text)
    p = Poset.load(tmp_path / name)
    assert p == nhis1 and p.name == name.split(".")[0], name
  assert Poset.load(tmp_path / "order.json").labels == ("a", "b", "c", "d")
  (tmp_path / "bad.json").write_text(json.dumps({"d": 2.5, "edges": []}))
  with pytest.raises(ValueError, match=r"bad.json: 'd' must be an integer; got 2.5"):
    Poset.load(tmp_path / "bad.json")
  (tmp_path / "dup.json").write_text('{"requires": {"a": [], "b": ["a"], "b": []}}')
  with pytest.raises(ValueError, match="dup.json: duplicate key 'b'"):
    Poset.load(tmp_path / "dup.json")
  chain = {f"q{i}": [f"q{i - 1}"] if i else [] for i in range(3000)}
  (tmp_path / "long.json").write_text(json.dumps({"requires": chain}))
  with pytest.raises(ValueError, match="long.json: the file has 3000 questions.* 512"):
    Poset.load(tmp_path / "long.json")  # refused before the closure is built
  (tmp_path / "long.txt").write_text("d 513\n")
  with pytest.raises(ValueError, match="long.txt: the file has 513 questions"):
    Poset.load(tmp_path / "long.txt")
  (tmp_path / "cycle.txt").write_text("d 2\n0 1\n1 0\n")
  with pytest.raises(ValueError, match="cycle.txt: edges contain a cycle"):
    Poset.load(tmp_path / "cycle.txt")


def test_file_limit_is_the_largest_sampler_d():
  assert formats.MAX_FILE_D == max(
    samplers.FOREST_MAX_D, samplers.GENERAL_MAX_D, samplers.SP_MAX_D
  )


def test_equality_and_hashing_are_those_of_the_canonical_relation():
  """0/1 integers and bools give one poset; its relation is plain tuples of bools,
  and the poset the table caches build from its bytes is equal to it."""
  ints = Poset(((1, 1, 0), (0, 1, 0), (0, 0, 1)))
  bools = Poset.from_edges(3, [(0, 1)], name="other name")
  assert ints == bools and hash(ints) == hash(bools) and ints.key == bools.key
  assert all(type(v) is bool for row in ints.relation for v in row)
  fresh = Poset.from_key(bools.key)
  assert fresh == bools and fresh.relation == bools.relation and fresh.name == ""
  assert Poset.from_edges(3, [(1, 0)]) != bools
  with pytest.raises(ValueError, match=r"order\[0\]\[1\] = 2"):
    Poset(((1, 2), (0, 1)))


@pytest.mark.parametrize(
  "obj",
  [
    {"requires": {"q2": ["q1"]}, "d": 5, "edges": []},  # 'd'/'edges' were ignored
    {"order": [[1]], "d": 1, "edges": []},
    {"requires": {"q2": ["q1"]}, "labels": ["a", "b"]},
    {"d": 2, "edges": [], "name": "x"},
    {"labels": ["a"]},
    {"requires": {"q2": ["q1"]}, "d": 3},
  ],
)
def test_a_poset_json_holds_exactly_one_form(tmp_path, obj):
  """A file mixing forms was read by one of them, the other keys silently dropped."""
  (tmp_path / "p.json").write_text(json.dumps(obj))
  with pytest.raises(ValueError, match=r"p.json: (a poset JSON object holds|'d' is 3)"):
    Poset.load(tmp_path / "p.json")


@pytest.mark.parametrize("labels", [("a", "a"), ("a", " a"), ("a", ""), ("a\n", "b")])
def test_labels_a_header_could_not_name_are_refused(labels):
  """'a' and ' a' were both accepted, though a CSV header strips its fields."""
  with pytest.raises(ValueError, match="labels must be distinct and non-empty"):
    Poset.from_edges(2, [], labels=labels)


def test_a_misspelt_prerequisite_names_the_file_line_value_and_the_closest_key(tmp_path):
  """A prerequisite that no key declares was silently a new question (one that every
  respondent answers 0), so a typo changed the poset."""
  (tmp_path / "p.json").write_text(
    '{"requires": {\n  "smoked": [],\n  "daily": ["smoked"],\n  "quit": ["daliy"],\n'
    '  "ecig": ["smoked", "vape"]\n}}\n'
  )
  with pytest.raises(ValueError) as e:
    Poset.load(tmp_path / "p.json")
  msg = str(e.value)
  assert msg.startswith(f"{tmp_path / 'p.json'}: line 4: 'daliy', a prerequisite of 'quit'")
  assert "did you mean 'daily'?" in msg and '"daliy": []' in msg
  (tmp_path / "q.json").write_text(
    json.dumps({"requires": {"smoked": [], "ecig": ["smoked", "vape"]}}, indent=1)
  )
  with pytest.raises(ValueError, match=r"q.json: line 6: 'vape', a prereq.*of the file\. "):
    Poset.load(tmp_path / "q.json")  # nothing close: no suggestion
  # every question declared: the file loads as before
  (tmp_path / "ok.json").write_text(json.dumps({"requires": {"q1": [], "q2": ["q1"]}}))
  assert Poset.load(tmp_path / "ok.json") == Poset.from_edges(2, [(1, 0)])


@pytest.mark.parametrize(
  "text, error",
  [
    ("d 3\n0 1\n\n# x\n1 O\n", "line 5: 'O' is not an integer"),
    (
      "d 3\n0 1\n1 3\n",
      r"line 3: 3 is not a question of the file: indices run from 0 to 2",
    ),
    ("d 3\n0 1 2\n", "line 2: an edge line is 'i j'"),
    ("1 0\n1 x\n", "line 2: 'x' is not an integer"),
    ('{"d": 3,\n "edges": [[0, 1],\n  [1, 3]]}', "line 3: 3 is not a question of the file"),
    ('{"d": 3, "edges": [[0, 1], [-1, 2]]}', "line 1: -1 is not a question of the file"),
  ],
)
def test_an_edge_list_names_the_line_of_a_bad_field(tmp_path, text, error):
  """An index out of range was reported as edges[k] (k counting edges, not lines), and
  a field that is not an integer as int()'s message, without its line."""
  name = "p.json" if text.startswith("{") else "p.txt"
  (tmp_path / name).write_text(text)
  with pytest.raises(ValueError, match=f"{name}: {error}"):
    Poset.load(tmp_path / name)


@pytest.mark.parametrize("bad", ["a\tb", "a\nb", "a\x00", "a\u2028b"])
def test_a_question_name_that_is_not_printable_is_refused_naming_file_and_line(
  tmp_path, bad
):
  path = tmp_path / "p.json"
  path.write_text('{"requires": {\n  "q1": [],\n  ' + json.dumps(bad) + ': ["q1"]\n}}')
  with pytest.raises(ValueError, match=r"p\.json: line 3: the question name .* printable"):
    jaxdp.Poset.load(path)
  with pytest.raises(ValueError, match="printable"):
    jaxdp.Poset.from_edges(2, [], labels=("q1", bad))


def test_a_deeply_nested_poset_file_is_a_value_error(tmp_path):
  path = tmp_path / "deep.json"
  path.write_text('{"requires": ' + "[" * 100000 + "]" * 100000 + "}")
  with pytest.raises(ValueError, match="nested too deeply"):
    jaxdp.Poset.load(path)
