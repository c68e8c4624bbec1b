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
