"""User-level sparse histogram of bounded exact counts with GSHM at ``l = m``.

Pure numpy, no Beam (the pipeline is :mod:`beam_dpsketch.transforms.select_count`).

Each privacy unit contributes a set of at most ``m`` distinct keys per window (bounded upstream by
a keyed hash); the histogram counts, for every key, how many units contributed it. Removing one
unit lowers at most ``m`` counts by exactly 1 and changes no other count: neighbouring
histograms differ by 1 in at most ``l = m`` counts, all in one direction, which is exactly the
precondition of the Gaussian sparse histogram mechanism (GSHM; Lebeda and Tětek, PODS 2023,
Section 8, Theorem 5, after Wilkins, Kifer, Zhang and Karrer). Every positive count gets
``N(0, sigma^2)`` and is kept iff the noisy value is ``>= 1 + tau``, with ``(sigma, tau)``
calibrated on the exact condition ``delta_GSHM(m, sigma, tau, eps) <= delta``
(:func:`~beam_dpsketch.sketches.misra_gries.gshm.calibrate_gshm` at ``l = m``).

Unlike PAMG + GSHM (``l = k``, Theorem 12), whose noise grows with the sketch size ``k``, the
noise here grows with ``sqrt(m)`` only; the price is memory: the exact histogram holds every
distinct key of the window.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from beam_dpsketch.checks import check_int, check_probability
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import NoiseStream, gaussian
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.gshm import calibrate_gshm
from beam_dpsketch.sketches.misra_gries.release import (
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.tails import (
    noisy_sums,
)

__all__ = ["exact_user_gshm", "exact_user_relation"]


def exact_user_relation(m: int) -> str:
    """Neighbouring relation of :func:`exact_user_gshm`."""
    return (
        f"add/remove one privacy unit, whose contribution is a set of at most m={m} distinct "
        "keys per window (exact counts; GSHM at l=m, Lebeda and Tetek, Section 8, Theorem 5)"
    )


def exact_user_gshm(
    counts: Mapping[Any, int],
    m: int,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    beta: float = 0.05,
) -> HeavyHitterRelease:
    """Release exact per-key unit counts with GSHM at ``l = m``.

    Parameters
    ----------
    counts
        ``{key: number of units that contributed key}`` for one window; keys with count 0 are
        absent (or ignored).
    m
        Contribution bound: distinct keys per unit and window.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1`` (any other budget
        raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream. Keys are taken in canonical order, so a retry assigns the
        same noise to the same key.
    beta
        Utility failure probability of the calibration's error proxy.

    Returns
    -------
    HeavyHitterRelease
        The keys whose noisy count is ``>= 1 + tau``, with float noisy counts.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP under add/remove of one privacy unit whose
    contribution is a set of at most ``m`` distinct keys: neighbouring histograms differ by
    exactly 1 on at most ``m`` positive counts, all in one direction, and GSHM with
    ``delta_GSHM(m, sigma, tau, eps) <= delta`` is ``(eps, delta)``-DP for such pairs (Lebeda and
    Tětek, Section 8, Theorem 5). A key is released only if its noisy count passes the
    threshold, so keys of few units stay hidden.

    **Memory.** ``O(distinct keys of the window)``: the histogram is exact.
    """
    mm = check_int(m, "m")
    eps, dl = approx_budget(budget)
    b = check_probability(beta, "beta")
    check_stream(stream)
    params = calibrate_gshm(mm, eps, dl, beta=b)
    keys = sorted((x for x, c in counts.items() if c > 0), key=encode_key)
    z = gaussian(stream, params.sigma, len(keys))
    ys = noisy_sums("gaussian", [int(counts[x]) for x in keys], z)
    pairs = [(x, y) for x, y in zip(keys, ys, strict=True) if y >= params.threshold]
    return make_release(
        pairs,
        mechanism="USER-EXACT-GSHM",
        epsilon=eps,
        delta=dl,
        threshold=params.threshold,
        noise=NoiseSpec("gaussian", params.sigma),
        k=None,
        neighbouring=exact_user_relation(mm),
        privacy_unit="user",
        details={
            "m": mm,
            "l": mm,
            "sigma": params.sigma,
            "tau": params.tau,
            "delta_exact": params.delta_exact,
            "error_bound": params.error_bound(b),
        },
    )
