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
