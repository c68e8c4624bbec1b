"""Dyadic Count Sketch (DCS) over a bounded integer domain: exact, turnstile, mergeable.

The quantile sketch of Zhao et al., "Differentially Private Linear Sketches" (NeurIPS 2022),
cited as [ZQR+22, Section 4]; deviations in docs/algorithms.md#linear-sketches. The private release
(:class:`~beam_dpsketch.sketches.quantiles.private.PrivateDyadicCountSketch`, [ZQR+22, Section 4.2])
lives in :mod:`beam_dpsketch.sketches.quantiles.private`, which builds on this module.

Structure ([ZQR+22, Section 4.1] and docs/algorithms.md#lin-exact-levels)
-------------------------------------------------------------------------
* Items are integers in the declared, public domain ``[lower, upper]`` (never derived from the
  data, docs/algorithms.md#lin-hashing). Item ``x`` is stored as ``x - lower`` in ``[0, U)``, ``U = 2**L`` the
  domain size rounded up to a power of two (``L >= 1``).
* Level ``j = 0 .. L-1`` counts the dyadic intervals of length ``2**j``: node ``(x - lower) >> j``.
  Level 0 holds the items, level ``L-1`` the two halves ``{0, 1}``. This is the paper's layout
  (``branching=2``, ``leaf_bits=0``); in general level ``j`` counts
  ``(x - lower) >> shifts[j]`` with ``shifts`` from :func:`tree_shifts`: ``b = branching``
  children per node and leaves of ``2**leaf_bits`` values (docs/algorithms.md#lin-wide-range).
* A level with more than ``depth * width`` nodes (``exact_nodes`` when given) is a Count Sketch of ``depth`` rows and
  ``width`` signed int64 counters over the node ids, with its **own hash seed** ([ZQR+22, Section 4.1]:
  independent seeds per level; :func:`~beam_dpsketch.sketches.quantiles.dyadic.level_seed`). Its table equals that of
  ``CountSketch(width, depth, level_seed(seed, j))`` updated with the node ids.
* With ``exact_levels=True`` (default, docs/algorithms.md#lin-exact-levels, flagged: the ``paper`` preset turns it
  off), a level with at most ``depth * width`` nodes stores its node counts exactly instead
  (identity "hash", one row, no sign): less error and no more memory.

Updates are turnstile (negative counts are deletions, [ZQR+22, Section 2.2]) and the sketch is linear, so
merging (cell-wise addition) is exact, associative and commutative ([ZQR+22, Section 2.2]).

Float data: :class:`FloatDomain` maps floats to integer bins with declared bounds.
"""

from __future__ import annotations

import abc
import math
import numbers
from typing import Any, ClassVar, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import (
    check_bool,
    check_choice,
    check_int,
    check_probability,
    check_real,
)
from beam_dpsketch.hashing import (
    MAX_DEPTH,
    MAX_WIDTH,
    check_seed,
    derived_seed,
    hash_keys,
    row_buckets,
    row_signs,
)
from beam_dpsketch.sketches.linear.base import validate_counts
from beam_dpsketch.sketches.quantiles.domain import FloatDomain

__all__ = [
    "DyadicCountSketch",
    "FloatDomain",
    "dyadic_shape",
    "fitting_leaf_bits",
    "level_seed",
    "tree_shifts",
]

#: Largest supported domain: ``upper - lower + 1 <= 2**62`` (so ``L <= 62``).
MAX_LEVELS = 62
_CHUNK = 1 << 20
_QUERY_CHUNK = 1 << 16
_HASH_CHUNK = 1 << 14
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
_SEED_DOMAIN = b"beam-dpsketch/dyadic-level/v1"


def level_seed(seed: int, level: int) -> int:
    """The hash seed of level ``level`` of a DCS with seed ``seed`` (32-bit, deterministic).

    The low 32 bits of MurmurHash3 of ``(domain tag, level)`` under ``seed``: one independent
    looking seed per level ([ZQR+22, Section 4.1]; docs/algorithms.md#lin-e7: the reference code reuses one hash).
    """
    return derived_seed(seed, _SEED_DOMAIN, level)


def dyadic_shape(lower: int, upper: int, gamma: float, preset: str = "paper") -> tuple[int, int]:
    """``(width, depth)`` for rank accuracy ``gamma`` ([ZQR+22, Section 4.2], natural logs of ``U = 2**L``).

    ``"paper"``: ``d = ceil(ln(ln U / gamma))``, ``w = ceil(sqrt(ln U ln(ln U / gamma)) / gamma)``
    (e.g. ``U = 2**16``, ``gamma = 0.01``: ``(882, 8)``). ``"reference_code_as_run"``: same width,
    ``d = 3`` (docs/algorithms.md#lin-e7).
    """
    levels = _levels_for(check_int(lower, "lower", None), check_int(upper, "upper", None))
    gamma = check_probability(gamma, "gamma")
    ln_u = levels * math.log(2.0)
    inner = math.log(ln_u / gamma)
    width = math.ceil(math.sqrt(ln_u * max(inner, 0.0)) / gamma)
    check_choice(preset, "preset", ("paper", "reference_code_as_run"))
    depth = max(1, math.ceil(inner)) if preset == "paper" else 3
    return max(width, 1), depth


def _levels_for(lower: int, upper: int) -> int:
    if not _INT64_MIN <= lower <= _INT64_MAX or not _INT64_MIN <= upper <= _INT64_MAX:
        raise ValueError(f"lower and upper must fit in int64, got [{lower}, {upper}]")
    if upper < lower:
        raise ValueError(f"upper must be >= lower, got lower={lower}, upper={upper}")
    size = upper - lower + 1
    if size > 1 << MAX_LEVELS:
        raise ValueError(f"the domain [lower, upper] may hold at most 2**{MAX_LEVELS} values")
    return max(1, (size - 1).bit_length())


def fitting_leaf_bits(lower: int, upper: int, exact_nodes: int) -> int:
    """The smallest ``leaf_bits`` for which every level of ``[lower, upper]`` is exact.

    Leaves of ``2**leaf_bits`` values, so that the finest level has at most ``exact_nodes``
    nodes: 0 when the whole domain fits (then ranks and quantiles are at one-value
    resolution), else the public resolution that memory allows (docs/algorithms.md#lin-wide-range).
    Depends on public parameters only.
    """
    bits = _levels_for(check_int(lower, "lower", None), check_int(upper, "upper", None))
    cap = check_int(exact_nodes, "exact_nodes", 2, 1 << 26)
    return max(0, bits - (cap.bit_length() - 1))


def tree_shifts(bits: int, branching: int, leaf_bits: int = 0) -> tuple[int, ...]:
    """Bit shift of each tree level, leaves first, over a domain of ``2**bits`` values.

    Level ``j`` counts ``(x - lower) >> (leaf_bits + j log2 branching)``. There are
    ``max(1, (bits - leaf_bits) // log2 branching)`` levels, so the top level takes the bits
    left over: it has at least ``branching`` nodes (unless the domain is smaller) and at most
    ``branching**2 / 2``. ``branching = 2``, ``leaf_bits = 0`` gives the paper's ``L`` levels
    ``0 .. L-1`` [ZQR+22, Section 4.1].
    """
    step = int(branching).bit_length() - 1
    count = max(1, (bits - leaf_bits) // step)
    return tuple(leaf_bits + step * j for j in range(count))


# --------------------------------------------------------------------------------------------
# Shared layout and queries
# --------------------------------------------------------------------------------------------


class DyadicLayout(abc.ABC):
    """Layout (levels, exact levels, seeds) and the rank/quantile queries shared by the exact
    and the released sketches. Estimates are float64 (medians of signed counters).

    Base of :class:`DyadicCountSketch` here and of
    :class:`~beam_dpsketch.sketches.quantiles.private.PrivateDyadicCountSketch`; the released
    sketch depends on this module, never the other way round.
    """

    KIND: ClassVar[str] = ""

    __slots__ = (
        "lower",
        "upper",
        "width",
        "depth",
        "seed",
        "exact_levels",
        "branching",
        "exact_nodes",
        "leaf_bits",
        "bits",
        "shifts",
        "levels",
        "n_sketched",
        "level_seeds",
        "exact_offsets",
        "sketched",
        "exact",
    )

    def _init_layout(
        self,
        lower: int,
        upper: int,
        width: int,
        depth: int,
        seed: int,
        exact_levels: bool,
        branching: int = 2,
        exact_nodes: int | None = None,
        leaf_bits: int = 0,
    ) -> None:
        self.lower = check_int(lower, "lower", None)
        self.upper = check_int(upper, "upper", None)
        self.bits = _levels_for(self.lower, self.upper)
        self.width = check_int(width, "width", 1, MAX_WIDTH)
        self.depth = check_int(depth, "depth", 1, MAX_DEPTH)
        self.seed = check_seed(seed)
        self.exact_levels = check_bool(exact_levels, "exact_levels")
        self.branching = check_int(branching, "branching", 2, 1 << 8)
        if self.branching & (self.branching - 1):
            raise ValueError(f"branching must be a power of two, got {self.branching}")
        if exact_nodes is not None:
            exact_nodes = check_int(exact_nodes, "exact_nodes", 2, 1 << 26)
        self.exact_nodes = exact_nodes
        self.leaf_bits = check_int(leaf_bits, "leaf_bits", 0, self.bits - 1)
        self.shifts = tree_shifts(self.bits, self.branching, self.leaf_bits)
        self.levels = len(self.shifts)
        cells = self.depth * self.width if exact_nodes is None else exact_nodes
        n_sk = self.levels
        if exact_levels:
            # Exact iff the level has at most `cells` nodes (docs/algorithms.md#lin-exact-levels).
            n_sk = sum(1 for j in range(self.levels) if self.level_nodes(j) > cells)
        self.n_sketched = n_sk
        self.level_seeds = tuple(level_seed(self.seed, j) for j in range(n_sk))
        offsets = [0]
        for j in range(n_sk, self.levels):
            offsets.append(offsets[-1] + self.level_nodes(j))
        self.exact_offsets = tuple(offsets)

    def level_nodes(self, level: int) -> int:
        """Number of nodes of level ``level``: ``2**(L - shifts[level])``."""
        return 1 << (self.bits - self.shifts[level])

    @property
    def size(self) -> int:
        """Number of values in the declared domain, ``upper - lower + 1``."""
        return self.upper - self.lower + 1

    def is_exact_level(self, level: int) -> bool:
        """Whether level ``level`` stores exact node counts (docs/algorithms.md#lin-exact-levels)."""
        return level >= self.n_sketched

    def _config(self) -> tuple:
        return (
            self.lower,
            self.upper,
            self.width,
            self.depth,
            self.seed,
            self.exact_levels,
            self.branching,
            self.exact_nodes,
            self.leaf_bits,
        )

    def _counter_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return self.sketched, self.exact

    # ---------------------------------------------------------------- node estimates

    def node_estimates(self, level: int, nodes: Any) -> np.ndarray:
        """Estimated counts of dyadic nodes ``nodes`` (int array) at ``level`` (float64).

        Exact levels return the stored (noisy, when released) count; sketched levels the Count
        Sketch median over rows of ``sign * counter`` (Algorithm 2).
        """
        level = check_int(level, "level", 0, self.levels - 1)
        nodes = np.asarray(nodes, dtype=np.int64)
        count = self.level_nodes(level)
        if nodes.size and (nodes.min() < 0 or nodes.max() >= count):
            raise ValueError(f"nodes must be in [0, {count}) at level {level}")
        return self._node_estimates(level, nodes)

    def _node_estimates(self, level: int, nodes: np.ndarray) -> np.ndarray:
        sketched, exact = self._counter_arrays()
        if level >= self.n_sketched:
            start = self.exact_offsets[level - self.n_sketched]
            return exact[start + nodes].astype(np.float64)
        out = np.empty(len(nodes), dtype=np.float64)
        table = sketched[level]
        for s in range(0, len(nodes), _QUERY_CHUNK):
            part = nodes[s : s + _QUERY_CHUNK]
            h1, h2 = hash_keys(part, self.level_seeds[level])
            buckets = row_buckets(h1, h2, self.depth, self.width)
            values = np.take_along_axis(table, buckets, axis=1) * row_signs(h2, self.depth)
            out[s : s + _QUERY_CHUNK] = np.median(values, axis=0)
        return out

    @abc.abstractmethod
    def total(self) -> float:
        """Total weight ``N`` (see subclasses)."""

    def _top_total(self) -> float:
        """Sum of the top level's estimates (``est_{L-1}(0) + est_{L-1}(1)`` in the binary tree,
        [ZQR+22, Section 4.1] and docs/algorithms.md#lin-extensions)."""
        top = self.levels - 1
        return float(self._node_estimates(top, np.arange(self.level_nodes(top))).sum())

    # ---------------------------------------------------------------- rank and quantiles

    def _query_offsets(self, x: Any) -> tuple[np.ndarray, bool]:
        """Offsets ``x - lower`` clipped to ``[-1, size]`` (-1: below, size: above the domain)."""
        arr = np.asarray(x)
        scalar = arr.ndim == 0
        arr = np.atleast_1d(arr)
        if arr.ndim != 1:
            raise ValueError(f"x must be an int or a one-dimensional array, got shape {arr.shape}")
        size = self.size
        if arr.dtype.kind == "i" or (
            arr.dtype.kind == "u" and (not arr.size or int(arr.max()) <= _INT64_MAX)
        ):
            a = arr.astype(np.int64)
            with np.errstate(over="ignore"):
                diff = a - np.int64(self.lower)
            off = np.where(a < self.lower, -1, np.where(a > self.upper, size, diff))
            return off.astype(np.int64), scalar
        items = arr.tolist()
        if not all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in items):
            raise TypeError(
                f"x must be integers of the sketch's domain, got dtype {arr.dtype} "
                "(map floats with FloatDomain.to_int first)"
            )
        off = [min(max(int(v) - self.lower, -1), size) for v in items]
        return np.array(off, dtype=np.int64), scalar

    def _prefix_terms(self, y: np.ndarray, values: Any) -> np.ndarray:
        """``sum`` of ``values(level, nodes)`` over the tree nodes that tile ``[0, y)``, plus the
        interpolated share ``r / 2**leaf_bits`` of the partial leaf when ``leaf_bits > 0``.

        ``u = y >> leaf_bits`` full leaves are written in base ``b`` (``branching``): the digit
        ``d_j`` of level ``j`` selects the ``d_j`` nodes just left of ``u``'s ancestor, so at
        most ``b - 1`` nodes per level (more at the top) tile the prefix exactly. With ``b = 2``
        and ``leaf_bits = 0`` these are the ``popcount(y)`` dyadic nodes of [ZQR+22, Section 4.1].
        """
        out = np.zeros(len(y), dtype=np.float64)
        u = y >> self.shifts[0]
        for j in range(self.levels):
            rel = self.shifts[j] - self.shifts[0]
            anc = u >> rel
            if j + 1 < self.levels:
                digit = anc & (self.branching - 1)
            else:
                digit = anc
            first = anc - digit
            for k in range(int(digit.max()) if digit.size else 0):
                sel = np.flatnonzero(digit > k)
                out[sel] += values(j, first[sel] + k)
        if self.leaf_bits:
            r = y - (u << self.leaf_bits)
            sel = np.flatnonzero(r > 0)
            if sel.size:
                out[sel] += values(0, u[sel]) * (r[sel] / float(1 << self.leaf_bits))
        return out

    def _rank_offsets(self, off: np.ndarray) -> np.ndarray:
        out = np.zeros(len(off), dtype=np.float64)
        top = off >= self.size - 1
        if top.any():
            out[top] = self.total()
        mid = np.flatnonzero((off >= 0) & ~top)
        out[mid] = self._prefix_terms(off[mid] + 1, self._node_estimates)
        return out

    def rank(self, x: Any) -> np.ndarray | float:
        """Estimated ``R(x) = #{items <= x}`` (with multiplicity; paper Definition 2.2), [ZQR+22, Section 4.1].

        ``x < lower`` gives 0 and ``x >= upper`` gives :meth:`total` (no item exceeds
        ``upper``). Otherwise ``y = x - lower + 1`` and ``R^ = sum over the set bits j of y of
        est_j((y >> j) - 1)``: the ``popcount(y) <= L`` dyadic nodes that tile ``[lower, x]``
        exactly (docs/algorithms.md#lin-e8: ``<=``, not ``<``); with a larger ``branching``, the
        base-``b`` digits of ``y`` pick the nodes, and with ``leaf_bits > 0`` the last, partial
        leaf counts in proportion to the part of it up to ``x`` (docs/algorithms.md#lin-wide-range).
        Vectorised over ``x`` (one pass per level).
        Returns a float for a scalar ``x``, else a float64 array.
        """
        off, scalar = self._query_offsets(x)
        out = self._rank_offsets(off)
        return float(out[0]) if scalar else out

    def rank_lt(self, x: Any) -> np.ndarray | float:
        """Estimated ``#{items < x}`` = ``rank(x - 1)`` ([ZQR+22, Section 4.1])."""
        off, scalar = self._query_offsets(x)
        out = self._rank_offsets(off - 1)
        return float(out[0]) if scalar else out

    def quantiles(self, qs: Any) -> np.ndarray:
        """Items at the quantiles ``qs`` (each in ``[0, 1]``) by top-down descent (docs/algorithms.md#lin-extensions).

        ``k = min(max(1, ceil(q N^)), max(1, round(N^)))`` with ``N^`` = :meth:`total`; then from
        the top level down, go left when the left child's estimate is ``>= t``, else subtract it
        and go right. The descent tolerates negative or inconsistent (noisy) counts and always
        ends at an item; the result is clipped to ``upper`` (post-processing). With a
        larger ``branching`` the descent goes to the first child whose running sum of estimates
        reaches ``t``; with ``leaf_bits > 0`` it ends in a leaf and places the item by linear
        interpolation inside it. For fixed estimates it is **monotone** in ``k`` (paths only
        split with the larger ``k`` to the right), so sorted ``qs`` give non-decreasing items.
        Vectorised over ``qs``; returns int64.
        """
        q = np.atleast_1d(np.asarray(qs, dtype=np.float64))
        if q.ndim != 1:
            raise ValueError(f"qs must be one-dimensional, got shape {q.shape}")
        if q.size and (np.isnan(q).any() or q.min() < 0.0 or q.max() > 1.0):
            raise ValueError(
                f"every q must be in [0, 1], got {q[(np.isnan(q)) | (q < 0) | (q > 1)][:5].tolist()}"
            )
        if self._relative_descent():
            return self._quantiles_relative(q)
        n_hat = self.total()
        k = np.minimum(np.maximum(1.0, np.ceil(q * n_hat)), max(1.0, float(round(n_hat))))
        node = np.zeros(len(q), dtype=np.int64)
        t = k.copy()
        rows = np.arange(len(q))
        for j in range(self.levels - 1, -1, -1):
            if j == self.levels - 1:
                children = np.broadcast_to(
                    np.arange(self.level_nodes(j)), (len(q), self.level_nodes(j))
                )
            else:
                children = node[:, None] * self.branching + np.arange(self.branching)
            c = self._node_estimates(j, children.ravel()).reshape(children.shape)
            cum = np.cumsum(c, axis=1)
            # The first child whose running sum reaches t (the last child if none does).
            reach = cum >= t[:, None]
            idx = np.where(reach.any(axis=1), reach.argmax(axis=1), children.shape[1] - 1)
            before = np.where(idx > 0, cum[rows, np.maximum(idx - 1, 0)], 0.0)
            t = t - before
            node = children[rows, idx]
        off = node << self.leaf_bits
        if self.leaf_bits:
            # Post-processing: the t-th of the leaf's c items sits at (t - 1/2) / c of its width
            # when they spread evenly (docs/algorithms.md#lin-wide-range).
            c = self._node_estimates(0, node)
            frac = np.where(
                c > 0, np.clip(t - 0.5, 0.0, np.maximum(c, 0.0)) / np.maximum(c, 1e-300), 0.5
            )
            span = 1 << self.leaf_bits
            off = off + np.minimum(np.floor(frac * span).astype(np.int64), span - 1)
        return np.minimum(off, self.size - 1) + np.int64(self.lower)

    def _relative_descent(self) -> bool:
        """Whether :meth:`quantiles` uses :meth:`_quantiles_relative` (the released sketch's
        consistent mode); the exact sketch uses the absolute descent."""
        return False

    def _children(self, level: int, node: np.ndarray) -> np.ndarray:
        """``(len(node), fan-out)`` node ids: every top node, or the children of ``node``."""
        if level == self.levels - 1:
            count = self.level_nodes(level)
            return np.broadcast_to(np.arange(count, dtype=np.int64), (len(node), count))
        return node[:, None] * self.branching + np.arange(self.branching, dtype=np.int64)

    def _quantiles_relative(self, q: np.ndarray) -> np.ndarray:
        """Top-down descent by **fractions** of the children's total (docs/algorithms.md#lin-wide-range).

        At a node, with the children's estimates ``c`` and their running sums ``S``, the target
        is ``f * S_last`` (``f = q`` at the top): the descent goes to the first child with
        ``c > 0`` whose running sum reaches it, and ``f`` becomes the target's position inside
        that child. Past the last positive child it takes that child with ``f = 1``; a node
        without a positive child, or whose children sum to at most 0, spreads ``f`` evenly over
        its children. Negative estimates
        stay in the running sums: reading them as 0 would add the positive part of the noise
        of every empty node and push quantiles to the right in sparse regions. In the leaf,
        ``f`` places the item by linear interpolation. Only released estimates are read (post-
        processing), and the result is monotone in ``q``: a larger target never picks an earlier
        child, nor a smaller ``f`` inside the same one.
        """
        node = np.zeros(len(q), dtype=np.int64)
        frac = q.copy()
        rows = np.arange(len(q))
        for j in range(self.levels - 1, -1, -1):
            children = self._children(j, node)
            fan = children.shape[1]
            c = self._node_estimates(j, children.ravel()).reshape(children.shape)
            cum = np.cumsum(c, axis=1)
            target = frac * cum[:, -1]
            # A node whose children sum to <= 0 carries no usable mass: spread f evenly.
            positive = (c > 0) & (cum[:, -1:] > 0)
            reach = (cum >= target[:, None]) & positive
            found = reach.any(axis=1)
            last = fan - 1 - np.argmax(positive[:, ::-1], axis=1)
            even = np.minimum(np.floor(frac * fan).astype(np.int64), fan - 1)
            idx = np.where(found, reach.argmax(axis=1), np.where(positive.any(axis=1), last, even))
            before = np.where(idx > 0, cum[rows, np.maximum(idx - 1, 0)], 0.0)
            mass = c[rows, idx]
            inside = (target - before) / np.where(mass > 0, mass, 1.0)
            frac = np.where(found, inside, np.where(positive.any(axis=1), 1.0, frac * fan - even))
            frac = np.clip(frac, 0.0, 1.0)
            node = children[rows, idx]
        off = node << self.leaf_bits
        if self.leaf_bits:
            span = 1 << self.leaf_bits
            off = off + np.minimum(np.floor(frac * span).astype(np.int64), span - 1)
        return np.minimum(off, self.size - 1) + np.int64(self.lower)

    def quantile(self, q: float) -> int:
        """The item at quantile ``q`` in ``[0, 1]`` (see :meth:`quantiles`)."""
        return int(self.quantiles([check_real(q, "q", finite=False)])[0])

    def heavy_hitters(
        self, threshold: float, *, max_candidates: int = 1 << 16
    ) -> list[tuple[int, float]]:
        """Items whose estimate is ``>= threshold``, found by dyadic descent ([ZQR+22, Section 3.1]).

        Starting from the two top nodes, the children of every node whose estimate is
        ``>= threshold`` are expanded; the items (level 0) that pass are returned as
        ``(item, estimate)``, largest estimate first, ties by item. Pure post-processing of the
        sketch, so no candidate list is needed (the domain is public). About
        ``(nodes above threshold) * L`` point queries. ``ValueError`` if more than
        ``max_candidates`` nodes pass at some level (raise ``threshold``).
        """
        check_real(threshold, "threshold", finite=False)
        cap = check_int(max_candidates, "max_candidates")
        if self.leaf_bits:
            raise ValueError("heavy_hitters needs leaf_bits=0 (leaves of one item each)")
        nodes = np.arange(self.level_nodes(self.levels - 1), dtype=np.int64)
        est = np.zeros(0)
        kids = np.arange(self.branching, dtype=np.int64)
        for j in range(self.levels - 1, -1, -1):
            if j < self.levels - 1:
                nodes = (nodes[:, None] * self.branching + kids).ravel()
            est = self._node_estimates(j, nodes)
            keep = est >= float(threshold)
            nodes, est = nodes[keep], est[keep]
            if len(nodes) > cap:
                raise ValueError(
                    f"more than max_candidates={cap} dyadic nodes reach threshold={threshold} "
                    f"at level {j}; raise the threshold"
                )
            if not len(nodes):
                return []
        inside = nodes < self.size
        nodes, est = nodes[inside], est[inside]
        order = np.lexsort((nodes, -est))
        return [
            (int(n) + self.lower, float(e)) for n, e in zip(nodes[order], est[order], strict=True)
        ]

    def memory_bytes(self) -> int:
        sketched, exact = self._counter_arrays()
        return int(sketched.nbytes + exact.nbytes) + 256

    def _layout_params(self) -> dict[str, Any]:
        return {
            "lower": self.lower,
            "upper": self.upper,
            "width": self.width,
            "depth": self.depth,
            "seed": self.seed,
            "exact_levels": self.exact_levels,
            "branching": self.branching,
            "exact_nodes": self.exact_nodes,
            "leaf_bits": self.leaf_bits,
        }

    @classmethod
    def _layout_from_params(cls, obj: Any, params: dict[str, Any], arrays: dict) -> None:
        err = serialization.SketchFormatError
        req = serialization.require
        try:
            obj._init_layout(
                req(params, "lower", int),
                req(params, "upper", int),
                req(params, "width", int),
                req(params, "depth", int),
                req(params, "seed", int),
                req(params, "exact_levels", bool),
                # Bytes without these keys describe the paper's binary tree.
                params.get("branching", 2),
                params.get("exact_nodes"),
                params.get("leaf_bits", 0),
            )
        except (TypeError, ValueError) as exc:
            raise err(f"invalid dyadic sketch parameters: {exc}") from None
        obj.sketched = serialization.require_array(
            arrays, "sketched", "<i8", (obj.n_sketched, obj.depth, obj.width)
        )
        obj.exact = serialization.require_array(arrays, "exact", "<i8", (obj.exact_offsets[-1],))


# --------------------------------------------------------------------------------------------
# The exact sketch
# --------------------------------------------------------------------------------------------


class DyadicCountSketch(DyadicLayout):
    """Exact Dyadic Count Sketch over the integer domain ``[lower, upper]`` ([ZQR+22, Section 4.1; Section 4.2]).

    Turnstile (negative counts delete), mergeable and serializable; **not** differentially
    private: release it once with :meth:`PrivateDyadicCountSketch.release`. The non-private
    queries :meth:`rank`, :meth:`rank_lt`, :meth:`quantile`, :meth:`quantiles` use the same
    algorithms as the release (they are the ``R~`` of docs/algorithms.md#lin-oracles).

    Parameters
    ----------
    lower, upper
        The declared, public integer domain (int64, at most ``2**62`` values).
    width, depth
        Columns and rows of every sketched level ([ZQR+22, Section 4.2]; see :func:`dyadic_shape`).
    seed
        Hash seed in ``[0, 2**32)``; level ``j`` uses :func:`~beam_dpsketch.sketches.quantiles.dyadic.level_seed` ``(seed, j)``.
    exact_levels
        Store levels with at most ``depth * width`` nodes exactly (docs/algorithms.md#lin-exact-levels; ``False`` in the
        ``paper`` preset).
    clamp
        Default policy for values outside ``[lower, upper]``: ``False`` raises ``ValueError``
        (naming the bounds, never the values), ``True`` clamps them to the nearest bound (a
        public, data-independent map applied to each value alone).
    branching
        Children per node, a power of two ``b`` (default 2, the paper's dyadic tree). Level
        ``j`` counts the nodes ``(x - lower) >> (leaf_bits + j log2 b)``; the top level takes
        the remaining bits, so it has between ``b`` and ``b**2 / 2`` nodes (fewer when the
        domain is small). A larger ``b`` means fewer levels, so each level gets a larger share of
        the budget (docs/algorithms.md#lin-wide-range).
    exact_nodes
        A level with at most this many nodes is stored exactly (with ``exact_levels``); default
        ``depth * width``. Public, so memory stays bounded by it.
    leaf_bits
        The finest level counts blocks of ``2**leaf_bits`` consecutive values (a public
        resolution); ranks and quantiles interpolate linearly inside a block.

    Every item adds 1 to exactly one node (or, in a sketched level, to one counter per row) of
    each level, whatever ``branching``, ``exact_nodes`` and ``leaf_bits`` are.

    Memory: ``n_sketched * depth * width + (exact nodes)`` int64 counters (docs/algorithms.md#lin-e14).
    """

    KIND = "DyadicCountSketch"
    __slots__ = ("clamp", "total_weight")

    def __init__(
        self,
        lower: int,
        upper: int,
        width: int,
        depth: int,
        seed: int = 0,
        *,
        exact_levels: bool = True,
        clamp: bool = False,
        branching: int = 2,
        exact_nodes: int | None = None,
        leaf_bits: int = 0,
    ) -> None:
        self._init_layout(
            lower, upper, width, depth, seed, exact_levels, branching, exact_nodes, leaf_bits
        )
        self.clamp = check_bool(clamp, "clamp")
        self.sketched = np.zeros((self.n_sketched, self.depth, self.width), dtype=np.int64)
        self.exact = np.zeros(self.exact_offsets[-1], dtype=np.int64)
        self.total_weight = 0

    @classmethod
    def from_error(
        cls,
        lower: int,
        upper: int,
        gamma: float,
        seed: int = 0,
        *,
        preset: str = "library",
        clamp: bool = False,
    ) -> DyadicCountSketch:
        """A sketch sized for rank error about ``gamma * N`` ([ZQR+22, Section 4.2]).

        ``preset``: ``"library"`` (paper sizes, exact top levels), ``"paper"`` (paper sizes, no
        exact levels) or ``"reference_code_as_run"`` (``depth = 3``, no exact levels; docs/algorithms.md#lin-e7).
        """
        if preset == "library":
            width, depth = dyadic_shape(lower, upper, gamma, "paper")
            exact = True
        else:
            width, depth = dyadic_shape(lower, upper, gamma, preset)
            exact = False
        return cls(lower, upper, width, depth, seed, exact_levels=exact, clamp=clamp)

    # ---------------------------------------------------------------- updates

    def _offsets(self, values: Any, clamp: bool) -> np.ndarray:
        arr = np.asarray(values)
        arr = np.atleast_1d(arr) if arr.ndim == 0 else arr
        if arr.ndim != 1:
            raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        kind = arr.dtype.kind
        if kind == "f":
            raise TypeError(
                f"values must be integers, got dtype {arr.dtype}: map floats to the integer "
                "domain with FloatDomain.to_int"
            )
        if kind == "O":
            items = arr.tolist()
            for v in items:
                if isinstance(v, bool) or not isinstance(v, numbers.Integral):
                    raise TypeError(f"values must be integers, got a {type(v).__name__}")
            if not clamp and any(not self.lower <= int(v) <= self.upper for v in items):
                self._raise_outside()
            arr = np.array([min(max(int(v), self.lower), self.upper) for v in items], np.int64)
        elif kind == "u":
            if int(arr.max()) > _INT64_MAX:
                return self._offsets(np.array(arr.tolist(), dtype=object), clamp)
            arr = arr.astype(np.int64)
        elif kind != "i":
            names = {"U": "str", "S": "bytes", "b": "bool", "c": "complex", "M": "datetime"}
            raise TypeError(
                f"values must be integers, got {names.get(kind, 'non-integer')} values "
                f"(dtype {arr.dtype})"
            )
        arr = arr.astype(np.int64, copy=False)
        outside = (arr < self.lower) | (arr > self.upper)
        if outside.any():
            if not clamp:
                self._raise_outside()
            arr = np.clip(arr, self.lower, self.upper)
        return arr - np.int64(self.lower)

    def _raise_outside(self) -> None:
        # Values come from the data: the message names the parameter and the bounds (public),
        # never the offending values or how many there are.
        raise ValueError(
            f"values: some are outside the declared domain [{self.lower}, {self.upper}] "
            "(pass clamp=True to clamp them to the bounds)"
        )

    def update(self, values: Any, counts: Any = None, *, clamp: bool | None = None) -> Self:
        """Add a batch of integer values (weight 1 each, or ``counts``; negative = deletion).

        Parameters
        ----------
        values
            Integers in ``[lower, upper]`` (numpy integer array or sequence of ints). Floats
            raise ``TypeError`` (use :class:`FloatDomain`); values outside the domain raise
            ``ValueError`` (which never quotes a value) unless clamping is on.
        counts
            Optional integer weight per value (turnstile).
        clamp
            Override the sketch's :attr:`clamp` policy for this batch.

        Values are sorted once; each level then run-length compresses the node ids of the level
        below (so level ``j`` hashes at most ``min(n, 2**(L-j))`` distinct nodes) and adds them
        with one vectorised scatter per row.
        """
        policy = self.clamp if clamp is None else check_bool(clamp, "clamp")
        off = self._offsets(values, policy)
        counts = validate_counts(counts, len(off))
        for start in range(0, len(off), _CHUNK):
            part = off[start : start + _CHUNK]
            cpart = (
                np.ones(len(part), dtype=np.int64)
                if counts is None
                else counts[start : start + _CHUNK]
            )
            self._add(part, cpart)
        return self

    def _add(self, off: np.ndarray, counts: np.ndarray) -> None:
        if len(off) == 0:
            return
        self.total_weight += int(counts.sum(dtype=np.int64))
        order = np.argsort(off, kind="stable")
        nodes, weights = off[order], counts[order]
        d, w = self.depth, self.width
        for j in range(self.levels):
            nodes = nodes >> (self.shifts[j] - (self.shifts[j - 1] if j else 0))
            starts = np.flatnonzero(np.concatenate(([True], nodes[1:] != nodes[:-1])))
            weights = np.add.reduceat(weights, starts)
            nodes = nodes[starts]
            if j >= self.n_sketched:
                base = self.exact_offsets[j - self.n_sketched]
                self.exact[base + nodes] += weights  # nodes are distinct
                continue
            table = self.sketched[j]
            # Chunks keep the (depth, chunk) temporaries in cache (much faster than whole arrays).
            for s in range(0, len(nodes), _HASH_CHUNK):
                part = weights[s : s + _HASH_CHUNK]
                h1, h2 = hash_keys(nodes[s : s + _HASH_CHUNK], self.level_seeds[j])
                buckets = row_buckets(h1, h2, d, w)
                signs = row_signs(h2, d)
                for r in range(d):
                    np.add.at(table[r], buckets[r], signs[r] * part)

    # ---------------------------------------------------------------- merging

    def check_compatible(self, other: Any) -> None:
        """``ValueError`` unless ``other`` is a DyadicCountSketch with the same configuration."""
        if type(other) is not type(self):
            raise TypeError(f"cannot merge a DyadicCountSketch with a {type(other).__name__}")
        if self._config() != other._config():
            raise ValueError(
                "cannot merge DyadicCountSketches with different (lower, upper, width, depth, "
                f"seed, exact_levels, branching, exact_nodes, leaf_bits): {self._config()} vs "
                f"{other._config()}"
            )

    def merge(self, other: DyadicCountSketch) -> Self:
        """Add ``other`` cell by cell (exact; commutative and associative, [ZQR+22, Section 2.2])."""
        self.check_compatible(other)
        self.sketched += other.sketched
        self.exact += other.exact
        self.total_weight += other.total_weight
        return self

    def copy(self) -> DyadicCountSketch:
        out = DyadicCountSketch.__new__(DyadicCountSketch)
        for name in DyadicLayout.__slots__ + DyadicCountSketch.__slots__:
            setattr(out, name, getattr(self, name))
        out.sketched = self.sketched.copy()
        out.exact = self.exact.copy()
        return out

    # ---------------------------------------------------------------- queries

    def total(self) -> float:
        """The exact total weight ``N`` (net count)."""
        return float(self.total_weight)

    def level_table(self, level: int) -> np.ndarray:
        """Level ``level``'s counters: ``(depth, width)`` sketched or ``(level_nodes(level),)`` exact."""
        level = check_int(level, "level", 0, self.levels - 1)
        if level < self.n_sketched:
            return self.sketched[level]
        start = self.exact_offsets[level - self.n_sketched]
        return self.exact[start : start + self.level_nodes(level)]

    # ---------------------------------------------------------------- identity and bytes

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (
            self._config() == other._config()
            and self.clamp == other.clamp
            and self.total_weight == other.total_weight
            and bool(np.array_equal(self.sketched, other.sketched))
            and bool(np.array_equal(self.exact, other.exact))
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"DyadicCountSketch(lower={self.lower}, upper={self.upper}, width={self.width}, "
            f"depth={self.depth}, seed={self.seed}, levels={self.levels}, "
            f"sketched_levels={self.n_sketched}, total_weight={self.total_weight})"
        )

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`), kind ``DyadicCountSketch``."""
        params = self._layout_params()
        params.update(clamp=self.clamp, total_weight=self.total_weight)
        return serialization.dumps(
            self.KIND, params, {"sketched": self.sketched, "exact": self.exact}
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> DyadicCountSketch:
        """Inverse of :meth:`to_bytes`; ``SketchFormatError`` on malformed bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        obj = cls.__new__(cls)
        cls._layout_from_params(obj, params, arrays)
        obj.clamp = serialization.require(params, "clamp", bool)
        obj.total_weight = serialization.require(params, "total_weight", int)
        wrapped = np.array([obj.total_weight & 0xFFFFFFFFFFFFFFFF], np.uint64).view(np.int64)[0]
        for j in range(obj.n_sketched, obj.levels):
            # Every exact level partitions the domain: its node counts sum to the total.
            if obj.level_table(j).sum() != wrapped:
                raise err("exact dyadic level does not sum to total_weight")
        return obj

    def __reduce__(self):
        return (DyadicCountSketch.from_bytes, (self.to_bytes(),))
