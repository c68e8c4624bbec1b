"""Misra-Gries heavy hitters: the exact summary and its differentially private releases.

The family of Lebeda and Tetek (PODS 2023 / TODS 2025), cited as [LT23]. Pure numpy, no Beam.
:class:`MisraGries` (the summary of [LT23, Algorithm 1] with the merge of Agarwal et al.,
"Mergeable Summaries", PODS 2012) and :class:`PAMGSketch` ([LT23, Algorithm 4]) are exact and
**not** differentially private; the release functions below turn them into
:class:`HeavyHitterRelease` objects, each stating its guarantee. Every name a user needs is
imported from this package; the modules hold one mechanism each:

* :mod:`.sketch` (with :mod:`.batches` and the compiled kernel): the exact summary;
* :mod:`.release`: the release object, its error bound and the neighbouring relations;
* :mod:`.pmg_release`: PMG ([LT23, Algorithm 2; Section 5]) on one sequential stream;
* :mod:`.design_b`: Algorithm 3 post-processing summed over shards and its releases;
* :mod:`.sharded`: Design D (PMG per key-partitioned shard) and the untrusted-aggregator sum;
* :mod:`.merged`: M-LAP, M-PURE, M-GSHM and PAMG-GSHM on merged sketches ([LT23, Sections 7-8]);
* :mod:`.gshm`: the Gaussian sparse histogram mechanism's exact calibration;
* :mod:`.gate`: the noisy exactness test in front of a release;
* :mod:`.user`: PAMG and user-level PMG ([LT23, Section 8]);
* :mod:`.select_count`, :mod:`.hashed`, :mod:`.exact`: select-then-count and the user-level
  releases of the heavy-hitter transforms;
* :mod:`.baselines`: the baselines of [LT23, Section 4];
* :mod:`.calibration`, :mod:`.tails`, :mod:`.error_check`, :mod:`.universe`: thresholds, noise
  tails, the private checks behind stated error bounds, declared universes;
* :mod:`.sizing`: counters from an error target or a memory budget (:func:`suggest_k`).

Each release function takes the sketch, the :class:`beam_dpsketch.privacy.PrivacyBudget` it
spends and a :class:`beam_dpsketch.noise.NoiseStream` (one per release, from
``NoiseSource.stream(release_id)``), draws all its noise from that stream (exactly one shared
draw where the mechanism has one, docs/algorithms.md#noise-sampling) and returns the released
``(key, noisy count)`` pairs sorted by canonical key order (docs/algorithms.md#mg-order) with
their guarantee. The rule for privacy parameters: a function that draws noise takes a
``PrivacyBudget`` (``PrivacyBudget.approx(epsilon, delta)`` with ``delta > 0`` for the
thresholding releases, ``PrivacyBudget.pure(epsilon)`` for :func:`pure_pp`,
:func:`merged_pure`, :func:`chan_pure` and the count step of select-then-count, and any other
kind is refused with a ``ValueError`` naming ``budget``), while a calibration function that
evaluates a formula of the paper from public parameters (thresholds, GSHM's ``sigma`` and
``tau``, budget splits, :func:`recommend_merged_mechanism`) takes plain ``epsilon`` and
``delta`` floats.

Which release for which pipeline (docs/algorithms.md#mg-merged):

======================================  ===========================================================
sketch / pipeline shape                 releases
======================================  ===========================================================
one sequential stream (``MisraGries``,  :func:`pmg` (**default**: PMG-geo, exact discrete noise),
``merged=False``)                       :func:`pmg_standard`, :func:`pure_pp`, :func:`approx_pp`
per-shard Algorithm 3 + exact sum       :func:`approx_pp`, :func:`pure_pp` on a
(Design B, :class:`PostProcessedSum`)   :class:`PostProcessedSum`
``MERGE_k``-merged ``MisraGries``       :func:`merged_gshm`, :func:`merged_laplace`,
(``merged=True``)                       :func:`merged_pure`; PMG and Algorithm 3 raise TypeError
Design B or ``MERGE_k`` behind a noisy  :func:`gated_approx_pp`, ``exactness_gate=True`` of
test of exactness (the transforms)      :func:`merged_gshm` / :func:`merged_laplace`
user level, PAMG (+ ``MERGE_k``)        :func:`pamg_gshm` (``l = k``); merged_laplace/merged_pure
user level, one flattened stream        :func:`user_level_pmg` (group privacy), :func:`user_level_pure_pp`
key-hash shards, one sequential sketch  :func:`design_d` (PMG per shard, the union)
each (``ShardedMisraGries``)
disjoint shards, untrusted aggregator   :func:`untrusted_sum` (PMG per shard, summed; baseline)
baselines ([LT23, Section 4])           :func:`chan_pure`, :func:`chan_thresholded`,
                                        :func:`stability_histogram`, :func:`gaussian_histogram`
======================================  ===========================================================

:func:`recommend_merged_mechanism` picks between Design B and the merged releases for a
declared shard count. Defaults where the paper leaves a choice open:

* integer data get exact discrete Laplace noise by default ([LT23, Section 5.2] and
  docs/algorithms.md#noise-sampling; docs/algorithms.md#mg-e5's conservative ``tau_geo``),
  which :func:`pmg` draws on a lattice of step ``1/g`` by default (docs/algorithms.md#mg-lattice;
  ``lattice=False`` for the paper's integer form); ``noise="laplace"`` selects lattice Laplace
  noise where the paper uses Laplace; Algorithm-3 releases are discrete only (their values are
  multiples of ``1/(k+1)``, which lattice noise would expose);
* ``epsilon`` is rounded down to a multiple of ``1e-6`` so the exact samplers take exact
  rational scales, and thresholds are computed from that value (``details["epsilon_effective"]``);
* ``delta`` must lie in ``(0, 1)`` for every ``(eps, delta)`` release (docs/algorithms.md#mg-e9);
  pure releases take a pure budget;
* Algorithm 3 uses ``n/(k+1)`` exactly (docs/algorithms.md#mg-e7) and the paper's sensitivity 2
  (``tight_sensitivity=True`` for ``(2k-1)/(k+1)``, docs/algorithms.md#mg-e3);
* GSHM is always calibrated with the exact ``delta_GSHM`` (docs/algorithms.md#mg-e10), ``l = k``
  for merged and PAMG sketches, ``threshold = 1 + tau`` (docs/algorithms.md#mg-e18), utility
  stated with ``beta`` (docs/algorithms.md#mg-e11).

Neighbouring relation: add/remove one element ([LT23, Definition 1]) unless a release says
otherwise (user level: one user's contribution). Replace-one guarantees follow by group privacy
of size 2: run with ``eps/2`` and ``delta/(1 + e^(eps/2))`` ([LT23, Definition 1],
docs/algorithms.md#mg-e19). Every call is one release and spends its budget; compose repeated
releases (docs/privacy-model.md#many-releases-from-one-noisy-state).

Citation keys are those of ``docs/algorithms.md#references``; ``docs/algorithms.md#misra-gries``
explains every deviation from the paper.
"""

from beam_dpsketch.sketches.misra_gries.baselines import (
    chan_pure,
    chan_thresholded,
    gaussian_histogram,
    stability_histogram,
)
from beam_dpsketch.sketches.misra_gries.design_b import (
    DEFAULT_COUNT_FRACTION,
    PostProcessedSum,
    approx_pp,
    postprocess,
    pure_pp,
    user_level_pure_pp,
)
from beam_dpsketch.sketches.misra_gries.gate import exactness_gated, gated_approx_pp
from beam_dpsketch.sketches.misra_gries.gshm import GSHMParameters, calibrate_gshm, gshm_parameters
from beam_dpsketch.sketches.misra_gries.merged import (
    MergedRecommendation,
    merged_gshm,
    merged_laplace,
    merged_pure,
    pamg_gshm,
    recommend_merged_mechanism,
)
from beam_dpsketch.sketches.misra_gries.pmg_release import THRESHOLD_FORMS, pmg, pmg_standard
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
    ErrorBound,
    HeavyHitterEstimate,
    HeavyHitterRelease,
    NoiseSpec,
)
from beam_dpsketch.sketches.misra_gries.sharded import (
    ShardedMisraGries,
    design_d,
    untrusted_sum,
)
from beam_dpsketch.sketches.misra_gries.sizing import (
    DEFAULT_K,
    apriori_error,
    k_for_memory,
    memory_bytes,
    suggest_k,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.universe import Universe
from beam_dpsketch.sketches.misra_gries.user import (
    PAMGSketch,
    flatten_users,
    merge_k,
    user_level_pmg,
)

__all__ = [
    "DEFAULT_COUNT_FRACTION",
    "DEFAULT_K",
    "ERROR_CONFIDENCE",
    "NEIGHBOURING_ELEMENT",
    "NEIGHBOURING_SHARDED",
    "ErrorBound",
    "GSHMParameters",
    "HeavyHitterEstimate",
    "HeavyHitterRelease",
    "MergedRecommendation",
    "MisraGries",
    "NoiseSpec",
    "PAMGSketch",
    "PostProcessedSum",
    "ShardedMisraGries",
    "THRESHOLD_FORMS",
    "Universe",
    "apriori_error",
    "approx_pp",
    "calibrate_gshm",
    "chan_pure",
    "chan_thresholded",
    "default_release",
    "design_d",
    "exactness_gated",
    "flatten_users",
    "gated_approx_pp",
    "gaussian_histogram",
    "gshm_parameters",
    "k_for_memory",
    "memory_bytes",
    "merge_k",
    "merged_gshm",
    "merged_laplace",
    "merged_pure",
    "pamg_gshm",
    "pmg",
    "pmg_standard",
    "postprocess",
    "pure_pp",
    "recommend_merged_mechanism",
    "stability_histogram",
    "suggest_k",
    "untrusted_sum",
    "user_level_pmg",
    "user_level_pure_pp",
]

#: The default single-stream mechanism: PMG with exact discrete (geometric) noise, [LT23, Section 5.2].
default_release = pmg
