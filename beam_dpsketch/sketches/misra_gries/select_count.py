"""Select-then-count: a DP Misra-Gries selection of candidate keys, then their noisy exact counts.

Pure numpy, no Beam. The pipeline shape is in
:mod:`beam_dpsketch.transforms.select_count`; this module holds the calibration and the release
functions.

The mechanism, for one window and pane and a budget ``(epsilon, delta)`` split by a declared
``selection_fraction`` ``f`` into ``eps_sel = f * epsilon`` and ``eps_count = (1 - f) *
epsilon``:

1. **Selection** (:func:`select_candidates`). A noisy test first asks whether every segment's
   Misra-Gries sketch held all of its distinct keys (then the sketches are exact counts). If
   it passes, each key is kept with a probability that depends on its exact count only: the
   optimal private partition selection of Desfontaines, Voss, Gipson and Mandayam
   ("Differentially Private Partition Selection", PoPETs 2022), which keeps half of the keys
   of count about ``ln(eps_sel/(2 delta))/eps_sel``. Otherwise the Design B release of
   Misra-Gries sketches (Algorithm 3 per segment, exact sums, APPROX_PP: Lebeda and Tětek,
   PODS 2023, Sections 6-7) at ``(eps_sel, delta)`` returns noisy estimates and the candidate
   set ``C`` is the ``k`` keys with the largest of them (post-processing). At user level
   the selection is :func:`~beam_dpsketch.sketches.misra_gries.hashed.hashed_selection`: a
   Gaussian threshold on hashed one-counter PAMG sketches, noise for L2 sensitivity ``sqrt(m)``
   and no group privacy (docs/algorithms.md#mg-user-hashed).
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

**Guarantee of the selection.** :func:`select_candidates` is ``(eps_sel, delta)``-DP under
add/remove of one element (with A-PART for several segments); the argument is in its
docstring and in ``docs/algorithms.md#mg-select-exact``.

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

import functools
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_int, check_probability
from beam_dpsketch.hashing import encode_key
from beam_dpsketch.noise import (
    NoiseStream,
    bernoulli_dyadic,
    discrete_laplace,
    discrete_laplace_per_key,
)
from beam_dpsketch.privacy.budget import PrivacyBudget, check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.misra_gries.design_b import PostProcessedSum, approx_pp
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    ErrorBound,
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
    pure_budget,
)
from beam_dpsketch.sketches.misra_gries.sketch import multiset_counts
from beam_dpsketch.sketches.misra_gries.tails import (
    geometric_two_sided_quantile,
    geometric_union_tail,
)

__all__ = [
    "DEFAULT_SELECTION_FRACTION",
    "EXACT_TEST_DELTA_SHARE",
    "EXACT_TEST_FRACTION",
    "EXACT_TEST_MARGIN",
    "CandidateIndex",
    "ExactnessTest",
    "SelectionCalibration",
    "check_selection_fraction",
    "count_candidates",
    "count_release",
    "exactness_test_calibration",
    "select_candidates",
    "select_count_relation",
    "keep_numerators",
    "selection_calibration",
    "selection_parameters",
    "split_budget",
]

#: Share of epsilon spent on the selection unless declared otherwise. Slightly more than half:
#: the selection also pays for the exactness test out of its share (up to about 1.2 % of it at
#: eps 0.1 and k = 131072), and an even split would leave partition selection a little less
#: than half of epsilon and keep about 1 % fewer keys than an exact histogram released at an
#: even split. At 0.52 the branch keeps 2-3 % more keys than that even split, for about 4 %
#: more count noise (scale ``1/(0.48 eps)`` instead of ``1/(0.5 eps)``).
DEFAULT_SELECTION_FRACTION = 0.52

#: Most of the selection's epsilon the noisy test of whether the sketches are exact may spend.
EXACT_TEST_FRACTION = 0.05

#: Share of ``k`` the exactness test leaves as its margin: it spends just enough epsilon that
#: a decremented input passes with probability at most ``test_delta`` while any input with up
#: to about ``(1 - EXACT_TEST_MARGIN) k`` distinct keys per segment passes almost surely. The
#: test's epsilon is then about ``ln(1/delta) / (EXACT_TEST_MARGIN k)`` whatever the budget
#: (0.0005 at ``k = 131072``), capped at ``EXACT_TEST_FRACTION`` of the selection's.
EXACT_TEST_MARGIN = 0.25

#: Share of the selection's delta that covers the exactness test (the rest goes to the branch
#: that runs after it).
EXACT_TEST_DELTA_SHARE = 0.01

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
        "keys per window (selection: hashed one-counter PAMG sketches, at most m counters "
        "change by 1; counts: L1 sensitivity m)"
    )


def check_selection_fraction(fraction: Any) -> float:
    """``0 < selection_fraction < 1`` (``ValueError`` naming ``selection_fraction``)."""
    return check_probability(fraction, "selection_fraction")


def split_budget(epsilon: float, selection_fraction: float) -> tuple[float, float]:
    """``(eps_sel, eps_count)`` with ``eps_sel + eps_count <= epsilon``.

    The count share is ``epsilon - eps_sel`` rounded down to the next float below, so the two
    shares never exceed ``epsilon`` in floating point (basic composition).
    """
    eps = check_epsilon(epsilon)
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
    eps = check_epsilon(epsilon)
    dl = check_delta(delta, allow_zero=False)
    if m is None:
        return eps, dl
    mm = check_int(m, "m")
    return eps / mm, dl / (mm * math.exp(eps))


@dataclass(frozen=True)
class SelectionCalibration:
    """Public calibration of :func:`select_candidates` for one ``(epsilon, delta, k)``.

    Attributes
    ----------
    test_epsilon, test_scale, test_cut
        The exactness test: it passes iff ``widest + Z_t <= test_cut``, with ``Z_t`` discrete
        Laplace of scale ``test_scale`` (``1/eps'`` for some ``eps' <= test_epsilon``) and
        ``test_cut = k + 1 - t`` where ``P[Z_t >= t] <= test_delta``.
    test_delta
        Probability bound of passing when some segment decremented.
    branch_epsilon, branch_delta
        The budget of the branch that runs after the test.
    exact_median, exact_certain
        The exact branch (:func:`keep_numerators`): the smallest count kept with probability
        at least 1/2, and the smallest count always kept.
    """

    test_epsilon: float
    test_delta: float
    test_scale: Fraction
    test_cut: int
    branch_epsilon: float
    branch_delta: float
    exact_median: int
    exact_certain: int


#: ``exp(eps)`` is bounded from below on this binary grid (exact integer arithmetic).
_E_BITS = 62
_ONE = 1 << 64


@functools.lru_cache(maxsize=64)
def keep_numerators(epsilon: float, delta: float) -> tuple[int, ...]:
    """Keep probabilities (numerators over ``2**64``) of private partition selection.

    Entry ``n`` is ``N(n) = 2**64 pi(n)`` for count ``n`` (entry 0 is 0); a count beyond the
    last entry is kept with probability 1 (the last entry is ``2**64``). ``pi`` is the
    greedy recursion of the optimal partition selection (Desfontaines, Voss, Gipson and
    Mandayam, PoPETs 2022): ``pi(0) = 0`` and ``pi(n) = min(E pi(n-1) + D, 1 - (1 - pi(n-1) -
    D) / E, 1)``, computed exactly in integers on the ``2**-64`` grid with ``E <= e^epsilon``
    (rounded down on a ``2**-62`` grid) and ``D = floor(delta 2**64) / 2**64 <= delta``, and
    rounded down at every step.

    **Guarantee.** For neighbouring counts ``n`` and ``n + 1`` of one key (``n = 0``: the key
    is absent on one side) the keep decision is ``(epsilon, delta)``-DP:
    ``pi(n+1) <= E pi(n) + D`` and ``1 - pi(n) <= E (1 - pi(n+1)) + D`` hold by construction
    (each rounding lowers ``pi(n+1)``, which keeps both), ``E <= e^epsilon`` and ``D <= delta``;
    the other two inequalities hold because ``pi`` is non-decreasing.
    """
    eps = check_epsilon(epsilon)
    dl = check_delta(delta, allow_zero=False)
    e_num = math.floor(math.nextafter(math.nextafter(math.exp(eps), 0.0), 0.0) * (1 << _E_BITS))
    e_num = max(e_num, 1 << _E_BITS)
    d64 = int(Fraction(dl) * _ONE)
    out = [0]
    while out[-1] < _ONE:
        prev = out[-1]
        up = ((e_num * prev) >> _E_BITS) + d64
        rest = _ONE - prev - d64
        # 1 - (1 - pi - D)/E, with the subtracted part rounded up: pi(n) only gets smaller.
        down = _ONE if rest <= 0 else _ONE - -((-rest << _E_BITS) // e_num)
        nxt = min(up, down, _ONE)
        if nxt <= prev:  # pragma: no cover - E >= 1 and D > 0 make pi increase
            raise RuntimeError("partition selection probabilities stopped increasing")
        out.append(nxt)
    return tuple(out)


@dataclass(frozen=True)
class ExactnessTest:
    """Public calibration of a noisy test of whether Misra-Gries sketches are exact counts.

    The test passes iff ``widest + Z_t <= cut``, with ``widest = min(distinct keys, k + 1)``
    (sensitivity 1) and ``Z_t`` discrete Laplace of scale ``scale`` (``1/eps'`` for some
    ``eps' <= epsilon``); ``cut = k + 1 - t`` with ``P[Z_t >= t] <= test_delta``, so an input
    whose sketch decremented (``widest = k + 1``) passes with probability at most
    ``test_delta``. ``branch_epsilon`` and ``branch_delta`` are what the release that runs
    after the test may spend: ``epsilon + branch_epsilon`` is at most the budget and
    ``branch_delta + (1 + e^budget) test_delta`` equals its delta.
    """

    epsilon: float
    test_delta: float
    scale: Fraction
    cut: int
    branch_epsilon: float
    branch_delta: float

    def passes(self, widest: int, stream: NoiseStream) -> bool:
        """Run the test: one discrete Laplace draw from ``stream`` (its next position)."""
        return widest + int(discrete_laplace(stream, self.scale, 1)[0]) <= self.cut


def exactness_test_calibration(epsilon: float, delta: float, k: int) -> ExactnessTest:
    """The exactness test of a ``(epsilon, delta)`` release on sketches of size ``k``.

    ``epsilon`` splits into ``eps_t = min(EXACT_TEST_FRACTION * epsilon, (1 +
    ln(1/delta_t)) / (EXACT_TEST_MARGIN * k))`` for the test and the rest, ``eps_b``, for the
    branch (:func:`split_budget`: ``eps_t + eps_b <= epsilon``); ``delta`` into ``delta_t =
    EXACT_TEST_DELTA_SHARE * delta / (1 + e^epsilon)`` for the test and ``delta_b = (1 -
    EXACT_TEST_DELTA_SHARE) * delta`` for the branch, so that ``delta_b + (1 + e^epsilon)
    delta_t = delta``. All public numbers.
    """
    eps = check_epsilon(epsilon)
    dl = check_delta(delta, allow_zero=False)
    kk = check_int(k, "k")
    delta_t = EXACT_TEST_DELTA_SHARE * dl / (1.0 + math.exp(eps))
    # Enough for a margin of EXACT_TEST_MARGIN * k (the 1 covers rounding the tail up).
    wanted = (1.0 + math.log(1.0 / delta_t)) / (EXACT_TEST_MARGIN * kk)
    eps_t, eps_b = split_budget(eps, min(EXACT_TEST_FRACTION, max(wanted / eps, 1e-6)))
    scale = discrete_laplace_scale(1, eps_t)
    return ExactnessTest(
        epsilon=eps_t,
        test_delta=delta_t,
        scale=scale,
        cut=kk + 1 - geometric_union_tail(scale, delta_t, 1),
        branch_epsilon=eps_b,
        branch_delta=(1.0 - EXACT_TEST_DELTA_SHARE) * dl,
    )


def selection_calibration(epsilon: float, delta: float, k: int) -> SelectionCalibration:
    """The public calibration of :func:`select_candidates` at ``(epsilon, delta)`` and ``k``.

    The exactness test and the budget split are :func:`exactness_test_calibration`'s; the
    exact branch's keep probabilities are :func:`keep_numerators` at the branch's budget.
    """
    test = exactness_test_calibration(epsilon, delta, k)
    keep = keep_numerators(test.branch_epsilon, test.branch_delta)
    return SelectionCalibration(
        test_epsilon=test.epsilon,
        test_delta=test.test_delta,
        test_scale=test.scale,
        test_cut=test.cut,
        branch_epsilon=test.branch_epsilon,
        branch_delta=test.branch_delta,
        exact_median=next(n for n, x in enumerate(keep) if 2 * x >= _ONE),
        exact_certain=len(keep) - 1,
    )


def select_candidates(
    source: PostProcessedSum, budget: PrivacyBudget, stream: NoiseStream, *, k: int
) -> HeavyHitterRelease:
    """The selection of select-then-count: at most ``k`` keys, ``(epsilon, delta)``-DP.

    1. **Exactness test** (``eps_t``). ``widest`` (:attr:`PostProcessedSum.widest`) is
       ``min(distinct keys, k + 1)`` of the widest segment, ``k + 1`` once a segment's sketch
       decremented; a Misra-Gries sketch of ``k`` counters decrements exactly when its segment
       has more than ``k`` distinct keys, so ``widest <= k`` iff the sums are exact counts.
       The test passes iff ``widest + Z_t <= test_cut`` (:func:`selection_calibration`).
    2. **Exact branch** (test passed, sums exact, ``(eps_b, delta_b)``). Every key with
       ``f(x) >= 1`` is kept with probability ``pi(f(x))`` (:func:`keep_numerators`), one
       uniform word per key by position over the keys in canonical order. If more than ``k``
       are kept, the first ``k`` in canonical key order are the candidates (a function of the
       kept set only).
    3. **Sketch branch** (test failed). APPROX_PP (:func:`approx_pp`, no count correction) at
       ``(eps_b, delta_b)`` on the Design B sum, its ``k`` largest values.

    The stream's first draw is the test's; the branch draws after it.

    Notes
    -----
    **Privacy guarantee.** ``(epsilon, delta)``-DP under add/remove of one element, with
    assumption A-PART when several segments are summed (one element changes one segment).
    Let ``D' = D + x``.

    * ``widest`` changes by at most 1: the segment that receives ``x`` gains at most one
      distinct key and ``min(., k + 1)`` keeps that bound; the other segments are unchanged.
      The test is the discrete Laplace mechanism on it: ``eps_t``-DP.
    * Consider the ideal mechanism ``M'`` that runs the same test and, when it passes, runs
      the exact branch on the **true** histogram of the input (instead of the sums). Its
      exact branch is ``(eps_b, delta_b)``-DP: one element changes one key's count from
      ``n`` to ``n + 1`` (``n = 0``: absent on one side), the keys' decisions are
      independent with identically distributed words whatever their positions, and
      :func:`keep_numerators` makes one key's decision ``(eps_b, delta_b)``-DP. The sketch branch is ``(eps_b, delta_b)``-DP (:func:`approx_pp`). The
      branch is chosen from the test's output only, so by adaptive composition ``M'`` is
      ``(eps_t + eps_b, delta_b) <= (epsilon, delta_b)``-DP.
    * The real mechanism equals ``M'`` except when the test passes although some segment
      decremented (``widest = k + 1``), which has probability ``P[Z_t <= test_cut - k - 1]
      = P[Z_t >= t_t] <= delta_t`` for every input. So for every set ``O`` of outputs,
      ``P[M(D) in O] <= P[M'(D) in O] + delta_t <= e^epsilon P[M'(D') in O] + delta_b +
      delta_t <= e^epsilon P[M(D') in O] + delta_b + (1 + e^epsilon) delta_t = e^epsilon
      P[M(D') in O] + delta``, and symmetrically for removal.

    In particular one element that turns an exact input into an inexact one (a segment with
    exactly ``k`` distinct keys receiving a new key) changes ``widest`` by 1 like any other
    element: the switch between the branches is itself the output of the noisy test.

    Parameters
    ----------
    source
        The Design B sum of the window (:class:`PostProcessedSum`).
    budget
        The selection's budget: ``PrivacyBudget.approx(epsilon, delta)`` with ``delta > 0``
        (any other budget raises ``ValueError`` naming ``budget``).
    stream
        The selection's noise stream.
    k
        Most candidates; must equal the sum's ``k``.
    """
    if not isinstance(source, PostProcessedSum):
        raise TypeError(f"source must be a PostProcessedSum, got {type(source).__name__}")
    epsilon, delta = approx_budget(budget)
    check_stream(stream)
    cal = selection_calibration(epsilon, delta, k)
    if source.k != k:
        raise ValueError(f"k: the sum has k={source.k}, the selection k={k}")
    # Drawn first, at a fixed position: the test's noise never depends on the data.
    z_t = int(discrete_laplace(stream, cal.test_scale, 1)[0])
    exact = source.exact_counts() if source.widest + z_t <= cal.test_cut else None
    if exact is None:
        # The test failed, or (probability <= test_delta) passed on inexact sums, which the
        # analysis charges to delta: release from the sketches.
        branch = PrivacyBudget.approx(cal.branch_epsilon, cal.branch_delta)
        return approx_pp(source, branch, stream, count_fraction=0.0).top(k)
    keys = list(exact)
    keep = keep_numerators(cal.branch_epsilon, cal.branch_delta)
    last = len(keep) - 1
    # One uniform word per key by position over the keys in canonical order: i.i.d., so each
    # key's decision has the same distribution whichever other keys there are.
    kept = bernoulli_dyadic(stream, [keep[min(c, last)] for c in exact.values()])
    # Every kept key has the same value: the order of the release carries no count.
    pairs = [(keys[i], 0) for i in np.flatnonzero(kept).tolist()[:k]]
    return make_release(
        pairs,
        mechanism="EXACT-SELECTION",
        epsilon=epsilon,
        delta=delta,
        threshold=float(cal.exact_median),
        noise=NoiseSpec("partition_selection", 0.0),
        k=k,
        neighbouring=select_count_relation(None),
        details={
            "exactness_test_epsilon": cal.test_epsilon,
            "exactness_test_cut": cal.test_cut,
            "branch_epsilon": cal.branch_epsilon,
            "branch_delta": cal.branch_delta,
            "kept_with_probability_half_from": cal.exact_median,
            "kept_always_from": cal.exact_certain,
        },
    )


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
    budget: PrivacyBudget,
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
    budget
        The count step's budget ``PrivacyBudget.pure(eps_count)`` (any other budget raises
        ``ValueError`` naming ``budget``).
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
    eps = pure_budget(budget)
    kk = check_int(k, "k")
    sens = check_int(sensitivity, "sensitivity")
    check_stream(stream)
    cands = sorted(set(candidates), key=encode_key)
    if len(cands) > kk:
        raise ValueError(f"candidates: at most k={kk} keys may be counted")
    known = set(cands)
    if any(key not in known for key in counts):
        raise ValueError("counts: every counted key must be a candidate")
    scale = discrete_laplace_scale(sens, eps)
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
