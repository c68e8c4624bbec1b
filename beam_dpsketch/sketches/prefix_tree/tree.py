"""A tree of linear sketches over key prefixes, its DP release, and top-key extraction.

The key domain is hierarchical: a key is read as the string of its canonical bytes
(:func:`beam_dpsketch.hashing.encode_key`) followed by an END symbol, over an alphabet of
``b = 257`` symbols (the 256 byte values and END). Level ``l`` (``1 .. L + 1``, with ``L`` the
public ``max_key_bytes``) holds one linear sketch (Count Sketch [CCF02] or Count-Min [CM05],
``depth x width``, its own public hash seed) of the key's length-``l`` prefix. One element
touches one counter per row of each level it reaches, so the whole tree is a linear sketch of
``(L + 1) * depth`` rows, and its DP release is that of Zhao et al. [ZQR+22, Algorithm 3] with
the budget split evenly over the levels, as the dyadic quantile sketch does [ZQR+22,
Section 4.2]. Heavy keys are then found by descending the noisy tree from the root: a
heavy key has heavy prefixes at every level. Extraction reads the released tree and public
parameters only, so it is post-processing. The design is derived here (docs/algorithms.md#top-keys),
not taken from a paper; it is the hierarchical search over a frequency oracle of the
heavy-hitter literature, applied to byte prefixes.

Pure numpy and pyarrow: no Beam import.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_choice, check_int, check_probability
from beam_dpsketch.hashing import (
    MAX_DEPTH,
    MAX_WIDTH,
    check_seed,
    decode_key,
    derived_seed,
    encode_key,
    hash_keys,
)
from beam_dpsketch.noise import NoiseStream, check_stream
from beam_dpsketch.privacy.budget import PrivacyBudget, approx_to_zcdp
from beam_dpsketch.sketches.linear.base import LinearSketch, validate_counts
from beam_dpsketch.sketches.linear.calibration import (
    LinearCalibration,
    check_budget,
    parse_neighbouring,
)
from beam_dpsketch.sketches.linear.countmin import CountMinSketch
from beam_dpsketch.sketches.linear.countsketch import CountSketch
from beam_dpsketch.sketches.linear.private import PrivateCountMinSketch, PrivateCountSketch

__all__ = [
    "ALPHABET",
    "MAX_KEY_BYTES",
    "PrefixTreeSketch",
    "PrivatePrefixTree",
    "TopKey",
    "encode_paths",
    "level_seed",
    "tree_level_budget",
]

#: Symbols per tree node: the 256 byte values and END.
ALPHABET = 257
#: Largest ``max_key_bytes`` accepted (each byte of depth is one level of noise).
MAX_KEY_BYTES = 255
_KINDS = {
    "count-sketch": (CountSketch, PrivateCountSketch),
    "count-min": (CountMinSketch, PrivateCountMinSketch),
}
_INT64_TAG = 0x01
_STR_TAG = b"\x03"
# Golden-ratio step between the level seeds: distinct, public, data-independent.
_SEED_DOMAIN = b"beam-dpsketch/prefix-level/v1"


def level_seed(seed: int, level: int) -> int:
    """Public hash seed of level ``level`` (``1 .. L + 1``) of a tree built with ``seed``."""
    return derived_seed(seed, _SEED_DOMAIN, level)


def _binary_from_matrix(mat: np.ndarray) -> pa.Array:
    """A binary Arrow array whose ``i``-th value is row ``i`` of the uint8 matrix ``mat``."""
    n, width = mat.shape
    data = np.ascontiguousarray(mat, dtype=np.uint8)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(width)
    return pa.Array.from_buffers(
        pa.binary(), n, [None, pa.py_buffer(offsets.tobytes()), pa.py_buffer(data.tobytes())]
    )


def encode_paths(keys: Any) -> pa.Array:
    """The canonical byte encodings of a batch of keys, as one binary Arrow array.

    Value ``i`` is exactly :func:`~beam_dpsketch.hashing.encode_key` of key ``i``. Integer
    numpy arrays and Arrow string arrays are encoded without per-element Python; anything else
    goes through ``encode_key`` one key at a time (``TypeError`` naming the type of an
    unsupported key).
    """
    if isinstance(keys, pa.ChunkedArray):
        keys = keys.combine_chunks() if keys.num_chunks != 1 else keys.chunk(0)
    if isinstance(keys, pa.Array):
        if keys.null_count:
            raise TypeError("keys: a null key has no canonical encoding")
        if pa.types.is_string(keys.type) or pa.types.is_large_string(keys.type):
            as_bytes = keys.cast(pa.large_binary())
            tag = pa.scalar(_STR_TAG, pa.large_binary())
            joined = pc.binary_join_element_wise(as_bytes, tag, pa.scalar(b"", pa.large_binary()))
            return joined.cast(pa.binary())
        if pa.types.is_signed_integer(keys.type):
            keys = keys.to_numpy(zero_copy_only=False)
        else:
            keys = keys.to_pylist()
    if isinstance(keys, np.ndarray) and keys.dtype.kind == "i":
        ints = keys.astype("<i8", copy=False).reshape(-1)
        mat = np.empty((len(ints), 9), dtype=np.uint8)
        mat[:, :8] = ints.view(np.uint8).reshape(-1, 8)
        mat[:, 8] = _INT64_TAG
        return _binary_from_matrix(mat)
    return pa.array([encode_key(k) for k in keys], type=pa.binary())


class TopKey(tuple):
    """One extracted key: ``(key, estimate, lower, upper, confidence)`` (a plain tuple).

    The sketch layer does not import Beam; the transforms turn it into
    ``BoundedKeyEstimate`` rows with the same fields.
    """

    __slots__ = ()

    def __new__(cls, key: Any, estimate: float, lower: float, upper: float, confidence: float):
        return super().__new__(cls, (key, estimate, lower, upper, confidence))

    def __getnewargs__(self) -> tuple[Any, ...]:
        # Pickle passes the five fields back to __new__.
        return tuple(self)


class PrefixTreeSketch:
    """Exact tree of linear sketches over key prefixes; mergeable, **not** private.

    Level ``l`` (``1 .. max_key_bytes + 1``) is a ``depth x width`` Count Sketch (default) or
    Count-Min sketch, with seed :func:`~beam_dpsketch.sketches.prefix_tree.level_seed`, of each key's length-``l`` path node: the
    first ``l`` bytes of the key's canonical encoding when it has at least ``l`` bytes, or the
    whole encoding followed by END when it has exactly ``l - 1`` bytes. A key whose encoding
    has fewer than ``l - 1`` bytes does not reach level ``l``. A key longer than
    ``max_key_bytes`` bytes reaches every level with a prefix and never with END: it is counted
    under its prefixes and can never be released whole. Nothing about the data is refused.

    Memory is ``(max_key_bytes + 1) * depth * width`` int64 counters whatever the number of
    distinct keys. Updates are vectorised: one Arrow ``binary_slice`` and one vectorised hash
    per level and batch. Merging adds the tables, exactly as for every linear sketch.

    Parameters
    ----------
    width, depth
        Shape of every level's sketch.
    max_key_bytes
        ``L``: the deepest key encoding the tree can release whole (a ``str`` key of up to
        ``L - 1`` UTF-8 bytes, an ``int`` key when ``L >= 9``, a ``bytes`` key of up to
        ``L - 1`` bytes).
    seed
        Public base hash seed.
    kind
        ``"count-sketch"`` or ``"count-min"``.
    """

    KIND: ClassVar[str] = "PrefixTreeSketch"
    __slots__ = ("width", "depth", "seed", "max_key_bytes", "kind", "sketches")

    def __init__(
        self,
        width: int,
        depth: int,
        max_key_bytes: int = 16,
        seed: int = 0,
        kind: str = "count-sketch",
    ) -> None:
        self.width = check_int(width, "width", 1, MAX_WIDTH)
        self.depth = check_int(depth, "depth", 1, MAX_DEPTH)
        self.max_key_bytes = check_int(max_key_bytes, "max_key_bytes", 1, MAX_KEY_BYTES)
        self.seed = check_seed(seed)
        self.kind = check_choice(kind, "kind", tuple(_KINDS))
        exact = _KINDS[self.kind][0]
        self.sketches: list[LinearSketch] = [
            exact(self.width, self.depth, level_seed(self.seed, level))
            for level in range(1, self.levels + 1)
        ]

    @property
    def levels(self) -> int:
        """Number of levels, ``max_key_bytes + 1``."""
        return self.max_key_bytes + 1

    # ---------------------------------------------------------------- updates

    def update(self, keys: Any, counts: Any = None) -> Self:
        """Add a batch of keys (weight 1 each, or integer ``counts``) to every level they reach."""
        paths = encode_paths(keys)
        return self.update_paths(paths, counts)

    def update_paths(self, paths: pa.Array, counts: Any = None) -> Self:
        """Add keys given by their canonical encodings (:func:`encode_paths`)."""
        n = len(paths)
        if n == 0:
            return self
        weights = validate_counts(counts, n)
        lengths = pc.binary_length(paths).to_numpy(zero_copy_only=False).astype(np.int64)
        for level in range(1, self.levels + 1):
            reach = lengths >= level - 1
            if not reach.any():
                break
            mask = pa.array(reach)
            nodes = pc.binary_slice(paths.filter(mask), 0, level)
            h1, h2 = hash_keys(nodes, level_seed(self.seed, level))
            self.sketches[level - 1].update_hashes(
                h1, h2, None if weights is None else weights[reach]
            )
        return self

    # ---------------------------------------------------------------- merging and identity

    def _shape(self) -> tuple[Any, ...]:
        return (self.kind, self.width, self.depth, self.max_key_bytes, self.seed)

    def check_compatible(self, other: Any) -> None:
        """``ValueError`` unless ``other`` is a tree of the same kind, shape and seed."""
        if type(other) is not type(self):
            raise ValueError(f"cannot merge a {type(self).__name__} with a {type(other).__name__}")
        if self._shape() != other._shape():
            raise ValueError(
                "cannot merge PrefixTreeSketches with different (kind, width, depth, "
                f"max_key_bytes, seed): {self._shape()} vs {other._shape()}"
            )

    def merge(self, other: Self) -> Self:
        """Add ``other`` into this tree, level by level (exact; commutative, associative)."""
        self.check_compatible(other)
        for mine, theirs in zip(self.sketches, other.sketches, strict=True):
            mine.merge(theirs)
        return self

    def copy(self) -> Self:
        clone = type(self)(self.width, self.depth, self.max_key_bytes, self.seed, self.kind)
        clone.sketches = [s.copy() for s in self.sketches]
        return clone

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._shape() == other._shape() and all(
            a == b for a, b in zip(self.sketches, other.sketches, strict=True)
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return (
            f"PrefixTreeSketch(kind={self.kind!r}, width={self.width}, depth={self.depth}, "
            f"max_key_bytes={self.max_key_bytes}, seed={self.seed})"
        )

    def memory_bytes(self) -> int:
        """Bytes held by the counters of all levels."""
        return sum(s.memory_bytes() for s in self.sketches)

    def level_counts(self, level: int, nodes: Any) -> np.ndarray:
        """Exact sketch estimates at ``level`` of path nodes given as bytes (for tests)."""
        level = check_int(level, "level", 1, self.levels)
        arr = pa.array([bytes(x) for x in nodes], type=pa.binary())
        return self.sketches[level - 1].estimate_hashes(
            *hash_keys(arr, level_seed(self.seed, level))
        )

    # ---------------------------------------------------------------- bytes

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`), kind ``PrefixTreeSketch``."""
        params = {
            "kind": self.kind,
            "width": self.width,
            "depth": self.depth,
            "max_key_bytes": self.max_key_bytes,
            "seed": self.seed,
            "level_totals": [int(s.total_weight) for s in self.sketches],
        }
        tables = np.stack([s.table for s in self.sketches])
        return serialization.dumps(self.KIND, params, {"tables": tables})

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Inverse of :meth:`to_bytes`; ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        try:
            width = check_int(req(params, "width", int), "width", 1, MAX_WIDTH)
            depth = check_int(req(params, "depth", int), "depth", 1, MAX_DEPTH)
            max_key_bytes = check_int(
                req(params, "max_key_bytes", int), "max_key_bytes", 1, MAX_KEY_BYTES
            )
            seed = check_seed(req(params, "seed", int))
            kind = check_choice(req(params, "kind", str), "kind", tuple(_KINDS))
        except (TypeError, ValueError) as exc:
            raise err(f"invalid prefix tree parameters: {exc}") from None
        levels = max_key_bytes + 1
        # The tables come from the bytes themselves, so forged parameters cannot make us
        # allocate more than the input holds.
        tables = serialization.require_array(arrays, "tables", "<i8", (levels, depth, width))
        totals = req(params, "level_totals", list)
        if len(totals) != levels or not all(
            isinstance(t, int) and not isinstance(t, bool) for t in totals
        ):
            raise err("level_totals must hold one int per level")
        exact = _KINDS[kind][0]
        sketches = []
        for level, (table, total) in enumerate(zip(tables, totals, strict=True), start=1):
            sketch = exact.__new__(exact)
            sketch.width, sketch.depth, sketch.seed = width, depth, level_seed(seed, level)
            sketch.table = np.array(table, dtype=np.int64)
            sketch.total_weight = total
            sketches.append(sketch)
        tree = cls.__new__(cls)
        tree.width, tree.depth, tree.max_key_bytes = width, depth, max_key_bytes
        tree.seed, tree.kind, tree.sketches = seed, kind, sketches
        return tree

    def __reduce__(self):
        return (type(self).from_bytes, (self.to_bytes(),))


def tree_level_budget(
    budget: PrivacyBudget,
    levels: int,
    *,
    width: int,
    depth: int,
    kind: str = "count-sketch",
    neighbouring: str = "add_remove",
    approx_noise: str = "auto",
) -> PrivacyBudget:
    """The budget each of ``levels`` levels is released with: the total split evenly.

    ``pure(eps)``: ``pure(eps / levels)`` (discrete Laplace). ``zcdp(rho)``:
    ``zcdp(rho / levels)`` (discrete Gaussian). ``approx(eps, delta)``: the zCDP budget
    ``rho = approx_to_zcdp(eps, delta)`` split evenly (discrete Gaussian), unless
    ``approx_noise="auto"`` finds that the pure split ``eps / levels`` gives the smaller noise
    variance per counter for this shape, in which case that is used (``eps``-DP implies
    ``(eps, delta)``-DP). Shares are rounded down, so the levels never spend more than the total
    (sequential composition; for zCDP, Bun and Steinke 2016, Lemma 2.3). The choice reads
    public parameters only.
    """
    budget = check_budget(budget)
    levels = check_int(levels, "levels")
    check_choice(approx_noise, "approx_noise", ("auto", "gaussian"))
    if budget.is_pure:
        return PrivacyBudget.pure(float(budget.epsilon)).divide(levels)  # type: ignore[arg-type]
    if budget.kind == "zcdp":
        return PrivacyBudget.zcdp(float(budget.rho)).divide(levels)  # type: ignore[arg-type]
    rho = approx_to_zcdp(budget.epsilon, budget.delta)  # type: ignore[arg-type]
    gaussian = PrivacyBudget.zcdp(rho).divide(levels)
    if approx_noise == "gaussian":
        return gaussian
    laplace = PrivacyBudget.pure(float(budget.epsilon)).divide(levels)  # type: ignore[arg-type]
    private = _KINDS[check_choice(kind, "kind", tuple(_KINDS))][1]
    name = parse_neighbouring(neighbouring)[0]
    lap = private.calibrate(width, depth, laplace, neighbouring=name, offset=False, lattice=True)
    try:
        gau = private.calibrate(width, depth, gaussian, neighbouring=name, offset=False)
    except ValueError:
        return laplace  # sigma outside the exact sampler's range
    return laplace if lap.noise_variance <= gau.noise_variance else gaussian


class PrivatePrefixTree:
    """A released DP prefix tree: one released linear sketch per level; extraction is free.

    Build it with :meth:`release`. Every counter of every level gets independent exact discrete
    noise once (Zhao et al. [ZQR+22, Algorithm 3] per level), with the level budget of
    :func:`tree_level_budget`.

    Guarantee (derived here, docs/algorithms.md#top-keys): under add/remove of one element the
    whole tree changes in at most one counter per row of each of its ``L + 1`` levels, by 1, so
    its sensitivity is ``sqrt((L + 1) d)`` in L2 and ``(L + 1) d`` in L1 (``d`` rows per level;
    the other relations scale as for one linear sketch, docs/algorithms.md#lin-sensitivity).
    Releasing each level with ``1 / (L + 1)`` of the budget is exactly the Gaussian mechanism
    with that L2 sensitivity (same ``sigma`` on every counter) and, for a pure budget, the
    discrete Laplace mechanism with that L1 sensitivity; by sequential composition the tree is
    ``budget``-DP. :meth:`top_keys`, :meth:`estimate` and the error bounds read only the
    released counters and public parameters, so they are post-processing: any number of them
    costs nothing more, and no raw key ever reaches their output.
    """

    KIND: ClassVar[str] = "PrivatePrefixTree"
    __slots__ = ("width", "depth", "seed", "max_key_bytes", "kind", "levels_released", "budget")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "PrivatePrefixTree objects come from PrivatePrefixTree.release(tree, budget, stream), "
            "never from raw counters"
        )

    @staticmethod
    def level_budget(
        tree: PrefixTreeSketch, budget: PrivacyBudget, neighbouring: str, approx_noise: str
    ) -> PrivacyBudget:
        """Each level's budget for ``tree``'s shape (:func:`tree_level_budget`)."""
        return tree_level_budget(
            budget,
            tree.levels,
            width=tree.width,
            depth=tree.depth,
            kind=tree.kind,
            neighbouring=neighbouring,
            approx_noise=approx_noise,
        )

    @classmethod
    def calibrate(
        cls,
        tree: PrefixTreeSketch,
        budget: PrivacyBudget,
        *,
        neighbouring: str = "add_remove",
        approx_noise: str = "auto",
    ) -> LinearCalibration:
        """The calibration of every level (they are identical) for ``tree``'s shape (no noise)."""
        level_budget = cls.level_budget(tree, budget, neighbouring, approx_noise)
        private = _KINDS[tree.kind][1]
        return private.calibrate(
            tree.width,
            tree.depth,
            level_budget,
            neighbouring=parse_neighbouring(neighbouring)[0],
            offset=False,
            lattice=level_budget.is_pure,
        )

    @classmethod
    def release(
        cls,
        tree: PrefixTreeSketch,
        budget: PrivacyBudget,
        stream: NoiseStream,
        *,
        neighbouring: str = "add_remove",
        approx_noise: str = "auto",
    ) -> Self:
        """Release ``tree`` once: level after level, each with its share of ``budget``.

        Parameters
        ----------
        tree
            The exact, fully merged tree (never modified).
        budget
            The budget of the whole tree (see :func:`tree_level_budget` for the split).
        stream
            The release's noise stream; exactly ``(L + 1) * depth * width`` values are drawn,
            whatever the data.
        neighbouring
            ``"add_remove"`` (default), ``"replace"``, ``"replace_update"`` or ``"user:k"``;
            each level is calibrated for it as one linear sketch is. The total is never
            published.
        approx_noise
            ``"auto"`` (default) or ``"gaussian"``, for an ``(epsilon, delta)`` budget.
        """
        if not isinstance(tree, PrefixTreeSketch):
            raise TypeError(f"release needs an exact PrefixTreeSketch, got {type(tree).__name__}")
        stream = check_stream(stream)
        name = parse_neighbouring(neighbouring)[0]
        level_budget = cls.level_budget(tree, budget, name, approx_noise)
        private = _KINDS[tree.kind][1]
        released = tuple(
            private.release(
                sketch,
                level_budget,
                stream,
                neighbouring=name,
                publish_total=False,
                offset=False,
                lattice=level_budget.is_pure,
            )
            for sketch in tree.sketches
        )
        obj = object.__new__(cls)
        obj.width, obj.depth, obj.seed = tree.width, tree.depth, tree.seed
        obj.max_key_bytes, obj.kind = tree.max_key_bytes, tree.kind
        obj.levels_released = released
        obj.budget = check_budget(budget)
        return obj

    @property
    def levels(self) -> int:
        """Number of levels, ``max_key_bytes + 1``."""
        return self.max_key_bytes + 1

    @property
    def calibration(self) -> LinearCalibration:
        """The calibration shared by every level."""
        return self.levels_released[0].calibration

    # ---------------------------------------------------------------- queries

    def _estimate_nodes(self, level: int, nodes: pa.Array) -> np.ndarray:
        h1, h2 = hash_keys(nodes, level_seed(self.seed, level))
        return self.levels_released[level - 1].estimate_hashes(h1, h2)

    def node_estimates(self, level: int, nodes: Any) -> np.ndarray:
        """Noisy counts of path nodes of ``level`` given as ``bytes`` (a prefix of ``level``
        bytes, or a whole encoding of ``level - 1`` bytes standing for it followed by END)."""
        level = check_int(level, "level", 1, self.levels)
        return self._estimate_nodes(level, pa.array([bytes(x) for x in nodes], type=pa.binary()))

    def estimate(self, keys: Any) -> np.ndarray:
        """Noisy counts of whole keys (their END node), for keys chosen independently of the data.

        A key longer than ``max_key_bytes`` bytes has no END node in the tree: its estimate is
        ``nan``.
        """
        paths = encode_paths(keys)
        lengths = pc.binary_length(paths).to_numpy(zero_copy_only=False).astype(np.int64)
        out = np.full(len(paths), np.nan)
        for length in np.unique(lengths[lengths <= self.max_key_bytes]).tolist():
            sel = np.flatnonzero(lengths == length)
            out[sel] = self._estimate_nodes(length + 1, paths.take(pa.array(sel)))
        return out

    def error_bound(self, level: int, confidence: float = 0.95) -> float:
        """Per-query error bound of ``level``'s estimates (one node fixed in advance).

        The bound of the level's released sketch
        (:meth:`~beam_dpsketch.sketches.linear.private.PrivateCountSketch.error_bound`): read
        off the released counters, hashing and noise together; no budget spent.
        """
        level = check_int(level, "level", 1, self.levels)
        return self.levels_released[level - 1].error_bound(confidence)

    def top_keys(
        self,
        k: int,
        *,
        beam: int | None = None,
        confidence: float = 0.95,
        threshold_beta: float = 0.05,
    ) -> list[TopKey]:
        """The ``k`` complete keys with the largest noisy counts, found without a key list.

        Descends from the root. At level ``l`` every one of the ``b = 257`` children of every
        surviving prefix is queried (one vectorised hash and lookup); a child survives when its
        noisy estimate exceeds the threshold ``tau_l``, and at most ``beam`` of them (the
        largest estimates, ties by their bytes) go on. A child that is a key followed by END is
        a finished key; the finished keys that decode (:func:`~beam_dpsketch.hashing.decode_key`)
        are ranked by estimate and the first ``k`` returned.

        ``tau_l`` is the level's noise bound at confidence ``1 - threshold_beta / (257 * beam)``
        (:meth:`~beam_dpsketch.sketches.linear.private.PrivateCountSketch.noise_quantile`, from
        the public calibration only): a node whose exact-sketch estimate is 0 passes it with
        probability at most ``threshold_beta / (257 * beam)``, so among the at most
        ``257 * beam`` children queried at one level the expected number of such false
        survivors is at most ``threshold_beta``. Hashing collisions can still lift an empty
        node; the ``beam`` cap keeps the work bounded whatever passes.

        Everything read here is released or public: the output is post-processing of the
        release, whatever ``k``, ``beam`` and ``threshold_beta`` are.

        Parameters
        ----------
        k
            Number of keys to return (fewer when fewer pass the thresholds).
        beam
            Largest number of prefixes kept per level (default ``32 k``: a heavy key can sit
            behind many prefixes whose subtrees hold more weight than it does).
        confidence
            Confidence of each returned row's ``lower`` and ``upper`` (per key, for a key fixed
            in advance; selecting the largest estimates biases them upward).
        threshold_beta
            See above.

        Returns
        -------
        list of :class:`TopKey`
            ``(key, estimate, lower, upper, confidence)``, largest estimate first.
        """
        k = check_int(k, "k")
        beam = 32 * k if beam is None else check_int(beam, "beam")
        confidence = check_probability(confidence, "confidence")
        threshold_beta = check_probability(threshold_beta, "threshold_beta")
        per_query = 1.0 - threshold_beta / (ALPHABET * beam)
        symbols = np.arange(256, dtype=np.uint8)
        survivors = np.zeros((1, 0), dtype=np.uint8)
        finished: list[tuple[float, bytes, int]] = []
        for level in range(1, self.levels + 1):
            if len(survivors) == 0:
                break
            tau = self.levels_released[level - 1].noise_quantile(per_query)
            # Children that finish a key: the surviving prefix itself followed by END.
            done = self._estimate_nodes(level, _binary_from_matrix(survivors))
            for i in np.flatnonzero(done > tau).tolist():
                finished.append((float(done[i]), survivors[i].tobytes(), level))
            if level > self.max_key_bytes:
                break  # deeper prefixes were truncated and can never finish
            s = len(survivors)
            children = np.empty((s * 256, level), dtype=np.uint8)
            children[:, : level - 1] = np.repeat(survivors, 256, axis=0)
            children[:, level - 1] = np.tile(symbols, s)
            est = self._estimate_nodes(level, _binary_from_matrix(children))
            keep = np.flatnonzero(est > tau)
            if len(keep) > beam:
                # Largest estimates first; ties broken by the child's bytes (public order).
                cols = tuple(children[keep, j] for j in range(level - 1, -1, -1))
                order = np.lexsort((*cols, -est[keep]))
                keep = keep[order[:beam]]
            survivors = children[keep]
        bounds: dict[int, float] = {}
        rows: list[TopKey] = []
        finished.sort(key=lambda t: (-t[0], t[1]))
        for estimate, path, level in finished:
            if len(rows) == k:
                break
            try:
                key = decode_key(path)
            except ValueError:
                continue  # a noise-made path no key encodes to
            if level not in bounds:
                bounds[level] = self.levels_released[level - 1].error_bound(confidence)
            b = bounds[level]
            rows.append(TopKey(key, estimate, estimate - b, estimate + b, confidence))
        return rows

    # ---------------------------------------------------------------- metadata

    def describe(self) -> dict[str, Any]:
        """JSON-friendly calibration facts."""
        cal = self.calibration
        return {
            "kind": self.KIND,
            "sketch": self.kind,
            "width": self.width,
            "depth": self.depth,
            "levels": self.levels,
            "max_key_bytes": self.max_key_bytes,
            "noise": cal.noise,
            "noise_scale": cal.scale,
            "level_sensitivity": cal.sensitivity,
            "neighbouring": cal.neighbouring,
        }

    def memory_bytes(self) -> int:
        return sum(s.memory_bytes() for s in self.levels_released)

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "PrivatePrefixTree is a released (noisy) tree and cannot be updated: update the "
            "exact PrefixTreeSketch and release it again with a fresh noise stream and budget"
        )

    merge = update
