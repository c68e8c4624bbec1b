"""Differentially private frequency sketches under continual observation.

Holland [Hol25]: a Count-Min or Count Sketch whose every cell is a counter of the Gaussian
binary mechanism, released after every time step (:class:`PunctualSketch`, :class:`LazySketch`,
[Hol25, Algorithms 3-5]); :class:`HierarchicalLazySketch` and :class:`CandidateHeavyHitters`
report heavy hitters from it. Modules:

* :mod:`.binary_mechanism`: the Gaussian binary mechanism [Hol25, Algorithms 1-2];
* :mod:`.sketch`: the punctual and lazy sketches;
* :mod:`.heavy_hitters`: heavy hitters over the lazy sketch.

Citation keys are those of ``docs/algorithms.md#references``; ``docs/algorithms.md`` explains
every deviation from the paper.
"""

from beam_dpsketch.sketches.continual.binary_mechanism import (
    GaussianBinaryMechanism,
    HorizonExceededError,
)
from beam_dpsketch.sketches.continual.heavy_hitters import (
    CandidateHeavyHitters,
    HierarchicalLazySketch,
)
from beam_dpsketch.sketches.continual.sketch import IntervalSummary, LazySketch, PunctualSketch

__all__ = [
    "CandidateHeavyHitters",
    "GaussianBinaryMechanism",
    "HierarchicalLazySketch",
    "HorizonExceededError",
    "IntervalSummary",
    "LazySketch",
    "PunctualSketch",
]
