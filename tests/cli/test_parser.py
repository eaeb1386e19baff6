"""The command line's parser: flags checked at parse time, spelled in full, one-line
errors, and help that shows each default once."""

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import jaxdp.cli as cli
from jaxdp.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
COMMANDS = ("nhis", "poset", "dims", "structure", "sample", "release", "advise")


def _parse_error(argv, capsys):
  with pytest.raises(SystemExit) as e:
    build_parser().parse_args(argv)
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert "\n" not in err, err
  return err


def _subparsers(ap):
  (action,) = [a for a in ap._actions if isinstance(a, argparse._SubParsersAction)]
  return action.choices


# (argv, the flag, the value, the allowed range as --help states it)
OUT_OF_RANGE = [
  (["nhis", "--samples", "1e30"], "--samples", "1e30", "1 to 10^12"),
  (["nhis", "--samples", "1000000000001"], "--samples", "1000000000001", "1 to 10^12"),
  (["nhis", "--samples", "0"], "--samples", "0", "1 to 10^12"),
  (["nhis", "--insertion-samples", "-1"], "--insertion-samples", "-1", "0 to 10^7"),
  (["nhis", "--eps", "0"], "--eps", "0", "1e-06 to 1000"),
  (["nhis", "--eps", "inf"], "--eps", "inf", "1e-06 to 1000"),
  (["nhis", "--eps", "1e9"], "--eps", "1e9", "1e-06 to 1000"),
  (["nhis", "--devices", "0"], "--devices", "0", "1 to 65,536"),
  (["nhis", "--num-processes", "0"], "--num-processes", "0", "1 to 65,536"),
  (["nhis", "--seed", "1e10"], "--seed", "1e10", "-2,147,483,648 to 2,147,483,647"),
  (["nhis", "--sections", "1,4"], "--sections", "4", "1 to 3"),
  (["dims", "--dims", "4,30"], "--dims", "30", "1 to 22"),
  (["dims", "--posets", "1e7"], "--posets", "1e7", "1 to 10^6"),
  (["structure", "--d", "23"], "--d", "23", "1 to 22"),
  (["structure", "--min-group", "0"], "--min-group", "0", "1 to 10^6"),
  (["sample", "--chunk", "1e9"], "--chunk", "1e9", "1 to 16,777,216"),
  (["release", "--data", "x.csv", "--eps", "-1"], "--eps", "-1", "1e-06 to 1000"),
]


@pytest.mark.parametrize("argv,flag,value,allowed", OUT_OF_RANGE)
def test_numeric_flags_out_of_range_are_refused_at_parse_time(
  argv, flag, value, allowed, capsys
):
  """`--samples 1e30` ran for ~10^24 s: every number is checked while parsing, and the
  message names the flag, the value and the range."""
  err = _parse_error(argv, capsys)
  assert f"argument {flag}: {value} is out of range" in err and allowed in err


@pytest.mark.parametrize(
  "argv,flag",
  [
    (["nhis", "--samples", "2.5"], "--samples"),
    (["nhis", "--samples", "many"], "--samples"),
    (["dims", "--posets", "3.5"], "--posets"),
    (["structure", "--d", "1e0.5"], "--d"),
    (["sample", "--seed", "nan"], "--seed"),
  ],
)
def test_integer_flags_take_only_integers(argv, flag, capsys):
  err = _parse_error(argv, capsys)
  assert f"argument {flag}: '{argv[-1]}' is not an integer" in err


def test_integers_written_in_scientific_or_grouped_form():
  args = build_parser().parse_args(
    [
      "nhis",
      "--samples",
      "1e6",
      "--insertion-samples",
      "1_000",
      "--sections",
      "1,3",
      "--mechanisms",
      "",
    ]
  )
  assert (args.samples, args.insertion_samples) == (10**6, 1000)
  assert args.sections == [1, 3] and args.mechanisms == []


@pytest.mark.parametrize(
  "argv",
  [
    ["nhis", "--sample", "5"],
    ["poset", "--pos", "nhis1"],
    ["dims", "--dim", "4"],
    ["structure", "--min", "5"],
    ["sample", "--out", "z.npy", "--chun", "5"],
    ["release", "--dat", "x.csv", "--eps", "1"],
  ],
)
def test_flags_must_be_spelled_in_full(argv, capsys):
  """argparse took `--sample` for `--samples` (prefix matching)."""
  err = _parse_error(argv, capsys)
  assert "unrecognized arguments" in err or "required" in err


def test_no_parser_matches_prefixes():
  ap = build_parser()
  assert not ap.allow_abbrev
  assert all(not p.allow_abbrev for p in _subparsers(ap).values())
  assert set(_subparsers(ap)) == set(COMMANDS) | {"ledger"}


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_each_default_once(command):
  """`--devices` read "...; default: all local devices) (default: None)": the
  formatter's default was appended to help that states its own."""
  text = _subparsers(build_parser())[command].format_help()
  entries = re.split(r"\n(?=  -)", text.split("options:", 1)[1])
  assert len(entries) > 3
  for entry in entries:
    assert entry.count("default") <= 1, entry
    assert "(default: None)" not in entry and "(default: False)" not in entry, entry
  assert "1 to 10^12" in text or command == "release"  # the ranges are in --help


def test_bare_command_has_every_option_of_nhis():
  """`python -m jaxdp` (the README's first command) runs the nhis study from the
  top-level parser's defaults: they must equal every default of `nhis`."""
  bare = vars(build_parser().parse_args([]))
  nhis = vars(build_parser().parse_args(["nhis"]))
  assert set(nhis) <= set(bare)
  assert {k: bare[k] for k in nhis if k != "command"} == {
    k: v for k, v in nhis.items() if k != "command"
  }
  assert bare["out"] == "out/nhis" and bare["command"] is None


def test_bare_command_runs_the_nhis_study(monkeypatch):
  seen = []
  monkeypatch.setitem(cli.COMMANDS, "nhis", lambda args: seen.append(args) or 0)
  assert main([]) == 0
  assert seen[0].command == "nhis" and seen[0].samples == 10**6
  assert seen[0].sections == [1, 2, 3] and seen[0].out == "out/nhis"


def test_main_returns_2_on_bad_flags_and_0_on_help(capsys):
  assert main(["nhis", "--samples", "1e30"]) == 2
  assert main(["dims", "--help"]) == 0
  assert "--dims" in capsys.readouterr().out


def test_user_errors_are_one_line_and_bugs_keep_their_traceback(monkeypatch, capsys):
  def invalid(args):
    raise ValueError("eps must be positive;\nsee the docs")

  monkeypatch.setitem(cli.COMMANDS, "dims", invalid)
  assert main(["dims"]) == 2
  err = capsys.readouterr().err
  assert err == "jaxdp: error: eps must be positive; see the docs\n"

  def bug(args):
    raise KeyError("internal")

  monkeypatch.setitem(cli.COMMANDS, "dims", bug)
  with pytest.raises(KeyError):
    main(["dims"])


@pytest.mark.subprocess
def test_argparse_errors_exit_2_with_one_line_and_no_traceback():
  r = subprocess.run(
    [sys.executable, "-m", "jaxdp", "nhis", "--eps", "-1"],
    cwd=ROOT,
    env=dict(os.environ, PYTHONUNBUFFERED="1"),
    capture_output=True,
    text=True,
    timeout=900,
  )
  assert r.returncode == 2 and "--eps" in r.stderr
  assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


@pytest.mark.parametrize("text", ["1_0", " 1", "1 ", "\uff11", "1e", "0x1", "١"])
def test_eps_must_be_written_plainly(text, capsys):
  """``float()`` takes ``1_0`` (= 10), full-width and Arabic-Indic digits and spaces:
  a typo would become a ten times larger eps."""
  err = _parse_error(
    ["release", "--poset", "nhis1", "--data", "a.csv", "--eps", text], capsys
  )
  assert "--eps" in err and "not a number" in err


@pytest.mark.parametrize(
  "text, value", [("1_000_000", 10**6), ("1e6", 10**6), ("2000", 2000)]
)
def test_integers_may_group_digits_by_three(text, value):
  assert build_parser().parse_args(["nhis", "--samples", text]).samples == value


@pytest.mark.parametrize("text", ["1_0", "10_00", "\uff11\uff10"])
def test_integers_refuse_other_groupings_and_digits(text, capsys):
  assert "--samples" in _parse_error(["nhis", "--samples", text], capsys)


@pytest.mark.parametrize(
  "command", [["nhis"], ["release", "--poset", "nhis1", "--data", "a.csv", "--eps", "1"]]
)
def test_an_empty_out_is_refused(command, capsys):
  """``--out ""`` was taken as no --out: the release was printed and nothing written."""
  assert "--out" in _parse_error([*command, "--out", ""], capsys)
