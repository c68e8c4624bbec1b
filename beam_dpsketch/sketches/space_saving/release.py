"""DP SpaceSaving: noisy counts of the monitored labels above a noisy cut, and its calibration.

The release rule follows R. Holland, "An Iconic Heavy Hitter Algorithm Made Private" (arXiv
2512.17295, 2025): independent noise of scale ``O(1/eps)`` on every SpaceSaving counter (no
noise shared between them), and a label is kept only when its noisy count clears the sketch's
minimum bound ``n/k + 1`` by a noise tail, which suppresses the labels that one element can
change. The paper's proof was not available to us; the privacy argument below, the neighbour
model (add/remove, with the stream length ``n`` noised instead of used exactly) and the
constants are derived here (docs/algorithms.md#space-saving):

* Structure (checked exhaustively on small streams by the tests, with the tie-break of
  :class:`~beam_dpsketch.sketches.space_saving.SpaceSaving`): removing one element from a
  stream leaves at most 2 labels monitored on one side only, each with a count of at most
  ``c_min + 1 <= floor(n/k) + 1`` on its side, and changes the counts of the common labels by
  at most 1 in L1.
* Release: a noisy upper bound ``b_up`` on the sketch's minimum count, either from the stream
  length (``cut="rows"``: ``n_hat = n + Z0``, ``b_up = floor((n_hat + g)/k)``, as the paper's
  ``n/k + 1 + gamma`` with ``n`` noised) or from the minimum itself (``cut="minimum"``, the
  default: ``b_up = c_min + Z0 + g``, since ``c_min`` also moves by at most 1); ``Z0`` is
  discrete Laplace of sensitivity 1 on an epsilon share ``eps_n`` and ``g`` makes ``b_up``
  fall below its quantity with probability at most ``p_n``. Every label gets ``y = c + Z``
  (discrete Laplace of scale ``1/eps_r``) and is kept when ``y - b_up > t``, ``t`` the smallest
  integer with ``P[Z >= t] <= p_g``.
* Privacy: the noisy length (or minimum) and the noisy common counts are an
  ``eps_n + eps_r = eps`` pure-DP vector (sensitivities 1 and 1); a label on one side only has
  count at most ``c_min + 1 <= b_up + 1`` unless ``b_up`` fell short, so it is kept only with
  probability at most ``p1 = p_n + 2 p_g``. Removing that event on both sides gives
  ``(eps, p1 + e^eps p1)``-DP; the calibration sets ``p1 = delta / (1 + e^eps)``, with
  ``p_n = p1 / 2`` and ``p_g = p1 / 4``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from beam_dpsketch.checks import check_choice, check_real
from beam_dpsketch.noise import NoiseStream, check_stream, discrete_laplace
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    ErrorBound,
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.tails import (
    geometric_two_sided_quantile,
    geometric_union_tail,
)
from beam_dpsketch.sketches.space_saving.sketch import SpaceSaving

__all__ = [
    "CUTS",
    "DEFAULT_CUT_FRACTION",
    "NEIGHBOURING_SPACE_SAVING",
    "SpaceSavingCalibration",
    "calibrate_space_saving",
    "check_cut_fraction",
    "dp_space_saving",
]

#: Default share of epsilon spent on the noisy bound behind the cut, per ``cut``: the stream
#: length's noise is divided by ``k``, the minimum's is not.
DEFAULT_CUT_FRACTION = {"minimum": 0.4, "rows": 0.05}
#: What the cut's noisy bound on the minimum count is computed from.
CUTS = ("minimum", "rows")
#: The neighbouring relation of the release.
NEIGHBOURING_SPACE_SAVING = (
    "add/remove one stream element (the stream is one sequential SpaceSaving run per window)"
)
#: Labels present on one side only of two neighbouring streams, at most (tested exhaustively).
UNSTABLE_LABELS = 2


@dataclass(frozen=True)
class SpaceSavingCalibration:
    """The public calibration of one DP SpaceSaving release (a function of its parameters).

    Attributes
    ----------
    cut
        ``"minimum"`` or ``"rows"``: what the noisy bound ``b_up`` on the minimum count reads.
    bound_epsilon, release_epsilon
        The epsilon shares of that noisy bound and of the counters.
    bound_scale, scale
        Discrete Laplace scales (exact fractions) of the bound's draw and of each counter.
    bound_margin
        ``g``: the noisy quantity plus ``g`` is below the true one with probability at most
        ``p_n``.
    threshold
        ``t``: a label is kept when its noisy count minus ``b_up`` exceeds ``t``.
    noise_quantile
        Two-sided noise quantile of the per-value error bound.
    unstable_failure
        ``p1 = p_n + 2 p_g``, the probability that a label monitored on one side only is kept.
    """

    cut: str
    bound_epsilon: float
    release_epsilon: float
    bound_scale: Fraction
    scale: Fraction
    bound_margin: int
    threshold: int
    noise_quantile: int
    unstable_failure: float


def check_cut_fraction(cut_fraction: Any) -> float:
    """``cut_fraction`` as a float in ``(0, 1)`` (``ValueError`` naming it otherwise)."""
    return check_real(cut_fraction, "cut_fraction", 0.0, 1.0, lower_open=True, upper_open=True)


def calibrate_space_saving(
    epsilon: float,
    delta: float,
    cut_fraction: float | None = None,
    cut: str = "minimum",
) -> SpaceSavingCalibration:
    """The calibration of :func:`dp_space_saving` at ``(epsilon, delta)`` (public parameters)."""
    check_choice(cut, "cut", CUTS)
    cf = check_cut_fraction(DEFAULT_CUT_FRACTION[cut] if cut_fraction is None else cut_fraction)
    eps_n, eps_r = epsilon * cf, epsilon * (1.0 - cf)
    bound_scale = discrete_laplace_scale(1, eps_n)
    scale = discrete_laplace_scale(1, eps_r)
    p1 = delta / (1.0 + math.exp(epsilon))
    # P[Z0 <= -(g + 1)] = P[Z0 >= g + 1] <= p1 / 2.
    g = max(0, geometric_union_tail(bound_scale, p1 / 2.0, 1) - 1)
    # Each of the (at most 2) unstable labels passes with probability at most p1 / 4.
    t = geometric_union_tail(scale, p1 / 2.0, UNSTABLE_LABELS)
    # The stated error bound holds with ERROR_CONFIDENCE, the n_up failure included.
    quantile = geometric_two_sided_quantile(scale, 1.0 - ERROR_CONFIDENCE - p1 / 2.0)
    return SpaceSavingCalibration(cut, eps_n, eps_r, bound_scale, scale, g, t, quantile, p1)


def dp_space_saving(
    sketch: SpaceSaving,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    cut_fraction: float | None = None,
    cut: str = "minimum",
) -> HeavyHitterRelease:
    """DP SpaceSaving: the monitored labels whose noisy count clears the noisy cut.

    Draws the noisy bound ``b_up`` on the minimum count first (from ``c_min`` or from the
    stream length, ``cut``), then one discrete Laplace draw per monitored label in canonical
    key order, and keeps ``(x, c + Z)`` when ``c + Z - b_up > t`` (module docstring;
    docs/algorithms.md#space-saving). Every kept value over-estimates its key's count by at
    most ``c_min`` before noise, so each carries the bound ``[y - q - b_up, y + q]`` with ``q``
    the noise quantile, at :data:`~beam_dpsketch.sketches.misra_gries.release.ERROR_CONFIDENCE`
    (the chance that ``b_up`` falls short included).

    Guarantee: ``(epsilon, delta)``-DP under add/remove of one element of the sketched stream
    (derived here from the structural facts the tests check exhaustively on small streams; see
    docs/algorithms.md#space-saving for what is derived and what is the paper's).

    Parameters
    ----------
    sketch
        One sequential :class:`SpaceSaving` run (a merge of two non-empty sketches raises
        ``TypeError``: the structural facts hold for one run only).
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1`` (any other raises
        ``ValueError`` naming ``budget``).
    stream
        The release's noise stream.
    cut_fraction
        Share of epsilon spent on the noisy bound, in ``(0, 1)`` (default
        :data:`DEFAULT_CUT_FRACTION` of ``cut``).
    cut
        ``"minimum"`` (default): the bound is the sketch's minimum count plus noise, sensitivity
        1; ``"rows"``: ``floor(n/k)`` with the stream length ``n`` noised, the paper's cut.
    """
    if not isinstance(sketch, SpaceSaving):
        raise TypeError(f"sketch must be a SpaceSaving, got {type(sketch).__name__}")
    if sketch.merged:
        raise TypeError(
            "dp_space_saving releases one sequential SpaceSaving run; a merge of non-empty "
            "sketches has no analysed sensitivity"
        )
    eps, dl = approx_budget(budget)
    check_stream(stream)
    cal = calibrate_space_saving(eps, dl, cut_fraction, cut)
    z0 = int(discrete_laplace(stream, cal.bound_scale, 1)[0])
    details: dict[str, Any] = {}
    noisy_count = None
    if cal.cut == "rows":
        noisy_count = sketch.n + z0
        rows_up = max(0, noisy_count + cal.bound_margin)
        bound = rows_up // sketch.k
        details["rows_upper_bound"] = rows_up
    else:
        bound = max(0, sketch.c_min + z0 + cal.bound_margin)
    counts = sketch.to_dict()
    noise = discrete_laplace(stream, cal.scale, len(counts)).tolist()
    level = bound + cal.threshold
    pairs = [
        (x, c + int(z)) for (x, c), z in zip(counts.items(), noise, strict=True) if c + z > level
    ]
    details.update(
        cut=cal.cut,
        bound_epsilon=cal.bound_epsilon,
        release_epsilon=cal.release_epsilon,
        bound_noise_scale=float(cal.bound_scale),
        bound_margin=cal.bound_margin,
        minimum_upper_bound=bound,
        level=level,
        epsilon_effective=float(1 / cal.bound_scale + 1 / cal.scale),
    )
    return make_release(
        pairs,
        mechanism="DP SpaceSaving",
        epsilon=eps,
        delta=dl,
        threshold=float(cal.threshold),
        noise=NoiseSpec("discrete_laplace", float(cal.scale)),
        k=sketch.k,
        neighbouring=NEIGHBOURING_SPACE_SAVING,
        details=details,
        noisy_count=noisy_count,
        error=ErrorBound(
            below=float(cal.noise_quantile + bound),
            above=float(cal.noise_quantile),
            confidence=ERROR_CONFIDENCE,
        ),
    )
