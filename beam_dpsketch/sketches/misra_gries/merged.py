"""Releases of ``MERGE_k``-merged and PAMG sketches at sensitivity ``k`` ([LT23, Sections 7-8]).

M-LAP and M-PURE (Laplace noise of scale ``k/eps``, docs/algorithms.md#mg-merged), M-GSHM and
PAMG-GSHM (the Gaussian sparse histogram mechanism at ``l = k``, [LT23, Theorem 12]), and the
choice between them and Design B for a declared shard count ([LT23, Section 7]).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from beam_dpsketch.checks import check_choice, check_int, check_probability
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy.budget import PrivacyBudget, check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.misra_gries.error_check import (
    sketch_error_check,
    sketch_error_check_calibration,
)
from beam_dpsketch.sketches.misra_gries.gate import exactness_gated, gate_input
from beam_dpsketch.sketches.misra_gries.gshm import (
    calibrate_gshm,
    gshm_parameters,
    gshm_release,
)
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_SHARDED,
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
    pure_budget,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.tails import (
    NOISE_KINDS,
    draw,
    geometric_union_tail,
    laplace_quantile,
    laplace_union_tail,
    noisy_sums,
)
from beam_dpsketch.sketches.misra_gries.universe import (
    Universe,
    pure_top_k,
    validate_in_universe,
)
from beam_dpsketch.sketches.misra_gries.user import PAMGSketch, user_set_relation

__all__ = [
    "MergedRecommendation",
    "merged_gshm",
    "merged_laplace",
    "merged_pure",
    "pamg_gshm",
    "recommend_merged_mechanism",
]


def merged_input(sketch: Any) -> tuple[int, dict[Any, int], str, str, dict[str, Any]]:
    """``(k, positive counters, neighbouring, privacy unit, details)`` of a mergeable sketch.

    Nothing here depends on the sketch's provenance flag ``merged``: whether a runner really
    merged two non-empty sketches can depend on the data (one element can be a bundle's only
    one), so it must not show in a release. The sharded relation is stated for every
    ``MisraGries`` input: it holds for a single stream too, where A-PART (docs/algorithms.md#mg-a-part) is vacuous.
    """
    if isinstance(sketch, PAMGSketch):
        return sketch.k, sketch.to_dict(), user_set_relation(sketch.m), "user", {"m": sketch.m}
    if isinstance(sketch, MisraGries):
        return sketch.k, sketch.to_dict(), NEIGHBOURING_SHARDED, "element", {}
    raise TypeError(f"expected a MisraGries or PAMGSketch, got {type(sketch).__name__}")


# --------------------------------------------------------------------------------------------
# M-LAP and M-PURE (sensitivity k)
# --------------------------------------------------------------------------------------------


def merged_laplace_parameters(
    k: int, epsilon: float, delta: float, noise: str
) -> tuple[Any, float | int]:
    """``(scale, threshold)`` of M-LAP: noise ``k/eps``, one-sided keys have value exactly 1."""
    scale = discrete_laplace_scale(k, epsilon)
    if noise == "discrete_laplace":
        return scale, 1 + geometric_union_tail(scale, delta, k)
    return scale, 1.0 + laplace_union_tail(scale, delta, k)


def merged_laplace(
    sketch: MisraGries | PAMGSketch,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    noise: str = "discrete_laplace",
    mechanism: str = "M-LAP",
    error_confidence: float | None = None,
    exactness_gate: bool = False,
) -> HeavyHitterRelease:
    """M-LAP: Laplace noise scaled to the ``k``-bounded sensitivity of a merged sketch (docs/algorithms.md#mg-merged).

    Every positive key gets ``c_x + Z_x`` with scale ``k/eps`` and is kept iff the value is
    ``>= 1 + (k/eps) ln(k/(2 delta))`` (Laplace; derived in docs/algorithms.md#mg-merged, the paper gives no
    constant) or ``>= 1 + t`` with ``k * P[Geo2(exp(-eps/k)) >= t] <= delta`` (discrete, the
    default). Valid because after any fixed merge tree neighbouring sketches differ by exactly
    1 on at most ``k`` keys, all in one direction ([LT23, Section 7, Lemma 1 and Corollary 2]; PAMG: [LT23, Section 8, Lemma 9 and Corollary 10]), so a
    key present on one side only has value 1.

    Guarantee: ``(epsilon, delta)``-DP; neighbouring: add/remove one element (one user's set for
    a :class:`~.user.PAMGSketch`), with assumption A-PART (docs/algorithms.md#mg-a-part) for merged inputs
    (docs/algorithms.md#mg-partition). Also the thresholded baseline of Chan et al. on an unmerged sketch ([LT23, Section 4])
    and the corrected Boehler-Kerschbaum baseline ([LT23, Section 4]). Error ``O(n/k + k log(k/delta)/eps)``.

    Parameters
    ----------
    sketch
        A ``MisraGries`` (merged or not) or a ``PAMGSketch``.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1`` (any other budget
        raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream.
    noise
        ``"discrete_laplace"`` (default, exact integers) or ``"laplace"`` (lattice Laplace).
    mechanism
        Name recorded in the release.
    error_confidence
        ``None`` (default): no error bound, the mechanism as in the paper. A confidence such as
        ``0.95`` (a ``MisraGries`` input only): ``release.error`` states, for each released key
        separately, ``estimate - t <= f(x) <= estimate + t + s`` with probability at least
        ``error_confidence``; ``t`` is the noise's two-sided quantile and ``s`` the private
        bound on the sketch's undercount of :func:`sketch_error_check` (a small share of
        ``epsilon``; the release runs on the rest).
    exactness_gate
        ``False`` (default): M-LAP as in the paper. ``True`` (a ``MisraGries`` input only):
        behind :func:`exactness_gated`, the exact counts at sensitivity 1 (noise ``1/eps_b``,
        threshold of one one-sided key) when the noisy test finds the sketch exact, else M-LAP
        at ``(eps_b, delta_b)``; same guarantee.
    """
    if exactness_gate:
        return exactness_gated(
            gate_input(sketch),
            budget,
            stream,
            lambda branch: merged_laplace(
                sketch,
                branch,
                stream,
                noise=noise,
                mechanism=mechanism,
                error_confidence=error_confidence,
            ),
            noise=check_choice(noise, "noise", NOISE_KINDS),
            neighbouring=NEIGHBOURING_SHARDED,
            confidence=ERROR_CONFIDENCE if error_confidence is None else error_confidence,
        )
    k, values, relation, unit, details = merged_input(sketch)
    eps, dl = approx_budget(budget)
    check_choice(noise, "noise", NOISE_KINDS)
    check_stream(stream)
    check, conf = sketch_error_check_calibration(sketch, eps, error_confidence)
    eps_release = eps if check is None else check.release_epsilon
    scale, tau = merged_laplace_parameters(k, eps_release, dl, noise)
    keys = list(values)
    z = draw(stream, noise, scale, k)[: len(keys)]
    ys = noisy_sums(noise, [values[x] for x in keys], z)
    details.update(epsilon_effective=float(k / scale))
    error = None
    if check is not None:
        failure = 1.0 - conf - 2.0 * check.failure
        t = laplace_quantile(scale, failure, noise=noise)
        error = sketch_error_check(sketch, check, stream, t, conf, details)
        details.update(epsilon_effective=float(k / scale) + check.epsilon)
    return make_release(
        [(x, y) for x, y in zip(keys, ys, strict=True) if y >= tau],
        mechanism=mechanism,
        epsilon=eps,
        delta=dl,
        threshold=tau,
        noise=NoiseSpec(noise, float(scale)),
        k=k,
        neighbouring=relation,
        privacy_unit=unit,
        details=details,
        error=error,
    )


def merged_pure(
    sketch: MisraGries | PAMGSketch,
    universe: Universe | Iterable[Any],
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    method: str = "auto",
    mechanism: str = "M-PURE",
) -> HeavyHitterRelease:
    """M-PURE: pure DP top-k of a merged sketch with noise ``k/eps`` on all of ``U`` (docs/algorithms.md#mg-merged).

    Exact discrete Laplace of scale ``k/eps`` on the counter of **every** key of the declared
    universe (0 if not stored), then the ``k`` largest; large universes use the exact cutoff
    sampler (see :func:`~.design_b.pure_pp`). L1 sensitivity ``k`` after any fixed
    merge tree ([LT23, Section 8, Corollary 10]). On an unmerged sketch this is the pure mechanism of Chan et
    al. ([LT23, Section 4]). Error ``O(n/k + k log(u)/eps)``.

    Guarantee: pure ``epsilon``-DP for ``budget = PrivacyBudget.pure(epsilon)`` (any other
    budget raises ``ValueError`` naming ``budget``); neighbouring as in :func:`merged_laplace`.
    """
    k, values, relation, unit, details = merged_input(sketch)
    if not isinstance(universe, Universe):
        universe = Universe.from_keys(universe)
    eps = pure_budget(budget)
    check_stream(stream)
    validate_in_universe(values, universe)
    scale = discrete_laplace_scale(k, eps)
    top, info = pure_top_k(values, universe, k, scale, stream, capacity=k, method=method)
    details.update(info)
    details.update(epsilon_effective=float(k / scale))
    return make_release(
        top,
        mechanism=mechanism,
        epsilon=eps,
        delta=0.0,
        threshold=info.get("cutoff"),
        noise=NoiseSpec("discrete_laplace", float(scale)),
        k=k,
        neighbouring=relation,
        privacy_unit=unit,
        details=details,
    )


def merged_gshm(
    sketch: MisraGries | PAMGSketch,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    beta: float = 0.05,
    sigma: float | None = None,
    mechanism: str = "M-GSHM",
    error_confidence: float | None = None,
    exactness_gate: bool = False,
) -> HeavyHitterRelease:
    """M-GSHM: the Gaussian sparse histogram mechanism on a merged (or PAMG) sketch, ``l = k``.

    Every positive key gets ``c_x + N(0, sigma^2)`` and is kept iff the value is
    ``>= 1 + tau``; ``(sigma, tau)`` satisfy the **exact** condition
    ``delta_GSHM(k, sigma, tau, eps) <= delta`` of Theorem 5 (after Wilkins, Kifer, Zhang and
    Karrer), calibrated by :func:`calibrate_gshm` (or :func:`gshm_parameters` when ``sigma`` is
    given). Precondition ([LT23, Section 7, Lemma 1 and Corollary 2; Section 8, Lemma 9 and Corollary 10]): neighbouring sketches differ by
    exactly 1 on at most ``k`` counts, all in one direction, after any fixed merge tree.
    Noise: :func:`beam_dpsketch.noise.gaussian`, the exact discrete Gaussian on a lattice of
    step ``<= sigma 2**-20`` (docs/algorithms.md#noise-sampling; its distance to ``N(0, sigma^2)`` is
    negligible, and ``delta_GSHM`` is the continuous formula).

    Guarantee: ``(epsilon, delta)``-DP; neighbouring: add/remove one element (one user's set of
    at most ``m`` distinct elements for a PAMG sketch), with A-PART (docs/algorithms.md#mg-a-part) for merged
    inputs. Error (Theorem 12): ``|f~(x) - f(x)| < N/(k+1) + 1 + tau + sigma Phi^-1(1 -
    beta/(2k))`` w.p. ``1 - beta`` (``details["error_bound"]``; docs/algorithms.md#mg-e11: ``beta``, not
    ``2 delta``).

    Parameters
    ----------
    sketch
        ``MisraGries`` (merged or not) or ``PAMGSketch``.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1`` (any other budget
        raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream.
    beta
        Utility failure probability used by the calibration's error proxy.
    sigma
        Optional fixed noise standard deviation (``tau`` is then calibrated for it).
    mechanism
        Name recorded in the release.
    error_confidence
        ``None`` (default): no per-value bound. A confidence such as ``0.95`` (a
        ``MisraGries`` input only): ``release.error`` states, for each released key separately,
        ``estimate - t <= f(x) <= estimate + t + s`` with probability at least
        ``error_confidence``, ``t = sigma Phi^-1(1 - failure/2)`` the Gaussian's two-sided
        quantile and ``s`` the private bound on the sketch's undercount of
        :func:`sketch_error_check` (a small share of ``epsilon``; GSHM is calibrated on the
        rest). Unlike ``details["error_bound"]`` (Theorem 12, every key at once, worst-case
        ``N/(k+1)``), it is a marginal statement per value.
    exactness_gate
        ``False`` (default): M-GSHM as in the paper. ``True`` (a ``MisraGries`` input only):
        behind :func:`exactness_gated`, the exact counts with GSHM at ``l = 1`` when the noisy
        test finds the sketch exact, else M-GSHM at ``(eps_b, delta_b)``; same guarantee.
    """
    if exactness_gate:
        return exactness_gated(
            gate_input(sketch),
            budget,
            stream,
            lambda branch: merged_gshm(
                sketch,
                branch,
                stream,
                beta=beta,
                sigma=sigma,
                mechanism=mechanism,
                error_confidence=error_confidence,
            ),
            noise="gaussian",
            neighbouring=NEIGHBOURING_SHARDED,
            confidence=ERROR_CONFIDENCE if error_confidence is None else error_confidence,
        )
    k, values, relation, unit, details = merged_input(sketch)
    eps, dl = approx_budget(budget)
    b = check_probability(beta, "beta")
    check_stream(stream)
    check, conf = sketch_error_check_calibration(sketch, eps, error_confidence)
    eps_release = eps if check is None else check.release_epsilon
    if sigma is None:
        params = calibrate_gshm(k, eps_release, dl, beta=b)
    else:
        params = gshm_parameters(k, eps_release, dl, sigma)
    pairs = gshm_release(values, params, stream, k)
    details.update(
        l=k,
        sigma=params.sigma,
        tau=params.tau,
        delta_exact=params.delta_exact,
        error_bound=params.error_bound(b),
    )
    error = None
    if check is not None:
        failure = 1.0 - conf - 2.0 * check.failure
        # The lattice Gaussian is within a negligible distance of N(0, sigma^2); the factor
        # covers the sampler's rounding of sigma.
        t = params.sigma * (1.0 + 1e-9) * NormalDist().inv_cdf(1.0 - failure / 2.0)
        error = sketch_error_check(sketch, check, stream, t, conf, details)
    return make_release(
        pairs,
        mechanism=mechanism,
        epsilon=eps,
        delta=dl,
        threshold=params.threshold,
        noise=NoiseSpec("gaussian", params.sigma),
        k=k,
        neighbouring=relation,
        privacy_unit=unit,
        details=details,
        error=error,
    )


def pamg_gshm(
    sketch: PAMGSketch,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    beta: float = 0.05,
    sigma: float | None = None,
) -> HeavyHitterRelease:
    """User-level release of a PAMG sketch (merged or not) with GSHM at ``l = k`` (Theorem 12).

    Guarantee: ``(epsilon, delta)``-DP for ``budget = PrivacyBudget.approx(epsilon, delta)``
    with ``delta > 0`` when neighbouring streams differ by one user's set of at most ``m``
    distinct elements, whatever ``m`` is ([LT23, Section 8, Lemma 9 and Corollary 10; Theorem 12]); shards
    must partition users (each user in exactly one shard, fixed merge order, docs/algorithms.md#mg-partition). The
    noise does not depend on ``m``: ``O(sqrt(k log(1/delta) log(k/delta))/eps)``. ``l = k``
    always, never ``m`` (docs/algorithms.md#misra-gries). See :func:`merged_gshm` for the mechanism.
    """
    if not isinstance(sketch, PAMGSketch):
        raise TypeError(f"pamg_gshm needs a PAMGSketch, got {type(sketch).__name__}")
    return merged_gshm(sketch, budget, stream, beta=beta, sigma=sigma, mechanism="PAMG-GSHM")


# --------------------------------------------------------------------------------------------
# Which design for a trusted aggregator ([LT23, Section 7] and docs/algorithms.md#mg-merged)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MergedRecommendation:
    """Result of :func:`recommend_merged_mechanism`.

    Attributes
    ----------
    design
        ``"design_b"``, ``"merged_gshm"`` or ``"merged_laplace"``.
    release
        Name of the function that releases it (``approx_pp``, ``merged_gshm``,
        ``merged_laplace``).
    error_bounds
        Per design, the bound that holds w.p. ``1 - beta`` on ``max_x |f~(x) - f(x)|`` minus the
        common Misra-Gries term ``N/(k+1)`` (docs/algorithms.md#mg-oracles oracles).
    memory_keys
        Per design, the most keys the aggregator holds.
    feasible
        Per design, whether its memory fits ``max_aggregator_keys``.
    """

    design: str
    release: str
    error_bounds: Mapping[str, float]
    memory_keys: Mapping[str, int]
    feasible: Mapping[str, bool]


_RELEASES = {
    "design_b": "approx_pp",
    "merged_gshm": "merged_gshm",
    "merged_laplace": "merged_laplace",
}


def recommend_merged_mechanism(
    k: int,
    shards: int,
    epsilon: float,
    delta: float,
    *,
    beta: float = 0.05,
    max_aggregator_keys: int | None = None,
) -> MergedRecommendation:
    """Choose the trusted-aggregator design with the smaller error for a declared shard count.

    The rule ([LT23, Section 7], docs/algorithms.md#mg-merged, oracles of docs/algorithms.md#mg-oracles), for ``(epsilon, delta)``
    releases of element-level data: compute, for each design, the bound that holds with
    probability ``1 - beta`` on the maximum error beyond the Misra-Gries term ``N/(k+1)``
    (identical for all three, so it cancels):

    * ``design_b`` (per-shard Algorithm 3 + exact sum + :func:`approx_pp`):
      ``tau_pp + (2/eps) ln(shards * k / beta)``; noise does not grow with ``k``, but the
      aggregator holds up to ``shards * k`` keys and the union bound grows like ``ln(shards)``;
    * ``merged_gshm`` (``MERGE_k`` + :func:`merged_gshm`): ``1 + tau + sigma Phi^-1(1 -
      beta/(2k))`` with exact calibration at ``l = k``; memory ``k``;
    * ``merged_laplace`` (``MERGE_k`` + :func:`merged_laplace`): ``tau_M + (k/eps) ln(k/beta)``;
      memory ``k``.

    The design with the smallest bound among those whose memory fits ``max_aggregator_keys``
    wins (ties: the order above). Design B is infeasible when ``shards * k`` exceeds the memory
    cap; otherwise it wins except for very small ``k``: at ``eps = 1``, ``delta = 1e-6``,
    ``beta = 0.05``, ``k = 2`` favours ``merged_laplace`` for any shard count and ``k = 3``
    favours ``merged_gshm`` from a few thousand shards on. The choice depends only on
    declared configuration, never on how many merges a runner performed (docs/algorithms.md#mg-merged). Untrusted
    aggregators ([LT23, Section 7]) and user-level data (use PAMG + :func:`pamg_gshm`) are out of scope.

    Parameters
    ----------
    k
        Sketch size.
    shards
        Declared number of shards (shard sketches the aggregator combines), ``>= 1``.
    epsilon, delta
        The release budget.
    beta
        Failure probability of the compared bounds.
    max_aggregator_keys
        Memory cap in keys for the aggregator, or ``None`` for no cap.
    """
    kk = check_int(k, "k")
    s = check_int(shards, "shards")
    eps = check_epsilon(epsilon)
    dl = check_delta(delta, allow_zero=False)
    b = check_probability(beta, "beta")
    cap = (
        None
        if max_aggregator_keys is None
        else check_int(max_aggregator_keys, "max_aggregator_keys")
    )

    pp_scale = discrete_laplace_scale(2 * (kk + 1), eps)
    tau_pp = (kk + geometric_union_tail(pp_scale, dl, kk)) / (kk + 1)
    bound_b = tau_pp + (2.0 / eps) * math.log(s * kk / b)
    gshm = calibrate_gshm(kk, eps, dl, beta=b)
    _, tau_m = merged_laplace_parameters(kk, eps, dl, "discrete_laplace")
    bound_lap = tau_m + (kk / eps) * math.log(kk / b)
    bounds = {"design_b": bound_b, "merged_gshm": gshm.error_bound(b), "merged_laplace": bound_lap}
    memory = {"design_b": s * kk, "merged_gshm": kk, "merged_laplace": kk}
    feasible = {d: cap is None or memory[d] <= cap for d in bounds}
    candidates = [d for d in bounds if feasible[d]]
    if not candidates:
        raise ValueError(f"max_aggregator_keys={cap} is below k={kk}: no design fits")
    best = min(candidates, key=lambda d: bounds[d])
    return MergedRecommendation(best, _RELEASES[best], bounds, memory, feasible)
