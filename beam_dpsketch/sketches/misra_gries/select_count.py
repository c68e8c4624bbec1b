"""Select-then-count: a DP Misra-Gries selection of candidate keys, then their noisy exact counts.

Pure numpy, no Beam. The pipeline shape is in
:mod:`beam_dpsketch.transforms.select_count`; this module holds the calibration and the release
functions.

The mechanism, for one window and pane and a budget ``(epsilon, delta)`` split by a declared
``selection_fraction`` ``f`` into ``eps_sel = f * epsilon`` and ``eps_count = (1 - f) *
epsilon``:

1. **Selection.** The Design B release of Misra-Gries sketches (Algorithm 3 per segment, exact
   sums, APPROX_PP: Lebeda and Tětek, PODS 2023, Sections 6-7) at ``(eps_sel, delta)`` returns
   noisy estimates; the candidate set ``C`` is the ``k`` keys with the largest noisy estimates
   (post-processing). At user level, where one unit adds at most ``m`` elements (its distinct
   kept keys), the selection runs at ``(eps_sel / m, delta / (m e^eps_sel))``: group privacy of
   size ``m`` then gives ``(eps_sel, delta)`` for the unit (Dwork and Roth, "The Algorithmic
   Foundations of Differential Privacy", Theorem 2.2 and its approximate form;
   :func:`selection_parameters`).
2. **Count.** For every key of ``C``, zero counts included, the exact count of the same window
   plus discrete Laplace noise of scale ``Delta_1 / eps_count`` (Canonne, Kamath and Steinke,
   "The Discrete Gaussian for Differential Privacy", 2020, the discrete Laplace mechanism). The
   noise of a key is drawn from the release's stream keyed by the key itself
   (:func:`~beam_dpsketch.noise.discrete_laplace_per_key`), not by its position in ``C``, so a
   key gets the same noise whatever the other candidates are and in whatever order they
   arrive (runners whose selections differ agree on the keys they share). With
   ``C`` fixed, the count vector has L1 sensitivity ``Delta_1 = 1`` at element level (one element
   touches one key) and ``Delta_1 = m`` at user level (one unit touches at most ``m`` keys once
   each), so this step is ``eps_count``-DP (pure) given ``C``.

**Guarantee.** By adaptive basic composition (Dwork and Roth, Theorem 3.16; the count step's
mechanism is chosen from the selection's output only) the pair (selection, counts) is
``(eps_sel + eps_count, delta) = (epsilon, delta)``-DP under add/remove of one element (one
privacy unit's bounded contributions at user level), with the selection's assumption A-PART for
sharded Design B. Only the counts are published; the key set published is ``C``, which is a
function of the selection output alone, so whether a key appears reveals nothing more.

The count noise is Laplace rather than Gaussian at user level: Gaussian noise would use the L2
sensitivity ``sqrt(m)`` but needs part of ``delta`` and a factor ``sqrt(2 ln(1.25/delta))``
(about 5.3 at ``delta = 1e-6``), so it wins only for ``m`` above about 28; Laplace keeps the count
step pure and all of ``delta`` for the selection.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import NoiseStream, discrete_laplace_per_key
from beam_dpsketch.sketches.misra_gries.core import (
    ERROR_CONFIDENCE,
    ErrorBound,
    HeavyHitterRelease,
    NoiseSpec,
    check_approx_delta,
    check_eps,
    check_positive_int,
    check_stream,
    geometric_two_sided_quantile,
    laplace_scale_exact,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.sketch import multiset_counts

__all__ = [
    "DEFAULT_SELECTION_FRACTION",
    "CandidateIndex",
    "check_selection_fraction",
    "count_candidates",
    "count_release",
    "select_count_relation",
    "selection_parameters",
    "split_budget",
]

#: Share of epsilon spent on the selection unless declared otherwise.
DEFAULT_SELECTION_FRACTION = 0.5

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1


def select_count_relation(m: int | None) -> str:
    """The neighbouring relation of a select-then-count release (``m=None``: element level)."""
    if m is None:
        return (
            "add/remove one element (selection: Design B under assumption A-PART, "
            "docs/algorithms.md#mg-a-part; counts: one element changes one count by 1)"
        )
    return (
        f"add/remove one privacy unit, whose contribution is a set of at most m={m} distinct "
        "keys per window (selection by group privacy of size m; counts: L1 sensitivity m)"
    )


def check_selection_fraction(fraction: Any) -> float:
    """``0 < selection_fraction < 1`` (``ValueError`` naming ``selection_fraction``)."""
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, numbers.Real)
        or not 0.0 < float(fraction) < 1.0
    ):
        raise ValueError(f"selection_fraction must be a number in (0, 1), got {fraction!r}")
    return float(fraction)


def split_budget(epsilon: float, selection_fraction: float) -> tuple[float, float]:
    """``(eps_sel, eps_count)`` with ``eps_sel + eps_count <= epsilon``.

    The count share is ``epsilon - eps_sel`` rounded down to the next float below, so the two
    shares never exceed ``epsilon`` in floating point (basic composition).
    """
    eps = check_eps(epsilon)
    f = check_selection_fraction(selection_fraction)
    eps_sel = eps * f
    eps_count = eps - eps_sel
    while eps_sel + eps_count > eps:
        eps_count = math.nextafter(eps_count, 0.0)
    return eps_sel, eps_count


def selection_parameters(epsilon: float, delta: float, m: int | None) -> tuple[float, float]:
    """The budget the Design B selection runs at so that it is ``(epsilon, delta)``-DP per unit.

    Element level (``m=None``): ``(epsilon, delta)``. User level: ``(epsilon/m, delta/(m
    e^epsilon))``; a unit changes the selection's input by at most ``m`` elements, and group
    privacy of size ``m`` turns ``(eps0, delta0)`` into ``(m eps0, m e^{(m-1) eps0} delta0)``,
    which is at most ``(epsilon, delta)`` (the same calibration as
    :func:`~beam_dpsketch.sketches.misra_gries.calibration.user_level_pmg_parameters`).
    """
    eps = check_eps(epsilon)
    dl = check_approx_delta(delta)
    if m is None:
        return eps, dl
    mm = check_positive_int(m, "m")
    return eps / mm, dl / (mm * math.exp(eps))


class CandidateIndex:
    """The candidate keys ``C``, prepared for counting batches of keys against them.

    Parameters
    ----------
    candidates
        The selected keys (canonical keys: the output of a Misra-Gries release).
    """

    __slots__ = ("_keys", "_ints")

    def __init__(self, candidates: Iterable[Any]) -> None:
        self._keys = frozenset(candidates)
        ints = [c for c in self._keys if type(c) is int and _INT64_MIN <= c <= _INT64_MAX]
        self._ints = np.asarray(sorted(ints), dtype=np.int64)

    def __len__(self) -> int:
        return len(self._keys)

    def count(self, batch: Any) -> dict[Any, int]:
        """Exact counts of the candidates in one batch of keys (absent candidates omitted).

        A numpy integer array is counted with ``np.isin`` and ``np.unique``; any other batch
        (a list of keys, a pyarrow array, plain or dictionary-encoded) by
        :func:`~beam_dpsketch.sketches.misra_gries.sketch.multiset_counts`, which converts each
        distinct value once. Memory ``O(len(batch) + len(C))``.
        """
        if not self._keys:
            return {}
        if isinstance(batch, np.ndarray) and batch.dtype.kind in "iub":
            if not len(self._ints):
                return {}
            arr = batch.astype(np.int64, copy=False)
            hit = arr[np.isin(arr, self._ints)]
            values, counts = np.unique(hit, return_counts=True)
            return dict(zip(values.tolist(), counts.tolist(), strict=True))
        keys = self._keys
        distinct, weights = multiset_counts(batch)
        return {c: n for c, n in zip(distinct, weights, strict=True) if c in keys}


def count_candidates(batch: Any, candidates: Iterable[Any]) -> dict[Any, int]:
    """Exact counts of ``candidates`` in one batch of keys (see :meth:`CandidateIndex.count`)."""
    return CandidateIndex(candidates).count(batch)


def count_release(
    counts: Mapping[Any, int],
    candidates: Iterable[Any],
    epsilon: float,
    stream: NoiseStream,
    *,
    k: int,
    sensitivity: int = 1,
    relation: str | None = None,
    privacy_unit: str = "element",
) -> HeavyHitterRelease:
    """The count step: every candidate's exact count plus discrete Laplace noise.

    Parameters
    ----------
    counts
        Exact counts of (some of) the candidates in the window; a candidate missing here has
        count 0. Keys that are not candidates are refused (``ValueError`` naming ``counts``).
    candidates
        The selected keys ``C`` (at most ``k``), the output of a DP selection.
    epsilon
        The count step's budget ``eps_count``.
    stream
        The release's noise stream. Each candidate's noise comes from the substream keyed by the
        candidate's canonical encoding (:func:`~beam_dpsketch.noise.discrete_laplace_per_key`):
        it depends on the key only, never on the other candidates or on their order. One draw
        per candidate: how many is ``len(C)``, an output of the selection (public).
    k
        Maximum number of candidates.
    sensitivity
        L1 sensitivity of the count vector with ``C`` fixed: 1 at element level, ``m`` at user
        level with at most ``m`` distinct keys per unit.

    Returns
    -------
    HeavyHitterRelease
        Every candidate with its integer noisy count (no threshold), canonical key order. Its
        ``error`` is the two-sided ``ERROR_CONFIDENCE`` quantile of the noise (the count itself
        is exact, so there is no sketch term): ``release.estimates()`` carries it per key.

    Notes
    -----
    **Privacy guarantee.** Given ``C``, ``eps_count``-DP (pure) under any relation in which
    neighbouring count vectors differ by at most ``sensitivity`` in L1 norm: the discrete
    Laplace mechanism of scale ``sensitivity / eps'`` with ``eps' <= epsilon`` (Canonne, Kamath
    and Steinke 2020). Composed with the selection in :mod:`select_count` (module docstring).
    """
    eps = check_eps(epsilon)
    kk = check_positive_int(k, "k")
    sens = check_positive_int(sensitivity, "sensitivity")
    check_stream(stream)
    cands = sorted(set(candidates), key=encode_key)
    if len(cands) > kk:
        raise ValueError(f"candidates: at most k={kk} keys may be counted")
    known = set(cands)
    if any(key not in known for key in counts):
        raise ValueError("counts: every counted key must be a candidate")
    scale = laplace_scale_exact(sens, eps)
    # Keyed by the key: a key's noise is the same whichever candidates come with it.
    z = discrete_laplace_per_key(stream, scale, cands).tolist()
    pairs = [(x, int(counts.get(x, 0)) + int(zi)) for x, zi in zip(cands, z, strict=True)]
    # Public: a quantile of the noise distribution, the same for every key and every input.
    t = geometric_two_sided_quantile(scale, 1.0 - ERROR_CONFIDENCE)
    return make_release(
        pairs,
        mechanism="SELECT-THEN-COUNT",
        epsilon=eps,
        delta=0.0,
        threshold=None,
        noise=NoiseSpec("discrete_laplace", float(scale)),
        k=kk,
        neighbouring=relation or select_count_relation(None if privacy_unit == "element" else sens),
        privacy_unit=privacy_unit,
        details={"sensitivity_l1": sens, "epsilon_effective": float(sens / scale)},
        error=ErrorBound(float(t), float(t), ERROR_CONFIDENCE),
    )
