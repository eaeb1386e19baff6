"""`jaxdp release --data FILE.csv`: a first line is a header only by an allowlist rule.

Before, any first line that was not plain integers was dropped as a header with no
message: a first row of ``1.0,0,0,0``, ``nan,...``, ``True,...``, or any file starting
with a UTF-8 byte order mark (Excel's CSV export; a file of 2 rows released
``respondents = 1``).
"""

import numpy as np
import pytest

from jaxdp.cli import main
from jaxdp.cli import release as cli_release
from jaxdp.cli.parser import UsageError

ROWS = "1,1,0,0\n0,0,0,0\n1,0,0,0\n"  # filters of nhis1 (q2 requires q1)
NAMES = ("q1", "q2", "q3", "q4")  # nhis1's question names


def _write(tmp_path, text, bom=False):
  path = tmp_path / "a.csv"
  path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode())
  return path


@pytest.mark.parametrize(
  "first", ["1.0,0,0,0", "1.5,0,0,0", "nan,0,0,0", "1_0,0,0,0", "True,0,0,0", " ,0,0,0"]
)
def test_a_first_row_that_is_not_a_header_is_data_and_refused(tmp_path, first):
  """Named by row and line, with the header rule; never its value."""
  path = _write(tmp_path, first + "\n" + ROWS)
  with pytest.raises(UsageError) as e:
    cli_release.load_rows(str(path), 4)
  msg = str(e.value)
  assert (
    "row 0, column 0: an answer must be 0 or 1, written as that digit alone (line 1 " in msg
  )
  assert "a header only if every field is a question name" in msg
  value = first.split(",")[0].strip()
  rest = msg.replace(str(path), "PATH").replace(cli_release.HEADER_RULE, "")
  assert not value or value not in rest


@pytest.mark.parametrize("bom", [False, True])
@pytest.mark.parametrize(
  "header, names",
  [
    ("", NAMES),
    ("q1,q2,q3,q4\n", NAMES),
    ("smoked, daily ,quit_try,ecig\n", ("smoked", "daily", "quit_try", "ecig")),
    ("p0,p1,p2,p3\n", ()),  # no names given: a poset's default names
  ],
)
def test_headers_by_the_rule_and_byte_order_marks_keep_every_row(
  tmp_path, bom, header, names
):
  path = _write(tmp_path, header + ROWS, bom=bom)
  rows = cli_release.load_rows(str(path), 4, names)
  np.testing.assert_array_equal(rows, [[1, 1, 0, 0], [0, 0, 0, 0], [1, 0, 0, 0]])


def test_the_posets_element_names_are_a_header_whatever_they_look_like(tmp_path):
  names = ("1a", "2b", "3c", "4d")  # not names by the rule: digits first
  path = _write(tmp_path, ",".join(names) + "\n" + ROWS)
  assert len(cli_release.load_rows(str(path), 4, names)) == 3
  with pytest.raises(UsageError, match=r"row 0, column 0: .* \(line 1 "):
    cli_release.load_rows(str(path), 4)


@pytest.mark.parametrize(
  "header", ["q1,q2,nan,q4", "q1,q2,True,q4", "q1,q2,3,q4", "q1,q2,inf,q4", "q1,,q3,q4"]
)
def test_a_header_with_a_value_in_it_is_data(tmp_path, header):
  path = _write(tmp_path, header + "\n" + ROWS)
  with pytest.raises(UsageError, match=r"row 0, column 0: .* \(line 1 "):
    cli_release.load_rows(str(path), 4)


def test_lines_are_counted_in_the_file(tmp_path):
  path = _write(tmp_path, "q1,q2,q3,q4\n1,1,0,0\n0,2,0,0\n")
  with pytest.raises(UsageError, match=r"row 1, column 1: .* \(line 3 ") as e:
    cli_release.load_rows(str(path), 4, NAMES)
  assert "header only if" not in str(e.value)


def _rows_released(tmp_path, monkeypatch, text, bom=False):
  """The rows ``jaxdp release --poset nhis1`` reads from a CSV (stopped before any
  budget is spent)."""
  path = _write(tmp_path, text, bom=bom)
  seen = []

  def stop(*args, **kwargs):
    raise AssertionError("stopped before the accountant")

  monkeypatch.setattr(
    cli_release, "check_filters", lambda src, poset, rows: seen.append(rows)
  )
  monkeypatch.setattr(cli_release.Accountant, "create", stop)
  with pytest.raises(AssertionError, match="stopped before"):
    main(["release", "--poset", "nhis1", "--data", str(path), "--eps", "1"])
  assert len(seen) == 1
  return seen[0]


def test_release_reads_every_row_of_an_excel_export(tmp_path, monkeypatch):
  """The reported file: a BOM and 2 data rows; the rows reach the release."""
  rows = _rows_released(tmp_path, monkeypatch, "1,0,0,0\n0,0,0,0\n", bom=True)
  assert rows.shape == (2, 4)


def test_a_header_in_another_order_is_read_by_name(tmp_path, monkeypatch):
  """The header named the columns ``q3,q1,q4,q2`` and was ignored: q3's answers were
  published as q1's. Each column is read under the question its header names."""
  file_rows = np.array([[1, 1, 0, 1], [0, 1, 0, 0], [0, 0, 1, 0], [1, 1, 1, 1]])
  text = "q3,q1,q4,q2\n" + "".join(",".join(map(str, r)) + "\n" for r in file_rows)
  want = np.empty_like(file_rows)
  for col, name in enumerate(["q3", "q1", "q4", "q2"]):
    want[:, NAMES.index(name)] = file_rows[:, col]
  np.testing.assert_array_equal(_rows_released(tmp_path, monkeypatch, text), want)
  np.testing.assert_array_equal(
    cli_release.load_rows(str(_write(tmp_path, text)), 4, NAMES), want
  )


@pytest.mark.parametrize(
  "header, message",
  [
    ("q1;q2;q3;q4", r"the header \(line 1\) has 1 field, the data 4 columns"),
    ("q1\tq2\tq3\tq4", r"the header \(line 1\) has 1 field, the data 4 columns"),
    ("q1,q2,q3", r"the header \(line 1\) has 3 fields, the data 4 columns"),
    ("q1,q2,q3,q4,q5", r"the header \(line 1\) has 5 fields, the data 4 columns"),
    ("q1,q2,q3,q5", r"unknown: 'q5'; missing: 'q4'"),
    ("Q1,q2,q3,q4", r"unknown: 'Q1'; missing: 'q1'"),
    ("q1,q2,q2,q4", r"repeated: 'q2'; missing: 'q3'"),
    ("smoked,daily,quit_try,ecig", r"unknown: 'smoked', 'daily', 'quit_try', 'ecig'"),
  ],
)
def test_a_header_that_does_not_name_each_question_once_is_refused(
  tmp_path, header, message
):
  """A one-field header (the wrong separator) before 4-column data was dropped; so
  was any header of names the questionnaire does not have."""
  path = _write(tmp_path, header + "\n" + ROWS)
  with pytest.raises(UsageError, match=message) as e:
    cli_release.load_rows(str(path), 4, NAMES)
  msg = str(e.value)
  if "unknown" in msg or "repeated" in msg:
    assert "the questions are 'q1', 'q2', 'q3', 'q4'" in msg
  for line in ROWS.splitlines():  # never a row's answers
    assert line not in msg and line.replace(",", ", ") not in msg


def test_a_header_of_names_that_fail_the_name_rule_is_still_checked(tmp_path):
  names = ("1a", "2b", "3c", "4d")
  path = _write(tmp_path, "2b,1a,3c,4d\n" + ROWS)
  rows = cli_release.load_rows(str(path), 4, names)
  np.testing.assert_array_equal(rows, [[1, 1, 0, 0], [0, 0, 0, 0], [0, 1, 0, 0]])
  with pytest.raises(UsageError, match=r"repeated: '1a'; missing: '2b'"):
    cli_release.load_rows(str(_write(tmp_path, "1a,1a,3c,4d\n" + ROWS)), 4, names)


def test_question_names_that_are_answers_are_refused(tmp_path):
  """With questions named 0 and 1 a header ``1,0`` cannot be told from an answer row."""
  path = _write(tmp_path, "1,0\n0,0\n")
  with pytest.raises(UsageError, match=r"question names '0', '1' .* cannot be told"):
    cli_release.load_rows(str(path), 2, ("0", "1"))
  assert len(cli_release.load_rows(str(path), 2, ("0", "b"))) == 2


def test_a_blank_line_inside_the_data_is_refused_not_dropped(tmp_path, capsys):
  """Blank lines were skipped, though an empty field is refused, never dropped."""
  path = tmp_path / "a.csv"
  path.write_text("q1,q2,q3,q4\n1,0,0,0\n\n1,1,0,0\n\n\n")
  argv = ["release", "--poset", "nhis1", "--data", str(path), "--eps", "1"]
  assert main(argv) == 2
  assert "line 3 is blank" in capsys.readouterr().err
  path.write_text("q1,q2,q3,q4\n1,0,0,0\n1,1,0,0\n\n\n")  # trailing blank lines only
  assert len(cli_release.load_rows(str(path), 4, ("q1", "q2", "q3", "q4"))) == 2
