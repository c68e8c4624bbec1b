"""PMG, the Private Misra-Gries release of one sequential stream ([LT23, Algorithm 2; Section 5]).

Algorithm 2 on the variant sketch with its discrete ([LT23, Section 5.2]) and lattice
(docs/algorithms.md#mg-lattice) forms, and PMG on standard Misra-Gries ([LT23, Section 5.1]).
The overview of every release is the package docstring (:mod:`beam_dpsketch.sketches.misra_gries`).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_bool, check_choice
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import (
    discrete_laplace_scale,
    noise_lattice,
)
from beam_dpsketch.sketches.misra_gries.calibration import pmg_geometric_threshold_paper
from beam_dpsketch.sketches.misra_gries.error_check import (
    check_error_confidence,
    sketch_check_calibration,
    sketch_shortfall,
)
from beam_dpsketch.sketches.misra_gries.release import (
    ErrorBound,
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
    laplace_sum_quantile,
    laplace_union_tail,
    noisy_sums,
)

__all__ = ["THRESHOLD_FORMS", "pmg", "pmg_standard"]

#: The PMG thresholds for discrete noise: ``"union_bound"`` (the default) is ``1 + 2t`` with
#: ``t`` the smallest integer whose exact two-sided geometric tail, summed over the draws that
#: can differ between neighbouring sketches, is at most ``delta`` (docs/algorithms.md#mg-e5);
#: ``"paper"`` is the probable printed constant of [LT23, Section 5.2], at most one count lower.
THRESHOLD_FORMS = ("union_bound", "paper")


def require_single_stream(sketch: Any, what: str) -> MisraGries:
    """Accept only a :class:`MisraGries` built from one sequential stream (docs/algorithms.md#mg-merged and docs/algorithms.md#misra-gries)."""
    if not isinstance(sketch, MisraGries):
        raise TypeError(
            f"{what} needs a single-stream MisraGries sketch (Algorithm 1), got "
            f"{type(sketch).__name__}"
        )
    if sketch.merged:
        raise TypeError(
            f"{what} cannot be applied to a merged sketch (provenance merged=True): the PMG "
            "structure and Algorithm 3's n and d do not survive MERGE_k "
            "([LT23, Section 7, Lemma 1 and Corollary 2], docs/algorithms.md#mg-merged). Use merged_gshm / merged_laplace / merged_pure, or "
            "Design B (PostProcessedSum per shard)."
        )
    return sketch


def pmg_parameters(
    epsilon: float,
    delta: float,
    *,
    noise: str,
    threshold_form: str,
    draws: int,
    lattice: int = 1,
) -> tuple[Fraction, float | int, str]:
    """``(scale, threshold, mechanism name)`` of a PMG-type release with ``draws`` tail draws.

    ``draws`` is 6 for the variant sketch (Lemma 5: 4 per-key + 2 shared) and ``2(k+1)`` for
    standard MG ([LT23, Section 5.1; Section 5.2]). Threshold ``1 + 2t`` where ``t`` bounds each draw's tail by
    ``delta / draws``.

    ``lattice = g > 1`` (discrete noise, ``"union_bound"`` threshold only) gives the parameters of the
    same mechanism on ``g`` times the counts, in lattice steps: scale ``g / eps'`` and
    threshold ``g + 2t`` with ``t`` the tail of that scale (docs/algorithms.md#mg-lattice).
    """
    check_choice(noise, "noise", NOISE_KINDS)
    threshold_form = check_choice(threshold_form, "threshold_form", THRESHOLD_FORMS)
    if lattice != 1 and (noise != "discrete_laplace" or threshold_form != "union_bound"):
        raise ValueError(
            "lattice applies to noise='discrete_laplace' with threshold_form='union_bound' only"
        )
    scale = discrete_laplace_scale(lattice, epsilon)
    if noise == "discrete_laplace":
        if threshold_form == "paper":
            if draws != 6:
                raise ValueError(
                    "threshold_form='paper' exists only for the variant sketch ([LT23, Section 5.2])"
                )
            tau_p = pmg_geometric_threshold_paper(float(1 / scale), delta)
            return scale, math.ceil(tau_p * (1.0 + 1e-12)), "PMG-geo"
        return scale, lattice + 2 * geometric_union_tail(scale, delta, draws), "PMG-geo"
    if threshold_form != "union_bound":
        raise ValueError("threshold_form='paper' applies to noise='discrete_laplace' only")
    return scale, 1.0 + 2.0 * laplace_union_tail(scale, delta, draws), "PMG"


def pmg_noisy(
    slots: list[tuple[Any, int]],
    k: int,
    noise: str,
    scale: Fraction,
    threshold: float | int,
    stream: NoiseStream,
    *,
    per_key_eta: bool = False,
    leading_dummies: int = 0,
) -> list[tuple[Any, int | float]]:
    """The core of Algorithm 2: ``y_x = c_x + eta + Z_x``, keep ``y_x >= threshold``.

    Exactly one shared ``eta`` per release and one fresh draw per slot; ``k + 1`` draws are
    made whatever the number of slots (data-independent noise consumption). Slots whose key is
    ``None`` (dummies) get noise and are never output; ``leading_dummies`` dummy slots before
    ``slots`` (:meth:`MisraGries.key_slots` after :attr:`MisraGries.dummy_slots`) consume their
    draws without being listed, so the noise of every key is that of :meth:`MisraGries.slots`.
    ``per_key_eta=True`` draws ``eta`` per key: it exists only so tests can show that this
    mutation breaks privacy (docs/algorithms.md#mg-oracles).
    """
    z = draw(stream, noise, scale, k + 1)
    eta = z[:1]
    first = 1 + leading_dummies
    per_key = z[first : first + len(slots)]
    if per_key_eta:
        etas = draw(stream, noise, scale, k)[leading_dummies : leading_dummies + len(slots)]
    else:
        etas = np.repeat(eta, len(slots))
    values = noisy_sums(noise, [c for _, c in slots], etas, per_key)
    return [
        (key, y)
        for (key, _), y in zip(slots, values, strict=True)
        if key is not None and y >= threshold
    ]


def pmg_noisy_sketch(
    sketch: MisraGries,
    noise: str,
    scale: Fraction,
    threshold: float | int,
    stream: NoiseStream,
    lattice: int = 1,
) -> list[tuple[Any, int | float]]:
    """:func:`pmg_noisy` over all ``k`` slots of ``sketch`` in the fixed order, listing only its
    real keys: the dummies' draws are consumed, never computed, so the cost follows the keys
    held, not ``k``. ``lattice = g``: the counts enter as ``g`` times their value (``scale``
    and ``threshold`` in the same steps, :func:`pmg_parameters`) and the values are returned in
    lattice steps."""
    slots = sketch.key_slots()
    if lattice != 1:
        slots = [(key, c * lattice) for key, c in slots]
    return pmg_noisy(
        slots,
        sketch.k,
        noise,
        scale,
        threshold,
        stream,
        leading_dummies=sketch.dummy_slots,
    )


def pmg(
    sketch: MisraGries,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    noise: str = "discrete_laplace",
    threshold_form: str = "union_bound",
    error_confidence: float | None = None,
    lattice: bool | None = None,
) -> HeavyHitterRelease:
    """Private Misra-Gries (PMG, Algorithm 2 of Lebeda and Tetek): the default single-stream release.

    Every one of the ``k`` slots of the Algorithm-1 variant sketch (zero-count keys and dummies
    included) gets ``c_x + eta + Z_x``, with **one** shared draw ``eta`` per release and a fresh
    ``Z_x`` per slot, both with scale ``1/eps``; keys (never dummies) whose value is
    ``>= threshold`` are released, sorted by canonical key order.

    Guarantee: ``(epsilon, delta)``-DP, neighbouring streams differ by adding/removing one
    element ([LT23, Definition 1]), for every ``epsilon > 0`` and ``0 < delta < 1`` (Lemma 6). Paper:
    Lebeda and Tetek (PODS 2023 / TODS 2025), Algorithm 2, Lemmas 3-6, Theorem 8; [LT23, Algorithm 2; Section 5.2; Lemma 7 and Theorem 8].

    * ``noise="discrete_laplace"`` (default, **PMG-geo**, [LT23, Section 5.2] and docs/algorithms.md#noise-sampling): exact
      ``Geo2(exp(-eps'))`` draws, integer outputs with ``lattice=False`` (multiples of ``1/g``
      by default, see below), threshold
      ``tau_geo = 1 + 2 t*`` with ``t* = ceil(ln(6 e^eps / ((1 + e^eps) delta)) / eps)``
      (docs/algorithms.md#mg-e5: the paper's expression is lost; this is the library's derived, conservative
      form). ``threshold_form="paper"`` uses the probable paper form
      ``ceil(1 + 2 ln(6 e^eps / ((1 + e^eps) delta)) / eps)`` ((third-party code), at most one count
      lower, also valid).
    * ``noise="laplace"`` (**PMG**): Laplace noise on a fine lattice and threshold
      ``1 + 2 ln(3/delta)/eps`` (authors' code, commit b025ca3), raised by ``~2**-20/eps`` for
      the lattice tail (module :mod:`.tails`).

    With discrete noise and the ``"union_bound"`` threshold the release runs, by default, on a lattice
    finer than one count (docs/algorithms.md#mg-lattice): with ``g``
    (:func:`~beam_dpsketch.privacy.calibration.noise_lattice` of ``1/eps``, 16 at ``eps = 1``)
    every slot gets ``g c_x + eta + Z_x`` with both draws of scale ``g/eps``, the threshold is
    ``g + 2t`` for that scale, and values and threshold are read in units of ``1/g``. This is
    Algorithm 2 on the counts times ``g``, whose neighbours differ by ``g`` in one counter or
    in all of them, so the guarantee is the same; the stated error bound then holds at close to
    its confidence instead of the integer noise's next level (96.9 % for a stated 95 % at
    ``eps = 1``). Released values are multiples of ``1/g`` (floats).

    Utility (Theorem 8): w.p. ``>= 1 - beta`` every key satisfies
    ``f(x) - n/(k+1) - tau - B < f~(x) <= f(x) + B`` with ``B = 2 ln((k+1)/beta)/eps``.

    Parameters
    ----------
    sketch
        A :class:`~beam_dpsketch.sketches.misra_gries.sketch.MisraGries` built from **one** sequential
        stream. A merged sketch (``merged=True``) raises ``TypeError`` ([LT23, Section 7] and docs/algorithms.md#misra-gries): its
        neighbours need not differ in PMG's "one counter or all counters" way ([LT23, Section 7, Lemma 1 and Corollary 2]).
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1``
        (docs/algorithms.md#mg-e9); ``epsilon`` is rounded down to a multiple of ``1e-6`` for
        the exact samplers. Any other budget raises ``ValueError`` naming ``budget``.
    stream
        The release's :class:`~beam_dpsketch.noise.NoiseStream`; use one stream (one release id)
        per release.
    noise
        ``"discrete_laplace"`` or ``"laplace"``.
    threshold_form
        ``"union_bound"`` (default: the union bound over the six draws on the exact tail of
        the noise, docs/algorithms.md#mg-e5) or ``"paper"``
        (the probable printed form; discrete noise only).
    error_confidence
        ``None`` (default): the paper's release, no error bound. A confidence such as
        ``0.95``: every released value carries ``release.error``, a per-value (marginal)
        statement: for each released key separately, with probability at least
        ``error_confidence`` over the noise, ``estimate - t <= f(x) <= estimate + t + s``.
        ``t`` is the two-sided quantile of the shared plus the per-key draw
        (:func:`~.tails.laplace_sum_quantile`); ``s`` bounds the sketch's undercount
        (at most ``d <= n/(k+1)``): 0 when a private test finds that the stream has at most
        about ``3k/4`` distinct keys (then ``d = 0``), else a private upper bound on
        ``n/(k+1)`` (:class:`~.error_check.SketchCheck`). The two checks spend a small share of
        ``epsilon`` (about ``3e-4`` at ``k = 131072``, at most 2 % each) and PMG runs on the
        rest; ``release.details`` records the split.
    lattice
        ``None`` (default): the lattice release above for ``noise="discrete_laplace"`` with
        ``threshold_form="union_bound"``, the paper's integer (or fine-lattice ``"laplace"``) form
        otherwise. ``False``: the paper's integer form of Algorithm 2 (outputs identical to
        the paper's mechanism). ``True``: the lattice release (``ValueError`` where it does
        not apply).
    """
    require_single_stream(sketch, "pmg")
    eps, dl = approx_budget(budget)
    check_stream(stream)
    check = None
    eps_release = eps
    if error_confidence is not None:
        conf = check_error_confidence(error_confidence)
        check = sketch_check_calibration(eps, sketch.k)
        eps_release = check.release_epsilon
    threshold_form = check_choice(threshold_form, "threshold_form", THRESHOLD_FORMS)
    if lattice is None:
        lattice = noise == "discrete_laplace" and threshold_form == "union_bound"
    else:
        lattice = check_bool(lattice, "lattice")
    g = noise_lattice(float(discrete_laplace_scale(1, eps_release))) if lattice else 1
    # Scale, threshold and values below are in lattice steps of 1/g counts.
    scale, tau, name = pmg_parameters(
        eps_release, dl, noise=noise, threshold_form=threshold_form, draws=6, lattice=g
    )
    pairs = pmg_noisy_sketch(sketch, noise, scale, tau, stream, lattice=g)
    release_eps = float(g / scale)
    if g != 1:
        # g is a power of two, so each division is exact in float64.
        pairs = [(key, y / g) for key, y in pairs]
        tau = tau / g
    details: dict[str, Any] = {
        "epsilon_effective": release_eps,
        "threshold_form": threshold_form,
        "lattice": g,
    }
    error = None
    if check is not None:
        shortfall, facts = sketch_shortfall(sketch.widest, sketch.n, sketch.k, check, stream)
        # The shared and the per-key draw add up in every value; both checks may miss.
        t = laplace_sum_quantile(scale, 1.0 - conf - 2.0 * check.failure, noise=noise) / g
        error = ErrorBound(t, t + shortfall, conf)
        details.update(facts)
        details["epsilon_effective"] = release_eps + check.epsilon
        details["release_epsilon"] = release_eps
    return make_release(
        pairs,
        mechanism=name,
        epsilon=eps,
        delta=dl,
        threshold=tau,
        noise=NoiseSpec(noise, float(scale / g), float(scale / g)),
        k=sketch.k,
        details=details,
        error=error,
    )


def pmg_standard(
    sketch: MisraGries,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    noise: str = "discrete_laplace",
) -> HeavyHitterRelease:
    """PMG on **standard** Misra-Gries (zero-count keys deleted): Section 5.1 of the paper.

    Noise as in :func:`pmg` (one shared draw plus one per key, scale ``1/eps``) but only on the
    stored **positive** keys, with a larger threshold because neighbouring standard sketches
    can differ in up to ``k`` keys ([LT23, Section 5, Lemma 2], [LT23, Section 5.1]):

    * Laplace: ``tau_std = 1 + 2 ln((k+1)/delta)/eps`` (docs/algorithms.md#mg-e4: kept over the derived
      ``(k+2)/(2 delta)`` form, which it dominates);
    * discrete (default): ``1 + 2 t*`` with ``t*`` for ``2(k+1)`` draws ([LT23, Section 5.2], "For
      standard MG, replace the 6 by 2(k+1)").

    Guarantee: ``(epsilon, delta)``-DP under add/remove of one element ([LT23, Definition 1]), for a
    single-stream sketch (merged sketches raise ``TypeError``). Parameters as in :func:`pmg`.
    """
    require_single_stream(sketch, "pmg_standard")
    eps, dl = approx_budget(budget)
    check_stream(stream)
    k = sketch.k
    scale, tau, name = pmg_parameters(
        eps, dl, noise=noise, threshold_form="union_bound", draws=2 * (k + 1)
    )
    slots = list(sketch.to_dict().items())
    pairs = pmg_noisy(slots, k, noise, scale, tau, stream)
    return make_release(
        pairs,
        mechanism=name + "-std",
        epsilon=eps,
        delta=dl,
        threshold=tau,
        noise=NoiseSpec(noise, float(scale), float(scale)),
        k=k,
        details={"epsilon_effective": float(1 / scale)},
    )
