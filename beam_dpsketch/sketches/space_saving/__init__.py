"""DP SpaceSaving: the exact SpaceSaving sketch, its DP release and calibration.

* :mod:`.sketch`: :class:`SpaceSaving` with ``k`` counters and a fixed tie-break among the
  minimum slots (unused slots first, then the smallest canonical key); not private;
* :mod:`.release`: :func:`dp_space_saving`, noisy counters above a noisy cut, after R. Holland,
  "An Iconic Heavy Hitter Algorithm Made Private" (arXiv 2512.17295), with the neighbour model,
  the cut and the privacy argument derived here (docs/algorithms.md#space-saving), and
  :func:`calibrate_space_saving`, its public calibration.

Counts over-estimate (``f(x) <= c(x) <= f(x) + n/k``) and every key above ``n/k`` is monitored,
so the release keeps more true heavy hitters than a Misra-Gries release of the same size,
whose counts under-estimate.
"""

from beam_dpsketch.sketches.space_saving.release import (
    CUTS,
    DEFAULT_CUT_FRACTION,
    NEIGHBOURING_SPACE_SAVING,
    SpaceSavingCalibration,
    calibrate_space_saving,
    check_cut_fraction,
    dp_space_saving,
)
from beam_dpsketch.sketches.space_saving.sketch import MAX_COUNTERS, SpaceSaving

__all__ = [
    "CUTS",
    "DEFAULT_CUT_FRACTION",
    "MAX_COUNTERS",
    "NEIGHBOURING_SPACE_SAVING",
    "SpaceSaving",
    "SpaceSavingCalibration",
    "calibrate_space_saving",
    "check_cut_fraction",
    "dp_space_saving",
]
