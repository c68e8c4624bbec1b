"""The use-and-keep DP Count Sketch of [YKAE] for intermittent queries: results R1-R12.

``PAPER`` pairs the scales, data, cells and grids of ``runs`` with the verdicts of ``report``.
"""

from __future__ import annotations

from reproduction.experiments.intermittent.report import build_report
from reproduction.experiments.intermittent.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(MODES, build_experiments, build_report)
