"""Differentially private Count-Min, Count Sketch and Count-Median: one noisy release of an exact
linear sketch.

Zhao, Qiao, Redberg, Agrawal, El Abbadi and Wang, "Differentially Private Linear Sketches:
Efficient Implementations and Applications" (NeurIPS 2022), cited below as [ZQR+22]; errata and deviations are explained in
docs/algorithms.md#linear-sketches.

Design ([ZQR+22, Section 3] and docs/algorithms.md#exact-partials): shards build **exact** int64 sketches
(:class:`~beam_dpsketch.sketches.linear.countmin.CountMinSketch`,
:class:`~beam_dpsketch.sketches.linear.countsketch.CountSketch`) and merge them by addition; the trusted
aggregator then calls :meth:`PrivateCountMinSketch.release` / :meth:`PrivateCountSketch.release`
**once**, which adds independent noise to every cell (plus, by default, the public Count-Min
offset of Algorithm 3; ``offset=False`` leaves it out, docs/algorithms.md#lin-offset). The
output has exactly the distribution of Algorithm 3 run on one machine over all the data (the
noise is added at the end instead of at initialisation, [ZQR+22, Section 3]), so:

* Guarantee: the released table is ``epsilon``-DP (pure budget: exact discrete Laplace noise,
  L1 sensitivity) or ``rho``-zCDP (zCDP budget: exact discrete Gaussian noise, L2
  sensitivity; an ``(epsilon, delta)`` budget is converted to ``rho`` by the inverse of Lemma
  2.9, so the release is then ``(epsilon, delta)``-DP), under the declared neighbouring relation (``"add_remove"`` by default,
  ``"replace"``, ``"replace_update"`` or ``"user:k"``; exact sensitivities of docs/algorithms.md#lin-sensitivity, docs/algorithms.md#lin-e3 for Count Sketch under ``replace``). See
  :mod:`beam_dpsketch.sketches.linear.calibration`.
* Every query (point estimates, heavy hitters over **public** candidates, inner products, norms,
  totals) is post-processing of the released table and the public hash seed, so any number of
  queries costs nothing more ([ZQR+22, Section 3] and docs/algorithms.md#lin-e18). A released object is immutable: it
  cannot be updated or merged with exact sketches (``TypeError``), because the analysis covers a
  single release of a final state (docs/algorithms.md#lin-e18, [ZQR+22, Section 3]).
* Hash functions and seeds are public (docs/algorithms.md#lin-e18). Note: the library derives the ``d`` row
  hashes from one 128-bit MurmurHash3 by double hashing (docs/algorithms.md#hashing); docs/algorithms.md#lin-hashing prefers independent rows for the median analysis. Privacy does not depend on hashing.

Conditions the caller must meet ([ZQR+22, Section 3]): release the state once per budget charge, with a
fresh :class:`~beam_dpsketch.noise.NoiseStream` (distinct release id); weights limited to what
the relation assumes (unit updates, or at most ``k`` per user for ``"user:k"``); hash seed
chosen independently of the data.

The total weight ``N`` is published exactly only when the caller declares the replace-one model
(``neighbouring="replace"``), the model of Zhao et al. (Definition 2.3) in which ``N`` is a public
invariant. A release that is merely *calibrated* for replacement (``publish_total=False``, e.g.
a pane whose boundaries shift between neighbouring inputs, so its size is not invariant) keeps
``N`` private: :meth:`PrivateCountMinSketch.total` then estimates it from the noisy table.
"""

from __future__ import annotations

import abc
import math
from typing import Any, ClassVar, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_bool, check_int, check_probability, check_real
from beam_dpsketch.hashing import (
    MAX_DEPTH,
    MAX_WIDTH,
    canonical_keys,
    check_seed,
    encode_key,
    hash_keys,
    row_buckets,
    row_signs,
)
from beam_dpsketch.privacy.budget import PrivacyBudget
from beam_dpsketch.sketches.linear.base import binomial_upper_tail
from beam_dpsketch.sketches.linear.calibration import (
    NEIGHBOURING_RELATIONS,
    LinearCalibration,
    calibrate_linear,
    check_publish_total,
    check_stream,
    draw_noise,
    linear_sensitivity,
    parse_neighbouring,
    user_level,
)
from beam_dpsketch.sketches.linear.countmedian import CountMedianSketch, median_row_tail
from beam_dpsketch.sketches.linear.countmin import CountMinSketch
from beam_dpsketch.sketches.linear.countsketch import CountSketch
from beam_dpsketch.sketches.linear.merged import (
    MergedCalibration,
    calibration_from_dict,
    check_same,
)

__all__ = [
    "NEIGHBOURING_RELATIONS",
    "PRIVATE_LINEAR_SKETCHES",
    "LinearCalibration",
    "PrivateCountMedianSketch",
    "PrivateCountMinSketch",
    "PrivateCountSketch",
    "check_confidence",
    "linear_sensitivity",
    "linear_shape",
    "parse_neighbouring",
    "user_level",
]

_CHUNK = 1 << 16


def linear_shape(gamma: float, beta: float, preset: str = "paper") -> tuple[int, int]:
    """``(width, depth)`` for accuracy ``gamma`` and failure probability ``beta`` ([ZQR+22, Section 2.2]).

    ``preset``: ``"paper"`` (Algorithm 3: ``w = ceil(1/gamma)``, ``d = ceil(ln(2/beta))``),
    ``"reference_code"`` (``ceil(1/gamma)``, ``ceil(ln(1/beta))``) or ``"textbook"``
    (Cormode-Muthukrishnan: ``ceil(e/gamma)``, ``ceil(ln(1/beta))``; the exact form of the
    ``gamma N`` guarantee, docs/algorithms.md#lin-e4).
    """
    g = check_probability(gamma, "gamma")
    b = check_probability(beta, "beta")
    if preset == "paper":
        return math.ceil(1.0 / g), max(1, math.ceil(math.log(2.0 / b)))
    if preset == "reference_code":
        return math.ceil(1.0 / g), max(1, math.ceil(math.log(1.0 / b)))
    if preset == "textbook":
        return math.ceil(math.e / g), max(1, math.ceil(math.log(1.0 / b)))
    raise ValueError(f"preset must be 'paper', 'reference_code' or 'textbook', got {preset!r}")


def check_confidence(confidence: Any) -> float:
    """A confidence level in ``(0, 1)``: ``TypeError`` for a non-number, ``ValueError`` outside."""
    return check_probability(confidence, "confidence")


def _smallest_level(enough: Any, top: float) -> float:
    """Smallest ``t`` in ``[0, top]`` with ``enough(t)`` (to a relative 1e-4, rounded up).

    ``enough`` is monotone (false, then true) and true at ``top``.
    """
    if enough(0.0):
        return 0.0
    lo, hi = 0.0, float(top)
    while hi - lo > 1e-4 * max(1.0, hi):
        mid = (lo + hi) / 2.0
        if enough(mid):
            hi = mid
        else:
            lo = mid
    return hi


def _released_error(name: str, what: str) -> TypeError:
    return TypeError(
        f"{name} is a released (noisy) sketch and cannot be {what}: its noise is calibrated for "
        "ONE release of a final state ([ZQR+22, Section 3] and docs/algorithms.md#lin-e18). Adding data or an "
        "exact sketch to it would publish new information without fresh noise or accounting, "
        "and two releases of one running sketch cancel each other's noise. Update or merge the "
        "exact sketch instead and release it again with a fresh noise stream and budget; sum "
        "independently released sketches with merge_released."
    )


def _top_order(keys: list[Any], values: np.ndarray, top: int | None) -> list[int]:
    """Indices sorted by value descending, ties by canonical key order, truncated to ``top``."""
    n = len(keys)
    idx = np.arange(n)
    if top is not None and top < n:
        # Keep everything tied with the top-th value, then order exactly.
        kth = np.partition(-values, top - 1)[top - 1]
        idx = np.flatnonzero(-values <= kth)
    ordered = sorted(idx.tolist(), key=lambda i: (-values[i], encode_key(keys[i])))
    return ordered if top is None else ordered[:top]


class _PrivateLinearSketch(abc.ABC):
    """Shared machinery of :class:`PrivateCountMinSketch` and :class:`PrivateCountSketch`."""

    KIND: ClassVar[str] = ""
    EXACT: ClassVar[type] = object
    SKETCH_KIND: ClassVar[str] = ""
    SIGNED: ClassVar[bool] = False
    OFFSET: ClassVar[bool] = False

    __slots__ = ("width", "depth", "seed", "table", "calibration", "public_total")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            f"{type(self).__name__} objects come from {type(self).__name__}.release(sketch, "
            "budget, stream) or from_bytes(data), never from raw counters"
        )

    # ---------------------------------------------------------------- calibration and release

    @classmethod
    def _check_offset(cls, offset: Any) -> bool:
        """Whether a release adds the public offset ``ceil(E)`` (``None``: the class default)."""
        if offset is None:
            return cls.OFFSET
        if check_bool(offset, "offset") and not cls.OFFSET:
            raise ValueError(f"offset: {cls.__name__} has no offset (its noise is zero-mean)")
        return offset

    @classmethod
    def calibrate(
        cls,
        width: int,
        depth: int,
        budget: PrivacyBudget,
        *,
        neighbouring: str = "add_remove",
        beta: float = 0.01,
        beta_noise: float | None = None,
        paper_compat: bool = False,
        gamma: float | None = None,
        offset: bool | None = None,
        lattice: bool = False,
    ) -> LinearCalibration:
        """The calibration :meth:`release` would use for a ``depth x width`` sketch (no noise drawn).

        Useful at pipeline construction (reports, accounting). Parameters as in :meth:`release`.
        """
        with_offset = cls._check_offset(offset)
        width = check_int(width, "width", 1, MAX_WIDTH)
        depth = check_int(depth, "depth", 1, MAX_DEPTH)
        beta = check_probability(beta, "beta")
        bn = beta / 2.0 if beta_noise is None else check_probability(beta_noise, "beta_noise")
        if paper_compat and gamma is None:
            gamma = 1.0 / int(width)
        return calibrate_linear(
            cls.SKETCH_KIND,
            int(depth),
            budget,
            neighbouring=neighbouring,
            counters=int(width) * int(depth),
            beta_noise=bn,
            offset=with_offset,
            paper_compat=paper_compat,
            beta=beta,
            gamma=gamma,
            lattice=lattice,
        )

    @classmethod
    def release(
        cls,
        sketch: Any,
        budget: PrivacyBudget,
        stream: Any,
        *,
        neighbouring: str = "add_remove",
        beta: float = 0.01,
        beta_noise: float | None = None,
        paper_compat: bool = False,
        gamma: float | None = None,
        publish_total: bool | None = None,
        offset: bool | None = None,
        lattice: bool = False,
    ) -> Self:
        """Release ``sketch`` once: every cell gets independent noise (and the public offset).

        Parameters
        ----------
        sketch
            The exact, fully merged sketch (never modified).
        budget
            :class:`~beam_dpsketch.privacy.PrivacyBudget`: ``pure(eps)`` -> exact discrete
            Laplace with scale ``Delta_1 / eps``; ``zcdp(rho)`` -> exact discrete Gaussian with
            ``sigma = Delta_2 / sqrt(2 rho)``; ``approx(eps, delta)`` -> discrete Gaussian at
            ``rho = approx_to_zcdp(eps, delta)`` ([ZQR+22, Section 2.1], docs/algorithms.md#lin-strict).
        stream
            The release's :class:`~beam_dpsketch.noise.NoiseStream`; exactly ``depth * width``
            noise values are drawn whatever the data.
        neighbouring
            ``"add_remove"`` (default), ``"replace"`` (the paper's model), ``"replace_update"``
            or ``"user:k"`` (docs/algorithms.md#lin-sensitivity).
        beta, beta_noise
            The uniform noise bound ``E`` holds with probability ``>= 1 - beta_noise``
            (default ``beta / 2``, docs/algorithms.md#lin-strict).
        paper_compat
            **Reproduction only.** Algorithm 3 as printed ([ZQR+22, Algorithm 3]): ``sigma =
            sqrt(ln(2/beta)/rho)`` whatever the relation and the integer depth, offset ``E`` as
            printed with ``gamma`` (default ``1/width``). This under-noises Count Sketch under
            ``replace`` (docs/algorithms.md#lin-e3) and whenever ``depth > ln(2/beta)`` (docs/algorithms.md#lin-e13); the object's
            ``rho`` then reports the **effective** zCDP level for ``neighbouring``.
        gamma
            The paper's accuracy parameter (``paper_compat`` only).
        publish_total
            Whether the exact total weight ``N`` is part of the release. ``None`` (default):
            exactly when ``neighbouring="replace"``, i.e. when the caller declares the paper's
            replace-one model (Zhao et al., Definition 2.3), in which ``N`` is a public invariant.
            ``False``: ``N`` stays private whatever the relation; use it when the noise is
            calibrated for replacement but ``N`` is not public (e.g. a pane that can lose one
            element and gain another, or lose one only). ``True`` is accepted only with
            ``"replace"``.
        offset
            Whether every cell also gets the public constant ``ceil(E)``. ``None`` (default):
            the class default, i.e. Algorithm 3 as in [ZQR+22] (Count-Min: yes, so that its
            estimates never underestimate with probability ``>= 1 - beta_noise``, each estimate
            then carrying ``+offset``; Count Sketch: no). ``False`` releases ``C + Z`` only:
            the Count-Min estimate is then the minimum over the noisy rows, with no constant
            added. ``True`` is refused for Count Sketch.
        lattice
            Pure budgets (discrete Laplace): draw the noise on the lattice of
            :func:`~beam_dpsketch.sketches.linear.calibration.noise_lattice` (``g`` times the
            counters plus noise of scale ``g`` times larger, read in units of ``1 / g``; the
            same guarantee, docs/algorithms.md#lin-lattice), so that :meth:`error_bound`
            resolves the noise finer than one count. ``table`` then holds lattice steps;
            :attr:`cells` is the table in counts. Needs ``offset`` unset or ``False``.

        Returns
        -------
        The released object (immutable; integer counters).

        Raises
        ------
        ValueError
            If ``publish_total`` is not ``None`` or a bool, or is ``True`` under a relation
            other than ``"replace"`` (``N`` is then data that the noise does not cover).
        """
        if not isinstance(sketch, cls.EXACT):
            raise TypeError(
                f"{cls.__name__}.release needs an exact {cls.EXACT.__name__}, got "
                f"{type(sketch).__name__}"
            )
        stream = check_stream(stream)
        cal = cls.calibrate(
            sketch.width,
            sketch.depth,
            budget,
            neighbouring=neighbouring,
            beta=beta,
            beta_noise=beta_noise,
            paper_compat=paper_compat,
            gamma=gamma,
            offset=offset,
            lattice=lattice,
        )
        publish = check_publish_total(publish_total, cal.neighbouring)
        shape = (sketch.depth, sketch.width)
        noise = draw_noise(stream, cal.noise, cal.sampler_parameter(), shape[0] * shape[1])
        table = sketch.table * cal.lattice + noise.reshape(shape)
        if cal.offset:
            table += cal.offset
        public_total = int(sketch.total_weight) if publish else None
        return cls._build(sketch.width, sketch.depth, sketch.seed, table, cal, public_total)

    @classmethod
    def _build(
        cls,
        width: int,
        depth: int,
        seed: int,
        table: np.ndarray,
        cal: LinearCalibration,
        public_total: int | None,
    ) -> Self:
        obj = object.__new__(cls)
        obj.width, obj.depth, obj.seed = int(width), int(depth), int(seed)
        table = np.ascontiguousarray(table, dtype=np.int64)
        table.flags.writeable = False
        obj.table = table
        obj.calibration = cal
        obj.public_total = public_total
        return obj

    # ---------------------------------------------------------------- calibration metadata

    @property
    def cells(self) -> np.ndarray:
        """The released counters in counts (float64): ``table / calibration.lattice``."""
        if self.calibration.lattice == 1:
            return self.table.astype(np.float64)
        return self.table.astype(np.float64) / self.calibration.lattice

    @property
    def noise(self) -> str:
        """Noise distribution: ``"discrete_laplace"`` or ``"discrete_gaussian"``."""
        return self.calibration.noise

    @property
    def scale(self) -> float:
        """Laplace scale ``b`` or Gaussian ``sigma`` of every cell's noise."""
        return self.calibration.scale

    @property
    def sensitivity(self) -> float:
        """The L1 (Laplace) or L2 (Gaussian) sensitivity the noise is calibrated to."""
        return self.calibration.sensitivity

    @property
    def neighbouring(self) -> str:
        return self.calibration.neighbouring

    @property
    def epsilon(self) -> float | None:
        return self.calibration.epsilon

    @property
    def delta(self) -> float | None:
        return self.calibration.delta

    @property
    def rho(self) -> float | None:
        return self.calibration.rho

    @property
    def offset(self) -> int:
        """Public constant added to every cell (Count-Min ``ceil(E)``, else 0)."""
        return self.calibration.offset

    @property
    def noise_bound(self) -> float:
        """``E``: with probability ``>= 1 - beta_noise`` every cell's noise has ``|Z| <= E``."""
        return self.calibration.noise_bound

    @property
    def beta_noise(self) -> float:
        return self.calibration.beta_noise

    @property
    def noise_variance(self) -> float:
        """Exact variance of one cell's noise."""
        return self.calibration.noise_variance

    @property
    def paper_compat(self) -> bool:
        return self.calibration.paper_compat

    def epsilon_at(self, delta: float, method: str = "standard") -> float:
        """``epsilon`` of the implied ``(epsilon, delta)``-DP guarantee ([ZQR+22, Section 2.1, Lemma 2.9])."""
        return self.calibration.epsilon_at(delta, method)

    def describe(self) -> dict[str, Any]:
        """JSON-friendly calibration facts plus shape (for reports and Beam ``describe``).

        ``total_public`` says whether the exact total is part of the release (never its value).
        """
        out = self.calibration.to_dict()
        out.update(
            kind=self.KIND,
            width=self.width,
            depth=self.depth,
            seed=self.seed,
            total_public=self.public_total is not None,
        )
        return out

    # ---------------------------------------------------------------- refused operations

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise _released_error(type(self).__name__, "updated")

    def update_hashes(self, *args: Any, **kwargs: Any) -> None:
        raise _released_error(type(self).__name__, "updated")

    def merge(self, other: Any) -> None:
        raise _released_error(type(self).__name__, "merged")

    # ---------------------------------------------------------------- merging releases

    def merge_released(
        self, *others: Any, disjoint: bool = True, beta_noise: float | None = None
    ) -> Self:
        """Sum this release with other independently released sketches of the same kind.

        Post-processing of released tables ([ZQR+22, Section 2.2] linearity; the noise of the
        sum, derived here, in docs/algorithms.md#lin-merge-released): the result answers every query over
        the union of the data sets, with noise ``Z_1 + ... + Z_k`` per cell (variance
        ``sum_i Var(Z_i)``; ``sigma = sqrt(sum_i sigma_i^2)`` for Gaussian noise) and the
        uniform bound ``E_merged`` of
        :class:`~beam_dpsketch.sketches.linear.merged.MergedCalibration` (``sqrt(k) E`` for
        ``k`` equal Gaussian releases). A Count-Min table is re-centred: each input's public
        offset is subtracted and ``ceil(E_merged)`` added when every input carried one, so that
        ``0 <= f^ - f~ <= 2 E_merged`` holds again on the noise event.

        Guarantee: merging costs nothing. Each contributing data set keeps the guarantee it
        was released with; the merged object states the collection's guarantee: the largest
        of them under ``disjoint=True`` (the caller declares that a neighbouring change touches
        one data set; parallel composition), else their sum (:attr:`epsilon`, :attr:`rho`,
        ``calibration.describe_guarantee()``).

        Parameters
        ----------
        others
            One or more released sketches (single or merged) of the same class, ``width``,
            ``depth``, hash ``seed`` and neighbouring relation, with **independent** noise.
        disjoint
            Whether the contributing data sets are disjoint (see above).
        beta_noise
            Failure probability of the merged uniform bound (default: the smallest of the
            inputs').

        Raises
        ------
        ValueError
            Naming the parameter (``kind``, ``width``, ``depth``, ``seed``,
            ``neighbouring``) in which the releases differ; never a value from the data.
        """
        if not others:
            raise ValueError("merge_released needs at least one other released sketch")
        releases = (self, *others)
        check_same("kind", [getattr(r, "KIND", type(r).__name__) for r in releases])
        for name in ("width", "depth", "seed"):
            check_same(name, [getattr(r, name) for r in releases])
        check_same("neighbouring", [r.neighbouring for r in releases])
        cals = [r.calibration for r in releases]
        with_offset = all(c.offset > 0 for c in cals)
        cal = MergedCalibration.of(
            cals,
            disjoint=disjoint,
            counters=self.width * self.depth,
            beta_noise=beta_noise,
            offset=with_offset,
        )
        table = np.zeros((self.depth, self.width), dtype=np.int64)
        for r in releases:
            # Every table moves to the finest lattice, less its own public offset.
            step = cal.lattice // r.calibration.lattice
            table += (r.table - r.calibration.offset) * step
        table += cal.offset
        totals = [r.public_total for r in releases]
        public_total = None if None in totals else int(sum(totals))  # type: ignore[arg-type]
        return type(self)._build(self.width, self.depth, self.seed, table, cal, public_total)

    # ---------------------------------------------------------------- queries

    def _row_values_hashed(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        buckets = row_buckets(
            np.asarray(h1, np.uint64), np.asarray(h2, np.uint64), self.depth, self.width
        )
        values = np.take_along_axis(self.table, buckets, axis=1)
        if self.calibration.lattice > 1:
            values = values.astype(np.float64) / self.calibration.lattice
        if self.SIGNED:
            values = values * row_signs(np.asarray(h2, np.uint64), self.depth)
        return values

    def row_estimates(self, keys: Any) -> np.ndarray:
        """Each key's (signed) noisy counter in each row, in counts: array ``(depth, n)`` (int64;
        float64 for a release on a lattice)."""
        return self._row_values_hashed(*hash_keys(keys, self.seed))

    @abc.abstractmethod
    def _combine_rows(self, values: np.ndarray) -> np.ndarray:
        """Combine the per-row estimates ``(depth, n)`` into one estimate per key."""

    def estimate_hashes(self, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
        """Point estimates of keys given by their hashes (float64)."""
        h1 = np.asarray(h1, np.uint64)
        h2 = np.asarray(h2, np.uint64)
        out = np.empty(len(h1), dtype=np.float64)
        for start in range(0, len(h1), _CHUNK):
            stop = start + _CHUNK
            out[start:stop] = self._combine_rows(
                self._row_values_hashed(h1[start:stop], h2[start:stop])
            )
        return out

    def estimate(self, keys: Any, *, clamp_nonnegative: bool = False) -> np.ndarray:
        """Private point estimates of a batch of keys (Algorithm 2 on the noisy table, [ZQR+22, Section 3]).

        Vectorised over keys; float64. ``clamp_nonnegative=True`` clips at 0 (post-processing
        for display in the strict turnstile model, docs/algorithms.md#lin-e17; it biases Count Sketch).
        """
        est = self.estimate_hashes(*hash_keys(keys, self.seed))
        return np.maximum(est, 0.0) if clamp_nonnegative else est

    def heavy_hitters(
        self, candidates: Any, threshold: float | None = None, top: int | None = None
    ) -> list[tuple[Any, float]]:
        """Candidates whose private estimate is ``>= threshold``, best first ([ZQR+22, Section 3.1]).

        ``candidates`` must be a **public** set declared independently of the data (e.g. a
        side input): taking candidates from the private data is not post-processing and breaks
        the guarantee ([ZQR+22, Section 3.1], docs/algorithms.md#lin-e18). Duplicates are dropped. Results are
        ``(key, estimate)`` sorted by estimate descending, ties by canonical key order;
        ``top`` keeps the first ``top``.
        """
        if threshold is not None:
            check_real(threshold, "threshold", finite=False)
        if top is not None:
            top = check_int(top, "top")
        keys = list(dict.fromkeys(canonical_keys(candidates)))
        if not keys:
            return []
        est = self.estimate(keys)
        if threshold is not None:
            keep = np.flatnonzero(est >= float(threshold))
            keys = [keys[i] for i in keep.tolist()]
            est = est[keep]
        order = _top_order(keys, est, top)
        return [(keys[i], float(est[i])) for i in order]

    # ---------------------------------------------------------------- error bounds

    def noise_quantile(self, confidence: float = 0.95) -> float:
        """Bound on the noise part of one point estimate, from the public calibration only.

        For any one key fixed in advance, the estimate moves by at most ``max_r |Z_r|`` over its
        ``depth`` noisy counters (the minimum and the median are 1-Lipschitz in the largest
        coordinate change), and ``max_r |Z_r| <= noise_quantile(c)`` with probability ``>= c``
        (union bound over the ``depth`` counters, :func:`~.calibration.noise_tail_bound`).
        The public offset is not included (see :meth:`error_bound`).
        """
        beta = 1.0 - check_confidence(confidence)
        return self.calibration.tail_bound(self.depth, beta)

    def error_bound(self, confidence: float = 0.95) -> float:
        """Half-width ``B`` with ``|estimate(x) - f(x)| <= B`` with probability ``~ confidence``.

        Per point query, for any one key fixed in advance (not simultaneously for all keys),
        over the hash functions and the noise. In row ``r`` the key's counter holds ``f(x)``
        plus the (signed) weight of the other keys hashed to it plus the cell's noise; that
        error has the law of the content of a cell drawn at random from the row (each other key
        lands in the key's cell with the same probability ``1/width`` as in any fixed cell). The
        bound therefore reads the law of one row's error off the released cells themselves
        (collisions and noise together, heavy keys included) and combines ``depth`` independent
        draws of it exactly as the estimator does (median: binomial tail of the rows beyond
        ``t`` on each side; minimum: power of the row tail). It is post-processing of the
        released table and the public calibration: it costs no privacy. Coverage is the stated
        level up to the sampling error of ``depth * width`` cells, a key's own weight in its
        cells and the dependence of rows derived by double hashing
        (docs/algorithms.md#lin-error-bounds); measured at 94-96 % on word-frequency streams.
        """
        beta = 1.0 - check_confidence(confidence)
        cells = np.sort(self.cells.ravel())
        top = float(np.max(np.abs(cells))) + abs(self._estimate_shift()) + 1.0
        return _smallest_level(lambda t: self._error_tail(cells, t) <= beta, top)

    def _estimate_shift(self) -> float:
        """Public constant the estimator subtracts from its combination of noisy rows."""
        return 0.0

    @abc.abstractmethod
    def _error_tail(self, cells: np.ndarray, t: float) -> float:
        """``P(|error| > t)`` of one point query when a row's error has the law of ``cells``."""

    def total(self) -> float:
        """Total weight ``N`` (docs/algorithms.md#lin-extensions).

        When the release publishes it (declared replace-one model) the exact total is returned
        as is. Otherwise an unsigned table (Count-Min, Count-Median), each of whose rows sums to
        ``N`` before noise, gives the unbiased estimate ``mean_r sum_c (C[r, c] - offset)``,
        whose variance is :meth:`total_variance` (``width * noise_variance / depth``); a signed
        table (Count Sketch) has no estimator of it (``ValueError``).
        """
        if self.public_total is not None:
            return float(self.public_total)
        if self.SIGNED:
            raise ValueError(
                f"{type(self).__name__} cannot estimate the total weight: it is not published "
                "in this release and the signed table has no estimator of it"
            )
        row_sums = self.table.sum(axis=1, dtype=np.int64) - self.offset * self.width
        return float(row_sums.mean()) / self.calibration.lattice

    def total_variance(self) -> float:
        """Variance of :meth:`total` (0 when the total is public; unsigned tables only)."""
        if self.public_total is not None:
            return 0.0
        if self.SIGNED:
            raise ValueError(f"{type(self).__name__} has no estimator of the total weight")
        return self.width * self.noise_variance / self.depth

    # ---------------------------------------------------------------- identity and bytes

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return (self.width, self.depth, self.seed, self.calibration, self.public_total) == (
            other.width,
            other.depth,
            other.seed,
            other.calibration,
            other.public_total,
        ) and bool(np.array_equal(self.table, other.table))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        guarantee = f"eps={self.epsilon:g}" if self.rho is None else f"rho={self.rho:g}"
        return (
            f"{type(self).__name__}(width={self.width}, depth={self.depth}, seed={self.seed}, "
            f"{guarantee}, neighbouring={self.neighbouring!r}, noise={self.noise!r}, "
            f"scale={self.scale:.6g}, offset={self.offset})"
        )

    def memory_bytes(self) -> int:
        return int(self.table.nbytes) + 256

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`), kind ``KIND``."""
        params = {
            "width": self.width,
            "depth": self.depth,
            "seed": self.seed,
            "public_total": self.public_total,
            "calibration": self.calibration.to_dict(),
        }
        return serialization.dumps(self.KIND, params, {"table": self.table})

    @classmethod
    def from_bytes(cls, data: bytes) -> Self:
        """Inverse of :meth:`to_bytes`; ``SketchFormatError`` on malformed or foreign bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        req = serialization.require
        width, depth = req(params, "width", int), req(params, "depth", int)
        try:
            seed = check_seed(req(params, "seed", int))
            cal = calibration_from_dict(params.get("calibration"))
        except (TypeError, ValueError) as exc:
            raise err(f"invalid released sketch parameters: {exc}") from None
        if isinstance(cal, MergedCalibration) and cal.counters != width * depth:
            raise err("merged calibration does not cover the table's counters")
        if not (1 <= width <= MAX_WIDTH and 1 <= depth <= MAX_DEPTH):
            raise err("impossible width or depth")
        if not cls.OFFSET and cal.offset != 0:
            raise err("offset not allowed for this sketch kind")
        public_total = params.get("public_total")
        if public_total is not None and (
            not isinstance(public_total, int) or isinstance(public_total, bool)
        ):
            raise err("public_total must be an int or null")
        if public_total is not None and cal.neighbouring != "replace":
            raise err("public_total may be present only for the 'replace' relation")
        table = serialization.require_array(arrays, "table", "<i8", (depth, width))
        return cls._build(width, depth, seed, table, cal, public_total)

    def __reduce__(self):
        return (type(self).from_bytes, (self.to_bytes(),))


class PrivateCountMinSketch(_PrivateLinearSketch):
    """A released DP Count-Min sketch: exact counts + offset + independent noise per cell.

    Build it with :meth:`release` (Algorithm 3 of Zhao et al., private Count-Min, with the
    strict calibration of docs/algorithms.md#lin-strict). Cell ``(r, c)`` holds ``C[r, c] + offset + Z[r, c]``,
    ``offset = ceil(E)`` (a public constant; 0 when released with ``offset=False``, as
    ``DPFrequencies`` does, docs/algorithms.md#lin-offset) and ``Z`` i.i.d. exact discrete
    Laplace (pure budget) or discrete Gaussian (zCDP / approximate budget) noise. Every point
    estimate includes ``+offset``; :meth:`error_bound` states the per-estimate error.

    Guarantee: ``epsilon``-DP or ``rho``-zCDP (``(epsilon, delta)``-DP for an approximate
    budget) under :attr:`neighbouring`, for any number of queries (Theorem 3.1; [ZQR+22, Section 3] and docs/algorithms.md#lin-sensitivity and docs/algorithms.md#lin-strict). Utility ([ZQR+22, Theorems 3.1 and 3.2], docs/algorithms.md#lin-e4, docs/algorithms.md#lin-e16): with probability ``>= 1 - beta_noise``,
    for **all** keys simultaneously ``offset - E <= f^(x) - f~(x) <= offset + E`` where ``f~`` is
    the exact sketch's estimate, so ``f^ >= f~ >= f`` in the strict turnstile model: the private
    sketch never underestimates. Per key, ``f~(x) - f(x) <= e (N - f(x)) / width`` with
    probability ``>= 1 - exp(-depth)``.

    Count-Min needs ``f >= 0`` (strict turnstile) for these guarantees (docs/algorithms.md#lin-e17); use
    :class:`PrivateCountSketch` or :class:`PrivateCountMedianSketch` for general turnstile data. Inner products are not offered on
    Count-Min (docs/algorithms.md#lin-extensions: the offset and the min make them biased).
    """

    KIND = "PrivateCountMinSketch"
    EXACT = CountMinSketch
    SKETCH_KIND = "count-min"
    SIGNED = False
    OFFSET = True
    __slots__ = ()

    def _combine_rows(self, values: np.ndarray) -> np.ndarray:
        return values.min(axis=0).astype(np.float64) - self._estimate_shift()

    def _estimate_shift(self) -> float:
        # Without the public offset the minimum of the key's noisy counters is biased low by
        # the mean of the minimum of ``depth`` noise values (a public constant); subtracting
        # that (negative) mean centres the estimate on the exact sketch's minimum for a key
        # whose counters hold no collision. With the offset the paper's one-sided guarantee
        # (never below the count) is kept as printed.
        if self.offset or self.depth == 1:
            return 0.0
        return self.calibration.minimum_mean(self.depth)

    def _error_tail(self, cells: np.ndarray, t: float) -> float:
        n, shift = len(cells), self._estimate_shift()
        above = (n - np.searchsorted(cells, t + shift, side="right")) / n
        at_least = (n - np.searchsorted(cells, shift - t, side="left")) / n
        return float(above**self.depth + 1.0 - at_least**self.depth)


class PrivateCountSketch(_PrivateLinearSketch):
    """A released DP Count Sketch: exact signed counts + independent zero-mean noise per cell.

    Build it with :meth:`release` (Algorithm 3 of Zhao et al., private CountSketch, strict
    calibration of docs/algorithms.md#lin-strict; sensitivity ``2 sqrt(d)`` under ``replace``, docs/algorithms.md#lin-e3).

    Guarantee: ``epsilon``-DP or ``rho``-zCDP (``(epsilon, delta)``-DP for an approximate
    budget) under :attr:`neighbouring`, for any number of queries (Theorem 3.2; [ZQR+22, Section 3]).
    Utility: with probability ``>= 1 - beta_noise``, ``|f^(x) - f~(x)| <= E`` for all keys
    simultaneously (the median is 1-Lipschitz); estimates are unbiased over the hashes and the
    noise ([ZQR+22, Theorems 3.1 and 3.2]). Works in the general turnstile model. Estimates are float64 (the median
    of an even number of rows is the mean of the middle two).

    Extra post-processing queries (docs/algorithms.md#lin-extensions, CountSketch family only): :meth:`inner_product`,
    :meth:`squared_l2`, :meth:`l2_norm`, :meth:`squared_distance`.
    """

    KIND = "PrivateCountSketch"
    EXACT = CountSketch
    SKETCH_KIND = "count-sketch"
    SIGNED = True
    OFFSET = False
    __slots__ = ()

    def _combine_rows(self, values: np.ndarray) -> np.ndarray:
        return np.median(values, axis=0)

    def _error_tail(self, cells: np.ndarray, t: float) -> float:
        # The key's random sign makes each row's error symmetric: P(E > t) = P(|C| > t) / 2.
        # The median exceeds t only if at least ceil(depth/2) rows do (for an even depth the
        # mean of the middle two exceeds t only if the upper one does); same below -t.
        n = len(cells)
        beyond = (
            n - np.searchsorted(cells, t, side="right") + np.searchsorted(cells, -t, side="left")
        ) / n
        return 2.0 * binomial_upper_tail(self.depth, (self.depth + 1) // 2, beyond / 2.0)

    def _check_same_hashes(self, other: Any) -> None:
        if not isinstance(other, PrivateCountSketch):
            raise TypeError(
                f"inner products need another PrivateCountSketch, got {type(other).__name__}"
            )
        mine, theirs = (self.width, self.depth, self.seed), (other.width, other.depth, other.seed)
        if mine != theirs:
            raise ValueError(
                f"sketches must share (width, depth, seed) for inner products: {mine} vs {theirs}"
            )

    def inner_product(self, other: PrivateCountSketch) -> float:
        """Estimate of ``<f1, f2>``: ``median_r sum_c C1[r, c] C2[r, c]`` (docs/algorithms.md#lin-extensions).

        Both releases must have the same shape and seed and **independent** noise (distinct
        release ids); then each row sum is unbiased for the exact sketches' row inner product,
        with noise-induced variance
        ``v2 ||C1~[r]||^2 + v1 ||C2~[r]||^2 + width v1 v2`` (``v`` the noise variances).
        """
        self._check_same_hashes(other)
        a, b = self.cells, other.cells
        return float(np.median(np.einsum("rc,rc->r", a, b)))

    def squared_l2(self) -> float:
        """Estimate of ``||f||_2^2``: ``median_r (sum_c C[r, c]^2 - width * var)`` (docs/algorithms.md#lin-extensions).

        The subtraction removes the noise bias exactly (``var`` = :attr:`noise_variance`).
        May be negative for tiny inputs; see :meth:`l2_norm`.
        """
        t = self.cells
        rows = np.einsum("rc,rc->r", t, t) - self.width * self.noise_variance
        return float(np.median(rows))

    def l2_norm(self) -> float:
        """``sqrt(max(0, squared_l2()))`` (post-processing)."""
        return math.sqrt(max(0.0, self.squared_l2()))

    def squared_distance(self, other: PrivateCountSketch) -> float:
        """Estimate of ``||f1 - f2||_2^2`` from ``D = C1 - C2`` (docs/algorithms.md#lin-extensions).

        ``median_r (sum_c D[r, c]^2 - width (var1 + var2))``; needs independent noise.
        """
        self._check_same_hashes(other)
        diff = self.cells - other.cells
        rows = np.einsum("rc,rc->r", diff, diff) - self.width * (
            self.noise_variance + other.noise_variance
        )
        return float(np.median(rows))


class PrivateCountMedianSketch(_PrivateLinearSketch):
    """A released DP Count-Median sketch: exact Count-Min counts + independent zero-mean noise.

    The Count-Min table queried with the median of the key's noisy counters ([CM05], the point
    query for general turnstile data), released as [ZQR+22, Algorithm 3] releases Count Sketch:
    every cell gets independent zero-mean noise and no offset. The table is a Count-Min table,
    so the noise is calibrated to the Count-Min sensitivities (``sqrt(d)`` under add/remove,
    ``sqrt(2d)`` under replace-one, docs/algorithms.md#lin-sensitivity); Count-Median is not in
    [ZQR+22], and its release is derived here from Algorithm 3 and the sensitivity table
    (docs/algorithms.md#lin-count-median).

    Guarantee: ``epsilon``-DP or ``rho``-zCDP (``(epsilon, delta)``-DP for an approximate
    budget) under :attr:`neighbouring`, for any number of queries: the release is the Gaussian
    or Laplace mechanism on the linear map ``f -> C`` and every query is post-processing, as in
    [ZQR+22, Theorem 3.1]. Utility: with probability ``>= 1 - beta_noise``,
    ``|f^(x) - f~(x)| <= E`` for all keys simultaneously (the median is 1-Lipschitz in the
    largest coordinate change), where ``f~`` is the exact sketch's median. Per key, the exact
    median errs by more than ``t`` with probability at most
    ``P(Binomial(d, ||f||_1 / (width t)) >= ceil(d/2))``
    (:meth:`~beam_dpsketch.sketches.linear.countmedian.CountMedianSketch.error_bound`), in the
    general turnstile model. :meth:`error_bound` states the per-estimate error of hashing and
    noise together from the released cells. Estimates are float64 (the median of an even number
    of rows is the mean of the middle two).

    When to use it: general turnstile data (negative frequencies), where Count-Min's minimum is
    no longer an upper bound (docs/algorithms.md#lin-e17). Its L2 sensitivity under replace-one
    is ``sqrt(2d)`` against Count Sketch's ``2 sqrt(d)`` (a zCDP budget then gets ``sqrt(2)``
    times less noise), and its rows sum to the total weight (:meth:`total`). On non-negative data
    its collisions push estimates up, where Count Sketch's cancel on average.
    """

    KIND = "PrivateCountMedianSketch"
    EXACT = CountMedianSketch
    SKETCH_KIND = "count-median"
    SIGNED = False
    OFFSET = False
    __slots__ = ()

    def _combine_rows(self, values: np.ndarray) -> np.ndarray:
        return np.median(values, axis=0)

    def _error_tail(self, cells: np.ndarray, t: float) -> float:
        # A row's error has the law of a random cell (collisions of either sign and noise). The
        # median is above t only if at least ceil(depth/2) rows are, and below -t likewise;
        # unsigned collisions make the two sides differ, so each is read off the cells.
        n = len(cells)
        above = (n - np.searchsorted(cells, t, side="right")) / n
        below = np.searchsorted(cells, -t, side="left") / n
        return float(median_row_tail(self.depth, above) + median_row_tail(self.depth, below))


#: The released linear sketch classes by sketch kind (``SKETCH_KIND``).
PRIVATE_LINEAR_SKETCHES: dict[str, type[_PrivateLinearSketch]] = {
    cls.SKETCH_KIND: cls
    for cls in (PrivateCountMinSketch, PrivateCountSketch, PrivateCountMedianSketch)
}
