"""DP heavy hitters and sparse histograms with Misra-Gries: ``DPHeavyHitters``, ``DPHistogram``.

A thin Beam adapter over :mod:`beam_dpsketch.sketches.misra_gries.private` (Lebeda and Tětek, "Better
Differentially Private Approximate Histograms and Heavy Hitters using the Misra-Gries Sketch",
PODS 2023) and the accounted release step :class:`~beam_dpsketch.transforms.release.DPAggregate`.
Which release a pipeline shape allows follows from their Section 7 (merged sketches) and
``docs/algorithms.md#mg-merged``; the shapes offered here:

``"design-b"`` (element level; :class:`DPHistogram`'s default there)
    Each Beam accumulator runs Algorithm 1 on the elements it receives; when Beam merges
    accumulators, every open segment is post-processed (Algorithm 3 with its own ``n``, ``d``) and
    the results are summed exactly (Lebeda and Tětek, Algorithm 3 of Section 6 and Section 7;
    ``docs/algorithms.md#mg-partition``). Released with
    APPROX_PP: discrete Laplace noise of scale ``2/eps_hh`` per key (on the ``1/(k+1)`` grid)
    that does not grow with ``k``, plus a DP count ``N_hat`` of the window's elements
    (``count_fraction`` of epsilon, basic composition) whose ``N_hat/(k+1)`` is added back to
    every count, removing Algorithm 3's offset; every released count carries an error bound.
    Memory is at most ``max_shards * k`` keys at the aggregator; a
    pipeline that produces more segments than ``max_shards`` fails loudly rather than truncate.
``"sequential"`` (element level, strict mode)
    All elements of a window reach a single Algorithm-1 sketch (keyed state on one worker), which
    PMG releases (Lebeda and Tětek, Algorithm 2; discrete variant of Section 5.2): the most
    accurate release (noise ``O(1/eps)``,
    threshold ``O(log(1/delta)/eps)``), but one worker sketches the whole window. Needs a
    trigger that fires once per window (refused otherwise: several panes would reach the
    release as a merge of sketches, which PMG cannot release).
``"merged-gshm"`` / ``"merged-laplace"`` (element level, strictly bounded memory)
    Beam merges raw sketches with the Agarwal merge (``MERGE_k``) and the result is released with
    the Gaussian sparse histogram mechanism at ``l = k`` or Laplace noise of scale ``k/eps``
    (Lebeda and Tětek, Section 7, Lemma 1 and Corollary 2): noise grows with ``k``.
``"pamg-gshm"`` (user level, memory ``4 k`` keys)
    Each privacy unit contributes one set of at most ``max_contributions`` distinct keys per
    window (chosen by keyed hash, :class:`~beam_dpsketch.transforms.BoundContributions`), folded
    into one-counter PAMG sketches (Algorithm 4 with one counter) over ``4 k`` public hash
    buckets of the keys, merged bucket by bucket, released with GSHM at ``l = m`` (Lebeda and
    Tětek, Section 8: Algorithm 4, Lemma 9 per bucket, Theorem 5): noise grows with
    ``sqrt(m)``, not with ``k``, and a key's estimate falls short of its count only by the
    units of other keys in its bucket
    (:func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_pamg_gshm`).
``"select-then-count"`` (element or user level, memory ``O(k)``; :class:`DPHeavyHitters`' default at element level)
    A selection of at most ``k`` candidate keys (share ``selection_fraction`` of epsilon; at
    user level a Gaussian threshold on hashed one-counter PAMG sketches, noise growing with
    ``sqrt(m)``), then the exact counts of those keys in the same window (a windowed side input)
    released with discrete Laplace noise of scale ``1/eps_count`` (``m/eps_count`` at user
    level), zero counts included; basic composition. Global or fixed windows, a trigger that
    fires once. See :mod:`beam_dpsketch.transforms.select_count`.
``"user-exact"`` (user level, the default there; memory grows with the distinct keys of a window)
    Exact per-key counts of units bounded to ``m`` distinct keys, released with GSHM at
    ``l = m`` (Lebeda and Tětek, Section 8, Theorem 5): noise grows with ``sqrt(m)``, not ``k``.

Every release is one window and pane of one transform, accounted at pipeline construction
(``docs/privacy-model.md``). The partition-stability assumption A-PART
(``docs/algorithms.md#mg-a-part``) applies to the
CombineFn shapes: the DP claim relies on Beam's bundling not depending on record contents.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Iterable
from operator import itemgetter
from typing import Any

import apache_beam as beam
import numpy as np
import pyarrow as pa
from apache_beam.coders import BytesCoder
from apache_beam.transforms.timeutil import TimeDomain
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec, TimerSpec, on_timer

from beam_dpsketch.hashing import canonical_key
from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.accountant import Charge
from beam_dpsketch.sketches import MisraGries
from beam_dpsketch.sketches.misra_gries.hashed import HashedPAMG, hashed_pamg_gshm
from beam_dpsketch.sketches.misra_gries.private import (
    DEFAULT_COUNT_FRACTION,
    ERROR_CONFIDENCE,
    HeavyHitterEstimate,
    HeavyHitterRelease,
    PostProcessedSum,
    approx_pp,
    gated_approx_pp,
    merged_gshm,
    merged_laplace,
    pmg,
)
from beam_dpsketch.sketches.misra_gries.select_count import (
    DEFAULT_SELECTION_FRACTION,
    ExactnessTest,
    exactness_test_calibration,
)
from beam_dpsketch.sketches.misra_gries.single import check_count_fraction
from beam_dpsketch.sketches.misra_gries.sizing import DEFAULT_K, SELECT_COUNT_K, memory_bytes
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import BatchKeys, call_user_fn, is_batch_type, is_key_batch
from beam_dpsketch.transforms.bounding import BOUNDED_RELEASE_WINDOWING, BoundContributions
from beam_dpsketch.transforms.combiners import MergeSketchesCombineFn, SketchCombineFn
from beam_dpsketch.transforms.records import KeyEstimate, as_key_estimate
from beam_dpsketch.transforms.release import AccountedTransform, ReleaseMechanism
from beam_dpsketch.transforms.select_count import (
    RECOUNT_WINDOWING,
    SELECT_COUNT,
    SELECT_COUNT_WINDOWING,
    USER_BUCKETS_PER_CANDIDATE,
    USER_EXACT,
    USER_SELECTION_FRACTION,
    CandidateCountCombineFn,
    ExactCountCombineFn,
    SelectedCountMechanism,
    SelectionMechanism,
    SelectThenCount,
    UserExactMechanism,
    unit_key_set,
)
from beam_dpsketch.transforms.windowing_rules import WindowingRequirement

__all__ = [
    "HEAVY_HITTERS_DEFAULT_MECHANISM",
    "MECHANISMS",
    "USER_DEFAULT_MECHANISM",
    "DPHeavyHitters",
    "DPHistogram",
    "DesignBCombineFn",
    "MisraGriesReleaseMechanism",
]

MECHANISMS = (
    "design-b",
    "sequential",
    "merged-gshm",
    "merged-laplace",
    "pamg-gshm",
    SELECT_COUNT,
    USER_EXACT,
)
_ELEMENT_MECHANISMS = ("design-b", "sequential", "merged-gshm", "merged-laplace", SELECT_COUNT)
_USER_MECHANISMS = ("pamg-gshm", USER_EXACT, SELECT_COUNT)
#: :class:`DPHeavyHitters`' release at element level when ``mechanism`` is not given (the
#: ``heavy-hitters`` command's too): its counts carry noise error only, no sketch error, in
#: ``O(k)`` memory. It needs the global window or fixed windows with a trigger that fires once
#: per window; other windowings (early or late firings, sliding windows) take
#: ``mechanism="design-b"``, which the refusal names.
HEAVY_HITTERS_DEFAULT_MECHANISM = SELECT_COUNT
#: The release at user level when ``mechanism`` is not given (:class:`DPHistogram`,
#: :class:`DPHeavyHitters` and the command): noise that grows with ``sqrt(max_contributions)``.
USER_DEFAULT_MECHANISM = USER_EXACT


# --------------------------------------------------------------------------------------------
# Exact aggregation (no noise)
# --------------------------------------------------------------------------------------------


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

    The output is a :class:`~beam_dpsketch.sketches.misra_gries.private.PostProcessedSum`, whose value
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

    def extract_output(self, acc: _DesignBAccumulator) -> PostProcessedSum:
        return acc.close()


# Numbers the timer (and state) names of the sequential sketch step of each application.
_SEQUENTIAL_IDS = itertools.count()


def _sequential_sketch_fn(k: int) -> beam.DoFn:
    """A stateful ``DoFn``: one Algorithm-1 sketch per window, fed every key batch of the window
    in arrival order.

    The sketch lives in keyed state (its bytes, ``O(k)``) and leaves when the watermark passes
    the end of the window, so memory does not grow with the window's elements: a
    ``GroupByKey`` onto one key would hold all of them on the in-process runners. Each call
    makes its own class with its own timer and state names: Beam 2.77's FnApiRunner fires only
    one of two same-named watermark timers of one pipeline, so two applications sharing a name
    would silently lose a release.
    """
    n = next(_SEQUENTIAL_IDS)
    state_param = beam.DoFn.StateParam(ReadModifyWriteStateSpec(f"sketch_{n}", BytesCoder()))
    end_spec = TimerSpec(f"end_{n}", TimeDomain.WATERMARK)
    end_param = beam.DoFn.TimerParam(end_spec)

    class SequentialSketch(beam.DoFn):
        def process(
            self,
            element: tuple[int, Any],
            window=beam.DoFn.WindowParam,
            state=state_param,
            end=end_param,
        ) -> None:
            data = state.read()
            sketch = MisraGries.from_bytes(data) if data else MisraGries(k)
            state.write(sketch.update(element[1]).to_bytes())
            if not data:
                end.set(window.max_timestamp())

        @on_timer(end_spec)
        def flush(self, state=state_param) -> Iterable[MisraGries]:
            data = state.read()
            state.clear()
            if data:
                yield MisraGries.from_bytes(data)

    return SequentialSketch()


def _identity(x: Any) -> Any:
    return x


# --------------------------------------------------------------------------------------------
# Release
# --------------------------------------------------------------------------------------------


class MisraGriesReleaseMechanism(ReleaseMechanism):
    """One of the DP Misra-Gries releases of Lebeda and Tětek, as a release-step mechanism.

    Parameters
    ----------
    mechanism
        One of the Misra-Gries entries of :data:`MECHANISMS`.
    k
        Sketch size.
    top
        If given, only the ``top`` largest noisy counts are emitted (post-processing).
    max_shards
        Design B only: the declared maximum number of segments per window. It decides the
        neighbouring relation :meth:`describe` states (sharded, under A-PART, when above 1).
    max_contributions
        ``pamg-gshm`` only: the contribution bound ``m`` the relation is stated for.
    count_fraction
        Design B only: share of each release's epsilon spent on the DP element count that
        removes Algorithm 3's ``N/(k+1)`` offset
        (:func:`~beam_dpsketch.sketches.misra_gries.private.approx_pp`); ``0`` releases
        Algorithm 3's values unchanged.

    Notes
    -----
    :meth:`release` emits ``(key, noisy_count)`` pairs, largest first with ``top``; those of
    every element-level mechanism (Design B, sequential, merged-gshm, merged-laplace) are
    :class:`~beam_dpsketch.sketches.misra_gries.private.HeavyHitterEstimate` pairs that
    carry their error bound. The
    :class:`~beam_dpsketch.sketches.misra_gries.private.HeavyHitterRelease` object never leaves
    the release step, and :meth:`describe` reads public configuration only (a probe release of
    an empty aggregate).
    """

    @property
    def record_type(self) -> type:
        """:class:`HeavyHitterEstimate` where the release states an error bound, else
        :class:`~beam_dpsketch.transforms.records.KeyEstimate`."""
        # PAMG + GSHM states no per-value bound; every other mechanism here does.
        return KeyEstimate if self.mechanism == "pamg-gshm" else HeavyHitterEstimate

    def __init__(
        self,
        mechanism: str,
        k: int,
        top: int | None = None,
        *,
        max_shards: int = 1,
        max_contributions: int | None = None,
        count_fraction: float = DEFAULT_COUNT_FRACTION,
    ) -> None:
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
        self.mechanism = mechanism
        self.k = k
        self.top = top
        self.max_shards = max_shards
        self.max_contributions = 1 if max_contributions is None else int(max_contributions)
        self.count_fraction = count_fraction
        self.name = f"dp-misra-gries/{mechanism}"

    def check_budget(self, budget: PrivacyBudget) -> None:
        if budget.kind != "approx" or not budget.delta:
            raise ValueError(
                f"{self.name} is (epsilon, delta)-DP: pass PrivacyBudget.approx(eps, delta) with "
                f"delta > 0 (got a {budget.kind} budget); thresholding needs delta to hide keys"
            )
        if self.mechanism == "design-b":
            check_count_fraction(self.count_fraction, budget.epsilon)

    def _release(
        self, acc: Any, budget: PrivacyBudget, stream: NoiseStream, *, gate: bool = True
    ) -> HeavyHitterRelease:
        eps, delta = budget.epsilon, budget.delta
        # Design B and the merged releases run behind the exactness gate: exact counts at
        # sensitivity 1 when a noisy test finds that no sketch decremented.
        if self.mechanism == "design-b":
            if gate:
                return gated_approx_pp(acc, eps, delta, stream, count_fraction=self.count_fraction)
            return approx_pp(acc, eps, delta, stream, count_fraction=self.count_fraction)
        # Every element-level release states a per-value error bound.
        if self.mechanism == "sequential":
            return pmg(acc, eps, delta, stream, error_confidence=ERROR_CONFIDENCE)
        if self.mechanism == "merged-gshm":
            return merged_gshm(
                acc, eps, delta, stream, error_confidence=ERROR_CONFIDENCE, exactness_gate=gate
            )
        if self.mechanism == "merged-laplace":
            return merged_laplace(
                acc, eps, delta, stream, error_confidence=ERROR_CONFIDENCE, exactness_gate=gate
            )
        return hashed_pamg_gshm(acc, self.max_contributions, eps, delta, stream, k=self.k)

    @property
    def buckets(self) -> int:
        """``pamg-gshm``: hash buckets of its one-counter PAMG sketches (memory in keys)."""
        return USER_BUCKETS_PER_CANDIDATE * self.k

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        released = self._release(accumulator, budget, stream)
        if self.top is not None:
            released = released.top(self.top)
        # Largest noisy counts first; ties by the canonical key order of the release (stable).
        records = [as_key_estimate(r) for r in released.estimates()]
        if self.top is not None:
            records.sort(key=lambda kv: -kv[1])
        return records

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        # A release of an empty aggregate exposes the calibration without touching data.
        empty = {
            "design-b": lambda: PostProcessedSum(self.k, max_shards=self.max_shards),
            "sequential": lambda: MisraGries(self.k),
            "merged-gshm": lambda: MisraGries(self.k),
            "merged-laplace": lambda: MisraGries(self.k),
            "pamg-gshm": lambda: HashedPAMG(self.buckets),
        }[self.mechanism]()
        # The sketch branch's calibration: the gate's exact branch would run on an empty input.
        probe = self._release(
            empty, budget, NoiseSource.insecure_for_tests(0).stream("describe"), gate=False
        )
        out: dict[str, Any] = {
            "noise": probe.noise.distribution,
            "noise_scale": float(probe.noise.scale),
            "threshold": float(probe.threshold),
            "sensitivity": "Lebeda and Tetek, sensitivity lemmas of Sections 5-8, for "
            + self.mechanism,
            "neighbouring_relation": probe.neighbouring,
        }
        if self.mechanism in ("design-b", "merged-gshm", "merged-laplace"):
            gate = exactness_test_calibration(budget.epsilon, budget.delta, self.k)
            # The sketch branch's facts below are stated at its own budget (eps_b, delta_b).
            budget = PrivacyBudget.approx(gate.branch_epsilon, gate.branch_delta)
            probe = self._release(
                empty, budget, NoiseSource.insecure_for_tests(0).stream("describe"), gate=False
            )
            out.update(
                noise_scale=float(probe.noise.scale),
                threshold=float(probe.threshold),
                exactness_gate=_gate_description(self.mechanism, gate),
            )
        if self.mechanism == "design-b":
            out.update(_design_b_facts(probe, self.k, self.max_shards))
        if self.mechanism in ("sequential", "merged-gshm", "merged-laplace"):
            out.update(_sketch_check_facts(probe, budget))
        if self.mechanism == "pamg-gshm":
            out["sensitivity"] = (
                f"one-counter PAMG sketches in {self.buckets} hash buckets: one unit changes at "
                f"most m = {self.max_contributions} counters, each by 1 (Lebeda and Tetek, "
                "Section 8, Lemma 9 and Corollary 10, bucket by bucket); Gaussian for L2 "
                "sensitivity sqrt(m) at (eps, delta/2), and a key stored on one side only "
                "(counter 1) passes with probability at most delta / (2 m e^eps)"
            )
            out["estimate"] = (
                "noisy bucket counter: at most the key's count of units before noise, less by "
                "the units of the other keys of its bucket"
            )
            out["memory"] = (
                f"at most {self.buckets} keys (hash buckets), whatever the distinct keys"
            )
        return out


def _gate_description(mechanism: str, gate: ExactnessTest) -> str:
    """What the exactness gate of a Design B or merged release spends and does (public)."""
    kind = (
        "Gaussian noise calibrated as GSHM at l = 1"
        if mechanism == "merged-gshm"
        else "discrete Laplace noise of scale 1/eps_b"
    )
    return (
        f"a noisy test of whether every sketch held all its keys (min(distinct keys, k + 1), "
        f"sensitivity 1; epsilon {gate.epsilon:.6g}, and a pass on a decremented sketch has "
        f"probability <= {gate.test_delta:.3g}, charged to delta); if it passes, the exact "
        f"counts at sensitivity 1 with {kind} and the threshold of one key present on one side "
        f"only, at eps_b = {gate.branch_epsilon:.6g}, delta_b = {gate.branch_delta:.3g}, error "
        "bound the noise quantile only; otherwise the sketch release below at (eps_b, delta_b). "
        "Noise scale and threshold shown are the sketch branch's"
    )


def _sketch_check_facts(probe: HeavyHitterRelease, budget: PrivacyBudget) -> dict[str, Any]:
    """The budget split and per-value error bound of a sequential or merged release (public)."""
    d = probe.details
    conf = probe.error.confidence  # type: ignore[union-attr]
    return {
        "budget_split": (
            f"epsilon {d['release_epsilon']:.6g} for the release + "
            f"{d['exactness_test_epsilon']:.6g} for a noisy test of whether the sketch is exact "
            f"(min(distinct keys, k + 1), sensitivity 1) + {d['count_check_epsilon']:.6g} for a "
            "noisy upper bound on the element count (sensitivity 1); discrete Laplace, basic "
            f"composition, {budget.epsilon:g} in all"
        ),
        "error_bound": (
            f"per key, with probability >= {conf:g}: f(x) in [count - t, count + t + s], t the "
            "noise quantile, s = 0 when the test finds the sketch exact (at most about 3k/4 "
            "distinct keys), else the noisy upper bound on rows/(k+1) (the sketch's most "
            "undercount); computed from released values only"
        ),
    }


def _design_b_facts(probe: HeavyHitterRelease, k: int, max_shards: int) -> dict[str, Any]:
    """The budget split, estimate, error bound and memory of a Design B release (public)."""
    details = probe.details
    cf = float(details["count_fraction"])
    memory = (
        f"at most max_shards * k = {max_shards * k:,} keys at the aggregator "
        f"(about {memory_bytes(k, max_shards=max_shards) / 1e6:.0f} MB for short keys); "
        f"{k:,} counters per Beam accumulator"
    )
    if cf == 0.0:
        return {
            "estimate": "Algorithm 3 value: in [f(x) - N/(k+1), f(x)] before noise",
            "memory": memory,
        }
    return {
        "budget_split": (
            f"epsilon {details['heavy_hitter_epsilon']:.6g} for the keys (APPROX_PP) + "
            f"{details['count_epsilon']:.6g} for a DP element count N_hat (count_fraction="
            f"{cf:g}; discrete Laplace, sensitivity 1), basic composition"
        ),
        "count_noise_scale": float(details["count_noise_scale"]),
        "estimate": (
            "Algorithm 3 value + max(N_hat, 0)/(k+1): in [f(x), f(x) + N/(k+1)] before noise "
            "(exact when a single accumulator's sketch held all its distinct keys; with several "
            "accumulators a key missing from one is credited that accumulator's rows/(k+1)); "
            "the threshold applies before the correction"
        ),
        "error_bound": (
            f"per key, with probability >= {probe.error.confidence:g}: "  # type: ignore[union-attr]
            "f(x) in [count - (max(N_hat, 0) + t_Z)/(k+1), count + (t_Z + t_W)/(k+1)] with "
            "t_Z, t_W the noise quantiles (computed from released values only)"
        ),
        "memory": memory,
    }


# --------------------------------------------------------------------------------------------
# PTransforms
# --------------------------------------------------------------------------------------------


class DPHistogram(AccountedTransform):
    """Differentially private sparse histogram of keys per window, from Misra-Gries sketches.

    Emits ``(key, noisy_count)`` tuples (element level:
    :class:`~beam_dpsketch.sketches.misra_gries.HeavyHitterEstimate` tuples, whose ``lower``,
    ``upper``, ``error_bound`` and ``confidence`` attributes state each count's error) for every key whose noisy count passes the mechanism's
    threshold, in canonical key order (never insertion order, ``docs/algorithms.md#mg-order``),
    one release per window
    and pane (or :class:`~beam_dpsketch.transforms.release.Release` objects carrying the records
    and the release's mechanism, epsilon, delta, noise scale and threshold, with
    ``with_metadata=True``).

    Parameters
    ----------
    k
        Counters per Misra-Gries sketch (default: ``SELECT_COUNT_K`` = 131072 for
        element-level ``"select-then-count"``, whose selection uses the sketches' exact counts
        when every segment held all of its distinct keys;
        :data:`~beam_dpsketch.sketches.misra_gries.DEFAULT_K` = 4096 otherwise); every key with true
        count above ``N/(k+1)`` plus the noise threshold is released with high probability
        (``N`` elements per window). Size it with
        :func:`~beam_dpsketch.sketches.misra_gries.suggest_k` (an error target for an expected
        ``N``) or :func:`~beam_dpsketch.sketches.misra_gries.k_for_memory`.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` for this transform, split over the releases one
        privacy unit can influence (windows and panes, see ``docs/privacy-model.md``).
    key_fn
        Extracts the key from a record (a callable, or the field name of ``dict`` / ``beam.Row``
        elements); default: elements are keys (or batches of keys, as
        produced by :class:`~beam_dpsketch.transforms.ReadKeyBatches`).
    privacy_id_fn, max_contributions
        User-level privacy (``privacy_id_fn``: a callable or a field name): each privacy unit contributes at most ``max_contributions`` distinct
        keys per window (chosen by a secret keyed hash). Requires ``key_fn`` or key elements,
        and unbatched input.
    mechanism
        One of :data:`MECHANISMS`; default ``"design-b"`` at element level for
        :class:`DPHistogram` (any windowing and trigger), ``"select-then-count"`` for
        :class:`DPHeavyHitters` (see its docstring), and ``"user-exact"`` at user level (noise that grows with the square root of
        ``max_contributions``, not with ``k``; memory grows with the distinct keys of a window,
        as in PipelineDP: pass ``"select-then-count"`` or ``"pamg-gshm"`` for memory bounded by
        ``k``). See the module docstring for when each is allowed. ``"sequential"`` and
        the user-level release need a trigger that fires once per window; ``"design-b"`` and
        the merged releases accept early and late firings (declare ``max_panes_per_window``).
        ``"select-then-count"`` (either level) and ``"user-exact"`` (user level) are described
        in the module docstring.
    max_shards
        Design B only: declared maximum number of Beam accumulators per window (memory bound:
        at most ``max_shards * k`` keys at the aggregator).
    count_fraction
        Design B only: share of epsilon spent on a DP count of the window's elements, whose
        ``N_hat/(k+1)`` is added back to every released count (default 0.05; ``0`` releases
        Algorithm 3's values, up to ``N/(k+1)`` low). See
        :func:`~beam_dpsketch.sketches.misra_gries.private.approx_pp`.
    selection_fraction
        ``"select-then-count"`` only: share of epsilon spent on the selection, in ``(0, 1)``
        (default 0.52 at element level, 0.75 at user level); the count gets the rest and no
        delta. :meth:`explain` shows both charges.
    recount_source
        ``"select-then-count"`` at element level, global window only: a root ``PTransform``
        that reads the same input again (e.g. a second ``ReadKeyBatches`` of the same files).
        The count pass reads it once the selection is final, so a runner need not hold the
        whole input until then (the in-process runners keep it in memory otherwise). The
        guarantee does not depend on it being the same data: each pass is DP for its own input
        under add/remove of one element, and the two compose as before.
    accountant, max_panes_per_window, max_windows_per_unit, noise_source, with_metadata, label
        As for :class:`~beam_dpsketch.transforms.release.DPAggregate`.
    release_range
        Public event-time range ``(start, end)`` in seconds (Fixed or Sliding windows): every
        window starting in it is released, empty ones included, and no other window is. Without
        it a window without data is not released, so whether a window was released reveals
        that it had data (see :class:`~beam_dpsketch.transforms.release.DPAggregate`).

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP for the whole transform under add/remove of one
    element (default) or of one privacy unit's bounded contributions, by basic composition over
    the releases a unit can influence (Lebeda and Tětek: Algorithm 2, Sections 6-7 and
    Theorem 12 of Section 8). CombineFn shapes rely on assumption A-PART
    (``docs/algorithms.md#mg-a-part``).

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared ``release_range``; with a
    count-based early or late trigger the number and timing of panes depend on the data and are
    not covered. :meth:`explain` lists every such condition of the actual configuration under
    "NOT PROTECTED".
    """

    _top: int | None = None
    # True when the release is sorted and cut to at most k keys (DPHeavyHitters with top=None).
    _top_all: bool = False
    # The element-level release when ``mechanism`` is not given: design-b accepts every
    # windowing and trigger; DPHeavyHitters overrides it with the command's default.
    _default_mechanism: str = "design-b"

    def __init__(
        self,
        k: int | None = None,
        budget: PrivacyBudget | None = None,
        *,
        key_fn: Callable[[Any], Any] | None = None,
        privacy_id_fn: Callable[[Any], Any] | None = None,
        max_contributions: int | None = None,
        mechanism: str | None = None,
        max_shards: int = 256,
        accountant: PrivacyAccountant | None = None,
        max_panes_per_window: int | None = None,
        max_windows_per_unit: int | None = None,
        noise_source: NoiseSource | None = None,
        selection_key: bytes | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        release_range: tuple[float, float] | None = None,
        selection_fraction: float | None = None,
        count_fraction: float | None = None,
        recount_source: beam.PTransform | None = None,
    ) -> None:
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k must be a positive int, got {k!r}")
        if budget is None and accountant is None:
            raise ValueError(
                "budget: pass PrivacyBudget.approx(epsilon, delta), an accountant, or both"
            )
        super().__init__(budget, accountant=accountant, noise_source=noise_source, label=label)
        key_fn = as_extractor(key_fn, "key_fn")
        privacy_id_fn = as_extractor(privacy_id_fn, "privacy_id_fn")
        user_level = privacy_id_fn is not None
        # Whether the windowing refusal should also state the default's rule.
        self._mechanism_defaulted = mechanism is None
        if mechanism is None:
            # User level: user-exact counts exactly with noise that follows sqrt(m); the
            # bounded-memory pamg-gshm has the same noise but undercounts keys that share a
            # hash bucket, and select-then-count spends part of epsilon on its selection
            # (benchmarks/RESULTS.md, "User level").
            # Element level: design-b accepts every windowing and trigger.
            mechanism = USER_DEFAULT_MECHANISM if user_level else self._default_mechanism
        if mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {MECHANISMS}, got {mechanism!r}")
        if mechanism not in (_USER_MECHANISMS if user_level else _ELEMENT_MECHANISMS):
            raise ValueError(
                f"mechanism: user-level releases (with privacy_id_fn) are {_USER_MECHANISMS}; "
                f"element-level mechanisms are {_ELEMENT_MECHANISMS}, got {mechanism!r}"
            )
        if user_level and (max_contributions is None or max_contributions < 1):
            raise ValueError("max_contributions: a positive int is required with privacy_id_fn")
        if not user_level and max_contributions is not None:
            raise ValueError("max_contributions applies to user-level releases: pass privacy_id_fn")
        if k is None:
            k = SELECT_COUNT_K if mechanism == SELECT_COUNT and not user_level else DEFAULT_K
        if self._top_all:
            # Every selected key: at most k of them.
            self._top = k
        self.k = k
        self.mechanism_name = mechanism
        # The sequential sketch lives in keyed state and leaves on an end-of-window timer.
        self.needs_state_and_timers = mechanism == "sequential"
        self._key_fn = key_fn
        m_or_none = int(max_contributions) if user_level else None  # type: ignore[arg-type]
        self._mechanism: ReleaseMechanism = MisraGriesReleaseMechanism(
            mechanism,
            k,
            self._top,
            max_shards=max_shards,
            max_contributions=m_or_none if mechanism == "pamg-gshm" else None,
            count_fraction=_count_fraction(count_fraction, mechanism, budget),
        )
        # select-then-count and user-exact (transforms/select_count.py): own mechanisms/combines.
        if selection_fraction is not None and mechanism != SELECT_COUNT:
            raise ValueError(
                f"selection_fraction applies to mechanism {SELECT_COUNT!r}, not {mechanism!r}"
            )
        if mechanism == SELECT_COUNT:
            default_fraction = USER_SELECTION_FRACTION if user_level else DEFAULT_SELECTION_FRACTION
            fraction = default_fraction if selection_fraction is None else selection_fraction
            selection = SelectionMechanism(k, max_shards, m_or_none, fraction)
            self._mechanism = SelectedCountMechanism(k, self._top, m_or_none, selection)
            combine: beam.CombineFn = CandidateCountCombineFn()
        elif mechanism == USER_EXACT:
            self._mechanism = UserExactMechanism(int(max_contributions), self._top)  # type: ignore[arg-type]
            combine = ExactCountCombineFn()
        elif mechanism == "design-b":
            combine = DesignBCombineFn(k, max_shards)
        elif mechanism == "merged-gshm" or mechanism == "merged-laplace":
            combine = SketchCombineFn.misra_gries(k)
        elif mechanism == "sequential":
            combine = MergeSketchesCombineFn(lambda: MisraGries(k))
        else:
            buckets = USER_BUCKETS_PER_CANDIDATE * k
            combine = SketchCombineFn(lambda: HashedPAMG(buckets))
        # Bounding runs on (privacy id, key) pairs: PAMG needs only each unit's distinct keys,
        # and the pairs have a canonical id for the keyed-hash choice whatever the records are.
        self._bound = (
            BoundContributions(
                itemgetter(0),
                max_contributions,
                key_fn=itemgetter(1),
                max_partitions=max_contributions,
                selection_key=selection_key,
            )
            if user_level
            else None
        )
        self._max_contributions = max_contributions
        self._privacy_id_fn = privacy_id_fn
        if recount_source is not None and (mechanism != SELECT_COUNT or user_level):
            raise ValueError(
                f"recount_source applies to mechanism {SELECT_COUNT!r} at element level"
            )
        self._recount_source = recount_source
        self._build_step(
            combine,
            self._mechanism,
            privacy_unit="user" if user_level else "element",
            max_panes_per_window=max_panes_per_window,
            max_windows_per_unit=max_windows_per_unit,
            with_metadata=with_metadata,
            release_range=release_range,
        )
        self._select_count = None
        if mechanism == SELECT_COUNT:
            # User level: bucketed PAMG sketches (noise for sqrt(m)); element level: Design B.
            selection_combine = (
                selection.user_combine_fn() if user_level else DesignBCombineFn(k, max_shards)
            )
            self._select_count = SelectThenCount(self._step, selection_combine)

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn, self._privacy_id_fn)

    def label_detail(self) -> str | None:
        return super().label_detail() or self.mechanism_name

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        params.update(k=self.k, top=self._top, max_contributions=self._max_contributions)
        if self.mechanism_name == "design-b":
            params["max_shards"] = self._mechanism.max_shards
        return params

    def windowing_requirement(self) -> WindowingRequirement:
        # Element level: keys reach the trigger in batches.
        design_b = WindowingRequirement(who="mechanism 'design-b'", batched=self._bound is None)
        if self._select_count is not None:
            if self._recount_source is not None:
                return RECOUNT_WINDOWING
            if not self._mechanism_defaulted:
                return SELECT_COUNT_WINDOWING
            return dataclasses.replace(
                SELECT_COUNT_WINDOWING,
                who=f"{type(self).__name__}, which defaults to mechanism {SELECT_COUNT!r},",
                instead=(("mechanism='design-b'", design_b),),
            )
        if self.mechanism_name == "sequential":
            # With several panes the release step could receive several Algorithm-1 sketches
            # of one window in one pane, whose merge PMG cannot release.
            return dataclasses.replace(
                design_b,
                who="mechanism 'sequential'",
                triggers="once",
                why="it releases one Algorithm-1 sketch per window",
                instead=(("mechanism='design-b'", design_b),),
            )
        if self._bound is not None:
            return BOUNDED_RELEASE_WINDOWING
        return dataclasses.replace(design_b, who=f"mechanism {self.mechanism_name!r}")

    def plan_release(self, pcoll: beam.PCollection, name: str) -> Charge:
        if self._select_count is not None:
            return self._select_count.plan(pcoll.windowing, name, self)
        return super().plan_release(pcoll, name)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self._bound is not None:
            key_fn = self._key_fn or _identity
            pid = self._privacy_id_fn
            users = (
                pcoll
                | "ToUnitKeyPairs"
                >> beam.Map(
                    lambda x: (
                        canonical_key(call_user_fn(pid, x, "privacy_id_fn")),
                        canonical_key(call_user_fn(key_fn, x, "key_fn")),
                    )
                )
                | "BoundContributions" >> self._bound
                | "GroupByUnit" >> beam.GroupByKey()
            )
            # Every user-level release counts each unit's distinct keys once.
            units = users | "KeysPerUnit" >> beam.Map(unit_key_set)
            if self._select_count is not None:
                return units | "SelectThenCount" >> _SelectCount(self._select_count, self.run_salt)
            return self._apply_step(units)
        keys = pcoll
        if self._key_fn is not None or not _is_batched(pcoll):
            keys = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        if self._recount_source is not None:
            again = pcoll.pipeline | "ReadAgain" >> self._recount_source
            if self._key_fn is not None or not _is_batched(again):
                again = again | "BatchKeysAgain" >> BatchKeys(self._key_fn)
            return keys | "SelectThenCount" >> _SelectCount(
                self._select_count, self.run_salt, again
            )
        if self.mechanism_name == "sequential":
            keys = (
                keys
                | "OneShard" >> beam.Map(lambda batch: (0, batch))
                | "SequentialSketch"
                >> beam.ParDo(_sequential_sketch_fn(self.k))
                .with_input_types(tuple[int, Any])
                .with_output_types(MisraGries)
            )
        if self._select_count is not None:
            return keys | "SelectThenCount" >> _SelectCount(self._select_count, self.run_salt)
        return self._apply_step(keys)


class DPHeavyHitters(DPHistogram):
    """Differentially private top-``top`` heavy hitters per window, from Misra-Gries sketches.

    The :class:`DPHistogram` release, post-processed to its ``top`` largest noisy counts (default
    ``None``: every released key, at most ``k``), emitted as ``(key, noisy_count)`` tuples from
    the largest count down (ties by canonical key order). Same parameters and privacy guarantee as :class:`DPHistogram`
    (post-processing costs nothing).

    Default release, the same as the ``heavy-hitters`` command's: ``"select-then-count"``
    (:data:`HEAVY_HITTERS_DEFAULT_MECHANISM`) at element level, whose counts carry noise error
    only, for the global window and fixed windows with a trigger that fires once per window;
    any other windowing (early or late firings, sliding windows) is refused when the transform
    is applied, with the advice to pass ``mechanism="design-b"``, which accepts every windowing
    and trigger. At user level ``"user-exact"`` (:data:`USER_DEFAULT_MECHANISM`). Pick another
    release when: ``"design-b"`` for repeated panes or sliding windows; ``"sequential"`` for the
    smallest threshold when one worker can sketch a window; ``"pamg-gshm"`` or
    ``"select-then-count"`` at user level for memory bounded by ``k``.
    """

    _default_mechanism = HEAVY_HITTERS_DEFAULT_MECHANISM

    def __init__(
        self,
        k: int | None = None,
        budget: PrivacyBudget | None = None,
        *,
        top: int | None = None,
        **kwargs: Any,
    ) -> None:
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise ValueError(
                f"top must be a positive int or None (every released key), got {top!r}"
            )
        # top=None: every released key, which is at most k (set once k is resolved).
        self._top_all = top is None
        self._top = top
        super().__init__(k, budget, **kwargs)


class _SelectCount(beam.PTransform):
    """Apply a planned :class:`~beam_dpsketch.transforms.select_count.SelectThenCount`."""

    def __init__(
        self,
        plan: SelectThenCount,
        run_salt: Any,
        recount: beam.PCollection | None = None,
    ) -> None:
        super().__init__()
        self._plan = plan
        self._run_salt = run_salt
        self._recount = recount

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        return self._plan.expand(pcoll, self._run_salt, self._recount)


def _count_fraction(
    count_fraction: float | None, mechanism: str, budget: PrivacyBudget | None
) -> float:
    """The Design B count share, checked now (its slice of a known budget too)."""
    if count_fraction is None:
        return DEFAULT_COUNT_FRACTION
    if mechanism != "design-b":
        raise ValueError(f"count_fraction applies to mechanism 'design-b', not {mechanism!r}")
    # Without a budget (an accountant's share is known at planning) only the range is checked
    # here; check_budget repeats the check with the real epsilon.
    epsilon = budget.epsilon if budget is not None and budget.epsilon else 1.0
    return check_count_fraction(count_fraction, epsilon)


def _is_batched(pcoll: beam.PCollection) -> bool:
    return is_batch_type(pcoll.element_type)
