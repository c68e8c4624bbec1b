"""The Lazy and Punctual sketches of [Hol25] under continual observation: results R0-R6.

``PAPER`` pairs the scales, data, cells and grids of ``runs`` with the verdicts of ``report``.
"""

from __future__ import annotations

from reproduction.experiments.lazy.report import build_report
from reproduction.experiments.lazy.runs import MODES, build_experiments
from reproduction.papers import Paper

__all__ = ["PAPER"]

PAPER = Paper(MODES, build_experiments, build_report, timed=frozenset({"lazy-throughput"}))
