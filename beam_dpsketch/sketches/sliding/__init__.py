"""Differentially private frequencies and heavy hitters over a sliding window.

The DPSW-Sketch of Wang, Wang and Chen [WWC24] (:class:`DPSWSketch`, laid out by
:class:`DPSWLayout`), and the baselines it is compared with (:class:`PCCMG`,
:class:`USketch`, and the exact, non-private :class:`ExactSlidingWindow` and
:class:`ExactWindowCountMin`). Modules:

* :mod:`.dpsw`: the DPSW-Sketch;
* :mod:`.layout`: its data-independent checkpoints, budgets and block layout;
* :mod:`.baselines`: the baselines.

Citation keys are those of ``docs/algorithms.md#references``; ``docs/algorithms.md#sliding-windows``
explains every deviation from the paper.
"""

from beam_dpsketch.sketches.sliding.baselines import (
    PCCMG,
    ExactSlidingWindow,
    ExactWindowCountMin,
    USketch,
)
from beam_dpsketch.sketches.sliding.dpsw import DPSWLayout, DPSWSketch

__all__ = [
    "PCCMG",
    "DPSWLayout",
    "DPSWSketch",
    "ExactSlidingWindow",
    "ExactWindowCountMin",
    "USketch",
]
