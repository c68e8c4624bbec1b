"""Quantiles over a declared domain: the Dyadic Count Sketch and its differentially private release.

The quantile sketch of Zhao et al. [ZQR+22, Section 4]: :class:`DyadicCountSketch` is exact,
turnstile and mergeable over a bounded integer domain (:class:`FloatDomain` maps floats to it)
and **not** differentially private; :class:`PrivateDyadicCountSketch` releases it with a
per-level budget split [ZQR+22, Section 4.2]. Modules:

* :mod:`.dyadic`: the exact sketch;
* :mod:`.domain`: declared float domains;
* :mod:`.private`: the private release, calibrated by :mod:`beam_dpsketch.sketches.linear.calibration`.

Citation keys are those of ``docs/algorithms.md#references``.
"""

from beam_dpsketch.sketches.quantiles.domain import FloatDomain
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch

__all__ = ["DyadicCountSketch", "FloatDomain", "PrivateDyadicCountSketch"]
