"""Sketches in pure numpy (no Beam import): the exact summaries and their DP releases.

The exact sketches below are mergeable and serializable (:mod:`beam_dpsketch.serialization`)
and **not** differentially private; the transforms in :mod:`beam_dpsketch.transforms` release
them with noise. Re-exported here:

* :class:`CountMinSketch` (Cormode and Muthukrishnan 2005) and :class:`CountSketch` (Charikar,
  Chen and Farach-Colton 2002): linear, turnstile frequency sketches, and
  :class:`CountMedianSketch`, the Count-Min table queried with the median of its rows (for
  general turnstile data);
* :class:`MisraGries`: the Misra-Gries summary in the variant of Lebeda and Tetek [LT23,
  Algorithm 1], with the merge of Agarwal et al. ("Mergeable Summaries", PODS 2012);
* :class:`DyadicCountSketch` over a declared integer domain (:class:`FloatDomain` maps floats to
  it): the quantile sketch of Zhao et al. [ZQR+22, Section 4].

Citation keys are those of ``docs/algorithms.md``, which also explains every deviation from a
paper.

Each algorithm family lives in its own subpackage, with its DP releases and their calibration:

* :mod:`.misra_gries`: Misra-Gries and its private releases [LT23];
* :mod:`.linear`: Count-Min, Count Sketch, Count-Median and their private release [ZQR+22];
* :mod:`.quantiles`: the Dyadic Count Sketch and its private release [ZQR+22, Section 4];
* :mod:`.prefix_tree`: a tree of linear sketches over key prefixes, its private release and
  top-key extraction with no candidate list (derived here, ``docs/algorithms.md#top-keys``);
* :mod:`.continual`: sketches under continual observation [Hol25];
* :mod:`.sliding`: sliding-window sketches [WWC24];
* :mod:`.intermittent`: sketches for intermittent queries [YKAE];
* :mod:`.space_saving`: SpaceSaving with a fixed tie-break and its private release [Hol-HH]
  (the privacy argument derived in ``docs/algorithms.md#space-saving``).
"""

from beam_dpsketch.sketches.linear.countmedian import CountMedianSketch
from beam_dpsketch.sketches.linear.countmin import CountMinSketch
from beam_dpsketch.sketches.linear.countsketch import CountSketch
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.quantiles.domain import FloatDomain
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch

__all__ = [
    "CountMedianSketch",
    "CountMinSketch",
    "CountSketch",
    "DyadicCountSketch",
    "FloatDomain",
    "MisraGries",
]
