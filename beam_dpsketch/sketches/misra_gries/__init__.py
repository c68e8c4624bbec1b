"""Misra-Gries heavy hitters: the exact summary and its differentially private releases.

The family of Lebeda and Tetek [LT23]: :class:`MisraGries` (the summary of [LT23, Algorithm 1]
with the merge of Agarwal et al., "Mergeable Summaries", PODS 2012) is exact and **not**
differentially private; :mod:`.private` gathers its releases (PMG [LT23, Algorithm 2], the
post-processed sum of [LT23, Algorithm 3], the merged and PAMG releases of [LT23, Sections 7-8],
and the baselines of [LT23, Section 4]), each stating its guarantee. Modules:

* :mod:`.sketch`: the exact summary;
* :mod:`.core`: the release object, noise helpers and thresholds shared by the releases;
* :mod:`.single`, :mod:`.merged`, :mod:`.user`, :mod:`.baselines`: the releases by pipeline shape;
* :mod:`.private`: every release in one place, with the table of which release fits which sketch;
* :mod:`.sizing`: counters from an error target or a memory budget (:func:`suggest_k`).

Citation keys are those of ``docs/algorithms.md#references``; ``docs/algorithms.md#misra-gries``
explains every deviation from the paper.
"""

from beam_dpsketch.sketches.misra_gries.core import (
    ErrorBound,
    HeavyHitterEstimate,
    HeavyHitterRelease,
    NoiseSpec,
    Universe,
)
from beam_dpsketch.sketches.misra_gries.design_b import PostProcessedSum
from beam_dpsketch.sketches.misra_gries.gshm import GSHMParameters
from beam_dpsketch.sketches.misra_gries.merged import MergedRecommendation
from beam_dpsketch.sketches.misra_gries.sizing import (
    DEFAULT_K,
    apriori_error,
    k_for_memory,
    memory_bytes,
    suggest_k,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.user import PAMGSketch

__all__ = [
    "DEFAULT_K",
    "ErrorBound",
    "GSHMParameters",
    "HeavyHitterEstimate",
    "HeavyHitterRelease",
    "MergedRecommendation",
    "MisraGries",
    "NoiseSpec",
    "PAMGSketch",
    "PostProcessedSum",
    "Universe",
    "apriori_error",
    "k_for_memory",
    "memory_bytes",
    "suggest_k",
]
