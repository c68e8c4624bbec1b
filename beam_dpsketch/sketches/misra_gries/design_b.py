"""Design B: Algorithm 3 post-processing summed exactly over shards, and its releases.

The post-processed sketch of [LT23, Algorithm 3, Section 6] as the mergeable
:class:`PostProcessedSum` (docs/algorithms.md#mg-merged), released with pure DP ([LT23,
Section 6], :func:`pure_pp`) or approximate DP with a noisy count correction
(docs/algorithms.md#mg-pp-approx, :func:`approx_pp`).
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction
from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_bool, check_int, check_probability, check_real
from beam_dpsketch.hashing import decode_key, encode_key
from beam_dpsketch.noise import NoiseStream, discrete_laplace
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import (
    discrete_laplace_scale,
    rational_epsilon_floor,
)
from beam_dpsketch.sketches.misra_gries.pmg_release import require_single_stream
from beam_dpsketch.sketches.misra_gries.release import (
    ERROR_CONFIDENCE,
    NEIGHBOURING_ELEMENT,
    NEIGHBOURING_SHARDED,
    ErrorBound,
    HeavyHitterRelease,
    NoiseSpec,
    approx_budget,
    check_stream,
    make_release,
    pure_budget,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.tails import (
    geometric_two_sided_quantile,
    geometric_union_tail,
)
from beam_dpsketch.sketches.misra_gries.universe import (
    Universe,
    pure_top_k,
    validate_in_universe,
)
from beam_dpsketch.sketches.misra_gries.user import user_flattened_relation

__all__ = [
    "DEFAULT_COUNT_FRACTION",
    "PostProcessedSum",
    "approx_pp",
    "postprocess",
    "pure_pp",
    "user_level_pure_pp",
]


class PostProcessedSum:
    """Algorithm 3 post-processed sketches, summed exactly over shards (Design B, docs/algorithms.md#mg-merged).

    Holds integers ``V_x = (k+1) * cbar_x``: for one shard, [LT23, Algorithm 3] (integer form)
    gives ``V_x = (k+1)(c_x + d) - n`` for the keys with ``V_x > 0`` (dummies never); for many
    shards the ``V`` are added exactly (no truncation: docs/algorithms.md#mg-merged forbids ``MERGE_k`` here), so
    the result does not depend on the merge order. Error (docs/algorithms.md#mg-merged): every key satisfies
    ``f(x) - N/(k+1) <= V_x/(k+1) <= f(x)``. Sensitivity ([LT23, Section 6, Lemma 2]): when one shard's stream
    loses one element, ``sum |V - V'| <= 2k - 1 < 2(k+1)`` and at most ``k`` keys (both sides
    together) are present on one side only, each with ``V <= k``.

    Memory is up to ``shards * k`` keys, so the number of shards must be declared:
    ``max_shards``; folding in more shards raises ``ValueError`` (a data-independent check when
    the shard count is fixed by the pipeline, docs/algorithms.md#mg-partition).

    While no shard's sketch has decremented (each held every distinct key of its segment, at
    most ``k``), the sum also keeps the exact counts of every key (:meth:`exact_counts`), and
    :attr:`widest` records ``min(distinct keys, k + 1)`` of the widest segment (``k + 1`` once
    any segment decremented). Adding or removing one element changes one segment's distinct
    keys by at most 1, so :attr:`widest` has sensitivity 1 under the sharded relation; the
    select-then-count selection tests it with noise before it uses the exact counts
    (:func:`~beam_dpsketch.sketches.misra_gries.select_count.select_candidates`). The exact
    counts are dropped as soon as one segment decremented, so they never add memory beyond
    ``max_shards * k`` keys.

    This object is **not** differentially private: release it with :func:`approx_pp` or
    :func:`pure_pp`.

    Parameters
    ----------
    k
        Sketch size of every shard.
    max_shards
        Declared maximum number of shard sketches; memory ``<= max_shards * k`` keys.
    """

    KIND = "PostProcessedSum"
    __slots__ = ("k", "max_shards", "shards", "n", "widest", "_scaled", "_exact")

    def __init__(self, k: int, *, max_shards: int) -> None:
        self.k = check_int(k, "k")
        self.max_shards = check_int(max_shards, "max_shards")
        self.shards = 0
        # Exact number of elements folded in: never released as is, only through the noisy
        # count of approx_pp's count correction.
        self.n = 0
        # min(distinct keys, k + 1) of the widest segment; k + 1 once a segment decremented.
        self.widest = 0
        self._scaled: dict[Any, int] = {}
        # Exact counts while every segment is exact (never decremented); None afterwards.
        self._exact: dict[Any, int] | None = {}

    @classmethod
    def from_sketch(cls, sketch: MisraGries, *, max_shards: int = 1) -> PostProcessedSum:
        """Algorithm 3 of one single-stream sketch (``merged=True`` raises ``TypeError``)."""
        return cls(sketch.k, max_shards=max_shards).add_sketch(sketch)

    def _check_room(self, more: int) -> None:
        if self.shards + more > self.max_shards:
            # How many non-empty shards there are depends on the data: only the bound is named.
            raise ValueError(
                f"max_shards={self.max_shards} exceeded: Design B keeps up to max_shards * k "
                "keys, declare the shard count"
            )

    def add_sketch(self, sketch: MisraGries) -> Self:
        """Post-process one shard's **final** sketch with its own ``n``, ``d`` and add it exactly.

        The offset ``n/(k+1)`` is used exactly (docs/algorithms.md#mg-e7: flooring it breaks the sensitivity
        bound), in the integer form ``(k+1)(c + d) - n``.
        """
        require_single_stream(sketch, "PostProcessedSum.add_sketch")
        if sketch.k != self.k:
            raise ValueError(f"sketch has k={sketch.k}, this sum has k={self.k}")
        self._check_room(1)
        k1, off = self.k + 1, sketch.n
        counters = sketch.to_dict()
        for key, c in counters.items():
            v = k1 * (c + sketch.d) - off
            if v > 0:
                self._scaled[key] = self._scaled.get(key, 0) + v
        if sketch.d == 0 and self._exact is not None:
            # Never decremented: the counters are the segment's exact counts, one per
            # distinct key.
            exact = self._exact
            for key, c in counters.items():
                exact[key] = exact.get(key, 0) + c
            self.widest = max(self.widest, len(counters))
        else:
            self._exact = None
            self.widest = self.k + 1
        self.shards += 1
        self.n += sketch.n
        return self

    def merge(self, other: PostProcessedSum) -> Self:
        """Exact sum with another partial sum (associative and commutative)."""
        if not isinstance(other, PostProcessedSum):
            raise TypeError(f"cannot merge a PostProcessedSum with a {type(other).__name__}")
        if other.k != self.k or other.max_shards != self.max_shards:
            raise ValueError(
                "cannot merge PostProcessedSum with different k or max_shards: "
                f"({self.k}, {self.max_shards}) vs ({other.k}, {other.max_shards})"
            )
        self._check_room(other.shards)
        for key, v in other._scaled.items():
            self._scaled[key] = self._scaled.get(key, 0) + v
        if self._exact is not None and other._exact is not None:
            exact = self._exact
            for key, c in other._exact.items():
                exact[key] = exact.get(key, 0) + c
        else:
            self._exact = None
        self.widest = max(self.widest, other.widest)
        self.shards += other.shards
        self.n += other.n
        return self

    @property
    def capacity(self) -> int:
        """Most keys this sum can ever hold: ``max_shards * k`` (public)."""
        return self.max_shards * self.k

    def scaled_counts(self) -> dict[Any, int]:
        """``{key: (k+1) * cbar_x}`` (positive integers) in canonical key order. Not private."""
        return {x: self._scaled[x] for x in sorted(self._scaled, key=encode_key)}

    def estimates(self) -> dict[Any, Fraction]:
        """``{key: cbar_x}`` as exact fractions in canonical key order. Not private."""
        k1 = self.k + 1
        return {x: Fraction(v, k1) for x, v in self.scaled_counts().items()}

    @property
    def exact(self) -> bool:
        """Whether no segment's sketch decremented (then :meth:`exact_counts` is exact)."""
        return self._exact is not None

    def exact_counts(self) -> dict[Any, int] | None:
        """``{key: f(x)}`` over every key seen, canonical key order, or ``None``. Not private.

        ``None`` once any segment's sketch decremented; otherwise the exact count of every
        distinct key of the summed segments.
        """
        encoded = self._encoded_exact()
        return None if encoded is None else {x: c for _, x, c in encoded}

    def _encoded_exact(self) -> list[tuple[bytes, Any, int]] | None:
        """``(encoding, key, count)`` of the exact counts in canonical order, or ``None``."""
        if self._exact is None:
            return None
        # One encoding per key, reused for the order and for the bytes.
        return sorted((encode_key(x), x, c) for x, c in self._exact.items())

    def __len__(self) -> int:
        return len(self._scaled)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PostProcessedSum):
            return NotImplemented
        return (
            self.k,
            self.max_shards,
            self.shards,
            self.n,
            self.widest,
            self._scaled,
            self._exact,
        ) == (
            other.k,
            other.max_shards,
            other.shards,
            other.n,
            other.widest,
            other._scaled,
            other._exact,
        )

    __hash__ = None  # mutable

    def __repr__(self) -> str:
        return (
            f"PostProcessedSum(k={self.k}, shards={self.shards}, max_shards={self.max_shards}, "
            f"keys={len(self._scaled)})"
        )

    def copy(self) -> PostProcessedSum:
        """An independent copy."""
        out = PostProcessedSum(self.k, max_shards=self.max_shards)
        out.shards = self.shards
        out.n = self.n
        out.widest = self.widest
        out._scaled = dict(self._scaled)
        out._exact = None if self._exact is None else dict(self._exact)
        return out

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`); values must fit in int64."""
        items = list(self.scaled_counts().items())
        if any(v >= 1 << 63 for _, v in items):
            raise OverflowError("a scaled count does not fit in int64")
        data, offsets = serialization.pack_bytes_list([encode_key(x) for x, _ in items])
        arrays = {
            "key_data": data,
            "key_offsets": offsets,
            "scaled": np.array([v for _, v in items], dtype=np.int64),
        }
        params = {
            "k": self.k,
            "max_shards": self.max_shards,
            "shards": self.shards,
            "n": self.n,
            "widest": self.widest,
            "exact": int(self._exact is not None),
        }
        exact = self._encoded_exact()
        if exact is not None:
            edata, eoffsets = serialization.pack_bytes_list([e for e, _, _ in exact])
            arrays["exact_key_data"] = edata
            arrays["exact_key_offsets"] = eoffsets
            arrays["exact_counts"] = np.fromiter(
                (c for _, _, c in exact), dtype=np.int64, count=len(exact)
            )
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> PostProcessedSum:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        k, max_shards = req(params, "k", int), req(params, "max_shards", int)
        shards, n = req(params, "shards", int), req(params, "n", int)
        encoded = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "key_data", "|u1"),
            serialization.require_array(arrays, "key_offsets", "<i8"),
        )
        scaled = serialization.require_array(arrays, "scaled", "<i8", (len(encoded),))
        if k < 1 or max_shards < 1 or not 0 <= shards <= max_shards or n < 0:
            raise err("impossible PostProcessedSum parameters")
        if len(encoded) > shards * k or (len(scaled) and scaled.min() < 1):
            raise err("malformed PostProcessedSum contents")
        # Bytes without the exactness fields read as inexact: the conservative state.
        widest = params.get("widest", k + 1)
        has_exact = params.get("exact", 0)
        if type(widest) is not int or not 0 <= widest <= k + 1 or has_exact not in (0, 1):
            raise err("impossible PostProcessedSum exactness parameters")
        if has_exact and widest > k:
            raise err("impossible PostProcessedSum exactness parameters")
        exact: dict[Any, int] | None = None
        if has_exact:
            eencoded = serialization.unpack_bytes_list(
                serialization.require_array(arrays, "exact_key_data", "|u1"),
                serialization.require_array(arrays, "exact_key_offsets", "<i8"),
            )
            ecounts = serialization.require_array(arrays, "exact_counts", "<i8", (len(eencoded),))
            if len(eencoded) > shards * k or (len(ecounts) and ecounts.min() < 1):
                raise err("malformed PostProcessedSum exact counts")
        try:
            keys = [decode_key(b) for b in encoded]
            if has_exact:
                exact = dict(zip([decode_key(b) for b in eencoded], ecounts.tolist(), strict=True))
        except (ValueError, TypeError, RecursionError) as exc:
            # The decoder's message can quote the key's bytes: keep only its type.
            raise err(f"malformed key encoding ({type(exc).__name__})") from None
        if exact is not None and len(exact) != len(eencoded):
            raise err("duplicate keys in PostProcessedSum bytes")
        out = cls(k, max_shards=max_shards)
        out.shards = shards
        out.n = n
        out.widest = widest if exact is not None else k + 1
        out._exact = exact
        out._scaled = dict(zip(keys, scaled.tolist(), strict=True))
        if len(out._scaled) != len(keys):
            raise err("duplicate keys in PostProcessedSum bytes")
        return out

    def __reduce__(self):
        return (PostProcessedSum.from_bytes, (self.to_bytes(),))


def postprocess(sketch: MisraGries) -> PostProcessedSum:
    """Algorithm 3 (the post-processed sketch of Section 6) of one single-stream sketch.

    Returns a one-shard :class:`PostProcessedSum` holding ``(k+1) * cbar_x`` with
    ``cbar_x = c_x + d - n/(k+1)`` for the keys with ``cbar_x > 0`` ([LT23, Algorithm 3]; exact, docs/algorithms.md#mg-e7). Not private by itself. Merged sketches raise ``TypeError``: a merge has no single
    ``(n, d)`` (docs/algorithms.md#mg-merged).
    """
    return PostProcessedSum.from_sketch(sketch)


def as_postprocessed(source: Any) -> PostProcessedSum:
    if isinstance(source, PostProcessedSum):
        return source
    if isinstance(source, MisraGries):
        return postprocess(source)
    raise TypeError(
        f"expected a PostProcessedSum or a single-stream MisraGries, got {type(source).__name__}"
    )


def _pp_sensitivity(k: int, tight_sensitivity: bool) -> int:
    """Integer-scale L1 sensitivity: ``2(k+1)`` (the paper's 2) or ``2k - 1`` (tight, docs/algorithms.md#mg-e3)."""
    check_bool(tight_sensitivity, "tight_sensitivity")
    return 2 * k - 1 if tight_sensitivity else 2 * (k + 1)


def _pp_meta(pp: PostProcessedSum) -> tuple[str, dict[str, Any]]:
    """Relation and details of a release of ``pp``, from its declared ``max_shards`` only.

    The number of shards actually folded in counts the non-empty segments, which depends on the
    data (one element can be a segment's only element), so it is never part of a release.
    """
    relation = NEIGHBOURING_ELEMENT if pp.max_shards <= 1 else NEIGHBOURING_SHARDED
    return relation, {"max_shards": pp.max_shards}


#: Default share of a Design B release's epsilon spent on the DP element count that removes
#: Algorithm 3's offset (see :func:`approx_pp`).
DEFAULT_COUNT_FRACTION = 0.05


def check_count_fraction(count_fraction: Any, epsilon: float) -> float:
    """``count_fraction`` as a float in ``[0, 1)`` whose slice of ``epsilon`` is usable.

    Raises ``TypeError`` / ``ValueError`` naming ``count_fraction`` otherwise
    (:func:`~beam_dpsketch.checks.check_real`); a positive slice below the ``1e-6`` epsilon
    resolution of the exact samplers cannot be calibrated either (``ValueError``).
    """
    cf = check_real(count_fraction, "count_fraction", 0.0, 1.0, upper_open=True)
    micro = Fraction(1, 10**6)
    total = rational_epsilon_floor(epsilon) if epsilon >= 1e-6 else Fraction(0)
    share = (total * Fraction(cf) // micro) * micro
    if cf > 0.0 and (share < micro or total - share < micro):
        raise ValueError(
            f"count_fraction={cf!r} of epsilon={epsilon!r} leaves a slice below 1e-6, which the "
            "exact samplers cannot calibrate: raise epsilon or use count_fraction=0"
        )
    return cf


def approx_pp(
    source: PostProcessedSum | MisraGries,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    tight_sensitivity: bool = False,
    count_fraction: float = DEFAULT_COUNT_FRACTION,
    error_confidence: float = ERROR_CONFIDENCE,
) -> HeavyHitterRelease:
    """APPROX_PP: ``(epsilon, delta)`` release of the post-processed sketch, offset removed.

    Two mechanisms on independent noise (docs/algorithms.md#mg-pp-approx and
    docs/algorithms.md#mg-merged):

    1. **Keys** (``eps_hh = (1 - count_fraction) * epsilon``, ``delta``). On the integer scale
       ``V_x = (k+1) cbar_x`` of Algorithm 3 every positive key gets exact discrete Laplace
       noise ``Z_x`` of scale ``2(k+1)/eps_hh`` (the paper's sensitivity 2;
       ``tight_sensitivity=True`` uses the attained ``2k-1``, docs/algorithms.md#mg-e3) and is
       kept iff ``V_x + Z_x >= tau_int = k + t`` with ``t`` the smallest integer such that
       ``k * P[Geo2 >= t] <= delta`` (the at most ``k`` one-sided keys have ``V <= k``).
    2. **Element count** (``eps_c = count_fraction * epsilon``, pure). ``N_hat = N + W`` with
       ``N`` the number of elements summarised and ``W`` exact discrete Laplace of scale
       ``1/eps_c``: adding or removing one element changes ``N`` by exactly 1.

    Released values are ``(V_x + Z_x + max(N_hat, 0)) / (k+1)``. Algorithm 3 subtracts
    ``n/(k+1)`` from every counter of a shard ([LT23, Algorithm 3, Section 6]), so
    ``f(x) - N/(k+1) <= V_x/(k+1) <= f(x)`` for the sum over shards (Section 7); adding the
    noisy ``N/(k+1)`` back gives ``f(x) <= (V_x + N)/(k+1) <= f(x) + D`` with ``D <= N/(k+1)``
    the total Misra-Gries decrement, which is 0 when every shard's sketch is exact (fewer
    distinct keys than ``k``). The estimate is therefore not centred on the worst-case interval:
    that would bias every exact count by ``N/(2(k+1))``.

    The threshold stays on ``V_x + Z_x``: the ``delta`` argument bounds the probability that a
    key present on one side only (``V <= k``) passes ``tau_int``, which a threshold on the
    corrected value (``N_hat`` added) would not. The released key set, its values and
    ``N_hat`` are all functions of the two mechanisms' outputs.

    Guarantee: ``(epsilon, delta)``-DP under add/remove of one element ([LT23, Definition 1]).
    Proof: mechanism 1 is ``(eps_hh, delta)``-DP ([LT23, Section 6, Algorithm 3 and its
    Lemmas 1-2] with the "(eps, delta)" remark; the threshold constant is derived in
    docs/algorithms.md#mg-pp-approx); mechanism 2 is ``eps_c``-DP (sensitivity 1, discrete
    Laplace); their noise is independent, so by basic composition the pair is
    ``(eps_hh + eps_c, delta) = (epsilon, delta)``-DP, and the released values are
    post-processing of the pair. For a :class:`PostProcessedSum` of several shards (Design B,
    [LT23, Section 7]) the relation is the sharded one, under assumption A-PART
    (docs/algorithms.md#mg-a-part: one element changes one shard's stream and ``N`` by 1).

    Error (``release.error``, per released key, with probability at least
    ``error_confidence``): ``estimate - below <= f(x) <= estimate + above`` with
    ``below = (max(N_hat, 0) + t_Z)/(k+1)`` and ``above = (t_Z + t_W)/(k+1)``, where ``t_Z`` and
    ``t_W`` are the two-sided ``(1 - error_confidence)/2`` quantiles of ``|Z_x|`` and ``|W|``.
    Only released values and public parameters enter it.

    Parameters
    ----------
    source
        A :class:`PostProcessedSum` (Design B) or a single-stream ``MisraGries`` (post-processed
        here; merged sketches raise ``TypeError``).
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` with ``0 < delta < 1``: the total for both
        mechanisms (any other budget raises ``ValueError`` naming ``budget``).
    stream
        The release's noise stream.
    tight_sensitivity
        Use ``2k - 1`` instead of ``2(k+1)`` (opt-in, docs/algorithms.md#mg-e3).
    count_fraction
        Share of ``epsilon`` spent on ``N_hat``, in ``[0, 1)`` (default 0.05). ``0`` releases
        Algorithm 3's values unchanged (every count ``N/(k+1)`` low in the worst case, no
        ``N_hat``, no error bound).
    error_confidence
        Confidence of the stated per-value error bound, in ``(0, 1)``.
    """
    pp = as_postprocessed(source)
    eps, dl = approx_budget(budget)
    check_stream(stream)
    cf = check_count_fraction(count_fraction, eps)
    error_confidence = check_probability(error_confidence, "error_confidence")
    k, k1 = pp.k, pp.k + 1
    # Split on the 1e-6 grid of the exact samplers, so the two slices add up to eps' exactly.
    eps_total = rational_epsilon_floor(eps)
    eps_c = rational_epsilon_floor(eps_total * Fraction(cf)) if cf > 0.0 else Fraction(0)
    eps_hh = eps_total - eps_c
    sensitivity = _pp_sensitivity(k, tight_sensitivity)
    scale = discrete_laplace_scale(sensitivity, eps_hh)
    tau_int = k + geometric_union_tail(scale, dl, k)
    noisy_n: int | None = None
    if cf > 0.0:
        # Drawn first, from a fixed position of the stream, so its draw never depends on the
        # number of keys below.
        count_scale = discrete_laplace_scale(1, eps_c)
        noisy_n = pp.n + int(discrete_laplace(stream, count_scale, 1)[0])
    values = pp.scaled_counts()
    keys = list(values)
    # Draw for shards * k keys (the most there can be) so the amount of noise drawn does not
    # depend on the data; only the first len(keys) draws are used.
    z = discrete_laplace(stream, scale, pp.shards * k)[: len(keys)]
    v = np.fromiter((values[x] for x in keys), dtype=np.int64, count=len(keys)) + z
    kept = np.flatnonzero(v >= tau_int)
    offset = 0 if noisy_n is None else max(noisy_n, 0)
    pairs = [(keys[i], (int(v[i]) + offset) / k1) for i in kept.tolist()]
    relation, details = _pp_meta(pp)
    details.update(
        epsilon_effective=float(sensitivity / scale),
        integer_scale=float(scale),
        integer_threshold=tau_int,
        count_fraction=cf,
    )
    error = None
    if noisy_n is not None:
        failure = (1.0 - float(error_confidence)) / 2.0
        t_z = geometric_two_sided_quantile(scale, failure)
        t_w = geometric_two_sided_quantile(count_scale, failure)
        error = ErrorBound((offset + t_z) / k1, (t_z + t_w) / k1, float(error_confidence))
        details.update(
            epsilon_effective=float(sensitivity / scale + 1 / count_scale),
            heavy_hitter_epsilon=float(eps_hh),
            count_epsilon=float(eps_c),
            count_noise_scale=float(count_scale),
            threshold_applies_to="the Algorithm 3 value before the count correction",
        )
    return make_release(
        pairs,
        mechanism="APPROX_PP",
        epsilon=eps,
        delta=dl,
        threshold=tau_int / k1,
        noise=NoiseSpec("discrete_laplace", float(scale / k1)),
        k=k,
        neighbouring=relation,
        details=details,
        noisy_count=noisy_n,
        error=error,
    )


def pure_pp(
    source: PostProcessedSum | MisraGries,
    universe: Universe | Iterable[Any],
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    tight_sensitivity: bool = False,
    method: str = "auto",
) -> HeavyHitterRelease:
    """PURE_PP: pure ``epsilon``-DP top-k release of the post-processed sketch ([LT23, Section 6]).

    Chan et al.'s mechanism on the low-sensitivity Algorithm-3 sketch: exact discrete Laplace of
    scale ``2(k+1)/eps`` on the integer values ``V_x`` of **every** key of the declared universe
    (0 for absent keys), then the ``k`` largest, reported as ``value / (k+1)``. For large
    universes the exact cutoff sampler of [LT23, Section 6] draws the absent keys' noise without
    materialising ``U`` (:func:`~.universe.pure_top_k`; ``method="auto"`` enumerates
    only when ``|U| <= 16 * capacity``); with the cutoff, fewer than ``k`` keys may be released
    and the utility bound becomes ``n/(k+1) + max(2B, t0 + B)`` ([LT23, Section 6]).

    Guarantee: pure ``epsilon``-DP (``delta = 0``) under add/remove of one element ([LT23, Definition 1]);
    A-PART (docs/algorithms.md#mg-a-part) for Design B sums. Paper: Section 6 (pure release); utility
    ``O(n/k + log(u)/eps)``, optimal for pure DP.

    Parameters
    ----------
    source
        A :class:`PostProcessedSum` or a single-stream ``MisraGries``.
    universe
        The declared :class:`~.universe.Universe` (or any collection of keys, turned
        into one). A stored key outside it raises ``ValueError``.
    budget
        ``PrivacyBudget.pure(epsilon)`` (any other budget raises ``ValueError`` naming
        ``budget``).
    stream
        The release's noise stream.
    tight_sensitivity
        Use ``2k - 1`` instead of ``2(k+1)`` (opt-in, docs/algorithms.md#mg-e3).
    method
        ``"auto"``, ``"enumerate"`` or ``"sample"``.
    """
    pp = as_postprocessed(source)
    relation, details = _pp_meta(pp)
    return _pure_pp_release(
        pp,
        universe,
        pure_budget(budget),
        stream,
        sensitivity=_pp_sensitivity(pp.k, tight_sensitivity),
        method=method,
        mechanism="PURE_PP",
        relation=relation,
        details=details,
    )


def _pure_pp_release(
    pp: PostProcessedSum,
    universe: Universe | Iterable[Any],
    eps: float,
    stream: NoiseStream,
    *,
    sensitivity: int,
    method: str,
    mechanism: str,
    relation: str,
    details: dict[str, Any],
    privacy_unit: str = "element",
) -> HeavyHitterRelease:
    """Discrete Laplace of integer scale ``sensitivity / eps`` on every key of ``universe``
    (scaled values ``V_x``), then the top ``k``, reported as ``V_x / (k+1)`` ([LT23, Section 6])."""
    if not isinstance(universe, Universe):
        universe = Universe.from_keys(universe)
    check_stream(stream)
    values = pp.scaled_counts()
    validate_in_universe(values, universe)
    k, k1 = pp.k, pp.k + 1
    scale = discrete_laplace_scale(sensitivity, eps)
    top, info = pure_top_k(values, universe, k, scale, stream, capacity=pp.capacity, method=method)
    details.update(info)
    details.update(epsilon_effective=float(sensitivity / scale))
    details["integer_scale"] = float(scale)
    cutoff = info.get("cutoff")
    return make_release(
        [(x, y / k1) for x, y in top],
        mechanism=mechanism,
        epsilon=eps,
        delta=0.0,
        threshold=None if cutoff is None else cutoff / k1,
        noise=NoiseSpec("discrete_laplace", float(scale / k1)),
        k=k,
        neighbouring=relation,
        privacy_unit=privacy_unit,
        details=details,
    )


def user_level_pure_pp(
    source: PostProcessedSum | MisraGries,
    universe: Universe | Iterable[Any],
    budget: PrivacyBudget,
    m: int,
    stream: NoiseStream,
    *,
    tight_sensitivity: bool = False,
    method: str = "auto",
) -> HeavyHitterRelease:
    """User-level PURE_PP: pure ``epsilon``-DP top-k of the post-processed sketch of the
    flattened user stream ([LT23, Section 8, Lemma 4]).

    Each user contributes at most ``m`` elements, flattened into one stream in a fixed
    within-user order (:func:`~beam_dpsketch.sketches.misra_gries.user.flatten_users`).
    Removing one user is ``m`` single-element removals, each of which moves the Algorithm-3
    sketch by ``Delta_1 < 2`` ([LT23, Section 6, Lemma 2]); by the triangle inequality the
    flattened sketch moves by ``Delta_1 < 2m`` ([LT23, Section 8, Lemma 4]). So the release is
    :func:`pure_pp` with ``m`` times its noise: discrete Laplace of scale ``2m/eps`` (integer
    scale ``2m(k+1)/eps``) on every key of the declared universe, then the top ``k``. Utility
    ``n/(k+1) + O(m log(u)/eps)``: linear in ``m``, which [LT23, Section 8] shows no release of
    Misra-Gries counters avoids.

    Guarantee: pure ``epsilon``-DP (``delta = 0``) under add/remove of one user whose
    contribution is at most ``m`` elements (not necessarily distinct or consecutive; group
    privacy by the triangle inequality). A :class:`PostProcessedSum` of several shards keeps it
    under A-PART (docs/algorithms.md#mg-a-part): every removed element moves one shard's
    sketch by less than 2.

    Parameters
    ----------
    source
        A :class:`PostProcessedSum` or a single-stream ``MisraGries`` of the flattened stream.
    universe
        The declared :class:`~.universe.Universe` (or any collection of keys). A stored key
        outside it raises ``ValueError``.
    budget
        ``PrivacyBudget.pure(epsilon)`` for one user (any other budget raises ``ValueError``
        naming ``budget``).
    m
        The most elements one user contributes, ``>= 1``.
    stream
        The release's noise stream.
    tight_sensitivity
        ``m (2k - 1)`` instead of ``2m(k+1)`` on the integer scale (opt-in,
        docs/algorithms.md#mg-e3).
    method
        ``"auto"``, ``"enumerate"`` or ``"sample"`` (:func:`~.universe.pure_top_k`).
    """
    pp = as_postprocessed(source)
    eps = pure_budget(budget)
    mm = check_int(m, "m")
    _, details = _pp_meta(pp)
    details["m"] = mm
    return _pure_pp_release(
        pp,
        universe,
        eps,
        stream,
        sensitivity=mm * _pp_sensitivity(pp.k, tight_sensitivity),
        method=method,
        mechanism="user-level PURE_PP",
        relation=user_flattened_relation(mm),
        details=details,
        privacy_unit="user",
    )
