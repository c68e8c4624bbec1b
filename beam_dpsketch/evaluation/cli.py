"""``beam-dpsketch evaluate PAPER``: reproduce a paper's results table and write an HTML report.

``PAPER`` is one of :data:`PAPERS` or ``all``. Implemented so far: ``sketches`` (the non-private
Count-Min, Count Sketch and Misra-Gries against their textbook bounds), ``misra-gries`` (the
DP Misra-Gries releases of Lebeda and Tetek against the paper's utility claims) and ``linear``
(the DP linear sketches and quantiles of Zhao et al., claims C1-C9). The other
papers' experiments need their DP algorithms; asking for one prints "not implemented yet" with
the issue it lands with and exits with status 1, rather than showing made-up results.

Scales: ``--quick`` (default; about a minute on 2 cores), ``--full`` (the larger grid, minutes
to tens of minutes) and ``--smoke`` (a few seconds; what the test suite runs). Results are cached
in ``OUT/PAPER/<experiment>.parquet``, so re-running only redraws the report, and an interrupted
run resumes where it stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PAPERS", "PendingPaper", "register", "run", "run_evaluation"]

EXIT_NOT_IMPLEMENTED = 1


@dataclass(frozen=True)
class PendingPaper:
    """A paper whose experiments are not implemented yet, and where they will land."""

    title: str
    spec: str
    issue: int | None = None

    def message(self, name: str) -> str:
        """The one-line "not implemented yet" message for ``evaluate NAME``."""
        where = f"issue #{self.issue}" if self.issue is not None else "a later issue"
        return (
            f"{name}: not implemented yet: lands with {where} ({self.title}; "
            f"results table in shared/specs/{self.spec})"
        )


PAPERS: dict[str, PendingPaper | None] = {
    "sketches": None,  # implemented: evaluation.experiments.sketches
    "misra-gries": None,  # implemented: evaluation.experiments.misra_gries
    "linear": None,  # implemented: evaluation.experiments.linear
    "lazy": None,  # implemented: evaluation.experiments.lazy
    "dpsw": None,  # implemented: evaluation.experiments.dpsw
    "intermittent": None,  # implemented: evaluation.experiments.intermittent
}
"""Every paper ``evaluate`` knows; ``None`` marks the implemented ones."""


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
    """Evaluate one paper (or ``"all"``); print where the report is. Returns the exit status.

    Status 0 when every requested report was written (whatever its verdicts), 1 when a requested
    paper is not implemented yet.
    """
    names = list(PAPERS) if paper == "all" else [paper]
    if paper != "all" and paper not in PAPERS:
        raise ValueError(f"unknown paper {paper!r}; choose from {', '.join([*PAPERS, 'all'])}")
    status = 0
    for name in names:
        pending = PAPERS[name]
        if pending is not None:
            print(f"beam-dpsketch evaluate: {pending.message(name)}", file=sys.stderr)
            status = EXIT_NOT_IMPLEMENTED
            continue
        start = time.perf_counter()
        path, counts = _run_paper(name, scale, Path(out) / name, workers, offline, progress)
        print(
            f"{name}: report {path} ({counts['reproduced']} reproduced, {counts['differs']} "
            f"differs, {counts['not run']} not run) in {time.perf_counter() - start:.1f} s"
        )
    return status


_EXPERIMENT_MODULES = {
    "sketches": "beam_dpsketch.evaluation.experiments.sketches",
    "misra-gries": "beam_dpsketch.evaluation.experiments.misra_gries",
    "linear": "beam_dpsketch.evaluation.experiments.linear",
    "intermittent": "beam_dpsketch.evaluation.experiments.intermittent",
    "lazy": "beam_dpsketch.evaluation.experiments.lazy",
    "dpsw": "beam_dpsketch.evaluation.experiments.dpsw",
}
"""The module of each implemented paper; each has ``run(mode, out_dir, ...) -> (Report, ...)``."""


def _run_paper(
    name: str, scale: str, out: Path, workers: int, offline: bool, progress: bool | None
) -> tuple[Path, dict[str, int]]:
    # Imported here so `beam-dpsketch --help` stays fast and matplotlib is only needed to report.
    import importlib

    from beam_dpsketch.evaluation.report import pyplot, write_html

    pyplot()  # fail before computing anything if matplotlib is missing
    module = importlib.import_module(_EXPERIMENT_MODULES[name])
    report, _ = module.run(scale, out, workers=workers, progress=progress, offline=offline)
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
