"""The public parameters of an applied ``ContinualDPSketch`` that its DoFns share, and the
sketch they build from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.continual.sketch import (
    LazySketch,
    PunctualSketch,
    new_continual_sketch,
)


@dataclass(frozen=True)
class ContinualConfig:
    """The public parameters of one applied transform (label, shape, per-window budget, schedule)."""

    label: str
    sketch: str
    algorithm: str
    width: int
    depth: int
    horizon: int
    budget: PrivacyBudget
    seed: int
    calibration: str
    cs_sensitivity: str
    max_contributions: int
    time_model: str
    release_every: int
    queries: tuple[Any, ...]
    with_metadata: bool
    with_table: bool
    noise_scale: float
    neighbouring_relation: str


def new_sketch(
    config: ContinualConfig, noise_source: NoiseSource, release_prefix: Any
) -> LazySketch | PunctualSketch:
    """A new, empty continual sketch of ``config`` keyed under ``release_prefix``."""
    c = config
    return new_continual_sketch(
        c.width,
        c.depth,
        c.horizon,
        c.budget,
        release_prefix=release_prefix,
        sketch=c.sketch,
        algorithm=c.algorithm,
        seed=c.seed,
        noise_source=noise_source,
        calibration=c.calibration,
        cs_sensitivity=c.cs_sensitivity,
        max_contributions=c.max_contributions,
    )
