"""Design B: Algorithm 1 per Beam accumulator, Algorithm 3 at merge, APPROX_PP at release.

Lebeda and Tětek, "Better Differentially Private Approximate Histograms and Heavy Hitters using
the Misra-Gries Sketch" (PODS 2023), Sections 6-7, with the sharded neighbouring relation of
``docs/algorithms.md#mg-partition``. Each Beam accumulator runs Algorithm 1 on the elements it
receives; when Beam merges accumulators, every open segment is post-processed (Algorithm 3 with
its own ``n``, ``d``) and the results are summed exactly. The release (:class:`DesignB`) runs
behind a noisy test of whether every segment held all its keys: exact counts at sensitivity 1
when it passes, APPROX_PP otherwise (discrete Laplace noise of scale ``2/eps_hh`` per key on the
``1/(k+1)`` grid, plus a DP count ``N_hat`` of the window's elements whose ``N_hat/(k+1)`` is
added back to every count). Memory is at most ``max_shards * k`` keys at the aggregator.

:func:`approx_pp_calibration` states APPROX_PP's calibration from public parameters; the
select-then-count selection uses it too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from fractions import Fraction
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa

from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.budget import check_epsilon
from beam_dpsketch.privacy.calibration import discrete_laplace_scale, rational_epsilon_floor
from beam_dpsketch.transforms.batching import is_key_batch
from beam_dpsketch.transforms.heavy_hitters.mechanism import (
    HeavyHitterMechanism,
    design_b_windowing,
)
from beam_dpsketch.transforms.heavy_hitters.sketch_layer import (
    DEFAULT_COUNT_FRACTION,
    DEFAULT_K,
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
    ExactnessTest,
    HeavyHitterRelease,
    MisraGries,
    PostProcessedSum,
    check_count_fraction,
    exactness_test_calibration,
    gated_approx_pp,
    geometric_union_tail,
    memory_bytes,
)
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = [
    "DEFAULT_MAX_SHARDS",
    "DesignB",
    "DesignBCombineFn",
    "PostProcessedCalibration",
    "approx_pp_calibration",
    "gate_description",
    "post_processed_relation",
]

#: Declared maximum number of Beam accumulators (segments) per window when none is given.
DEFAULT_MAX_SHARDS = 256


#: Keys a Design B accumulator buffers before it updates its sketch (8 MB of int64).
_PENDING_ROWS = 1 << 20


def _concatenable(batch: Any) -> bool:
    """A numpy integer array or a pyarrow array without nulls: batches that concatenate."""
    if isinstance(batch, np.ndarray):
        return batch.ndim == 1 and batch.dtype.kind in "iu"
    return (
        isinstance(batch, pa.Array)
        and batch.null_count == 0
        and not pa.types.is_dictionary(batch.type)
    )


def _same_kind(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` concatenate without changing a value (same dtype or type)."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype
    return isinstance(b, pa.Array) and a.type == b.type


class _DesignBAccumulator:
    """An open Algorithm-1 segment plus the exact sum of the already post-processed ones.

    The open segment is sketched in arrival order, so an accumulator holds at most ``k``
    counters whatever the number of distinct keys. (Sketching a whole segment in the fixed key
    order, :meth:`~beam_dpsketch.sketches.misra_gries.sketch.MisraGries.update_multiset`, is
    faster on skewed data but holds a counter per distinct key of the segment.)
    """

    __slots__ = ("open", "closed", "pending", "pending_rows")

    def __init__(self, k: int, max_shards: int) -> None:
        self.open = MisraGries(k)
        self.closed = PostProcessedSum(k, max_shards=max_shards)
        # Batches not yet sketched, in arrival order: one sketch update per _PENDING_ROWS keys
        # instead of one per batch, because each update costs O(k) outside the C loop. Updating
        # with the concatenation equals updating with each batch in turn (arrival order).
        self.pending: list[Any] = []
        self.pending_rows = 0

    def add(self, batch: Any) -> None:
        """Sketch ``batch`` after the pending ones (buffered when it is a plain array)."""
        if _concatenable(batch) and (not self.pending or _same_kind(self.pending[0], batch)):
            self.pending.append(batch)
            self.pending_rows += len(batch)
            if self.pending_rows >= _PENDING_ROWS:
                self.flush()
            return
        self.flush()
        if _concatenable(batch):
            self.pending, self.pending_rows = [batch], len(batch)
            return
        self.open.update(batch if is_key_batch(batch) or isinstance(batch, list) else [batch])

    def flush(self) -> None:
        """Sketch the pending batches, in arrival order."""
        if not self.pending:
            return
        parts, self.pending, self.pending_rows = self.pending, [], 0
        if len(parts) == 1:
            self.open.update(parts[0])
        elif isinstance(parts[0], np.ndarray):
            self.open.update(np.concatenate(parts))
        else:
            self.open.update(pa.concat_arrays(parts))

    def close(self) -> PostProcessedSum:
        """Post-process the open segment into the sum (an empty segment adds nothing)."""
        self.flush()
        if not self.open.is_empty():
            self.closed.add_sketch(self.open)
            self.open = MisraGries(self.open.k)
        return self.closed


class DesignBCombineFn(beam.CombineFn):
    """Design B: Algorithm 1 per accumulator, Algorithm 3 at merge, exact sums.

    Lebeda and Tětek, Sections 6-7, with the sharded neighbouring relation of
    ``docs/algorithms.md#mg-partition``.

    The output is a :class:`~beam_dpsketch.sketches.misra_gries.PostProcessedSum`, whose value
    does not depend on Beam's merge order. No noise is added here.

    Parameters
    ----------
    k
        Counters per segment sketch.
    max_shards
        Declared maximum number of segments (Beam accumulators) per window; the aggregator holds
        at most ``max_shards * k`` keys and raises ``ValueError`` rather than truncate.
    """

    def __init__(self, k: int, max_shards: int) -> None:
        super().__init__()
        self.k = k
        self.max_shards = max_shards
        PostProcessedSum(k, max_shards=max_shards)  # validate now, at construction

    def create_accumulator(self) -> _DesignBAccumulator:
        return _DesignBAccumulator(self.k, self.max_shards)

    def add_input(self, acc: _DesignBAccumulator, element: Any) -> _DesignBAccumulator:
        acc.add(element)
        return acc

    def merge_accumulators(
        self, accumulators: Iterable[_DesignBAccumulator]
    ) -> _DesignBAccumulator:
        # The streaming runner merges *no* accumulators for an empty ON_TIME pane after early
        # firings in DISCARDING mode: that pane's aggregate is the empty sum, released with noise.
        it = iter(accumulators)
        first = next(it, None)
        if first is None:
            return self.create_accumulator()
        first.close()
        for acc in it:
            acc.flush()
            # Only the first accumulator may be mutated: post-process a copy of the others' segment.
            if not acc.open.is_empty():
                first.closed.add_sketch(acc.open)
            first.closed.merge(acc.closed)
        return first

    def compact(self, acc: _DesignBAccumulator) -> _DesignBAccumulator:
        """Sketch the buffered keys before the accumulator leaves its bundle.

        A lifted combine compacts each partial accumulator before the shuffle: sketched here, it
        carries at most ``k`` counters instead of up to ``2**20`` buffered keys, and the work of
        sketching them stays with the bundle that received them rather than with the one merge
        that receives every accumulator. The sketch is the same (arrival order is kept).
        """
        acc.flush()
        return acc

    def extract_output(self, acc: _DesignBAccumulator) -> PostProcessedSum:
        return acc.close()


# --------------------------------------------------------------------------------------------
# Calibration (public parameters only)
# --------------------------------------------------------------------------------------------


def post_processed_relation(max_shards: int) -> str:
    """The neighbouring relation of a release of a post-processed sum, from ``max_shards``."""
    return NEIGHBOURING_ELEMENT if max_shards <= 1 else NEIGHBOURING_SHARDED


@dataclasses.dataclass(frozen=True)
class PostProcessedCalibration:
    """APPROX_PP's public calibration (:func:`approx_pp_calibration`), in released units.

    Attributes
    ----------
    noise_scale
        Scale of the per-key discrete Laplace noise, in counts (on the ``1/(k+1)`` grid).
    threshold
        The threshold on Algorithm 3's value, in counts.
    count_fraction
        Share of epsilon spent on the element count ``N_hat``.
    heavy_hitter_epsilon, count_epsilon
        The two slices of epsilon (keys, element count).
    count_noise_scale
        Scale of the element count's noise (``None`` when ``count_fraction`` is 0).
    confidence
        Confidence of the per-value error bound (``None`` when ``count_fraction`` is 0).
    """

    noise_scale: float
    threshold: float
    count_fraction: float
    heavy_hitter_epsilon: float
    count_epsilon: float
    count_noise_scale: float | None
    confidence: float | None


def approx_pp_calibration(
    k: int, epsilon: float, delta: float, count_fraction: float
) -> PostProcessedCalibration:
    """What APPROX_PP (:func:`~beam_dpsketch.sketches.misra_gries.approx_pp`) at ``(epsilon,
    delta)`` on sketches of ``k`` counters adds and thresholds, before any data.

    The split of epsilon on the ``1e-6`` grid of the exact samplers, the integer-scale noise
    ``2(k+1)/eps_hh`` (the paper's sensitivity 2) and the threshold ``k + t`` with ``t`` the
    union-bound tail over ``k`` keys, as the release computes them.
    """
    eps_total = rational_epsilon_floor(check_epsilon(epsilon))
    cf = float(count_fraction)
    eps_c = rational_epsilon_floor(eps_total * Fraction(cf)) if cf > 0.0 else Fraction(0)
    eps_hh = eps_total - eps_c
    k1 = k + 1
    scale = discrete_laplace_scale(2 * k1, eps_hh)
    tau_int = k + geometric_union_tail(scale, delta, k)
    count_scale = float(discrete_laplace_scale(1, eps_c)) if cf > 0.0 else None
    return PostProcessedCalibration(
        noise_scale=float(scale / k1),
        threshold=tau_int / k1,
        count_fraction=cf,
        heavy_hitter_epsilon=float(eps_hh),
        count_epsilon=float(eps_c),
        count_noise_scale=count_scale,
        confidence=ERROR_CONFIDENCE if cf > 0.0 else None,
    )


def gate_description(gate: ExactnessTest, exact_noise: str) -> str:
    """What the exactness gate of a Design B or merged release spends and does (public)."""
    return (
        f"a noisy test of whether every sketch held all its keys (min(distinct keys, k + 1), "
        f"sensitivity 1; epsilon {gate.epsilon:.6g}, and a pass on a decremented sketch has "
        f"probability <= {gate.test_delta:.3g}, charged to delta); if it passes, the exact "
        f"counts at sensitivity 1 with {exact_noise} and the threshold of one key present on "
        f"one side only, at eps_b = {gate.branch_epsilon:.6g}, delta_b = "
        f"{gate.branch_delta:.3g}, error bound the noise quantile only; otherwise the sketch "
        "release below at (eps_b, delta_b). Noise scale and threshold shown are the sketch "
        "branch's"
    )


def _design_b_facts(cal: PostProcessedCalibration, k: int, max_shards: int) -> dict[str, Any]:
    """The budget split, estimate, error bound and memory of a Design B release (public)."""
    memory = (
        f"at most max_shards * k = {max_shards * k:,} keys at the aggregator "
        f"(about {memory_bytes(k, max_shards=max_shards) / 1e6:.0f} MB for short keys); "
        f"{k:,} counters per Beam accumulator"
    )
    if cal.count_fraction == 0.0:
        return {
            "estimate": "Algorithm 3 value: in [f(x) - N/(k+1), f(x)] before noise",
            "memory": memory,
        }
    return {
        "budget_split": (
            f"epsilon {cal.heavy_hitter_epsilon:.6g} for the keys (APPROX_PP) + "
            f"{cal.count_epsilon:.6g} for a DP element count N_hat (count_fraction="
            f"{cal.count_fraction:g}; discrete Laplace, sensitivity 1), basic composition"
        ),
        "count_noise_scale": cal.count_noise_scale,
        "estimate": (
            "Algorithm 3 value + max(N_hat, 0)/(k+1): in [f(x), f(x) + N/(k+1)] before noise "
            "(exact when a single accumulator's sketch held all its distinct keys; with several "
            "accumulators a key missing from one is credited that accumulator's rows/(k+1)); "
            "the threshold applies before the correction"
        ),
        "error_bound": (
            f"per key, with probability >= {cal.confidence:g}: "
            "f(x) in [count - (max(N_hat, 0) + t_Z)/(k+1), count + (t_Z + t_W)/(k+1)] with "
            "t_Z, t_W the noise quantiles (computed from released values only)"
        ),
        "memory": memory,
    }


# --------------------------------------------------------------------------------------------
# The mechanism
# --------------------------------------------------------------------------------------------


class DesignB(HeavyHitterMechanism):
    """Design B (element level; :class:`~beam_dpsketch.transforms.DPHistogram`'s default).

    Algorithm 1 per Beam accumulator, Algorithm 3 at merge, exact sums
    (:class:`DesignBCombineFn`), released behind the exactness gate with APPROX_PP
    (:func:`~beam_dpsketch.sketches.misra_gries.gated_approx_pp`): discrete Laplace noise of
    scale ``2/eps_hh`` per key that does not grow with ``k``, and a DP element count whose
    ``N_hat/(k+1)`` removes Algorithm 3's offset; every released count carries an error bound.
    Accepts every windowing and trigger.

    Parameters
    ----------
    k
        Counters per segment sketch (default
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K`).
    max_shards
        Declared maximum number of segments (Beam accumulators) per window: the aggregator holds
        at most ``max_shards * k`` keys and a pipeline with more segments fails loudly rather
        than truncate. Above 1 the neighbouring relation is the sharded one (assumption A-PART,
        ``docs/algorithms.md#mg-a-part``).
    count_fraction
        Share of epsilon spent on the DP count of the window's elements, in ``[0, 1)`` (default
        0.05); ``0`` releases Algorithm 3's values, up to ``N/(k+1)`` low, without error bound.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP per release under add/remove of one element
    (sharded relation, A-PART, for ``max_shards > 1``): Lebeda and Tětek, Algorithm 3 of
    Section 6 and Section 7; the gate and the element count compose by basic composition
    (``docs/algorithms.md#mg-exactness-gate``).
    """

    key = "design-b"

    def __init__(
        self,
        k: int | None = None,
        *,
        max_shards: int = DEFAULT_MAX_SHARDS,
        count_fraction: float = DEFAULT_COUNT_FRACTION,
    ) -> None:
        super().__init__(DEFAULT_K if k is None else k)
        PostProcessedSum(self.k, max_shards=max_shards)  # checks max_shards, names it
        self.max_shards = max_shards
        # The range here; check_budget checks its slice of the real epsilon.
        self.count_fraction = check_count_fraction(count_fraction, 1.0)

    def parameters(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "max_shards": self.max_shards,
            "count_fraction": self.count_fraction,
        }

    def display_parameters(self) -> dict[str, Any]:
        return {"max_shards": self.max_shards}

    def check_budget(self, budget: PrivacyBudget) -> None:
        super().check_budget(budget)
        check_count_fraction(self.count_fraction, budget.epsilon)  # type: ignore[arg-type]

    def combine_fn(self) -> beam.CombineFn:
        return DesignBCombineFn(self.k, self.max_shards)

    def release_object(
        self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream
    ) -> HeavyHitterRelease:
        return gated_approx_pp(accumulator, budget, stream, count_fraction=self.count_fraction)

    def calibration(self, budget: PrivacyBudget) -> dict[str, Any]:
        gate = exactness_test_calibration(budget.epsilon, budget.delta, self.k)  # type: ignore[arg-type]
        # The noise scale and threshold stated are the sketch branch's, at (eps_b, delta_b).
        branch = approx_pp_calibration(
            self.k, gate.branch_epsilon, gate.branch_delta, self.count_fraction
        )
        out: dict[str, Any] = {
            "noise": "discrete_laplace",
            "noise_scale": branch.noise_scale,
            "threshold": float(branch.threshold),
            "sensitivity": "Lebeda and Tetek, sensitivity lemmas of Sections 5-8, for design-b",
            "neighbouring_relation": post_processed_relation(self.max_shards),
            "exactness_gate": gate_description(gate, "discrete Laplace noise of scale 1/eps_b"),
        }
        out.update(_design_b_facts(branch, self.k, self.max_shards))
        return out

    def windowing_requirement(self, defaulted_by: str | None = None) -> WindowingRequirement:
        return design_b_windowing(f"mechanism {self.key!r}", user_level=False)
