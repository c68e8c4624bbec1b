"""The Lazy and Punctual sketches of [Hol25] under continual observation: results R0-R6.

:mod:`~reproduction.experiments.lazy.runs` holds the scales, data, cells and experiment grids;
:mod:`~reproduction.experiments.lazy.report` turns the result tables into figures and verdicts.
Papers are cited by the keys of docs/algorithms.md#references.
"""

from __future__ import annotations

from reproduction.experiments.lazy.report import build_report
from reproduction.experiments.lazy.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(
    modes=MODES,
    experiments=build_experiments,
    report=build_report,
    timed=frozenset({"lazy-throughput"}),
)
"""The experiment table :func:`~reproduction.papers.run_paper` runs."""
