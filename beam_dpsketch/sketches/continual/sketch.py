"""Private Count-Min / Count Sketch under continual observation: PunctualSketch and LazySketch.

Holland, "Faster Differentially Private Sketches under Continual Observation" (Algorithms 3-5,
Theorems 1-2, Lemma 5), cited below as [Hol25]; departures from the paper are explained in
docs/algorithms.md#continual-observation. Pure numpy, no Beam. Both sketches publish, after **every** time step, a ``depth x
width`` table of noisy counters (:meth:`~_ContinualSketch.noisy_table`) from which point queries
are answered (min over rows for Count-Min, median of signed rows for Count Sketch, [Hol25, Algorithm 4]).

* :class:`PunctualSketch` (baseline, Algorithms 3-4): every cell is a GaussBM counter over
  ``T`` steps and **every** cell is updated at every step (zeros included), so a step costs
  ``depth * width`` counter updates and noise draws.
* :class:`LazySketch` (Algorithm 5): arrivals go into an exact private pending table ``P``; at
  step ``t`` exactly column ``t mod width`` of ``P`` is pushed into its GaussBM counters (over
  ``T_loc = ceil(T / width)`` pushes, docs/algorithms.md#lazy-e11) and reset. A step costs ``depth`` counter updates; the
  price is a delay: a noise-free Count-Min estimate lies in ``[-(width-1), 0]`` of the exact one
  ([Hol25, Section 4.2] and docs/algorithms.md#lazy-oracles). ``P`` is never released.

Both are built on :class:`~beam_dpsketch.sketches.continual.binary_mechanism.GaussianBinaryMechanism`
(level-slot form, keyed noise; its docstring states the noise scheme: node ``(cell, k)`` noise is a
pure function of the noise source, ``(release_prefix, sketch class, kind)`` and ``k``). Cells are
laid out and hashed exactly as :class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch` /
:class:`~beam_dpsketch.sketches.linear.countsketch.CountSketch` with the same ``(width, depth, seed)``.

Privacy guarantee
-----------------
All tables released at all steps ``t = 1..T`` are jointly ``(epsilon, delta)``-DP under
**event-level replacement** neighbouring ([Hol25, Section 2.1]): two streams of the same length ``T`` that
differ in one arrival, processed in a data-independent order. One replaced arrival changes at most
``m`` counters by 1 each, with ``m = 2 * depth`` for Count-Min and ``m = 4 * depth`` for Count
Sketch ([Hol25, Section 4.1; Theorem 2], docs/algorithms.md#lazy-e10: the paper's ``2d`` misses the same-cell, opposite-sign case).
``cs_sensitivity="paper_2d"`` reproduces the paper's numbers and is **not** formally private
(``UserWarning``; :attr:`~_ContinualSketch.formally_private` is ``False``). Calibration: Algorithm
the analytic Gaussian (``calibration="analytic"``, the default: any ``epsilon > 0``, never noisier
than the classical one) or Algorithm 1's classical Gaussian (``"paper"``, ``epsilon < 1``, to
reproduce the paper; docs/algorithms.md#lazy-e4, docs/algorithms.md#lazy-e5), through
:func:`~beam_dpsketch.sketches.continual.binary_mechanism.gaussbm_sigma`.

Time models (docs/algorithms.md#lazy-beam)
------------------------------------------
* A time step per arrival: :meth:`~_ContinualSketch.update` / :meth:`~_ContinualSketch.update_batch`
  (the paper's model; the order of arrivals must not depend on the data, docs/algorithms.md#lazy-beam).
* Release intervals: :meth:`~_ContinualSketch.summarize_interval` turns any piece of the arrivals
  of an interval of steps ``[start, end)`` into an exact, additive
  :class:`IntervalSummary` of size ``O(depth * width)``; once the merged pieces cover the whole
  interval, :meth:`~_ContinualSketch.apply_interval` advances the sketch over it, bit-identical to
  :meth:`~_ContinualSketch.update_batch` on those arrivals (the same time steps, so the same
  guarantee); the sketch can be read at interval ends only.
* A time step per tick (e.g. a trigger firing): :meth:`~_ContinualSketch.step_counts` adds an exact
  ``depth x width`` table of the counts that arrived in the step (e.g. the table of an exact
  ``CountMinSketch`` built from one pane). The guarantee then holds for neighbouring tick streams
  that differ **within one step** by replacing at most ``max_contributions`` arrivals (``C``); the
  sensitivity is scaled to ``C * sqrt(m h)`` (each changed cell changes by at most ``C`` in one
  push; adding or removing up to ``C`` arrivals in one step is covered too). Tick times must be
  public (a clock), never data-driven (docs/algorithms.md#lazy-beam).

``T`` (``horizon``) is public and declared up front; a step beyond it raises
:class:`~beam_dpsketch.sketches.continual.binary_mechanism.HorizonExceededError` and changes nothing.
"""

from __future__ import annotations

import abc
import math
import warnings
from typing import Any, ClassVar, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_choice, check_int, check_probability
from beam_dpsketch.hashing import (
    MAX_DEPTH,
    MAX_WIDTH,
    check_key_like,
    check_seed,
    decode_key,
    encode_key,
    hash_keys,
    row_buckets,
    row_negative,
    row_signs,
)
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.continual.binary_mechanism import (
    DEFAULT_CALIBRATION,
    Calibration,
    GaussianBinaryMechanism,
    HorizonExceededError,
)
from beam_dpsketch.sketches.continual.bounds import (
    CONTINUAL_SKETCH_KINDS,
    CS_SENSITIVITIES,
    KINDS,
    Kind,
    check_kind,
    default_m,
    kind_from_code,
    lazy_noise_bound,
    lazy_noise_bound_paper,
    lazy_shape,
)
from beam_dpsketch.sketches.continual.interval import IntervalSummary
from beam_dpsketch.sketches.linear.countmin import CountMinSketch
from beam_dpsketch.sketches.linear.countsketch import CountSketch

__all__ = [
    "CONTINUAL_ALGORITHMS",
    "CONTINUAL_SKETCH_KINDS",
    "CS_SENSITIVITIES",
    "KINDS",
    "IntervalSummary",
    "LazySketch",
    "PunctualSketch",
    "lazy_noise_bound",
    "lazy_noise_bound_paper",
    "lazy_shape",
    "check_continual_budget",
    "new_continual_sketch",
]


# Arrivals are binned in chunks so temporaries stay in cache (as in sketches/linear/base.py).
_CHUNK = 1 << 16
# Lazy noise blocks: a push round is depth*width values; small blocks let a batch draw only the
# rounds whose nodes stay active (docs/algorithms.md#lazy-vectorised) while keeping the sampler's per-call overhead
# small against the values drawn.
_LAZY_BLOCK_VALUES = 1 << 10


# --------------------------------------------------------------------------------------------
# Shared machinery
# --------------------------------------------------------------------------------------------


class _ContinualSketch(abc.ABC):
    """Shared parameters, queries, time-step validation and serialization."""

    KIND: ClassVar[str] = ""
    _FAITHFUL_DEFAULT: ClassVar[bool] = True

    def __init__(
        self,
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
        cs_sensitivity: str = "corrected_4d",
        m: int | None = None,
        max_contributions: int = 1,
        faithful: bool | None = None,
    ) -> None:
        self.width = check_int(width, "width", 1, MAX_WIDTH)
        self.depth = check_int(depth, "depth", 1, MAX_DEPTH)
        self.horizon = check_int(horizon, "horizon", 1, 1 << 62)
        self.kind = check_kind(kind)
        self.seed = check_seed(seed)
        self.cs_sensitivity = check_choice(cs_sensitivity, "cs_sensitivity", CS_SENSITIVITIES)
        minimum = default_m(self.kind, self.depth, cs_sensitivity)
        if m is None:
            m = minimum
        self.m = check_int(m, "m", minimum)
        if self.kind == "count-sketch" and cs_sensitivity == "paper_2d":
            warnings.warn(
                "cs_sensitivity='paper_2d' calibrates Count Sketch with m = 2*depth as the paper "
                "does; this is NOT formally differentially private ([Hol25, Section 4.1] and docs/algorithms.md#continual-observation "
                "docs/algorithms.md#lazy-e10). Use it only to reproduce the paper's numbers.",
                UserWarning,
                stacklevel=2,
            )
        self.max_contributions = check_int(max_contributions, "max_contributions")
        self.release_prefix = check_key_like(release_prefix, "release_prefix")
        self._t = 0
        check_continual_budget(budget)
        self._mech = GaussianBinaryMechanism(
            self.depth * self.width,
            self._mech_horizon(),
            budget,
            self.m,
            noise_source=noise_source,
            release_prefix=(release_prefix, self.KIND, CONTINUAL_SKETCH_KINDS[self.kind]),
            calibration=calibration,
            max_contributions=self.max_contributions,
            rounds_per_block=self._rounds_per_block(),
            faithful=self._FAITHFUL_DEFAULT if faithful is None else faithful,
        )
        self._row_offsets = (np.arange(self.depth, dtype=np.int64) * self.width)[:, None]
        self._init_extra()

    # ---------------------------------------------------------------- subclass hooks

    @abc.abstractmethod
    def _mech_horizon(self) -> int:
        """Implemented by each sketch (Punctual, Lazy)."""

    def _rounds_per_block(self) -> int | None:
        return None

    def _init_extra(self) -> None:  # noqa: B027 (optional hook)
        """Optional hook: a sketch with extra state (Lazy's pending table) creates it here."""

    @abc.abstractmethod
    def _arrival_tables(
        self, h1: np.ndarray, h2: np.ndarray, first: int, t_end: int
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """Exact flat tables of the arrivals at steps ``first .. first + len(h1) - 1`` of a batch
        of steps that ends at ``t_end``: Punctual ``(table, None)``, Lazy ``(pushed, pending)``.
        Additive: splitting the arrivals into pieces and summing their tables gives the same."""

    @abc.abstractmethod
    def _apply_tables(self, pushed: np.ndarray, pending: np.ndarray | None, t_end: int) -> None:
        """Advance from step ``t`` to ``t_end`` with the summed :meth:`_arrival_tables` of all
        the arrivals of those steps (never modifies the arrays it is given)."""

    def _advance(self, h1: np.ndarray, h2: np.ndarray) -> None:
        t_end = self._t + len(h1)
        self._apply_tables(*self._arrival_tables(h1, h2, self._t, t_end), t_end)

    @abc.abstractmethod
    def _step_table(self, table: np.ndarray) -> None:
        """Implemented by each sketch (Punctual, Lazy)."""

    # ---------------------------------------------------------------- public facts

    @property
    def t(self) -> int:
        """Number of time steps processed (public)."""
        return self._t

    @property
    def epsilon(self) -> float:
        return self._mech.epsilon

    @property
    def delta(self) -> float:
        return self._mech.delta

    @property
    def calibration(self) -> str:
        return self._mech.calibration

    @property
    def sigma(self) -> float:
        """Noise standard deviation of every tree node."""
        return self._mech.sigma

    @property
    def tree_height(self) -> int:
        """``h`` of every counter's tree (``bit_length`` of its number of updates)."""
        return self._mech.height

    @property
    def faithful(self) -> bool:
        return self._mech.faithful

    @property
    def formally_private(self) -> bool:
        """``False`` only for Count Sketch with ``cs_sensitivity="paper_2d"`` (docs/algorithms.md#lazy-e10)."""
        return not (self.kind == "count-sketch" and self.m < 4 * self.depth)

    @property
    def privacy_budget(self) -> PrivacyBudget:
        """``(epsilon, delta)`` covering all releases at all steps (see the module docstring)."""
        return PrivacyBudget.approx(self.epsilon, self.delta)

    @property
    def counter_updates(self) -> int:
        """Total GaussBM counter updates so far (Lazy: ``depth`` per step; Punctual: ``depth*width``)."""
        return int(self._mech.steps.sum())

    @property
    def noise_values_drawn(self) -> int:
        """Gaussian values drawn so far by this object (diagnostics; not serialized)."""
        return self._mech.noise_values_drawn

    def noise_std(self) -> np.ndarray:
        """Current noise standard deviation of every cell, shape ``(depth, width)``."""
        return self._mech.noise_std().reshape(self.depth, self.width)

    def noise_bound(self, beta: float) -> float:
        """With probability ``>= 1 - beta/2``, no counter's noise ever exceeds this (union bound
        over ``depth * width`` counters and their distinct noise values, [Hol25, Lemma 4; Lemma 5])."""
        beta = check_probability(beta, "beta")
        values = self.depth * self.width * self._mech.horizon
        return self.sigma * math.sqrt(2.0 * self.tree_height * math.log(4.0 * values / beta))

    # ---------------------------------------------------------------- time steps

    def update(self, key: Any) -> Self:
        """One time step with one arrival ``key`` (str, bytes, int or tuple)."""
        return self.update_batch([key])

    def update_batch(self, keys: Any) -> Self:
        """Process ``keys`` as consecutive time steps, one arrival per step, in order.

        Bit-identical to calling :meth:`update` on each key in turn. ``keys``: a numpy integer
        array, a list of str/bytes/int/tuples or a pyarrow string/integer array.
        """
        h1, h2 = hash_keys(keys, self.seed)
        return self.update_batch_hashes(h1, h2)

    def update_batch_hashes(self, h1: np.ndarray, h2: np.ndarray) -> Self:
        """:meth:`update_batch` for keys given by :func:`beam_dpsketch.hashing.hash_keys` hashes."""
        h1 = np.asarray(h1, dtype=np.uint64)
        h2 = np.asarray(h2, dtype=np.uint64)
        if h1.shape != h2.shape or h1.ndim != 1:
            raise ValueError("h1 and h2 must be one-dimensional arrays of the same length")
        self._check_steps(len(h1))
        if len(h1):
            self._advance(h1, h2)
        return self

    def summarize_interval(self, keys: Any, first: int, start: int, end: int) -> IntervalSummary:
        """Exact summary of the arrivals ``keys`` at steps ``first .. first + len(keys) - 1`` of
        the interval ``[start, end)`` (see :class:`IntervalSummary`).

        Depends on the sketch's public parameters (shape, seed, kind, algorithm) only, never on
        its state, so pieces of an interval can be summarized anywhere and merged in any order.
        The interval must be the one whose end the caller will apply at (e.g. the next release
        time): Lazy's summary splits the arrivals by whether their column is pushed by ``end``.

        Raises
        ------
        HorizonExceededError
            If ``end`` is beyond the horizon ``T``.
        ValueError
            If the arrivals' steps are not inside ``[start, end)``.
        """
        h1, h2 = hash_keys(keys, self.seed)
        return self.summarize_interval_hashes(h1, h2, first, start, end)

    def summarize_interval_hashes(
        self, h1: np.ndarray, h2: np.ndarray, first: int, start: int, end: int
    ) -> IntervalSummary:
        """:meth:`summarize_interval` for keys given by :func:`beam_dpsketch.hashing.hash_keys`
        hashes."""
        h1 = np.asarray(h1, dtype=np.uint64)
        h2 = np.asarray(h2, dtype=np.uint64)
        if h1.shape != h2.shape or h1.ndim != 1:
            raise ValueError("h1 and h2 must be one-dimensional arrays of the same length")
        start = check_int(start, "start", 0)
        end = check_int(end, "end", start + 1)
        first = check_int(first, "first", 0)
        if end > self.horizon:
            raise HorizonExceededError(
                f"end: the interval would exceed the declared horizon T={self.horizon}"
            )
        if not start <= first <= first + len(h1) <= end:
            # Names the parameters only: positions are not echoed into an error message.
            raise ValueError("position: the arrivals' steps must lie inside [start, end)")
        pushed, pending = self._arrival_tables(h1, h2, first, end)
        ranges = ((first, first + len(h1)),) if len(h1) else ()
        return IntervalSummary(start, end, ranges, pushed, pending)

    def apply_interval(self, summary: IntervalSummary) -> Self:
        """Process the complete interval ``summary`` (from this sketch's parameters), whose start
        must be the current step ``t``: afterwards ``t == summary.end`` and the sketch equals
        one that processed the interval's arrivals with :meth:`update_batch`, bit for bit.

        Raises
        ------
        ValueError
            If the summary does not start at ``t``, does not cover every step of its interval, or
            comes from a sketch of another shape or algorithm.
        HorizonExceededError
            If the interval ends beyond the horizon ``T``.
        """
        if not isinstance(summary, IntervalSummary):
            raise TypeError(f"summary must be an IntervalSummary, got {type(summary).__name__}")
        n_cells = self.depth * self.width
        lazy = isinstance(self, LazySketch)
        if (
            summary.pushed.shape != (n_cells,)
            or (summary.pending is not None) != lazy
            or (lazy and summary.pending.shape != (n_cells,))
        ):
            raise ValueError("summary: it was built by a sketch of another shape or algorithm")
        # Names the parameter only: t and the interval bounds count private arrivals.
        if summary.start != self._t:
            raise ValueError("summary: the interval must start at the current time step t")
        if not summary.complete:
            raise ValueError("summary: the interval must cover every one of its time steps")
        self._check_steps(summary.end - summary.start)
        self._apply_tables(summary.pushed, summary.pending, summary.end)
        return self

    def step_counts(self, delta: Any) -> Self:
        """Advance one time step that adds an exact table of counts (the tick time model).

        Parameters
        ----------
        delta
            An integer array of shape ``(depth, width)``, or an exact :class:`CountMinSketch`
            (kind ``"count-min"``) / :class:`CountSketch` (kind ``"count-sketch"``) with the same
            ``(width, depth, seed)``, holding what arrived during this step. Count-Min tables must
            be non-negative with equal row sums (every arrival adds 1 to each row). The privacy
            guarantee assumes a neighbouring stream differs in at most ``max_contributions``
            arrivals of one step (module docstring).
        """
        table = self._check_table(delta)
        self._check_steps(1)
        self._step_table(table)
        return self

    def _check_steps(self, steps: int) -> None:
        if self._t + steps > self.horizon:
            # Names the horizon only: the step count and t are counts of private arrivals.
            raise HorizonExceededError(
                f"these steps would exceed the declared horizon T={self.horizon}; nothing was "
                "processed or released (docs/algorithms.md#lazy-beam)"
            )

    def _check_table(self, delta: Any) -> np.ndarray:
        exact_cls = CountMinSketch if self.kind == "count-min" else CountSketch
        if isinstance(delta, CountMinSketch | CountSketch):
            if type(delta) is not exact_cls:
                raise TypeError(
                    f"delta must be a {exact_cls.__name__} for kind={self.kind!r}, got "
                    f"{type(delta).__name__}"
                )
            if (delta.width, delta.depth, delta.seed) != (self.width, self.depth, self.seed):
                raise ValueError(
                    "delta sketch must have the same (width, depth, seed) as this sketch: "
                    f"{(delta.width, delta.depth, delta.seed)} vs "
                    f"{(self.width, self.depth, self.seed)}"
                )
            table = delta.table
        else:
            table = np.asarray(delta)
            if table.dtype.kind not in "iu":
                raise TypeError(f"delta must be an integer table, got dtype {table.dtype}")
        if table.shape != (self.depth, self.width):
            raise ValueError(
                f"delta must have shape (depth, width) = {(self.depth, self.width)}, "
                f"got {table.shape}"
            )
        table = table.astype(np.int64)
        if self.kind == "count-min":
            if np.any(table < 0):
                raise ValueError("delta of a Count-Min sketch must be non-negative counts")
            sums = table.sum(axis=1)
            if np.any(sums != sums[0]):
                raise ValueError(
                    "delta rows must all sum to the step's number of arrivals (Count-Min)"
                )
        return table

    # ---------------------------------------------------------------- queries

    def noisy_table(self) -> np.ndarray:
        """The current release: the ``(depth, width)`` float64 table of noisy counters."""
        return self._mech.values().reshape(self.depth, self.width)

    def estimate(self, keys: Any) -> np.ndarray:
        """Estimated frequency of each key at the current time (float64; post-processing)."""
        return self.estimate_hashes(*hash_keys(keys, self.seed))

    def estimate_one(self, key: Any) -> float:
        """Estimated frequency of one key at the current time."""
        return float(self.estimate([key])[0])

    def estimate_hashes(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Min over rows (Count-Min) or median of signed rows (Count Sketch), [Hol25, Algorithm 4]."""
        h1 = np.asarray(h1, dtype=np.uint64)
        h2 = np.asarray(h2, dtype=np.uint64)
        cells = row_buckets(h1, h2, self.depth, self.width) + self._row_offsets
        values = self._mech.values(cells.ravel()).reshape(cells.shape)
        if self.kind == "count-min":
            return values.min(axis=0)
        values *= row_signs(h2, self.depth)
        return np.median(values, axis=0)

    # ---------------------------------------------------------------- bytes

    def _ctor_params(self) -> dict[str, Any]:
        return {
            "width": self.width,
            "depth": self.depth,
            "horizon": self.horizon,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "kind": CONTINUAL_SKETCH_KINDS[self.kind],
            "seed": self.seed,
            "calibration": self.calibration,
            "cs_sensitivity": self.cs_sensitivity,
            "m": self.m,
            "max_contributions": self.max_contributions,
            "faithful": self.faithful,
        }

    def _extra_arrays(self) -> dict[str, np.ndarray]:
        return {}

    def to_bytes(self) -> bytes:
        """Serialize the full state (exact counts included: keep it inside the trusted boundary).

        The noise key is not stored: :meth:`from_bytes` needs the same ``noise_source``.
        Continuing from a restored state is bit-identical to never having stopped.
        """
        params = self._ctor_params()
        params["release_prefix"] = encode_key(self.release_prefix).hex()
        params["t"] = self._t
        params["mechanism"] = self._mech._params()
        arrays = {f"mech_{k}": v for k, v in self._mech._arrays().items()}
        arrays.update(self._extra_arrays())
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes, noise_source: NoiseSource) -> Self:
        """Inverse of :meth:`to_bytes`. Raises ``SketchFormatError`` (a ``ValueError``) on
        malformed bytes and when ``noise_source`` is not the one the state was built with."""
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        # The counters the arrays hold bound width * depth before the constructor allocates.
        depth = req(params, "depth", int)
        if depth < 1:
            raise serialization.SketchFormatError("sketch parameter 'depth' must be >= 1")
        serialization.require_size(
            params, "width", serialization.array_length(arrays, "mech_k"), factor=depth
        )
        try:
            ctor = {
                name: req(params, name, typ)
                for name, typ in (
                    ("width", int),
                    ("depth", int),
                    ("horizon", int),
                    ("seed", int),
                    ("calibration", str),
                    ("cs_sensitivity", str),
                    ("m", int),
                    ("max_contributions", int),
                    ("faithful", bool),
                )
            }
            ctor["kind"] = kind_from_code(req(params, "kind", str))
            budget = PrivacyBudget.approx(
                req(params, "epsilon", float), req(params, "delta", float)
            )
            prefix = decode_key(bytes.fromhex(req(params, "release_prefix", str)))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)
                sketch = cls(
                    **ctor, budget=budget, release_prefix=prefix, noise_source=noise_source
                )
        except serialization.SketchFormatError:
            raise
        except (TypeError, ValueError) as exc:
            raise serialization.SketchFormatError(f"invalid sketch parameters: {exc}") from None
        mech_params = req(params, "mechanism", dict)
        mech_arrays = {k[5:]: v for k, v in arrays.items() if k.startswith("mech_")}
        mech = GaussianBinaryMechanism._restore(mech_params, mech_arrays, noise_source)
        expected = sketch._mech._params()
        if mech._params() != expected:
            raise serialization.SketchFormatError("mechanism parameters do not match the sketch")
        t = req(params, "t", int)
        if not 0 <= t <= sketch.horizon:
            raise serialization.SketchFormatError("t outside [0, horizon]")
        sketch._mech = mech
        sketch._t = t
        sketch._restore_extra(arrays)
        sketch._check_state()
        return sketch

    def _restore_extra(self, arrays: dict[str, np.ndarray]) -> None:  # noqa: B027
        """Optional hook: a sketch with extra state (Lazy's pending table) restores it here."""

    @abc.abstractmethod
    def _expected_steps(self) -> np.ndarray:
        """Implemented by each sketch (Punctual, Lazy)."""

    def _exact_content(self) -> np.ndarray:
        """Exact counts of the whole prefix per cell (secret; used by invariant checks)."""
        return self._mech._total.reshape(self.depth, self.width)

    def _check_state(self) -> None:
        if not np.array_equal(self._mech._k, self._expected_steps()):
            raise serialization.SketchFormatError("counter update counts do not match t")
        # A row's absolute counts add up to at most the number of arrivals, far below 2**61 for
        # any real stream; larger ones are forged, and would wrap around in the int64 sums
        # below (a cell plus its pending count, a row's sum) and pass the checks. Summed in
        # float64: its rounding is far smaller than the margin to 2**63.
        tables = [self._mech._total.reshape(self.depth, self.width)]
        tables += list(self._extra_arrays().values())
        if any(np.abs(t.astype(np.float64)).sum(axis=1).max() >= 2.0**61 for t in tables):
            raise serialization.SketchFormatError("exact counts beyond the int64 range")
        if self.kind == "count-min":
            content = self._exact_content()
            sums = content.sum(axis=1)
            if np.any(content < 0) or np.any(sums != sums[0]):
                raise serialization.SketchFormatError(
                    "Count-Min counts must be non-negative with equal row sums"
                )

    def __reduce__(self):
        # Pickles (e.g. inside a Beam DoFn) carry the noise source, as a pickled NoiseSource does.
        return (_unpickle, (type(self), self.to_bytes(), self._mech._source))

    def memory_bytes(self) -> int:
        """Bytes of state (counters, noise slots, and the pending table for Lazy)."""
        return self._mech.memory_bytes() + sum(a.nbytes for a in self._extra_arrays().values())

    def __repr__(self) -> str:
        # Exact counts and noise are secret: only public parameters are shown.
        return (
            f"{type(self).__name__}(kind={self.kind!r}, width={self.width}, depth={self.depth}, "
            f"horizon={self.horizon}, epsilon={self.epsilon}, delta={self.delta}, t={self._t})"
        )


# --------------------------------------------------------------------------------------------
# PunctualSketch
# --------------------------------------------------------------------------------------------


class PunctualSketch(_ContinualSketch):
    """Punctual private CMS / CS (Epasto et al.; paper Algorithms 3-4, [Hol25, Section 4.1]): every cell is a
    GaussBM counter over ``T`` steps, updated at every step.

    Guarantee: all releases at all times are jointly ``(epsilon, delta)``-DP under event-level
    replacement neighbouring, ``m = 2d`` (CMS) / ``4d`` (CS, docs/algorithms.md#lazy-e10), ``h = bit_length(T)``
    (module docstring). ``faithful=True`` (default) draws ``depth * width`` noise values per step,
    the baseline's true cost (docs/algorithms.md#lazy-vectorised); ``faithful=False`` draws only
    the nodes that stay active: identical outputs, a different cost.

    Parameters
    ----------
    width, depth
        Sketch shape (as :class:`CountMinSketch`).
    horizon
        ``T``: the number of time steps the privacy calibration covers.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` (``delta > 0``) covering all releases at all
        steps.
    release_prefix
        Release-id prefix of the noise (distinct for every sketch sharing a noise source).
    kind
        ``"count-min"`` or ``"count-sketch"``.
    seed
        Public hash seed (same cells as the exact sketch with this seed).
    noise_source, calibration, cs_sensitivity, m, max_contributions, faithful
        See the module docstring; ``m`` may only be raised above the default ``2d``/``4d``.
    """

    KIND = "PunctualSketch"

    def _mech_horizon(self) -> int:
        return self.horizon

    def _expected_steps(self) -> np.ndarray:
        return np.full(self.depth * self.width, self._t, dtype=np.int64)

    def _arrival_tables(
        self, h1: np.ndarray, h2: np.ndarray, first: int, t_end: int
    ) -> tuple[np.ndarray, None]:
        # Every cell is updated at every step: only the exact table of the arrivals matters.
        exact_cls = CountMinSketch if self.kind == "count-min" else CountSketch
        table = exact_cls(self.width, self.depth, self.seed).update_hashes(h1, h2).table
        return table.ravel().astype(np.int64, copy=False), None

    def _apply_tables(self, pushed: np.ndarray, pending: np.ndarray | None, t_end: int) -> None:
        self._mech.advance(pushed, t_end - self._t)
        self._t = t_end

    def _step_table(self, table: np.ndarray) -> None:
        self._mech.advance(table.ravel(), 1)
        self._t += 1


# --------------------------------------------------------------------------------------------
# LazySketch
# --------------------------------------------------------------------------------------------


class LazySketch(_ContinualSketch):
    """Lazy private CMS / CS (paper Algorithm 5, Theorem 2; [Hol25, Section 4.2]): an exact pending table ``P``
    and one column pushed into GaussBM counters per step, round-robin (column ``t mod width`` at
    0-indexed step ``t``: increment, push, reset, [Hol25, Algorithm 5] and docs/algorithms.md#continual-observation).

    Guarantee: all releases at all times are jointly ``(epsilon, delta)``-DP under event-level
    replacement neighbouring with ``m = 2d`` (CMS) / ``4d`` (CS, docs/algorithms.md#lazy-e10) and GaussBM counters
    over ``T_loc = ceil(T / width)`` pushes (docs/algorithms.md#lazy-e11), ``h_loc = bit_length(T_loc)``. The push schedule
    is a function of ``t`` only ([Hol25, Theorem 2]). ``P`` is never released; a noise-free estimate lags
    the exact sketch by at most ``width - 1`` arrivals per cell (the paper never flushes ``P``,
    docs/algorithms.md#continual-observation).

    :meth:`update_batch` is the vectorised column push of docs/algorithms.md#lazy-vectorised: arrivals are binned in
    chunks, every push of the batch is applied to the exact totals at once, and only the tree
    levels whose node changed get noise (step 5; the noise is keyed, so this equals processing
    one arrival at a time, bit for bit). ``faithful=True`` instead draws the noise of every push
    (``depth`` values per arrival).

    Parameters
    ----------
    width, depth, horizon, budget, release_prefix, kind, seed
        As :class:`PunctualSketch`.
    noise_source, calibration, cs_sensitivity, m, max_contributions, faithful
        See the module docstring. ``m`` may be raised when the sketch is part of a larger
        n-counters instance (e.g. the hierarchical heavy-hitter sketch, docs/algorithms.md#lazy-e23).
    """

    KIND = "LazySketch"
    _FAITHFUL_DEFAULT = False

    def _init_extra(self) -> None:
        self._pending = np.zeros((self.depth, self.width), dtype=np.int64)
        self._columns = np.arange(self.width, dtype=np.int64)

    def _mech_horizon(self) -> int:
        return -(-self.horizon // self.width)

    def _rounds_per_block(self) -> int:
        n = self.depth * self.width
        return max(1, min(_LAZY_BLOCK_VALUES // n, self._mech_horizon()))

    @property
    def local_horizon(self) -> int:
        """``T_loc = ceil(T / width)``: the pushes each counter is calibrated for (docs/algorithms.md#lazy-e11)."""
        return self._mech.horizon

    def column_pushes(self, t: int | None = None) -> np.ndarray:
        """Pushes of each column after ``t`` steps (default: now): ``ceil((t - j) / w)``,
        clipped at 0 ([Hol25, Section 4.2]). Public: a function of ``t`` only."""
        t = self._t if t is None else check_int(t, "t", 0)
        return (t - self._columns + self.width - 1) // self.width

    def _expected_steps(self) -> np.ndarray:
        return np.tile(self.column_pushes(), self.depth)

    def _exact_content(self) -> np.ndarray:
        return super()._exact_content() + self._pending

    def _extra_arrays(self) -> dict[str, np.ndarray]:
        return {"pending": self._pending}

    def _restore_extra(self, arrays: dict[str, np.ndarray]) -> None:
        self._pending = serialization.require_array(
            arrays, "pending", "<i8", (self.depth, self.width)
        )

    def _check_state(self) -> None:
        super()._check_state()
        if self._t and np.any(self._pending[:, (self._t - 1) % self.width] != 0):
            raise serialization.SketchFormatError("the column pushed last must have no pending")

    def _step_table(self, table: np.ndarray) -> None:
        j = self._t % self.width
        self._pending += table
        pushed = self._pending[:, j].copy()
        self._mech.advance(pushed, 1, counters=self._row_offsets[:, 0] + j)
        self._pending[:, j] = 0
        self._t += 1

    def _arrival_tables(
        self, h1: np.ndarray, h2: np.ndarray, first: int, t_end: int
    ) -> tuple[np.ndarray, np.ndarray]:
        d, w = self.depth, self.width
        n_cells = d * w
        # Column j's last push up to t_end is at time last[j] (before the batch if it is not
        # pushed in it): an arrival at time tau in cell j is pushed by t_end iff tau <= last[j],
        # which can fail only for the last w - 1 steps. A function of (tau, cell, t_end) only,
        # so the split of a piece of the batch does not depend on the other pieces.
        last = (t_end - 1) - ((t_end - 1 - self._columns) % w)
        tail_start = max(first, t_end - w + 1)
        signed = self.kind == "count-sketch"
        pushed_sum = np.zeros(n_cells, dtype=np.int64)
        new_pending = np.zeros(n_cells, dtype=np.int64)
        for start in range(0, len(h1), _CHUNK):
            c1, c2 = h1[start : start + _CHUNK], h2[start : start + _CHUNK]
            cells = row_buckets(c1, c2, d, w)
            if signed:
                neg = np.stack([row_negative(c2, i) for i in range(d)])
            c0 = first + start
            split = min(max(tail_start - c0, 0), len(c1))
            if split:
                bins = cells[:, :split] + self._row_offsets
                if signed:
                    bins = bins + n_cells * neg[:, :split]
                pushed_sum += _signed_bincount(bins, n_cells, signed)
            if split < len(c1):
                tail = cells[:, split:]
                taus = np.arange(c0 + split, c0 + len(c1), dtype=np.int64)
                pend = taus[None, :] > last[tail]
                bins = tail + self._row_offsets + (2 * n_cells if signed else n_cells) * pend
                if signed:
                    bins = bins + n_cells * neg[:, split:]
                both = _signed_bincount_2(bins, n_cells, signed)
                pushed_sum += both[0]
                new_pending += both[1]
        return pushed_sum, new_pending

    def _apply_tables(self, pushed: np.ndarray, pending: np.ndarray | None, t_end: int) -> None:
        assert pending is not None
        d, w = self.depth, self.width
        k_old = self.column_pushes(self._t)
        k_new = self.column_pushes(t_end)
        pushed_cols = k_new > k_old
        # The earlier pending counts of a pushed column go out with its push.
        carried = np.where(pushed_cols[None, :], self._pending, 0)
        pushed_sum = pushed + carried.ravel()
        steps = np.tile(k_new - k_old, d)
        if pushed_cols.all():
            self._mech.advance(pushed_sum, steps)
        else:
            counters = np.flatnonzero(np.tile(pushed_cols, d))
            self._mech.advance(pushed_sum[counters], steps[counters], counters=counters)
        self._pending = np.where(pushed_cols[None, :], 0, self._pending) + pending.reshape(d, w)
        self._t = t_end


def _unpickle(cls: type, data: bytes, source: NoiseSource) -> Any:
    return cls.from_bytes(data, source)


def _signed_bincount(bins: np.ndarray, n: int, signed: bool) -> np.ndarray:
    """Counts per cell of flat bins ``cell (+ n if negative sign)``, signed for Count Sketch."""
    counts = np.bincount(bins.ravel(), minlength=2 * n if signed else n)
    if signed:
        return counts[:n] - counts[n:]
    return counts


def _signed_bincount_2(bins: np.ndarray, n: int, signed: bool) -> tuple[np.ndarray, np.ndarray]:
    """As :func:`_signed_bincount` with a second group of bins (pending) after the first."""
    width = 2 * n if signed else n
    counts = np.bincount(bins.ravel(), minlength=2 * width)
    return _fold(counts[:width], n, signed), _fold(counts[width:], n, signed)


def _fold(counts: np.ndarray, n: int, signed: bool) -> np.ndarray:
    return counts[:n] - counts[n:] if signed else counts


#: ``algorithm`` names and the core class each maps to: Lazy (Algorithm 5) or Punctual
#: (Algorithms 3-4) [Hol25].
CONTINUAL_ALGORITHMS: dict[str, type] = {"lazy": LazySketch, "punctual": PunctualSketch}


def check_continual_budget(budget: Any) -> None:
    """Refuse anything but an approximate-DP :class:`~beam_dpsketch.privacy.PrivacyBudget`."""
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
    if budget.kind != "approx" or not budget.delta:
        raise ValueError(
            f"budget must be an (epsilon, delta) budget with delta > 0 (PrivacyBudget.approx): the "
            f"Gaussian binary mechanism is (epsilon, delta)-DP (Holland, Theorem 1), got {budget}"
        )


def new_continual_sketch(
    width: int,
    depth: int,
    horizon: int,
    budget: PrivacyBudget,
    *,
    release_prefix: Any,
    sketch: str = "count-min",
    algorithm: str = "lazy",
    seed: int = 0,
    noise_source: NoiseSource | None = None,
    calibration: str = DEFAULT_CALIBRATION,
    cs_sensitivity: str = "corrected_4d",
    max_contributions: int = 1,
) -> LazySketch | PunctualSketch:
    """A fresh core sketch (the one the Beam transform ``ContinualDPSketch`` builds).

    Parameters
    ----------
    width, depth, horizon
        Sketch shape and the declared number of time steps ``T``.
    budget
        An approximate-DP budget (``delta > 0``): the Gaussian binary mechanism is
        ``(epsilon, delta)``-DP [Hol25, Algorithm 2 and Theorem 1].
    sketch
        ``"count-min"`` or ``"count-sketch"`` (:data:`CONTINUAL_SKETCH_KINDS`).
    algorithm
        ``"lazy"`` (:class:`LazySketch`) or ``"punctual"`` (:class:`PunctualSketch`).
    release_prefix, seed, noise_source, calibration, cs_sensitivity, max_contributions
        As for :class:`LazySketch`.
    """
    check_choice(sketch, "sketch", KINDS)
    if algorithm not in CONTINUAL_ALGORITHMS:
        raise ValueError(
            f"algorithm must be one of {tuple(CONTINUAL_ALGORITHMS)}, got {algorithm!r}"
        )
    return CONTINUAL_ALGORITHMS[algorithm](
        width,
        depth,
        horizon,
        budget,
        release_prefix=release_prefix,
        kind=sketch,
        seed=seed,
        noise_source=noise_source,
        calibration=calibration,
        cs_sensitivity=cs_sensitivity,
        max_contributions=max_contributions,
    )
