"""Beam adapters over the exact sketches: batching, CombineFns and coders, readers, PTransforms.

Everything here is a thin layer over :mod:`beam_dpsketch.sketches` (DESIGN §2): the sketches do
the counting; these transforms move batches of keys to them. Nothing here is differentially
private on its own; the DP releases build on these exact sketches.
"""

from beam_dpsketch.transforms.batching import (
    DEFAULT_BATCH_SIZE,
    INVALID_TAG,
    BatchKeys,
    BatchKeysPerGroup,
    KeyBatch,
)
from beam_dpsketch.transforms.combiners import SketchCoder, SketchCombineFn, SketchSpec
from beam_dpsketch.transforms.readers import ReadKeyBatches, infer_input_format
from beam_dpsketch.transforms.sketch import SketchGlobally, SketchPerKey

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "INVALID_TAG",
    "BatchKeys",
    "BatchKeysPerGroup",
    "KeyBatch",
    "ReadKeyBatches",
    "SketchCoder",
    "SketchCombineFn",
    "SketchGlobally",
    "SketchPerKey",
    "SketchSpec",
    "infer_input_format",
]

# DP release step, contribution bounding and DPCount (issue #3). Appended after __all__ so that
# concurrent additions above do not conflict.
from beam_dpsketch.transforms.bounding import BoundContributions  # noqa: E402
from beam_dpsketch.transforms.count import (  # noqa: E402
    CountGaussianMechanism,
    CountLaplaceMechanism,
    DPCount,
)
from beam_dpsketch.transforms.release import (  # noqa: E402
    DPAggregate,
    GroupPrivacyReplace,
    Release,
    ReleaseMechanism,
    explain_pipeline,
    release_id_for,
)

__all__ += [
    "BoundContributions",
    "CountGaussianMechanism",
    "CountLaplaceMechanism",
    "DPAggregate",
    "DPCount",
    "GroupPrivacyReplace",
    "Release",
    "ReleaseMechanism",
    "explain_pipeline",
    "release_id_for",
]

# DP heavy hitters and histograms with Misra-Gries (issue #5).
from beam_dpsketch.transforms.heavy_hitters import (  # noqa: E402
    DesignBCombineFn,
    DPHeavyHitters,
    DPHistogram,
    MisraGriesReleaseMechanism,
)

__all__ += ["DPHeavyHitters", "DPHistogram", "DesignBCombineFn", "MisraGriesReleaseMechanism"]

# DP frequency sketches and quantiles (issue #6).
from beam_dpsketch.transforms.frequencies import DPFrequencies, DPQuantiles  # noqa: E402

__all__ += ["DPFrequencies", "DPQuantiles"]

# DP Count Sketch answering intermittent queries (issue #9).
from beam_dpsketch.transforms.intermittent import (  # noqa: E402
    DPIntermittentQueries,
    QuerySchedule,
)

__all__ += ["DPIntermittentQueries", "QuerySchedule"]

# DP frequencies and heavy hitters over a sliding window, DPSW-Sketch (issue #8).
from beam_dpsketch.transforms.sliding import (  # noqa: E402
    DPSlidingWindowFrequencies,
    SlidingWindowRelease,
)

__all__ += ["DPSlidingWindowFrequencies", "SlidingWindowRelease"]

# Private sketches under continual observation, Lazy/Punctual (issue #7).
from beam_dpsketch.transforms.continual import (  # noqa: E402
    ContinualDPSketch,
    ContinualRelease,
)

__all__ += ["ContinualDPSketch", "ContinualRelease"]
