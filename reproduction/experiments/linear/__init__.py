"""The DP linear sketches and quantiles of [ZQR+22]: claims C1-C9.

``PAPER`` pairs the scales, data, cells and grids of ``runs`` with the verdicts of ``report``.
"""

from __future__ import annotations

from reproduction.experiments.linear.report import build_report
from reproduction.experiments.linear.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(MODES, build_experiments, build_report, data=("flights",))
