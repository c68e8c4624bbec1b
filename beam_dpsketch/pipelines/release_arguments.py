"""The options that set what a DP release costs and how accurate it is: the privacy budget and
noise key of every DP subcommand, and the default width of the streaming subcommands' sketches.

:func:`add_privacy_arguments` declares ``--epsilon``, ``--delta``, ``--rho``,
``--insecure-test-seed`` and ``--explain``; :func:`budget_from_args` and
:func:`noise_source_from_args` turn them into the :class:`~beam_dpsketch.privacy.PrivacyBudget`
and the :class:`~beam_dpsketch.noise.NoiseSource` of the run.
"""

from __future__ import annotations

import argparse

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget

__all__ = [
    "DEFAULT_DELTA",
    "STREAM_WIDTH",
    "STREAM_WIDTH_HELP",
    "add_privacy_arguments",
    "budget_from_args",
    "noise_source_from_args",
]

#: The delta of every command whose release needs one, unless ``--delta`` says otherwise.
DEFAULT_DELTA = 1e-6

#: Default counters per row of the streaming commands' sketches (continual, sliding-window).
#: Every key adds its count to one cell per row and the estimate keeps the minimum over the
#: rows, so a key reads about ``n / width`` of other keys' rows (``n`` the rows counted). At
#: 1,024 a rare key read several hundred high on a 2 M-row city stream (continual) and about
#: 75 high over a 10^5-row window (sliding-window); at 16,384 collisions stay below the noise at
#: eps 1 there, for 20-30 % more run time.
STREAM_WIDTH = 16384
STREAM_WIDTH_HELP = (
    f"counters per row ({STREAM_WIDTH}); a key's estimate carries about rows/width of other "
    "keys' counts: raise it for much more than 10^6 rows (continual) or a window of much more "
    "than 10^5 rows (sliding-window)"
)


def add_privacy_arguments(
    group: argparse._ArgumentGroup,
    *,
    delta: str | float | None = "optional",
    rho: bool = False,
) -> None:
    """Add ``--epsilon``, ``--delta``, ``--rho``, ``--insecure-test-seed`` and ``--explain``.

    Parameters
    ----------
    group
        The argument group (or parser) to add to.
    delta
        ``None``: no ``--delta`` (pure epsilon-DP only); ``"optional"``: pure DP without it;
        ``"gaussian"``: a Gaussian release, for which ``--epsilon`` alone means
        ``delta = DEFAULT_DELTA``; or a float: its default.
    rho
        Also offer ``--rho`` (zCDP) instead of ``--epsilon``/``--delta``; ``--epsilon`` is then
        optional.

    :func:`budget_from_args` and :func:`noise_source_from_args` read them back.
    """
    group.add_argument(
        "--epsilon",
        type=float,
        required=not rho,
        help="privacy parameter epsilon" + ("" if delta is not None else " (pure DP, in total)"),
    )
    if delta == "optional":
        help_delta = "privacy parameter delta (default: pure epsilon-DP)"
        group.add_argument("--delta", type=float, help=help_delta)
    elif delta == "gaussian":
        group.add_argument(
            "--delta",
            type=float,
            help=f"privacy parameter delta ({DEFAULT_DELTA:g} with --epsilon alone: this release "
            "is Gaussian, it has no pure-DP form)",
        )
    elif delta is not None:
        group.add_argument(
            "--delta", type=float, default=delta, help=f"privacy parameter delta ({delta:g})"
        )
    if rho:
        group.add_argument("--rho", type=float, help="zCDP rho (instead of --epsilon/--delta)")
    group.add_argument(
        "--insecure-test-seed",
        type=int,
        metavar="N",
        help="INSECURE: derive the noise key from N (reproducible output, no privacy)",
    )
    group.add_argument(
        "--explain", action="store_true", help="print the privacy accounting before running"
    )


def budget_from_args(args: argparse.Namespace, *, pure: bool = True) -> PrivacyBudget:
    """The budget of :func:`add_privacy_arguments`' options.

    ``--rho`` gives ``PrivacyBudget.zcdp``, ``--epsilon`` with ``--delta`` ``approx``, and
    ``--epsilon`` alone ``pure``, or, with ``pure=False`` (Gaussian releases),
    ``approx(epsilon, DEFAULT_DELTA)``.
    """
    rho = getattr(args, "rho", None)
    epsilon, delta = args.epsilon, getattr(args, "delta", None)
    if rho is not None:
        if epsilon is not None or delta is not None:
            raise ValueError("pass either --rho or --epsilon with --delta")
        return PrivacyBudget.zcdp(rho)
    if epsilon is None:
        alternative = " (or --rho)" if hasattr(args, "rho") else ""
        raise ValueError("--epsilon is required" + alternative)
    if delta is None and not pure:
        # A Gaussian release has no pure-DP form: the same default delta as the other commands.
        delta = DEFAULT_DELTA
    if delta is None:
        return PrivacyBudget.pure(epsilon)
    return PrivacyBudget.approx(epsilon, delta)


def noise_source_from_args(args: argparse.Namespace) -> NoiseSource:
    """A fresh secret ``NoiseSource``, or the insecure seeded one of ``--insecure-test-seed``."""
    if args.insecure_test_seed is not None:
        return NoiseSource.insecure_for_tests(args.insecure_test_seed)
    return NoiseSource()
