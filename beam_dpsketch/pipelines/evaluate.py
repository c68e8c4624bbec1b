"""``beam-dpsketch evaluate PAPER``: the papers' experiments, run from a checkout of the repository.

The paper-reproduction harness is the ``reproduction/`` folder at the root of the source
repository; it is not part of the installed package (it is most of the code and none of the
library). This module only finds it: when the command runs from the repository's root (or the
package itself is imported from a checkout, as an editable install is), the harness's own
``evaluate`` subcommand is registered; otherwise ``evaluate`` prints how to get the harness and
exits with status 2. The library never imports the harness.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["HARNESS_PACKAGE", "MISSING_HARNESS", "harness_root", "register", "run_without_harness"]

HARNESS_PACKAGE = "reproduction"
"""The harness's package name: a folder of that name at the repository's root."""

MISSING_HARNESS = (
    "the paper-reproduction harness is not part of the installed package: clone the "
    "beam-dpsketch source repository and run `beam-dpsketch evaluate` from its root, where the "
    f"`{HARNESS_PACKAGE}/` folder is (see docs/evaluation.md there)"
)
"""What ``evaluate`` prints, after ``error:``, when no harness is found."""


def harness_root(candidates: Sequence[Path] | None = None) -> Path | None:
    """The folder that holds the harness package, or ``None`` when there is none.

    Parameters
    ----------
    candidates
        Folders to look in, first match wins. By default the current directory, then the folder
        above this package when it is imported from a checkout.

    Returns
    -------
    pathlib.Path or None
        A folder with ``reproduction/cli.py`` in it.
    """
    if candidates is None:
        candidates = [Path.cwd(), Path(__file__).resolve().parents[2]]
    for root in candidates:
        if (Path(root) / HARNESS_PACKAGE / "cli.py").is_file():
            return Path(root)
    return None


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` subcommand: the harness's own, or one that says how to get it."""
    root = harness_root()
    if root is not None:
        # Appended, not prepended: the checkout's folder must not shadow the installed library
        # (its C extensions may not be built there). Worker processes inherit sys.path.
        if str(root) not in sys.path:
            sys.path.append(str(root))
        importlib.import_module(f"{HARNESS_PACKAGE}.cli").register(subparsers)
        return
    parser = subparsers.add_parser(
        "evaluate",
        help="reproduce a paper's results table (from a checkout of the source repository)",
        description=f"Not available here: {MISSING_HARNESS}.",
    )
    # Whatever follows `evaluate` gets the same answer instead of a usage error.
    parser.add_argument("arguments", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    parser.set_defaults(run=run_without_harness)


def run_without_harness(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """``evaluate`` when no harness was found: print how to get it; exit status 2."""
    print(f"beam-dpsketch evaluate: error: {MISSING_HARNESS}", file=sys.stderr)
    return 2
