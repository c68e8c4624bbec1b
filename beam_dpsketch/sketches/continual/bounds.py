"""Kind names, sensitivity and the a-priori bounds and sizing of the continual sketches.

These are pure functions of public parameters, needed to choose a sketch's shape and read its
accuracy before any sketch exists, so they live apart from the sketches themselves
([Hol25, Lemma 5]; citation keys as in ``docs/algorithms.md#references``).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from beam_dpsketch.checks import check_choice, check_int, check_probability
from beam_dpsketch.hashing import MAX_DEPTH, MAX_WIDTH
from beam_dpsketch.privacy.budget import check_delta, check_epsilon
from beam_dpsketch.sketches.continual.binary_mechanism import gaussbm_height, gaussbm_sigma

__all__ = [
    "CONTINUAL_SKETCH_KINDS",
    "CS_SENSITIVITIES",
    "KINDS",
    "Kind",
    "check_kind",
    "default_m",
    "kind_from_code",
    "lazy_noise_bound",
    "lazy_noise_bound_paper",
    "lazy_shape",
]

Kind = Literal["count-min", "count-sketch"]
#: ``kind`` names (as in the other DP sketches and transforms).
KINDS: tuple[str, ...] = ("count-min", "count-sketch")
#: ``kind`` names and the short code each maps to in noise keys and serialized bytes: the codes
#: are part of both, so they stay as they are while the public name is the hyphenated one.
CONTINUAL_SKETCH_KINDS: dict[str, str] = {"count-min": "cms", "count-sketch": "cs"}
_KIND_OF_CODE: dict[str, str] = {code: name for name, code in CONTINUAL_SKETCH_KINDS.items()}
CS_SENSITIVITIES: tuple[str, ...] = ("corrected_4d", "paper_2d")
# Median over rows of the Count Sketch: the paper's Lemma 3 constant ([Hol25, Lemma 5], docs/algorithms.md#lazy-e15).
_KL_HALF_THIRD = 0.5 * math.log(0.5 / (1 / 3)) + 0.5 * math.log(0.5 / (2 / 3))

# --------------------------------------------------------------------------------------------
# Bounds and sizing ([Hol25, Lemma 5])
# --------------------------------------------------------------------------------------------


def default_m(kind: str, depth: int, cs_sensitivity: str) -> int:
    """Counters one replaced arrival changes: ``2 * depth`` (Count-Min, ``paper_2d``), else ``4 * depth``."""
    return 2 * depth if kind == "count-min" or cs_sensitivity == "paper_2d" else 4 * depth


def lazy_noise_bound(
    horizon: int,
    width: int,
    depth: int,
    epsilon: float,
    delta: float,
    beta: float,
    kind: Kind = "count-min",
    *,
    sigma: float | None = None,
) -> float:
    """``B_noise`` of [Hol25, Lemma 5] (corrected Lemma 5, docs/algorithms.md#lazy-e8, docs/algorithms.md#lazy-e9): with probability ``>= 1 - beta/2``
    the noise of every LazySketch counter at every time is at most
    ``sigma * sqrt(2 h_loc ln(4 d w T_loc / beta))``, ``T_loc = ceil(T/w)``,
    ``h_loc = bit_length(T_loc)``; with Algorithm 1's sigma (``m = 2d`` CMS, ``4d`` CS), the
    default when ``sigma`` is not given (so it needs ``eps < 1``), this is
    ``(2 h_loc / eps) sqrt(m ln(1.25/delta) ln(4 d w T_loc / beta))``. Pass a sketch's ``sigma``
    for its own calibration (:meth:`~beam_dpsketch.sketches.continual.sketch.LazySketch.noise_bound` does).

    Reference values (tested): ``T = 2**20, w = 55, d = 3, eps = 0.3, delta = 1e-3, beta = 0.05`` gives
    2876.8 (CMS) and 4068.5 (CS).
    """
    horizon = check_int(horizon, "horizon")
    width = check_int(width, "width", 1, MAX_WIDTH)
    depth = check_int(depth, "depth", 1, MAX_DEPTH)
    kind = check_kind(kind)
    beta = check_probability(beta, "beta")
    t_loc = -(-horizon // width)
    if sigma is None:
        sigma = gaussbm_sigma(
            t_loc, default_m(kind, depth, "corrected_4d"), epsilon, delta, calibration="paper"
        )
    h = gaussbm_height(t_loc)
    return sigma * math.sqrt(2.0 * h * math.log(4.0 * depth * width * t_loc / beta))


def lazy_noise_bound_paper(
    horizon: int, width: int, depth: int, epsilon: float, delta: float, beta: float
) -> float:
    """The paper's ``gamma = (3 log2(T/w) / eps) sqrt(d ln(2 T d / beta) ln(1.25/delta))``.

    For comparison with the paper only ([Hol25, Lemma 5], docs/algorithms.md#lazy-e9: it is below the correct union bound
    in most settings and ``<= 0`` when ``T <= w``); use :func:`lazy_noise_bound`.
    """
    check_epsilon(epsilon)
    check_delta(delta, allow_zero=False)
    beta = check_probability(beta, "beta")
    return (
        3.0
        * math.log2(horizon / width)
        / epsilon
        * math.sqrt(depth * math.log(2.0 * horizon * depth / beta) * math.log(1.25 / delta))
    )


def lazy_shape(
    eta: float, beta: float, horizon: int, kind: Kind = "count-min", *, preset: str = "paper"
) -> tuple[int, int]:
    """``(width, depth)`` of [Hol25, Lemma 5]: Count-Min ``w = ceil(2/eta)``,
    ``d = ceil(log2(2T/beta))``; Count Sketch ``w = ceil(3/eta**2)`` and ``d = ceil(log2(2T/beta))``
    (``preset="paper"``) or ``d = ceil(ln(2T/beta) / KL(1/2 || 1/3))`` (``preset="rigorous"``,
    docs/algorithms.md#lazy-e15: the paper's depth understates the median argument's constant)."""
    eta = check_probability(eta, "eta")
    beta = check_probability(beta, "beta")
    horizon = check_int(horizon, "horizon")
    kind = check_kind(kind)
    check_choice(preset, "preset", ("paper", "rigorous"))
    if kind == "count-min":
        return math.ceil(2.0 / eta), math.ceil(math.log2(2.0 * horizon / beta))
    width = math.ceil(3.0 / eta**2)
    if preset == "paper":
        return width, math.ceil(math.log2(2.0 * horizon / beta))
    return width, math.ceil(math.log(2.0 * horizon / beta) / _KL_HALF_THIRD)


def check_kind(kind: Any) -> str:
    """``kind`` as its public name, ``"count-min"`` or ``"count-sketch"`` (``ValueError`` otherwise).

    The short codes ``"cms"`` / ``"cs"`` (the serialized form) are also accepted, with a
    ``DeprecationWarning``, and mapped to the public name.
    """
    return check_choice(kind, "kind", KINDS, deprecated=_KIND_OF_CODE, stacklevel=4)


def kind_from_code(code: str) -> str:
    """The public ``kind`` of a serialized short code (``ValueError`` for an unknown code)."""
    return _KIND_OF_CODE[check_choice(code, "kind", _KIND_OF_CODE)]
