"""The DP linear sketches and quantiles of [ZQR+22]: claims C1-C9.

:mod:`~reproduction.experiments.linear.runs` holds the scales, data, cells and experiment grids;
:mod:`~reproduction.experiments.linear.report` turns the result tables into figures and verdicts.
Papers are cited by the keys of docs/algorithms.md#references.
"""

from __future__ import annotations

from reproduction.experiments.linear.report import build_report
from reproduction.experiments.linear.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(
    modes=MODES,
    experiments=build_experiments,
    report=build_report,
    data=("flights",),
)
"""The experiment table :func:`~reproduction.papers.run_paper` runs."""
