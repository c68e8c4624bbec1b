"""DP SpaceSaving as a heavy-hitter mechanism: one SpaceSaving run per window, one worker.

After R. Holland, "An Iconic Heavy Hitter Algorithm Made Private" (arXiv 2512.17295, 2025):
a SpaceSaving sketch of ``k`` counters with a fixed tie-break, released with independent
discrete Laplace noise per counter above a noisy cut
(:func:`~beam_dpsketch.sketches.space_saving.dp_space_saving`; what is derived here rather than
taken from the paper is listed in docs/algorithms.md#space-saving). Built like
:class:`~beam_dpsketch.transforms.heavy_hitters.Sequential`: the window's elements reach one
sketch in keyed state, released once per window.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import apache_beam as beam

from beam_dpsketch.checks import check_choice
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.sketches.misra_gries import DEFAULT_K, ERROR_CONFIDENCE, HeavyHitterRelease
from beam_dpsketch.sketches.space_saving import (
    CUTS,
    NEIGHBOURING_SPACE_SAVING,
    SpaceSaving,
    calibrate_space_saving,
    check_cut_fraction,
    dp_space_saving,
)
from beam_dpsketch.transforms.combiners import MergeSketchesCombineFn
from beam_dpsketch.transforms.heavy_hitters.mechanism import HeavyHitterMechanism
from beam_dpsketch.transforms.heavy_hitters.sequential import Sequential, sequential_sketch_fn
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = ["SpaceSavingDP"]


class SpaceSavingDP(HeavyHitterMechanism):
    """DP SpaceSaving (element level): one SpaceSaving run per window, noisy counters above a
    noisy cut.

    All elements of a window reach one SpaceSaving sketch of ``k`` counters (keyed state on one
    worker, as :class:`~beam_dpsketch.transforms.heavy_hitters.Sequential`), released by
    :func:`~beam_dpsketch.sketches.space_saving.dp_space_saving`: independent discrete Laplace
    noise of scale about ``1/eps`` per counter, no shared draw, and a label is kept when its
    noisy count clears a noisy upper bound on the sketch's minimum count by a noise tail.
    SpaceSaving over-counts (``f(x) <= c(x) <= f(x) + c_min``) where Misra-Gries under-counts:
    the released values are close to the true counts and every key above ``c_min`` is
    monitored whatever order the keys arrive in, so it suits streams whose heavy keys change
    over time. A trigger must fire once per window.

    Parameters
    ----------
    k
        Counters of the window's sketch (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).
    cut
        ``"minimum"`` (default) or ``"rows"``: the noisy bound behind the cut reads the sketch's
        minimum count, or the stream length divided by ``k`` (the paper's cut).
    cut_fraction
        Share of epsilon spent on that noisy bound, in ``(0, 1)`` (default 0.4 for
        ``"minimum"``, 0.05 for ``"rows"``).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element,
    derived here from structural facts of SpaceSaving with a fixed tie-break that the tests
    check exhaustively on small streams (docs/algorithms.md#space-saving), not from a published
    proof.
    """

    key = "space-saving"
    # The sketch lives in keyed state and leaves on an end-of-window timer.
    needs_state_and_timers = True

    def __init__(
        self,
        k: int | None = None,
        *,
        cut: str = "minimum",
        cut_fraction: float | None = None,
    ) -> None:
        super().__init__(DEFAULT_K if k is None else k)
        self.cut = check_choice(cut, "cut", CUTS)
        self.cut_fraction = None if cut_fraction is None else check_cut_fraction(cut_fraction)
        self.name = f"dp-space-saving/{self.key}"

    def parameters(self) -> dict[str, Any]:
        return {"k": self.k, "cut": self.cut, "cut_fraction": self.cut_fraction}

    def display_parameters(self) -> dict[str, Any]:
        return {"cut": self.cut}

    def combine_fn(self) -> beam.CombineFn:
        k = self.k
        return MergeSketchesCombineFn(lambda: SpaceSaving(k))

    def prepare(self, keys: beam.PCollection) -> beam.PCollection:
        return (
            keys
            | "OneShard" >> beam.Map(lambda batch: (0, batch))
            | "SpaceSavingSketch"
            >> beam.ParDo(sequential_sketch_fn(self.k, SpaceSaving))
            .with_input_types(tuple[int, Any])
            .with_output_types(SpaceSaving)
        )

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return dp_space_saving(
            accumulator, budget, stream, cut_fraction=self.cut_fraction, cut=self.cut
        )

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        cal = calibrate_space_saving(
            budget.epsilon,  # type: ignore[arg-type]
            budget.delta,  # type: ignore[arg-type]
            self.cut_fraction,
            self.cut,
        )
        bound = (
            "the sketch's minimum count"
            if cal.cut == "minimum"
            else f"floor(rows / k), k = {self.k}, with the row count"
        )
        return {
            "noise": "discrete_laplace",
            "noise_scale": float(cal.scale),
            "threshold": float(cal.threshold),
            "cut": (
                f"a label is kept when its noisy count exceeds b_up + {cal.threshold}, b_up = "
                f"{bound} plus discrete Laplace noise of scale {float(cal.bound_scale):.6g} "
                f"(sensitivity 1) plus {cal.bound_margin}"
            ),
            "sensitivity": (
                "SpaceSaving with a fixed tie-break, one element removed: common counts move by "
                "at most 1 in L1, at most 2 labels per side are monitored on one side only, "
                "each with count <= c_min + 1 (derived here, checked exhaustively on small "
                "streams; docs/algorithms.md#space-saving)"
            ),
            "neighbouring_relation": NEIGHBOURING_SPACE_SAVING,
            "budget_split": (
                f"epsilon {cal.bound_epsilon:.6g} for the noisy bound b_up + "
                f"{cal.release_epsilon:.6g} for the counters; delta: a label on one side only "
                f"is kept with probability <= {cal.unstable_failure:.3g} per side"
            ),
            "error_bound": (
                f"per key, with probability >= {ERROR_CONFIDENCE:g}: f(x) in [count - t - b_up, "
                f"count + t], t = {cal.noise_quantile} the noise quantile (SpaceSaving "
                "over-counts by at most its minimum count)"
            ),
        }

    def windowing_requirement(self, defaulted_by: str | None = None) -> WindowingRequirement:
        # With several panes the release step could receive several runs of one window in one
        # pane, whose merge has no analysed sensitivity: the same rule as Sequential's.
        return dataclasses.replace(
            Sequential(self.k).windowing_requirement(defaulted_by),
            who=f"mechanism {self.key!r}",
            why="it releases one SpaceSaving run per window",
        )
