"""DP frequency sketches and DP quantiles in Beam: ``DPFrequencies``, ``DPQuantiles``.

Thin adapters over :mod:`beam_dpsketch.sketches.linear.private` and
:mod:`beam_dpsketch.sketches.quantiles.private` (Zhao et al., "Differentially Private Linear
Sketches", NeurIPS 2022) on the accounted release
step :class:`~beam_dpsketch.transforms.release.DPAggregate`: exact int64 sketches are built per
bundle and merged by Beam (linear sketches merge exactly, whatever the merge tree), and noise is
added once per window and pane at the trusted aggregator (``docs/algorithms.md#lin-merge``).

Deletions (the turnstile model) enter as records with a negative weight through ``weight_fn``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import apache_beam as beam
import numpy as np

from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMinSketch,
    PrivateCountSketch,
    parse_neighbouring,
)
from beam_dpsketch.sketches.quantiles.domain import FloatDomain
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.quantiles.private import PrivateDyadicCountSketch
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import BatchKeys, call_user_fn, is_batch_type
from beam_dpsketch.transforms.combiners import SketchCombineFn, WeightedSketchCombineFn
from beam_dpsketch.transforms.release import (
    PANE_RELATIONS,
    AccountedTransform,
    ReleaseMechanism,
)

__all__ = ["DPFrequencies", "DPQuantiles", "LinearSketchReleaseMechanism", "QuantileMechanism"]

_SKETCHES = {
    "count-min": (CountMinSketch, PrivateCountMinSketch),
    "count-sketch": (CountSketch, PrivateCountSketch),
}


def _pane_calibration(neighbouring: str, pane_relation: str, turnstile: bool) -> str:
    """The relation whose exact sensitivity a release is calibrated for.

    Sensitivities: the table of :mod:`beam_dpsketch.sketches.linear.calibration`.

    Under the pane relation ``"replace"`` (multi-pane triggers whose boundaries depend on the
    data) a pane can lose one record and gain another. With unit insertions that is the
    ``replace`` sensitivity; with signed records (``weight_fn``) the record lost can be a deletion
    ``(x, -1)`` and the one gained an insertion ``(x, +1)``, which moves a cell by 2 per row: the
    ``replace_update`` sensitivity (``2 sqrt(d)``, not Count-Min's ``sqrt(2d)``). Either covers a
    pane that only loses a record.
    """
    if pane_relation == "replace":
        return "replace_update" if turnstile else "replace"
    return neighbouring


def _relation_text(neighbouring: str, pane_relation: str, calibrated: str) -> str:
    if pane_relation == "add_remove":
        if neighbouring == "replace":
            return "replace (declared replace-one model: the total N is public and published)"
        return f"{neighbouring} (the total is not published)"
    return (
        f"add_remove for the transform; each pane calibrated for {calibrated} (a pane may lose "
        "one record and gain another shifted from a neighbouring pane); the pane total is not "
        "published"
    )


class LinearSketchReleaseMechanism(ReleaseMechanism):
    """Release an exact Count-Min / Count Sketch as a private one (Zhao et al., Algorithm 3).

    Every cell gets independent noise once, calibrated for the budget kind (pure: discrete
    Laplace on the L1 sensitivity; approximate or zCDP: discrete Gaussian on the L2 sensitivity)
    and the ``neighbouring`` relation (``docs/algorithms.md#lin-sensitivity``).

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
    """

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
    ) -> None:
        self.sketch, self.width, self.depth, self.seed = sketch, width, depth, seed
        self.neighbouring = parse_neighbouring(neighbouring)[0]
        self.turnstile = bool(turnstile)
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.pane_relation = pane_relation
        self.calibrated_for = _pane_calibration(self.neighbouring, pane_relation, self.turnstile)
        self.name = f"dp-linear/{sketch}"

    def _private_class(self) -> type:
        return _SKETCHES[self.sketch][1]

    @property
    def publish_total(self) -> bool:
        """Whether releases publish the exact total: only under the declared replace model."""
        return self.pane_relation == "add_remove" and self.neighbouring == "replace"

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        private = self._private_class().release(
            accumulator,
            budget,
            stream,
            neighbouring=self.calibrated_for,
            publish_total=self.publish_total,
        )
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
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        cal = self._private_class().calibrate(
            self.width, self.depth, budget, neighbouring=self.calibrated_for
        )
        return {
            "noise": cal.noise,
            "noise_scale": cal.scale,
            "threshold": None,
            "sensitivity": f"{cal.sensitivity:g} ({cal.sensitivity_norm}, {cal.neighbouring})",
            "neighbouring_relation": _relation_text(
                self.neighbouring, self.pane_relation, self.calibrated_for
            ),
            "total_published": self.publish_total,
        }


class DPFrequencies(AccountedTransform):
    """A differentially private Count-Min sketch or Count Sketch per window and pane.

    Emits one released :class:`~beam_dpsketch.sketches.linear.private.PrivateCountMinSketch` (or
    ``PrivateCountSketch``) per released pane: queryable downstream for any key (``estimate``),
    e.g. as a side input. The sketch is exact until release; noise is added once to every cell.

    Parameters
    ----------
    width, depth, seed
        Sketch shape and public hash seed.
    budget
        Total budget of the transform for one privacy unit (pure, approximate or zCDP), split
        over the releases a unit can influence.
    sketch
        ``"count-min"`` (default) or ``"count-sketch"``.
    key_fn
        Extracts the key of a record: a callable, or the field name of ``dict`` / ``beam.Row``
        elements (default: elements are keys, or batches of keys).
    weight_fn
        Extracts an integer weight of a record (a callable or a field name) (negative: a deletion; turnstile model). The
        sensitivity assumes ``|weight| <= 1`` per record unless ``neighbouring`` says otherwise.
    neighbouring
        Neighbouring relation (``docs/algorithms.md#lin-sensitivity``): ``"add_remove"``
        (default), ``"replace"``, ...
        Only ``"replace"``, the declared replace-one model of Zhao et al. in which the total is a
        public invariant, makes the released sketches carry their exact total weight.
    accountant, max_panes_per_window, max_windows_per_unit, noise_source, with_metadata, label
        As for :class:`~beam_dpsketch.transforms.release.DPAggregate`.
    release_range
        Public event-time range ``(start, end)`` in seconds (Fixed or Sliding windows): every
        window starting in it is released, empty ones included, and no other window is. Without
        it a window without data is not released, so whether a window was released reveals
        that it had data (see :class:`~beam_dpsketch.transforms.release.DPAggregate`).

    Notes
    -----
    **Privacy guarantee.** The released sketches are ``budget``-DP for the whole transform under
    the chosen neighbouring relation (Zhao et al., Algorithm 3, Theorems 3.1 and 3.2, with the
    exact sensitivities of ``docs/algorithms.md#lin-sensitivity``).
    When a trigger can fire several panes whose boundaries depend on the data, each pane is
    calibrated for the exact replacement sensitivity (``replace_update`` with ``weight_fn``), and
    its total is not published: ``total()`` of a released Count-Min sketch is then the estimate
    from the noisy table (a released Count Sketch has none).

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared ``release_range``; with a
    count-based early or late trigger the number and timing of panes depend on the data and are
    not covered. :meth:`explain` lists every such condition of the actual configuration under
    "NOT PROTECTED".
    """

    def __init__(
        self,
        width: int,
        depth: int,
        budget: PrivacyBudget | None = None,
        *,
        seed: int = 0,
        sketch: str = "count-min",
        key_fn: Callable[[Any], Any] | None = None,
        weight_fn: Callable[[Any], int] | None = None,
        neighbouring: str = "add_remove",
        accountant: PrivacyAccountant | None = None,
        max_panes_per_window: int | None = None,
        max_windows_per_unit: int | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        release_range: tuple[float, float] | None = None,
    ) -> None:
        if sketch not in _SKETCHES:
            raise ValueError(f"sketch must be one of {tuple(_SKETCHES)}, got {sketch!r}")
        super().__init__(budget, accountant=accountant, noise_source=noise_source, label=label)
        key_fn = as_extractor(key_fn, "key_fn")
        weight_fn = as_extractor(weight_fn, "weight_fn")
        exact_cls = _SKETCHES[sketch][0]
        exact_cls(width, depth, seed)  # validate the shape now, at construction
        self._key_fn, self._weight_fn = key_fn, weight_fn
        self.mechanism = LinearSketchReleaseMechanism(
            sketch, width, depth, seed, neighbouring, turnstile=weight_fn is not None
        )
        self._build_step(
            (WeightedSketchCombineFn if weight_fn is not None else SketchCombineFn)(
                lambda: exact_cls(width, depth, seed)
            ),
            self.mechanism,
            max_panes_per_window=max_panes_per_window,
            max_windows_per_unit=max_windows_per_unit,
            with_metadata=with_metadata,
            release_range=release_range,
        )

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        m = self.mechanism
        params.update(
            sketch=m.sketch,
            width=m.width,
            depth=m.depth,
            seed=m.seed,
            neighbouring_relation=m.neighbouring,
            turnstile=m.turnstile,
        )
        return params

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self._weight_fn is not None:
            key_fn = self._key_fn or (lambda x: x)
            weight_fn = self._weight_fn
            items = pcoll | "KeyWeight" >> beam.Map(
                lambda r: (
                    call_user_fn(key_fn, r, "key_fn"),
                    _unit_weight(call_user_fn(weight_fn, r, "weight_fn")),
                )
            )
        elif self._key_fn is not None or not is_batch_type(pcoll.element_type):
            items = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        else:
            items = pcoll
        return self._apply_step(items)


class QuantileMechanism(ReleaseMechanism):
    """Release a dyadic Count Sketch and answer the declared quantiles (Zhao et al., Section 4.2).

    Calibration and the total follow :class:`LinearSketchReleaseMechanism`: under the pane
    relation ``"replace"`` every level is calibrated for replacement (``replace_update`` with
    signed weights) and the quantile targets ``ceil(q N)`` use the total estimated from the noisy
    top level, never the exact pane size; only a declared ``neighbouring="replace"`` publishes
    ``N``.
    """

    def __init__(
        self,
        quantiles: Sequence[float],
        domain: FloatDomain | None,
        neighbouring: str,
        layout: tuple[int, int, int, int, int],
        *,
        turnstile: bool = False,
        pane_relation: str = "add_remove",
    ) -> None:
        self.quantiles = tuple(float(q) for q in quantiles)
        self.domain = domain
        self.neighbouring = parse_neighbouring(neighbouring)[0]
        self.layout = layout
        self.turnstile = bool(turnstile)
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.pane_relation = pane_relation
        self.calibrated_for = _pane_calibration(self.neighbouring, pane_relation, self.turnstile)
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
        )
        answers = np.asarray(private.quantiles(list(self.quantiles)))
        if self.domain is not None:
            answers = self.domain.to_float(answers)
        return [
            {"quantile": q, "value": v.item()} for q, v in zip(self.quantiles, answers, strict=True)
        ]

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
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        levels = PrivateDyadicCountSketch.calibrate(
            DyadicCountSketch(*self.layout), budget, neighbouring=self.calibrated_for
        )
        return {
            "noise": levels[0].noise,
            "noise_scale": max(c.scale for c in levels),
            "level_noise_scales": ", ".join(f"{c.scale:g}" for c in levels),
            "threshold": None,
            "sensitivity": ", ".join(f"{c.sensitivity:g}" for c in levels)
            + f" (per level, {levels[0].neighbouring})",
            "neighbouring_relation": _relation_text(
                self.neighbouring, self.pane_relation, self.calibrated_for
            ),
            "total_published": self.publish_total,
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
    never the value. Emits ``{"quantile": q, "value": v}`` records, one per requested quantile
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
    width, depth, seed
        Shape of each level's Count Sketch.
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
    accountant, max_panes_per_window, max_windows_per_unit, noise_source, with_metadata, label
    release_range
        As for :class:`DPFrequencies`.

    Notes
    -----
    **Privacy guarantee.** ``budget``-DP under the chosen neighbouring relation (Zhao et al.,
    Section 4.2, private dyadic Count Sketch); quantile answers are
    post-processing of the noisy sketch (and, under a declared ``"replace"`` only, of the public
    total).

    **Conditions.** Noise protects the released values. Which windows are released is covered
    only in the global window (always released) or with a declared ``release_range``; with a
    count-based early or late trigger the number and timing of panes depend on the data and are
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
        width: int = 1024,
        depth: int = 5,
        seed: int = 0,
        resolution: float | None = None,
        clamp: bool = True,
        value_fn: Callable[[Any], Any] | None = None,
        weight_fn: Callable[[Any], int] | None = None,
        neighbouring: str = "add_remove",
        accountant: PrivacyAccountant | None = None,
        max_panes_per_window: int | None = None,
        max_windows_per_unit: int | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
        release_range: tuple[float, float] | None = None,
    ) -> None:
        qs = [float(q) for q in quantiles]
        if not qs or any(not 0.0 <= q <= 1.0 for q in qs):
            raise ValueError(f"quantiles must be a non-empty list of values in [0, 1], got {qs}")
        super().__init__(budget, accountant=accountant, noise_source=noise_source, label=label)
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
        layout = (int_lower, int_upper, width, depth, seed)
        DyadicCountSketch(*layout)  # validate now, at construction
        self._value_fn, self._weight_fn = value_fn, weight_fn
        self.mechanism = QuantileMechanism(
            qs, self.domain, neighbouring, layout, turnstile=weight_fn is not None
        )
        self._build_step(
            # clamp=True: the indexer already maps every value into the bounds; the sketch's
            # clamp is the same public map, so it can never raise on a record.
            WeightedSketchCombineFn(lambda: DyadicCountSketch(*layout, clamp=True)),
            self.mechanism,
            max_panes_per_window=max_panes_per_window,
            max_windows_per_unit=max_windows_per_unit,
            with_metadata=with_metadata,
            release_range=release_range,
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
            neighbouring_relation=m.neighbouring,
            turnstile=m.turnstile,
        )
        return params

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
                        _unit_weight(call_user_fn(weight_fn, r, "weight_fn")),
                    )
                )
                | "Batch" >> beam.BatchElements(min_batch_size=256, max_batch_size=4096)
                | "Index"
                >> beam.Map(
                    lambda pairs: (
                        to_index([v for v, _ in pairs]),
                        np.asarray([w for _, w in pairs], dtype=np.int64),
                    )
                )
            )
        return self._apply_step(batches)


def _unit_weight(weight: Any) -> int:
    """A record's weight: +1 (insertion) or -1 (deletion); the sensitivities assume |w| <= 1."""
    if isinstance(weight, bool) or not isinstance(weight, int | np.integer) or abs(weight) > 1:
        # The weight comes from a record: the message names the parameter, never the value.
        raise ValueError(
            "weight must be -1, 0 or 1 (one record inserts or deletes one item): weight_fn "
            "returned another value"
        )
    return int(weight)


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
