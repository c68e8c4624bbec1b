"""The DP Misra-Gries releases of [LT23]: the paper's utility claims, measured.

:mod:`~reproduction.experiments.misra_gries.runs` holds the scales, data, cells and experiment grids;
:mod:`~reproduction.experiments.misra_gries.report` turns the result tables into figures and verdicts.
Papers are cited by the keys of docs/algorithms.md#references.
"""

from __future__ import annotations

from reproduction.experiments.misra_gries.report import build_report
from reproduction.experiments.misra_gries.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(
    modes=MODES,
    experiments=build_experiments,
    report=build_report,
    data=("flights",),
)
"""The experiment table :func:`~reproduction.papers.run_paper` runs."""
