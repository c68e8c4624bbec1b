"""DP Count Sketch / Count-Min for intermittent queries: use-and-keep cell noise (the final algorithm).

Yildirim, Kaya, Aydin and Erentug, "Differentially Private Frequency Sketches for Intermittent
Queries on Large Data Streams", cited as [YKAE]; errata and library choices are explained in
docs/algorithms.md#intermittent-queries. The paper's alternatives (S1-S4, D1, D2) live in
:mod:`beam_dpsketch.sketches.intermittent.strategies`; this module holds the shared machinery
(defined in :mod:`beam_dpsketch.sketches.intermittent.base` and re-exported here) and
:class:`UseAndKeepSketch` ([YKAE, Algorithm 4]), the one the paper proposes.

Model ([YKAE, Section II-A; Section III-A]). Streams are ordered; neighbours differ by inserting or deleting **one**
element (event level; each element is one individual), every other element keeping its time, so
element times must not be arrival counts or row positions (those support replace-one only; see
:class:`UseAndKeepSketch`). Query batches ``Q_1, Q_2, ...`` arrive at
times ``t_1 < t_2 < ...`` that, like the query sets, must not depend on the private stream (they
may depend on earlier *released* answers). Hash seeds are public. The trusted holder of this
object sees exact counts: the state (:meth:`IntermittentSketch.to_bytes`) is secret.

State. Every object composes an exact, mergeable
:class:`~beam_dpsketch.sketches.linear.countsketch.CountSketch` or
:class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` (same ``(width, depth, seed)`` means the
same cells, so exact shards merge into it by addition) plus the strategy's noise state. For
:class:`UseAndKeepSketch`: the kept noise ``N`` (int64, ``depth x width``) and the public use
counts ``Uc`` (int32); the released value of a cell is always ``C + N`` ([YKAE, Algorithm 4]).

Noise scheme (reproducible; docs/algorithms.md#noise-sampling). All noise is exact discrete Laplace
(:func:`beam_dpsketch.noise.discrete_laplace`) from the caller's
:class:`~beam_dpsketch.noise.NoiseSource`. Cells are numbered ``row * width + column`` and cut
into blocks of :data:`NOISE_BLOCK` consecutive cells (the last block may be shorter). In batch
``k`` a used cell ``c`` of block ``b`` gets the draw at position ``c - b * NOISE_BLOCK`` of
``discrete_laplace(source.stream((release_prefix, "cell", k, b)), d/eps, len(block b))``. So each
cell's draw in a batch is a pure function of (secret key, ``release_prefix``, ``k``, cell): the order
of the queries, the other cells used, a retried bundle or a restore from
:meth:`IntermittentSketch.to_bytes` cannot change it, and no ``(batch, cell)`` is ever drawn twice with different values. ``k`` counts the
non-empty batches answered so far and is part of the state. Draws of a block that no query reads
are discarded unused. Distinct sketches **must** use distinct ``release_prefix`` values: equal ids and
keys give equal noise.

Safety rules (invariants I1-I6 of docs/algorithms.md#int-beam), enforced here:

* Queries are a separate, declared input: :meth:`IntermittentSketch.answer` takes a batch of keys
  (and an optional public time, strictly increasing) and nothing else; keys are canonicalised and
  hashed with the public seed, never looked up in the table to decide anything. The object never
  answers on its own and has no non-private read of its table, so batch times and query sets
  cannot be driven by the data (docs/algorithms.md#int-beam). Choosing queries from the private data (e.g. "the
  current top items") is the caller's responsibility to avoid; only released answers may guide
  later queries.
* No data-dependent skipping: every cell a batch reads gets its fresh draw whether or not its
  count changed (docs/algorithms.md#int-beam).
* One noise owner per cell (I1): noise lives only in the private object. Exact shards merge
  freely (:meth:`IntermittentSketch.add_counts`, :meth:`IntermittentSketch.merge`); merging a
  private object that has answered queries (so holds noise or budget state) is refused.
* Deltas, not snapshots (I2): :meth:`IntermittentSketch.add_counts` adds an exact **delta** (the
  elements since the previous delta, each element in exactly one delta);
  :meth:`IntermittentSketch.add_snapshot` takes a **cumulative** snapshot and converts it to a
  delta explicitly (refusing one that goes backwards). An object accepts one of the two modes.
* Unit increments: counts must be non-negative (a retraction would make one element show up in
  several increments, docs/algorithms.md#int-beam).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from fractions import Fraction
from typing import Any

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_int
from beam_dpsketch.noise import discrete_laplace
from beam_dpsketch.privacy.calibration import discrete_laplace_scale
from beam_dpsketch.sketches.intermittent.base import (
    MAX_BATCHES,
    NOISE_BLOCK,
    SKETCH_KINDS,
    IntermittentAnswer,
    IntermittentSketch,
    check_scale,
    check_sketch_kind,
    combine_rows,
    discrete_laplace_variance,
    fraction_str,
    mhat_bound,
    parse_fraction,
    pure_budget_epsilon,
    sensitive_query_bound,
    unique_hashes,
)

__all__ = [
    "MAX_BATCHES",
    "NOISE_BLOCK",
    "SKETCH_KINDS",
    "IntermittentAnswer",
    "IntermittentSketch",
    "UseAndKeepSketch",
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


# --------------------------------------------------------------------------------------------
# Cell-noise strategies (S4, D2, D3)
# --------------------------------------------------------------------------------------------


class CellNoiseSketch(IntermittentSketch):
    """Base of the strategies that noise the cells a batch reads (S4, D2, D3).

    Per batch ([YKAE, Algorithm 4] lines 2-9): ``E`` = the distinct cells read by the batch's queries, each
    noised exactly once (docs/algorithms.md#int-beam) by :meth:`_release_cells`; answers are the median (Count Sketch,
    signed) or minimum (Count-Min) of the released cell values: post-processing.
    """

    CELL_NOISE = True

    @abc.abstractmethod
    def _release_cells(self, cells: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Noise the sorted distinct flat ``cells`` for batch ``k``.

        Returns ``(values, row_variance)``: each cell's released value and its DP-noise variance.
        Must validate before changing state.
        """

    @abc.abstractmethod
    def _uses(self) -> np.ndarray:
        """Public per-cell use counts ``(depth, width)`` int32 after the latest batch."""

    def use_counts(self) -> np.ndarray:
        """Copy of the public per-cell use counts ``Uc`` ([YKAE, Algorithm 4], docs/algorithms.md#int-error-bars)."""
        return self._uses().copy()

    def _block_draws(self, cells: np.ndarray, scale: Fraction, *tag: Any) -> np.ndarray:
        """One discrete Laplace draw per cell, each from its fixed block position.

        Block ``b`` of the flat table is one stream ``(release_prefix, *tag, b)`` drawing the whole
        block (see the module docstring); ``cells`` must be sorted and distinct.
        """
        total = self.depth * self.width
        block = cells // NOISE_BLOCK
        starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])
        stops = np.r_[starts[1:], cells.size]
        out = np.empty(cells.size, dtype=np.int64)
        for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
            b = int(block[start])
            size = min(NOISE_BLOCK, total - b * NOISE_BLOCK)
            stream = self._source.stream((self._release_prefix, *tag, b))
            out[start:stop] = discrete_laplace(stream, scale, size)[
                cells[start:stop] - b * NOISE_BLOCK
            ]
        return out

    def _answer(self, h1: np.ndarray, h2: np.ndarray, k: int, details: bool) -> IntermittentAnswer:
        flat = self._row_cells(h1, h2)
        mask = np.zeros(self.depth * self.width, dtype=np.bool_)
        mask[flat.ravel()] = True
        cells = np.flatnonzero(mask)
        values, variance = self._release_cells(cells, k)
        # Full-size lookups (no zeroing needed: only cells in E are read back).
        lookup = np.empty(mask.size, dtype=np.int64)
        lookup[cells] = values
        rows = lookup[flat]
        signs = self._signs(h2)
        if signs is not None:
            rows *= signs
        estimates = combine_rows(rows, self.signed)
        var_lookup = np.empty(mask.size, dtype=np.float64)
        var_lookup[cells] = variance
        row_var = var_lookup[flat]
        noise_std = _combine_rows_float(np.sqrt(row_var))
        uses = self._uses().reshape(-1)[flat]
        return IntermittentAnswer(
            estimates=estimates,
            batch=k,
            time=None,
            strategy=self.STRATEGY,
            epsilon_total=0.0,
            noise_std=noise_std,
            row_noise_variance=row_var,
            uses=uses,
            row_values=rows if details else None,
            cells=cells if details else None,
            cell_values=values if details else None,
        )


def _combine_rows_float(values: np.ndarray) -> np.ndarray:
    """Median over rows of a float ``(depth, n)`` array (docs/algorithms.md#int-error-bars summary of row noise std)."""
    d = values.shape[0]
    if d % 2:
        return np.partition(values, d // 2, axis=0)[d // 2]
    part = np.partition(values, (d // 2 - 1, d // 2), axis=0)
    return (part[d // 2 - 1] + part[d // 2]) / 2.0


class KeptNoiseSketch(CellNoiseSketch):
    """Cell noise of scale ``d/eps`` drawn once per (cell, batch) and kept in the state (D3, S4).

    The state is the ``noise`` table and the ``uses`` table (how many batches read each cell).
    """

    def _init_state(self) -> None:
        self._noise = np.zeros((self.depth, self.width), dtype=np.int64)
        self._used = np.zeros((self.depth, self.width), dtype=np.int32)

    @property
    def noise_scale(self) -> Fraction:
        """Scale ``d/eps`` of every fresh draw (exact rational)."""
        return discrete_laplace_scale(self.depth, self._epsilon)

    def epsilon_spent(self) -> float:
        return float(self._epsilon) if self._batches else 0.0

    def _uses(self) -> np.ndarray:
        return self._used

    def _state_arrays(self) -> dict[str, np.ndarray]:
        return {"noise": self._noise, "uses": self._used}

    def _restore_kept(
        self, arrays: dict[str, np.ndarray], uses_ok: Callable[[np.ndarray], bool], rule: str
    ) -> None:
        """Restore ``noise`` and ``uses``; ``uses_ok`` checks the strategy's use counts."""
        shape = (self.depth, self.width)
        noise = serialization.require_array(arrays, "noise", "<i8", shape).copy()
        used = serialization.require_array(arrays, "uses", "<i4", shape).copy()
        if not uses_ok(used):
            raise serialization.SketchFormatError(rule)
        if (noise[used == 0] != 0).any():
            raise serialization.SketchFormatError("a cell never used holds noise")
        self._noise, self._used = noise, used


class UseAndKeepSketch(KeptNoiseSketch):
    """D3, use-and-keep cell perturbation: paper Algorithm 4, the proposed algorithm ([YKAE, Algorithm 4]).

    On each non-empty batch ``Q_k``: ``E`` = distinct cells read by ``Q_k``; every cell in ``E``
    gets **one** fresh draw ``Lap(d/eps)`` (exact discrete Laplace, ``a = exp(-eps/d)``, docs/algorithms.md#noise-sampling) added to its **kept** noise ``N`` (docs/algorithms.md#int-beam); each query is answered with the median
    over rows of ``s_i(x) (C + N)`` (Count Sketch) or the minimum of ``C + N`` (Count-Min). Cells
    get nothing at any other time, and are never skipped because their count did not change
    (docs/algorithms.md#int-beam). The draws follow the keyed block scheme of the module docstring.

    Privacy (Theorem 4, Lemma 1): ``epsilon``-DP **in total** under add/remove-one-element
    neighbours, for any number of batches at any (data-independent) times, chosen adaptively
    from earlier answers, with no horizon. Each cell is a Lemma-1 noisy counter at ``eps/d``: its
    releases are Laplace mechanisms on the increments between uses, and one element is in one
    increment of each of its ``d`` cells; answers are post-processing. Exact identity used by the
    tests ([YKAE, Algorithm 4], derived): the log-likelihood ratio of a transcript is
    ``(1/scale) sum_cells sum_l (|Dr_l - Dg'_l| - |Dr_l - Dg_l|)``, at most ``eps`` in absolute
    value.

    The guarantee needs element times that stay fixed when one element is removed. With
    sequence positions as times (row numbers), removing one row renumbers the later rows, so one
    element crosses every later batch boundary and the loss grows with the number of batches.
    Positions support replace-one instead: a replaced element changes the increment of one
    interval by ``-1`` on its old key's ``d`` cells and ``+1`` on the new key's, so an object
    calibrated for ``epsilon / 2`` under add/remove is ``epsilon``-DP under replacement of one
    element at a fixed position: ``neighbouring="replace"`` does that (and
    :class:`~beam_dpsketch.transforms.intermittent.DPIntermittentQueries` with
    ``clock="positions"``).

    Utility ([YKAE, Theorem 5], corrected docs/algorithms.md#int-e14: the paper drops a factor 2): the row-``i`` value of
    query ``x`` is ``f_x`` + hashing error + the sum of ``u_i`` draws, so (Count Sketch, over the
    hash functions) ``Var = ||f_{-x}||^2 / w + u_i * 2a/(1-a)^2`` with ``u_i`` the uses of the
    cell including this batch; the DP-noise variance grows **linearly** in the uses (against
    geometrically for D2/D1). :attr:`IntermittentAnswer.row_noise_variance` reports
    ``u_i * 2a/(1-a)^2``.

    Kept, not rejected: it is the only strategy with a fixed total budget whose noise grows
    sub-geometrically and that answers new data at new times ([YKAE, Sections III-IV]).
    """

    STRATEGY = "use_and_keep"
    KIND = "IntermittentUseAndKeep"
    REPLACE_ONE = True

    def cell_noise_variance(self, uses: Any) -> Any:
        """Variance of a cell's kept noise after ``uses`` uses: ``uses * 2a/(1-a)^2`` (docs/algorithms.md#int-oracles)."""
        return np.asarray(uses) * discrete_laplace_variance(self.noise_scale)

    def batch_draws(self, cells: Any, k: int) -> np.ndarray:
        """The fresh draws batch ``k`` adds to the sorted, distinct flat ``cells`` (no state change).

        A pure function of (noise source, ``release_prefix``, ``k``, cell) through the block scheme of
        the module docstring: what :meth:`answer` adds in its ``k``-th non-empty batch. Exposed so
        offline evaluations can reproduce this object's noise exactly ([YKAE, Section VI, Figs. 3-4] compute plan).
        """
        cells = np.asarray(cells, dtype=np.int64)
        if cells.ndim != 1 or (cells.size and (cells[0] < 0 or cells[-1] >= self._noise.size)):
            raise ValueError("cells must be a 1-d array of flat cell indices in [0, depth*width)")
        if cells.size > 1 and not (np.diff(cells) > 0).all():
            raise ValueError("cells must be sorted and distinct")
        try:
            k = check_int(k, "k (batch index)")
        except TypeError as exc:
            # Every bad argument of this probe is a ValueError, like the cell checks above.
            raise ValueError(str(exc)) from None
        return self._block_draws(cells, self.noise_scale, "cell", k)

    def _release_cells(self, cells: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        scale = self.noise_scale
        draws = self.batch_draws(cells, k)
        noise = self._noise.reshape(-1)
        used = self._used.reshape(-1)
        noise[cells] += draws
        used[cells] += 1
        values = self._exact.table.reshape(-1)[cells] + noise[cells]
        return values, used[cells] * discrete_laplace_variance(scale)

    def _restore_state(self, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self._restore_kept(
            arrays,
            lambda used: not ((used < 0).any() or (used > self._batches).any()),
            "use counts must lie in [0, batches]",
        )
