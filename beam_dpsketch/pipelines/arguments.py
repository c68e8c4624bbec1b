"""How the command line parses its arguments: which options the user gave, and negative numbers.

Every subcommand parses with :class:`CommandLineParser`, which records the options the command
line gave explicitly, so that a subcommand can refuse one that would have no effect
(:func:`refuse_given`) whatever its default.

argparse takes an argument that starts with ``-`` for an option unless it looks like a negative
number, and its idea of a number is narrow: ``-5`` and ``-0.5`` are numbers, but ``-1e18``,
``-5.`` and ``-inf`` are options (``--lower -1e18`` fails with "expected one argument").
:func:`accept_negative_numbers` widens that to every float spelling, so a public bound like
``--lower -1e18`` is read as the value it is.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable, Mapping, Sequence

__all__ = [
    "GIVEN_OPTIONS",
    "NEGATIVE_NUMBER",
    "CommandLineParser",
    "accept_negative_numbers",
    "given_options",
    "option_strings",
    "refuse_given",
]

#: A negative decimal or float literal as Python's ``float()`` spells it (no underscores).
NEGATIVE_NUMBER = re.compile(
    r"^-(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE
)

#: Namespace attribute where :class:`CommandLineParser` records the options the command line gave.
GIVEN_OPTIONS = "given_options"


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


class _NotGiven:
    """Placeholder value of an option while its command line is parsed (never seen after)."""

    def __repr__(self) -> str:
        return "<not given>"


_NOT_GIVEN = _NotGiven()
# Actions that update the value already in the namespace (a list, a count) rather than replace
# it: they cannot start from a placeholder. Passing one always stores a new object (a copied
# list, a count), so "given" is "the value is not the default object".
_ACCUMULATING_ACTIONS = (
    argparse._AppendAction,  # noqa: SLF001 - includes _ExtendAction
    argparse._AppendConstAction,  # noqa: SLF001
    argparse._CountAction,  # noqa: SLF001
)


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that records which options the command line gave explicitly.

    After parsing, ``namespace.given_options`` (:data:`GIVEN_OPTIONS`) maps the ``dest`` of every
    option that appeared on the command line (under any spelling or abbreviation) to its long
    option string, e.g. ``{"max_contributions": "--max-contributions"}`` (for options sharing a
    ``dest``, that of the first one declared). Every other option holds
    its default, as with ``argparse.ArgumentParser``; an option passed with its default value
    counts as given. Subparsers created by ``add_subparsers`` are of this class too (argparse's
    default), and their records are merged into the parent's namespace.

    :func:`given_options` and :func:`refuse_given` read the record, so a subcommand can refuse an
    option the user passed that would have no effect, whatever its default.
    """

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        namespace = argparse.Namespace() if namespace is None else namespace
        tracked: dict[str, argparse.Action] = {}
        for action in self._actions:
            if (
                not action.option_strings
                or action.dest == argparse.SUPPRESS
                or action.default is argparse.SUPPRESS
                or action.dest in tracked
                or hasattr(namespace, action.dest)
            ):
                continue
            tracked[action.dest] = action
            if not isinstance(action, _ACCUMULATING_ACTIONS):
                # argparse sets a default only where the namespace has no value: the placeholder
                # stays exactly where no option wrote.
                setattr(namespace, action.dest, _NOT_GIVEN)
        namespace, extras = super().parse_known_args(args, namespace)
        given = dict(getattr(namespace, GIVEN_OPTIONS, None) or {})
        for dest, action in tracked.items():
            value = getattr(namespace, dest, _NOT_GIVEN)
            if isinstance(action, _ACCUMULATING_ACTIONS):
                passed = value is not action.default
            else:
                passed = value is not _NOT_GIVEN
                if not passed:
                    default = action.default
                    if isinstance(default, str):
                        # argparse converts a string default with the option's type.
                        default = self._get_value(action, default)
                    setattr(namespace, dest, default)
            if passed:
                given[dest] = next(
                    (s for s in action.option_strings if s.startswith("--")),
                    action.option_strings[0],
                )
        setattr(namespace, GIVEN_OPTIONS, given)
        return namespace, extras


def given_options(args: argparse.Namespace, *dests: str) -> list[str]:
    """The option strings of those ``dests`` the command line gave, in the order of ``dests``.

    Reads the record of :class:`CommandLineParser`; a namespace without one (built by another
    parser or by hand) has no given options.
    """
    given: Mapping[str, str] = getattr(args, GIVEN_OPTIONS, None) or {}
    return [given[d] for d in dests if d in given]


def refuse_given(args: argparse.Namespace, dests: Iterable[str], reason: str) -> None:
    """Refuse options that would have no effect: raise if the command line gave any of ``dests``.

    Raises
    ------
    ValueError
        ``"--a, --b have no effect <reason>"`` for the given ones (one line; ``reason`` should
        name only public settings, e.g. ``"without --time-column"``).
    """
    flags = given_options(args, *dests)
    if flags:
        verb = "has" if len(flags) == 1 else "have"
        raise ValueError(f"{', '.join(flags)} {verb} no effect {reason}")


def option_strings(parser: argparse.ArgumentParser) -> list[str]:
    """Every option string of ``parser`` (to suggest corrections for mistyped Beam options)."""
    return [s for action in parser._actions for s in action.option_strings]  # noqa: SLF001
