"""``beam-dpsketch evaluate PAPER``: reproduce a paper's results table and write an HTML report.

``PAPER`` is one of :data:`PAPERS` or ``all``: ``sketches`` (the non-private Count-Min, Count
Sketch and Misra-Gries against their textbook bounds), ``misra-gries`` (the DP Misra-Gries
releases of [LT23]), ``linear`` (the DP linear sketches and quantiles of [ZQR+22]), ``lazy``
(the Lazy and Punctual sketches under continual observation of [Hol25]), ``dpsw`` (DPSW-Sketch
of [WWC24] and its baselines over sliding windows) and ``intermittent`` (the use-and-keep DP
Count Sketch of [YKAE]); the keys are those of ``docs/algorithms.md``. Each report lists the
paper's claims, the measurement beside each and a verdict computed from it.

Scales: ``--quick`` (default; about a minute on 2 cores), ``--full`` (the larger grid, minutes
to tens of minutes) and ``--smoke`` (a few seconds; what the test suite runs). Results are cached
in ``OUT/PAPER/<experiment>.parquet``, so re-running only redraws the report, and an interrupted
run resumes where it stopped.

The library's :mod:`beam_dpsketch.pipelines.evaluate` registers this subcommand when it finds the
harness (the command runs from the repository's root, or the package is a checkout's).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from reproduction.papers import PAPERS

__all__ = ["PAPERS", "register", "run", "run_evaluation"]


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``evaluate`` subcommand."""
    parser = subparsers.add_parser(
        "evaluate",
        help="reproduce a paper's results table; writes an HTML report with plots and verdicts",
        description=(
            "Run a paper's experiments (cached and resumable) and write OUT/PAPER/index.html: "
            "each claim of the paper's results table, our figure beside it, and a verdict "
            "(reproduced / differs, with the reason). Papers: sketches (non-private "
            "Count-Min, Count Sketch, Misra-Gries vs their textbook bounds), misra-gries "
            "(DP Misra-Gries releases vs the paper's utility claims), linear (DP linear "
            "sketches and quantiles vs the paper's claims C1-C9), lazy (Lazy and Punctual "
            "sketches under continual observation, R0-R6), dpsw (DPSW-Sketch and its "
            "baselines over sliding windows, R1-R15) and intermittent (the use-and-keep DP "
            "Count Sketch, R1-R12)."
        ),
    )
    parser.add_argument(
        "paper", choices=[*PAPERS, "all"], metavar="PAPER", help=", ".join([*PAPERS, "all"])
    )
    scale = parser.add_mutually_exclusive_group()
    for flag, text in (
        ("quick", "reduced grid, about a minute on 2 cores (default)"),
        ("full", "the larger grid and the 3 M-row flights file (minutes to tens of minutes)"),
        ("smoke", "tiny grid, a few seconds (used by the tests)"),
    ):
        scale.add_argument(f"--{flag}", dest="scale", action="store_const", const=flag, help=text)
    parser.set_defaults(scale="quick")
    parser.add_argument(
        "--out",
        metavar="DIR",
        default="reports/evaluation",
        help="output directory (reports/evaluation)",
    )
    parser.add_argument(
        "--workers", type=int, choices=(1, 2), default=2, help="worker processes (2, the maximum)"
    )
    parser.add_argument(
        "--cache-dir",
        metavar="DIR",
        help="data cache (default $BEAM_DPSKETCH_CACHE or ~/.cache/beam-dpsketch)",
    )
    parser.add_argument(
        "--offline",
        action="store_true",
        help="never fetch data from a package registry; use the cache or the bundled sample",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)


def run_evaluation(
    paper: str,
    *,
    scale: str = "quick",
    out: str | os.PathLike[str] = "reports/evaluation",
    workers: int = 2,
    offline: bool = False,
    progress: bool | None = None,
) -> int:
    """Evaluate one paper (or ``"all"``); print where each report is.

    Returns
    -------
    int
        The exit status: 0 once every requested report is written, whatever its verdicts.

    Raises
    ------
    ValueError
        If ``paper`` is neither one of :data:`PAPERS` nor ``"all"``.
    """
    if paper != "all" and paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; choose from {', '.join([*PAPERS, 'all'])}")
    for name in list(PAPERS) if paper == "all" else [paper]:
        start = time.perf_counter()
        path, counts = _run_paper(name, scale, Path(out) / name, workers, offline, progress)
        print(
            f"{name}: report {path} ({counts['reproduced']} reproduced, {counts['differs']} "
            f"differs, {counts['not run']} not run) in {time.perf_counter() - start:.1f} s"
        )
    return 0


def _run_paper(
    name: str, scale: str, out: Path, workers: int, offline: bool, progress: bool | None
) -> tuple[Path, dict[str, int]]:
    # Imported here so `beam-dpsketch --help` stays fast and matplotlib is only needed to report.
    from reproduction.papers import load_paper, run_paper
    from reproduction.report import pyplot, write_html

    pyplot()  # fail before computing anything if matplotlib is missing
    report, _ = run_paper(
        load_paper(name), scale, out, workers=workers, progress=progress, offline=offline
    )
    report.command = f"beam-dpsketch evaluate {name} --{scale} --out {out.parent}"
    return write_html(report, out), report.verdict_counts()


def run(args: argparse.Namespace, beam_args: Sequence[str]) -> int:
    """``evaluate`` entry point for :mod:`beam_dpsketch.pipelines.cli`."""
    if beam_args:
        # evaluate runs no Beam pipeline, so leftover options are mistakes, not Beam options.
        print(
            f"beam-dpsketch evaluate: error: unrecognized arguments: {' '.join(beam_args)}",
            file=sys.stderr,
        )
        return 2
    if args.cache_dir:
        # The environment reaches the worker processes too (datasets.cache_dir reads it).
        os.environ["BEAM_DPSKETCH_CACHE"] = str(Path(args.cache_dir).expanduser())
    return run_evaluation(
        args.paper,
        scale=args.scale,
        out=args.out,
        workers=args.workers,
        offline=args.offline,
        progress=False if args.no_progress else None,
    )
