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
@pytest.mark.parametrize("header", ["", "q1,q2,q3,q4\n", "smoked, daily ,quit_try,ecig\n"])
def test_headers_by_the_rule_and_byte_order_marks_keep_every_row(tmp_path, bom, header):
  path = _write(tmp_path, header + ROWS, bom=bom)
  rows = cli_release.load_rows(str(path), 4)
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
  path = _write(tmp_path, "q1,q2,q3,q4\n\n1,1,0,0\n0,2,0,0\n")
  with pytest.raises(UsageError, match=r"row 1, column 1: .* \(line 4 ") as e:
    cli_release.load_rows(str(path), 4)
  assert "header only if" not in str(e.value)


def test_release_reads_every_row_of_an_excel_export(tmp_path, monkeypatch):
  """The reported file: a BOM and 2 data rows; the rows reach the release (stopped
  before any budget is spent)."""
  path = _write(tmp_path, "1,0,0,0\n0,0,0,0\n", bom=True)
  seen = []

  def stop(*args, **kwargs):
    raise AssertionError("stopped before the accountant")

  monkeypatch.setattr(
    cli_release, "check_filters", lambda src, poset, rows: seen.append(rows)
  )
  monkeypatch.setattr(cli_release.Accountant, "create", stop)
  with pytest.raises(AssertionError, match="stopped before"):
    main(["release", "--poset", "nhis1", "--data", str(path), "--eps", "1"])
  assert len(seen) == 1 and seen[0].shape == (2, 4)
