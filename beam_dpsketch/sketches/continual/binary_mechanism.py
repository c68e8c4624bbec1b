"""Gaussian binary mechanism (GaussBM) for ``n`` counters under continual observation.

Holland, "Faster Differentially Private Sketches under Continual Observation" (Algorithms 1-2,
Theorem 1), cited below as [Hol25]; where the code departs from the paper the docstring points to
the entry of ``docs/algorithms.md#continual-observation`` that explains why.
Pure numpy, no Beam.

Mechanism
---------
Every counter is a binary-tree counter over at most ``horizon`` updates (``T_cap``). With ``k`` the
counter's own 1-indexed update count, update ``k`` creates exactly one node that can ever be
released: the dyadic interval ``[k - 2**tz(k) + 1, k]`` of level ``tz(k)`` (``tz`` = trailing zeros).
The node merge rule is ``tz(k)`` merges with the *internal* ``k`` ([Hol25, Algorithm 1], docs/algorithms.md#lazy-e2: the
paper's trailing-ones test on a 1-indexed time makes non-dyadic nodes, and at ``T_cap = 3, 7, 15``
a leaf then lies in ``h + 1`` nodes, beyond the calibrated sensitivity). After ``k`` updates the
active nodes are the dyadic decomposition of ``[1, k]``: for each set bit ``L`` of ``k``, the node
of level ``L`` ending at ``(k >> L) << L``. The release of a counter is its exact running total
plus the noise of its active nodes, ``N(0, popcount(k) * sigma**2)``.

This is the "level slot" form of docs/algorithms.md#lazy-level-slots: the state is the exact running total per counter and
one noise slot per level (zero when the level is inactive), so a query never draws noise and two
queries without an update are identical ([Hol25, Algorithm 1]). Because the state is a *pure function* of
``(k, exact totals, noise key)``, a batch of updates can be applied in one step: totals add up, and
only the levels whose active node changed are refreshed (docs/algorithms.md#lazy-vectorised). The
result is bit-identical to one update at a time.

Privacy (Theorem 1, corrected): neighbouring inputs differ in at most ``m`` counters, each by a
total of at most ``C = max_contributions`` over all time (Definition 2 is ``C = 1``; ``C > 1`` is
our extension for steps that carry up to ``C`` changed arrivals). Each changed leaf changes its
``h - 1`` ancestors equally, so the L2 sensitivity of all tree nodes together is at most
``C * sqrt(m * h)``, ``h = bit_length(horizon)`` ([Hol25, Algorithm 1; Algorithm 2 and Theorem 1]). Adding ``N(0, sigma**2)`` to
every node with ``sigma`` from :func:`gaussbm_sigma` makes **all outputs at all times jointly
(epsilon, delta)-DP**; queries are post-processing. ``calibration="analytic"``
(:data:`DEFAULT_CALIBRATION`) is the exact Balle-Wang Gaussian for ``Delta2 = C sqrt(m h)``: the
smallest ``sigma`` whose exact privacy profile meets ``delta`` at ``epsilon``, valid for any
``epsilon > 0`` and never noisier than the classical one where that applies
(docs/algorithms.md#continual-observation; not in the paper). ``calibration="paper"`` reproduces
Algorithm 1's classical Gaussian ``sigma = C * sqrt(2 h m ln(1.25/delta)) / epsilon`` (with the
factor 2 the Theorem 1 proof drops, docs/algorithms.md#lazy-e4), valid only for ``epsilon < 1``
(docs/algorithms.md#lazy-e5: ``ValueError`` otherwise). Exceeding ``horizon`` raises
:class:`HorizonExceededError` before anything changes (docs/algorithms.md#lazy-beam).

Noise scheme (retry-safe, docs/algorithms.md#lazy-beam and docs/algorithms.md#noise-sampling)
---------------------------------------------------------------------------------------------
The noise of the node created by update ``k`` of counter ``c`` is a pure function of the
:class:`~beam_dpsketch.noise.NoiseSource`, the ``release_prefix`` given at construction, ``c`` and
``k``. Updates are grouped in blocks of ``R = rounds_per_block`` local times: block
``b = (k - 1) // R`` is the single vectorised draw ::

    gaussian(source.stream((release_prefix, "GaussianBinaryMechanism/v1", n, R, b)), sigma, R * n)

read as an ``(R, n)`` array, and node ``(c, k)`` takes entry ``((k - 1) % R, c)``. Each block has
its own ChaCha20 key (HMAC of the secret key and the block id), so blocks never overlap (the Philox
hazard of docs/algorithms.md#noise-sampling cannot arise). A restored or retried state re-derives identical noise; an LRU
cache keeps recent blocks so that a block is normally drawn once. ``gaussian`` is the exact
discrete Gaussian on a ``2**-k`` lattice (no floating-point sampler; docs/algorithms.md#noise-sampling).
``faithful=True`` draws every block that the updates pass through, i.e. the noise of every node
Algorithm 1 creates (one value per counter update, docs/algorithms.md#lazy-level-slots), even those a batch overwrites;
``faithful=False`` draws only the blocks of nodes that are still active after the update. Both
give bit-identical outputs. Use a distinct ``release_prefix`` for every mechanism instance: two
mechanisms sharing a prefix and a source share noise, and differences of their outputs would
cancel it.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Literal, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_bool, check_choice, check_int, check_probability
from beam_dpsketch.hashing import check_key_like, decode_key, encode_key
from beam_dpsketch.noise import NoiseSource, gaussian
from beam_dpsketch.privacy.budget import PrivacyBudget, check_delta, check_epsilon
from beam_dpsketch.privacy.calibration import analytic_gaussian_sigma, classical_gaussian_sigma

__all__ = [
    "CALIBRATIONS",
    "DEFAULT_CALIBRATION",
    "GaussianBinaryMechanism",
    "HorizonExceededError",
    "created_node",
    "dyadic_nodes",
    "gaussbm_height",
    "gaussbm_sigma",
    "max_error_bound",
]

Calibration = Literal["paper", "analytic"]
CALIBRATIONS: tuple[str, ...] = ("paper", "analytic")
#: The calibration every constructor, transform and the CLI use unless told otherwise: the
#: analytic Gaussian accepts every ``epsilon > 0`` and needs no more noise than the paper's
#: classical Gaussian wherever that one is valid (``epsilon < 1``); ``"paper"`` stays available to
#: reproduce the paper's numbers.
DEFAULT_CALIBRATION: Calibration = "analytic"

_KIND = "GaussianBinaryMechanism"
_NOISE_TAG = "GaussianBinaryMechanism/v1"
_FINGERPRINT_TAG = "GaussianBinaryMechanism/v1/source-fingerprint"
# Default size of one noise block: large enough that the sampler's per-call overhead (hundreds of
# microseconds for the exact rejection sampler) is small against the per-value cost.
DEFAULT_BLOCK_VALUES = 1 << 15
_MAX_HORIZON = 1 << 62
# Bound of the sensitivity factors ``m`` and ``max_contributions``: far above any useful value
# (the noise grows with them), and small enough that the L2 sensitivity they give is a finite
# float, so an absurd value is a ValueError naming it rather than an OverflowError.
MAX_SENSITIVITY_FACTOR = 1 << 40


class HorizonExceededError(ValueError):
    """An update would go beyond the declared horizon ``T``; nothing was changed or released."""


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def _check_calibration(calibration: Any) -> str:
    return check_choice(calibration, "calibration", CALIBRATIONS)


# --------------------------------------------------------------------------------------------
# Tree facts and calibration
# --------------------------------------------------------------------------------------------


def gaussbm_height(horizon: int) -> int:
    """Tree height ``h = bit_length(horizon)`` (``= ceil(log2(horizon + 1))``, [Hol25, Algorithm 1] and docs/algorithms.md#continual-observation).

    Computed with integers: float ``log2`` is off near powers of two.
    """
    return check_int(horizon, "horizon", 1, _MAX_HORIZON).bit_length()


def created_node(k: int) -> tuple[int, int]:
    """The node that survives update ``k`` (1-indexed): ``[k - 2**tz(k) + 1, k]`` (docs/algorithms.md#lazy-level-slots)."""
    k = check_int(k, "k")
    size = k & -k
    return k - size + 1, k


def dyadic_nodes(k: int) -> list[tuple[int, int]]:
    """Active nodes after ``k`` updates, oldest (largest) first: the dyadic decomposition of
    ``[1, k]``, one node of size ``2**L`` per set bit ``L`` of ``k`` (docs/algorithms.md#lazy-oracles; ``k = 13`` gives
    ``[(1, 8), (9, 12), (13, 13)]``)."""
    k = check_int(k, "k", 0)
    nodes = []
    start = 1
    for level in range(k.bit_length() - 1, -1, -1):
        if k >> level & 1:
            nodes.append((start, start + (1 << level) - 1))
            start += 1 << level
    return nodes


def gaussbm_sigma(
    horizon: int,
    m: int,
    epsilon: float,
    delta: float,
    *,
    calibration: Calibration = DEFAULT_CALIBRATION,
    max_contributions: int = 1,
) -> float:
    """Noise standard deviation per tree node for ``(epsilon, delta)``-DP under continual observation.

    ``Delta2 = max_contributions * sqrt(m * h)`` with ``h = bit_length(horizon)`` ([Hol25, Algorithm 2 and Theorem 1]).
    ``"analytic"`` (default): :func:`~beam_dpsketch.privacy.calibration.analytic_gaussian_sigma`
    (Balle-Wang), the smallest sigma with exact ``delta(epsilon) <= delta``, any ``epsilon > 0``.
    ``"paper"``: Algorithm 1's ``sqrt(2 h m ln(1.25/delta)) / epsilon`` (times
    ``max_contributions``) through :func:`~beam_dpsketch.privacy.calibration.classical_gaussian_sigma`;
    it requires ``epsilon < 1`` (docs/algorithms.md#lazy-e5) and keeps the factor 2 of Algorithm 1
    (docs/algorithms.md#lazy-e4). Golden values of ``"paper"``: docs/algorithms.md#lazy-oracles.

    Guarantee: adding ``N(0, sigma**2)`` to every tree node is ``(epsilon, delta)``-DP for
    neighbours within ``Delta2`` in L2 under either calibration; ``"analytic"`` returns a sigma no
    larger than ``"paper"``'s wherever ``"paper"`` is valid.
    """
    h = gaussbm_height(horizon)
    m = check_int(m, "m", 1, MAX_SENSITIVITY_FACTOR)
    c = check_int(max_contributions, "max_contributions", 1, MAX_SENSITIVITY_FACTOR)
    check_epsilon(epsilon)
    check_delta(delta, allow_zero=False)
    l2 = c * math.sqrt(m * h)
    if _check_calibration(calibration) == "paper":
        if epsilon >= 1:
            raise ValueError(
                f"epsilon must be < 1 with calibration='paper' (classical Gaussian, "
                f"erratum LAZY-E5 in docs/algorithms.md#lazy-e5), got {epsilon!r}; use calibration='analytic' for epsilon >= 1"
            )
        return classical_gaussian_sigma(l2, epsilon, delta)
    sigma = analytic_gaussian_sigma(l2, epsilon, delta)
    if epsilon < 1:
        # Both sigmas are valid here; taking the smaller makes "never noisier than the paper"
        # hold exactly, whatever the bisection's last-bit rounding.
        sigma = min(sigma, classical_gaussian_sigma(l2, epsilon, delta))
    return sigma


def max_error_bound(
    horizon: int,
    n: int,
    num_times: int,
    m: int,
    epsilon: float,
    delta: float,
    beta: float,
    *,
    sigma: float | None = None,
) -> float:
    """Corrected [Hol25, Lemma 4] (docs/algorithms.md#lazy-e8): with probability ``>= 1 - beta`` every one of
    ``n`` counters at every one of ``num_times`` query times has noise error at most
    ``sigma * sqrt(2 h ln(2 num_times n / beta))``; with Algorithm 1's sigma this is
    ``B_max = (2 h / epsilon) sqrt(m ln(1.25/delta) ln(2 num_times n / beta))``.

    ``sigma`` defaults to the ``"paper"`` calibration (the lemma's formula, so it needs
    ``epsilon < 1``); pass a mechanism's actual ``sigma`` for another calibration.
    """
    h = gaussbm_height(horizon)
    n = check_int(n, "n")
    num_times = check_int(num_times, "num_times")
    beta = check_probability(beta, "beta")
    if sigma is None:
        sigma = gaussbm_sigma(horizon, m, epsilon, delta, calibration="paper")
    return sigma * math.sqrt(2.0 * h * math.log(2.0 * num_times * n / beta))


# --------------------------------------------------------------------------------------------
# The mechanism
# --------------------------------------------------------------------------------------------


class GaussianBinaryMechanism:
    """``n`` Gaussian binary-mechanism counters, vectorised (paper Algorithms 1-2, level-slot form).

    Every counter keeps its own update count ``k`` (so a caller may update any subset at a time,
    as the lazy sketch does column by column); :meth:`update` advances all counters by one step
    (Algorithm 2). The privacy guarantee, calibration and noise scheme are in the module
    docstring: all outputs of all counters at all times are jointly ``(epsilon, delta)``-DP for
    inputs that differ in at most ``m`` counters by a total of at most ``max_contributions``
    each ([Hol25, Definition 2], [Hol25, Theorem 1], docs/algorithms.md#lazy-e2, docs/algorithms.md#lazy-e4, docs/algorithms.md#lazy-e5).

    Parameters
    ----------
    n
        Number of counters.
    horizon
        Maximum number of updates of any counter (``T_cap``); more raise
        :class:`HorizonExceededError`.
    budget
        ``PrivacyBudget.approx(epsilon, delta)`` (``0 < delta < 1``; ``epsilon < 1`` for
        ``calibration="paper"``) covering every output of every counter at every time.
    m
        Number of counters one neighbouring change may affect ([Hol25, Problem 1 and Definition 2]).
    noise_source
        Secret key of the noise; ``None`` draws a fresh secret key. ``NoiseSource.insecure_for_tests``
        and ``NoiseSource.zero_noise_for_tests`` are for tests only.
    release_prefix
        Release-id prefix of this mechanism's noise streams (str, bytes, int or tuples of these);
        must be distinct for every mechanism sharing a noise source.
    calibration
        ``"analytic"`` (default, Balle-Wang; any ``epsilon > 0``) or ``"paper"`` (classical
        Gaussian of Algorithm 1; ``epsilon < 1``).
    max_contributions
        Bound ``C`` on each affected counter's total change (``Delta2 = C sqrt(m h)``).
    rounds_per_block
        Local times per noise block (part of the noise identity, so fixed for a state's life);
        ``None`` picks ``max(1, 2**15 // n)`` capped at ``horizon``.
    faithful
        Draw the noise of every node created (Algorithm 1 cost) rather than only active ones;
        outputs are identical either way.
    """

    __slots__ = (
        "n",
        "horizon",
        "epsilon",
        "delta",
        "m",
        "calibration",
        "max_contributions",
        "release_prefix",
        "rounds_per_block",
        "faithful",
        "height",
        "sigma",
        "noise_values_drawn",
        "_source",
        "_k",
        "_total",
        "_slots",
        "_blocks",
        "_cache_size",
    )

    def __init__(
        self,
        n: int,
        horizon: int,
        budget: PrivacyBudget,
        m: int = 1,
        *,
        noise_source: NoiseSource | None = None,
        release_prefix: Any,
        calibration: Calibration = DEFAULT_CALIBRATION,
        max_contributions: int = 1,
        rounds_per_block: int | None = None,
        faithful: bool = True,
    ) -> None:
        self.n = check_int(n, "n", 1, 1 << 40)
        self.horizon = check_int(horizon, "horizon", 1, _MAX_HORIZON)
        self.m = check_int(m, "m", 1, MAX_SENSITIVITY_FACTOR)
        self.max_contributions = check_int(
            max_contributions, "max_contributions", 1, MAX_SENSITIVITY_FACTOR
        )
        self.calibration = _check_calibration(calibration)
        if not isinstance(budget, PrivacyBudget):
            raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
        if budget.kind != "approx" or not budget.delta:
            raise ValueError(
                "budget must be an (epsilon, delta) budget with delta > 0 "
                "(PrivacyBudget.approx): the Gaussian binary mechanism is (epsilon, delta)-DP "
                f"(Holland, Theorem 1), got {budget}"
            )
        self.epsilon = check_epsilon(budget.epsilon)
        self.delta = check_delta(budget.delta, allow_zero=False)
        self.sigma = gaussbm_sigma(
            self.horizon,
            self.m,
            self.epsilon,
            self.delta,
            calibration=self.calibration,
            max_contributions=self.max_contributions,
        )
        self.height = self.horizon.bit_length()
        if noise_source is None:
            noise_source = NoiseSource()
        if not isinstance(noise_source, NoiseSource):
            raise TypeError(
                f"noise_source must be a NoiseSource or None, got {type(noise_source).__name__}"
            )
        self._source = noise_source
        self.release_prefix = check_key_like(release_prefix, "release_prefix")
        if rounds_per_block is None:
            rounds_per_block = max(1, min(DEFAULT_BLOCK_VALUES // self.n, self.horizon))
        self.rounds_per_block = check_int(rounds_per_block, "rounds_per_block", 1, self.horizon)
        self.faithful = check_bool(faithful, "faithful")
        self.noise_values_drawn = 0
        self._k = np.zeros(self.n, dtype=np.int64)
        self._total = np.zeros(self.n, dtype=np.int64)
        self._slots = np.zeros((self.n, self.height), dtype=np.float64)
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_size = 2 * self.height + 4

    # ---------------------------------------------------------------- public facts

    @property
    def privacy_budget(self) -> PrivacyBudget:
        """``PrivacyBudget.approx(epsilon, delta)`` covering every output at every time."""
        return PrivacyBudget.approx(self.epsilon, self.delta)

    @property
    def steps(self) -> np.ndarray:
        """Number of updates of each counter (a copy; public: it depends on time only)."""
        return self._k.copy()

    def noise_std(self) -> np.ndarray:
        """Standard deviation of each counter's current noise: ``sigma * sqrt(popcount(k))``."""
        return self.sigma * np.sqrt(_popcount(self._k).astype(np.float64))

    # ---------------------------------------------------------------- updates

    def update(self, increments: Any) -> Self:
        """One step of every counter (Algorithm 2): ``increments`` has shape ``(n,)``."""
        return self.advance(increments, 1)

    def update_many(self, increments: Any) -> Self:
        """``K`` steps of every counter at once: ``increments`` has shape ``(K, n)``.

        Identical (bit for bit) to ``K`` calls of :meth:`update`.
        """
        arr = _as_int64(increments, "increments")
        if arr.ndim != 2 or arr.shape[1] != self.n:
            # The shape is not echoed: K counts the caller's (private) steps.
            raise ValueError(f"increments must have shape (K, {self.n})")
        if arr.shape[0] == 0:
            return self
        return self.advance(arr.sum(axis=0), arr.shape[0])

    def advance(self, increments: Any, steps: Any = 1, counters: Any = None) -> Self:
        """Apply ``steps`` updates to each selected counter, whose values sum to ``increments``.

        The state after ``s`` updates depends only on their sum (the exact running total) and on
        ``k`` (which nodes are active), so this is exactly ``s`` single updates.

        Parameters
        ----------
        increments
            Integer array, one entry per selected counter: the sum of its new update values.
        steps
            Number of updates per selected counter (scalar or array, ``>= 0``).
        counters
            Distinct counter indices, or ``None`` for all ``n`` counters in order.
        """
        if counters is None:
            idx = None
            k_old = self._k
        else:
            idx = np.asarray(counters)
            if idx.ndim != 1 or idx.dtype.kind not in "iu":
                raise ValueError("counters must be a one-dimensional integer array")
            idx = idx.astype(np.int64, copy=False)
            if idx.size and (idx.min() < 0 or idx.max() >= self.n):
                raise ValueError(f"counters must be in [0, {self.n})")
            if np.unique(idx).size != idx.size:
                raise ValueError("counters must be distinct")
            k_old = self._k[idx]
        size = k_old.size
        inc = _as_int64(increments, "increments")
        if inc.ndim == 0:
            inc = np.full(size, inc, dtype=np.int64)
        if inc.shape != (size,):
            raise ValueError(f"increments must have shape ({size},)")
        stp = _as_int64(steps, "steps")
        if np.any(stp < 0):
            raise ValueError("steps must be >= 0")
        if np.any((stp == 0) & (inc != 0)):
            # A total that changes without a new node would be released with stale noise.
            raise ValueError("a non-zero increment needs at least one step")
        k_new = k_old + stp
        if k_new.size and int(k_new.max()) > self.horizon:
            raise HorizonExceededError(
                f"update beyond the horizon T={self.horizon} of the binary mechanism: the "
                "privacy calibration covers at most T updates per counter "
                "(docs/algorithms.md#lazy-beam); nothing was changed"
            )
        counter_ids = np.arange(self.n, dtype=np.int64) if idx is None else idx
        plan = self._slot_plan(counter_ids, k_old, k_new)
        if self.faithful:
            needed = set()
            for _, _, ks in plan:
                needed.update(np.unique((ks[ks > 0] - 1) // self.rounds_per_block).tolist())
            self._draw_created(k_old, k_new, needed)
        # All noise first, then the writes, so that a failure leaves the state unchanged.
        fills = []
        for level, rows, ks in plan:
            values = np.zeros(rows.size, dtype=np.float64)
            active = ks > 0
            if active.any():
                values[active] = self._node_noise(rows[active], ks[active])
            fills.append((level, rows, values))
        for level, rows, values in fills:
            self._slots[rows, level] = values
        if idx is None:
            self._total += inc
            self._k[:] = k_new
        else:
            self._total[idx] += inc
            self._k[idx] = k_new
        return self

    def _slot_plan(
        self, counters: np.ndarray, k_old: np.ndarray, k_new: np.ndarray
    ) -> list[tuple[int, np.ndarray, np.ndarray]]:
        """For each level whose active node changes: ``(level, counter ids, node k or 0)``.

        Level ``L`` of a counter holds the node ending at ``(k >> L) << L`` when bit ``L`` of
        ``k`` is set (0 marks an inactive level, whose slot is zeroed).
        """
        plan = []
        for level in range(self.height):
            hi_new = k_new >> level
            changed = hi_new != (k_old >> level)
            # Once no counter's prefix above this level changes, no higher level changes either.
            if not changed.any():
                break
            sel = np.flatnonzero(changed)
            hi = hi_new[sel]
            ks = np.where(hi & 1, hi << level, 0)
            plan.append((level, counters[sel], ks))
        return plan

    # ---------------------------------------------------------------- noise

    def _node_noise(self, counters: np.ndarray, ks: np.ndarray) -> np.ndarray:
        """Noise of the node created by update ``ks[i]`` of counter ``counters[i]`` (secret)."""
        zero_based = ks - 1
        blocks = zero_based // self.rounds_per_block
        offsets = (zero_based - blocks * self.rounds_per_block) * self.n + counters
        first = int(blocks[0])
        if (blocks == first).all():
            return self._block(first)[offsets]
        out = np.empty(ks.size, dtype=np.float64)
        for b in np.unique(blocks).tolist():
            sel = blocks == b
            out[sel] = self._block(b)[offsets[sel]]
        return out

    def _block(self, b: int, keep: bool = True) -> np.ndarray:
        cached = self._blocks.get(b)
        if cached is not None:
            self._blocks.move_to_end(b)
            return cached
        size = self.rounds_per_block * self.n
        stream = self._source.stream(
            (self.release_prefix, _NOISE_TAG, self.n, self.rounds_per_block, b)
        )
        values = gaussian(stream, self.sigma, size)
        self.noise_values_drawn += size
        if keep:
            self._blocks[b] = values
            if len(self._blocks) > self._cache_size:
                self._blocks.popitem(last=False)
        return values

    def _draw_created(self, k_old: np.ndarray, k_new: np.ndarray, needed: set[int]) -> None:
        """Faithful cost: draw every block holding a node created by these updates.

        Blocks the new state uses (``needed``) are cached; the others are drawn, as Algorithm 1
        would draw their nodes' noise, and dropped.
        """
        moved = k_new > k_old
        if not moved.any():
            return
        r = self.rounds_per_block
        first = int(k_old[moved].min()) // r  # the block of local time k_old + 1
        last = (int(k_new[moved].max()) - 1) // r
        for b in range(first, last + 1):
            if b not in self._blocks:
                self._block(b, keep=b in needed)

    def _fingerprint(self) -> str:
        """A PRF value identifying (noise source, release prefix); reveals nothing about the key."""
        words = self._source.stream((self.release_prefix, _FINGERPRINT_TAG)).uint64(2)
        return words.tobytes().hex()

    # ---------------------------------------------------------------- queries

    def values(self, counters: Any = None) -> np.ndarray:
        """Noisy running totals (the release), float64: exact total plus active-node noise."""
        if counters is None:
            return self._total + self._slots.sum(axis=1)
        idx = np.asarray(counters, dtype=np.int64)
        return self._total[idx] + self._slots[idx].sum(axis=1)

    # ---------------------------------------------------------------- bytes

    def _params(self) -> dict[str, Any]:
        return {
            "n": self.n,
            "horizon": self.horizon,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "m": self.m,
            "calibration": self.calibration,
            "max_contributions": self.max_contributions,
            "release_prefix": encode_key(self.release_prefix).hex(),
            "rounds_per_block": self.rounds_per_block,
            "faithful": self.faithful,
            "source_fingerprint": self._fingerprint(),
        }

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"k": self._k, "total": self._total, "slots": self._slots}

    def to_bytes(self) -> bytes:
        """Serialize the state (exact totals included: keep the bytes inside the trusted boundary).

        The noise key is **not** stored; :meth:`from_bytes` needs the same ``noise_source``.
        """
        return serialization.dumps(_KIND, self._params(), self._arrays())

    @classmethod
    def from_bytes(cls, data: bytes, noise_source: NoiseSource) -> Self:
        """Inverse of :meth:`to_bytes`; ``SketchFormatError`` (a ``ValueError``) on malformed
        bytes and if ``noise_source`` is not the source the state was built with."""
        _, params, arrays = serialization.loads(data, expected_kind=_KIND)
        return cls._restore(params, arrays, noise_source)

    @classmethod
    def _restore(
        cls, params: dict[str, Any], arrays: dict[str, np.ndarray], noise_source: NoiseSource
    ) -> Self:
        req = serialization.require
        # Sizes first, against the arrays present: nothing is allocated from a forged field.
        n = serialization.require_size(params, "n", serialization.array_length(arrays, "k"))
        horizon = req(params, "horizon", int)
        if not 1 <= horizon <= _MAX_HORIZON or horizon.bit_length() != (
            serialization.array_length(arrays, "slots", 1)
        ):
            raise serialization.SketchFormatError("horizon does not match the noise slots")
        try:
            prefix = decode_key(bytes.fromhex(req(params, "release_prefix", str)))
            mech = cls(
                n,
                horizon,
                PrivacyBudget.approx(req(params, "epsilon", float), req(params, "delta", float)),
                req(params, "m", int),
                noise_source=noise_source,
                release_prefix=prefix,
                calibration=req(params, "calibration", str),
                max_contributions=req(params, "max_contributions", int),
                rounds_per_block=req(params, "rounds_per_block", int),
                faithful=req(params, "faithful", bool),
            )
        except (TypeError, ValueError) as exc:
            if isinstance(exc, serialization.SketchFormatError):
                raise
            raise serialization.SketchFormatError(f"invalid mechanism parameters: {exc}") from None
        if req(params, "source_fingerprint", str) != mech._fingerprint():
            # A SketchFormatError (a ValueError): decoders raise nothing else.
            raise serialization.SketchFormatError(
                "noise_source does not match the source this state was built with (or the "
                "release_prefix differs): continuing would mix two noise keys"
            )
        k = serialization.require_array(arrays, "k", "<i8", (mech.n,))
        total = serialization.require_array(arrays, "total", "<i8", (mech.n,))
        slots = serialization.require_array(arrays, "slots", "<f8", (mech.n, mech.height))
        if k.size and (k.min() < 0 or k.max() > mech.horizon):
            raise serialization.SketchFormatError("counter update counts outside [0, horizon]")
        if not np.isfinite(slots).all():
            raise serialization.SketchFormatError("non-finite noise slots")
        levels = np.arange(mech.height, dtype=np.int64)
        inactive = ((k[:, None] >> levels[None, :]) & 1) == 0
        if np.any(slots[inactive] != 0.0):
            raise serialization.SketchFormatError("noise in an inactive tree level")
        mech._k, mech._total, mech._slots = k, total, slots
        return mech

    def __reduce__(self):
        # The block cache is derived data: pickle the state and the source only.
        return (_unpickle, (self.to_bytes(), self._source))

    def memory_bytes(self) -> int:
        """Bytes of state: update counts, exact totals and ``h`` noise slots per counter."""
        return int(self._k.nbytes + self._total.nbytes + self._slots.nbytes)

    def __repr__(self) -> str:
        # Exact totals and noise are secret: never shown.
        return (
            f"GaussianBinaryMechanism(n={self.n}, horizon={self.horizon}, "
            f"epsilon={self.epsilon}, delta={self.delta}, m={self.m}, sigma={self.sigma:.6g})"
        )


def _unpickle(data: bytes, source: NoiseSource) -> GaussianBinaryMechanism:
    return GaussianBinaryMechanism.from_bytes(data, source)


def _popcount(k: np.ndarray) -> np.ndarray:
    k = np.asarray(k, dtype=np.uint64)
    if hasattr(np, "bitwise_count"):
        return np.bitwise_count(k).astype(np.int64)
    out = np.zeros(k.shape, dtype=np.int64)  # pragma: no cover - numpy < 2.0
    for bit in range(64):  # pragma: no cover
        out += ((k >> np.uint64(bit)) & np.uint64(1)).astype(np.int64)
    return out  # pragma: no cover


def _as_int64(values: Any, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iub":
        raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)
