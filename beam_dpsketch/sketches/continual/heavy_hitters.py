"""Heavy hitters under continual observation: the two safe options of docs/algorithms.md#lazy-e23.

The paper's ``LazyHH`` is referenced but never specified (docs/algorithms.md#lazy-e23), and a candidate
heap fed by arriving items is **not** private under continual observation: the item identity
itself decides membership, so one arrival can leak through the reported set ([Hol25, Sections 3 and 5] and docs/algorithms.md#lazy-e23;
the Misra-Gries argument). Both options here are pure post-processing of private releases:

1. :class:`CandidateHeavyHitters`: a **public, data-independent** candidate domain queried against
   a :class:`~beam_dpsketch.sketches.continual.sketch.LazySketch` or
   :class:`~beam_dpsketch.sketches.continual.sketch.PunctualSketch` (cost ``O(|U| d)`` per report).
2. :class:`HierarchicalLazySketch` (extension, not in the paper): for integer keys of ``domain_bits`` bits,
   ``L`` LazySketches over key prefixes (e.g. 4 levels of 8 bits for IPv4). All ``L * d * w``
   counters form one n-counters instance; one replaced arrival changes at most 2 cells per row
   per level, so every level is calibrated with ``m = 2 d L`` (Count-Min; ``4 d L`` for Count
   Sketch, docs/algorithms.md#lazy-e10) and Theorem 1 gives ``(epsilon, delta)``-DP for **all levels at all
   times jointly**. Heavy hitters are found by descending from the root, expanding only prefixes
   whose noisy estimate reaches a threshold that must come from public quantities (``t``, a
   fraction ``phi``, :meth:`HierarchicalLazySketch.noise_bound`), never from exact counts.

Pure numpy, no Beam.
"""

from __future__ import annotations

from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.hashing import (
    MAX_SEED,
    canonical_keys,
    check_key_like,
    check_seed,
    decode_key,
    encode_key,
    hash_keys,
    order_key,
)
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.continual.binary_mechanism import DEFAULT_CALIBRATION, Calibration
from beam_dpsketch.sketches.continual.sketch import (
    CONTINUAL_SKETCH_KINDS,
    Kind,
    LazySketch,
    PunctualSketch,
    check_kind,
    kind_from_code,
)

__all__ = ["CandidateHeavyHitters", "HierarchicalLazySketch"]

_MAX_DOMAIN_BITS = 62
# The root level is enumerated in full at every report.
_MAX_LEVEL_BITS = 20


def _threshold(t: int, phi: float | None, threshold: float | None) -> float:
    if (phi is None) == (threshold is None):
        raise ValueError("give exactly one of phi (a fraction of t) or threshold")
    if phi is not None:
        return check_real(phi, "phi", 0.0, 1.0, lower_open=True) * t
    return check_real(threshold, "threshold")


def _ranked(keys: list[Any], values: np.ndarray) -> list[tuple[Any, float]]:
    """Pairs sorted by estimate descending, ties by the canonical key order (data-independent)."""
    order = sorted(range(len(keys)), key=lambda i: (-values[i], order_key(keys[i])))
    return [(keys[i], float(values[i])) for i in order]


class CandidateHeavyHitters:
    """Heavy hitters over a public candidate domain (docs/algorithms.md#lazy-e23): post-processing only.

    Guarantee: whatever ``sketch`` guarantees (its releases at all times are jointly
    ``(epsilon, delta)``-DP), because a report only reads the sketch's noisy table and the
    candidates. The candidates must be fixed **before** seeing the data and must not depend on it
    (e.g. all airports, all IPv4 /16 prefixes of interest, a product catalogue).

    Parameters
    ----------
    sketch
        The continual sketch receiving the stream (update it directly).
    candidates
        The public candidate keys (sequence, numpy or pyarrow array).
    """

    def __init__(self, sketch: LazySketch | PunctualSketch, candidates: Any) -> None:
        if not isinstance(sketch, LazySketch | PunctualSketch):
            raise TypeError(
                f"sketch must be a LazySketch or PunctualSketch, got {type(sketch).__name__}"
            )
        self.sketch = sketch
        self.candidates = canonical_keys(candidates)
        if not self.candidates:
            raise ValueError("candidates must not be empty")
        self._h1, self._h2 = hash_keys(self.candidates, sketch.seed)

    def estimates(self) -> np.ndarray:
        """Current noisy estimate of every candidate (float64, candidate order)."""
        return self.sketch.estimate_hashes(self._h1, self._h2)

    def heavy_hitters(
        self,
        *,
        phi: float | None = None,
        threshold: float | None = None,
        top: int | None = None,
    ) -> list[tuple[Any, float]]:
        """Candidates whose estimate is ``>= threshold`` (or ``>= phi * t``), best first.

        ``threshold``/``phi`` must be public (chosen without looking at exact counts); ``top``
        keeps at most that many.
        """
        thr = _threshold(self.sketch.t, phi, threshold)
        values = self.estimates()
        keep = np.flatnonzero(values >= thr)
        ranked = _ranked([self.candidates[i] for i in keep.tolist()], values[keep])
        if top is not None:
            ranked = ranked[: check_int(top, "top")]
        return ranked


class HierarchicalLazySketch:
    """Prefix-tree of LazySketches for heavy hitters over ``domain_bits``-bit integer keys
    (docs/algorithms.md#lazy-e23, an EXTENSION of the paper).

    Level ``l`` (``l = 0..L-1``) counts the key prefixes of ``p_l = min(domain_bits,
    (l + 1) * bits_per_level)`` bits, with hash seed ``seed + l`` (mod ``2**32``) so collisions
    are independent across levels. Every arrival is one time step of every level.

    Guarantee: all levels' releases at all times are jointly ``(epsilon, delta)``-DP under
    event-level replacement neighbouring: each level is a LazySketch calibrated with
    ``m = 2 d L`` (``4 d L`` for Count Sketch), which is Theorem 1 applied to the union of the
    ``L d w`` counters (docs/algorithms.md#lazy-e23). :meth:`heavy_hitters` is post-processing.

    Parameters
    ----------
    domain_bits
        Keys are integers in ``[0, 2**domain_bits)``, ``domain_bits <= 62``.
    bits_per_level
        Prefix bits added per level, ``<= 20`` (the root level is enumerated in full).
    width, depth, horizon, budget, release_prefix, kind, seed, noise_source,
    calibration, max_contributions, faithful
        As :class:`~beam_dpsketch.sketches.continual.sketch.LazySketch` (shared by all levels).
    """

    KIND = "HierarchicalLazySketch"

    def __init__(
        self,
        domain_bits: int,
        bits_per_level: int,
        width: int,
        depth: int,
        horizon: int,
        budget: PrivacyBudget,
        *,
        release_prefix: Any,
        kind: Kind = "count-min",
        seed: int = 0,
        noise_source: NoiseSource | None = None,
        calibration: Calibration = DEFAULT_CALIBRATION,
        max_contributions: int = 1,
        faithful: bool | None = None,
    ) -> None:
        self.domain_bits = check_int(domain_bits, "domain_bits", 1, _MAX_DOMAIN_BITS)
        self.bits_per_level = check_int(
            bits_per_level, "bits_per_level", 1, min(_MAX_LEVEL_BITS, self.domain_bits)
        )
        self.kind = check_kind(kind)
        self.seed = check_seed(seed)
        self.release_prefix = check_key_like(release_prefix, "release_prefix")
        levels = -(-self.domain_bits // self.bits_per_level)
        self.prefix_bits = tuple(
            min(self.domain_bits, (level + 1) * self.bits_per_level) for level in range(levels)
        )
        depth = check_int(depth, "depth", 1)
        m = (2 if self.kind == "count-min" else 4) * depth * levels
        if noise_source is None:
            noise_source = NoiseSource()
        self.levels: list[LazySketch] = [
            LazySketch(
                width,
                depth,
                horizon,
                budget,
                release_prefix=(release_prefix, self.KIND, level),
                kind=self.kind,
                seed=(self.seed + level) % (MAX_SEED + 1),
                noise_source=noise_source,
                calibration=calibration,
                m=m,
                max_contributions=max_contributions,
                faithful=faithful,
            )
            for level in range(levels)
        ]

    # ---------------------------------------------------------------- facts

    @property
    def t(self) -> int:
        return self.levels[0].t

    @property
    def m(self) -> int:
        """Counters one replaced arrival may change across all levels (``2 d L`` / ``4 d L``)."""
        return self.levels[0].m

    @property
    def sigma(self) -> float:
        return self.levels[0].sigma

    @property
    def privacy_budget(self) -> PrivacyBudget:
        """``(epsilon, delta)`` for all levels at all times jointly."""
        return self.levels[0].privacy_budget

    def noise_bound(self, beta: float) -> float:
        """With probability ``>= 1 - beta/2`` no counter of any level ever has noise above this
        (union bound over the ``L d w`` counters, [Hol25, Lemma 4])."""
        return self.levels[0].noise_bound(beta / len(self.levels))

    # ---------------------------------------------------------------- updates

    def _check_keys(self, keys: Any) -> np.ndarray:
        # Keys are private data: the messages name the parameter and the type, never a key or a
        # count of them.
        arr = np.asarray(keys)
        if arr.ndim != 1:
            raise ValueError(f"keys must be one-dimensional, got {arr.ndim} dimensions")
        if arr.size and arr.dtype.kind not in "iu":
            bad = next((k for k in arr.tolist() if not isinstance(k, int)), arr.dtype)
            raise TypeError(
                f"keys must be integers in [0, 2**{self.domain_bits}), got {type(bad).__name__}"
            )
        arr = arr.astype(np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >> self.domain_bits):
            raise ValueError(f"keys must be in [0, 2**{self.domain_bits})")
        return arr

    def update(self, key: int) -> Self:
        """One time step with one arrival (an int in ``[0, 2**domain_bits)``)."""
        return self.update_batch([key])

    def update_batch(self, keys: Any) -> Self:
        """Consecutive time steps, one arrival per key, in every level (bit-identical to
        :meth:`update` one key at a time)."""
        arr = self._check_keys(keys)
        self.levels[0]._check_steps(len(arr))
        for level, bits in zip(self.levels, self.prefix_bits, strict=True):
            level.update_batch(arr >> (self.domain_bits - bits))
        return self

    # ---------------------------------------------------------------- queries

    def estimate(self, prefixes: Any, level: int) -> np.ndarray:
        """Noisy frequency of key prefixes (``p_level`` bits each) at ``level``."""
        level = check_int(level, "level", 0, len(self.levels) - 1)
        return self.levels[level].estimate(np.asarray(prefixes, dtype=np.int64))

    def heavy_hitters(
        self,
        *,
        phi: float | None = None,
        threshold: float | None = None,
        max_candidates: int = 4096,
    ) -> list[tuple[int, float]]:
        """Keys whose estimate at every level reaches ``threshold`` (or ``phi * t``), best first.

        Descends from the root: all ``2**p_0`` root prefixes are queried, and only those with an
        estimate ``>= threshold`` are expanded into their ``2**bits_per_level`` children. At most
        ``max_candidates`` prefixes (the highest estimates) are kept per level, which bounds the
        work. The threshold must be public (see the class docstring).
        """
        thr = _threshold(self.t, phi, threshold)
        cap = check_int(max_candidates, "max_candidates")
        prefixes = np.arange(1 << self.prefix_bits[0], dtype=np.int64)
        values = np.empty(0)
        for level, sketch in enumerate(self.levels):
            if level:
                shift = self.prefix_bits[level] - self.prefix_bits[level - 1]
                children = np.arange(1 << shift, dtype=np.int64)
                prefixes = ((prefixes[:, None] << shift) + children[None, :]).ravel()
            values = sketch.estimate(prefixes)
            keep = np.flatnonzero(values >= thr)
            if keep.size > cap:
                # Highest estimates first, ties by prefix value: post-processing of the release.
                order = np.lexsort((prefixes[keep], -values[keep]))
                keep = np.sort(keep[order[:cap]])
            prefixes, values = prefixes[keep], values[keep]
            if not prefixes.size:
                return []
        return _ranked(prefixes.tolist(), values)

    # ---------------------------------------------------------------- bytes

    def to_bytes(self) -> bytes:
        """Serialize all levels (exact counts included: keep inside the trusted boundary)."""
        params = {
            "domain_bits": self.domain_bits,
            "bits_per_level": self.bits_per_level,
            "kind": CONTINUAL_SKETCH_KINDS[self.kind],
            "seed": self.seed,
            "release_prefix": encode_key(self.release_prefix).hex(),
        }
        data, offsets = serialization.pack_bytes_list([lv.to_bytes() for lv in self.levels])
        return serialization.dumps(self.KIND, params, {"levels": data, "offsets": offsets})

    @classmethod
    def from_bytes(cls, data: bytes, noise_source: NoiseSource) -> Self:
        """Inverse of :meth:`to_bytes` (``SketchFormatError`` on malformed bytes)."""
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        blobs = serialization.unpack_bytes_list(
            serialization.require_array(arrays, "levels", "|u1"),
            serialization.require_array(arrays, "offsets", "<i8"),
        )
        levels = [LazySketch.from_bytes(b, noise_source) for b in blobs]
        if not levels:
            raise serialization.SketchFormatError("no levels")
        first = levels[0]
        try:
            prefix = decode_key(bytes.fromhex(req(params, "release_prefix", str)))
            clone = cls(
                req(params, "domain_bits", int),
                req(params, "bits_per_level", int),
                first.width,
                first.depth,
                first.horizon,
                first.privacy_budget,
                release_prefix=prefix,
                kind=kind_from_code(req(params, "kind", str)),
                seed=req(params, "seed", int),
                noise_source=noise_source,
                calibration=first.calibration,
                max_contributions=first.max_contributions,
                faithful=first.faithful,
            )
        except serialization.SketchFormatError:
            raise
        except (TypeError, ValueError) as exc:
            raise serialization.SketchFormatError(f"invalid sketch parameters: {exc}") from None
        if len(levels) != len(clone.levels) or any(
            a._ctor_params() != b._ctor_params() or a.release_prefix != b.release_prefix
            for a, b in zip(levels, clone.levels, strict=False)
        ):
            raise serialization.SketchFormatError("levels do not match the hierarchy parameters")
        if len({lv.t for lv in levels}) != 1:
            raise serialization.SketchFormatError("levels are at different times")
        clone.levels = levels
        return clone

    def __repr__(self) -> str:
        first = self.levels[0]
        return (
            f"HierarchicalLazySketch(domain_bits={self.domain_bits}, prefix_bits="
            f"{self.prefix_bits}, kind={self.kind!r}, width={first.width}, depth={first.depth}, "
            f"horizon={first.horizon}, epsilon={first.epsilon}, delta={first.delta}, t={self.t})"
        )
