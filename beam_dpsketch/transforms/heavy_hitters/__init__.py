"""DP heavy hitters and sparse histograms with Misra-Gries: ``DPHeavyHitters``, ``DPHistogram``.

A thin Beam adapter over :mod:`beam_dpsketch.sketches.misra_gries` (Lebeda and Tětek, "Better
Differentially Private Approximate Histograms and Heavy Hitters using the Misra-Gries Sketch",
PODS 2023) and the accounted release step of :mod:`beam_dpsketch.transforms.release`. Each
release is one mechanism object that owns its combine step, its calibration (computed up front
from public parameters), its release and its windowing rule
(:class:`~beam_dpsketch.transforms.heavy_hitters.mechanism.HeavyHitterMechanism`); a transform
chooses one with ``mechanism=`` (an object, or its name in :data:`MECHANISMS`). Which release a
pipeline shape allows follows from their Section 7 (merged sketches) and
``docs/algorithms.md#mg-merged``:

=========================  ==============================================================  ==========
mechanism (name)           release                                                          level
=========================  ==============================================================  ==========
:class:`DesignB`           Algorithm 1 per accumulator, Algorithm 3 at merge, APPROX_PP     element
``"design-b"``             behind an exactness gate; any windowing and trigger;
                           :class:`DPHistogram`'s default
:class:`Sequential`        one Algorithm-1 sketch per window on one worker, PMG             element
``"sequential"``           (Algorithm 2); the smallest threshold; fires once per window
:class:`DesignD`           ``shards`` sequential sketches, element ``x`` in shard           element
``"design-d"``             ``H(x) mod shards``, PMG per shard, the union; fires once
:class:`UntrustedShards`   ``(holder, key)`` pairs, PMG per holder shard, released values   element
``"untrusted-shards"``     summed per key: the untrusted-aggregator baseline (Section 7)
:class:`MergedGSHM`,       ``MERGE_k``-merged sketches with GSHM at ``l = k`` or Laplace    element
:class:`MergedLaplace`     noise ``k/eps`` (Section 7); strictly bounded memory
:class:`SelectThenCount`   a DP selection of ``k`` keys, then their exact counts with       both
``"select-then-count"``    noise (:mod:`.select_count`); :class:`DPHeavyHitters`' default
                           at element level; global or fixed windows, fires once
:class:`UserExact`         GSHM at ``l = m`` on exact unit counts (Section 8, Theorem 5);   user
``"user-exact"``           the default at user level
:class:`PamgGSHM`          hashed one-counter PAMG sketches of ``4 k`` buckets, GSHM at     user
``"pamg-gshm"``            ``l = m`` (Section 8); memory ``4 k`` keys
:class:`UserPurePP`        PURE_PP with ``Lap(2m/eps)`` on a declared universe, on one      user
``"user-pure-pp"``         flattened sequential stream (Section 8, Lemma 4); pure DP
:class:`SpaceSavingDP`     one SpaceSaving run per window, noisy counters above a noisy     element
``"space-saving"``         cut (Holland, DP SpaceSaving; derived here); fires once
=========================  ==============================================================  ==========

Every release is one window and pane of one transform, accounted at pipeline construction
(``docs/privacy-model.md``). The partition-stability assumption A-PART
(``docs/algorithms.md#mg-a-part``) applies to the CombineFn shapes: the DP claim relies on
Beam's bundling not depending on record contents.
"""

from beam_dpsketch.transforms.heavy_hitters.design_b import (
    DEFAULT_MAX_SHARDS,
    DesignB,
    DesignBCombineFn,
)
from beam_dpsketch.transforms.heavy_hitters.mechanism import HeavyHitterMechanism
from beam_dpsketch.transforms.heavy_hitters.merged import MergedGSHM, MergedLaplace
from beam_dpsketch.transforms.heavy_hitters.select_count import (
    RECOUNT_WINDOWING,
    SELECT_COUNT,
    SELECT_COUNT_WINDOWING,
    USER_SELECTION_FRACTION,
    CandidateCountCombineFn,
    SelectionMechanism,
    SelectThenCount,
    SelectThenCountSteps,
)
from beam_dpsketch.transforms.heavy_hitters.sequential import Sequential
from beam_dpsketch.transforms.heavy_hitters.sharded import DesignD, UntrustedShards
from beam_dpsketch.transforms.heavy_hitters.space_saving import SpaceSavingDP
from beam_dpsketch.transforms.heavy_hitters.transform import (
    HEAVY_HITTERS_DEFAULT_MECHANISM,
    MECHANISM_CLASSES,
    MECHANISMS,
    USER_DEFAULT_MECHANISM,
    USER_EXACT,
    DPHeavyHitters,
    DPHistogram,
    mechanism_for,
)
from beam_dpsketch.transforms.heavy_hitters.user import (
    USER_BUCKETS_PER_CANDIDATE,
    ExactCountCombineFn,
    PamgGSHM,
    UserExact,
    unit_key_set,
)
from beam_dpsketch.transforms.heavy_hitters.user_pure import UserPurePP

__all__ = [
    "DEFAULT_MAX_SHARDS",
    "HEAVY_HITTERS_DEFAULT_MECHANISM",
    "MECHANISMS",
    "MECHANISM_CLASSES",
    "RECOUNT_WINDOWING",
    "SELECT_COUNT",
    "SELECT_COUNT_WINDOWING",
    "USER_BUCKETS_PER_CANDIDATE",
    "USER_DEFAULT_MECHANISM",
    "USER_EXACT",
    "USER_SELECTION_FRACTION",
    "CandidateCountCombineFn",
    "DPHeavyHitters",
    "DPHistogram",
    "DesignB",
    "DesignBCombineFn",
    "DesignD",
    "ExactCountCombineFn",
    "HeavyHitterMechanism",
    "MergedGSHM",
    "MergedLaplace",
    "PamgGSHM",
    "SelectThenCount",
    "SelectThenCountSteps",
    "SelectionMechanism",
    "Sequential",
    "SpaceSavingDP",
    "UntrustedShards",
    "UserExact",
    "UserPurePP",
    "mechanism_for",
    "unit_key_set",
]
