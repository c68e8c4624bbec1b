"""DP frequency sketches and DP quantiles in Beam: ``DPFrequencies``, ``DPQuantiles``.

Thin adapters over :mod:`beam_dpsketch.sketches.dp_linear` and
:mod:`beam_dpsketch.sketches.dyadic_private` (spec dp-linear-sketches) on the accounted release
step :class:`~beam_dpsketch.transforms.release.DPAggregate`: exact int64 sketches are built per
bundle and merged by Beam (linear sketches merge exactly, whatever the merge tree), and noise is
added once per window and pane at the trusted aggregator (spec §7.3).

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
from beam_dpsketch.sketches.dp_linear import PrivateCountMinSketch, PrivateCountSketch
from beam_dpsketch.sketches.dyadic import DyadicCountSketch
from beam_dpsketch.sketches.dyadic_domain import FloatDomain
from beam_dpsketch.sketches.dyadic_private import PrivateDyadicCountSketch
from beam_dpsketch.transforms.batching import BatchKeys, is_batch_type
from beam_dpsketch.transforms.combiners import SketchCombineFn, WeightedSketchCombineFn
from beam_dpsketch.transforms.release import AccountedTransform, ReleaseMechanism

__all__ = ["DPFrequencies", "DPQuantiles", "LinearSketchReleaseMechanism", "QuantileMechanism"]

_SKETCHES = {
    "count-min": (CountMinSketch, PrivateCountMinSketch),
    "count-sketch": (CountSketch, PrivateCountSketch),
}


class LinearSketchReleaseMechanism(ReleaseMechanism):
    """Release an exact Count-Min / Count Sketch as a private one (spec dp-linear-sketches §3).

    Every cell gets independent noise once, calibrated for the budget kind (pure: discrete
    Laplace on the L1 sensitivity; approximate or zCDP: discrete Gaussian on the L2 sensitivity)
    and the ``neighbouring`` relation of spec §1.4.
    """

    def __init__(self, sketch: str, width: int, depth: int, seed: int, neighbouring: str) -> None:
        self.sketch, self.width, self.depth, self.seed = sketch, width, depth, seed
        self.neighbouring = neighbouring
        self.name = f"dp-linear/{sketch}"

    def _private_class(self) -> type:
        return _SKETCHES[self.sketch][1]

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        private = self._private_class().release(
            accumulator, budget, stream, neighbouring=self.neighbouring
        )
        return [private]

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        # Linear sketches have an exact sensitivity under replacement (spec §1.4), smaller than
        # group privacy of size 2 gives.
        if pane_relation == "replace" and self.neighbouring == "add_remove":
            return LinearSketchReleaseMechanism(
                self.sketch, self.width, self.depth, self.seed, "replace"
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        cal = self._private_class().calibrate(
            self.width, self.depth, budget, neighbouring=self.neighbouring
        )
        return {
            "noise": cal.noise,
            "noise_scale": cal.scale,
            "threshold": None,
            "sensitivity": f"{cal.sensitivity:g} ({cal.sensitivity_norm})",
            "neighbouring_relation": cal.neighbouring,
        }


class DPFrequencies(AccountedTransform):
    """A differentially private Count-Min sketch or Count Sketch per window and pane.

    Emits one released :class:`~beam_dpsketch.sketches.dp_linear.PrivateCountMinSketch` (or
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
        Extracts the key of a record (default: elements are keys, or batches of keys).
    weight_fn
        Extracts an integer weight of a record (negative: a deletion; turnstile model). The
        sensitivity assumes ``|weight| <= 1`` per record unless ``neighbouring`` says otherwise.
    neighbouring
        Neighbouring relation of spec §1.4: ``"add_remove"`` (default), ``"replace"``, ...
    accountant, max_panes_per_window, max_windows_per_unit, noise_source, with_metadata, label
        As for :class:`~beam_dpsketch.transforms.release.DPAggregate`.

    Notes
    -----
    **Privacy guarantee.** The released sketches are ``budget``-DP for the whole transform under
    the chosen neighbouring relation (spec dp-linear-sketches §3.2, §3.5, §7.3; Zhao et al.).
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
    ) -> None:
        super().__init__()
        if sketch not in _SKETCHES:
            raise ValueError(f"sketch must be one of {tuple(_SKETCHES)}, got {sketch!r}")
        if budget is None and accountant is None:
            raise ValueError("budget: pass a PrivacyBudget, an accountant, or both")
        exact_cls = _SKETCHES[sketch][0]
        exact_cls(width, depth, seed)  # validate the shape now, at construction
        self._key_fn, self._weight_fn = key_fn, weight_fn
        self.mechanism = LinearSketchReleaseMechanism(sketch, width, depth, seed, neighbouring)
        self._build_aggregate(
            (WeightedSketchCombineFn if weight_fn is not None else SketchCombineFn)(
                lambda: exact_cls(width, depth, seed)
            ),
            self.mechanism,
            budget=budget,
            accountant=accountant,
            max_panes_per_window=max_panes_per_window,
            max_windows_per_unit=max_windows_per_unit,
            noise_source=noise_source,
            with_metadata=with_metadata,
            label=label,
        )

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        self._bind_release(pcoll)
        if self._weight_fn is not None:
            key_fn = self._key_fn or (lambda x: x)
            weight_fn = self._weight_fn
            items = pcoll | "KeyWeight" >> beam.Map(
                lambda r: (key_fn(r), _unit_weight(weight_fn(r)))
            )
        elif self._key_fn is not None or not is_batch_type(pcoll.element_type):
            items = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        else:
            items = pcoll
        return items | "DPAggregate" >> self._aggregate


class QuantileMechanism(ReleaseMechanism):
    """Release a dyadic Count Sketch and answer the declared quantiles (spec §5.3-§5.6)."""

    def __init__(
        self, quantiles: Sequence[float], domain: FloatDomain | None, neighbouring: str, layout
    ) -> None:
        self.quantiles = tuple(float(q) for q in quantiles)
        self.domain = domain
        self.neighbouring = neighbouring
        self.layout = layout
        self.name = "dp-dyadic-count-sketch/quantiles"

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        private = PrivateDyadicCountSketch.release(
            accumulator, budget, stream, neighbouring=self.neighbouring
        )
        answers = np.asarray(private.quantiles(list(self.quantiles)))
        if self.domain is not None:
            answers = self.domain.to_float(answers)
        return [
            {"quantile": q, "value": v.item()} for q, v in zip(self.quantiles, answers, strict=True)
        ]

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        if pane_relation == "replace" and self.neighbouring == "add_remove":
            return QuantileMechanism(self.quantiles, self.domain, "replace", self.layout)
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        levels = PrivateDyadicCountSketch.calibrate(
            DyadicCountSketch(*self.layout), budget, neighbouring=self.neighbouring
        )
        return {
            "noise": levels[0].noise,
            "noise_scale": max(c.scale for c in levels),
            "level_noise_scales": ", ".join(f"{c.scale:g}" for c in levels),
            "threshold": None,
            "sensitivity": ", ".join(f"{c.sensitivity:g}" for c in levels) + " (per level)",
            "neighbouring_relation": levels[0].neighbouring,
        }


class DPQuantiles(AccountedTransform):
    """Differentially private quantiles per window and pane (private dyadic Count Sketch).

    Values are integers in ``[lower, upper]``, or floats mapped to integer bins by a declared
    :class:`~beam_dpsketch.sketches.dyadic_domain.FloatDomain` (``resolution=``): bounds are
    public and values outside them raise ``ValueError`` (or are clamped with ``clamp=True``).
    Emits ``{"quantile": q, "value": v}`` records, one per requested quantile and released pane.
    Deletions enter through ``weight_fn`` (negative weights; turnstile model).

    Parameters
    ----------
    quantiles
        Quantiles in ``[0, 1]`` to answer.
    lower, upper
        Public bounds of the values.
    budget
        Total budget (pure, approximate or zCDP), split across the sketch's levels (spec §5.3)
        and over the releases a privacy unit can influence.
    width, depth, seed
        Shape of each level's Count Sketch.
    resolution
        If given, values are floats and bin ``i`` is ``[lower + i*resolution, ...)``.
    value_fn, weight_fn
        Extract the value (and an integer weight) of a record.

    Notes
    -----
    **Privacy guarantee.** ``budget``-DP under the chosen neighbouring relation (spec
    dp-linear-sketches §5.3; Zhao et al., private dyadic Count Sketch); quantile answers are
    post-processing.
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
        clamp: bool = False,
        value_fn: Callable[[Any], Any] | None = None,
        weight_fn: Callable[[Any], int] | None = None,
        neighbouring: str = "add_remove",
        accountant: PrivacyAccountant | None = None,
        max_panes_per_window: int | None = None,
        max_windows_per_unit: int | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        super().__init__()
        qs = [float(q) for q in quantiles]
        if not qs or any(not 0.0 <= q <= 1.0 for q in qs):
            raise ValueError(f"quantiles must be a non-empty list of values in [0, 1], got {qs}")
        if budget is None and accountant is None:
            raise ValueError("budget: pass a PrivacyBudget, an accountant, or both")
        self.domain = FloatDomain(lower, upper, resolution) if resolution is not None else None
        if self.domain is not None:
            int_lower, int_upper = self.domain.int_bounds
        else:
            if int(lower) != lower or int(upper) != upper:
                raise ValueError("lower/upper must be integers unless resolution is given")
            int_lower, int_upper = int(lower), int(upper)
        layout = (int_lower, int_upper, width, depth, seed)
        DyadicCountSketch(*layout)  # validate now, at construction
        self._clamp = clamp
        self._value_fn, self._weight_fn = value_fn, weight_fn
        self.mechanism = QuantileMechanism(qs, self.domain, neighbouring, layout)
        self._build_aggregate(
            WeightedSketchCombineFn(lambda: DyadicCountSketch(*layout, clamp=clamp)),
            self.mechanism,
            budget=budget,
            accountant=accountant,
            max_panes_per_window=max_panes_per_window,
            max_windows_per_unit=max_windows_per_unit,
            noise_source=noise_source,
            with_metadata=with_metadata,
            label=label,
        )

    def expand(self, pcoll: beam.PCollection) -> beam.PCollection:
        self._bind_release(pcoll)
        value_fn = self._value_fn or (lambda x: x)
        weight_fn = self._weight_fn or (lambda x: 1)
        domain, clamp = self.domain, self._clamp
        to_index = _Indexer(domain, clamp)
        if is_batch_type(pcoll.element_type) and self._value_fn is None and self._weight_fn is None:
            batches = pcoll | "Index" >> beam.Map(lambda b: (to_index(np.asarray(b)), None))
        else:
            batches = (
                pcoll
                | "ValueWeight" >> beam.Map(lambda r: (value_fn(r), _unit_weight(weight_fn(r))))
                | "Batch" >> beam.BatchElements(min_batch_size=256, max_batch_size=4096)
                | "Index"
                >> beam.Map(
                    lambda pairs: (
                        to_index(np.asarray([v for v, _ in pairs], dtype=np.float64)),
                        np.asarray([w for _, w in pairs], dtype=np.int64),
                    )
                )
            )
        return batches | "DPAggregate" >> self._aggregate


def _unit_weight(weight: Any) -> int:
    """A record's weight: +1 (insertion) or -1 (deletion); the sensitivities assume |w| <= 1."""
    if isinstance(weight, bool) or not isinstance(weight, int | np.integer) or abs(weight) > 1:
        raise ValueError(
            f"weight must be -1, 0 or 1 (one record inserts or deletes one item), got {weight!r}"
        )
    return int(weight)


class _Indexer:
    """Map values to the sketch's integer domain (through the FloatDomain when declared)."""

    def __init__(self, domain: FloatDomain | None, clamp: bool) -> None:
        self.domain, self.clamp = domain, clamp

    def __call__(self, values: np.ndarray) -> np.ndarray:
        if values.dtype.kind == "f" and np.isnan(values).any():
            raise ValueError("NaN is not a valid quantile value")
        if self.domain is not None:
            return self.domain.to_int(values, clamp=self.clamp)
        if values.dtype.kind == "f":
            if np.any(values != np.floor(values)):
                raise ValueError(
                    "non-integer value for an integer domain: declare resolution= for floats"
                )
            values = values.astype(np.int64)
        return values.astype(np.int64, copy=False)
