"""The private checks that bound a Misra-Gries sketch's own error, for stated error bounds.

A sketch undercounts every key by at most its decrement total ``d <= n/(k+1)`` ([LT23, Section 2;
Section 7]). Two pure-DP statistics on independent noise (an exactness test and a noisy element
count, :class:`SketchCheck`) turn this into a bound stated from released values, which
:func:`~.pmg_release.pmg`, :func:`~.merged.merged_laplace` and :func:`~.merged.merged_gshm`
attach to their releases when given ``error_confidence``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.noise import NoiseStream, discrete_laplace
from beam_dpsketch.privacy.budget import check_epsilon
from beam_dpsketch.privacy.calibration import discrete_laplace_scale, rational_epsilon_floor
from beam_dpsketch.sketches.misra_gries.release import ErrorBound
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.tails import geometric_union_tail

__all__ = [
    "SKETCH_CHECK_FAILURE",
    "SketchCheck",
    "check_error_confidence",
    "sketch_check_calibration",
    "sketch_error_check",
    "sketch_error_check_calibration",
    "sketch_shortfall",
]

#: Probability that each of the two private checks behind a sketch's error bound misses; both
#: are counted against the bound's ``1 - confidence``.
SKETCH_CHECK_FAILURE = 1e-3
#: Share of ``k`` the exactness check leaves as its margin: a sketch of streams with up to about
#: ``(1 - SKETCH_CHECK_MARGIN) k`` distinct keys passes almost surely.
SKETCH_CHECK_MARGIN = 0.25
#: Most of a release's epsilon each of the two checks may spend.
SKETCH_CHECK_FRACTION = 0.02


@dataclass(frozen=True)
class SketchCheck:
    """Public calibration of the private checks that bound a Misra-Gries sketch's own error.

    A Misra-Gries sketch (one stream, or merged with ``MERGE_k``) undercounts every key by at
    most its decrement total ``d``, and ``d <= n/(k+1)`` ([LT23, Section 2; Section 7]); ``d``
    is 0 exactly when the stream has at most ``k`` distinct keys. Two pure-DP statistics, on
    noise independent of the release's, turn this into a bound stated from released values:

    * **exactness test** (``test_epsilon``): ``widest + Z_t <= test_cut`` with ``widest =
      min(distinct keys, k + 1)`` (:attr:`~.sketch.MisraGries.widest`, sensitivity 1) and
      ``Z_t`` discrete Laplace of scale ``test_scale``; a sketch with ``d > 0``
      (``widest = k + 1``) passes with probability at most ``failure``;
    * **element count** (``count_epsilon``): ``n_up = n + W + count_margin`` with ``W``
      discrete Laplace of scale ``count_scale`` (sensitivity 1), ``n_up < n`` with probability
      at most ``failure``.

    The sketch's shortfall bound is 0 if the test passes, else ``max(n_up, 0)/(k+1)``.
    ``release_epsilon`` is what is left for the release itself (basic composition).
    """

    test_epsilon: float
    test_scale: Fraction
    test_cut: int
    count_epsilon: float
    count_scale: Fraction
    count_margin: int
    failure: float
    release_epsilon: float

    @property
    def epsilon(self) -> float:
        """The epsilon both checks spend together."""
        return self.test_epsilon + self.count_epsilon


def sketch_check_calibration(epsilon: float, k: int) -> SketchCheck:
    """The public :class:`SketchCheck` of a release of ``epsilon`` on a sketch of size ``k``.

    The test spends just enough epsilon for a margin of ``SKETCH_CHECK_MARGIN * k`` at failure
    ``SKETCH_CHECK_FAILURE``, and the count just enough that its margin is at most half a count
    after division by ``k + 1`` (about ``2e-4`` and ``1e-4`` at ``k = 131072``); each is capped
    at ``SKETCH_CHECK_FRACTION`` of epsilon and rounded onto the ``1e-6`` grid of the exact
    samplers, so ``test_epsilon + count_epsilon + release_epsilon <= epsilon``.
    """
    eps = check_epsilon(epsilon)
    kk = check_int(k, "k")
    micro = Fraction(1, 10**6)
    total = rational_epsilon_floor(eps)  # eps' on the 1e-6 grid, <= epsilon
    cap = (total * Fraction(SKETCH_CHECK_FRACTION)) // micro * micro
    log_inv = math.log(1.0 / SKETCH_CHECK_FAILURE)

    def share(wanted: float) -> Fraction:
        grid = -(-Fraction(wanted) // micro) * micro  # rounded up: at least the margin wanted
        return max(micro, min(grid, cap))

    eps_t = share((1.0 + log_inv) / (SKETCH_CHECK_MARGIN * kk))
    eps_n = share(2.0 * (1.0 + log_inv) / (kk + 1))
    rest = total - eps_t - eps_n
    if rest < micro:
        raise ValueError(
            f"epsilon={epsilon!r} is too small to split for a stated error bound: raise epsilon"
        )
    test_scale = discrete_laplace_scale(1, eps_t)
    count_scale = discrete_laplace_scale(1, eps_n)
    release = float(rest)
    if Fraction(release) > rest:
        release = math.nextafter(release, 0.0)
    return SketchCheck(
        test_epsilon=float(eps_t),
        test_scale=test_scale,
        test_cut=kk + 1 - geometric_union_tail(test_scale, SKETCH_CHECK_FAILURE, 1),
        count_epsilon=float(eps_n),
        count_scale=count_scale,
        count_margin=geometric_union_tail(count_scale, SKETCH_CHECK_FAILURE, 1),
        failure=SKETCH_CHECK_FAILURE,
        release_epsilon=release,
    )


def sketch_shortfall(
    widest: int, n: int, k: int, check: SketchCheck, stream: NoiseStream
) -> tuple[float, dict[str, Any]]:
    """Run the two checks of :class:`SketchCheck`: ``(shortfall bound, public details)``.

    The noise comes from ``stream.substream("sketch-check")``, so it neither moves nor depends
    on the release's own draws; exactly two draws are made whatever the data. With probability
    at least ``1 - 2 * check.failure`` the bound is at least the sketch's decrement total.
    """
    sub = stream.substream("sketch-check")
    z_t = int(discrete_laplace(sub, check.test_scale, 1)[0])
    w = int(discrete_laplace(sub, check.count_scale, 1)[0])
    exact = widest + z_t <= check.test_cut
    n_up = n + w + check.count_margin
    shortfall = 0.0 if exact else max(n_up, 0) / (k + 1)
    details: dict[str, Any] = {
        "exactness_test_epsilon": check.test_epsilon,
        "exactness_test_passed": bool(exact),
        "count_check_epsilon": check.count_epsilon,
        "sketch_error_bound": shortfall,
    }
    return shortfall, details


def check_error_confidence(error_confidence: Any) -> float:
    """``error_confidence`` in ``(0, 1 - 2 * SKETCH_CHECK_FAILURE)``, through :func:`~beam_dpsketch.checks.check_real`.

    Both checks may miss, so a stated confidence leaves room for their failure probability.
    """
    top = 1.0 - 2.0 * SKETCH_CHECK_FAILURE
    return check_real(
        error_confidence, "error_confidence", 0.0, top, lower_open=True, upper_open=True
    )


def sketch_error_check_calibration(
    sketch: Any, epsilon: float, error_confidence: float | None
) -> tuple[SketchCheck | None, float]:
    """``(checks' calibration, confidence)`` of a merged release's error bound, or ``(None, 0)``.

    Only an element-level ``MisraGries`` gets a bound: for a PAMG sketch one unit changes the
    statistics of :class:`SketchCheck` by up to ``m``, which they are not calibrated for.
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
    """The per-value :class:`~.release.ErrorBound` of a release of ``sketch`` (merged or not).

    Every counter is at most the key's count and at least the count minus ``d``
    ([LT23, Section 7, merge error]); :func:`sketch_shortfall` bounds ``d`` privately,
    and ``noise_quantile`` bounds the noise except with probability at most ``1 - confidence -
    2 * check.failure``, so with probability at least ``confidence``:
    ``estimate - t <= f(x) <= estimate + t + shortfall``. ``details`` receives the checks'
    public facts.
    """
    shortfall, facts = sketch_shortfall(sketch.widest, sketch.n, sketch.k, check, stream)
    details.update(facts)
    details["release_epsilon"] = check.release_epsilon
    return ErrorBound(noise_quantile, noise_quantile + shortfall, confidence)
