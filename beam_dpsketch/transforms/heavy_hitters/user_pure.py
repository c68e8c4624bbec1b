"""User-level pure DP: PURE_PP on the flattened user stream over a declared universe.

Lebeda and Tětek, "Better Differentially Private Approximate Histograms and Heavy Hitters using
the Misra-Gries Sketch" (PODS 2023), Section 8, Lemma 4: each privacy unit's bounded key set (at
most ``m`` distinct keys per window) is appended, in canonical key order, to one sequential
Misra-Gries stream per window; the Algorithm-3 post-processed sketch of that stream moves by less
than ``2m`` in L1 when one unit is removed, so discrete Laplace of scale ``2m/eps`` on every key
of the declared universe, then the top ``k``, is pure ``eps``-DP (the user-level row of their
pure release, Section 6).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from beam_dpsketch.checks import check_choice
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.transforms.combiners import MergeSketchesCombineFn
from beam_dpsketch.transforms.heavy_hitters.mechanism import USER, HeavyHitterMechanism
from beam_dpsketch.transforms.heavy_hitters.sequential import sequential_sketch_fn
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_K,
    HeavyHitterRelease,
    MisraGries,
    Universe,
    pure_top_k_cutoff,
    pure_top_k_method,
    user_flattened_relation,
    user_level_pure_pp,
)
from beam_dpsketch.transforms.records import KeyEstimate

__all__ = ["UserPurePP"]


class UserPurePP(HeavyHitterMechanism):
    """User-level PURE_PP: pure ``epsilon``-DP top-``k`` over a declared key universe.

    Every unit's bounded key set (at most ``m`` distinct keys per window) is appended to one
    sequential Algorithm-1 sketch per window (keyed state on one worker, as
    :class:`~beam_dpsketch.transforms.heavy_hitters.Sequential`), and
    :func:`~beam_dpsketch.sketches.misra_gries.user_level_pure_pp` releases it: discrete Laplace
    of scale ``2m/eps`` on every key of ``universe``, then the ``k`` largest. No ``delta``: no
    key outside the declared universe can appear, and every key of it gets noise. Error
    ``N/(k+1) + O(m log(|U|)/eps)`` (``N`` the flattened stream's length): linear in ``m``, so
    it suits small ``max_contributions`` and a public key list (product ids, country codes)
    when pure DP is required. A trigger must fire once per window.

    Parameters
    ----------
    k
        Counters of the window's sketch and the most keys released (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).
    universe
        The declared, public key universe: a
        :class:`~beam_dpsketch.sketches.misra_gries.Universe` or a collection of keys (a
        ``range`` is used lazily). Required; keys outside it are not counted (dropped from
        each unit's key set before sketching; nothing reports how many).
    method
        ``"auto"`` (default), ``"enumerate"`` or ``"sample"``: one noise draw per key of the
        universe, or the exact cutoff sampler for large universes
        (:func:`~beam_dpsketch.sketches.misra_gries.universe.pure_top_k`).

    Notes
    -----
    **Privacy guarantee.** Pure ``epsilon``-DP per release (``delta`` = 0; an
    ``(epsilon, delta)`` budget is spent as its ``epsilon`` alone) under add/remove of one
    privacy unit whose contribution is at most ``m`` keys per window (Lebeda and Tětek,
    Section 8, Lemma 4, with the pure release of Section 6).
    """

    key = "user-pure-pp"
    levels = (USER,)
    # The flattened stream's sketch lives in keyed state and leaves on an end-of-window timer.
    needs_state_and_timers = True

    def __init__(
        self,
        k: int | None = None,
        universe: Universe | Iterable[Any] | None = None,
        *,
        method: str = "auto",
    ) -> None:
        super().__init__(DEFAULT_K if k is None else k)
        if universe is None:
            raise ValueError(
                f"universe: mechanism {self.key!r} releases over a declared key universe; pass "
                "UserPurePP(k, universe=...) (a Universe or a collection of keys)"
            )
        self.universe = universe if isinstance(universe, Universe) else Universe.from_keys(universe)
        self.method = check_choice(method, "method", ("auto", "enumerate", "sample"))
        self.name = f"dp-misra-gries/{self.key} (user-level PURE_PP)"

    def parameters(self) -> dict[str, Any]:
        return {"k": self.k, "universe_size": self.universe.size, "method": self.method}

    def display_parameters(self) -> dict[str, Any]:
        return {"universe_size": self.universe.size, "method": self.method}

    @property
    def record_type(self) -> type:
        """:class:`~beam_dpsketch.transforms.records.KeyEstimate`: no per-value bound."""
        return KeyEstimate

    @property
    def m(self) -> int:
        """The contribution bound the release is calibrated for (1 before binding)."""
        return 1 if self.max_contributions is None else int(self.max_contributions)

    def check_budget(self, budget: PrivacyBudget) -> None:
        if budget.kind not in ("pure", "approx"):
            raise ValueError(
                f"{self.name} is pure epsilon-DP: pass PrivacyBudget.pure(eps) (or an approx "
                f"budget, whose epsilon alone is spent), got a {budget.kind} budget"
            )

    def combine_fn(self) -> beam.CombineFn:
        k = self.k
        return MergeSketchesCombineFn(lambda: MisraGries(k))

    def prepare(self, keys: beam.PCollection) -> beam.PCollection:
        universe = self.universe

        def one_segment(unit_keys: list[Any]) -> tuple[int, list[Any]]:
            # A key outside the declared universe would be released with no noise on the
            # neighbouring side to cover it, so it never reaches the sketch. It is dropped, not
            # refused: a failing pipeline would tell that some unit held such a key. Filtering
            # each unit's keys against a public list maps neighbouring inputs to neighbouring
            # inputs, so the guarantee is unchanged.
            return (0, [key for key in unit_keys if key in universe])

        # One sequential stream per window: each unit's key list is one segment of it.
        return (
            keys
            | "OneShard" >> beam.Map(one_segment)
            | "FlattenedSketch"
            >> beam.ParDo(sequential_sketch_fn(self.k))
            .with_input_types(tuple[int, Any])
            .with_output_types(MisraGries)
        )

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return user_level_pure_pp(
            accumulator,
            self.universe,
            PrivacyBudget.pure(budget.epsilon),  # type: ignore[arg-type]
            self.m,
            stream,
            method=self.method,
        )

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        k1 = self.k + 1
        # The release's integer scale: sensitivity 2m(k+1) on the values V = (k+1) cbar.
        scale = discrete_laplace_scale(2 * self.m * k1, budget.epsilon)  # type: ignore[arg-type]
        u = self.universe.size
        method = pure_top_k_method(u, self.k, self.method)
        threshold = None if method == "enumerate" else pure_top_k_cutoff(u, self.k, scale) / k1
        return {
            "noise": "discrete_laplace",
            "noise_scale": float(scale / k1),
            "threshold": threshold,
            "sensitivity": (
                f"Algorithm-3 sketch of the flattened stream: L1 < 2m = {2 * self.m} when one "
                "unit is removed (Lebeda and Tetek, Section 8, Lemma 4); noise on every key of "
                f"the declared universe of {u} keys, then the top k = {self.k}"
            ),
            "neighbouring_relation": user_flattened_relation(self.m),
            "guarantee": "pure epsilon-DP (delta unused)",
            "method": method,
            "memory": f"one sketch of k = {self.k} keys per window (keyed state)",
        }
