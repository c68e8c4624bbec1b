"""Sketches in pure numpy (no Beam import): the exact summaries and their DP releases.

The exact sketches below are mergeable and serializable (:mod:`beam_dpsketch.serialization`)
and **not** differentially private; the transforms in :mod:`beam_dpsketch.transforms` release
them with noise. Re-exported here:

* :class:`CountMinSketch` (Cormode and Muthukrishnan 2005) and :class:`CountSketch` (Charikar,
  Chen and Farach-Colton 2002): linear, turnstile frequency sketches;
* :class:`MisraGries`: the Misra-Gries summary in the variant of Lebeda and Tetek [LT23,
  Algorithm 1], with the merge of Agarwal et al. ("Mergeable Summaries", PODS 2012);
* :class:`DyadicCountSketch` over a declared integer domain (:class:`FloatDomain` maps floats to
  it): the quantile sketch of Zhao et al. [ZQR+22, Section 4].

Citation keys are those of ``docs/algorithms.md``, which also explains every deviation from a
paper.

The DP releases of each family (private Misra-Gries, private linear and dyadic sketches, the
continual, sliding-window and intermittent sketches) and their calibration are importable from
their own modules.
"""

from beam_dpsketch.sketches.countmin import CountMinSketch
from beam_dpsketch.sketches.countsketch import CountSketch
from beam_dpsketch.sketches.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.dyadic_domain import FloatDomain
from beam_dpsketch.sketches.misragries import MisraGries

__all__ = ["CountMinSketch", "CountSketch", "DyadicCountSketch", "FloatDomain", "MisraGries"]
