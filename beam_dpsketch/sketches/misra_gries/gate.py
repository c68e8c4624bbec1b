"""The exactness gate: a noisy test of whether the sketches are exact counts before a release.

When the test passes, the exact counts are released at sensitivity 1
(:func:`exact_histogram_release`); otherwise the paper's release runs on the rest of the budget
(docs/algorithms.md#mg-exactness-gate). Used by the merged releases and by Design B
(:func:`gated_approx_pp`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from statistics import NormalDist
from typing import Any

from beam_dpsketch.checks import check_choice
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import (
    discrete_laplace_scale,
    noise_lattice,
)
from beam_dpsketch.sketches.misra_gries.design_b import (
    DEFAULT_COUNT_FRACTION,
    PostProcessedSum,
    approx_pp,
    as_postprocessed,
    check_count_fraction,
)
from beam_dpsketch.sketches.misra_gries.gshm import calibrate_gshm, gshm_release
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
    ErrorBound,
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.select_count import (
    ExactnessTest,
    exactness_test_calibration,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.tails import (
    NOISE_KINDS,
    draw,
    geometric_two_sided_quantile,
    geometric_union_tail,
    laplace_quantile,
    laplace_union_tail,
    noisy_sums,
)

__all__ = ["exact_histogram_release", "exactness_gated", "gated_approx_pp"]


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


#: Mechanism names of the gate's exact branch, by noise kind.
_EXACT_NAMES = {
    "discrete_laplace": "EXACT-LAPLACE",
    "laplace": "EXACT-LAPLACE",
    "gaussian": "EXACT-GAUSSIAN",
}


def exact_histogram_release(
    counts: Mapping[Any, int],
    budget: PrivacyBudget,
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
      (:func:`~.tails.geometric_union_tail` for one draw); the returned scale is in counts;
    * ``"laplace"``: lattice Laplace of scale ``1/eps``, threshold ``1 + t_1``
      (:func:`~.tails.laplace_union_tail` for one draw);
    * ``"gaussian"``: GSHM at ``l = 1`` (:func:`calibrate_gshm`), threshold ``1 + tau``.

    Guarantee: ``(epsilon, delta)``-DP for ``budget = PrivacyBudget.approx(epsilon, delta)``
    with ``delta > 0`` (any other budget raises ``ValueError`` naming ``budget``), for
    neighbouring histograms that differ by 1 in one key's
    count (a key with count 1 on one side may be absent on the other): the values of keys on both
    sides are the Laplace (Gaussian) mechanism at L1 (L2) sensitivity 1, and a key present on one
    side only, with count 1, passes the threshold with probability at most ``delta`` (Laplace;
    GSHM at ``l = 1``: [LT23, Section 8, Theorem 5], ``delta_GSHM(1, sigma, tau, eps) <=
    delta``). The noise is i.i.d. per key, ``max(k, len(counts))`` draws.
    """
    eps, dl = approx_budget(budget)
    keys = list(counts)
    draws = max(k, len(keys))
    if noise == "gaussian":
        params = calibrate_gshm(1, eps, dl)
        pairs = gshm_release(counts, params, stream, draws)
        t = params.sigma * (1.0 + 1e-9) * NormalDist().inv_cdf(0.5 + confidence / 2.0)
        return pairs, params.sigma, params.threshold, t
    check_choice(noise, "noise", NOISE_KINDS)
    if noise == "discrete_laplace":
        # On the lattice of step 1/g (docs/algorithms.md#mg-lattice): g times the counts plus
        # discrete Laplace of scale g/eps, read in units of 1/g. The same mechanism at
        # sensitivity g, so the same guarantee, with a 95 % bound resolved finer than a count.
        g = noise_lattice(1.0 / eps)
        steps = discrete_laplace_scale(g, eps)
        tau_steps = g + geometric_union_tail(steps, dl, 1)
        z = draw(stream, noise, steps, draws)[: len(keys)].tolist()
        pairs = [
            (x, (g * int(counts[x]) + int(zi)) / g)
            for x, zi in zip(keys, z, strict=True)
            if g * int(counts[x]) + int(zi) >= tau_steps
        ]
        t = geometric_two_sided_quantile(steps, 1.0 - confidence) / g
        return pairs, steps / g, tau_steps / g, t
    scale = discrete_laplace_scale(1, eps)
    tau = 1.0 + laplace_union_tail(scale, dl, 1)
    z = draw(stream, noise, scale, draws)[: len(keys)]
    ys = noisy_sums(noise, [counts[x] for x in keys], z)
    pairs = [(x, y) for x, y in zip(keys, ys, strict=True) if y >= tau]
    return pairs, scale, tau, laplace_quantile(scale, 1.0 - confidence, noise=noise)


def exactness_gated(
    source: MisraGries | PostProcessedSum,
    budget: PrivacyBudget,
    stream: NoiseStream,
    sketch_release: Callable[[PrivacyBudget], HeavyHitterRelease],
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
    3. **Sketch branch** (otherwise): ``sketch_release(PrivacyBudget.approx(eps_b, delta_b))``,
       the paper's release, drawing from ``stream`` after the test.

    ``budget`` is ``PrivacyBudget.approx(epsilon, delta)`` with ``delta > 0`` (any other budget
    raises ``ValueError`` naming ``budget``).

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
    epsilon, delta = approx_budget(budget)
    k = source.k
    gate = exactness_test_calibration(epsilon, delta, k)
    branch = PrivacyBudget.approx(gate.branch_epsilon, gate.branch_delta)
    exact = source.to_dict() if isinstance(source, MisraGries) else source.exact_counts()
    # The test draws first, at a fixed position: its noise never depends on the data.
    if not gate.passes(source.widest, stream) or source.widest > k or exact is None:
        # The test failed, or (probability <= test_delta, charged to delta) passed on inexact
        # sketches: the paper's release at the branch's budget.
        release = sketch_release(branch)
        details = dict(release.details)
        details.update(_gate_facts(gate, "sketch"))
        return dataclasses.replace(release, details=details)
    pairs, scale, tau, t = exact_histogram_release(
        exact,
        branch,
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
        epsilon=epsilon,
        delta=delta,
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
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
) -> HeavyHitterRelease:
    """Design B behind the exactness gate (:func:`exactness_gated`, discrete Laplace).

    When the test finds every segment's sketch exact, the exact counts get discrete Laplace
    noise of scale ``1/eps_b`` and the threshold of one one-sided key; otherwise
    :func:`~.design_b.approx_pp` at ``(eps_b, delta_b)``. Guarantee: ``(epsilon, delta)``-DP
    for ``budget = PrivacyBudget.approx(epsilon, delta)`` with ``delta > 0`` (any other budget
    raises ``ValueError`` naming ``budget``) under add/remove of one element, A-PART for
    several segments.
    """
    pp = as_postprocessed(source)
    epsilon, _ = approx_budget(budget)
    check_count_fraction(count_fraction, epsilon)
    # From the declared max_shards only, as approx_pp states it.
    relation = NEIGHBOURING_ELEMENT if pp.max_shards <= 1 else NEIGHBOURING_SHARDED
    return exactness_gated(
        pp,
        budget,
        stream,
        lambda branch: approx_pp(pp, branch, stream, count_fraction=count_fraction),
        noise="discrete_laplace",
        neighbouring=relation,
    )
