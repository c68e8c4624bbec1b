"""Linear frequency sketches (Count-Min, Count Sketch, Count-Median) and their DP release.

:class:`CountMinSketch` (Cormode and Muthukrishnan 2005), :class:`CountSketch` (Charikar,
Chen and Farach-Colton 2002) and :class:`CountMedianSketch` (the Count-Min table queried with
the median, [CM05]) are exact, turnstile and mergeable, and **not** differentially private.
:class:`PrivateCountMinSketch`, :class:`PrivateCountSketch` and
:class:`PrivateCountMedianSketch` release one of them once with noise calibrated to its exact
sensitivity, following Zhao et al. [ZQR+22]. Modules:

* :mod:`.base`: the table machinery shared by the sketches;
* :mod:`.countmin`, :mod:`.countsketch`, :mod:`.countmedian`: the exact sketches;
* :mod:`.private`: the private release;
* :mod:`.merged`: the sum of independently released sketches (federated release) and its noise;
* :mod:`.key_counts`: exact counts of declared public keys and their private release (no
  sketch error);
* :mod:`.calibration`: neighbouring relations, sensitivities and noise scales, shared with the
  dyadic quantile sketch of :mod:`beam_dpsketch.sketches.quantiles`.

Citation keys are those of ``docs/algorithms.md#references``.
"""

from beam_dpsketch.sketches.linear.base import LinearSketch
from beam_dpsketch.sketches.linear.calibration import LinearCalibration
from beam_dpsketch.sketches.linear.countmedian import CountMedianSketch
from beam_dpsketch.sketches.linear.countmin import CountMinSketch
from beam_dpsketch.sketches.linear.countsketch import CountSketch
from beam_dpsketch.sketches.linear.key_counts import KeyCountIndex, PrivateKeyCounts
from beam_dpsketch.sketches.linear.merged import MergedCalibration, merge_released
from beam_dpsketch.sketches.linear.private import (
    PRIVATE_LINEAR_SKETCHES,
    PrivateCountMedianSketch,
    PrivateCountMinSketch,
    PrivateCountSketch,
)

__all__ = [
    "PRIVATE_LINEAR_SKETCHES",
    "CountMedianSketch",
    "CountMinSketch",
    "CountSketch",
    "KeyCountIndex",
    "LinearCalibration",
    "LinearSketch",
    "MergedCalibration",
    "PrivateCountMedianSketch",
    "PrivateCountMinSketch",
    "PrivateCountSketch",
    "PrivateKeyCounts",
    "merge_released",
]
