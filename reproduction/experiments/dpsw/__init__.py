"""DPSW-Sketch of [WWC24] and its baselines over sliding windows: results R1-R15.

``PAPER`` pairs the scales, data, cells and grids of ``runs`` with the verdicts of ``report``.
"""

from __future__ import annotations

from reproduction.experiments.dpsw.report import build_report
from reproduction.experiments.dpsw.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(MODES, build_experiments, build_report, data=("flights", "words"))
