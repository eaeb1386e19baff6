"""The argparse classes of the command line: flags only in full, one-line errors, and
each option's default shown once in ``--help``."""

from __future__ import annotations

import argparse

__all__ = ["HelpFormatter", "Parser"]


class Parser(argparse.ArgumentParser):
  """An argument parser that takes flags only in full and reports errors in one line.

  ``allow_abbrev=False`` is the default here, so that every subcommand's parser (made
  by ``add_subparsers``, of this class) refuses ``--sample`` for ``--samples``.
  """

  def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
    kwargs.setdefault("formatter_class", HelpFormatter)
    super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

  def error(self, message):
    self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """Each option's help ends with its default, once; the epilog keeps its line breaks.

  No default is appended where the help text already says what the default is, nor
  for flags without a value (``--no-plot``) or without a default (``None``).
  """

  def _get_help_string(self, action):
    text = action.help or ""
    if (
      "(default" in text
      or "default:" in text
      or not action.option_strings
      or action.default is None
      or action.default is False
      or action.default == argparse.SUPPRESS
    ):
      return text
    return f"{text} (default: %(default)s)"
