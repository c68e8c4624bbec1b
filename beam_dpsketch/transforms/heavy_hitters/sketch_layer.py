"""The Misra-Gries sketch-layer names the heavy-hitter transforms use, imported in one place.

The transforms are a thin Beam adapter over :mod:`beam_dpsketch.sketches.misra_gries`: the exact
sketches, the releases and their public calibration functions all live there. Importing them
here, once, keeps every module of this package on one list of what it needs from the sketch
layer.
"""

from beam_dpsketch.sketches.misra_gries import (
    DEFAULT_K,
    HeavyHitterEstimate,
    HeavyHitterRelease,
    MisraGries,
    PostProcessedSum,
    memory_bytes,
)
from beam_dpsketch.sketches.misra_gries.design_b import (
    DEFAULT_COUNT_FRACTION,
    approx_pp,
    check_count_fraction,
    user_level_pure_pp,
)
from beam_dpsketch.sketches.misra_gries.error_check import SketchCheck, sketch_check_calibration
from beam_dpsketch.sketches.misra_gries.exact import exact_user_gshm
from beam_dpsketch.sketches.misra_gries.gate import gated_approx_pp
from beam_dpsketch.sketches.misra_gries.gshm import calibrate_gshm
from beam_dpsketch.sketches.misra_gries.hashed import (
    HashedPAMG,
    hashed_pamg_gshm,
    hashed_selection,
    hashed_selection_parameters,
)
from beam_dpsketch.sketches.misra_gries.merged import (
    merged_gshm,
    merged_laplace,
    merged_laplace_parameters,
)
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg, pmg_parameters
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
)
from beam_dpsketch.sketches.misra_gries.select_count import (
    DEFAULT_SELECTION_FRACTION,
    CandidateIndex,
    ExactnessTest,
    check_selection_fraction,
    count_release,
    exactness_test_calibration,
    select_candidates,
    select_count_relation,
    selection_calibration,
    selection_parameters,
    split_budget,
)
from beam_dpsketch.sketches.misra_gries.sharded import (
    MAX_SHARDS,
    NEIGHBOURING_HOLDERS,
    ShardedMisraGries,
    design_d,
    split_by_shard,
    untrusted_shard_confidence,
    untrusted_sum,
)
from beam_dpsketch.sketches.misra_gries.sizing import SELECT_COUNT_K
from beam_dpsketch.sketches.misra_gries.tails import geometric_union_tail
from beam_dpsketch.sketches.misra_gries.universe import (
    Universe,
    pure_top_k_cutoff,
    pure_top_k_method,
    validate_in_universe,
)
from beam_dpsketch.sketches.misra_gries.user import user_flattened_relation, user_set_relation

__all__ = [
    "DEFAULT_COUNT_FRACTION",
    "DEFAULT_K",
    "DEFAULT_SELECTION_FRACTION",
    "ERROR_CONFIDENCE",
    "NEIGHBOURING_ELEMENT",
    "NEIGHBOURING_SHARDED",
    "NEIGHBOURING_HOLDERS",
    "MAX_SHARDS",
    "SELECT_COUNT_K",
    "SketchCheck",
    "ShardedMisraGries",
    "CandidateIndex",
    "ExactnessTest",
    "HashedPAMG",
    "HeavyHitterEstimate",
    "HeavyHitterRelease",
    "MisraGries",
    "PostProcessedSum",
    "approx_pp",
    "calibrate_gshm",
    "check_count_fraction",
    "check_selection_fraction",
    "count_release",
    "design_d",
    "exact_user_gshm",
    "exactness_test_calibration",
    "gated_approx_pp",
    "geometric_union_tail",
    "hashed_pamg_gshm",
    "hashed_selection",
    "hashed_selection_parameters",
    "memory_bytes",
    "merged_gshm",
    "merged_laplace",
    "merged_laplace_parameters",
    "pmg",
    "pmg_parameters",
    "select_candidates",
    "select_count_relation",
    "selection_calibration",
    "selection_parameters",
    "sketch_check_calibration",
    "split_budget",
    "split_by_shard",
    "untrusted_shard_confidence",
    "untrusted_sum",
    "Universe",
    "pure_top_k_cutoff",
    "pure_top_k_method",
    "user_flattened_relation",
    "user_level_pure_pp",
    "user_set_relation",
    "validate_in_universe",
]
