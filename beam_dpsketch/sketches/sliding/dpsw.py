"""DPSW-Sketch: differentially private frequencies and heavy hitters over a sliding window.

Wang, Wang and Chen, "DPSW-Sketch: A Differentially Private Sketch Framework for Frequency
Estimation over Sliding Windows" (KDD 2024), cited as [WWC24]; errata and library choices are explained in
docs/algorithms.md#sliding-windows.

Structure ([WWC24, Section 4.1]): the stream is cut into blocks of ``B`` positions. Block ``k`` holds one
private Count-Min sketch (PCMS) over the whole block (``F``), and one over each prefix ``P_j`` and
each suffix ``Q_j`` of length ``I[j]`` (``j = 2..|I|``), where ``I = [B, ..., 1]`` is the
data-independent checkpoint list of a smooth histogram over the count (docs/algorithms.md#dpsw-checkpoints). A PCMS is the
exact Count-Min table of its fixed position range plus i.i.d. Gaussian noise of variance
``depth / rho_j`` per counter, added **once, when the range has ended** ([WWC24, Section 3] and docs/algorithms.md#dpsw-segments): it is
then ``rho_j``-zCDP under substitution (L2 sensitivity ``sqrt(2 depth)``, [WWC24, Algorithm 1]). A frequency
query at time ``t`` sums the count-min estimates of the shortest sealed suffix of the oldest
overlapping block, the full sketches of the blocks in between and the longest sealed prefix of
the current block ([WWC24, Algorithm 3], corrected per docs/algorithms.md#dpsw-e1, docs/algorithms.md#dpsw-e4, docs/algorithms.md#dpsw-e5, docs/algorithms.md#dpsw-e7).
A count-min estimate of a noisy PCMS is the minimum of ``depth`` noisy counters, so it sits
``c_a sigma_j`` below the count on average whatever the data; by default each one is shifted
back by that public constant, which makes the sum unbiased for a key sharing no cell
(docs/algorithms.md#dpsw-debiased; the paper's sum as written stays available).

Privacy ([WWC24, Lemma 4.1]): the level budgets of one block add up to at most ``rho``
(sequential composition), blocks are disjoint with data-independent ranges (parallel
composition), and every query is post-processing of sealed PCMSs, so the whole unbounded stream,
with unlimited queries at every time step, is ``rho``-zCDP for **replace-one** neighbours (two
streams of the same length whose items differ in the key of the item at one position), hence
``(rho + 2 sqrt(rho ln(1/delta)), delta)``-DP ([WWC24, Theorem 3.2]). Add/remove neighbours are *not*
covered in count-based mode (one insertion shifts every later position, [WWC24, Section 3]). In
time-based mode (positions are time steps, any number of arrivals per step, timestamps public)
the guarantee holds for substituting one event's key at its step, and also for adding or
removing one event (L2 sensitivity ``sqrt(depth) <= sqrt(2 depth)``, assumption A6 of docs/algorithms.md#dpsw-a6), provided the
times passed to :meth:`DPSWSketch.advance_to` and to the queries do not depend on the data (the
Beam adapter ends its schedule at the last step holding an event, so it claims replace-one only).

Implementation (docs/algorithms.md#dpsw-segments): raw counts are kept per *segment* of the current block (the cut
points ``{0, B} U {I[j], B - I[j]}``), each item touches one segment table (``depth`` cells), and a
PCMS is a prefix/suffix sum of segment tables when it is sealed. Noise comes only from
:mod:`beam_dpsketch.noise`: each PCMS draws ``depth * width`` values from its own keyed stream,
``noise_source.stream((release_prefix, "dpsw", block, kind, level))``, so re-sealing after a retry or a
restore from :meth:`DPSWSketch.to_bytes` reproduces the identical array. Hashing is that of
:class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch`: a sealed PCMS with the noise forced to
zero equals the exact Count-Min table of the same ``(width, depth, seed)`` over its range.

Caller obligations ([WWC24, Lemma 4.1], docs/algorithms.md#dpsw-beam): the heavy-hitter candidate domain must be public
(fixed before seeing the data); the hash seed must not depend on the data; the serialized state
(:meth:`DPSWSketch.to_bytes`) contains raw counts of unsealed ranges and may only go to a trusted
state backend; a second instance over the same stream composes (``k`` instances cost ``k rho``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import (
    check_choice,
    check_int,
    check_probability,
    check_real,
    renamed_keyword,
)
from beam_dpsketch.hashing import MAX_DEPTH, MAX_WIDTH, check_seed, hash_keys, row_buckets
from beam_dpsketch.noise import NoiseSource, discrete_gaussian, gaussian
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.linear.calibration import noise_minimum_mean
from beam_dpsketch.sketches.sliding.layout import (
    BUDGET_SPLITS,
    MAX_INDEX,
    DPSWLayout,
    SelectedSketch,
    as_fraction,
    ceil_power,
    check_checkpoints,
    check_release_prefix,
    checkpoint_list,
    level_budgets,
    position_costs,
    resolve_rho,
    sigma_up,
)
from beam_dpsketch.sketches.sliding.layout import BudgetSplit as BudgetSplit

__all__ = [
    "BUDGET_SPLITS",
    "DPSWLayout",
    "DPSWSketch",
    "SelectedSketch",
    "check_release_prefix",
    "checkpoint_list",
    "level_budgets",
    "noise_minimum_mean",
    "position_costs",
]

NOISE_KINDS: tuple[str, ...] = ("gaussian", "discrete_gaussian")
ESTIMATORS: tuple[str, ...] = ("debiased", "sum_of_mins", "min_of_sums")

_KIND_CODES = {"F": 0, "P": 1, "Q": 2}
_KIND_NAMES = ("F", "P", "Q")
# Keys are hashed and counted in chunks: every temporary stays in cache (as in sketches/linear/base.py).
_CHUNK = 1 << 16
# Above this many (segment x cell) bins per chunk, count segment by segment instead.
_MAX_BINS = 1 << 22


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _check_index(value: Any, name: str, lower: int, upper: int) -> int:
    """``value`` as an int in ``[lower, upper]``; the error names ``name``, never the value.

    For positions, blocks and segments, which locate data (a position or an event time), so an
    error message that a runner logs or returns as the job error must not contain them.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lower <= value <= upper:
        raise ValueError(f"{name} is out of range")
    return int(value)


# --------------------------------------------------------------------------------------------
# The sketch
# --------------------------------------------------------------------------------------------


class DPSWSketch:
    """DPSW-Sketch over a count-based (or time-based) sliding window of ``window`` positions.

    Guarantee: ``rho``-zCDP (hence ``(eps, delta)``-DP for an approx budget via [WWC24, Theorem 3.2] Eq. 1)
    over the whole unbounded stream, for replace-one neighbours (one item's key substituted at
    its position), with any number of frequency and heavy-hitter queries at any time steps ([WWC24, Lemma 4.1], Thm 4.4(1)). In time-based mode add/remove of one event is covered as well
    (assumption A6 of docs/algorithms.md#dpsw-a6) when the times given to :meth:`advance_to` and to queries do not depend on the
    data. Paper: Wang, Wang and Chen (KDD 2024), Algorithms 1-3; [WWC24, Section 4.1] with
    docs/algorithms.md#dpsw-e1 (suffix start), docs/algorithms.md#dpsw-e4, docs/algorithms.md#dpsw-e5 (query indices), docs/algorithms.md#dpsw-e7 (``l' == l`` branch) and docs/algorithms.md#dpsw-e9 (exact
    checkpoints) fixed.

    Parameters
    ----------
    window
        Window length ``w`` (items, or time units in time-based mode).
    budget
        A :class:`~beam_dpsketch.privacy.budget.PrivacyBudget`: ``zcdp(rho)``, or
        ``approx(eps, delta)`` converted with [WWC24, Theorem 3.2]. Pure budgets are refused.
    width, depth
        Count-Min width ``b`` and depth ``a`` of every PCMS (same cells as a
        :class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` with the same ``seed``).
    block
        Block length ``B`` in ``[1, window]``. Give ``block`` or ``beta`` (``B = ceil(w^beta)``).
    alpha
        Smooth-histogram factor (exact rational, docs/algorithms.md#dpsw-checkpoints) used for the checkpoints (unless
        ``checkpoints`` is given) and for the ``"paper"``/``"tight"`` budget splits.
    checkpoints
        Explicit ``I = [B, ..., 1]`` (strictly decreasing), e.g. ``|I| = 3`` for the experiments.
    split
        Budget split, see :func:`level_budgets` (default ``"paper"``).
    q
        Full-block share for ``split="code_q"``.
    seed
        Public hash seed in ``[0, 2**32)``.
    noise_source
        Where the noise comes from (:class:`~beam_dpsketch.noise.NoiseSource`); ``None`` draws a
        fresh secret source. Tests may pass ``NoiseSource.zero_noise_for_tests()``.
    release_prefix
        Names this instance in the release ids of its noise streams (a string; default
        ``"dpsw"``). Two instances sharing a source need distinct prefixes. ``label`` is a
        deprecated spelling of it.
    noise
        ``"gaussian"`` (default, the paper's continuous noise, sampled exactly on a fine lattice)
        or ``"discrete_gaussian"`` (integer noise, [WWC24, Lemma 4.1] floating-point caveat).
    hh_slack
        Default heavy-hitter slack ``zeta`` in the threshold ``(gamma - zeta) w`` ([WWC24, Algorithm 3, lines 6-9],
        docs/algorithms.md#dpsw-e14); ``None`` means ``e / width``.
    free_prefixes
        Drop a block's prefix PCMSs once the block is complete (they are never selected again,
        [WWC24, Section 4.1], library choice); queries at past times inside completed blocks then need ``False``.

    Notes
    -----
    Time advances with :meth:`update` / :meth:`update_batch` (count-based: one position per
    item) or with :meth:`update_at` plus :meth:`advance_to` (explicit positions or time steps,
    zero or many items each). The Beam adapter (docs/algorithms.md#dpsw-beam) may instead feed exact per-segment
    tables combined across shards with :meth:`add_segment_counts` (see :meth:`locate`) and seal
    with :meth:`advance_to`. Unsealed counts are never returned by any method except
    :meth:`to_bytes` (trusted state only).
    """

    KIND = "DPSWSketch"

    def __init__(
        self,
        window: int,
        budget: PrivacyBudget,
        *,
        width: int,
        depth: int,
        block: int | None = None,
        beta: float | None = None,
        alpha: Any = None,
        checkpoints: Sequence[int] | None = None,
        split: str = "paper",
        q: float = 0.8,
        seed: int = 0,
        noise_source: NoiseSource | None = None,
        release_prefix: str | None = None,
        noise: str = "gaussian",
        hh_slack: float | None = None,
        free_prefixes: bool = True,
        label: str | None = None,
    ) -> None:
        self.window = check_int(window, "window", 1, MAX_INDEX)
        self.rho, self.budget = resolve_rho(budget)
        self.width = check_int(width, "width", 1, MAX_WIDTH)
        self.depth = check_int(depth, "depth", 1, MAX_DEPTH)
        self.seed = check_seed(seed)
        if (block is None) == (beta is None):
            raise ValueError(
                "give exactly one of block and beta (or a preset: paper_experiments, theory)"
            )
        if block is None:
            block = ceil_power(self.window, check_probability(beta, "beta"))
        self.block = check_int(block, "block", 1, self.window)
        self.alpha = None if alpha is None else as_fraction(alpha, "alpha")
        if checkpoints is None:
            if self.alpha is None:
                raise ValueError("give alpha or explicit checkpoints")
            cps = checkpoint_list(self.block, self.alpha)
        else:
            cps = check_checkpoints(checkpoints, self.block)
        self.split = check_choice(split, "split", BUDGET_SPLITS)
        self.q = float(q)
        self.levels = level_budgets(self.rho, cps, split=split, alpha=self.alpha, q=q)
        # [WWC24, Algorithm 2] line 5: the block's sequential composition stays within rho.
        total = self.levels[0] + 2 * sum(self.levels[1:])
        if split != "tight" and total > self.rho * (1 + 1e-12):
            raise ValueError(f"level budgets sum to {total} > rho = {self.rho}")
        self.layout = DPSWLayout(self.block, cps)
        if noise_source is None:
            noise_source = NoiseSource()
        if not isinstance(noise_source, NoiseSource):
            raise TypeError(
                f"noise_source must be a NoiseSource or None, got {type(noise_source).__name__}"
            )
        self.noise_source = noise_source
        self.release_prefix = check_release_prefix(
            renamed_keyword(release_prefix, label, "release_prefix", "label"), "dpsw"
        )
        self.noise = check_choice(noise, "noise", NOISE_KINDS)
        if hh_slack is None:
            hh_slack = math.e / self.width
        self.hh_slack = check_real(hh_slack, "hh_slack")
        self.free_prefixes = bool(free_prefixes)
        self.sigmas = tuple(
            sigma_up(Fraction(self.depth) / Fraction(rho_j)) for rho_j in self.levels
        )
        self.t = 0
        # Blocks before this one are never read again (advance_to's next_query promise).
        self._keep_from = 1
        # Pending raw segment tables of blocks not fully sealed: block -> (S, depth, width) int64.
        self._pending: dict[int, np.ndarray] = {}
        # Sealed PCMSs: (block, kind, level) -> read-only float64 (depth, width).
        self._sealed: dict[tuple[int, str, int], np.ndarray] = {}
        self._cuts = np.asarray(self.layout.cuts, dtype=np.int64)
        # Seal schedule within a block: (relative end, kind, level), sorted by end.
        self._schedule = sorted(
            (self.layout.range_of(kind, j)[1], kind, j) for kind, j in self.layout.sketches()
        )

    # ------------------------------------------------------------------ presets

    @classmethod
    def theory(
        cls,
        window: int,
        budget: PrivacyBudget,
        *,
        width: int,
        depth: int,
        alpha: Any = Fraction(1, 2),
        seed: int = 0,
        noise_source: NoiseSource | None = None,
        release_prefix: str | None = None,
        noise: str = "gaussian",
        hh_slack: float | None = None,
        free_prefixes: bool = True,
        label: str | None = None,
    ) -> DPSWSketch:
        """Preset ``theory`` (Thm 4.4): ``B = ceil(sqrt(w))``, checkpoints from ``alpha``,
        the paper's budget split (docs/algorithms.md#dpsw-e12 column). The other parameters are
        those of :class:`DPSWSketch`.

        Space and noise grow with the ``~sqrt(w)`` live blocks (docs/algorithms.md#dpsw-segments); the guarantee is that
        of :class:`DPSWSketch`.
        """
        return cls(
            window,
            budget,
            width=width,
            depth=depth,
            block=math.isqrt(window - 1) + 1 if window > 1 else 1,
            alpha=alpha,
            split="paper",
            seed=seed,
            noise_source=noise_source,
            release_prefix=release_prefix,
            noise=noise,
            hh_slack=hh_slack,
            free_prefixes=free_prefixes,
            label=label,
        )

    @classmethod
    def paper_experiments(
        cls,
        window: int,
        budget: PrivacyBudget,
        *,
        width: int,
        depth: int,
        middle: int | None = None,
        q: float = 0.8,
        seed: int = 0,
        noise_source: NoiseSource | None = None,
        release_prefix: str | None = None,
        noise: str = "gaussian",
        hh_slack: float | None = None,
        free_prefixes: bool = True,
        label: str | None = None,
    ) -> DPSWSketch:
        """Preset ``paper_experiments`` (docs/algorithms.md#dpsw-e12): the paper's experiments.

        ``B = w // 10`` (10 blocks per window; ``w`` must be a multiple of 10, else ``ceil``),
        explicit ``|I| = 3`` checkpoints ``[B, middle, 1]`` with ``middle = ceil(B/2)`` by
        default (balances over- and under-coverage, docs/algorithms.md#dpsw-e12), and the authors' code budget split
        ``"code_q"`` with ``q = 0.8`` (``rho_1 = 0.8 rho``, ``rho_2 = rho_3 = 0.05 rho``). This
        deviates from Algorithm 2's budget formula, which with ``|I| = 3`` at ``B = 1e5`` would
        leave the prefix/suffix sketches pure noise (docs/algorithms.md#dpsw-e12). Same guarantee as
        :class:`DPSWSketch`.
        """
        # The preset's B = ceil(W/10) needs W >= 10; the constructor checks the upper bound.
        window = check_int(window, "window", 10)
        block = -(-window // 10)
        if middle is None:
            middle = -(-block // 2)
        cps: list[int] = [block, middle, 1] if 1 < middle < block else [block, 1]
        if block == 1:
            cps = [1]
        return cls(
            window,
            budget,
            width=width,
            depth=depth,
            block=block,
            checkpoints=cps,
            split="code_q",
            q=q,
            seed=seed,
            noise_source=noise_source,
            release_prefix=release_prefix,
            noise=noise,
            hh_slack=hh_slack,
            free_prefixes=free_prefixes,
            label=label,
        )

    # ------------------------------------------------------------------ positions

    @property
    def checkpoints(self) -> tuple[int, ...]:
        return self.layout.checkpoints

    def locate(self, positions: Any) -> tuple[np.ndarray, np.ndarray]:
        """``(block, segment)`` of 1-based absolute positions (or time steps), vectorised.

        Block ``k >= 1`` covers ``(k-1) B + 1 .. k B``; segments as in :class:`DPSWLayout`.
        The Beam adapter keys exact per-segment Count-Min tables by these (docs/algorithms.md#dpsw-beam).
        """
        pos = np.asarray(positions, dtype=np.int64)
        if pos.size and pos.min() < 1:
            raise ValueError("positions must be >= 1")
        k = (pos - 1) // self.block + 1
        rel = pos - (k - 1) * self.block
        return k, self.layout.segment_of(rel)

    def segment_end(self, block: int, segment: int) -> int:
        """Last absolute position of a segment (it is complete once time reaches it)."""
        return (block - 1) * self.block + int(self._cuts[segment + 1])

    # ------------------------------------------------------------------ updates

    def update(self, key: Any) -> DPSWSketch:
        """Process one stream item at the next position (count-based mode)."""
        return self.update_batch([key])

    def update_batch(self, keys: Any) -> DPSWSketch:
        """Process a batch of items at consecutive positions ``t+1 .. t+n`` (count-based mode).

        Vectorised: keys are hashed in chunks and counted with one ``bincount`` per chunk into
        the segment tables; PCMSs whose range ends inside the batch are sealed in order.
        """
        n = len(keys)
        for start in range(0, n, _CHUNK):
            chunk = keys[start : start + _CHUNK]
            h1, h2 = hash_keys(chunk, self.seed)
            first = self.t + 1
            self._count(h1, h2, np.arange(first, first + len(h1), dtype=np.int64))
            self.advance_to(first + len(h1) - 1)
        return self

    def update_at(self, keys: Any, positions: Any) -> DPSWSketch:
        """Add items at explicit future positions or time steps (all ``> t``), without sealing.

        Time-based mode: ``positions`` are integer time steps (docs/algorithms.md#dpsw-beam: blocks and checkpoints
        in time units), any number of items per step. Call :meth:`advance_to` to move time
        forward and seal. Items at ``<= t`` are refused (``ValueError``): their ranges may
        already be sealed and must never change (docs/algorithms.md#dpsw-beam).
        """
        pos = np.asarray(positions)
        if pos.dtype.kind not in "iu":
            raise TypeError(f"positions must be integers, got dtype {pos.dtype}")
        pos = pos.astype(np.int64)
        if pos.shape != (len(keys),):
            raise ValueError("positions must be one-dimensional with one entry per key")
        if pos.size and pos.min() <= self.t:
            raise ValueError(
                f"positions must be > the current time t = {self.t}: late items would change "
                "sealed sketches"
            )
        for start in range(0, len(pos), _CHUNK):
            h1, h2 = hash_keys(keys[start : start + _CHUNK], self.seed)
            self._count(h1, h2, pos[start : start + _CHUNK])
        return self

    def add_segment_counts(self, block: int, segment: int, table: Any) -> DPSWSketch:
        """Add an exact int64 ``(depth, width)`` Count-Min table to one segment of one block.

        The table must be built with this sketch's ``(width, depth, seed)`` (e.g. a
        :class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` ``.table``) over items whose
        positions :meth:`locate` maps to ``(block, segment)``; tables of different shards simply
        add (docs/algorithms.md#dpsw-beam). The segment must not be complete yet (its end ``> t``).
        """
        # Block and segment locate data (positions or event times): errors never show them.
        block = _check_index(block, "block", 1, MAX_INDEX)
        segment = _check_index(segment, "segment", 0, self.layout.n_segments - 1)
        arr = np.asarray(table)
        if arr.dtype.kind not in "iu":
            raise TypeError(f"table must hold integers, got dtype {arr.dtype}")
        if arr.shape != (self.depth, self.width):
            raise ValueError(f"table must have shape {(self.depth, self.width)}, got {arr.shape}")
        if self.segment_end(block, segment) <= self.t:
            raise ValueError(
                f"the segment ended at or before the current time t = {self.t}; its sketches "
                "may already be sealed"
            )
        if block < self._keep_from:
            # No query that may still be made reads this block (advance_to's next_query).
            return self
        self._pending_table(block)[segment] += arr.astype(np.int64, copy=False)
        return self

    def add_range_counts(self, start: int, end: int, table: Any) -> DPSWSketch:
        """Add an exact table for the positions ``start .. end``, which must lie in one segment."""
        start = _check_index(start, "start", 1, MAX_INDEX)
        end = _check_index(end, "end", start, MAX_INDEX)
        (kb, ke), (gb, ge) = self.locate([start, end])
        if kb != ke or gb != ge:
            raise ValueError("start and end must lie in one segment")
        return self.add_segment_counts(int(kb), int(gb), table)

    def _pending_table(self, block: int) -> np.ndarray:
        tab = self._pending.get(block)
        if tab is None:
            tab = np.zeros((self.layout.n_segments, self.depth, self.width), dtype=np.int64)
            self._pending[block] = tab
        return tab

    def _count(self, h1: np.ndarray, h2: np.ndarray, pos: np.ndarray) -> None:
        if len(pos) == 0:
            return
        k, g = self.locate(pos)
        group = (k - k.min()) * self.layout.n_segments + g
        uniq, inv = np.unique(group, return_inverse=True)
        cells = self.depth * self.width
        buckets = row_buckets(h1, h2, self.depth, self.width)
        buckets += (np.arange(self.depth, dtype=np.int64) * self.width)[:, None]
        if len(uniq) * cells <= _MAX_BINS:
            flat = (buckets + inv * cells).ravel()
            counts = np.bincount(flat, minlength=len(uniq) * cells)
            counts = counts.reshape(len(uniq), self.depth, self.width)
            parts = [counts[i] for i in range(len(uniq))]
        else:
            order = np.argsort(inv, kind="stable")
            bounds = np.searchsorted(inv[order], np.arange(len(uniq) + 1))
            parts = []
            for i in range(len(uniq)):
                idx = order[bounds[i] : bounds[i + 1]]
                c = np.bincount(buckets[:, idx].ravel(), minlength=cells)
                parts.append(c.reshape(self.depth, self.width))
        kmin = int(k.min())
        nseg = self.layout.n_segments
        for gid, part in zip(uniq.tolist(), parts, strict=True):
            if kmin + gid // nseg < self._keep_from:
                # No query that may still be made reads this block (advance_to's next_query).
                continue
            self._pending_table(kmin + gid // nseg)[gid % nseg] += part

    # ------------------------------------------------------------------ time and sealing

    def advance_to(self, t: int, *, next_query: int | None = None) -> DPSWSketch:
        """Move time to ``t >= self.t``: seal every PCMS whose range ends at or before ``t``
        (noise drawn once, from its keyed stream) and discard blocks older than the window.

        ``next_query`` (``>= t``) promises that no query will be made at a time before it: the
        blocks that no query from ``next_query`` on can select (those before its window) are
        then discarded unsealed, now and when their counts arrive later (nothing of them is
        ever drawn or released). Every later query answers exactly as without the promise,
        since a PCMS's noise depends only on its keyed stream.
        """
        t = check_int(t, "t", self.t, MAX_INDEX)
        if next_query is not None:
            next_query = check_int(next_query, "next_query", t, MAX_INDEX)
            self._keep_from = max(self._keep_from, self._oldest_needed(next_query))
        b = self.block
        first_block = self.t // b + 1  # the block of position t + 1
        last_block = (t - 1) // b + 1 if t > self.t else 0
        # Seal in block order; a block with no pending counts seals zero tables plus noise.
        lo_keep = self._lowest_kept(t)
        for kb in range(max(first_block, lo_keep), last_block + 1):
            self._seal_block(kb, self.t, t)
        # Blocks skipped entirely (outside the retained range) still had their sketches
        # released in principle; nothing of them is ever queried, so nothing is drawn.
        for kb in [kb for kb in self._pending if kb < lo_keep]:
            del self._pending[kb]
        self.t = t
        self._discard(t)
        return self

    def _oldest_needed(self, t: int) -> int:
        ws = max(t - self.window + 1, 1)
        return (ws - 1) // self.block + 1

    def _lowest_kept(self, t: int) -> int:
        """The oldest block a query at ``t`` or later (and after the promised next query) reads."""
        return max(self._oldest_needed(t), self._keep_from)

    def _seal_block(self, kb: int, t_from: int, t_to: int) -> None:
        s = (kb - 1) * self.block
        due = [
            (kind, j)
            for end, kind, j in self._schedule
            if t_from < s + end <= t_to and not (kind == "P" and self._skip_prefix(kb, t_to))
        ]
        if not due:
            return
        tab = self._pending.get(kb)
        if tab is None:
            tab = np.zeros((self.layout.n_segments, self.depth, self.width), dtype=np.int64)
        cum = np.cumsum(tab, axis=0)
        cuts = self.layout.cuts
        for kind, j in due:
            lo, hi = self.layout.range_of(kind, j)
            g_hi = cuts.index(hi) - 1
            raw = cum[g_hi].copy()
            if lo > 1:
                raw -= cum[cuts.index(lo - 1) - 1]
            self._sealed[(kb, kind, j)] = self._noisy(raw, kb, kind, j)
        if s + self.block <= t_to:
            self._pending.pop(kb, None)
            if self.free_prefixes:
                for j in range(2, self.layout.n_levels + 1):
                    self._sealed.pop((kb, "P", j), None)

    def _skip_prefix(self, kb: int, t_to: int) -> bool:
        # A prefix sealed and freed within the same advance is never queryable: skip its noise.
        return self.free_prefixes and (kb - 1) * self.block + self.block <= t_to

    def _noisy(self, raw: np.ndarray, kb: int, kind: str, j: int) -> np.ndarray:
        stream = self.noise_source.stream((self.release_prefix, "dpsw", kb, kind, j))
        size = self.depth * self.width
        if self.noise == "gaussian":
            z = gaussian(stream, self.sigmas[j - 1], size)
        else:
            z = discrete_gaussian(stream, self.sigmas[j - 1], size).astype(np.float64)
        out = raw.astype(np.float64) + z.reshape(self.depth, self.width)
        out.flags.writeable = False
        return out

    def _discard(self, t: int) -> None:
        lo = self._lowest_kept(t)
        for key in [key for key in self._sealed if key[0] < lo]:
            del self._sealed[key]

    # ------------------------------------------------------------------ queries

    def selection(self, t: int | None = None) -> list[SelectedSketch]:
        """The sealed PCMSs a query at time ``t`` sums ([WWC24, Algorithm 3] corrected).

        Oldest block ``l'``: the shortest suffix still covering ``ws`` (``x = 1`` is ``F``);
        middle blocks: ``F``; current block ``l``: the longest sealed prefix (``y = 1`` is
        ``F``); if ``l' == l`` only the prefix (docs/algorithms.md#dpsw-e7). Empty for ``t = 0``.
        """
        t = self.t if t is None else check_int(t, "t", 0, self.t)
        if t == 0:
            return []
        b, I = self.block, self.layout.checkpoints  # noqa: E741
        ws = max(t - self.window + 1, 1)
        cur = (t - 1) // b + 1
        old = (ws - 1) // b + 1
        lcur = t - (cur - 1) * b
        # smallest j (0-based) with I[j] <= lcur; I is decreasing
        y = next(j for j, c in enumerate(I) if c <= lcur)
        out = []
        if old < cur:
            lold = old * b - ws + 1
            # largest j with I[j] >= lold
            x = max(j for j, c in enumerate(I) if c >= lold)
            out.append(self._sel(old, "F" if x == 0 else "Q", x + 1))
            out += [self._sel(kb, "F", 1) for kb in range(old + 1, cur)]
        out.append(self._sel(cur, "F" if y == 0 else "P", y + 1))
        return out

    def _sel(self, kb: int, kind: str, level: int) -> SelectedSketch:
        lo, hi = self.layout.range_of(kind, level)
        s = (kb - 1) * self.block
        return SelectedSketch(kb, kind, level, s + lo, s + hi)

    def _arrays(self, t: int | None) -> tuple[list[np.ndarray], list[int]]:
        """The selected sealed arrays at ``t`` and the level (1-based) of each."""
        t = self.t if t is None else t
        arrays, levels = [], []
        for sel in self.selection(t):
            if sel.end > t:
                raise RuntimeError(f"query at t={t} would use an unsealed sketch {sel}")
            arr = self._sealed.get((sel.block, sel.kind, sel.level))
            if arr is None:
                raise ValueError(
                    f"the sketch {sel} needed at t={t} is no longer held (old blocks and, with "
                    "free_prefixes, completed prefixes are discarded)"
                )
            arrays.append(arr)
            levels.append(sel.level)
        return arrays, levels

    def noise_minimum_means(self) -> tuple[float, ...]:
        """Mean of the minimum over the ``depth`` noise values of one key in a PCMS, per level.

        ``E[min_r Z_r]`` for ``depth`` i.i.d. noise values of the level's law
        (:func:`noise_minimum_mean`): ``-c_a sigma_j`` for Gaussian noise. It depends only on
        public parameters. 0 under the test-only zero-noise source, whose noise is 0.
        """
        if self.noise_source.is_zero_noise:
            return (0.0,) * len(self.sigmas)
        return tuple(noise_minimum_mean(self.depth, s, self.noise) for s in self.sigmas)

    def estimate_hashes(
        self, h1: np.ndarray, h2: np.ndarray, t: int | None = None, estimator: str = "debiased"
    ) -> np.ndarray:
        """:meth:`estimate` for keys given by their hashes (:func:`~beam_dpsketch.hashing.hash_keys`)."""
        check_choice(estimator, "estimator", ESTIMATORS)
        arrays, levels = self._arrays(t)
        h1 = np.asarray(h1, dtype=np.uint64)
        h2 = np.asarray(h2, dtype=np.uint64)
        if not arrays:
            return np.zeros(len(h1), dtype=np.float64)
        buckets = row_buckets(h1, h2, self.depth, self.width)
        if estimator != "min_of_sums":
            est = np.zeros(len(h1), dtype=np.float64)
            for arr in arrays:
                est += np.take_along_axis(arr, buckets, axis=1).min(axis=0)
            if estimator == "debiased":
                # Each PCMS's minimum carries its noise minimum, whose mean is public: removing
                # it leaves each term unbiased for a key that shares no cell (post-processing).
                means = self.noise_minimum_means()
                est -= math.fsum(means[j - 1] for j in levels)
            return est
        total = np.zeros((self.depth, len(h1)), dtype=np.float64)
        for arr in arrays:
            total += np.take_along_axis(arr, buckets, axis=1)
        return total.min(axis=0)

    def estimate(self, keys: Any, t: int | None = None, estimator: str = "debiased") -> np.ndarray:
        """Estimated window frequency of each key at time ``t`` (default: now), float64.

        Post-processing of sealed PCMSs only (free in privacy, [WWC24, Section 3]), so the
        estimator changes no guarantee. ``estimator``:

        * ``"debiased"`` (default): [WWC24, Algorithm 3] sums the Count-Min estimate (the
          minimum over the ``depth`` rows, Algorithm 1 line 5) of every selected PCMS; each
          minimum is shifted by the public mean of its noise minimum,
          ``c_a sigma_P`` (:meth:`noise_minimum_means`), so the sum is unbiased for the count
          over the covered range ``[u, v]`` when the key shares no cell with another key
          (docs/algorithms.md#dpsw-debiased). Error: with probability at least
          ``1 - |Sel| (exp(-a) + eta)``,
          ``|fhat - cnt([u, v])| <= sum_P (zeta n_P + sigma_P (sqrt(2 ln(2 a / eta)) + c_a))``
          ([WWC24, Theorem 3.3 and Lemma 4.2], shifted by ``c_a sigma_P`` per PCMS; ``zeta =
          e / width``, ``n_P`` the items of the PCMS's range).
        * ``"sum_of_mins"``: the paper's sum as written, biased low by ``sum_P c_a sigma_P``
          (data-independent; about ``0.85 sigma_P`` per PCMS at ``depth = 3``).
        * ``"min_of_sums"``: the minimum over the rows of the summed arrays (opt-in,
          docs/algorithms.md#dpsw-segments), biased low by ``c_a sqrt(sum_P sigma_P^2)``.

        No clamping or rounding (docs/algorithms.md#dpsw-segments). ``t`` may be a past time
        while the sketches it needs are still held.
        """
        h1, h2 = hash_keys(keys, self.seed)
        return self.estimate_hashes(h1, h2, t, estimator)

    def heavy_hitters(
        self,
        candidates: Any,
        gamma: float,
        *,
        hh_slack: float | None = None,
        t: int | None = None,
    ) -> list[tuple[Any, float]]:
        """Candidates whose estimate is ``>= (gamma - hh_slack) * window`` ([WWC24, Algorithm 3, lines 6-9]).

        ``candidates`` is the **public** domain, fixed independently of the data (docs/algorithms.md#dpsw-beam);
        a domain derived from the stream leaks membership. The threshold uses the nominal
        ``window`` even during warm-up (docs/algorithms.md#dpsw-e20). Warns when ``gamma < 4 zeta`` (docs/algorithms.md#dpsw-e19), the condition
        of the heavy-hitter guarantee (Lemma 4.3). Returns ``(key, estimate)`` pairs in
        candidate order.
        """
        gamma = check_real(gamma, "gamma", 0.0, 1.0, lower_open=True)
        slack = self.hh_slack if hh_slack is None else float(hh_slack)
        zeta = math.e / self.width
        if gamma < 4 * zeta:
            warnings.warn(
                f"gamma = {gamma} < 4 zeta = {4 * zeta:.4g}: the heavy-hitter guarantee of "
                "Lemma 4.3 needs gamma >= 4 zeta (docs/algorithms.md#dpsw-e19)",
                stacklevel=2,
            )
        est = self.estimate(candidates, t)
        keep = np.flatnonzero(est >= (gamma - slack) * self.window)
        if isinstance(candidates, np.ndarray):
            keys = candidates[keep].tolist()
        else:
            seq = list(candidates)
            keys = [seq[i] for i in keep.tolist()]
        return list(zip(keys, est[keep].tolist(), strict=True))

    # ------------------------------------------------------------------ introspection

    def sealed_keys(self) -> list[tuple[int, str, int]]:
        """``(block, kind, level)`` of every held sealed PCMS, sorted."""
        return sorted(self._sealed, key=lambda k: (k[0], _KIND_CODES[k[1]], k[2]))

    def sealed_sketch(self, block: int, kind: str, level: int) -> np.ndarray:
        """A held sealed PCMS (read-only float64 ``(depth, width)``): safe to publish."""
        try:
            return self._sealed[(block, kind, level)]
        except KeyError:
            raise KeyError(f"no sealed sketch {(block, kind, level)} is held") from None

    def live_blocks(self) -> list[int]:
        """Blocks with a held sealed sketch or pending counts."""
        return sorted({k[0] for k in self._sealed} | set(self._pending))

    def memory_bytes(self) -> int:
        """Bytes of the held sealed arrays plus the pending raw segment tables."""
        return sum(a.nbytes for a in self._sealed.values()) + sum(
            a.nbytes for a in self._pending.values()
        )

    def level_sigmas(self) -> tuple[float, ...]:
        """Per-counter noise standard deviation ``sqrt(depth / rho_j)`` of each level."""
        return self.sigmas

    def privacy_report(self) -> dict[str, Any]:
        """Public accounting facts ([WWC24, Lemma 4.1]): budgets, block cost, the guarantee."""
        costs = position_costs(self.levels, self.layout.checkpoints)
        report: dict[str, Any] = {
            "mechanism": "DPSW-Sketch (Gaussian PCMS, [WWC24, Section 4.1; Lemma 4.1])",
            "neighbouring": "event-level substitution",
            "rho": self.rho,
            "split": self.split,
            "levels": list(self.levels),
            "sigmas": list(self.sigmas),
            "block_sum": self.levels[0] + 2 * sum(self.levels[1:]),
            "per_position_max": float(costs.max()),
            "checkpoints": list(self.layout.checkpoints),
            "block": self.block,
            "window": self.window,
        }
        if self.budget.kind == "approx":
            report.update(epsilon=self.budget.epsilon, delta=self.budget.delta)
        return report

    def __repr__(self) -> str:
        # Never shows counts (docs/algorithms.md#dpsw-beam: no partial state exposure).
        return (
            f"DPSWSketch(window={self.window}, block={self.block}, checkpoints="
            f"{list(self.layout.checkpoints)}, width={self.width}, depth={self.depth}, "
            f"rho={self.rho:.6g}, split={self.split!r}, t={self.t})"
        )

    # ------------------------------------------------------------------ serialization

    def _params(self) -> dict[str, Any]:
        return {
            "window": self.window,
            "block": self.block,
            "checkpoints": list(self.layout.checkpoints),
            "alpha": None if self.alpha is None else str(self.alpha),
            "split": self.split,
            "q": self.q,
            "rho": self.rho,
            "budget": self.budget.to_dict(),
            "width": self.width,
            "depth": self.depth,
            "seed": self.seed,
            # Stored under the field name "label", so that states written before keep loading.
            "label": self.release_prefix,
            "noise": self.noise,
            "hh_slack": self.hh_slack,
            "free_prefixes": self.free_prefixes,
            "t": self.t,
            "keep_from": self._keep_from,
        }

    def to_bytes(self) -> bytes:
        """Serialize the full state (trusted state backends only: holds unsealed raw counts).

        The noise source is not stored: pass it again to :meth:`from_bytes`. Continuation after
        a restore is bit-identical, since noise depends only on (source, release id).
        """
        keys = self.sealed_keys()
        index = np.array(
            [[kb, _KIND_CODES[kind], j] for kb, kind, j in keys], dtype=np.int64
        ).reshape(len(keys), 3)
        sealed = np.stack([self._sealed[k] for k in keys]) if keys else None
        pending_blocks = sorted(self._pending)
        arrays = {
            "sealed_index": index,
            "sealed": sealed
            if sealed is not None
            else np.zeros((0, self.depth, self.width), dtype=np.float64),
            "pending_blocks": np.array(pending_blocks, dtype=np.int64),
            "pending": np.stack([self._pending[k] for k in pending_blocks])
            if pending_blocks
            else np.zeros((0, self.layout.n_segments, self.depth, self.width), dtype=np.int64),
        }
        return serialization.dumps(self.KIND, self._params(), arrays)

    @classmethod
    def from_bytes(cls, data: bytes, noise_source: NoiseSource) -> DPSWSketch:
        """Inverse of :meth:`to_bytes`; raises ``SketchFormatError`` on malformed input.

        ``noise_source`` must be the source the state was built with (a fresh one would give a
        second, different draw for a sketch re-sealed after a retry); ``TypeError`` otherwise.
        """
        if not isinstance(noise_source, NoiseSource):
            raise TypeError(
                f"noise_source must be the sketch's NoiseSource, got {type(noise_source).__name__}"
            )
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        fmt = serialization.SketchFormatError
        try:
            bd = req(params, "budget", dict)
            if bd.get("kind") == "zcdp":
                budget = PrivacyBudget.zcdp(bd["rho"], bd.get("delta_for_conversion"))
            else:
                budget = PrivacyBudget.approx(bd["epsilon"], bd["delta"])
            alpha = params.get("alpha")
            sk = cls(
                req(params, "window", int),
                budget,
                width=req(params, "width", int),
                depth=req(params, "depth", int),
                block=req(params, "block", int),
                alpha=None if alpha is None else Fraction(alpha),
                checkpoints=req(params, "checkpoints", list),
                split=req(params, "split", str),
                q=req(params, "q", float),
                seed=req(params, "seed", int),
                noise_source=noise_source,
                release_prefix=req(params, "label", str),
                noise=req(params, "noise", str),
                hh_slack=req(params, "hh_slack", float),
                free_prefixes=req(params, "free_prefixes", bool),
            )
            t = check_int(req(params, "t", int), "t", 0, MAX_INDEX)
            keep_from = check_int(params.get("keep_from", 1), "keep_from", 1, MAX_INDEX)
        except (TypeError, ValueError, KeyError, ZeroDivisionError, OverflowError) as exc:
            if isinstance(exc, fmt):
                raise
            raise fmt(f"invalid DPSWSketch parameters: {exc}") from None
        if sk.rho != req(params, "rho", float):
            raise fmt("rho does not match the budget")
        d, w, nseg = sk.depth, sk.width, sk.layout.n_segments
        index = serialization.require_array(arrays, "sealed_index", "<i8", None)
        if index.ndim != 2 or index.shape[1] != 3:
            raise fmt("sealed_index must have shape (n, 3)")
        sealed = serialization.require_array(arrays, "sealed", "<f8", (len(index), d, w))
        blocks = serialization.require_array(arrays, "pending_blocks", "<i8", None)
        if blocks.ndim != 1:
            raise fmt("pending_blocks must be one-dimensional")
        pending = serialization.require_array(arrays, "pending", "<i8", (len(blocks), nseg, d, w))
        sk.t = t
        sk._keep_from = keep_from
        expected = sk._expected_sealed(t)
        got = []
        for (kb, code, j), arr in zip(index.tolist(), sealed, strict=True):
            if not 0 <= code < 3:
                raise fmt(f"invalid sketch kind code {code}")
            got.append((kb, _KIND_NAMES[code], j))
            if not np.all(np.isfinite(arr)):
                raise fmt("sealed sketch values must be finite")
        if set(got) != expected or len(got) != len(expected):
            raise fmt("the sealed sketches do not match the time t and the layout")
        cur = (t - 1) // sk.block + 1 if t else 1
        if len(set(blocks.tolist())) != len(blocks) or any(
            kb < max(cur, keep_from) or (kb == cur and t % sk.block == 0 and t)
            for kb in blocks.tolist()
        ):
            raise fmt("pending blocks must be distinct and not yet complete")
        if np.any(pending < 0):
            raise fmt("pending raw counts must be non-negative")
        for key, arr in zip(got, sealed, strict=True):
            arr = arr.copy()
            arr.flags.writeable = False
            sk._sealed[key] = arr
        for kb, tab in zip(blocks.tolist(), pending, strict=True):
            sk._pending[kb] = tab.copy()
        return sk

    def _expected_sealed(self, t: int) -> set[tuple[int, str, int]]:
        """The (block, kind, level) keys held at time ``t`` (what advance_to leaves)."""
        if t == 0:
            return set()
        b = self.block
        lo = self._lowest_kept(t)
        cur = (t - 1) // b + 1
        out = set()
        for kb in range(lo, cur + 1):
            s = (kb - 1) * b
            complete = s + b <= t
            for end, kind, j in self._schedule:
                if s + end > t:
                    continue
                if kind == "P" and complete and self.free_prefixes:
                    continue
                out.add((kb, kind, j))
        return out
