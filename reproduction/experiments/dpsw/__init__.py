"""DPSW-Sketch of [WWC24] and its baselines over sliding windows: results R1-R15.

:mod:`~reproduction.experiments.dpsw.runs` holds the scales, data, cells and experiment grids;
:mod:`~reproduction.experiments.dpsw.report` turns the result tables into figures and verdicts.
Papers are cited by the keys of docs/algorithms.md#references.
"""

from __future__ import annotations

from reproduction.experiments.dpsw.report import build_report
from reproduction.experiments.dpsw.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(
    modes=MODES,
    experiments=build_experiments,
    report=build_report,
    data=("flights", "words"),
)
"""The experiment table :func:`~reproduction.papers.run_paper` runs."""
