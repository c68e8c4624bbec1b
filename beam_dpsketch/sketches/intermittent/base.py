"""Strategy-independent machinery of the intermittent-query sketches: answers, query helpers, and the base class.

A module of its own because every strategy (use-and-keep in
:mod:`beam_dpsketch.sketches.intermittent.sketch`, the alternatives in
:mod:`beam_dpsketch.sketches.intermittent.strategies`) shares this state, ingestion, answering
protocol and serialization, while only the noise step differs. The model, noise scheme and
safety rules are described in the docstring of :mod:`beam_dpsketch.sketches.intermittent.sketch`,
which re-exports every public name here.
"""

from __future__ import annotations

import abc
import math
import numbers
import warnings
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any, ClassVar, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_choice, renamed_keyword
from beam_dpsketch.hashing import (
    check_key_like,
    decode_key,
    encode_key,
    hash_keys,
    row_buckets,
    row_signs,
)
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import rational_epsilon_floor
from beam_dpsketch.sketches.linear.base import LinearSketch
from beam_dpsketch.sketches.linear.calibration import noise_variance
from beam_dpsketch.sketches.linear.countmin import CountMinSketch
from beam_dpsketch.sketches.linear.countsketch import CountSketch

__all__ = [
    "MAX_BATCHES",
    "NOISE_BLOCK",
    "SKETCH_KINDS",
    "IntermittentAnswer",
    "IntermittentSketch",
    "check_scale",
    "check_sketch_kind",
    "combine_rows",
    "discrete_laplace_variance",
    "fraction_str",
    "mhat_bound",
    "parse_fraction",
    "pure_budget_epsilon",
    "sensitive_query_bound",
    "unique_hashes",
]


#: Cells per noise stream (see :mod:`beam_dpsketch.sketches.intermittent.sketch`). Part of the state format: changing it
#: changes every draw, so it is recorded in :meth:`IntermittentSketch.to_bytes`.
NOISE_BLOCK = 4096

#: ``kind`` values (as in the other DP sketches and transforms) and the exact sketch each composes.
SKETCH_KINDS: dict[str, type[LinearSketch]] = {
    "count-sketch": CountSketch,
    "count-min": CountMinSketch,
}
#: The code each ``kind`` is serialized as (part of the state format, so it stays as it is).
_KIND_CODES: dict[str, str] = {"count-sketch": "count_sketch", "count-min": "count_min"}
_KIND_OF_CODE: dict[str, str] = {code: kind for kind, code in _KIND_CODES.items()}


def check_sketch_kind(kind: Any) -> str:
    """``kind`` as its public name, ``"count-sketch"`` or ``"count-min"`` (``ValueError`` otherwise).

    The serialized codes ``"count_sketch"`` / ``"count_min"`` are also accepted, with a
    ``DeprecationWarning``, and mapped to the public name.
    """
    return check_choice(kind, "kind", SKETCH_KINDS, deprecated=_KIND_OF_CODE, stacklevel=4)


#: Largest scale :func:`beam_dpsketch.noise.discrete_laplace` accepts.
_MAX_SCALE = Fraction(1 << 52)
_FORMAT = "intermittent/v1"


def discrete_laplace_variance(scale: float | Fraction) -> float:
    """Variance ``2a/(1-a)^2``, ``a = exp(-1/scale)``, of one discrete Laplace draw (docs/algorithms.md#int-oracles)."""
    return noise_variance("discrete_laplace", float(scale))


#: Largest ``batches`` a decoded state may claim: a count stored as int64 elsewhere in the
#: library; strategies whose budget runs out bound it further (``_restore_state``).
MAX_BATCHES = (1 << 63) - 1


def check_scale(scale: Fraction, what: str) -> Fraction:
    """``scale`` if the sampler accepts it, else a ``ValueError`` saying the budget is exhausted."""
    if scale > _MAX_SCALE:
        # Only the order of magnitude: an exhausted geometric budget gives scales far beyond a
        # float's range, and the message must not fail on them.
        bits = scale.numerator.bit_length() - scale.denominator.bit_length()
        raise ValueError(
            f"{what}: the noise scale (about 2**{bits}) exceeds the sampler limit 2**52; the "
            "budget is exhausted (answers would carry no information)"
        )
    return scale


# --------------------------------------------------------------------------------------------
# Answers
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class IntermittentAnswer:
    """The release of one query batch, with its privacy metadata (all public, [YKAE, Section III-A] and docs/algorithms.md#int-error-bars).

    Attributes
    ----------
    estimates
        float64 ``(n,)``: one private estimate per query key, in query order (duplicates get the
        same value).
    batch
        1-based index ``k`` of this batch among the non-empty batches, ``None`` for an empty one
        (nothing released, no noise drawn, docs/algorithms.md#int-beam).
    time
        The public batch time the caller declared, or ``None``.
    strategy
        Name of the strategy (e.g. ``"use_and_keep"``).
    epsilon_total
        Pure-DP guarantee covering every release of the object so far, this one included.
    noise_std
        float64 ``(n,)``: standard deviation of the DP noise in each answer. Output-perturbation
        strategies: exact (the answer noise). Cell strategies: docs/algorithms.md#int-error-bars summary
        ``median_i sqrt(row_noise_variance[i])``.
    row_noise_variance
        float64 ``(depth, n)``: exact variance of the DP noise on each row's cell (cell
        strategies only, else ``None``). Depends only on public use counts.
    uses
        int32 ``(depth, n)``: how many batches, this one included, have noised each cell the
        query reads (``u_i`` of [YKAE, Theorem 5]; cell strategies only, else ``None``).
    row_values, cells, cell_values
        With ``details=True`` on cell strategies: the signed noisy row values ``(depth, n)``,
        the flat indices (``row * width + column``, sorted) of the cells this batch noised and
        their released (unsigned) values. Releasing them costs nothing extra ([YKAE, Section III-A]).
    """

    estimates: np.ndarray
    batch: int | None
    time: float | int | None
    strategy: str
    epsilon_total: float
    noise_std: np.ndarray
    row_noise_variance: np.ndarray | None = None
    uses: np.ndarray | None = None
    row_values: np.ndarray | None = None
    cells: np.ndarray | None = None
    cell_values: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.estimates.size)


# --------------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------------


def combine_rows(values: np.ndarray, signed: bool) -> np.ndarray:
    """Median (Count Sketch) or minimum (Count-Min) over axis 0 of ``(depth, n)``, float64.

    An even number of rows takes the mean of the two middle values (docs/algorithms.md#int-a11; still
    1-Lipschitz, [YKAE, Section III-A]). ``np.partition`` is several times faster than ``np.median`` here.
    """
    d = values.shape[0]
    if not signed:
        return values.min(axis=0).astype(np.float64)
    if d == 1:
        return values[0].astype(np.float64)
    if d % 2:
        return np.partition(values, d // 2, axis=0)[d // 2].astype(np.float64)
    part = np.partition(values, (d // 2 - 1, d // 2), axis=0)
    return (part[d // 2 - 1].astype(np.float64) + part[d // 2]) / 2.0


def _as_hashes(h1: Any, h2: Any) -> tuple[np.ndarray, np.ndarray]:
    h1 = np.asarray(h1)
    h2 = np.asarray(h2)
    if h1.dtype != np.uint64 or h2.dtype != np.uint64:
        raise TypeError("h1 and h2 must be uint64 arrays from beam_dpsketch.hashing.hash_keys")
    if h1.ndim != 1 or h1.shape != h2.shape:
        raise ValueError("h1 and h2 must be one-dimensional arrays of the same length")
    return h1, h2


def unique_hashes(h1: np.ndarray, h2: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct keys of a batch by their 128-bit hashes, sorted by ``(h1, h2)``.

    Returns ``(u1, u2, inverse)`` with ``u1[inverse] == h1`` and ``u2[inverse] == h2``. Two keys
    with the same ``(h1, h2)`` read the same cells with the same signs, so they have the same
    answer under every strategy; treating them as one query is exact ([YKAE, Section III-B], library choice).
    """
    u1, first, inverse = np.unique(h1, return_index=True, return_inverse=True)
    u2 = h2[first]
    if np.array_equal(u2[inverse], h2):
        return u1, u2, inverse
    # Equal h1 with different h2 (probability ~n^2 / 2**64): exact two-key unique.
    pairs = np.stack([h1, h2], axis=1)
    uniq, inverse = np.unique(pairs, axis=0, return_inverse=True)
    return (
        np.ascontiguousarray(uniq[:, 0]),
        np.ascontiguousarray(uniq[:, 1]),
        inverse.reshape(-1),
    )


def mhat_bound(buckets: np.ndarray, width: int) -> int:
    """Algorithm 2 ([YKAE, Section III-B]): ``sum_i max_j #{x in Q : h_i(x) = j}`` over distinct keys."""
    return int(sum(int(np.bincount(row, minlength=width).max()) for row in buckets))


def sensitive_query_bound(keys: Any, width: int, depth: int, seed: int = 0) -> int:
    """``mtilde_Q = min(n_Q, mhat_Q)``: an upper bound on ``m_Q``, the worst-case number of answers
    one stream element can change ([YKAE, Section III-B] eq. 3, Algorithm 2, Proposition 1, docs/algorithms.md#int-e3, docs/algorithms.md#int-e4).

    ``n_Q`` counts distinct keys (duplicates are one query). ``mhat_Q`` is the union bound of
    Algorithm 2 over the rows ``row_buckets(..., depth, width)`` of the library's hashing.
    """
    h1, h2 = hash_keys(keys, seed)
    u1, u2, _ = unique_hashes(h1, h2)
    if u1.size == 0:
        return 0
    return min(int(u1.size), mhat_bound(row_buckets(u1, u2, int(depth), int(width)), int(width)))


def _check_source(noise_source: Any) -> NoiseSource:
    if not isinstance(noise_source, NoiseSource):
        raise TypeError(f"noise_source must be a NoiseSource, got {type(noise_source).__name__}")
    return noise_source


def _source_check(source: NoiseSource, release_prefix: Any) -> str:
    """A fingerprint tying saved state to its noise source without revealing the key.

    32 bits of a keystream that is never used for noise: detects restoring with the wrong source.
    """
    return f"{int(source.stream((release_prefix, 'source-check')).uint64(1)[0]) >> 32:08x}"


def _check_time(time: Any) -> float | int | None:
    if time is None:
        return None
    if isinstance(time, bool | np.bool_) or not isinstance(time, numbers.Real):
        raise TypeError(f"time must be a real number or None, got {type(time).__name__}")
    value = int(time) if isinstance(time, numbers.Integral) else float(time)
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"time must be finite, got {time!r}")
    return value


def fraction_str(x: Fraction) -> str:
    return f"{x.numerator}/{x.denominator}"


def parse_fraction(text: Any, name: str) -> Fraction:
    if not isinstance(text, str):
        raise serialization.SketchFormatError(f"parameter {name!r} must be a 'p/q' string")
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise serialization.SketchFormatError(f"parameter {name!r} is not a fraction") from None


# --------------------------------------------------------------------------------------------
# Base class
# --------------------------------------------------------------------------------------------


#: Neighbouring relations of a budget, and the factor between each and the add/remove epsilon
#: the cells are calibrated to.
_SPLIT = {"add_remove": 1, "replace": 2}


def pure_budget_epsilon(budget: Any) -> Fraction:
    """The epsilon of a pure budget, rounded down to an exact rational.

    Raises
    ------
    TypeError
        If ``budget`` is not a :class:`~beam_dpsketch.privacy.PrivacyBudget`.
    ValueError
        If it is not pure DP: every strategy here is pure ``epsilon``-DP (discrete Laplace).
    """
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(
            f"budget must be a PrivacyBudget (PrivacyBudget.pure(eps)), got {type(budget).__name__}"
        )
    if budget.kind != "pure":
        raise ValueError(
            "budget must be pure DP (PrivacyBudget.pure(eps)): the intermittent sketches are "
            f"pure eps-DP (Yildirim et al., Theorem 4), got {budget}"
        )
    return rational_epsilon_floor(budget.epsilon)  # type: ignore[arg-type]


def _check_neighbouring(neighbouring: Any, cls: type) -> str:
    check_choice(neighbouring, "neighbouring", _SPLIT)
    if neighbouring == "replace" and not cls.REPLACE_ONE:  # type: ignore[attr-defined]
        raise ValueError(
            f"neighbouring: 'replace' is analysed for UseAndKeepSketch only, not {cls.__name__}"
        )
    return neighbouring


class IntermittentSketch(abc.ABC):
    """Shared machinery of every intermittent-query strategy (not instantiated directly).

    Every subclass takes the parameters below.

    Parameters
    ----------
    width
        Columns ``w >= 2`` (docs/algorithms.md#int-beam).
    depth
        Rows ``d`` in ``[1, 64]``. Count Sketch with an even depth answers with the mean of the two
        middle rows (docs/algorithms.md#int-a11) and warns; output-perturbation strategies require an odd depth
        for Count Sketch.
    budget
        ``PrivacyBudget.pure(epsilon)``: the strategy's pure-DP budget. ``epsilon`` is rounded
        **down** to a rational with denominator ``<= 10**6``
        (:func:`~beam_dpsketch.privacy.calibration.rational_epsilon_floor`): more noise, never less.
    noise_source
        The :class:`~beam_dpsketch.noise.NoiseSource` all noise comes from. Beam and CLI paths
        must pass it through :func:`~beam_dpsketch.noise.check_release_source`.
    release_prefix
        Public id of this sketch (anything :func:`~beam_dpsketch.hashing.encode_key` accepts);
        the prefix of every noise stream. Must be unique per sketch instance. Required; the
        keyword ``sketch_id`` is a deprecated spelling of it.
    kind
        ``"count-sketch"`` (median of signed cells, unbiased; the paper's choice) or
        ``"count-min"`` (minimum of cells; [YKAE, Section VII]: same noise scales).
    seed
        Public hash seed in ``[0, 2**32)``, fixed before any data is seen (docs/algorithms.md#int-beam).
    neighbouring
        The neighbouring relation ``budget`` is for: ``"add_remove"`` (default; one element
        added or removed, every other element's time unchanged) or ``"replace"`` (one element's
        key replaced at a fixed time; :class:`UseAndKeepSketch` only, which then calibrates its
        cells for ``epsilon / 2`` under add/remove).
    """

    STRATEGY: ClassVar[str] = ""
    KIND: ClassVar[str] = ""
    #: Whether noise is on cells (answers are post-processing) rather than on answers.
    CELL_NOISE: ClassVar[bool] = True
    #: Whether ``neighbouring="replace"`` is analysed for this strategy.
    REPLACE_ONE: ClassVar[bool] = False

    def __init__(
        self,
        width: int,
        depth: int,
        budget: PrivacyBudget,
        *,
        noise_source: NoiseSource,
        release_prefix: Any = None,
        kind: str = "count-sketch",
        seed: int = 0,
        neighbouring: str = "add_remove",
        sketch_id: Any = None,
    ) -> None:
        release_prefix = renamed_keyword(release_prefix, sketch_id, "release_prefix", "sketch_id")
        if release_prefix is None:
            raise TypeError("missing required keyword argument: 'release_prefix'")
        kind = check_sketch_kind(kind)
        exact = SKETCH_KINDS[kind](width, depth, seed)
        if exact.width < 2:
            raise ValueError(f"width must be >= 2 (docs/algorithms.md#int-beam), got {width}")
        self._exact = exact
        self._kind = kind
        self._neighbouring = _check_neighbouring(neighbouring, type(self))
        # The add/remove epsilon the noise is calibrated to: a replacement is one removal plus
        # one addition, so "replace" halves it (exactly, as a rational).
        self._epsilon = pure_budget_epsilon(budget) / _SPLIT[self._neighbouring]
        self._source = _check_source(noise_source)
        self._release_prefix = check_key_like(release_prefix, "release_prefix")
        self._batches = 0
        self._last_time: float | int | None = None
        self._ingest: str | None = None
        self._check_depth()
        self._init_state()

    # ---------------------------------------------------------------- configuration

    def _check_depth(self) -> None:
        if self.signed and self.depth % 2 == 0:
            warnings.warn(
                f"depth={self.depth} is even: Count Sketch answers use the mean of the two middle "
                "rows (docs/algorithms.md#int-a11); the paper uses odd depths",
                UserWarning,
                stacklevel=3,
            )

    @abc.abstractmethod
    def _init_state(self) -> None:
        """Create the strategy's empty noise / budget state."""

    @property
    def width(self) -> int:
        return self._exact.width

    @property
    def depth(self) -> int:
        return self._exact.depth

    @property
    def seed(self) -> int:
        return self._exact.seed

    @property
    def kind(self) -> str:
        """``"count-sketch"`` or ``"count-min"``."""
        return self._kind

    @property
    def signed(self) -> bool:
        return self._kind == "count-sketch"

    @property
    def epsilon(self) -> Fraction:
        """The add/remove budget as the exact rational the noise is calibrated to: the budget's
        epsilon rounded down, halved for ``neighbouring="replace"``."""
        return self._epsilon

    @property
    def neighbouring(self) -> str:
        """The neighbouring relation of the budget (``"add_remove"`` or ``"replace"``)."""
        return self._neighbouring

    @property
    def release_prefix(self) -> Any:
        return self._release_prefix

    @property
    def batches(self) -> int:
        """Number of non-empty query batches answered so far."""
        return self._batches

    @property
    def last_time(self) -> float | int | None:
        """Time of the latest batch that declared one."""
        return self._last_time

    @property
    def ingest_mode(self) -> str | None:
        """``"delta"`` or ``"snapshot"`` once data has arrived, else ``None``."""
        return self._ingest

    @property
    def holds_noise(self) -> bool:
        """Whether this object has answered a batch (so owns noise or budget state)."""
        return self._batches > 0

    @abc.abstractmethod
    def epsilon_spent(self) -> float:
        """Pure-DP guarantee covering every release so far (0 before the first batch)."""

    def describe(self) -> dict[str, Any]:
        """JSON-friendly public facts (configuration, batches, budget spent)."""
        return {
            "strategy": self.STRATEGY,
            "kind": self._kind,
            "width": self.width,
            "depth": self.depth,
            "seed": self.seed,
            "epsilon": float(self._epsilon),
            "neighbouring": self._neighbouring,
            "epsilon_spent": self.epsilon_spent(),
            "batches": self._batches,
            "last_time": self._last_time,
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(width={self.width}, depth={self.depth}, kind={self._kind!r}, "
            f"epsilon={float(self._epsilon):g}, seed={self.seed}, batches={self._batches})"
        )

    # ---------------------------------------------------------------- ingestion

    def _check_can_ingest(self) -> None:
        """Strategies with a frozen table (static S4) refuse data after their release."""
        return None

    def _check_mode(self, mode: str) -> None:
        if self._ingest is not None and self._ingest != mode:
            raise ValueError(
                f"this sketch ingests {self._ingest}s; it cannot also take a {mode}: mixing "
                "cumulative snapshots with deltas counts elements more than once (docs/algorithms.md#int-beam)"
            )

    def update(self, keys: Any, counts: Any = None) -> Self:
        """Add stream elements (each key once, or ``counts[i]`` times) to the exact table.

        Vectorised through the composed exact sketch. ``counts`` must be non-negative integers
        (aggregated multiplicities of unit elements).
        """
        self._check_can_ingest()
        self._check_mode("delta")
        self._check_counts(counts)
        self._exact.update(keys, counts)
        self._ingest = "delta"
        return self

    def update_hashes(self, h1: np.ndarray, h2: np.ndarray, counts: Any = None) -> Self:
        """:meth:`update` for keys given by their :func:`~beam_dpsketch.hashing.hash_keys`."""
        self._check_can_ingest()
        self._check_mode("delta")
        self._check_counts(counts)
        self._exact.update_hashes(h1, h2, counts)
        self._ingest = "delta"
        return self

    @staticmethod
    def _check_counts(counts: Any) -> None:
        if counts is None:
            return
        arr = np.asarray(counts)
        if arr.dtype.kind not in "iub":
            raise TypeError(f"counts must be integers, got dtype {arr.dtype}")
        if arr.size and arr.min() < 0:
            raise ValueError(
                "counts must be >= 0: a retraction makes one element appear in several "
                "increments (docs/algorithms.md#int-beam)"
            )

    def _check_exact(self, sketch: Any, name: str) -> LinearSketch:
        expected = SKETCH_KINDS[self._kind]
        if type(sketch) is not expected:
            raise TypeError(
                f"{name} must be an exact {expected.__name__} (a raw table carries no hash seed), "
                f"got {type(sketch).__name__}"
            )
        self._exact.check_compatible(sketch)
        return sketch

    def add_counts(self, delta: LinearSketch) -> Self:
        """Add an exact **delta**: the elements that arrived since the previous delta.

        ``delta`` is an exact sketch of the same kind, width, depth and seed (e.g. the merged
        output of a discarding-mode CombineFn). Each element must be in exactly one delta
        (docs/algorithms.md#int-beam I2); passing a cumulative snapshot here counts old elements again: use
        :meth:`add_snapshot` for those. Count-Min deltas must be non-negative.
        """
        self._check_can_ingest()
        self._check_mode("delta")
        delta = self._check_exact(delta, "delta")
        if delta.total_weight < 0 or (not self.signed and (delta.table < 0).any()):
            raise ValueError(
                "delta has negative counts: a retraction makes one element appear in several "
                "increments (docs/algorithms.md#int-beam)"
            )
        self._exact.merge(delta)
        self._ingest = "delta"
        return self

    def add_snapshot(self, snapshot: LinearSketch) -> Self:
        """Ingest a **cumulative** snapshot (all elements so far) by converting it to a delta.

        The delta is ``snapshot - current table``; a snapshot with less total weight than the
        current table, or (Count-Min) a smaller cell, is refused as a replay or rollback (docs/algorithms.md#int-beam). An object that takes snapshots takes nothing else (one upstream source
        whose snapshot covers everything).
        """
        self._check_can_ingest()
        self._check_mode("snapshot")
        snapshot = self._check_exact(snapshot, "snapshot")
        diff = snapshot.table - self._exact.table
        if snapshot.total_weight < self._exact.total_weight or (
            not self.signed and (diff < 0).any()
        ):
            raise ValueError(
                "snapshot goes backwards (less weight than already ingested): a replay or "
                "rollback would count elements in several increments (docs/algorithms.md#int-beam)"
            )
        self._exact.table = snapshot.table.copy()
        self._exact.total_weight = snapshot.total_weight
        self._ingest = "snapshot"
        return self

    def merge(self, other: Any) -> Self:
        """Merge an exact shard, or a private object that has not answered any batch.

        Exact sketches go through :meth:`add_counts` (a delta). A private object of the same
        class and configuration contributes its exact table only if it holds no noise or budget
        state; two noise owners for the same cells are refused (invariant I1 of docs/algorithms.md#int-beam).
        """
        if isinstance(other, LinearSketch):
            return self.add_counts(other)
        if not isinstance(other, IntermittentSketch):
            raise TypeError(f"cannot merge a {type(other).__name__} into {type(self).__name__}")
        if type(other) is not type(self) or other._config_key() != self._config_key():
            raise ValueError(
                f"cannot merge {type(other).__name__}{other._config_key()} into "
                f"{type(self).__name__}{self._config_key()}: configurations differ"
            )
        if other.holds_noise:
            raise ValueError(
                "cannot merge a private sketch that has answered queries: its noise and budget "
                "state would get a second owner (docs/algorithms.md#int-beam I1). Merge exact shards (or private "
                "objects that have not answered) into ONE private object instead"
            )
        return self.add_counts(other._exact)

    def _config_key(self) -> tuple:
        return (self._kind, self.width, self.depth, self.seed, self._epsilon, self._release_prefix)

    # ---------------------------------------------------------------- answering

    def answer(
        self, keys: Any, *, time: float | int | None = None, details: bool = False
    ) -> IntermittentAnswer:
        """Answer one query batch ``Q_k`` (the keys) declared at public time ``time``.

        Parameters
        ----------
        keys
            The query set: a batch of keys (numpy/pyarrow array or sequence; duplicates allowed
            and answered identically). It must come from the analyst's declared input, never from
            the private data or this object's state ([YKAE, Section II-A], library choice).
        time
            Optional public batch time (event or wall clock, never an arrival count, [YKAE, Section II-A]
            (library choice)); when given it must exceed the previous declared time.
        details
            Also return the released cells (cell strategies; see :class:`IntermittentAnswer`).

        Returns
        -------
        IntermittentAnswer
            Estimates in query order plus public metadata. An empty batch releases nothing,
            draws no noise and does not count as a batch.
        """
        if isinstance(keys, IntermittentAnswer | IntermittentSketch):
            raise TypeError(
                f"keys must be a declared query set, got a {type(keys).__name__}: queries may "
                "not be derived from the sketch (docs/algorithms.md#int-beam I3)"
            )
        h1, h2 = hash_keys(keys, self.seed)
        return self.answer_hashes(h1, h2, time=time, details=details)

    def answer_hashes(
        self,
        h1: np.ndarray,
        h2: np.ndarray,
        *,
        time: float | int | None = None,
        details: bool = False,
    ) -> IntermittentAnswer:
        """:meth:`answer` for keys given by their :func:`~beam_dpsketch.hashing.hash_keys`."""
        h1, h2 = _as_hashes(h1, h2)
        t = _check_time(time)
        if t is not None and self._last_time is not None and not t > self._last_time:
            raise ValueError(
                f"time must increase from batch to batch (t_1 < t_2 < ...): got {t!r} after "
                f"{self._last_time!r}"
            )
        if h1.size == 0:
            if t is not None:
                self._last_time = t
            return self._empty_answer(t)
        k = self._batches + 1
        ans = self._answer(h1, h2, k, bool(details))
        self._batches = k
        if t is not None:
            self._last_time = t
        return replace(ans, batch=k, time=t, epsilon_total=self.epsilon_spent())

    def _empty_answer(self, t: float | int | None) -> IntermittentAnswer:
        empty = np.zeros(0, dtype=np.float64)
        cells = self.CELL_NOISE
        rows = np.zeros((self.depth, 0), dtype=np.float64) if cells else None
        return IntermittentAnswer(
            estimates=empty,
            batch=None,
            time=t,
            strategy=self.STRATEGY,
            epsilon_total=self.epsilon_spent(),
            noise_std=empty.copy(),
            row_noise_variance=rows,
            uses=np.zeros((self.depth, 0), dtype=np.int32) if cells else None,
        )

    @abc.abstractmethod
    def _answer(self, h1: np.ndarray, h2: np.ndarray, k: int, details: bool) -> IntermittentAnswer:
        """Answer a non-empty batch as batch ``k``; validate everything before changing state."""

    def _row_cells(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Flat cell index ``row * width + column`` of each key in each row, ``(depth, n)``."""
        buckets = row_buckets(h1, h2, self.depth, self.width)
        buckets += (np.arange(self.depth, dtype=np.int64) * self.width)[:, None]
        return buckets

    def _signs(self, h2: np.ndarray) -> np.ndarray | None:
        return row_signs(h2, self.depth) if self.signed else None

    # ---------------------------------------------------------------- serialization

    def _state_params(self) -> dict[str, Any]:
        return {}

    def _state_arrays(self) -> dict[str, np.ndarray]:
        return {}

    @abc.abstractmethod
    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Rebuild the strategy state from decoded bytes; raise ``SketchFormatError`` if invalid."""

    def to_bytes(self) -> bytes:
        """Versioned state bytes (:mod:`beam_dpsketch.serialization`), kind :attr:`KIND`.

        **Sensitive**: they hold the exact counts and the kept noise; store them only inside the
        trust boundary (Beam state), never in a sink or a log (docs/algorithms.md#int-beam). The noise source's
        key is not included; :meth:`from_bytes` needs the same source again.
        """
        params = {
            "format": _FORMAT,
            "strategy": self.STRATEGY,
            "kind": _KIND_CODES[self._kind],
            "epsilon": fraction_str(self._epsilon),
            "neighbouring": self._neighbouring,
            # Stored under the field name "sketch_id", so that states written before keep loading.
            "sketch_id": encode_key(self._release_prefix).hex(),
            "source_check": _source_check(self._source, self._release_prefix),
            "batches": self._batches,
            "last_time": self._last_time,
            "ingest": self._ingest,
            "noise_block": NOISE_BLOCK,
        }
        params.update(self._state_params())
        exact = np.frombuffer(self._exact.to_bytes(), dtype=np.uint8)
        arrays = {"exact": exact}
        arrays.update(self._state_arrays())
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes, noise_source: NoiseSource) -> Self:
        """Inverse of :meth:`to_bytes`, continuing bit for bit with the same ``noise_source``.

        Raises ``SketchFormatError`` (a ``ValueError``) on malformed or foreign bytes and when
        ``noise_source`` is not the source the state was created with.
        """
        err = serialization.SketchFormatError
        source = _check_source(noise_source)
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        if params.get("format") != _FORMAT or params.get("strategy") != cls.STRATEGY:
            raise err("not an intermittent sketch of this strategy and format")
        if req(params, "noise_block", int) != NOISE_BLOCK:
            raise err("state was written with another noise block size")
        code = req(params, "kind", str)
        if code not in _KIND_OF_CODE:
            raise err(f"unknown sketch kind {code!r}")
        kind = _KIND_OF_CODE[code]
        try:
            release_prefix = decode_key(bytes.fromhex(req(params, "sketch_id", str)))
        except ValueError:
            raise err("invalid sketch_id") from None
        epsilon = parse_fraction(params.get("epsilon"), "epsilon")
        if not epsilon > 0:
            raise err("epsilon must be > 0")
        try:
            neighbouring = _check_neighbouring(params.get("neighbouring", "add_remove"), cls)
        except (TypeError, ValueError) as exc:
            raise err(str(exc)) from None
        batches = req(params, "batches", int)
        if not 0 <= batches <= MAX_BATCHES:
            raise err("batches must lie in [0, 2**63 - 1]")
        last_time = params.get("last_time")
        if last_time is not None and (
            isinstance(last_time, bool)
            or not isinstance(last_time, int | float)
            or not math.isfinite(last_time)
        ):
            raise err("last_time must be a finite number or null")
        ingest = params.get("ingest")
        if ingest not in (None, "delta", "snapshot"):
            raise err("ingest must be null, 'delta' or 'snapshot'")
        exact_bytes = serialization.require_array(arrays, "exact", "|u1")
        exact = SKETCH_KINDS[kind].from_bytes(exact_bytes.tobytes())
        if exact.width < 2:
            raise err("width must be >= 2")
        if req(params, "source_check", str) != _source_check(source, release_prefix):
            # A SketchFormatError (a ValueError): decoders raise nothing else.
            raise err(
                "noise_source is not the source this state was created with: continuing would "
                "give the kept noise a second, unrelated noise process"
            )
        obj = cls.__new__(cls)
        obj._exact, obj._kind, obj._epsilon = exact, kind, epsilon
        obj._neighbouring = neighbouring
        obj._source, obj._release_prefix = source, release_prefix
        obj._batches, obj._last_time, obj._ingest = batches, last_time, ingest
        obj._restore_state(params, arrays)
        return obj

    def __reduce__(self) -> tuple:
        return (type(self).from_bytes, (self.to_bytes(), self._source))

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]

    def memory_bytes(self) -> int:
        """Bytes held by the exact table and the strategy's arrays."""
        return self._exact.memory_bytes() + sum(a.nbytes for a in self._state_arrays().values())
