"""Differentially private frequency sketches for intermittent queries.

Yildirim, Kaya, Aydin and Erentug [YKAE]: a Count Sketch or Count-Min answered at public query
times with use-and-keep cell noise (:class:`UseAndKeepSketch`, the paper's final algorithm), and
the alternatives the paper compares it with (static cell noise, use-and-forget, single-query and
batch strategies). Modules:

* :mod:`.sketch`: the shared sketch and use-and-keep;
* :mod:`.strategies`: the alternatives, selectable by name through
  :func:`~beam_dpsketch.sketches.intermittent.strategies.make_intermittent_sketch`.

Citation keys are those of ``docs/algorithms.md#references``; ``docs/algorithms.md`` explains
every deviation from the paper.
"""

from beam_dpsketch.sketches.intermittent.sketch import (
    IntermittentAnswer,
    IntermittentSketch,
    UseAndKeepSketch,
)
from beam_dpsketch.sketches.intermittent.strategies import (
    BatchNaiveSketch,
    BatchSensitiveSketch,
    SingleQuerySketch,
    StaticCellSketch,
    UseAndForgetCellSketch,
    UseAndForgetMedianSketch,
)

__all__ = [
    "BatchNaiveSketch",
    "BatchSensitiveSketch",
    "IntermittentAnswer",
    "IntermittentSketch",
    "SingleQuerySketch",
    "StaticCellSketch",
    "UseAndForgetCellSketch",
    "UseAndForgetMedianSketch",
    "UseAndKeepSketch",
]
