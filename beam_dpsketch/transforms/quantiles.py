"""DP quantiles in Beam: ``DPQuantiles``.

A thin adapter over :mod:`beam_dpsketch.sketches.quantiles.private` (the dyadic Count Sketch of
Zhao et al., "Differentially Private Linear Sketches", NeurIPS 2022, Section 4.2) on the accounted
release step :class:`~beam_dpsketch.transforms.release.DPAggregate`: exact dyadic sketches are
built per bundle and merged by Beam (they are linear, so any merge tree gives the same table), and
noise is added once per window and pane at the trusted aggregator
(``docs/algorithms.md#lin-merge``). Deletions enter as records of weight -1 through ``weight_fn``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import apache_beam as beam
import numpy as np

from beam_dpsketch.checks import check_bool, check_real
from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.declarations import (
    PrivacyUnit,
    Windowing,
    check_privacy_unit,
    check_windowing,
)
from beam_dpsketch.sketches.linear.calibration import pane_calibration, pane_relation_text
from beam_dpsketch.sketches.linear.private import parse_neighbouring
from beam_dpsketch.sketches.quantiles.domain import FloatDomain
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch, fitting_leaf_bits
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import (
    FixedBatches,
    call_user_fn,
    is_batch_type,
    unit_weight,
)
from beam_dpsketch.transforms.combiners import WeightedSketchCombineFn
from beam_dpsketch.transforms.frequencies import USER_LEVEL_BY_NEIGHBOURING
from beam_dpsketch.transforms.records import QuantileEstimate
from beam_dpsketch.transforms.release import (
    PANE_RELATIONS,
    AccountedTransform,
    ReleaseMechanism,
)
from beam_dpsketch.transforms.windowing_rules import BATCHED_WINDOWING, WindowingRequirement

__all__ = ["DPQuantiles", "QuantileMechanism", "QuantileTree"]


@dataclass(frozen=True)
class QuantileTree:
    """The shape of :class:`DPQuantiles`' tree: public parameters only, set once.

    The defaults fit most uses: every level of the tree is counted exactly when the value range
    allows it (``exact_nodes``), and only wider ranges sketch their finest levels with a Count
    Sketch of ``width`` x ``depth``.

    Parameters
    ----------
    branching
        Children per tree node, a power of two (default 32; 2 is the paper's dyadic tree).
        Fewer levels share the budget, so each gets more of it.
    exact_nodes
        Levels with at most this many nodes are counted exactly (memory: about
        ``8.3 * exact_nodes`` bytes per accumulator at most with ``branching=32``; default
        ``2**15``, about 270 kB).
    leaf_bits
        Leaves hold ``2**leaf_bits`` consecutive values of the integer domain (bins of
        ``resolution``). ``None`` (default): the finest leaves for which every level is exact,
        0 whenever ``upper - lower + 1 <= exact_nodes``; a quantile that falls inside a wider
        leaf is placed by linear interpolation.
    consistency
        Read the tree through its least-squares consistent estimates (default ``True``;
        post-processing, no budget; docs/algorithms.md#lin-wide-range).
    width, depth, seed
        Shape and public hash seed of each sketched level's Count Sketch. With the default
        ``leaf_bits`` no level is sketched; they matter when ``leaf_bits`` asks for finer leaves
        than ``exact_nodes`` allows (e.g. ``leaf_bits=0`` on a wide range: the paper's dyadic
        Count Sketch down to single values).

    Raises
    ------
    TypeError
        For a ``consistency`` that is not a bool. The sizes are checked by :class:`DPQuantiles`
        against its bounds, as the sketch checks them (errors name the field).
    """

    branching: int = 32
    exact_nodes: int = 1 << 15
    leaf_bits: int | None = None
    consistency: bool = True
    width: int = 1024
    depth: int = 5
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "consistency", check_bool(self.consistency, "consistency"))


class QuantileMechanism(ReleaseMechanism):
    """Release a dyadic Count Sketch and answer the declared quantiles (Zhao et al., Section 4.2).

    Calibration and the total follow :class:`LinearSketchReleaseMechanism`: under the pane
    relation ``"replace"`` every level is calibrated for replacement (``replace_update`` with
    signed weights) and the quantile targets ``ceil(q N)`` use the total estimated from the noisy
    top level, never the exact pane size; only a declared ``neighbouring="replace"`` publishes
    ``N``.
    """

    @property
    def record_type(self) -> type:
        """One :class:`QuantileEstimate` per declared quantile, in the declared order; with
        ``released_tree``, the released :class:`PrivateDyadicCountSketch` itself."""
        return PrivateDyadicCountSketch if self.released_tree else QuantileEstimate

    def __init__(
        self,
        quantiles: Sequence[float],
        domain: FloatDomain | None,
        neighbouring: str,
        layout: tuple[int, int, int, int, int],
        *,
        turnstile: bool = False,
        pane_relation: str = "add_remove",
        tree: dict[str, Any] | None = None,
        consistency: bool = False,
        released_tree: bool = False,
    ) -> None:
        self.quantiles = tuple(float(q) for q in quantiles)
        # The released tree instead of its answers: the same release, answered downstream.
        self.released_tree = bool(released_tree)
        self.domain = domain
        self.neighbouring = parse_neighbouring(neighbouring)[0]
        self.layout = layout
        # branching, exact_nodes, leaf_bits of the sketch (public); {} is the binary tree.
        self.tree = dict(tree or {})
        self.consistency = bool(consistency)
        self.turnstile = bool(turnstile)
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.pane_relation = pane_relation
        self.calibrated_for = pane_calibration(self.neighbouring, pane_relation, self.turnstile)
        self.name = "dp-dyadic-count-sketch/quantiles"

    @property
    def publish_total(self) -> bool:
        """Whether the exact total is used: only under the declared replace-one model."""
        return self.pane_relation == "add_remove" and self.neighbouring == "replace"

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        private = PrivateDyadicCountSketch.release(
            accumulator,
            budget,
            stream,
            neighbouring=self.calibrated_for,
            publish_total=self.publish_total,
            consistency=self.consistency,
            approx_noise="auto",
        )
        if self.released_tree:
            return [private]
        answers = np.asarray(private.quantiles(list(self.quantiles)))
        if self.domain is not None:
            answers = self.domain.to_float(answers)
        return [QuantileEstimate(q, v.item()) for q, v in zip(self.quantiles, answers, strict=True)]

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        if pane_relation == self.pane_relation:
            return self
        if self.neighbouring == "add_remove" and pane_relation in PANE_RELATIONS:
            return QuantileMechanism(
                self.quantiles,
                self.domain,
                self.neighbouring,
                self.layout,
                turnstile=self.turnstile,
                pane_relation=pane_relation,
                tree=self.tree,
                consistency=self.consistency,
                released_tree=self.released_tree,
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        levels = PrivateDyadicCountSketch.calibrate(
            DyadicCountSketch(*self.layout, **self.tree),
            budget,
            neighbouring=self.calibrated_for,
            approx_noise="auto",
        )
        return {
            "noise": levels[0].noise,
            "noise_scale": max(c.scale for c in levels),
            "level_noise_scales": ", ".join(f"{c.scale:g}" for c in levels),
            "threshold": None,
            "sensitivity": ", ".join(f"{c.sensitivity:g}" for c in levels)
            + f" (per level, {levels[0].neighbouring})",
            "neighbouring_relation": pane_relation_text(
                self.neighbouring, self.pane_relation, self.calibrated_for
            ),
            "total_published": self.publish_total,
            "tree": f"branching {self.tree.get('branching', 2)}, "
            f"leaves of {2 ** self.tree.get('leaf_bits', 0)} value(s), {len(levels)} levels",
            "consistency": self.consistency,
            "out_of_range_values": "clamped to [lower, upper]; NaN mapped to upper",
        }


class DPQuantiles(AccountedTransform):
    """Differentially private quantiles per window and pane (private dyadic Count Sketch).

    Values are integers in ``[lower, upper]``, or floats mapped to integer bins by a declared
    :class:`~beam_dpsketch.sketches.quantiles.domain.FloatDomain` (``resolution=``). The bounds are
    public, and every value is mapped into them, one record at a time, before it is counted:

    * a value below ``lower`` (including ``-inf``) counts as ``lower``, above ``upper``
      (including ``+inf``) as ``upper`` (clamping);
    * NaN counts as ``upper`` (NumPy orders NaN after every number);
    * without ``resolution``, a fractional value counts as its floor (the integer bins of a
      resolution of 1).

    Because the map is applied to each record independently, one record still changes one value
    of the sketch's input, so the sensitivity (and the guarantee) is unchanged; and because no
    value can fail the pipeline, whether the pipeline succeeds reveals nothing about the values.
    A value that is not a number at all (e.g. a string) raises ``TypeError`` naming ``value_fn``,
    never the value. Emits :class:`~beam_dpsketch.transforms.records.QuantileEstimate` records
    (fields ``quantile`` and ``value``), one per requested quantile
    and released pane. Deletions enter through ``weight_fn`` (negative weights; turnstile model).

    Parameters
    ----------
    quantiles
        Quantiles in ``[0, 1]`` to answer.
    lower, upper
        Public bounds of the values.
    budget
        Total budget (pure, approximate or zCDP), split across the sketch's levels (Zhao et al.,
        Section 4.2)
        and over the releases a privacy unit can influence.
    tree
        The tree's shape, a :class:`QuantileTree` (``branching``, ``exact_nodes``,
        ``leaf_bits``, ``consistency``, and the ``width``, ``depth`` and ``seed`` of sketched
        levels); default ``QuantileTree()``.
    resolution
        If given, values are floats and bin ``i`` is ``[lower + i*resolution, ...)``.
    clamp
        Must be ``True`` (the default): values are always mapped into ``[lower, upper]`` as
        above. ``False`` is refused, since failing on an out-of-range value would make the
        pipeline's success depend on the data.
    value_fn, weight_fn
        Extract the value (and an integer weight in ``{-1, 0, 1}``) of a record: callables, or
        field names of ``dict`` / ``beam.Row`` elements.
    neighbouring
        As for :class:`DPFrequencies`: only ``"replace"`` lets the quantile targets use the
        exact total.
    privacy_unit, windowing, budget_weight, accountant, noise_source, with_metadata, label
        As for :class:`DPFrequencies` (element level: ``PrivacyUnit()`` or
        ``PrivacyUnit(max_windows=...)``).
    output
        ``"quantiles"`` (default): the records above. ``"tree"``: the released
        :class:`~beam_dpsketch.sketches.quantiles.private.PrivateDyadicCountSketch` of each pane
        instead (over the integer bins of ``resolution``, if given), which answers any quantile
        and rank as post-processing and can be published and summed with other organisations'
        trees (``merge_released``); the same release and guarantee.

    Notes
    -----
    **Privacy guarantee.** ``budget``-DP under the chosen neighbouring relation (Zhao et al.,
    Section 4.2, private dyadic Count Sketch; an ``(epsilon, delta)`` budget is spent as pure
    ``epsilon``-DP Laplace noise when that is less noisy than the Gaussian, see
    ``PrivateDyadicCountSketch.calibrate``); quantile answers are
    post-processing of the noisy sketch (and, under a declared ``"replace"`` only, of the public
    total).

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared ``Windowing(release_range=...)``;
    with a count-based early or late trigger the number and timing of panes depend on the data and are
    not covered. :meth:`explain` lists every such condition of the actual configuration under
    "NOT PROTECTED".
    """

    def __init__(
        self,
        quantiles: Sequence[float],
        lower: float,
        upper: float,
        budget: PrivacyBudget | None = None,
        *,
        tree: QuantileTree | None = None,
        resolution: float | None = None,
        clamp: bool = True,
        value_fn: Callable[[Any], Any] | None = None,
        weight_fn: Callable[[Any], int] | None = None,
        neighbouring: str = "add_remove",
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        output: str = "quantiles",
    ) -> None:
        if output not in ("quantiles", "tree"):
            raise ValueError(f"output must be 'quantiles' or 'tree', got {output!r}")
        unit = check_privacy_unit(privacy_unit, user_level=USER_LEVEL_BY_NEIGHBOURING)
        # Each level is checked as the sketch's quantile() checks its q (same exceptions).
        qs = [check_real(q, "quantiles", 0.0, 1.0) for q in quantiles]
        if not qs:
            raise ValueError("quantiles must be a non-empty list of values in [0, 1], got []")
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        value_fn = as_extractor(value_fn, "value_fn")
        weight_fn = as_extractor(weight_fn, "weight_fn")
        if clamp is not True:
            raise ValueError(
                f"clamp must be True, got {clamp!r}: failing on a value outside [lower, upper] "
                "would make the pipeline's success depend on the private data"
            )
        self.domain = FloatDomain(lower, upper, resolution) if resolution is not None else None
        if self.domain is not None:
            int_lower, int_upper = self.domain.int_bounds
        else:
            if int(lower) != lower or int(upper) != upper:
                raise ValueError("lower/upper must be integers unless resolution is given")
            int_lower, int_upper = int(lower), int(upper)
        shape = QuantileTree() if tree is None else tree
        if not isinstance(shape, QuantileTree):
            raise TypeError(f"tree must be a QuantileTree or None, got {type(shape).__name__}")
        layout = (int_lower, int_upper, shape.width, shape.depth, shape.seed)
        leaf_bits = shape.leaf_bits
        if leaf_bits is None:
            leaf_bits = fitting_leaf_bits(int_lower, int_upper, shape.exact_nodes)
        levels = {
            "branching": shape.branching,
            "exact_nodes": shape.exact_nodes,
            "leaf_bits": leaf_bits,
        }
        DyadicCountSketch(*layout, **levels)  # validate now, at construction
        self._value_fn, self._weight_fn = value_fn, weight_fn
        self.mechanism = QuantileMechanism(
            qs,
            self.domain,
            neighbouring,
            layout,
            turnstile=weight_fn is not None,
            tree=levels,
            consistency=shape.consistency,
            released_tree=output == "tree",
        )
        self._build_step(
            # clamp=True: the indexer already maps every value into the bounds; the sketch's
            # clamp is the same public map, so it can never raise on a record.
            WeightedSketchCombineFn(lambda: DyadicCountSketch(*layout, clamp=True, **levels)),
            self.mechanism,
            privacy_unit=unit,
            windowing=check_windowing(windowing),
            with_metadata=with_metadata,
        )

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        m = self.mechanism
        lower, upper, width, depth, seed = m.layout
        params.update(
            quantiles=", ".join(f"{q:g}" for q in m.quantiles),
            lower=float(self.domain.lower) if self.domain is not None else lower,
            upper=float(self.domain.upper) if self.domain is not None else upper,
            resolution=None if self.domain is None else float(self.domain.resolution),
            width=width,
            depth=depth,
            seed=seed,
            branching=m.tree["branching"],
            exact_nodes=m.tree["exact_nodes"],
            leaf_bits=m.tree["leaf_bits"],
            consistency=m.consistency,
            neighbouring_relation=m.neighbouring,
            turnstile=m.turnstile,
        )
        return params

    def windowing_requirement(self) -> WindowingRequirement:
        return BATCHED_WINDOWING  # values reach the trigger in batches

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._value_fn,)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        value_fn = self._value_fn or (lambda x: x)
        weight_fn = self._weight_fn or (lambda x: 1)
        lower, upper = self.mechanism.layout[:2]
        to_index = _Indexer(self.domain, lower, upper)
        if is_batch_type(pcoll.element_type) and self._value_fn is None and self._weight_fn is None:
            batches = pcoll | "Index" >> beam.Map(lambda b: (to_index(b), None))
        else:
            batches = (
                pcoll
                | "ValueWeight"
                >> beam.Map(
                    lambda r: (
                        call_user_fn(value_fn, r, "value_fn"),
                        unit_weight(call_user_fn(weight_fn, r, "weight_fn")),
                    )
                )
                # Not Beam's batching transform: its batch-size metric sums to the exact input size.
                | "Batch" >> FixedBatches()
                | "Index"
                >> beam.Map(
                    lambda pairs: (
                        to_index([v for v, _ in pairs]),
                        np.asarray([w for _, w in pairs], dtype=np.int64),
                    )
                )
            )
        return self._apply_step(batches)


_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_NAMES = {"U": "str", "S": "bytes", "b": "bool", "c": "complex", "M": "datetime", "m": "timedelta"}


class _Indexer:
    """Map record values into the sketch's integer domain ``[lower, upper]``, never failing on a
    number (see :class:`DPQuantiles`: clamping, NaN to the top, floor of fractions).

    Every rule acts on one value alone, so the map is a per-record transformation and the
    sensitivity is unchanged. Errors name the parameter, never a value.
    """

    def __init__(self, domain: FloatDomain | None, lower: int, upper: int) -> None:
        self.domain, self.lower, self.upper = domain, int(lower), int(upper)

    def __call__(self, values: Any) -> np.ndarray:
        arr = _as_numbers(values)
        if self.domain is not None:
            floats = np.array([float(v) for v in arr.tolist()]) if arr.dtype == object else arr
            floats = floats.astype(np.float64, copy=False)
            floats = np.where(np.isnan(floats), self.domain.upper, floats)
            return self.domain.to_int(floats, clamp=True)
        kind = arr.dtype.kind
        if kind == "f":
            return self._from_floats(arr.astype(np.float64, copy=False))
        if kind == "O":  # Python ints beyond int64, possibly mixed with floats: one at a time
            return np.array([self._one(v) for v in arr.tolist()], dtype=np.int64)
        if kind == "u":
            arr = np.minimum(arr, np.uint64(_INT64_MAX))
        return np.clip(arr.astype(np.int64), self.lower, self.upper)

    def _one(self, value: Any) -> int:
        if isinstance(value, float | np.floating):
            return int(self._from_floats(np.array([value], dtype=np.float64))[0])
        return min(max(int(value), self.lower), self.upper)

    def _from_floats(self, arr: np.ndarray) -> np.ndarray:
        arr = np.where(np.isnan(arr), float(self.upper), arr)
        arr = np.floor(np.clip(arr, float(self.lower), float(self.upper)))
        # float(lower) / float(upper) can round just outside int64 near +-2**63: saturate before
        # converting, then clamp exactly in integers.
        out = np.empty(arr.shape, dtype=np.int64)
        high, low = arr >= 2.0**63, arr < -(2.0**63)
        mid = ~(high | low)
        out[mid] = arr[mid].astype(np.int64)
        out[high], out[low] = _INT64_MAX, _INT64_MIN
        return np.clip(out, self.lower, self.upper)


def _as_numbers(values: Any) -> np.ndarray:
    """A one-dimensional int, uint, float or object (ints and floats) array of the values.

    ``TypeError`` naming the values' source (never a value) if some value is not a real number.
    """
    try:
        arr = np.asarray(values)
    except (TypeError, ValueError):
        arr = np.array(list(values), dtype=object)
    arr = np.atleast_1d(arr)
    if arr.ndim != 1:
        raise TypeError(
            "quantile values (the elements, or what value_fn returns) must be one real number "
            "per record"
        )
    kind = arr.dtype.kind
    if kind in "iuf":
        return arr
    if kind == "O" and all(
        isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool | np.bool_)
        for v in arr.tolist()
    ):
        return arr
    raise TypeError(
        "quantile values (the elements, or what value_fn returns) must be real numbers (int or "
        f"float), got {_NAMES.get(kind, 'other')} values for some records"
    )
