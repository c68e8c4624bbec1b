"""Differentially private releases of Misra-Gries sketches (Lebeda and Tetek, PODS 2023 / TODS 2025).

Pure numpy, no Beam. The paper is cited as [LT23]; deviations and library choices are explained
in docs/algorithms.md#misra-gries. The exact sketches live in :mod:`beam_dpsketch.sketches.misra_gries.sketch` (Algorithm 1 and the
Agarwal merge) and :class:`PAMGSketch` (Algorithm 4); this module turns them into
:class:`HeavyHitterRelease` objects. Each release function takes the sketch, the privacy
parameters and a :class:`beam_dpsketch.noise.NoiseStream` (one per release, from
``NoiseSource.stream(release_id)``), draws all its noise from that stream (exactly one shared
draw where the mechanism has one, docs/algorithms.md#noise-sampling) and returns the released ``(key, noisy count)``
pairs sorted by canonical key order (docs/algorithms.md#mg-order) with their guarantee.

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
user level, one flattened stream        :func:`user_level_pmg` (group privacy)
baselines ([LT23, Section 4])           :func:`chan_pure`, :func:`chan_thresholded`,
                                        :func:`stability_histogram`, :func:`gaussian_histogram`
======================================  ===========================================================

:func:`recommend_merged_mechanism` picks between Design B and the merged releases for a
declared shard count. Defaults where the paper leaves a choice open:

* integer data get exact discrete Laplace noise by default ([LT23, Section 5.2] and docs/algorithms.md#noise-sampling; docs/algorithms.md#mg-e5's
  conservative ``tau_geo``), which :func:`pmg` draws on a lattice of step ``1/g`` by default
  (docs/algorithms.md#mg-lattice; ``lattice=False`` for the paper's integer form);
  ``noise="laplace"`` selects lattice Laplace noise where the paper
  uses Laplace; Algorithm-3 releases are discrete only (their values are multiples of
  ``1/(k+1)``, which lattice noise would expose);
* ``epsilon`` is rounded down to a multiple of ``1e-6`` so the exact samplers take exact
  rational scales, and thresholds are computed from that value (``details["epsilon_effective"]``);
* ``delta`` must lie in ``(0, 1)`` for every ``(eps, delta)`` release (docs/algorithms.md#mg-e9); pure releases
  take no ``delta``;
* Algorithm 3 uses ``n/(k+1)`` exactly (docs/algorithms.md#mg-e7) and the paper's sensitivity 2
  (``tight_sensitivity=True`` for ``(2k-1)/(k+1)``, docs/algorithms.md#mg-e3);
* GSHM is always calibrated with the exact ``delta_GSHM`` (docs/algorithms.md#mg-e10), ``l = k`` for merged
  and PAMG sketches, ``threshold = 1 + tau`` (docs/algorithms.md#mg-e18), utility stated with ``beta`` (docs/algorithms.md#mg-e11).

Neighbouring relation: add/remove one element ([LT23, Definition 1]) unless a release says otherwise
(user level: one user's contribution). Replace-one guarantees follow by group privacy of size 2:
run with ``eps/2`` and ``delta/(1 + e^(eps/2))`` ([LT23, Definition 1], docs/algorithms.md#mg-e19). Every call is one release
and spends its budget; compose repeated releases (docs/privacy-model.md#many-releases-from-one-noisy-state).
"""

from __future__ import annotations

from beam_dpsketch.sketches.misra_gries.baselines import (
    chan_pure,
    chan_thresholded,
    gaussian_histogram,
    stability_histogram,
)
from beam_dpsketch.sketches.misra_gries.core import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
    ErrorBound,
    HeavyHitterEstimate,
    HeavyHitterRelease,
    NoiseSpec,
    Universe,
)
from beam_dpsketch.sketches.misra_gries.design_b import (
    DEFAULT_COUNT_FRACTION,
    PostProcessedSum,
    approx_pp,
    postprocess,
    pure_pp,
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
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg, pmg_standard
from beam_dpsketch.sketches.misra_gries.user import (
    PAMGSketch,
    flatten_users,
    merge_k,
    user_level_pmg,
)

__all__ = [
    "DEFAULT_COUNT_FRACTION",
    "ERROR_CONFIDENCE",
    "NEIGHBOURING_ELEMENT",
    "NEIGHBOURING_SHARDED",
    "ErrorBound",
    "GSHMParameters",
    "HeavyHitterEstimate",
    "HeavyHitterRelease",
    "MergedRecommendation",
    "NoiseSpec",
    "PAMGSketch",
    "PostProcessedSum",
    "Universe",
    "approx_pp",
    "calibrate_gshm",
    "chan_pure",
    "chan_thresholded",
    "exactness_gated",
    "flatten_users",
    "gated_approx_pp",
    "gaussian_histogram",
    "gshm_parameters",
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
    "user_level_pmg",
]

#: The default single-stream mechanism: PMG with exact discrete (geometric) noise, [LT23, Section 5.2].
default_release = pmg
