"""Releases of merged (Agarwal ``MERGE_k``) and PAMG sketches under a trusted aggregator.

M-LAP, M-PURE and M-GSHM of docs/algorithms.md#mg-merged (Section 7 of the paper), the exact GSHM calibration of
[LT23, Section 8, Theorem 5], PAMG + GSHM ([LT23, Theorem 12]) and the design recommendation of
[LT23, Section 7] and docs/algorithms.md#mg-merged. Re-exported by :mod:`beam_dpsketch.sketches.misra_gries.private`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from beam_dpsketch.noise import NoiseStream, gaussian
from beam_dpsketch.privacy.calibration import analytic_gaussian_sigma, noise_lattice
from beam_dpsketch.sketches.misra_gries.calibration import gshm_delta, gshm_threshold
from beam_dpsketch.sketches.misra_gries.core import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
    ErrorBound,
    HeavyHitterRelease,
    NoiseSpec,
    SketchCheck,
    Universe,
    check_approx_delta,
    check_beta,
    check_eps,
    check_error_confidence,
    check_noise_kind,
    check_positive_int,
    check_stream,
    draw,
    geometric_two_sided_quantile,
    geometric_union_tail,
    laplace_quantile,
    laplace_scale_exact,
    laplace_union_tail,
    make_release,
    noisy_sums,
    pure_top_k,
    sketch_check_calibration,
    sketch_shortfall,
    validate_in_universe,
)
from beam_dpsketch.sketches.misra_gries.select_count import (
    ExactnessTest,
    exactness_test_calibration,
)
from beam_dpsketch.sketches.misra_gries.single import (
    DEFAULT_COUNT_FRACTION,
    PostProcessedSum,
    approx_pp,
    as_postprocessed,
    check_count_fraction,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.user import PAMGSketch, user_set_relation

__all__ = [
    "GSHMParameters",
    "MergedRecommendation",
    "calibrate_gshm",
    "exact_histogram_release",
    "exactness_gated",
    "gated_approx_pp",
    "gshm_parameters",
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


def gate_input(sketch: Any) -> MisraGries:
    """The sketch of a gated merged release: element level only (``ValueError`` otherwise).

    The exact branch's sensitivity 1 holds when one element changes one count by 1; one user's
    set changes up to ``m`` counts, so a PAMG sketch is refused.
    """
    if type(sketch) is not MisraGries:
        raise ValueError(
            "exactness_gate applies to element-level MisraGries sketches only, not to "
            f"{type(sketch).__name__}"
        )
    return sketch


# --------------------------------------------------------------------------------------------
# M-LAP and M-PURE (sensitivity k)
# --------------------------------------------------------------------------------------------


def merged_laplace_parameters(
    k: int, epsilon: float, delta: float, noise: str
) -> tuple[Any, float | int]:
    """``(scale, threshold)`` of M-LAP: noise ``k/eps``, one-sided keys have value exactly 1."""
    scale = laplace_scale_exact(k, epsilon)
    if noise == "discrete_laplace":
        return scale, 1 + geometric_union_tail(scale, delta, k)
    return scale, 1.0 + laplace_union_tail(scale, delta, k)


def merged_laplace(
    sketch: MisraGries | PAMGSketch,
    epsilon: float,
    delta: float,
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
    epsilon, delta
        ``epsilon > 0``, ``0 < delta < 1``.
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
            epsilon,
            delta,
            stream,
            lambda e, d: merged_laplace(
                sketch,
                e,
                d,
                stream,
                noise=noise,
                mechanism=mechanism,
                error_confidence=error_confidence,
            ),
            noise=check_noise_kind(noise),
            neighbouring=NEIGHBOURING_SHARDED,
            confidence=ERROR_CONFIDENCE if error_confidence is None else error_confidence,
        )
    k, values, relation, unit, details = merged_input(sketch)
    eps = check_eps(epsilon)
    dl = check_approx_delta(delta)
    check_noise_kind(noise)
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


def sketch_error_check_calibration(
    sketch: Any, epsilon: float, error_confidence: float | None
) -> tuple[SketchCheck | None, float]:
    """``(checks' calibration, confidence)`` of a merged release's error bound, or ``(None, 0)``.

    Only an element-level ``MisraGries`` gets a bound: for a PAMG sketch one unit changes the
    statistics of :class:`~.core.SketchCheck` by up to ``m``, which they are not calibrated for.
    """
    if error_confidence is None:
        return None, 0.0
    conf = check_error_confidence(error_confidence)
    if not isinstance(sketch, MisraGries):
        raise ValueError(
            "error_confidence applies to element-level MisraGries sketches only, not to "
            f"{type(sketch).__name__}"
        )
    return sketch_check_calibration(epsilon, sketch.k), conf


def sketch_error_check(
    sketch: MisraGries,
    check: SketchCheck,
    stream: NoiseStream,
    noise_quantile: float,
    confidence: float,
    details: dict[str, Any],
) -> ErrorBound:
    """The per-value :class:`~.core.ErrorBound` of a release of ``sketch`` (merged or not).

    Every counter is at most the key's count and at least the count minus ``d``
    ([LT23, Section 7, merge error]); :func:`~.core.sketch_shortfall` bounds ``d`` privately,
    and ``noise_quantile`` bounds the noise except with probability at most ``1 - confidence -
    2 * check.failure``, so with probability at least ``confidence``:
    ``estimate - t <= f(x) <= estimate + t + shortfall``. ``details`` receives the checks'
    public facts.
    """
    shortfall, facts = sketch_shortfall(sketch.widest, sketch.n, sketch.k, check, stream)
    details.update(facts)
    details["release_epsilon"] = check.release_epsilon
    return ErrorBound(noise_quantile, noise_quantile + shortfall, confidence)


def merged_pure(
    sketch: MisraGries | PAMGSketch,
    universe: Universe | Iterable[Any],
    epsilon: float,
    stream: NoiseStream,
    *,
    method: str = "auto",
    mechanism: str = "M-PURE",
) -> HeavyHitterRelease:
    """M-PURE: pure DP top-k of a merged sketch with noise ``k/eps`` on all of ``U`` (docs/algorithms.md#mg-merged).

    Exact discrete Laplace of scale ``k/eps`` on the counter of **every** key of the declared
    universe (0 if not stored), then the ``k`` largest; large universes use the exact cutoff
    sampler (see :func:`~.single.pure_pp`). L1 sensitivity ``k`` after any fixed
    merge tree ([LT23, Section 8, Corollary 10]). On an unmerged sketch this is the pure mechanism of Chan et
    al. ([LT23, Section 4]). Error ``O(n/k + k log(u)/eps)``.

    Guarantee: pure ``epsilon``-DP; neighbouring as in :func:`merged_laplace`.
    """
    k, values, relation, unit, details = merged_input(sketch)
    if not isinstance(universe, Universe):
        universe = Universe.from_keys(universe)
    eps = check_eps(epsilon)
    check_stream(stream)
    validate_in_universe(values, universe)
    scale = laplace_scale_exact(k, eps)
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


# --------------------------------------------------------------------------------------------
# GSHM (Theorem 5) calibration
# --------------------------------------------------------------------------------------------

_TARGET_MARGIN = 1e-9  # calibrate against delta * (1 - margin)
_SIGMA_SLACK = 1e-11  # the exact sampler may round sigma**2 up by < 2**-40 relative


@dataclass(frozen=True)
class GSHMParameters:
    """Parameters of the Gaussian sparse histogram mechanism ([LT23, Section 8, Theorem 5 and Lemma 6]).

    GSHM adds ``N(0, sigma^2)`` to every positive count and keeps values ``>= 1 + tau``
    (docs/algorithms.md#mg-e18: the API takes the paper's ``tau``; the absolute cut is :attr:`threshold`).
    ``delta_exact = delta_GSHM(l, sigma, tau, eps) <= delta`` is re-evaluated on the exact
    ``(sigma, tau)`` used (and on ``sigma * (1 + 1e-11)``, covering the sampler's rounding).
    """

    l: int  # noqa: E741
    epsilon: float
    delta: float
    sigma: float
    tau: float
    delta_exact: float
    beta: float | None = None

    @property
    def threshold(self) -> float:
        """The absolute cut ``1 + tau``."""
        return 1.0 + self.tau

    def error_bound(self, beta: float = 0.05) -> float:
        """Theorem 12 / docs/algorithms.md#mg-oracles oracle: w.p. ``>= 1 - beta`` the privacy error is below this.

        ``1 + tau + sigma * Phi^-1(1 - beta/(2l))``: for merged / PAMG sketches
        ``|f~(x) - f(x)| < N/(k+1) + error_bound(beta)`` for all ``x`` ([LT23, Theorem 12]).
        """
        b = check_beta(beta)
        return 1.0 + self.tau + self.sigma * -NormalDist().inv_cdf(b / (2 * self.l))


def _tau_for(l: int, sigma: float, eps: float, delta: float) -> float:  # noqa: E741
    """Smallest ``tau`` meeting ``delta`` at ``sigma`` and at ``sigma (1 + 1e-11)``."""
    target = delta * (1.0 - _TARGET_MARGIN)
    hi = sigma * (1.0 + _SIGMA_SLACK)
    tau = max(gshm_threshold(l, sigma, eps, target), gshm_threshold(l, hi, eps, target))
    while max(gshm_delta(l, sigma, tau, eps), gshm_delta(l, hi, tau, eps)) > target:
        tau *= 1.0 + 1e-9  # pragma: no cover - delta_GSHM decreases in tau
    return tau


def _finish(l: int, eps: float, delta: float, sigma: float, tau: float, beta) -> GSHMParameters:  # noqa: E741
    exact = max(gshm_delta(l, sigma, tau, eps), gshm_delta(l, sigma * (1 + _SIGMA_SLACK), tau, eps))
    if exact > delta:  # pragma: no cover - guarded by _tau_for
        raise RuntimeError(f"GSHM calibration failed: delta_GSHM={exact} > delta={delta}")
    return GSHMParameters(l, eps, delta, sigma, tau, exact, beta)


@functools.lru_cache(maxsize=512)
def _gshm_for_sigma(l: int, eps: float, delta: float, sigma: float) -> GSHMParameters:  # noqa: E741
    sigma_min = analytic_gaussian_sigma(math.sqrt(l), eps, delta * (1.0 - _TARGET_MARGIN))
    if sigma <= sigma_min:
        raise ValueError(
            f"sigma={sigma!r} is too small for (epsilon={eps!r}, delta={delta!r}) with l={l}: "
            f"the Gaussian part alone needs sigma > {sigma_min:.6g}"
        )
    return _finish(l, eps, delta, sigma, _tau_for(l, sigma, eps, delta), None)


@functools.lru_cache(maxsize=512)
def _calibrate(l: int, eps: float, delta: float, beta: float) -> GSHMParameters:  # noqa: E741
    target = delta * (1.0 - _TARGET_MARGIN)
    sigma_min = analytic_gaussian_sigma(math.sqrt(l), eps, target)
    z = -NormalDist().inv_cdf(beta / (2 * l))
    memo: dict[float, float] = {}

    def proxy(sigma: float) -> float:
        if sigma not in memo:
            try:
                memo[sigma] = 1.0 + gshm_threshold(l, sigma, eps, target) + sigma * z
            except ValueError:
                memo[sigma] = math.inf
        return memo[sigma]

    ratios = [1.0 + 1e-4 * (3.0 / 1e-4) ** (i / 12) for i in range(13)]  # 1+1e-4 .. 4, geometric
    grid = [sigma_min * r for r in ratios]
    scores = [proxy(s) for s in grid]
    i = min(range(len(grid)), key=scores.__getitem__)
    lo = grid[i - 1] if i > 0 else sigma_min * (1.0 + 1e-7)
    hi = grid[i + 1] if i + 1 < len(grid) else grid[i]
    # Golden-section search on log(sigma) inside the bracket around the best grid point.
    g = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = math.log(lo), math.log(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    for _ in range(14):
        if proxy(math.exp(c)) <= proxy(math.exp(d)):
            b, d = d, c
            c = b - g * (b - a)
        else:
            a, c = c, d
            d = a + g * (b - a)
    sigma = min(memo, key=memo.__getitem__)
    return _finish(l, eps, delta, sigma, _tau_for(l, sigma, eps, delta), beta)


def calibrate_gshm(l: int, epsilon: float, delta: float, *, beta: float = 0.05) -> GSHMParameters:  # noqa: E741
    """Exact GSHM calibration for ``l`` differing counts ([LT23, Section 8, Theorem 5 and Lemma 6]).

    ``sigma_min`` solves ``Psi(eps, sqrt(l)/sigma) = delta``; over ``sigma`` from ``sigma_min``
    to ``4 sigma_min`` (13-point geometric grid, then golden-section refinement) the smallest
    ``tau`` with ``delta_GSHM(l, sigma, tau, eps) <= delta`` is found by bisection
    (:func:`beam_dpsketch.sketches.misra_gries.calibration.gshm_threshold`) and the ``sigma`` minimising the
    error proxy ``1 + tau + sigma Phi^-1(1 - beta/(2l))`` is kept. The exact condition is
    re-evaluated on the returned pair (docs/algorithms.md#mg-e10). Results are cached by
    ``(l, epsilon, delta, beta)``. A calibration evaluates ``delta_GSHM`` about 1,300 times,
    each in a few dozen terms rather than ``l``
    (:func:`~beam_dpsketch.sketches.misra_gries.calibration.gshm_delta` skips the ranges of
    ``j`` that cannot hold the maximum): about 0.1 s of CPU at ``l = 2^17``.

    The closed-form Lemma 6 parameters are deliberately not used (docs/algorithms.md#mg-e10: they need
    ``eps < 1`` and are always looser; see
    :func:`beam_dpsketch.sketches.misra_gries.calibration.gshm_closed_form_parameters`).

    Parameters
    ----------
    l
        Number of counts neighbours may differ in: ``k`` for merged and PAMG sketches (never
        ``m``, docs/algorithms.md#misra-gries), ``1`` / ``m`` only for exact histograms.
    epsilon, delta
        Target ``(epsilon, delta)``; ``0 < delta < 1``.
    beta
        Failure probability of the utility proxy, in ``(0, 1)``.
    """
    ll = check_positive_int(l, "l")
    return _calibrate(ll, check_eps(epsilon), check_approx_delta(delta), check_beta(beta))


def gshm_parameters(l: int, epsilon: float, delta: float, sigma: float) -> GSHMParameters:  # noqa: E741
    """GSHM parameters for a caller-chosen ``sigma``: the smallest valid ``tau`` ([LT23, Section 8, Theorem 5 and Lemma 6]).

    Raises ``ValueError`` if ``sigma`` is too small for the Gaussian part alone.
    """
    ll = check_positive_int(l, "l")
    if isinstance(sigma, bool) or not isinstance(sigma, int | float) or not sigma > 0:
        raise ValueError(f"sigma must be a positive number, got {sigma!r}")
    if not math.isfinite(sigma):
        raise ValueError(f"sigma must be finite, got {sigma!r}")
    return _gshm_for_sigma(ll, check_eps(epsilon), check_approx_delta(delta), float(sigma))


def gshm_release(
    values: Mapping[Any, int],
    params: GSHMParameters,
    stream: NoiseStream,
    draws: int,
) -> list[tuple[Any, float]]:
    """``c_x + N(0, sigma^2)`` on every positive key, kept iff ``>= 1 + tau`` ([LT23, Section 8, Theorem 5 and Lemma 6])."""
    keys = list(values)
    z = gaussian(stream, params.sigma, max(draws, len(keys)))[: len(keys)]
    ys = noisy_sums("gaussian", [values[x] for x in keys], z)
    return [(x, y) for x, y in zip(keys, ys, strict=True) if y >= params.threshold]


def merged_gshm(
    sketch: MisraGries | PAMGSketch,
    epsilon: float,
    delta: float,
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
    epsilon, delta
        ``epsilon > 0``, ``0 < delta < 1``.
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
            epsilon,
            delta,
            stream,
            lambda e, d: merged_gshm(
                sketch,
                e,
                d,
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
    eps = check_eps(epsilon)
    dl = check_approx_delta(delta)
    b = check_beta(beta)
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
    epsilon: float,
    delta: float,
    stream: NoiseStream,
    *,
    beta: float = 0.05,
    sigma: float | None = None,
) -> HeavyHitterRelease:
    """User-level release of a PAMG sketch (merged or not) with GSHM at ``l = k`` (Theorem 12).

    Guarantee: ``(epsilon, delta)``-DP when neighbouring streams differ by one user's set of at
    most ``m`` distinct elements, whatever ``m`` is ([LT23, Section 8, Lemma 9 and Corollary 10; Theorem 12]); shards
    must partition users (each user in exactly one shard, fixed merge order, docs/algorithms.md#mg-partition). The
    noise does not depend on ``m``: ``O(sqrt(k log(1/delta) log(k/delta))/eps)``. ``l = k``
    always, never ``m`` (docs/algorithms.md#misra-gries). See :func:`merged_gshm` for the mechanism.
    """
    if not isinstance(sketch, PAMGSketch):
        raise TypeError(f"pamg_gshm needs a PAMGSketch, got {type(sketch).__name__}")
    return merged_gshm(
        sketch, epsilon, delta, stream, beta=beta, sigma=sigma, mechanism="PAMG-GSHM"
    )


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
    kk = check_positive_int(k, "k")
    s = check_positive_int(shards, "shards")
    eps = check_eps(epsilon)
    dl = check_approx_delta(delta)
    b = check_beta(beta)
    cap = (
        None
        if max_aggregator_keys is None
        else check_positive_int(max_aggregator_keys, "max_aggregator_keys")
    )

    pp_scale = laplace_scale_exact(2 * (kk + 1), eps)
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


# --------------------------------------------------------------------------------------------
# The exactness gate: sensitivity 1 on exact counts when no sketch decremented
# --------------------------------------------------------------------------------------------

#: Mechanism names of the gate's exact branch, by noise kind.
_EXACT_NAMES = {
    "discrete_laplace": "EXACT-LAPLACE",
    "laplace": "EXACT-LAPLACE",
    "gaussian": "EXACT-GAUSSIAN",
}


def exact_histogram_release(
    counts: Mapping[Any, int],
    epsilon: float,
    delta: float,
    stream: NoiseStream,
    *,
    noise: str,
    k: int,
    confidence: float = ERROR_CONFIDENCE,
) -> tuple[list[tuple[Any, int | float]], Any, float, float]:
    """Thresholded noisy exact counts at sensitivity 1: ``(pairs, scale, threshold, t)``.

    Every key of ``counts`` gets ``f(x) + Z_x`` and is kept iff the value is at least the
    threshold; ``t`` is the two-sided ``confidence`` quantile of one ``Z_x`` (the count is exact,
    so ``|estimate - f(x)| <= t`` with probability at least ``confidence`` per key).

    * ``"discrete_laplace"``: on the lattice of step ``1/g``, ``g = noise_lattice(1/eps)``
      (docs/algorithms.md#mg-lattice): ``(g f(x) + Z_x)/g`` with ``Z_x`` discrete Laplace of
      scale ``g/eps``, threshold ``(g + t_1)/g`` with ``P[Z >= t_1] <= delta``
      (:func:`~.core.geometric_union_tail` for one draw); the returned scale is in counts;
    * ``"laplace"``: lattice Laplace of scale ``1/eps``, threshold ``1 + t_1``
      (:func:`~.core.laplace_union_tail` for one draw);
    * ``"gaussian"``: GSHM at ``l = 1`` (:func:`calibrate_gshm`), threshold ``1 + tau``.

    Guarantee: ``(epsilon, delta)``-DP for neighbouring histograms that differ by 1 in one key's
    count (a key with count 1 on one side may be absent on the other): the values of keys on both
    sides are the Laplace (Gaussian) mechanism at L1 (L2) sensitivity 1, and a key present on one
    side only, with count 1, passes the threshold with probability at most ``delta`` (Laplace;
    GSHM at ``l = 1``: [LT23, Section 8, Theorem 5], ``delta_GSHM(1, sigma, tau, eps) <=
    delta``). The noise is i.i.d. per key, ``max(k, len(counts))`` draws.
    """
    eps = check_eps(epsilon)
    dl = check_approx_delta(delta)
    keys = list(counts)
    draws = max(k, len(keys))
    if noise == "gaussian":
        params = calibrate_gshm(1, eps, dl)
        pairs = gshm_release(counts, params, stream, draws)
        t = params.sigma * (1.0 + 1e-9) * NormalDist().inv_cdf(0.5 + confidence / 2.0)
        return pairs, params.sigma, params.threshold, t
    check_noise_kind(noise)
    if noise == "discrete_laplace":
        # On the lattice of step 1/g (docs/algorithms.md#mg-lattice): g times the counts plus
        # discrete Laplace of scale g/eps, read in units of 1/g. The same mechanism at
        # sensitivity g, so the same guarantee, with a 95 % bound resolved finer than a count.
        g = noise_lattice(1.0 / eps)
        steps = laplace_scale_exact(g, eps)
        tau_steps = g + geometric_union_tail(steps, dl, 1)
        z = draw(stream, noise, steps, draws)[: len(keys)].tolist()
        pairs = [
            (x, (g * int(counts[x]) + int(zi)) / g)
            for x, zi in zip(keys, z, strict=True)
            if g * int(counts[x]) + int(zi) >= tau_steps
        ]
        t = geometric_two_sided_quantile(steps, 1.0 - confidence) / g
        return pairs, steps / g, tau_steps / g, t
    scale = laplace_scale_exact(1, eps)
    tau = 1.0 + laplace_union_tail(scale, dl, 1)
    z = draw(stream, noise, scale, draws)[: len(keys)]
    ys = noisy_sums(noise, [counts[x] for x in keys], z)
    pairs = [(x, y) for x, y in zip(keys, ys, strict=True) if y >= tau]
    return pairs, scale, tau, laplace_quantile(scale, 1.0 - confidence, noise=noise)


def exactness_gated(
    source: MisraGries | PostProcessedSum,
    epsilon: float,
    delta: float,
    stream: NoiseStream,
    sketch_release: Callable[[float, float], HeavyHitterRelease],
    *,
    noise: str,
    neighbouring: str,
    confidence: float = ERROR_CONFIDENCE,
) -> HeavyHitterRelease:
    """A Misra-Gries release behind a noisy test of whether the sketches are exact counts.

    1. **Test** (``eps_t``, :func:`~.select_count.exactness_test_calibration`): ``widest =
       min(distinct keys, k + 1)`` of the sketch (widest segment for a Design B sum) plus
       discrete Laplace noise of scale ``1/eps_t`` against a cut ``k + 1 - t``. The first draw
       of ``stream``.
    2. **Exact branch** (test passed and the counts exact): :func:`exact_histogram_release` at
       ``(eps_b, delta_b)`` with ``noise``, at sensitivity 1 instead of the sketch's.
    3. **Sketch branch** (otherwise): ``sketch_release(eps_b, delta_b)``, the paper's release,
       drawing from ``stream`` after the test.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP under add/remove of one element (with
    assumption A-PART for a sum of several segments or a merge tree), by the argument of
    :func:`~.select_count.select_candidates` (docs/algorithms.md#mg-exactness-gate): ``widest``
    has sensitivity 1 whatever the merge tree (:attr:`~.sketch.MisraGries.widest`); the ideal
    mechanism that runs the exact branch on the true histogram whenever the test passes is
    ``(eps_t + eps_b, delta_b)``-DP by adaptive composition (each branch is ``(eps_b,
    delta_b)``-DP); the real one differs from it only when an input that decremented passes
    the test, probability at most ``delta_t``, which costs ``(1 + e^epsilon) delta_t``.
    """
    k = source.k
    gate = exactness_test_calibration(epsilon, delta, k)
    exact = source.to_dict() if isinstance(source, MisraGries) else source.exact_counts()
    # The test draws first, at a fixed position: its noise never depends on the data.
    if not gate.passes(source.widest, stream) or source.widest > k or exact is None:
        # The test failed, or (probability <= test_delta, charged to delta) passed on inexact
        # sketches: the paper's release at the branch's budget.
        release = sketch_release(gate.branch_epsilon, gate.branch_delta)
        details = dict(release.details)
        details.update(_gate_facts(gate, "sketch"))
        return dataclasses.replace(release, details=details)
    pairs, scale, tau, t = exact_histogram_release(
        exact,
        gate.branch_epsilon,
        gate.branch_delta,
        stream,
        noise=noise,
        k=k,
        confidence=confidence,
    )
    details = _gate_facts(gate, "exact")
    details.update(sensitivity_l1=1)
    return make_release(
        pairs,
        mechanism=_EXACT_NAMES[noise],
        epsilon=check_eps(epsilon),
        delta=check_approx_delta(delta),
        threshold=tau,
        noise=NoiseSpec(noise, float(scale)),
        k=k,
        neighbouring=neighbouring,
        details=details,
        error=ErrorBound(float(t), float(t), confidence),
    )


def _gate_facts(gate: ExactnessTest, branch: str) -> dict[str, Any]:
    """The gate's public calibration and which branch ran (a function of the test's output)."""
    return {
        "gate_branch": branch,
        "gate_test_epsilon": gate.epsilon,
        "gate_test_delta": gate.test_delta,
        "gate_test_cut": gate.cut,
        "gate_branch_epsilon": gate.branch_epsilon,
        "gate_branch_delta": gate.branch_delta,
    }


def gated_approx_pp(
    source: PostProcessedSum,
    epsilon: float,
    delta: float,
    stream: NoiseStream,
    *,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
) -> HeavyHitterRelease:
    """Design B behind the exactness gate (:func:`exactness_gated`, discrete Laplace).

    When the test finds every segment's sketch exact, the exact counts get discrete Laplace
    noise of scale ``1/eps_b`` and the threshold of one one-sided key; otherwise
    :func:`~.single.approx_pp` at ``(eps_b, delta_b)``. Guarantee: ``(epsilon, delta)``-DP
    under add/remove of one element, A-PART for several segments.
    """
    pp = as_postprocessed(source)
    check_count_fraction(count_fraction, epsilon)
    # From the declared max_shards only, as approx_pp states it.
    relation = NEIGHBOURING_ELEMENT if pp.max_shards <= 1 else NEIGHBOURING_SHARDED
    return exactness_gated(
        pp,
        epsilon,
        delta,
        stream,
        lambda e, d: approx_pp(pp, e, d, stream, count_fraction=count_fraction),
        noise="discrete_laplace",
        neighbouring=relation,
    )
