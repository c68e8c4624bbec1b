"""The user-level releases: hashed PAMG with GSHM, and GSHM on exact per-key unit counts.

Lebeda and Tětek, "Better Differentially Private Approximate Histograms and Heavy Hitters using
the Misra-Gries Sketch" (PODS 2023), Section 8. Each privacy unit contributes one set of at most
``m`` distinct keys per window (bounded by
:class:`~beam_dpsketch.transforms.BoundContributions` and listed by :func:`unit_key_set`), so
one unit changes at most ``m`` counts by 1 and the noise follows ``sqrt(m)``, not ``k``:

* :class:`PamgGSHM`: one-counter PAMG sketches over ``4 k`` public hash buckets, merged bucket by
  bucket, released with GSHM at ``l = m`` (Algorithm 4, Lemma 9 per bucket, Theorem 5); memory
  ``4 k`` keys;
* :class:`UserExact`: exact per-key unit counts with GSHM at ``l = m`` (Theorem 5); memory grows
  with the distinct keys of a window.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import apache_beam as beam

from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.transforms.combiners import SketchCombineFn
from beam_dpsketch.transforms.heavy_hitters.mechanism import (
    USER,
    HeavyHitterMechanism,
)
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_K,
    HashedPAMG,
    HeavyHitterRelease,
    calibrate_gshm,
    exact_user_gshm,
    hashed_pamg_gshm,
    hashed_selection_parameters,
    user_set_relation,
)
from beam_dpsketch.transforms.records import KeyEstimate

__all__ = [
    "USER_BUCKETS_PER_CANDIDATE",
    "ExactCountCombineFn",
    "PamgGSHM",
    "UserExact",
    "unit_key_set",
]

#: Hash buckets of a user-level PAMG sketch per candidate (``k``): memory ``4 k`` keys, few
#: collisions among the keys that can pass the threshold.
USER_BUCKETS_PER_CANDIDATE = 4


def unit_key_set(grouped: tuple[Any, Iterable[Any]]) -> list[Any]:
    """One privacy unit's bounded keys as a list of distinct keys in canonical order.

    Counting each key once per unit is what gives the count vector L1 sensitivity ``m`` and
    L2 sensitivity ``sqrt(m)``; the canonical order keeps the unit's segment of the selection's
    Misra-Gries stream independent of arrival order.
    """
    return sorted(set(grouped[1]), key=encode_key)


class ExactCountCombineFn(beam.CombineFn):
    """``{key: number of units}`` from per-unit key lists (exact; memory: distinct keys)."""

    def create_accumulator(self) -> dict[Any, int]:
        return {}

    def add_input(self, acc: dict[Any, int], element: Iterable[Any]) -> dict[Any, int]:
        get = acc.get
        for key in element:
            acc[key] = get(key, 0) + 1
        return acc

    def merge_accumulators(self, accumulators: Iterable[dict[Any, int]]) -> dict[Any, int]:
        it = iter(accumulators)
        first = next(it, None)
        if first is None:
            return {}
        for acc in it:
            get = first.get
            for key, count in acc.items():
                first[key] = get(key, 0) + count
        return first

    def extract_output(self, acc: dict[Any, int]) -> dict[Any, int]:
        return acc


class PamgGSHM(HeavyHitterMechanism):
    """Hashed one-counter PAMG sketches released with GSHM at ``l = m`` (user level).

    Each unit's bounded key set is folded into one-counter PAMG sketches over ``4 k`` public
    hash buckets of the keys, merged bucket by bucket, and released with
    :func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_pamg_gshm`: noise that grows with
    ``sqrt(m)``, not ``k``, and a key's estimate falls short of its count only by the units of
    other keys in its bucket (no per-value error bound is stated). Memory ``4 k`` keys. A
    trigger must fire once per window.

    Parameters
    ----------
    k
        The most keys released per window (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`); the sketches hold ``4 k``
        buckets.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one privacy
    unit whose contribution is a set of at most ``m`` distinct keys per window (Lebeda and
    Tětek, Section 8, Lemma 9 and Corollary 10 bucket by bucket, Theorem 5).
    """

    key = "pamg-gshm"
    levels = (USER,)

    def __init__(self, k: int | None = None) -> None:
        super().__init__(DEFAULT_K if k is None else k)

    @property
    def record_type(self) -> type:
        """:class:`~beam_dpsketch.transforms.records.KeyEstimate`: no per-value bound."""
        return KeyEstimate

    @property
    def buckets(self) -> int:
        """Hash buckets of its one-counter PAMG sketches (memory in keys)."""
        return USER_BUCKETS_PER_CANDIDATE * self.k

    @property
    def m(self) -> int:
        """The contribution bound the release is calibrated for (1 before binding)."""
        return 1 if self.max_contributions is None else int(self.max_contributions)

    def combine_fn(self) -> beam.CombineFn:
        buckets = self.buckets
        return SketchCombineFn(lambda: HashedPAMG(buckets))

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return hashed_pamg_gshm(accumulator, self.m, budget, stream, k=self.k)

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        params = hashed_selection_parameters(self.m, budget.epsilon, budget.delta)  # type: ignore[arg-type]
        return {
            "noise": "gaussian",
            "noise_scale": float(params.sigma),
            "threshold": float(params.threshold),
            "sensitivity": (
                f"one-counter PAMG sketches in {self.buckets} hash buckets: one unit changes at "
                f"most m = {self.m} counters, each by 1 (Lebeda and Tetek, Section 8, Lemma 9 "
                "and Corollary 10, bucket by bucket); Gaussian for L2 sensitivity sqrt(m) at "
                "(eps, delta/2), and a key stored on one side only (counter 1) passes with "
                "probability at most delta / (2 m e^eps)"
            ),
            "neighbouring_relation": user_set_relation(params.m),
            "estimate": (
                "noisy bucket counter: at most the key's count of units before noise, less by "
                "the units of the other keys of its bucket"
            ),
            "memory": f"at most {self.buckets} keys (hash buckets), whatever the distinct keys",
        }


class UserExact(HeavyHitterMechanism):
    """GSHM at ``l = m`` on exact per-key unit counts (user level; the default there).

    Exact counts of bounded units (each unit a set of at most ``m`` distinct keys), released
    with :func:`~beam_dpsketch.sketches.misra_gries.exact.exact_user_gshm`: noise that grows
    with ``sqrt(m)``, not ``k``; memory grows with the distinct keys of a window, as in
    PipelineDP (:class:`PamgGSHM` or select-then-count keep it bounded by ``k``). A trigger must
    fire once per window.

    Parameters
    ----------
    k
        No sketch is built: ``k`` is only the most keys
        :class:`~beam_dpsketch.transforms.DPHeavyHitters` emits with ``top=None`` (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one privacy
    unit whose contribution is a set of at most ``m`` distinct keys per window (Lebeda and
    Tětek, Section 8, Theorem 5).
    """

    key = "user-exact"
    levels = (USER,)
    delta_reason = "the selection needs delta to hide keys"

    def __init__(self, k: int | None = None) -> None:
        super().__init__(DEFAULT_K if k is None else k)
        self.name = f"dp-misra-gries/{self.key} (GSHM at l=m)"

    @property
    def record_type(self) -> type:
        """:class:`~beam_dpsketch.transforms.records.KeyEstimate`: no per-value bound."""
        return KeyEstimate

    @property
    def m(self) -> int:
        """The contribution bound the release is calibrated for (1 before binding)."""
        return 1 if self.max_contributions is None else int(self.max_contributions)

    def combine_fn(self) -> beam.CombineFn:
        return ExactCountCombineFn()

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return exact_user_gshm(accumulator, self.m, budget, stream)

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        released = self.release_object(accumulator, budget, stream)
        if self.top is None:
            return [KeyEstimate(*kv) for kv in released.items]
        return [
            KeyEstimate(*kv) for kv in sorted(released.top(self.top).items, key=lambda kv: -kv[1])
        ]

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        params = calibrate_gshm(self.m, budget.epsilon, budget.delta)  # type: ignore[arg-type]
        return {
            "noise": "gaussian",
            "noise_scale": float(params.sigma),
            "threshold": float(params.threshold),
            "sensitivity": f"one unit changes at most l = m = {self.m} counts by 1, one "
            "direction (Lebeda and Tetek, Section 8, Theorem 5)",
            "neighbouring_relation": (
                f"add/remove one privacy unit, whose contribution is a set of at most "
                f"m={self.m} distinct keys per window"
            ),
            "memory": "grows with the number of distinct keys per window (exact histogram)",
        }
