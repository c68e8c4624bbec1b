"""The DP Misra-Gries releases of [LT23]: the paper's utility claims, measured.

``PAPER`` pairs the scales, data, cells and grids of ``runs`` with the verdicts of ``report``.
"""

from __future__ import annotations

from reproduction.experiments.misra_gries.report import build_report
from reproduction.experiments.misra_gries.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(MODES, build_experiments, build_report, data=("flights",))
