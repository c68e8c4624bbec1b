"""Command-line parsing shared by the subcommands: negative numbers as option values.

argparse takes an argument that starts with ``-`` for an option unless it looks like a negative
number, and its idea of a number is narrow: ``-5`` and ``-0.5`` are numbers, but ``-1e18``,
``-5.`` and ``-inf`` are options (``--lower -1e18`` fails with "expected one argument").
:func:`accept_negative_numbers` widens that to every float spelling, so a public bound like
``--lower -1e18`` is read as the value it is.
"""

from __future__ import annotations

import argparse
import re

__all__ = ["NEGATIVE_NUMBER", "accept_negative_numbers"]

#: A negative decimal or float literal as Python's ``float()`` spells it (no underscores).
NEGATIVE_NUMBER = re.compile(
    r"^-(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE
)


def accept_negative_numbers(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Make ``parser`` read every negative float literal as a value, never as an option.

    Safe as long as no option string of ``parser`` itself looks like a negative number (argparse
    then switches to treating such arguments as options again, as it does by default). Returns
    ``parser``.
    """
    # argparse consults this (private) pattern in _parse_optional; the instance attribute is
    # the documented-by-source way to change it for one parser.
    parser._negative_number_matcher = NEGATIVE_NUMBER  # noqa: SLF001
    return parser
