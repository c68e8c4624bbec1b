"""DP frequency sketches in Beam: ``DPFrequencies``.

A thin adapter over :mod:`beam_dpsketch.sketches.linear.private` (Zhao et al., "Differentially Private Linear
Sketches", NeurIPS 2022) on the accounted release
step :class:`~beam_dpsketch.transforms.release.DPAggregate`: exact int64 sketches are built per
bundle and merged by Beam (linear sketches merge exactly, whatever the merge tree), and noise is
added once per window and pane at the trusted aggregator (``docs/algorithms.md#lin-merge``).

Deletions (the turnstile model) enter as records with a negative weight through ``weight_fn``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam

from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.sketches import CountMinSketch, CountSketch
from beam_dpsketch.sketches.linear.calibration import pane_calibration, pane_relation_text
from beam_dpsketch.sketches.linear.private import (
    PrivateCountMinSketch,
    PrivateCountSketch,
    parse_neighbouring,
)
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import BatchKeys, call_user_fn, is_batch_type, unit_weight
from beam_dpsketch.transforms.combiners import SketchCombineFn, WeightedSketchCombineFn
from beam_dpsketch.transforms.release import (
    PANE_RELATIONS,
    AccountedTransform,
    ReleaseMechanism,
)

__all__ = ["DPFrequencies", "LinearSketchReleaseMechanism"]

_SKETCHES = {
    "count-min": (CountMinSketch, PrivateCountMinSketch),
    "count-sketch": (CountSketch, PrivateCountSketch),
}


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
        self.calibrated_for = pane_calibration(self.neighbouring, pane_relation, self.turnstile)
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
            "neighbouring_relation": pane_relation_text(
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
                    unit_weight(call_user_fn(weight_fn, r, "weight_fn")),
                )
            )
        elif self._key_fn is not None or not is_batch_type(pcoll.element_type):
            items = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        else:
            items = pcoll
        return self._apply_step(items)
