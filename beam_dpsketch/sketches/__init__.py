"""Exact, mergeable sketches in pure numpy (no Beam import). Privacy is added at release."""

from beam_dpsketch.sketches.countmin import CountMinSketch
from beam_dpsketch.sketches.countsketch import CountSketch
from beam_dpsketch.sketches.misragries import MisraGries

__all__ = ["CountMinSketch", "CountSketch", "MisraGries"]

# DP linear sketches and the dyadic quantile sketch (spec dp-linear-sketches).
from beam_dpsketch.sketches.dp_linear import (  # noqa: E402
    PrivateCountMinSketch,
    PrivateCountSketch,
)
from beam_dpsketch.sketches.dyadic import (  # noqa: E402
    DyadicCountSketch,
    FloatDomain,
)
from beam_dpsketch.sketches.dyadic_private import PrivateDyadicCountSketch  # noqa: E402

__all__ += [
    "DyadicCountSketch",
    "FloatDomain",
    "PrivateCountMinSketch",
    "PrivateCountSketch",
    "PrivateDyadicCountSketch",
]

# Continual observation: Gaussian binary mechanism, Punctual and Lazy sketches (spec lazy-sketch).
from beam_dpsketch.sketches.binary_mechanism import (  # noqa: E402
    GaussianBinaryMechanism,
    HorizonExceededError,
)
from beam_dpsketch.sketches.continual import LazySketch, PunctualSketch  # noqa: E402
from beam_dpsketch.sketches.continual_heavy_hitters import (  # noqa: E402
    CandidateHeavyHitters,
    HierarchicalLazySketch,
)

__all__ += [
    "CandidateHeavyHitters",
    "GaussianBinaryMechanism",
    "HierarchicalLazySketch",
    "HorizonExceededError",
    "LazySketch",
    "PunctualSketch",
]

# Sliding-window DP frequencies (spec dpsw-sketch): DPSW-Sketch and its baselines.
from beam_dpsketch.sketches.sliding import (  # noqa: E402
    DPSWLayout,
    DPSWSketch,
    checkpoint_list,
    level_budgets,
    position_costs,
)
from beam_dpsketch.sketches.sliding_baselines import (  # noqa: E402
    PCCMG,
    ExactSlidingWindow,
    ExactWindowCountMin,
    USketch,
)

__all__ += [
    "DPSWLayout",
    "DPSWSketch",
    "ExactSlidingWindow",
    "ExactWindowCountMin",
    "PCCMG",
    "USketch",
    "checkpoint_list",
    "level_budgets",
    "position_costs",
]

# DP Count Sketch / Count-Min for intermittent queries (spec dp-count-sketch-intermittent).
from beam_dpsketch.sketches.intermittent import (  # noqa: E402
    IntermittentAnswer,
    IntermittentSketch,
    UseAndKeepSketch,
)
from beam_dpsketch.sketches.intermittent_strategies import (  # noqa: E402
    BatchNaiveSketch,
    BatchSensitiveSketch,
    SingleQuerySketch,
    StaticCellSketch,
    UseAndForgetCellSketch,
    UseAndForgetMedianSketch,
    make_intermittent_sketch,
)

__all__ += [
    "BatchNaiveSketch",
    "BatchSensitiveSketch",
    "IntermittentAnswer",
    "IntermittentSketch",
    "SingleQuerySketch",
    "StaticCellSketch",
    "UseAndForgetCellSketch",
    "UseAndForgetMedianSketch",
    "UseAndKeepSketch",
    "make_intermittent_sketch",
]
