"""The paper's alternatives to use-and-keep, as selectable strategies for comparison.

Yildirim et al., "Differentially Private Frequency Sketches for Intermittent Queries on Large
Data Streams", cited as [YKAE, Sections III-B and IV-A]; which alternatives the paper keeps
or rejects is summarised in docs/algorithms.md#intermittent-queries. Every class shares the state, ingestion, safety rules, noise source handling and
serialization of :class:`~beam_dpsketch.sketches.intermittent.sketch.IntermittentSketch` (read its
module docstring first); only the noise step differs. The proposed algorithm is
:class:`~beam_dpsketch.sketches.intermittent.sketch.UseAndKeepSketch` (D3).

Strategies (name, paper id, noise, guarantee):

* ``single_query`` (S1): ``Lap(1/eps)`` on one answer; ``eps`` for one query in total.
* ``batch_naive`` (S2): ``Lap(n_Q/eps)`` on each answer; ``eps`` per batch.
* ``batch_m_q`` (S3): ``Lap(min(n_Q, mhat_Q)/eps)`` on each answer; ``eps`` per batch.
* ``static_cell`` (S4): ``Lap(d/eps)`` once per used cell; ``eps`` for one table state.
* ``use_and_forget_median`` (D1): ``Lap(m/eps_k)``, ``eps_k = eps(1-eta)eta^(k-1)``; ``eps``
  in total.
* ``use_and_forget_cell`` (D2): fresh ``Lap(d/(eps(1-eta)eta^U))`` per cell use; ``eps`` in
  total.
* ``use_and_keep`` (D3, proposed): ``Lap(d/eps)`` per cell use, **kept**; ``eps`` in total.

All noise is exact discrete Laplace (docs/algorithms.md#noise-sampling). Output-perturbation strategies draw the
noise of batch ``k`` from the stream ``(release_prefix, "answer", k)``, one value per **distinct**
query in increasing ``(h1, h2)`` hash order, so the draw a key gets does not depend on the order
or multiplicity of the queries (duplicates share it). Cell strategies use the block scheme of
the base module (S4 shares D3's first-batch draws, so S4 and D3 agree exactly on one batch with
the same ``release_prefix``; tested).
"""

from __future__ import annotations

import abc
import math
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_choice
from beam_dpsketch.hashing import row_buckets, row_signs
from beam_dpsketch.noise import NoiseSource, discrete_laplace
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.privacy.calibration import geometric_split_epsilon
from beam_dpsketch.sketches.intermittent.sketch import (
    MAX_BATCHES,
    CellNoiseSketch,
    IntermittentAnswer,
    IntermittentSketch,
    KeptNoiseSketch,
    UseAndKeepSketch,
    check_scale,
    combine_rows,
    discrete_laplace_variance,
    fraction_str,
    mhat_bound,
    parse_fraction,
    unique_hashes,
)

__all__ = [
    "STRATEGIES",
    "BatchNaiveSketch",
    "BatchSensitiveSketch",
    "SingleQuerySketch",
    "StaticCellSketch",
    "UseAndForgetCellSketch",
    "UseAndForgetMedianSketch",
    "make_intermittent_sketch",
]


def _check_eta(eta: Any) -> Fraction:
    """``eta`` in ``(0, 1)`` as an exact fraction (docs/algorithms.md#int-a12: required, no default)."""
    geometric_split_epsilon(1, eta, 1)  # validates and names the parameter
    if isinstance(eta, str):
        return Fraction(eta.strip())
    if isinstance(eta, Fraction):
        return eta
    return Fraction(float(eta)) if isinstance(eta, float) else Fraction(eta)


# The largest scale the discrete Laplace sampler accepts, as a power of two.
_MAX_SCALE_BITS = 52


def _max_geometric_uses(epsilon: Fraction, eta: Fraction) -> int:
    """An upper bound on the uses ``r`` whose share ``epsilon (1-eta) eta^(r-1)`` is at least
    ``2**-52``, i.e. whose noise scale ``1/share`` the sampler accepts.

    A use-and-forget state never holds more uses than this (the next use is refused with the
    budget exhausted), so a decoded count above it is forged; checking it first also spares
    computing ``eta^(r-1)`` exactly for a forged ``r``, whose size grows with ``r``. Computed in
    floating point from the exact logarithms, then widened (relatively by 1e-12, and by one) so
    that rounding never puts it below the exact bound.
    """
    head = epsilon * (1 - eta)
    top = math.log(head.numerator) - math.log(head.denominator) + _MAX_SCALE_BITS * math.log(2)
    gap = float(1 - eta)
    if gap == 0.0:
        # eta is within a float's resolution of 1: the decay is too slow to bound anything.
        return MAX_BATCHES
    decay = -math.log1p(-gap) if gap < 0.5 else math.log(eta.denominator) - math.log(eta.numerator)
    if top < 0:
        return 0 if top < -1e-9 else 1
    return min(MAX_BATCHES, 2 + math.floor(top / decay * (1 + 1e-12)))


class _GeometricMixin:
    """State of the use-and-forget strategies: the decay factor ``eta`` (a required argument)."""

    _eta: Fraction

    def __init__(
        self,
        width: int,
        depth: int,
        budget: PrivacyBudget,
        *,
        eta: float | str | Fraction,
        noise_source: NoiseSource,
        release_prefix: Any = None,
        kind: str = "count-sketch",
        seed: int = 0,
        neighbouring: str = "add_remove",
        sketch_id: Any = None,
    ) -> None:
        self._eta = _check_eta(eta)
        super().__init__(
            width,
            depth,
            budget,
            noise_source=noise_source,
            release_prefix=release_prefix,
            kind=kind,
            seed=seed,
            neighbouring=neighbouring,
            sketch_id=sketch_id,
        )

    @property
    def eta(self) -> Fraction:
        return self._eta

    def _state_params(self) -> dict[str, Any]:
        return {"eta": fraction_str(self._eta)}

    def _restore_eta(self, params: dict[str, Any]) -> None:
        eta = parse_fraction(params.get("eta"), "eta")
        if not 0 < eta < 1:
            raise serialization.SketchFormatError("eta must lie in (0, 1)")
        self._eta = eta


# --------------------------------------------------------------------------------------------
# Cell perturbation: S4 and D2
# --------------------------------------------------------------------------------------------


class StaticCellSketch(KeptNoiseSketch):
    """S4, static cell perturbation, lazy variant (paper eq. 4-5, after Melis et al.; [YKAE, Section III-B, Eqs. (4)-(5)]).

    The first batch noises each cell it reads once with ``Lap(d/eps)``; later batches reuse that
    noise and lazily noise cells not read before, **at the same table state**: ingesting data
    after the first release is refused. Privacy: ``epsilon``-DP for any number of queries on that
    one state (each of the ``d`` sensitive cells at ``eps/d``, answers post-processing). The
    draw of a cell is D3's first-batch draw (stream ``(release_prefix, "cell", 1, block)``).

    Verdict ([YKAE, Sections III-IV]): kept for one-shot batches; it is the base of D3 but cannot answer data
    that arrives after its noise was drawn without new budget.
    """

    STRATEGY = "static_cell"
    KIND = "IntermittentStaticCell"

    def _check_can_ingest(self) -> None:
        if self._batches:
            raise ValueError(
                "static cell perturbation (S4) releases one table state: data after the first "
                "batch would need new budget; use UseAndKeepSketch for intermittent queries"
            )

    def _release_cells(self, cells: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scale = self.noise_scale
        noise = self._noise.reshape(-1)
        used = self._used.reshape(-1)
        fresh = cells[used[cells] == 0]
        if fresh.size:
            noise[fresh] = self._block_draws(fresh, scale, "cell", 1)
            used[fresh] = 1
        values = self._exact.table.reshape(-1)[cells] + noise[cells]
        return values, np.full(cells.size, discrete_laplace_variance(scale))

    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._restore_kept(
            arrays,
            lambda used: (
                not (((used != 0) & (used != 1)).any() or (used.any() and not self._batches))
            ),
            "static use flags must be 0/1 after a batch",
        )


class UseAndForgetCellSketch(_GeometricMixin, CellNoiseSketch):
    """D2, use-and-forget cell perturbation: paper Algorithm 3 with errata INT-E10 to INT-E12 ([YKAE, Section IV-A];
    docs/algorithms.md#int-e10).

    The exact table is never corrupted. In each batch every cell read gets a **fresh** draw, used
    for this batch's answers and then thrown away; its ``r``-th use (``U = r - 1`` earlier uses)
    is a Laplace mechanism at ``eps'_r = (eps/d)(1-eta)eta^(r-1)``, scale ``1/eps'_r`` (docs/algorithms.md#int-e10: the
    pseudo-code's ``Lap(1/eps')``, not the text's ``Lap(d/eps')``). ``U`` counts batches, not
    queries (docs/algorithms.md#int-e11, docs/algorithms.md#int-e12: one draw per cell per batch, kept in scratch space for the batch).

    Privacy: the per-cell shares sum to ``eps/d``, so ``epsilon``-DP in total over any number of
    batches. :meth:`epsilon_spent` reports the exact worst case so far,
    ``(eps/d) sum_i (1 - eta^(max_j U(i,j)))``. Draws of batch ``k`` for cells at use count
    ``U = u`` come from streams ``(release_prefix, "forget-cell", k, u, block)``.

    Verdict ([YKAE, Sections III-IV]): rejected. The variance of the ``r``-th use,
    ``2a_r/(1-a_r)^2`` with ``a_r = exp(-eps'_r)``, grows geometrically (by ``1/eta^2`` per use)
    and exceeds D3's accumulated ``r * 2a/(1-a)^2`` for every ``eta`` and ``r`` ([YKAE, Section IV-A], derived).
    """

    STRATEGY = "use_and_forget_cell"
    KIND = "IntermittentUseAndForgetCell"

    def _init_state(self) -> None:
        self._used = np.zeros((self.depth, self.width), dtype=np.int32)

    def max_uses(self) -> int:
        """An upper bound on a cell's uses before its next draw exceeds the sampler's scale."""
        return _max_geometric_uses(self._epsilon / self.depth, self._eta)

    def use_scale(self, use: int) -> Fraction:
        """Scale ``1/eps'_r`` of the fresh draw at a cell's ``use``-th use (``use >= 1``)."""
        return 1 / (geometric_split_epsilon(self._epsilon, self._eta, use) / self.depth)

    def cell_noise_variance(self, uses: Any) -> Any:
        """Variance of the fresh noise at a cell's ``uses``-th use (docs/algorithms.md#int-oracles, discrete form)."""
        arr = np.asarray(uses)
        flat = arr.reshape(-1)
        out = np.empty(flat.size, dtype=np.float64)
        for u in np.unique(flat).tolist():
            out[flat == u] = discrete_laplace_variance(self.use_scale(int(u)))
        return out.reshape(arr.shape) if arr.ndim else float(out[0])

    def epsilon_spent(self) -> float:
        eta = float(self._eta)
        worst = self._used.max(axis=1).tolist()
        return float(self._epsilon) / self.depth * sum(1.0 - eta**u for u in worst)

    def _uses(self) -> np.ndarray:
        return self._used

    def _release_cells(self, cells: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        used = self._used.reshape(-1)
        before = used[cells]
        levels = np.unique(before).tolist()
        if levels[-1] + 1 > self.max_uses():
            # Refused before the exact power: eta**(use - 1) grows with the use.
            raise ValueError(
                f"{type(self).__name__}: the noise scale of a cell's use {levels[-1] + 1} "
                "exceeds the sampler limit 2**52; the budget is exhausted (answers would carry "
                "no information)"
            )
        scales = {u: check_scale(self.use_scale(u + 1), type(self).__name__) for u in levels}
        values = self._exact.table.reshape(-1)[cells].copy()
        variance = np.empty(cells.size, dtype=np.float64)
        for u in levels:
            sel = before == u
            values[sel] += self._block_draws(cells[sel], scales[u], "forget-cell", k, u)
            variance[sel] = discrete_laplace_variance(scales[u])
        used[cells] += 1
        return values, variance

    def _state_arrays(self) -> dict[str, np.ndarray]:
        return {"uses": self._used}

    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._restore_eta(params)
        used = serialization.require_array(arrays, "uses", "<i4", (self.depth, self.width))
        if (used < 0).any() or (used > self._batches).any():
            raise serialization.SketchFormatError("use counts must lie in [0, batches]")
        if used.size and int(used.max()) > self.max_uses():
            raise serialization.SketchFormatError(
                "use counts exceed what epsilon and eta allow (a later use's noise scale would "
                "exceed 2**52)"
            )
        self._used = used.copy()


# --------------------------------------------------------------------------------------------
# Output (median) perturbation: S1, S2, S3, D1
# --------------------------------------------------------------------------------------------


class _MedianNoiseSketch(IntermittentSketch):
    """Noise on each distinct answer: ``fhat_x + Lap(sensitivity_k / eps_k)`` ([YKAE, Section III-B; Section IV-A]).

    ``fhat_x`` is the exact median (Count Sketch) or minimum (Count-Min), whose sensitivity is 1
    ([YKAE, Section III-A], docs/algorithms.md#int-e23). Count Sketch needs an odd depth here: with an even depth the
    median moves by 1/2 and discrete noise would not cover the shift.
    """

    CELL_NOISE = False

    def _check_depth(self) -> None:
        if self.signed and self.depth % 2 == 0:
            raise ValueError(
                f"depth must be odd for Count Sketch with answer noise, got {self.depth}: an even "
                "depth's median moves by 1/2 (docs/algorithms.md#int-a11)"
            )

    def _init_state(self) -> None:
        pass

    def _check_can_answer(self, n_distinct: int) -> None:
        """Strategy limits on the number of batches / distinct queries (S1)."""
        return None

    @abc.abstractmethod
    def _sensitivity(self, buckets: np.ndarray, n_q: int) -> int:
        """L1 sensitivity of the batch's answer vector (distinct keys)."""

    @abc.abstractmethod
    def batch_epsilon(self, k: int) -> Fraction:
        """Budget spent by batch ``k``."""

    def _answer(self, h1: np.ndarray, h2: np.ndarray, k: int, details: bool) -> IntermittentAnswer:
        u1, u2, inverse = unique_hashes(h1, h2)
        n_q = int(u1.size)
        self._check_can_answer(n_q)
        buckets = row_buckets(u1, u2, self.depth, self.width)
        sens = self._sensitivity(buckets, n_q)
        scale = check_scale(Fraction(sens) / self.batch_epsilon(k), type(self).__name__)
        values = np.take_along_axis(self._exact.table, buckets, axis=1)
        if self.signed:
            values *= row_signs(u2, self.depth)
        fhat = combine_rows(values, self.signed)
        noise = discrete_laplace(
            self._source.stream((self._release_prefix, "answer", k)), scale, n_q
        )
        estimates = (fhat + noise)[inverse]
        std = math.sqrt(discrete_laplace_variance(scale))
        return IntermittentAnswer(
            estimates=estimates,
            batch=k,
            time=None,
            strategy=self.STRATEGY,
            epsilon_total=0.0,
            noise_std=np.full(estimates.size, std),
        )

    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        pass


class SingleQuerySketch(_MedianNoiseSketch):
    """S1, one query (paper eq. 1; [YKAE, Section III-B]): ``fhat_x + Lap(1/eps)``, ``epsilon``-DP.

    Answers exactly one distinct key in one batch; anything more is refused (the budget is
    spent). Verdict: fine for one query, useless for batches or intermittent queries.
    """

    STRATEGY = "single_query"
    KIND = "IntermittentSingleQuery"

    def _check_can_answer(self, n_distinct: int) -> None:
        if self._batches or n_distinct != 1:
            raise ValueError(
                "the single-query mechanism (S1) answers one distinct key once; use "
                "UseAndKeepSketch for batches and intermittent queries"
            )

    def _sensitivity(self, buckets: np.ndarray, n_q: int) -> int:
        return 1

    def batch_epsilon(self, k: int) -> Fraction:
        return self._epsilon

    def epsilon_spent(self) -> float:
        return float(self._epsilon) if self._batches else 0.0

    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        if self._batches > 1:
            raise serialization.SketchFormatError("a single-query state answers at most one batch")


class BatchNaiveSketch(_MedianNoiseSketch):
    """S2, batch with naive composition ([YKAE, Section III-B]): ``Lap(n_Q/eps)`` on each distinct answer.

    ``epsilon``-DP per batch (``n_Q`` answers of sensitivity 1); ``K`` batches cost ``K eps``.
    Verdict: rejected, the noise is linear in ``n_Q``.
    """

    STRATEGY = "batch_naive"
    KIND = "IntermittentBatchNaive"

    def _sensitivity(self, buckets: np.ndarray, n_q: int) -> int:
        return n_q

    def batch_epsilon(self, k: int) -> Fraction:
        return self._epsilon

    def epsilon_spent(self) -> float:
        return float(self._epsilon) * self._batches


class BatchSensitiveSketch(_MedianNoiseSketch):
    """S3, batch scaled by the sensitive queries (paper eq. 2-3, Algorithm 2, Prop. 1; [YKAE, Section III-B]).

    Each distinct answer gets ``Lap(mtilde_Q/eps)`` with ``mtilde_Q = min(n_Q, mhat_Q)`` (the
    union bound of Algorithm 2 capped by ``n_Q`` (library choice); docs/algorithms.md#int-e2: the noise goes on the
    estimate ``fhat_x``, not on ``f_x``; docs/algorithms.md#int-e4: only ``m_Q <= mhat_Q`` holds). One element changes
    at most ``m_Q`` answers by at most 1, so each batch is ``epsilon``-DP; ``K`` batches cost
    ``K eps``. Verdict: competitive with S4 for one static batch, not for intermittent queries.
    """

    STRATEGY = "batch_m_q"
    KIND = "IntermittentBatchSensitive"

    def _sensitivity(self, buckets: np.ndarray, n_q: int) -> int:
        return min(n_q, mhat_bound(buckets, self.width))

    def batch_epsilon(self, k: int) -> Fraction:
        return self._epsilon

    def epsilon_spent(self) -> float:
        return float(self._epsilon) * self._batches


class UseAndForgetMedianSketch(_GeometricMixin, _MedianNoiseSketch):
    """D1, use-and-forget median perturbation ([YKAE, Section IV-A], docs/algorithms.md#int-e9 completes the paper's text).

    Batch ``k`` spends ``eps_k = eps (1-eta) eta^(k-1)`` and answers each distinct key with
    ``fhat_x + Lap(mtilde_Q / eps_k)`` (``mtilde_Q`` as in S3). ``epsilon``-DP in total
    (``sum_k eps_k < eps``); :meth:`epsilon_spent` is ``eps (1 - eta^k)``. Verdict: rejected, the
    noise grows geometrically (by ``1/eta`` per batch).
    """

    STRATEGY = "use_and_forget_median"
    KIND = "IntermittentUseAndForgetMedian"

    def _sensitivity(self, buckets: np.ndarray, n_q: int) -> int:
        return min(n_q, mhat_bound(buckets, self.width))

    def max_batches(self) -> int:
        """An upper bound on the batches answered before the next batch's scale exceeds the
        sampler's (with the smallest sensitivity, 1)."""
        return _max_geometric_uses(self._epsilon, self._eta)

    def _check_can_answer(self, n_distinct: int) -> None:
        k = self._batches + 1
        if k > self.max_batches():
            # Refused before the exact power: eta**(k - 1) grows with k.
            raise ValueError(
                f"{type(self).__name__}: the noise scale of batch {k} exceeds the sampler limit "
                "2**52; the budget is exhausted (answers would carry no information)"
            )

    def batch_epsilon(self, k: int) -> Fraction:
        return geometric_split_epsilon(self._epsilon, self._eta, k)

    def epsilon_spent(self) -> float:
        return float(self._epsilon) * (1.0 - float(self._eta) ** self._batches)

    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._restore_eta(params)
        if self._batches > self.max_batches():
            raise serialization.SketchFormatError(
                "batches exceeds what epsilon and eta allow (a later batch's noise scale would "
                "exceed 2**52)"
            )


#: Strategy name -> class (``make_intermittent_sketch``). Paper ids in the module table.
STRATEGIES: dict[str, type[IntermittentSketch]] = {
    cls.STRATEGY: cls
    for cls in (
        UseAndKeepSketch,
        StaticCellSketch,
        UseAndForgetCellSketch,
        UseAndForgetMedianSketch,
        BatchSensitiveSketch,
        BatchNaiveSketch,
        SingleQuerySketch,
    )
}


def make_intermittent_sketch(
    strategy: str,
    width: int,
    depth: int,
    budget: PrivacyBudget,
    *,
    noise_source: NoiseSource,
    release_prefix: Any = None,
    kind: str = "count-sketch",
    seed: int = 0,
    neighbouring: str = "add_remove",
    eta: float | str | Fraction | None = None,
    sketch_id: Any = None,
) -> IntermittentSketch:
    """Build the strategy named ``strategy`` (a key of :data:`STRATEGIES`) with the pure budget
    ``budget`` (``PrivacyBudget.pure(eps)``).

    The keyword arguments are those of the class (:class:`IntermittentSketch`); ``eta`` is
    required by the use-and-forget strategies and refused by the others. Same guarantee as the
    class built.
    """
    check_choice(strategy, "strategy", sorted(STRATEGIES))
    cls = STRATEGIES[strategy]
    common: dict[str, Any] = {
        "noise_source": noise_source,
        "release_prefix": release_prefix,
        "kind": kind,
        "seed": seed,
        "neighbouring": neighbouring,
        "sketch_id": sketch_id,
    }
    if eta is not None:
        common["eta"] = eta
    return cls(width, depth, budget, **common)
