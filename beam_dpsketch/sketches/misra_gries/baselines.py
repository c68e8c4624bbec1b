"""Baselines for comparing the DP Misra-Gries releases in experiments ([LT23, Section 4]).

* Chan, Li, Shi and Xu (PETS 2012): noise scaled to MG's global sensitivity ``k`` ([LT23, Section 4]);
* the stability-based sparse histogram of Korolova et al. (WWW 2009) on **exact** counts, the
  non-streaming gold standard (docs/algorithms.md#mg-baselines), and its Gaussian (GSHM) form.

The published Boehler-Kerschbaum mechanism ([LT23, Section 4]) is **not** private and is deliberately not
provided (it exists only as a negative control inside the tests); its corrected version is
:func:`chan_thresholded`.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from beam_dpsketch.checks import check_choice, check_int, check_probability
from beam_dpsketch.hashing import canonical_key, canonical_keys, encode_key
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.misra_gries.gshm import calibrate_gshm, gshm_release
from beam_dpsketch.sketches.misra_gries.merged import merged_laplace, merged_pure
from beam_dpsketch.sketches.misra_gries.release import (
    NEIGHBOURING_ELEMENT,
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.tails import (
    NOISE_KINDS,
    draw,
    geometric_union_tail,
    laplace_union_tail,
    noisy_sums,
)
from beam_dpsketch.sketches.misra_gries.universe import (
    Universe,
)
from beam_dpsketch.sketches.misra_gries.user import user_set_relation

__all__ = ["chan_pure", "chan_thresholded", "gaussian_histogram", "stability_histogram"]


def _require_mg(sketch: Any) -> MisraGries:
    if not isinstance(sketch, MisraGries):
        raise TypeError(f"expected a MisraGries sketch, got {type(sketch).__name__}")
    return sketch


def chan_pure(
    sketch: MisraGries,
    universe: Universe | Iterable[Any],
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    method: str = "auto",
) -> HeavyHitterRelease:
    """Chan et al. (2012), pure: ``Lap(k/eps)`` on the MG counter of every key of ``U``, top-k.

    Uses MG's global L1 sensitivity ``k`` under add/remove neighbours ([LT23, Section 2; Section 4];
    Chan et al. stated a different constant for their replace-one relation). Exact discrete
    Laplace, exact large-universe sampler (as :func:`~.merged.merged_pure`).
    Guarantee: pure ``epsilon``-DP for ``budget = PrivacyBudget.pure(epsilon)`` (any other
    budget raises ``ValueError`` naming ``budget``), add/remove one element. Error
    ``O(n/k + k log(u)/eps)``; the trade-off between ``n/k`` and ``k/eps`` floors it near
    ``sqrt(n log(1/delta)/eps)``.
    """
    return merged_pure(
        _require_mg(sketch), universe, budget, stream, method=method, mechanism="Chan-pure"
    )


def chan_thresholded(
    sketch: MisraGries,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    noise: str = "discrete_laplace",
) -> HeavyHitterRelease:
    """Chan et al. (2012), thresholded: ``Lap(k/eps)`` on stored keys plus a threshold ([LT23, Section 4]).

    Calibrated as M-LAP (docs/algorithms.md#mg-merged): keep values ``>= 1 + (k/eps) ln(k/(2 delta))`` (discrete:
    the ``Geo2`` analogue). Also the corrected Boehler-Kerschbaum baseline ([LT23, Section 4]).
    Guarantee: ``(epsilon, delta)``-DP for ``budget = PrivacyBudget.approx(epsilon, delta)``
    with ``delta > 0`` (any other budget raises ``ValueError`` naming ``budget``), add/remove
    one element. Error ``O(n/k + k log(k/delta)/eps)``.
    """
    return merged_laplace(
        _require_mg(sketch), budget, stream, noise=noise, mechanism="Chan-threshold"
    )


def _as_counts(counts: Mapping[Any, int] | Iterable[Any]) -> dict[Any, int]:
    """Exact histogram: a mapping of positive int counts, or the raw keys to count."""
    if isinstance(counts, Mapping):
        out: dict[Any, int] = {}
        for key, c in counts.items():
            if isinstance(c, bool) or not isinstance(c, numbers.Integral) or c < 0:
                # The count is data: name its type, never its value.
                raise ValueError(
                    "counts must be non-negative ints: got a negative or non-integer value "
                    f"of type {type(c).__name__}"
                )
            if c > 0:
                x = canonical_key(key)
                out[x] = out.get(x, 0) + int(c)
    else:
        if isinstance(counts, str | bytes):
            raise TypeError("counts must be a mapping or a collection of keys")
        out = dict(Counter(canonical_keys(list(counts))))
    return {x: out[x] for x in sorted(out, key=encode_key)}


def stability_histogram(
    counts: Mapping[Any, int] | Iterable[Any],
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    noise: str = "discrete_laplace",
) -> HeavyHitterRelease:
    """Stability-based sparse histogram on exact counts (Korolova et al. 2009; docs/algorithms.md#mg-baselines).

    ``Lap(1/eps)`` on every non-zero count, kept iff ``>= tau_hist = 1 + ln(1/(2 delta))/eps``
    (Laplace; one new key of count 1) or ``>= 1 + t`` with ``P[Geo2(exp(-eps)) >= t] <= delta``
    (discrete, default). Memory ``O(#distinct keys)``: the gold standard that PMG matches up to a
    constant factor when ``n/(k+1)`` is negligible. Error below ``tau_hist + ln(K/beta)/eps``
    w.p. ``1 - beta`` (``K`` non-zero keys).

    Guarantee: ``(epsilon, delta)``-DP under add/remove of one element ([LT23, Definition 1]).

    Parameters
    ----------
    counts
        Exact histogram (mapping key -> count) or the stream's keys.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1`` (any other budget
        raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream.
    noise
        ``"discrete_laplace"`` or ``"laplace"``.
    """
    values = _as_counts(counts)
    eps, dl = approx_budget(budget)
    check_choice(noise, "noise", NOISE_KINDS)
    check_stream(stream)
    scale = discrete_laplace_scale(1, eps)
    if noise == "discrete_laplace":
        tau: float | int = 1 + geometric_union_tail(scale, dl, 1)
    else:
        tau = 1.0 + laplace_union_tail(scale, dl, 1)
    keys = list(values)
    ys = noisy_sums(noise, [values[x] for x in keys], draw(stream, noise, scale, len(keys)))
    return make_release(
        [(x, y) for x, y in zip(keys, ys, strict=True) if y >= tau],
        mechanism="stability-histogram",
        epsilon=eps,
        delta=dl,
        threshold=tau,
        noise=NoiseSpec(noise, float(scale)),
        k=None,
        details={"epsilon_effective": float(1 / scale)},
    )


def gaussian_histogram(
    counts: Mapping[Any, int] | Iterable[Any],
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    max_contributions: int = 1,
    beta: float = 0.05,
) -> HeavyHitterRelease:
    """GSHM on exact counts: the Gaussian gold standard ([LT23, Section 8] and docs/algorithms.md#mg-baselines).

    ``l = 1`` for element-level data; ``l = m`` (``max_contributions``) when each user adds at
    most ``m`` **distinct** keys, each count then being the number of users holding the key (the
    exact histogram changes by 1 in at most ``m`` counts; this ``l = m`` is valid for the exact
    histogram only, never for MG or PAMG sketches, docs/algorithms.md#misra-gries). Calibration: exact
    ``delta_GSHM`` (:func:`~.gshm.calibrate_gshm`).

    Guarantee: ``(epsilon, delta)``-DP for ``budget = PrivacyBudget.approx(epsilon, delta)``
    with ``delta > 0`` (any other budget raises ``ValueError`` naming ``budget``) under
    add/remove of one element (``m = 1``) or of one user's set of at most ``m`` distinct
    elements.
    """
    values = _as_counts(counts)
    eps, dl = approx_budget(budget)
    m = check_int(max_contributions, "max_contributions")
    b = check_probability(beta, "beta")
    check_stream(stream)
    params = calibrate_gshm(m, eps, dl, beta=b)
    pairs = gshm_release(values, params, stream, len(values))
    return make_release(
        pairs,
        mechanism="GSHM-histogram",
        epsilon=eps,
        delta=dl,
        threshold=params.threshold,
        noise=NoiseSpec("gaussian", params.sigma),
        k=None,
        neighbouring=NEIGHBOURING_ELEMENT if m == 1 else user_set_relation(m),
        privacy_unit="element" if m == 1 else "user",
        details={
            "l": m,
            "sigma": params.sigma,
            "tau": params.tau,
            "delta_exact": params.delta_exact,
        },
    )
