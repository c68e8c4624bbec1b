"""DP top keys without a candidate list in Beam: ``DPTopKeys``.

A thin adapter over :mod:`beam_dpsketch.sketches.prefix_tree`: exact prefix trees of linear
sketches are built per bundle and merged by Beam (linear sketches merge exactly), the tree is
released once per window and pane with noise for all its levels together (Zhao et al.
[ZQR+22, Algorithm 3] per level, the budget split over the levels as in [ZQR+22, Section 4.2]),
and the top keys are extracted from the noisy tree, which is post-processing. The design is
derived here (docs/algorithms.md#top-keys).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import apache_beam as beam

from beam_dpsketch.checks import check_int, check_probability
from beam_dpsketch.noise import NoiseSource, NoiseStream
from beam_dpsketch.privacy import PrivacyAccountant, PrivacyBudget
from beam_dpsketch.privacy.declarations import (
    PrivacyUnit,
    Windowing,
    check_privacy_unit,
    check_windowing,
)
from beam_dpsketch.sketches.linear.calibration import (
    linear_sensitivity,
    pane_calibration,
    pane_relation_text,
    parse_neighbouring,
)
from beam_dpsketch.sketches.prefix_tree import ALPHABET, PrefixTreeSketch, PrivatePrefixTree
from beam_dpsketch.transforms.base import as_extractor
from beam_dpsketch.transforms.batching import BatchKeys, is_batch_type
from beam_dpsketch.transforms.combiners import SketchCoder, SketchCombineFn
from beam_dpsketch.transforms.frequencies import USER_LEVEL_BY_NEIGHBOURING
from beam_dpsketch.transforms.records import BoundedKeyEstimate
from beam_dpsketch.transforms.release import PANE_RELATIONS, AccountedTransform, ReleaseMechanism
from beam_dpsketch.transforms.windowing_rules import BATCHED_WINDOWING, WindowingRequirement

__all__ = ["DPTopKeys", "PrefixTreeReleaseMechanism"]

#: Confidence of the released rows' ``lower`` and ``upper``.
ROW_CONFIDENCE = 0.95

beam.coders.registry.register_coder(PrefixTreeSketch, SketchCoder)


class PrefixTreeReleaseMechanism(ReleaseMechanism):
    """Release an exact :class:`~beam_dpsketch.sketches.prefix_tree.PrefixTreeSketch` and
    extract its top ``k`` keys.

    The noisy tree (:meth:`PrivatePrefixTree.release`) is the only thing computed from the
    data with noise; the released rows are read from it (:meth:`PrivatePrefixTree.top_keys`)
    with public parameters, so the rows cost exactly the tree's budget. Keys are decoded from
    noisy-tree paths: a raw key of the data never reaches the output unless the descent finds
    its path in the noisy counters.

    Parameters
    ----------
    k, beam, sketch, width, depth, max_key_bytes, seed
        As for :class:`DPTopKeys`.
    neighbouring
        The declared relation.
    pane_relation
        Relation of a pane's input (``ReleasePlan.pane_relation``); under ``"replace"`` every
        level is calibrated for the exact replacement sensitivity of a linear sketch.
    """

    record_type = BoundedKeyEstimate

    def __init__(
        self,
        k: int,
        beam: int,
        sketch: str,
        width: int,
        depth: int,
        max_key_bytes: int,
        seed: int,
        neighbouring: str,
        *,
        threshold_beta: float = 0.05,
        pane_relation: str = "add_remove",
    ) -> None:
        self.k, self.beam = k, beam
        self.sketch, self.width, self.depth = sketch, width, depth
        self.max_key_bytes, self.seed = max_key_bytes, seed
        self.threshold_beta = threshold_beta
        self.neighbouring = parse_neighbouring(neighbouring)[0]
        if pane_relation not in PANE_RELATIONS:
            raise ValueError(
                f"pane_relation must be one of {PANE_RELATIONS}, got {pane_relation!r}"
            )
        self.pane_relation = pane_relation
        self.calibrated_for = pane_calibration(self.neighbouring, pane_relation, False)
        self.name = f"dp-prefix-tree/{sketch}"

    def empty_tree(self) -> PrefixTreeSketch:
        return PrefixTreeSketch(self.width, self.depth, self.max_key_bytes, self.seed, self.sketch)

    def level_budget(self, budget: PrivacyBudget) -> PrivacyBudget:
        """The budget of each level (public parameters only)."""
        return PrivatePrefixTree.level_budget(
            self.empty_tree(), budget, self.calibrated_for, "auto"
        )

    def privacy_cost(self, budget: PrivacyBudget) -> PrivacyBudget:
        # An approximate budget spent by discrete Laplace levels costs epsilon alone.
        level = self.level_budget(budget)
        if budget.kind == "approx" and level.kind == "pure":
            return PrivacyBudget.pure(float(budget.epsilon))  # type: ignore[arg-type]
        return budget

    def release(self, accumulator: Any, budget: PrivacyBudget, stream: NoiseStream) -> list[Any]:
        released = PrivatePrefixTree.release(
            accumulator, budget, stream, neighbouring=self.calibrated_for
        )
        top = released.top_keys(
            self.k,
            beam=self.beam,
            confidence=ROW_CONFIDENCE,
            threshold_beta=self.threshold_beta,
        )
        return [BoundedKeyEstimate(*row) for row in top]

    def for_pane_relation(self, pane_relation: str) -> ReleaseMechanism:
        if pane_relation == self.pane_relation:
            return self
        if self.neighbouring == "add_remove" and pane_relation in PANE_RELATIONS:
            return PrefixTreeReleaseMechanism(
                self.k,
                self.beam,
                self.sketch,
                self.width,
                self.depth,
                self.max_key_bytes,
                self.seed,
                self.neighbouring,
                threshold_beta=self.threshold_beta,
                pane_relation=pane_relation,
            )
        return super().for_pane_relation(pane_relation)

    def describe(self, budget: PrivacyBudget) -> dict[str, Any]:
        tree = self.empty_tree()
        cal = PrivatePrefixTree.calibrate(tree, budget, neighbouring=self.calibrated_for)
        levels = tree.levels
        norm = cal.sensitivity_norm
        per_level = linear_sensitivity(self.sketch, self.calibrated_for, self.depth, norm)
        whole = per_level * (levels**0.5 if norm == "l2" else levels)
        per_query = 1.0 - self.threshold_beta / (ALPHABET * self.beam)
        return {
            "noise": cal.noise,
            "noise_scale": cal.scale,
            "noise_lattice": cal.lattice,
            # Every level has the same calibration, so one public threshold serves them all.
            "threshold": cal.tail_bound(self.depth, 1.0 - per_query),
            "threshold_rule": (
                f"a prefix goes on when its estimate exceeds its level's noise bound at "
                f"confidence {per_query:.9g} (public)"
            ),
            "sensitivity": (
                f"{whole:g} ({norm}, {cal.neighbouring}) for the {levels} levels together; "
                f"{per_level:g} per level"
            ),
            "neighbouring_relation": pane_relation_text(
                self.neighbouring, self.pane_relation, self.calibrated_for
            ),
            "levels": levels,
            "level_budget": str(self.level_budget(budget)),
            "released_keys": (
                f"at most {self.k} keys decoded from noisy-tree paths (post-processing of the "
                "released tree)"
            ),
            "error_bound": (
                f"per key at {ROW_CONFIDENCE:g}: the bound of its level's released sketch "
                "(hashing and noise), for a key fixed in advance"
            ),
        }


class DPTopKeys(AccountedTransform):
    """The ``k`` most frequent keys per window and pane, with no candidate list.

    Builds a :class:`~beam_dpsketch.sketches.prefix_tree.PrefixTreeSketch` (one linear sketch
    per prefix length of the keys' canonical bytes), releases it once per window and pane with
    noise for the whole tree, and emits the top ``k`` keys found by descending the noisy tree,
    as :class:`~beam_dpsketch.transforms.records.BoundedKeyEstimate` rows (largest first).
    Memory is ``(max_key_bytes + 1) * depth * width`` counters whatever the number of distinct
    keys, so it serves streams whose keys are not known in advance, e.g. "the top keys of the
    last hour" with ``FixedWindows(3600)``, or ``SlidingWindows(size, period)``, whose
    ``size / period`` windows per element split the budget (session windows need the declared
    ``PrivacyUnit(max_windows=...)``).

    Parameters
    ----------
    k
        Keys released per pane (at most; fewer when fewer pass the thresholds).
    budget
        Total budget of the transform for one privacy unit (pure, approximate or zCDP).
    width, depth
        Shape of every level's sketch (default 2048 x 5).
    max_key_bytes
        ``L``, public: the longest key encoding released whole (a ``str`` key's UTF-8 bytes
        plus 1, an ``int`` key 9, a ``bytes`` key's length plus 1). Longer keys are counted
        under their prefixes and never released; the noise grows as ``sqrt(L + 1)``.
    beam
        Prefixes kept per level of the descent (default ``32 k``).
    sketch
        ``"count-sketch"`` (default) or ``"count-min"``.
    seed
        Public base hash seed.
    key_fn
        Extracts the key of a record (a callable or a field name); default: elements are keys
        or batches of keys.
    neighbouring
        ``"add_remove"`` (default, element level), ``"replace"``, ``"replace_update"`` or
        ``"user:k"`` (user level; bound contributions upstream).
    threshold_beta
        Expected number of empty nodes per level that pass the descent's threshold (public).
    privacy_unit, windowing, budget_weight, accountant, noise_source, with_metadata, label
        As for :class:`~beam_dpsketch.transforms.DPFrequencies`.

    Notes
    -----
    **Privacy guarantee.** One element reaches one counter per row of each of the ``L + 1``
    levels, so the tree's add/remove sensitivity is ``sqrt((L + 1) depth)`` (L2) and
    ``(L + 1) depth`` (L1); each level is released with ``1 / (L + 1)`` of the budget
    ([ZQR+22, Algorithm 3], Theorems 3.1 and 3.2 per level, sequential composition), which is
    the Gaussian (or discrete Laplace) mechanism on the whole tree. The extracted rows are
    post-processing of the noisy tree, so the transform is ``budget``-DP for the declared
    relation (docs/algorithms.md#top-keys; derived here, not a paper's theorem). Which windows are
    released is covered as for ``DPFrequencies`` (``Windowing(release_range=...)``).

    **Accuracy.** A key is found when every prefix of it stands above the level's noise bound
    and among the ``beam`` largest; its estimate has the error of one linear-sketch point query
    of its END level (``lower`` / ``upper``, per key at 95 %). Selecting the largest estimates
    biases them upward. Measured recall against the exact top ``k``: benchmarks/RESULTS.md.
    """

    def __init__(
        self,
        k: int,
        budget: PrivacyBudget | None = None,
        *,
        width: int = 2048,
        depth: int = 5,
        max_key_bytes: int = 16,
        beam: int | None = None,
        sketch: str = "count-sketch",
        seed: int = 0,
        key_fn: Callable[[Any], Any] | str | None = None,
        neighbouring: str = "add_remove",
        threshold_beta: float = 0.05,
        budget_weight: float | None = None,
        accountant: PrivacyAccountant | None = None,
        privacy_unit: PrivacyUnit | None = None,
        windowing: Windowing | None = None,
        noise_source: NoiseSource | None = None,
        with_metadata: bool = False,
        label: str | None = None,
    ) -> None:
        unit = check_privacy_unit(privacy_unit, user_level=USER_LEVEL_BY_NEIGHBOURING)
        k = check_int(k, "k")
        beam = 32 * k if beam is None else check_int(beam, "beam")
        threshold_beta = check_probability(threshold_beta, "threshold_beta")
        PrefixTreeSketch(width, depth, max_key_bytes, seed, sketch)  # validate now
        super().__init__(
            budget,
            accountant=accountant,
            noise_source=noise_source,
            label=label,
            budget_weight=budget_weight,
        )
        self._key_fn = as_extractor(key_fn, "key_fn")
        self.mechanism = PrefixTreeReleaseMechanism(
            k,
            beam,
            sketch,
            width,
            depth,
            max_key_bytes,
            seed,
            neighbouring,
            threshold_beta=threshold_beta,
        )
        mech = self.mechanism
        combine_fn = SketchCombineFn(mech.empty_tree)
        self._build_step(
            combine_fn,
            mech,
            privacy_unit=unit,
            windowing=check_windowing(windowing),
            with_metadata=with_metadata,
        )

    def display_parameters(self) -> dict[str, Any]:
        params = super().display_parameters()
        m = self.mechanism
        params.update(
            k=m.k,
            beam=m.beam,
            sketch=m.sketch,
            width=m.width,
            depth=m.depth,
            max_key_bytes=m.max_key_bytes,
            seed=m.seed,
            neighbouring_relation=m.neighbouring,
        )
        return params

    def windowing_requirement(self) -> WindowingRequirement:
        return BATCHED_WINDOWING

    def label_extractors(self) -> tuple[Any, ...]:
        return (self._key_fn,)

    def expand_release(self, pcoll: beam.PCollection) -> beam.PCollection:
        if self._key_fn is not None or not is_batch_type(pcoll.element_type):
            items = pcoll | "BatchKeys" >> BatchKeys(self._key_fn)
        else:
            items = pcoll
        return self._apply_step(items)
