"""The use-and-keep DP Count Sketch of [YKAE] for intermittent queries: results R1-R12.

:mod:`~reproduction.experiments.intermittent.runs` holds the scales, data, cells and experiment grids;
:mod:`~reproduction.experiments.intermittent.report` turns the result tables into figures and verdicts.
Papers are cited by the keys of docs/algorithms.md#references.
"""

from __future__ import annotations

from reproduction.experiments.intermittent.report import build_report
from reproduction.experiments.intermittent.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(
    modes=MODES,
    experiments=build_experiments,
    report=build_report,
)
"""The experiment table :func:`~reproduction.papers.run_paper` runs."""
