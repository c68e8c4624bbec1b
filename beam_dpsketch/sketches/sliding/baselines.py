"""Baselines for DPSW-Sketch ([WWC24, Appendix B]): exact references, U-Sketch and PCC-MG.

* :class:`ExactSlidingWindow`: exact frequencies over the last ``w`` items (ground truth,
  docs/algorithms.md#dpsw-segments: incremental ``bincount``, add the new chunk and subtract the expired one).
* :class:`ExactWindowCountMin`: a non-private Count-Min table of exactly the last ``w`` items, the
  idealised "Microscope-style" sliding-window CMS ([WWC24, Appendix B]; library choice: exact window counts stand in
  for Microscope-Sketch, which approximates this table). Same cells as
  :class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` with the same ``(width, depth, seed)``.
* :class:`USketch`: the simplified U-Sketch of the paper's experiments (Upadhyay 2019; [WWC24, Appendix B]):
  exact block CMSs (full block plus smooth-histogram suffixes), output perturbation with Laplace
  noise of scale ``2 ceil(sqrt(w)) / eps``. Unlike the authors' code, noise is **not** re-drawn
  per query: it is keyed by the query's selected sketches and the key, so repeated queries return
  identical values, and the privacy spent by *distinct* answers is counted.
* :class:`PCCMG`: Chan, Li, Shi and Xu (PETS 2012) private Misra-Gries over a binary tree of time
  blocks ([WWC24, Appendix B], with docs/algorithms.md#dpsw-e24's ``ceil(log2(4/lambda))`` levels). Each block is released once,
  when complete, with pure-DP noise on every key of a declared public universe, so queries are
  post-processing.

Noise comes only from :mod:`beam_dpsketch.noise` with release ids naming what is released.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_int, check_probability, renamed_keyword
from beam_dpsketch.hashing import (
    MAX_DEPTH,
    MAX_WIDTH,
    canonical_keys,
    check_seed,
    encode_key,
    hash_keys,
    row_buckets,
)
from beam_dpsketch.noise import NoiseSource, laplace
from beam_dpsketch.privacy.budget import PrivacyBudget, check_epsilon
from beam_dpsketch.sketches.misra_gries.baselines import chan_pure
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries
from beam_dpsketch.sketches.misra_gries.universe import Universe
from beam_dpsketch.sketches.sliding.dpsw import MAX_INDEX, check_release_prefix, checkpoint_list

__all__ = ["PCCMG", "ExactSlidingWindow", "ExactWindowCountMin", "USketch"]


def _check_source(noise_source: Any) -> NoiseSource:
    if noise_source is None:
        return NoiseSource()
    if not isinstance(noise_source, NoiseSource):
        raise TypeError(
            f"noise_source must be a NoiseSource or None, got {type(noise_source).__name__}"
        )
    return noise_source


def _check_gamma(gamma: Any) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, int | float):
        raise TypeError(f"gamma must be a float, got {type(gamma).__name__}")
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    return float(gamma)


def _select(candidates: Any, est: np.ndarray, threshold: float) -> list[tuple[Any, float]]:
    keep = np.flatnonzero(est >= threshold)
    if isinstance(candidates, np.ndarray):
        keys = candidates[keep].tolist()
    else:
        seq = list(candidates)
        keys = [seq[i] for i in keep.tolist()]
    return list(zip(keys, est[keep].tolist(), strict=True))


class _Ring:
    """Positions of the last ``window`` items: chunks of at most ``window`` items, in order.

    :meth:`push` yields, for a chunk of ``c <= window`` new items, the ring slots of the items
    that expire (positions ``t - w + 1 .. t - w + c`` that exist) and the slots to write.
    """

    __slots__ = ("window", "t")

    def __init__(self, window: int) -> None:
        self.window = window
        self.t = 0

    def push(self, c: int) -> tuple[np.ndarray, np.ndarray]:
        w = self.window
        first_exp = max(self.t - w + 1, 1)
        last_exp = self.t + c - w
        expired = (
            np.arange(first_exp, last_exp + 1, dtype=np.int64)
            if last_exp >= first_exp
            else np.zeros(0, np.int64)
        )
        new = np.arange(self.t + 1, self.t + c + 1, dtype=np.int64)
        self.t += c
        return (expired - 1) % w, (new - 1) % w


def _release_prefix(value: str | None, label: str | None, default: str) -> str:
    return check_release_prefix(renamed_keyword(value, label, "release_prefix", "label"), default)


class ExactSlidingWindow:
    """Exact item frequencies in the last ``window`` stream items (no privacy: ground truth).

    Keys are mapped to dense ids on first sight (vectorised over each batch's distinct keys);
    counts are updated incrementally per chunk (docs/algorithms.md#dpsw-segments), never by rescanning the window.
    """

    def __init__(self, window: int) -> None:
        self.window = check_int(window, "window", 1, MAX_INDEX)
        self._ring = _Ring(self.window)
        self._buf = np.zeros(self.window, dtype=np.int64)
        self._counts = np.zeros(0, dtype=np.int64)
        self._ids: dict[Any, int] = {}

    @property
    def t(self) -> int:
        return self._ring.t

    def _map(self, keys: Any, add: bool) -> np.ndarray:
        canon = canonical_keys(keys)
        if not canon:
            return np.zeros(0, dtype=np.int64)
        if isinstance(keys, np.ndarray) and keys.dtype.kind in "iu":
            uniq, inv = np.unique(np.asarray(keys, dtype=np.int64), return_inverse=True)
            uniq_keys: list[Any] = uniq.tolist()
        else:
            index: dict[Any, int] = {}
            inv = np.fromiter((index.setdefault(k, len(index)) for k in canon), np.int64)
            uniq_keys = list(index)
        ids = np.empty(len(uniq_keys), dtype=np.int64)
        for i, k in enumerate(uniq_keys):
            got = self._ids.get(k)
            if got is None:
                got = len(self._ids) if add else -1
                if add:
                    self._ids[k] = got
            ids[i] = got
        if add and len(self._ids) > len(self._counts):
            grown = np.zeros(max(len(self._ids), 2 * len(self._counts)), dtype=np.int64)
            grown[: len(self._counts)] = self._counts
            self._counts = grown
        return ids[inv]

    def update_batch(self, keys: Any) -> ExactSlidingWindow:
        """Append a batch of items at the next positions."""
        ids = self._map(keys, add=True)
        for start in range(0, len(ids), self.window):
            chunk = ids[start : start + self.window]
            exp_slots, new_slots = self._ring.push(len(chunk))
            if len(exp_slots):
                self._counts -= np.bincount(self._buf[exp_slots], minlength=len(self._counts))
            self._buf[new_slots] = chunk
            self._counts += np.bincount(chunk, minlength=len(self._counts))
        return self

    def estimate(self, keys: Any) -> np.ndarray:
        """Exact window count of each key (int64; 0 for keys never seen)."""
        ids = self._map(keys, add=False)
        out = np.zeros(len(ids), dtype=np.int64)
        seen = ids >= 0
        out[seen] = self._counts[ids[seen]]
        return out

    def heavy_hitters(self, candidates: Any, gamma: float) -> list[tuple[Any, float]]:
        """Candidates with exact window frequency ``>= gamma * window``."""
        gamma = _check_gamma(gamma)
        return _select(
            candidates, self.estimate(candidates).astype(np.float64), gamma * self.window
        )


class ExactWindowCountMin:
    """A Count-Min table of exactly the last ``window`` items (non-private reference).

    Every expired item is subtracted exactly (its cells are kept in a ring buffer), so the table
    always equals a :class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` built on the current
    window alone: the ideal that Microscope-Sketch (Wu et al., KDD 2023) approximates in less
    memory ([WWC24, Appendix B]). Memory ``depth * window`` ring cells plus the table.
    """

    def __init__(self, window: int, *, width: int, depth: int, seed: int = 0) -> None:
        self.window = check_int(window, "window", 1, MAX_INDEX)
        self.width = check_int(width, "width", 1, MAX_WIDTH)
        self.depth = check_int(depth, "depth", 1, MAX_DEPTH)
        self.seed = check_seed(seed)
        self._ring = _Ring(self.window)
        self._buf = np.zeros((self.depth, self.window), dtype=np.int64)
        self.table = np.zeros((self.depth, self.width), dtype=np.int64)
        self._offsets = (np.arange(self.depth, dtype=np.int64) * self.width)[:, None]

    @property
    def t(self) -> int:
        return self._ring.t

    def update_batch(self, keys: Any) -> ExactWindowCountMin:
        """Append a batch of items at the next positions (vectorised)."""
        cells = self.depth * self.width
        step = min(self.window, 1 << 16)
        for start in range(0, len(keys), step):
            h1, h2 = hash_keys(keys[start : start + step], self.seed)
            flat = row_buckets(h1, h2, self.depth, self.width) + self._offsets
            exp_slots, new_slots = self._ring.push(len(h1))
            if len(exp_slots):
                old = self._buf[:, exp_slots].ravel()
                self.table -= np.bincount(old, minlength=cells).reshape(self.depth, self.width)
            self._buf[:, new_slots] = flat
            self.table += np.bincount(flat.ravel(), minlength=cells).reshape(self.depth, self.width)
        return self

    def estimate(self, keys: Any) -> np.ndarray:
        """Count-Min estimate (min over rows) of each key's window frequency (int64)."""
        h1, h2 = hash_keys(keys, self.seed)
        b = row_buckets(h1, h2, self.depth, self.width)
        return np.take_along_axis(self.table, b, axis=1).min(axis=0)

    def heavy_hitters(self, candidates: Any, gamma: float) -> list[tuple[Any, float]]:
        """Candidates whose estimate is ``>= gamma * window``."""
        gamma = _check_gamma(gamma)
        return _select(
            candidates, self.estimate(candidates).astype(np.float64), gamma * self.window
        )


# --------------------------------------------------------------------------------------------
# U-Sketch
# --------------------------------------------------------------------------------------------


class USketch:
    """Simplified U-Sketch (Upadhyay, ICML 2019) as in the DPSW paper's experiments ([WWC24, Appendix B]).

    The window is cut into ``blocks_per_window`` blocks of ``B = ceil(w / blocks_per_window)``
    positions (paper App. B: 100 blocks, at most 2 sketches per block). Each complete block keeps
    exact Count-Min tables of the full block and of ``suffixes`` smooth-histogram suffixes (factor
    ``smooth``, the code's 0.9). A query sums the best-covering suffix of the oldest block and the
    full tables of the newer *complete* blocks (the current partial block is ignored, as in the
    code), then adds Laplace noise of scale ``2 ceil(sqrt(w)) / epsilon``.

    Privacy (our correction of the code, [WWC24, Appendix B]): the answer for key ``e`` depends on
    the data only through the sketches the query selects; each comes from a different block, so a
    substitution changes at most one of them, by at most 1 in every row: sensitivity 1. The noise
    is drawn from ``noise_source`` keyed by ``(release_prefix, selection, key)`` and is therefore identical
    for repeated queries with the same selection (re-releasing the same value is free). Each
    *distinct* ``(selection, key)`` answer is a Laplace mechanism with
    ``epsilon_per_answer = epsilon / (2 ceil(sqrt(w)))``-DP (substitution neighbours);
    ``epsilon_spent`` sums them (basic composition, pure DP) and ``epsilon_budget`` (optional)
    refuses answers beyond it (``ValueError``). The code's "per-query eps" is therefore the guarantee of
    ``2 ceil(sqrt(w))`` distinct answers, not of continual release.

    Parameters
    ----------
    window
        Window length.
    budget
        ``PrivacyBudget.pure(epsilon)``: the per-query epsilon that sets the noise scale. A bare
        float ``epsilon`` is still accepted, with a ``DeprecationWarning``.
    width, depth, seed
        Count-Min shape and public hash seed.
    domain
        Optional public key domain: answers for its keys draw their noise as one vector per
        selection (fast heavy-hitter scans). Must be fixed independently of the data.
    epsilon_budget
        Optional cap on ``epsilon_spent`` (``ValueError`` beyond it).
    """

    def __init__(
        self,
        window: int,
        budget: PrivacyBudget,
        *,
        width: int,
        depth: int,
        seed: int = 0,
        blocks_per_window: int = 100,
        smooth: Any = "9/10",
        suffixes: int = 1,
        domain: Iterable[Any] | None = None,
        noise_source: NoiseSource | None = None,
        release_prefix: str | None = None,
        epsilon_budget: float | None = None,
        label: str | None = None,
    ) -> None:
        self.window = check_int(window, "window", 1, MAX_INDEX)
        if not isinstance(budget, PrivacyBudget):
            warnings.warn(
                "USketch(window, epsilon) with a bare epsilon is deprecated: pass "
                "PrivacyBudget.pure(epsilon)",
                DeprecationWarning,
                stacklevel=2,
            )
            budget = PrivacyBudget.pure(check_epsilon(budget))
        if budget.kind != "pure":
            raise ValueError(
                "budget must be pure DP (PrivacyBudget.pure(eps)): U-Sketch answers with Laplace "
                f"noise, got {budget}"
            )
        self.epsilon = check_epsilon(budget.epsilon)
        self.width = check_int(width, "width", 1, MAX_WIDTH)
        self.depth = check_int(depth, "depth", 1, MAX_DEPTH)
        self.seed = check_seed(seed)
        nb = check_int(blocks_per_window, "blocks_per_window", 1, self.window)
        self.block = -(-self.window // nb)
        suffixes = check_int(suffixes, "suffixes", 0, MAX_INDEX)
        full = checkpoint_list(self.block, smooth)
        self.checkpoints = full[: 1 + suffixes]
        self.scale = 2 * (math.isqrt(self.window - 1) + 1 if self.window > 1 else 1) / self.epsilon
        self.epsilon_per_answer = 1.0 / self.scale
        self.noise_source = _check_source(noise_source)
        self.release_prefix = _release_prefix(release_prefix, label, "usketch")
        self.epsilon_budget = None if epsilon_budget is None else check_epsilon(epsilon_budget)
        self.epsilon_spent = 0.0
        self._answered: set[tuple[Any, ...]] = set()
        self._domain_keys = None if domain is None else canonical_keys(list(domain))
        self._domain_index = (
            None if self._domain_keys is None else {k: i for i, k in enumerate(self._domain_keys)}
        )
        self._domain_noise: dict[tuple[int, int, int], np.ndarray] = {}
        b = self.block
        self._cuts = sorted({0, b} | {b - c for c in self.checkpoints[1:]})
        self._t = 0
        self._pending = np.zeros((len(self._cuts) - 1, depth, width), dtype=np.int64)
        # complete block -> (len(I), depth, width) int64: F, then the suffixes
        self._tables: dict[int, np.ndarray] = {}
        self._offsets = (np.arange(self.depth, dtype=np.int64) * self.width)[:, None]

    @property
    def t(self) -> int:
        return self._t

    def update_batch(self, keys: Any) -> USketch:
        """Append a batch of items at the next positions (vectorised per segment piece)."""
        n = len(keys)
        start = 0
        b = self.block
        cells = self.depth * self.width
        while start < n:
            rel = self._t % b  # items already in the current block
            g = int(np.searchsorted(self._cuts, rel, side="right")) - 1
            room = self._cuts[g + 1] - rel
            stop = min(n, start + room, start + (1 << 16))
            h1, h2 = hash_keys(keys[start:stop], self.seed)
            flat = (row_buckets(h1, h2, self.depth, self.width) + self._offsets).ravel()
            self._pending[g] += np.bincount(flat, minlength=cells).reshape(self.depth, self.width)
            self._t += stop - start
            start = stop
            if self._t % b == 0:
                self._close_block(self._t // b)
        return self

    def _close_block(self, kb: int) -> None:
        suffix_cum = np.cumsum(self._pending[::-1], axis=0)[::-1]  # sum of segments g..end
        tables = [suffix_cum[0]]
        for c in self.checkpoints[1:]:
            tables.append(suffix_cum[self._cuts.index(self.block - c)])
        self._tables[kb] = np.stack(tables)
        self._pending[:] = 0
        ws = max(self._t - self.window + 1, 1)
        for old in [k for k in self._tables if k < (ws - 1) // self.block + 1]:
            del self._tables[old]

    def selection(self) -> tuple[int, int, int] | None:
        """``(oldest block, suffix level (0 = full), last complete block)`` or ``None``."""
        t, b = self._t, self.block
        ws = max(t - self.window + 1, 1)
        old = (ws - 1) // b + 1
        last = t // b
        if last < old:
            return None
        lold = old * b - ws + 1
        x = max(j for j, c in enumerate(self.checkpoints) if c >= lold)
        return old, x, last

    def _raw_estimate(
        self, h1: np.ndarray, h2: np.ndarray, sel: tuple[int, int, int]
    ) -> np.ndarray:
        old, x, last = sel
        bk = row_buckets(h1, h2, self.depth, self.width)
        est = np.take_along_axis(self._tables[old][x], bk, axis=1).min(axis=0).astype(np.float64)
        for kb in range(old + 1, last + 1):
            est += np.take_along_axis(self._tables[kb][0], bk, axis=1).min(axis=0)
        return est

    def estimate(self, keys: Any) -> np.ndarray:
        """Noisy window frequency of each key at the current time (float64).

        Each distinct ``(selection, key)`` answer is charged ``epsilon_per_answer`` once; repeated
        answers are the same value and free.
        """
        canon = canonical_keys(keys)
        sel = self.selection()
        sel_id = sel if sel is not None else (0, 0, 0)
        new = {k for k in canon if (sel_id, k) not in self._answered}
        cost = len(new) * self.epsilon_per_answer
        if self.epsilon_budget is not None and self.epsilon_spent + cost > self.epsilon_budget:
            raise ValueError(
                f"U-Sketch: {len(new)} new answers would spend {self.epsilon_spent + cost:.6g} "
                f"> epsilon_budget = {self.epsilon_budget}"
            )
        self._answered.update((sel_id, k) for k in new)
        self.epsilon_spent += cost
        self._answered = {a for a in self._answered if a[0][0] >= sel_id[0]}
        if sel is None:
            raw = np.zeros(len(canon), dtype=np.float64)
        else:
            h1, h2 = hash_keys(keys, self.seed)
            raw = self._raw_estimate(h1, h2, sel)
        return raw + self._noise(canon, sel_id)

    def _noise(self, canon: list[Any], sel_id: tuple[int, int, int]) -> np.ndarray:
        out = np.empty(len(canon), dtype=np.float64)
        rest = list(range(len(canon)))
        if self._domain_index is not None:
            idx = np.array([self._domain_index.get(k, -1) for k in canon], dtype=np.int64)
            vec = self._domain_noise.get(sel_id)
            if vec is None:
                stream = self.noise_source.stream((self.release_prefix, "usketch-domain", *sel_id))
                vec = laplace(stream, self.scale, len(self._domain_keys))
                self._domain_noise = {sel_id: vec}
            hit = idx >= 0
            out[hit] = vec[idx[hit]]
            rest = np.flatnonzero(~hit).tolist()
        for i in rest:
            stream = self.noise_source.stream(
                (self.release_prefix, "usketch-key", *sel_id, encode_key(canon[i]))
            )
            out[i] = laplace(stream, self.scale, 1)[0]
        return out

    def heavy_hitters(
        self, candidates: Any, gamma: float, *, hh_slack: float = 0.0
    ) -> list[tuple[Any, float]]:
        """Public candidates whose noisy estimate is ``>= (gamma - hh_slack) * window``."""
        gamma = _check_gamma(gamma)
        return _select(candidates, self.estimate(candidates), (gamma - hh_slack) * self.window)


# --------------------------------------------------------------------------------------------
# PCC-MG
# --------------------------------------------------------------------------------------------


class PCCMG:
    """PCC-MG (Chan, Li, Shi and Xu, PETS 2012) as in the DPSW paper ([WWC24, Appendix B]).

    A binary tree over time: level ``i = 0..l`` (``l = ceil(log2(4 / lam))``, docs/algorithms.md#dpsw-e24, so the
    top level spans ``>= w``) has disjoint aligned blocks of ``2^i W0`` positions,
    ``W0 = ceil(lam w / 4)``. Each block runs a Misra-Gries sketch with
    ``k_i = ceil(2 / lam_i)`` counters, ``lam_i = 1 / (2^i (l+1))``; when the block is complete it
    is released **once** with budget ``eps_i = eps / 2^(l-i+1)``: exact discrete Laplace noise on
    the counter of every key of the public ``universe``, keep the top ``k_i`` (Chan et al.'s pure
    mechanism, :func:`~beam_dpsketch.sketches.misra_gries.baselines.chan_pure`), negatives
    clamped to 0 (post-processing, [WWC24, Appendix B], as in the authors' code). A query sums the released counts of the greedy
    dyadic cover of the window aligned to ``W0`` ([WWC24, Appendix B], as in the authors' code); missing keys count 0.

    Privacy: pure ``eps (1 - 2^-(l+1)) < eps``-DP for event-level substitution over the whole
    stream and all queries. MG's L1 sensitivity is ``k`` under add/remove ([LT23, Section 2]), so ``2 k`` under substitution (group of 2, docs/algorithms.md#mg-e19): each block uses
    noise scale ``2 k_i / eps_i`` (the authors' code uses ``(k_i + 2) / eps_i`` and perturbs only
    stored keys, which is not DP). An event lies in one block per level (sum over levels).

    Parameters
    ----------
    window
        Window length.
    budget
        ``PrivacyBudget.pure(epsilon)``: the total budget of the stream and all queries.
    lam
        The tree parameter ``lambda`` in (0, 1) (the paper tunes it in 0.025..0.125).
    universe
        Public key universe: a :class:`~beam_dpsketch.sketches.misra_gries.universe.Universe`, a
        ``range`` or an iterable of keys, fixed independently of the data.
    """

    def __init__(
        self,
        window: int,
        budget: PrivacyBudget,
        *,
        lam: float,
        universe: Any,
        noise_source: NoiseSource | None = None,
        release_prefix: str | None = None,
        label: str | None = None,
    ) -> None:
        self.window = check_int(window, "window", 1, MAX_INDEX)
        if not isinstance(budget, PrivacyBudget):
            raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        if budget.kind != "pure":
            raise ValueError(
                "budget must be pure DP (PrivacyBudget.pure(eps)): PCC-MG releases discrete "
                f"Laplace noise, got {budget}"
            )
        self.epsilon = check_epsilon(budget.epsilon)
        self.lam = check_probability(lam, "lam")
        self.levels = math.ceil(math.log2(4 / self.lam))
        self.w0 = math.ceil(self.lam * self.window / 4)
        l = self.levels  # noqa: E741
        self.block_lengths = tuple(2**i * self.w0 for i in range(l + 1))
        self.ks = tuple(math.ceil(2 * 2**i * (l + 1)) for i in range(l + 1))
        self.level_epsilons = tuple(self.epsilon / 2 ** (l - i + 1) for i in range(l + 1))
        self.noise_scales = tuple(
            2 * k / e for k, e in zip(self.ks, self.level_epsilons, strict=True)
        )
        self.universe = universe if isinstance(universe, Universe) else Universe.from_keys(universe)
        self.noise_source = _check_source(noise_source)
        self.release_prefix = _release_prefix(release_prefix, label, "pccmg")
        self._t = 0
        self._mgs = [MisraGries(k) for k in self.ks]
        # (level, block index c >= 0) -> {key: noisy count}; block c covers c*L+1 .. (c+1)*L
        self._released: dict[tuple[int, int], dict[Any, float]] = {}

    @property
    def t(self) -> int:
        return self._t

    @property
    def epsilon_total(self) -> float:
        """Sum of the level budgets, ``< epsilon``."""
        return float(sum(self.level_epsilons))

    def update_batch(self, keys: Any) -> PCCMG:
        """Append a batch of items at the next positions; complete blocks are released."""
        n = len(keys)
        start = 0
        while start < n:
            room = self.w0 - self._t % self.w0
            stop = min(n, start + room)
            piece = keys[start:stop]
            for mg in self._mgs:
                mg.update(piece)
            self._t += stop - start
            start = stop
            if self._t % self.w0 == 0:
                self._close(self._t)
        return self

    def _close(self, t: int) -> None:
        for i, length in enumerate(self.block_lengths):
            if t % length:
                continue
            c = t // length - 1
            stream = self.noise_source.stream((self.release_prefix, "pccmg", i, c))
            # Substitution = add + remove: chan_pure at eps_i / 2 has scale 2 k_i / eps_i.
            level = PrivacyBudget.pure(self.level_epsilons[i] / 2)
            rel = chan_pure(self._mgs[i], self.universe, level, stream)
            self._released[(i, c)] = {k: max(float(v), 0.0) for k, v in rel.items if v > 0}
            self._mgs[i] = MisraGries(self.ks[i])
        lo = self._aligned_start(t)
        for key in [
            key for key in self._released if (key[1] + 1) * self.block_lengths[key[0]] < lo
        ]:
            del self._released[key]

    def _aligned_start(self, t: int) -> int:
        ws = max(t - self.window + 1, 1)
        return (ws - 1) // self.w0 * self.w0 + 1

    def cover(self, t: int | None = None) -> list[tuple[int, int, int, int]]:
        """Greedy dyadic cover of the window aligned to ``W0``: ``(level, c, first, last)``.

        Covers ``[aligned ws, floor(t / W0) W0]`` with disjoint released blocks, largest first.
        """
        t = self._t if t is None else check_int(t, "t", 0, self._t)
        pos = self._aligned_start(t)
        end = t // self.w0 * self.w0
        out = []
        while pos <= end:
            for i in range(self.levels, -1, -1):
                length = self.block_lengths[i]
                if (pos - 1) % length == 0 and pos - 1 + length <= end:
                    out.append((i, (pos - 1) // length, pos, pos + length - 1))
                    pos += length
                    break
        return out

    def estimate(self, keys: Any) -> np.ndarray:
        """Sum of released (noisy, clamped) counts over the cover; 0 where a key is absent."""
        canon = canonical_keys(keys)
        out = np.zeros(len(canon), dtype=np.float64)
        for i, c, _, _ in self.cover():
            rel = self._released[(i, c)]
            out += np.fromiter((rel.get(k, 0.0) for k in canon), np.float64, len(canon))
        return out

    def heavy_hitters(
        self, candidates: Any, gamma: float, *, hh_slack: float | None = None
    ) -> list[tuple[Any, float]]:
        """Public candidates with estimate ``>= (gamma - hh_slack) * window``; slack default ``lam``."""
        gamma = _check_gamma(gamma)
        slack = self.lam if hh_slack is None else float(hh_slack)
        return _select(candidates, self.estimate(candidates), (gamma - slack) * self.window)
