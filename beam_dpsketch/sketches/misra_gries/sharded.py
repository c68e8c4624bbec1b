"""Sharded sequential Misra-Gries: Design D (key-partitioned shards) and the untrusted-aggregator sum.

Pure numpy, no Beam. Both releases run PMG ([LT23, Algorithm 2]) on each shard's own
Algorithm-1 sketch, built **sequentially** from that shard's sub-stream (never merged), with
noise from a stream derived from the release's stream and the shard id (:func:`shard_stream`),
so the shards' noise is independent. They differ in how the data is cut and in what leaves:

* **Design D** (:func:`design_d`): element ``x`` goes to shard ``j(x) = H(x) mod s``, a fixed
  public hash of the key (:func:`shard_ids`), so every key lives in one shard. The release is
  the union of the shards' released pairs, optionally cut to the ``top`` largest noisy values
  (post-processing). Removing one element deletes it from one shard's sub-stream and leaves
  every other shard's unchanged, so the tuple of per-shard PMG releases is
  ``(epsilon, delta)``-DP under add/remove of one element by parallel composition. Derived here,
  not a mechanism of the paper (docs/algorithms.md#mg-design-d). Element level only: one user's
  elements can reach up to ``m`` shards.
* **Untrusted aggregator** (:func:`untrusted_sum`, [LT23, Section 7], after Chan, Li, Shi and
  Xu): the data is already cut into ``s`` disjoint parts (data holders), each releases PMG on its
  own, and the aggregator adds the released values per key (0 where a shard did not release
  the key). Each shard's release is ``(epsilon, delta)``-DP for its own data, so the aggregator
  need not be trusted; the error grows with ``s`` (up to ``s`` noise terms and up to ``s - 1``
  thresholds lost per key). A comparison point, not a recommended release
  (docs/algorithms.md#mg-untrusted).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Self

import numpy as np
import pyarrow as pa

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_choice, check_int
from beam_dpsketch.hashing import hash_keys
from beam_dpsketch.noise import NoiseStream
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.misra_gries.error_check import (
    SKETCH_CHECK_FAILURE,
    check_error_confidence,
)
from beam_dpsketch.sketches.misra_gries.pmg_release import pmg, require_single_stream
from beam_dpsketch.sketches.misra_gries.release import (
    NEIGHBOURING_ELEMENT,
    ErrorBound,
    HeavyHitterRelease,
    approx_budget,
    check_stream,
    make_release,
)
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries

__all__ = [
    "MAX_SHARDS",
    "NEIGHBOURING_HOLDERS",
    "PARTITIONS",
    "SHARD_SEED",
    "ShardedMisraGries",
    "design_d",
    "max_untrusted_shards",
    "shard_ids",
    "shard_stream",
    "split_by_shard",
    "untrusted_sum",
    "untrusted_shard_confidence",
]

#: Public seed of the shard hash ``H``: the shard of a key (or of a holder) is a fixed function
#: of it, independent of the data and of any secret, so which shard an element reaches never
#: depends on the other elements.
SHARD_SEED = 0xD5_4A2D
#: Most shards a sharded sketch may have (each shard's release draws ``k + 1`` noise values).
MAX_SHARDS = 1 << 12
#: How the elements are cut into shards: ``"key"`` (Design D, by the hash of the element's key)
#: or ``"holder"`` (by the data holder that owns the element, the untrusted setting).
PARTITIONS = ("key", "holder")
#: Neighbouring relation of the untrusted-aggregator sum.
NEIGHBOURING_HOLDERS = (
    "add/remove one stream element, which belongs to exactly one shard (data holder); each "
    "shard releases for its own elements only, so the shards' releases compose in parallel "
    "([LT23, Definition 1; Section 7])"
)


def check_shards(shards: Any) -> int:
    """``shards`` as an int in ``[1, MAX_SHARDS]`` (``ValueError`` naming ``shards``)."""
    return check_int(shards, "shards", lower=1, upper=MAX_SHARDS)


def shard_ids(values: Any, shards: int) -> np.ndarray:
    """The shard ``H(v) mod shards`` of every value (keys, or holder ids), as ``int64``.

    ``H`` is MurmurHash3 of the canonical key encoding under the public :data:`SHARD_SEED`
    (:func:`~beam_dpsketch.hashing.hash_keys`), never Python's salted built-in hash: the same value reaches
    the same shard in every process, run and machine.
    """
    s = check_shards(shards)
    h1, _ = hash_keys(values, SHARD_SEED)
    return (h1 % np.uint64(s)).astype(np.int64)


def split_by_shard(keys: Any, shards: int, by: Any = None) -> list[tuple[int, Any]]:
    """``(shard, keys of that shard)`` for every shard that receives keys, shards ascending.

    Each part keeps the arrival order of ``keys`` (a numpy or pyarrow array stays one, anything
    else becomes a list). The shard of a key is that of the matching entry of ``by`` (default: the
    key itself).
    """
    ids = shard_ids(keys if by is None else by, shards)
    out: list[tuple[int, Any]] = []
    for j in np.unique(ids).tolist():
        where = np.flatnonzero(ids == j)
        if isinstance(keys, np.ndarray):
            part: Any = keys[where]
        elif isinstance(keys, pa.Array | pa.ChunkedArray):
            part = keys.take(pa.array(where))
        else:
            seq = keys if isinstance(keys, list) else list(keys)
            part = [seq[i] for i in where.tolist()]
        out.append((int(j), part))
    return out


def shard_stream(stream: NoiseStream, shard: int) -> NoiseStream:
    """The noise stream of shard ``shard`` of a sharded release (independent across shards).

    A :meth:`~beam_dpsketch.noise.NoiseStream.substream` of the release's stream, so each
    shard's draws depend only on the release's key and the shard id, never on the other shards.
    """
    return stream.substream(("misra-gries-shard", int(shard)))


class ShardedMisraGries:
    """``s`` sequential Algorithm-1 sketches of size ``k``, one per shard.

    ``partition="key"`` (Design D): :meth:`update` sends each key to shard ``H(key) mod s``.
    ``partition="holder"`` (untrusted aggregator): the caller names each part's shard with
    :meth:`update_shard`. A shard no element reached holds an empty sketch.

    :meth:`merge` adds the shards of another sketch; a shard present in both is merged with
    ``MERGE_k`` (marking it merged, which PMG then refuses): a shard must be built from one
    sequential sub-stream.

    Parameters
    ----------
    k
        Counters per shard.
    shards
        Number of shards ``s``, ``1 <= s <= MAX_SHARDS``.
    partition
        ``"key"`` or ``"holder"`` (:data:`PARTITIONS`).
    """

    KIND = "ShardedMisraGries"

    def __init__(self, k: int, shards: int, partition: str = "key") -> None:
        MisraGries(k)  # checks k, names it
        self.k = int(k)
        self.shards = check_shards(shards)
        self.partition = check_choice(partition, "partition", PARTITIONS)
        self._sketches: dict[int, MisraGries] = {}

    def shard(self, j: int) -> MisraGries:
        """Shard ``j``'s sketch (an empty one if no element reached it)."""
        j = check_int(j, "shard", lower=0, upper=self.shards - 1)
        sketch = self._sketches.get(j)
        return MisraGries(self.k) if sketch is None else sketch

    def update(self, keys: Any) -> Self:
        """Send each key of the batch to its shard ``H(key) mod s``, in arrival order."""
        if self.partition != "key":
            raise ValueError(
                "partition: a sketch partitioned by holder takes update_shard(shard, keys)"
            )
        for j, part in split_by_shard(keys, self.shards):
            self.update_shard(j, part)
        return self

    def update_shard(self, shard: int, keys: Any) -> Self:
        """Add a batch of keys, in arrival order, to shard ``shard``'s sequential sketch."""
        j = check_int(shard, "shard", lower=0, upper=self.shards - 1)
        sketch = self._sketches.get(j)
        if sketch is None:
            sketch = self._sketches[j] = MisraGries(self.k)
        sketch.update(keys)
        return self

    def add_shard(self, shard: int, sketch: MisraGries) -> Self:
        """Set shard ``shard``'s sketch (merged with ``MERGE_k`` into one already held)."""
        j = check_int(shard, "shard", lower=0, upper=self.shards - 1)
        if not isinstance(sketch, MisraGries) or sketch.k != self.k:
            raise ValueError(f"sketch: shard {j} needs a MisraGries of k={self.k}")
        held = self._sketches.get(j)
        self._sketches[j] = sketch.copy() if held is None else held.merge(sketch)
        return self

    def merge(self, other: ShardedMisraGries) -> Self:
        """Add ``other``'s shards (same ``k``, ``shards`` and ``partition``)."""
        if not isinstance(other, ShardedMisraGries) or (other.k, other.shards, other.partition) != (
            self.k,
            self.shards,
            self.partition,
        ):
            raise ValueError(
                "other: sharded sketches merge only with the same k, shards and partition"
            )
        for j, sketch in other._sketches.items():
            self.add_shard(j, sketch)
        return self

    def sketches(self) -> list[MisraGries]:
        """Every shard's sketch, shard 0 first (empty sketches for shards no element reached)."""
        return [self.shard(j) for j in range(self.shards)]

    def is_empty(self) -> bool:
        return all(sk.is_empty() for sk in self._sketches.values())

    def to_bytes(self) -> bytes:
        """Serialize with the versioned format of :mod:`beam_dpsketch.serialization`."""
        ids = sorted(self._sketches)
        data, offsets = serialization.pack_bytes_list([self._sketches[j].to_bytes() for j in ids])
        params = {"k": self.k, "shards": self.shards, "partition": self.partition}
        arrays = {
            "shard_ids": np.array(ids, dtype=np.int64),
            "sketch_data": data,
            "sketch_offsets": offsets,
        }
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> ShardedMisraGries:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        k, shards = req(params, "k", int), req(params, "shards", int)
        partition = req(params, "partition", str)
        try:
            out = cls(k, shards, partition)
        except ValueError:
            raise err("malformed sharded Misra-Gries parameters") from None
        ids = serialization.require_array(arrays, "shard_ids", "<i8")
        blobs = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "sketch_data", "|u1"),
            serialization.require_array(arrays, "sketch_offsets", "<i8"),
        )
        if ids.ndim != 1 or len(ids) != len(blobs) or len(np.unique(ids)) != len(ids):
            raise err("malformed shard list")
        if len(ids) and (ids.min() < 0 or ids.max() >= shards):
            raise err("shard id out of range")
        for j, blob in zip(ids.tolist(), blobs, strict=True):
            sketch = MisraGries.from_bytes(blob)
            if sketch.k != k:
                raise err("a shard's sketch has another k")
            out._sketches[int(j)] = sketch
        return out

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, ShardedMisraGries)
            and (self.k, self.shards, self.partition) == (other.k, other.shards, other.partition)
            and self.sketches() == other.sketches()
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"ShardedMisraGries(k={self.k}, shards={self.shards}, partition={self.partition!r})"

    def __reduce__(self):
        return (ShardedMisraGries.from_bytes, (self.to_bytes(),))


def _shard_releases(
    sketches: list[MisraGries],
    budget: PrivacyBudget,
    stream: NoiseStream,
    error_confidence: float | None,
) -> list[HeavyHitterRelease]:
    """PMG on every shard's sketch, each on its own :func:`shard_stream`."""
    for sketch in sketches:
        require_single_stream(sketch, "a sharded release")
    return [
        pmg(sketch, budget, shard_stream(stream, j), error_confidence=error_confidence)
        for j, sketch in enumerate(sketches)
    ]


def _shared_details(releases: list[HeavyHitterRelease], shards: int) -> dict[str, Any]:
    """Public details of a sharded release: the per-shard calibration, and the checks' outcomes
    summed over the shards (each check is a DP statistic of one shard's elements)."""
    first = dict(releases[0].details)
    out: dict[str, Any] = {
        key: first[key]
        for key in (
            "epsilon_effective",
            "threshold_form",
            "lattice",
            "release_epsilon",
            "exactness_test_epsilon",
            "count_check_epsilon",
        )
        if key in first
    }
    out["shards"] = shards
    out["per_shard_mechanism"] = releases[0].mechanism
    if "exactness_test_passed" in first:
        out["exactness_tests_passed"] = sum(
            bool(r.details["exactness_test_passed"]) for r in releases
        )
        out["sketch_error_bound"] = max(float(r.details["sketch_error_bound"]) for r in releases)
    return out


def design_d(
    sketch: ShardedMisraGries,
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    top: int | None = None,
    error_confidence: float | None = None,
) -> HeavyHitterRelease:
    """Design D: PMG on every key-partitioned shard, and the union of the released pairs.

    Each shard's Algorithm-1 sketch gets PMG (:func:`~.pmg_release.pmg`, discrete noise on the
    lattice, [LT23, Algorithm 2; Section 5.2]) at the full budget, with noise from its own
    :func:`shard_stream`; every key lives in one shard, so the union has no key twice.
    ``top`` keeps the ``top`` largest noisy values (post-processing).

    Guarantee: ``(epsilon, delta)``-DP under add/remove of one element ([LT23, Definition 1]):
    removing an element deletes it from the sub-stream of its key's shard only (the partition is
    a fixed hash of the key), PMG on that shard is ``(epsilon, delta)``-DP (Lemma 6), the other
    shards' releases do not change in distribution, and the shards' noise is independent, so
    the releases compose in parallel. Derived here (docs/algorithms.md#mg-design-d). Element
    level only.

    Utility: with probability ``>= 1 - beta``, every key satisfies
    ``|f~(x) - f(x)| < n_j(x)/(k+1) + tau + 2 ln(s (k+1)/beta)/eps`` (Theorem 8 in each shard,
    union bound over the ``s (k+1)`` draws), with ``n_j(x)`` the size of the key's shard. With
    ``error_confidence``, each shard's release runs its two private checks
    (:class:`~.error_check.SketchCheck`) on its own elements, and every released value carries
    the widest per-shard bound: ``estimate - t <= f(x) <= estimate + t + max_j s_j``, for each
    released key separately at ``error_confidence`` (a key's value depends on its own shard only).

    Parameters
    ----------
    sketch
        A :class:`ShardedMisraGries` with ``partition="key"`` (``TypeError`` otherwise).
    budget
        ``PrivacyBudget.approx(epsilon, delta)``, spent once (parallel composition).
    stream
        The release's noise stream.
    top
        Keep only the ``top`` largest noisy values (``None``: every released key, at most
        ``s * k``).
    error_confidence
        As for :func:`~.pmg_release.pmg`.
    """
    if not isinstance(sketch, ShardedMisraGries) or sketch.partition != "key":
        raise TypeError(
            "design_d needs a ShardedMisraGries partitioned by the key hash (partition='key'), "
            f"got {type(sketch).__name__}"
        )
    eps, dl = approx_budget(budget)
    check_stream(stream)
    releases = _shard_releases(sketch.sketches(), budget, stream, error_confidence)
    first = releases[0]
    error = None
    if error_confidence is not None:
        bounds = [r.error for r in releases if r.error is not None]
        error = ErrorBound(
            max(b.below for b in bounds), max(b.above for b in bounds), bounds[0].confidence
        )
    out = make_release(
        [pair for r in releases for pair in r.items],
        mechanism=f"Design-D/{first.mechanism}",
        epsilon=eps,
        delta=dl,
        threshold=first.threshold,
        noise=first.noise,
        k=sketch.k,
        neighbouring=NEIGHBOURING_ELEMENT,
        details=_shared_details(releases, sketch.shards),
        error=error,
    )
    return out if top is None else out.top(top)


def max_untrusted_shards(error_confidence: float) -> int:
    """The most shards whose summed release can state a bound at ``error_confidence``.

    The bound of one summed value holds when every shard's noise and checks do (union bound):
    each shard's statement must hold at ``1 - (1 - error_confidence)/s``, which must stay below
    ``1 - 2 * SKETCH_CHECK_FAILURE``.
    """
    conf = check_error_confidence(error_confidence)
    s = min(MAX_SHARDS, int((1.0 - conf) / (2.0 * SKETCH_CHECK_FAILURE)) + 1)
    while s > 1:
        try:
            # The very check each shard's release applies to its confidence.
            check_error_confidence(1.0 - (1.0 - conf) / s)
        except ValueError:
            s -= 1
        else:
            break
    return s


def untrusted_shard_confidence(error_confidence: float, shards: int) -> float:
    """Each shard's confidence so that all ``shards`` hold at ``error_confidence`` (union bound).

    ``ValueError`` naming ``shards`` above :func:`max_untrusted_shards`.
    """
    s = check_shards(shards)
    limit = max_untrusted_shards(error_confidence)
    if s > limit:
        raise ValueError(
            f"shards must be at most {limit} for an error bound at confidence "
            f"{error_confidence:g} on the untrusted sum, got {s}"
        )
    return 1.0 - (1.0 - float(error_confidence)) / s


def untrusted_sum(
    shards: ShardedMisraGries | Sequence[MisraGries],
    budget: PrivacyBudget,
    stream: NoiseStream,
    *,
    error_confidence: float | None = None,
) -> HeavyHitterRelease:
    """The untrusted-aggregator baseline: PMG on every shard, released values summed per key.

    Each shard (data holder) releases PMG ([LT23, Algorithm 2]) on its own sequential sketch
    with its own :func:`shard_stream`; the aggregator adds the released values of each key over
    the shards that released it (a shard that did not contributes 0). [LT23, Section 7]
    (the untrusted setting of Chan, Li, Shi and Xu): the error grows with the number of shards.

    Guarantee: ``(epsilon, delta)``-DP under add/remove of one element that belongs to one shard
    (:data:`NEIGHBOURING_HOLDERS`): each shard's release is ``(epsilon, delta)``-DP for its own
    elements (Lemma 6) and the shards hold disjoint data, so the tuple of releases is, by
    parallel composition, and the sum is post-processing of it. The aggregator sees only
    released values.

    Error (docs/algorithms.md#mg-untrusted, derived here): a key's value carries up to ``s``
    noise terms, each of variance ``4/eps^2``, and each shard that did not release the key may
    hide up to its threshold ``tau`` plus noise. With ``error_confidence``, each shard states its
    bound at ``1 - (1 - error_confidence)/s`` (union bound over the shards) and every summed
    value carries ``estimate - s t <= f(x) <= estimate + s t + (s - 1) tau + sum_j s_j``, for
    each released key separately.

    Parameters
    ----------
    shards
        A :class:`ShardedMisraGries` (either partition), or one single-stream
        :class:`~.sketch.MisraGries` per shard (same ``k``).
    budget, stream, error_confidence
        As for :func:`design_d`; ``error_confidence`` allows at most
        :func:`max_untrusted_shards` shards.
    """
    if isinstance(shards, ShardedMisraGries):
        sketches = shards.sketches()
    elif isinstance(shards, Sequence) and not isinstance(shards, str | bytes):
        sketches = list(shards)
        if not sketches or any(not isinstance(sk, MisraGries) for sk in sketches):
            raise TypeError("shards must be a ShardedMisraGries or a list of MisraGries sketches")
        if len({sk.k for sk in sketches}) != 1:
            raise ValueError("shards: every shard's sketch must have the same k")
        check_shards(len(sketches))
    else:
        raise TypeError(
            "shards must be a ShardedMisraGries or a list of MisraGries sketches, got "
            f"{type(shards).__name__}"
        )
    eps, dl = approx_budget(budget)
    check_stream(stream)
    s = len(sketches)
    per_shard = None
    if error_confidence is not None:
        per_shard = untrusted_shard_confidence(check_error_confidence(error_confidence), s)
    releases = _shard_releases(sketches, budget, stream, per_shard)
    totals: dict[Any, float] = {}
    for release in releases:
        for key, value in release.items:
            totals[key] = totals.get(key, 0.0) + float(value)
    first = releases[0]
    tau = float(first.threshold)  # type: ignore[arg-type]
    error = None
    if error_confidence is not None:
        bounds = [r.error for r in releases if r.error is not None]
        t = bounds[0].below
        # Below: at most s noise terms; above: their s quantiles, every shard's own shortfall,
        # and up to s - 1 shards that kept the key below their threshold.
        error = ErrorBound(
            s * t,
            s * t + (s - 1) * tau + sum(b.above - b.below for b in bounds),
            float(error_confidence),
        )
    details = _shared_details(releases, s)
    details["shard_threshold"] = tau
    if per_shard is not None:
        details["shard_error_confidence"] = per_shard
    return make_release(
        totals.items(),
        mechanism=f"Untrusted-sum/{first.mechanism}",
        epsilon=eps,
        delta=dl,
        threshold=tau,
        noise=first.noise,
        k=first.k,
        neighbouring=NEIGHBOURING_HOLDERS,
        details=details,
        error=error,
    )
