"""DP frequency sketches in Beam: ``DPFrequencies``.

A thin adapter over :mod:`beam_dpsketch.sketches.linear.private` (Zhao et al., "Differentially Private Linear
Sketches", NeurIPS 2022) on the accounted release
step :class:`~beam_dpsketch.transforms.release.DPAggregate`: exact int64 sketches are built per
bundle and merged by Beam (linear sketches merge exactly, whatever the merge tree), and noise is
added once per window and pane at the trusted aggregator (``docs/algorithms.md#lin-merge``).

Deletions (the turnstile model) enter as records with a negative weight through ``weight_fn``.

With declared public keys (``query_keys``) no sketch is built: the exact counts of exactly those
keys are released with noise calibrated for counting
(:mod:`beam_dpsketch.sketches.linear.key_counts`), with no hashing error.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.declarations import (
    PrivacyUnit,
    Windowing,
    check_privacy_unit,
    check_windowing,
)
from beam_dpsketch.sketches import CountMedianSketch, CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.calibration import pane_calibration, pane_relation_text
from beam_dpsketch.sketches.linear.key_counts import (
    KeyCountIndex,
    PrivateKeyCounts,
    check_query_keys,
)
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMedianSketch,
    PrivateCountMinSketch,
    PrivateCountSketch,
    parse_neighbouring,
)
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import (
    BatchKeys,
    call_user_fn,
    is_batch_type,
    is_key_batch,
    unit_weight,
)
from beam_dpsketch.transforms.combiners import SketchCombineFn, WeightedSketchCombineFn
from beam_dpsketch.transforms.records import BoundedKeyEstimate, ReleasedSketch
from beam_dpsketch.transforms.release import (
    PANE_RELATIONS,
    AccountedTransform,
    ReleaseMechanism,
)
from beam_dpsketch.transforms.windowing_rules import (
    ANY_WINDOWING,
    BATCHED_WINDOWING,
    WindowingRequirement,
)

__all__ = [
    "DEFAULT_SKETCH",
    "DPFrequencies",
    "OUTPUTS",
    "KeyCountsCombineFn",
    "LinearSketchReleaseMechanism",
    "PublicKeyCountsReleaseMechanism",
    "SKETCHES",
    "USER_LEVEL_BY_NEIGHBOURING",
]

#: The default estimator: Count Sketch, whose point estimates are unbiased (zero-mean hashing
#: error and zero-mean noise), where Count-Min's minimum over noisy rows is biased.
DEFAULT_SKETCH = "count-sketch"
#: Confidence of the per-estimate error bounds reported by ``describe`` and the CLI.
ERROR_BOUND_CONFIDENCE = 0.95
#: What ``DPFrequencies`` emits per release: the released object (a private sketch, or
#: ``PrivateKeyCounts``), or rows (one ``ReleasedSketch``, or one ``BoundedKeyEstimate`` per
#: declared key).
OUTPUTS = ("object", "rows")

#: How the linear-sketch transforms (frequencies, quantiles) take a user-level guarantee: the
#: message that refuses a user-level ``PrivacyUnit``.
USER_LEVEL_BY_NEIGHBOURING = (
    "for user level, bound each user's records upstream (BoundContributions) and declare the "
    'bound with neighbouring="user:k"'
)

_SKETCHES = {
    "count-min": (CountMinSketch, PrivateCountMinSketch),
    "count-sketch": (CountSketch, PrivateCountSketch),
    "count-median": (CountMedianSketch, PrivateCountMedianSketch),
}
#: The sketch kinds ``DPFrequencies(sketch=...)`` takes (the command line and the YAML step offer
#: the same): ``"count-sketch"`` (the default), ``"count-min"`` and ``"count-median"``.
SKETCHES: tuple[str, ...] = tuple(_SKETCHES)


class LinearSketchReleaseMechanism(ReleaseMechanism):
    """Release an exact Count-Min / Count Sketch / Count-Median sketch as a private one (Zhao et
    al., Algorithm 3).

    Every cell gets independent noise once, calibrated for the budget kind (pure: discrete
    Laplace on the L1 sensitivity; approximate or zCDP: discrete Gaussian on the L2 sensitivity)
    and the ``neighbouring`` relation (``docs/algorithms.md#lin-sensitivity``). No constant is
    added to the cells (``offset=False``): a point estimate is the minimum (Count-Min) or the
    median (Count Sketch, Count-Median) of the key's noisy counters, with no hidden shift, and each released
    sketch reports its per-estimate ``error_bound(confidence)``. Discrete Laplace noise is drawn
    on a lattice finer than one count when its scale is small (``lattice=True`` of
    :meth:`~beam_dpsketch.sketches.linear.private.PrivateCountSketch.release`, same guarantee),
    so that the error bound resolves it (docs/algorithms.md#lin-lattice).

    Parameters
    ----------
    sketch, width, depth, seed
        Sketch kind and shape.
    neighbouring
        The relation the caller declared. Only ``"replace"`` (the replace-one model, where the
        total ``N`` is a public invariant) publishes the exact total.
    turnstile
        Whether records carry signed weights (``weight_fn``); selects the ``replace_update``
        sensitivity under the pane relation ``"replace"``.
    pane_relation
        Relation of a pane's input (``ReleasePlan.pane_relation``); set by
        :meth:`for_pane_relation`. Under ``"replace"`` the noise is calibrated for replacement
        but the pane total stays private: the pane's size is not a public invariant.
    rows
        Release the sketch as one :class:`~beam_dpsketch.transforms.records.ReleasedSketch`
        row (its bytes, public parameters and guarantee) instead of the sketch object; the
        sketch, and so the guarantee, are the same.
    """

    @property
    def record_type(self) -> type:
        """:class:`ReleasedSketch` with ``rows``, else the released private sketch class."""
        return ReleasedSketch if self.rows else self._private_class()

    def __init__(
        self,
        sketch: str,
        width: int,
        depth: int,
        seed: int,
        neighbouring: str,
        *,
        turnstile: bool = False,
        pane_relation: str = "add_remove",
        rows: bool = False,
    ) -> None:
        self.sketch, self.width, self.depth, self.seed = sketch, width, depth, seed
        self.rows = bool(rows)
        self.neighbouring = parse_neighbouring(neighbouring)[0]
        self.turnstile = bool(turnstile)
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.pane_relation = pane_relation
        self.calibrated_for = pane_calibration(self.neighbouring, pane_relation, self.turnstile)
        self.name = f"dp-linear/{sketch}"

    def _private_class(self) -> type:
        return _SKETCHES[self.sketch][1]

    @property
    def publish_total(self) -> bool:
        """Whether releases publish the exact total: only under the declared replace model."""
        return self.pane_relation == "add_remove" and self.neighbouring == "replace"

    def spent_budget(self, budget: PrivacyBudget) -> PrivacyBudget:
        """The budget a release calibrates its noise for, from public parameters only.

        An approximate ``(epsilon, delta)`` budget can be spent by the discrete Laplace
        mechanism on the L1 sensitivity (``epsilon``-DP, no ``delta``) or by the discrete
        Gaussian through zCDP on the L2 sensitivity; the one with the smaller per-cell noise
        variance is used. For a sketch of depth ``d`` the L1 sensitivity is ``d`` and the L2
        ``sqrt(d)``, so at the usual depths and ``delta`` the Laplace one has the smaller noise
        (depth 5, ``epsilon`` 1, ``delta`` 1e-6: variance 50 against 143).
        """
        if budget.kind != "approx" or budget.is_pure:
            return budget
        cls = self._private_class()
        pure = PrivacyBudget.pure(budget.epsilon)  # type: ignore[arg-type]
        laplace = cls.calibrate(
            self.width,
            self.depth,
            pure,
            neighbouring=self.calibrated_for,
            offset=False,
            lattice=True,
        )
        try:
            gaussian = cls.calibrate(
                self.width, self.depth, budget, neighbouring=self.calibrated_for, offset=False
            )
        except ValueError:
            # sigma outside the exact sampler's range: the discrete Laplace is the only option.
            return pure
        return pure if laplace.noise_variance <= gaussian.noise_variance else budget

    def privacy_cost(self, budget: PrivacyBudget) -> PrivacyBudget:
        # Spent by the discrete Laplace mechanism, an approximate budget costs epsilon alone.
        return self.spent_budget(budget)

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        private = self._private_class().release(
            accumulator,
            self.spent_budget(budget),
            stream,
            neighbouring=self.calibrated_for,
            publish_total=self.publish_total,
            offset=False,
            lattice=True,
        )
        if self.rows:
            return [ReleasedSketch.of(private, ERROR_BOUND_CONFIDENCE)]
        return [private]

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        # Linear sketches have an exact sensitivity under replacement (LIN-sensitivity in
        # docs/algorithms.md), smaller than
        # group privacy of size 2 gives; the other declared relations fall back to group privacy.
        if pane_relation == self.pane_relation:
            return self
        if self.neighbouring == "add_remove" and pane_relation in PANE_RELATIONS:
            return LinearSketchReleaseMechanism(
                self.sketch,
                self.width,
                self.depth,
                self.seed,
                self.neighbouring,
                turnstile=self.turnstile,
                pane_relation=pane_relation,
                rows=self.rows,
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        cal = self._private_class().calibrate(
            self.width,
            self.depth,
            self.spent_budget(budget),
            neighbouring=self.calibrated_for,
            offset=False,
            lattice=True,
        )
        noise_q = cal.tail_bound(self.depth, 1 - ERROR_BOUND_CONFIDENCE)
        return {
            "noise": cal.noise,
            "noise_scale": cal.scale,
            "noise_lattice": cal.lattice,
            "threshold": None,
            "sensitivity": f"{cal.sensitivity:g} ({cal.sensitivity_norm}, {cal.neighbouring})",
            "neighbouring_relation": pane_relation_text(
                self.neighbouring, self.pane_relation, self.calibrated_for
            ),
            "total_published": self.publish_total,
            "offset": 0,
            "estimator": (
                "minimum over rows minus the public mean of the minimum of the row noises"
                if self.sketch == "count-min"
                else "median over rows"
                if self.sketch == "count-sketch"
                else "median over rows of the unsigned (Count-Min) counters"
            ),
            "point_query_noise_bound": (
                f"{noise_q:.6g} at {ERROR_BOUND_CONFIDENCE:g} per key (noise only; the released "
                "sketch's error_bound(confidence) covers hashing and noise together)"
            ),
            "error_bound": (
                "per key, the quantile of one row's error read off the released cells, combined "
                "over the rows as the estimator does: post-processing of the released table, no "
                "budget spent"
            ),
        }


class KeyCountsCombineFn(beam.CombineFn):
    """Exact counts of declared public keys: the accumulator is one int64 per key.

    Inputs are batches of keys (numpy, pyarrow, ``KeyBatch``), ``(key, weight)`` pairs when
    ``weighted``, or single keys. Lookups are vectorised (:class:`KeyCountIndex`); memory is
    ``O(#keys)`` whatever the input length.
    """

    def __init__(self, keys: Sequence[Any], weighted: bool = False) -> None:
        super().__init__()
        self._keys = tuple(keys)
        self._weighted = bool(weighted)
        self._index: KeyCountIndex | None = None

    def _lookup(self) -> KeyCountIndex:
        # Built lazily on the worker: only the key tuple is pickled with the CombineFn.
        if self._index is None:
            self._index = KeyCountIndex(self._keys)
        return self._index

    def __getstate__(self) -> dict[str, Any]:
        return {"_keys": self._keys, "_weighted": self._weighted, "_index": None}

    def create_accumulator(self) -> np.ndarray:
        return self._lookup().zeros()

    def add_input(self, mutable_accumulator: np.ndarray, element: Any) -> np.ndarray:
        index = self._lookup()
        if self._weighted:
            key, weight = element
            return index.add(mutable_accumulator, [key], [weight])
        if is_key_batch(element):
            return index.add(mutable_accumulator, element)
        return index.add(mutable_accumulator, [element])

    def merge_accumulators(self, accumulators: Any) -> np.ndarray:
        it = iter(accumulators)
        first = next(it, None)
        if first is None:
            return self.create_accumulator()
        for acc in it:
            first += acc
        return first

    def extract_output(self, accumulator: np.ndarray) -> np.ndarray:
        return accumulator


_KEY_COUNT_RELATIONS = {
    "add_remove": "add_remove: add/remove one element (it changes one declared key's count by at "
    "most 1)",
    "replace": "replace: one element replaced by another (at most two declared keys' counts "
    "change, by 1 each)",
    "replace_update": "replace_update: one signed record replaced by another (the declared keys' "
    "counts change by at most 2 in total)",
}


class PublicKeyCountsReleaseMechanism(ReleaseMechanism):
    """Release the exact counts of declared public keys with noise calibrated for counting.

    The count vector over the declared keys is a one-row Count-Min sketch without collisions, so
    its sensitivities are ``linear_sensitivity("count_min", relation, depth=1)``: 1 (L1 and L2)
    for one element added or removed, ``k`` for ``"user:k"``, 2 (L1) and ``sqrt(2)`` (L2) under
    replacement, 2 under ``replace_update``. Pure budget: discrete Laplace of scale
    ``Delta_1 / eps``; zCDP: discrete Gaussian with ``sigma = Delta_2 / sqrt(2 rho)``;
    approximate ``(eps, delta)``: whichever of the two has the smaller variance (the discrete
    Laplace for a count vector, whose L1 and L2 sensitivities are equal; it then spends
    ``eps`` and no ``delta``, which is what the accountant is charged). Every declared key is released (zero counts included), so which keys appear
    is public. Panes whose boundaries depend on the data are calibrated like the sketches
    (:func:`~beam_dpsketch.sketches.linear.calibration.pane_calibration`).

    With ``rows=True`` the release is one
    :class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate` per declared key, in declared
    order: the released count, ``lower``/``upper`` at the count minus/plus the public noise
    bound ``error_bound(0.95)`` of :class:`PrivateKeyCounts` and ``confidence`` 0.95
    (post-processing of the same release).
    """

    @property
    def record_type(self) -> type:
        """One :class:`PrivateKeyCounts` per release, or ``BoundedKeyEstimate`` rows."""
        return BoundedKeyEstimate if self.rows else PrivateKeyCounts

    def __init__(
        self,
        keys: Sequence[Any],
        neighbouring: str,
        *,
        turnstile: bool = False,
        pane_relation: str = "add_remove",
        rows: bool = False,
    ) -> None:
        self.rows = bool(rows)
        self.keys = tuple(keys)
        self.neighbouring = parse_neighbouring(neighbouring)[0]
        self.turnstile = bool(turnstile)
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.pane_relation = pane_relation
        self.calibrated_for = pane_calibration(self.neighbouring, pane_relation, self.turnstile)
        self.name = "dp-counts/public-keys"
        self._index: KeyCountIndex | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_index"] = None
        return state

    def privacy_cost(self, budget: PrivacyBudget) -> PrivacyBudget:
        # An approximate budget spent by the discrete Laplace mechanism costs epsilon only.
        return PrivateKeyCounts.privacy_cost(
            len(self.keys), budget, neighbouring=self.calibrated_for
        )

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        if self._index is None:
            self._index = KeyCountIndex(self.keys)
        released = PrivateKeyCounts.release(
            self._index, accumulator, budget, stream, neighbouring=self.calibrated_for
        )
        if not self.rows:
            return [released]
        # The bound comes from the public calibration alone: the same for every key.
        bound = released.error_bound(ERROR_BOUND_CONFIDENCE)
        return [
            BoundedKeyEstimate(key, count, count - bound, count + bound, ERROR_BOUND_CONFIDENCE)
            for key, count in zip(released.keys, released.counts.tolist(), strict=True)
        ]

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        if pane_relation == self.pane_relation:
            return self
        if self.neighbouring == "add_remove" and pane_relation in PANE_RELATIONS:
            return PublicKeyCountsReleaseMechanism(
                self.keys,
                self.neighbouring,
                turnstile=self.turnstile,
                pane_relation=pane_relation,
                rows=self.rows,
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        cal = PrivateKeyCounts.calibrate(len(self.keys), budget, neighbouring=self.calibrated_for)
        bound = cal.tail_bound(1, 1 - ERROR_BOUND_CONFIDENCE)
        if self.pane_relation == "add_remove":
            relation = _KEY_COUNT_RELATIONS.get(
                self.neighbouring,
                f"{self.neighbouring}: add/remove one user's records (at most "
                f"{self.neighbouring[5:]}, a bound enforced upstream); they change the declared "
                "keys' counts by at most that many in total",
            )
        else:
            relation = pane_relation_text(
                self.neighbouring, self.pane_relation, self.calibrated_for
            ).replace("; the pane total is not published", "")
        return {
            "noise": cal.noise,
            "noise_scale": cal.scale,
            "noise_lattice": cal.lattice,
            "threshold": None,
            "sensitivity": f"{cal.sensitivity:g} ({cal.sensitivity_norm}, {cal.neighbouring})",
            "neighbouring_relation": relation,
            "public_keys": len(self.keys),
            "released_keys": "every declared key, zero counts included (public)",
            "sketch_error": "none: exact counts of the declared keys",
            "point_query_noise_bound": f"{bound:.6g} at {ERROR_BOUND_CONFIDENCE:g} per key",
        }


class DPFrequencies(AccountedTransform):
    """Differentially private key frequencies per window and pane: a sketch, or exact counts of
    declared public keys.

    Without ``query_keys``: emits one released
    :class:`~beam_dpsketch.sketches.linear.private.PrivateCountSketch` (default),
    ``PrivateCountMinSketch`` or ``PrivateCountMedianSketch`` per released pane, queryable downstream for any key (``estimate``,
    e.g. as a side input), with a per-estimate ``error_bound(confidence)`` (the quantile of the
    hashing and noise error together, read off the released cells: no budget spent). The sketch is exact until release; noise is added
    once to every cell and no constant is added (the estimate has no hidden offset).

    With ``query_keys``: emits one
    :class:`~beam_dpsketch.sketches.linear.key_counts.PrivateKeyCounts` per released pane, the
    exact counts of exactly the declared keys plus noise calibrated for counting (sensitivity 1
    per element at element level), every declared key included (zero counts too), with no
    sketch error. Memory is ``O(#keys)``.

    With ``output="rows"`` the same release comes as typed rows with a registered row coder,
    for DataFrames, file sinks and Beam YAML: one
    :class:`~beam_dpsketch.transforms.records.ReleasedSketch` per release (the sketch's
    versioned bytes, its public parameters, guarantee and ``error_bound``; ``decode()`` gives
    the sketch back), or with ``query_keys`` one
    :class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate` per declared key.

    Parameters
    ----------
    width, depth, seed
        Sketch shape and public hash seed (``width`` and ``depth`` are required without
        ``query_keys``; with ``query_keys`` no sketch is built and they are not used).
    budget
        Total budget of the transform for one privacy unit (pure, approximate or zCDP), split
        over the releases a unit can influence.
    sketch
        ``"count-sketch"`` (default: unbiased median estimator), ``"count-min"`` (minimum
        over rows minus the public mean of the minimum of the row noises: centred on the count
        for a key without collisions, raised by collisions; its guarantees need non-negative
        frequencies) or ``"count-median"`` (the Count-Min table queried with the median of its
        rows, for general turnstile data: collisions of either sign, Count-Min's smaller
        sensitivity under ``"replace"``). Must be left unset with ``query_keys``.
    query_keys
        Public keys, declared independently of the data: count exactly these keys instead of
        building a sketch. Keys of the data that are not declared are not counted.
    key_fn
        Extracts the key of a record: a callable, or the field name of ``dict`` / ``beam.Row``
        elements (default: elements are keys, or batches of keys).
    weight_fn
        Extracts an integer weight of a record (a callable or a field name) (negative: a deletion; turnstile model). The
        sensitivity assumes ``|weight| <= 1`` per record unless ``neighbouring`` says otherwise.
    neighbouring
        Neighbouring relation (``docs/algorithms.md#lin-sensitivity``): ``"add_remove"``
        (default, element level: one record added or removed), ``"replace"``,
        ``"replace_update"`` or ``"user:k"`` (user level: one user's at most ``k`` records, a bound
        the caller enforces upstream, e.g. with
        :class:`~beam_dpsketch.transforms.BoundContributions`).
        Only ``"replace"``, the declared replace-one model of Zhao et al. in which the total is a
        public invariant, makes the released sketches carry their exact total weight.
    privacy_unit
        Element level: ``PrivacyUnit()`` (the default) or ``PrivacyUnit(max_windows=...)`` (the
        declared windows per element, for sessions). For user level, bound contributions
        upstream and declare them with ``neighbouring="user:k"``.
    windowing
        A :class:`~beam_dpsketch.privacy.Windowing`: ``max_panes_per_window``,
        ``data_independent_panes`` and ``release_range`` (every window starting in a public
        event-time range is released, empty ones included, and no other window is; without it
        a window without data is not released, so whether a window was released reveals that it
        had data).
    output
        ``"object"`` (default): the released sketch or ``PrivateKeyCounts``, to query
        downstream (e.g. as a side input). ``"rows"``: the same release as rows (above).
    budget_weight, accountant, noise_source, with_metadata, label
        As for :class:`~beam_dpsketch.transforms.release.DPAggregate`.

    Notes
    -----
    **Privacy guarantee.** The released sketches (or key counts) are ``budget``-DP for the whole
    transform under the chosen neighbouring relation (Zhao et al., Algorithm 3, Theorems 3.1 and
    3.2, with the exact sensitivities of ``docs/algorithms.md#lin-sensitivity``; for
    ``query_keys`` the discrete Laplace or discrete Gaussian mechanism on the count vector of the
    declared keys, whose sensitivities are those of a one-row Count-Min sketch).
    When a trigger can fire several panes whose boundaries depend on the data, each pane is
    calibrated for the exact replacement sensitivity (``replace_update`` with ``weight_fn``), and
    its total is not published: ``total()`` of a released Count-Min or Count-Median sketch is
    then the estimate from the noisy table (a released Count Sketch has none).

    **Accuracy.** A sketch's point estimate has hashing error (``O(N / width)`` for Count-Min,
    ``O(||f||_2 / sqrt(width))`` for Count Sketch, ``O(||f||_1 / width)`` for Count-Median) on
    top of the noise; ``error_bound`` states
    it. When the keys of interest are known in advance, ``query_keys`` removes the hashing error
    and needs less noise (sensitivity 1 instead of ``depth`` or ``sqrt(depth)``).

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared ``Windowing(release_range=...)``;
    with a count-based early or late trigger the number and timing of panes depend on the data and are
    not covered. :meth:`explain` lists every such condition of the actual configuration under
    "NOT PROTECTED".
    """

    def __init__(
        self,
        width: int | None = None,
        depth: int | None = None,
        budget: PrivacyBudget | None = None,
        *,
        seed: int = 0,
        sketch: str | None = None,
        query_keys: Sequence[Any] | None = None,
        key_fn: Callable[[Any], Any] | None = None,
        weight_fn: Callable[[Any], int] | None = None,
        neighbouring: str = "add_remove",
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        output: str = "object",
    ) -> None:
        if output not in OUTPUTS:
            raise ValueError(f"output must be one of {OUTPUTS}, got {output!r}")
        unit = check_privacy_unit(privacy_unit, user_level=USER_LEVEL_BY_NEIGHBOURING)
        if query_keys is not None:
            if sketch is not None:
                raise ValueError(
                    "sketch: query_keys counts the declared keys exactly, without a sketch; "
                    "leave sketch unset"
                )
            keys = check_query_keys(query_keys)
        else:
            sketch = DEFAULT_SKETCH if sketch is None else sketch
            if sketch not in _SKETCHES:
                raise ValueError(f"sketch must be one of {tuple(_SKETCHES)}, got {sketch!r}")
            if width is None or depth is None:
                raise ValueError(
                    "width and depth are required for a sketch (or pass query_keys to count "
                    "declared public keys exactly)"
                )
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        key_fn = as_extractor(key_fn, "key_fn")
        weight_fn = as_extractor(weight_fn, "weight_fn")
        self._key_fn, self._weight_fn = key_fn, weight_fn
        turnstile = weight_fn is not None
        self.mechanism: LinearSketchReleaseMechanism | PublicKeyCountsReleaseMechanism
        if query_keys is not None:
            self.mechanism = PublicKeyCountsReleaseMechanism(
                keys, neighbouring, turnstile=turnstile, rows=output == "rows"
            )
            KeyCountIndex(keys)  # refuse an ambiguous lookup now, at construction
            combine_fn: beam.CombineFn = KeyCountsCombineFn(keys, weighted=turnstile)
        else:
            exact_cls = _SKETCHES[sketch][0]
            exact_cls(width, depth, seed)  # validate the shape now, at construction
            self.mechanism = LinearSketchReleaseMechanism(
                sketch, width, depth, seed, neighbouring, turnstile=turnstile, rows=output == "rows"
            )
            combine_fn = (WeightedSketchCombineFn if turnstile else SketchCombineFn)(
                lambda: exact_cls(width, depth, seed)
            )
        self._build_step(
            combine_fn,
            self.mechanism,
            privacy_unit=unit,
            windowing=check_windowing(windowing),
            with_metadata=with_metadata,
        )

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        m = self.mechanism
        if isinstance(m, PublicKeyCountsReleaseMechanism):
            params.update(
                query_keys=len(m.keys),
                neighbouring_relation=m.neighbouring,
                turnstile=m.turnstile,
            )
            return params
        params.update(
            sketch=m.sketch,
            width=m.width,
            depth=m.depth,
            seed=m.seed,
            neighbouring_relation=m.neighbouring,
            turnstile=m.turnstile,
        )
        return params

    def windowing_requirement(self) -> WindowingRequirement:
        # Keys reach the trigger in batches unless weights are given.
        return BATCHED_WINDOWING if self._weight_fn is None else ANY_WINDOWING

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self._weight_fn is not None:
            key_fn = self._key_fn or (lambda x: x)
            weight_fn = self._weight_fn
            items = pcoll | "KeyWeight" >> beam.Map(
                lambda r: (
                    call_user_fn(key_fn, r, "key_fn"),
                    unit_weight(call_user_fn(weight_fn, r, "weight_fn")),
                )
            )
        elif self._key_fn is not None or not is_batch_type(pcoll.element_type):
            items = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        else:
            items = pcoll
        return self._apply_step(items)
