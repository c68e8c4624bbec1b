"""The released (DP) Dyadic Count Sketch: per-level budget split, exact sensitivities.

Builds on :mod:`beam_dpsketch.sketches.quantiles.dyadic`; see its docstring for the structure. Paper:
Zhao et al., "Differentially Private Linear Sketches" (NeurIPS 2022), cited as
[ZQR+22, Section 4.2 and Eq. (2)]; deviations in docs/algorithms.md#linear-sketches.
"""

from __future__ import annotations

import math
import numbers
from fractions import Fraction
from typing import Any, Self

import numpy as np

from beam_dpsketch import serialization
from beam_dpsketch.checks import check_bool, check_choice, check_probability
from beam_dpsketch.privacy.budget import PrivacyBudget, approx_to_zcdp, zcdp_to_epsilon
from beam_dpsketch.sketches.linear.calibration import (
    LinearCalibration,
    calibrate_linear,
    check_budget,
    check_publish_total,
    check_stream,
    draw_noise,
    parse_neighbouring,
)
from beam_dpsketch.sketches.linear.merged import (
    MergedCalibration,
    calibration_from_dict,
    check_same,
    combine_guarantees,
)
from beam_dpsketch.sketches.quantiles.dyadic import DyadicCountSketch, DyadicLayout

__all__ = ["PrivateDyadicCountSketch"]


def _share(total: float, weight: Fraction, weight_sum: Fraction) -> float:
    """``total * weight / weight_sum`` as a float rounded **down** (shares never over-spend)."""
    exact = Fraction(total) * weight / weight_sum
    value = float(exact)
    while value > 0 and Fraction(value) > exact:
        value = math.nextafter(value, 0.0)
    if value <= 0:
        raise ValueError(
            "a level's budget share underflows to 0; use fewer levels or a larger budget"
        )
    return value


def _split_weights(split: Any, levels: int) -> tuple[Fraction, ...]:
    if isinstance(split, str):
        if split == "uniform":
            return tuple(Fraction(1) for _ in range(levels))
        raise ValueError(
            f"split must be 'uniform' or a sequence of {levels} weights, got {split!r}"
        )
    try:
        weights = list(split)
    except TypeError:
        raise ValueError(
            f"split must be 'uniform' or a sequence of {levels} weights, got {split!r}"
        ) from None
    if len(weights) != levels:
        raise ValueError(f"split must have one weight per level ({levels}), got {len(weights)}")
    out = []
    for w in weights:
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(float(w)):
            raise ValueError(f"split weights must be finite numbers > 0, got {w!r}")
        if float(w) <= 0:
            raise ValueError(f"split weights must be > 0 (every level is released), got {w!r}")
        out.append(Fraction(float(w)))
    return tuple(out)


class PrivateDyadicCountSketch(DyadicLayout):
    """A released DP Dyadic Count Sketch (DP-DCS, [ZQR+22, Section 4]).

    Build it with :meth:`release`. Every counter of every level gets independent exact discrete
    noise, once; ranks (:meth:`rank`, :meth:`rank_lt`) and quantiles (:meth:`quantile`,
    :meth:`quantiles`) are post-processing, so any number of them costs nothing more.

    Guarantee: ``epsilon``-DP (pure budget; discrete Laplace per level, L1 sensitivities) or
    ``rho``-zCDP (zCDP budget, or an ``(epsilon, delta)`` budget converted by the inverse of
    Lemma 2.9, then ``(epsilon, delta)``-DP; discrete Gaussian per level, L2 sensitivities),
    under :attr:`neighbouring` (docs/algorithms.md#lin-sensitivity). Whatever the layout
    (``branching``, ``exact_nodes``, ``leaf_bits``; docs/algorithms.md#lin-wide-range), one item
    adds its weight to exactly one node ``(x - lower) >> shifts[j]`` of every level ``j``. So an
    exact level's table changes by 1 in one entry (add/remove), by 1 in each of at most two
    entries (replace), by at most 2 in one entry (replace_update) or by at most ``k`` in total
    (user:k), and a sketched level changes in one counter per row in the same way: each level's
    sensitivity is the one below for its rows. One item touches every level, so the levels
    compose sequentially: level ``j`` gets the share ``w_j / sum(w)`` of the budget (``split``; the
    paper's equal split ``rho / L`` by default, [ZQR+22, Section 4.2]), and the shares add up to at most the
    budget. Per-level sensitivities are exact (docs/algorithms.md#lin-sensitivity with the level's rows): a sketched
    level is a Count Sketch (``2 sqrt(d)`` under ``replace``, docs/algorithms.md#lin-e3, not the paper's
    ``sqrt(2d)``); an exact level (docs/algorithms.md#lin-exact-levels) is one identity row (``1``, ``sqrt 2``, ``2`` or
    ``k`` in L2; ``1``, ``2``, ``2``, ``k`` in L1).

    Utility ([ZQR+22, Section 4.2, Eq. (2)] with docs/algorithms.md#lin-e9 corrected): with probability ``>= 1 - beta_noise`` every
    noise value at level ``j`` is within ``noise_bounds[j]``, so for all ``x`` simultaneously
    ``|R^(x) - R~(x)| <=`` :meth:`rank_noise_bound` ``(x)`` (``R~`` the exact sketch's rank);
    the paper's corrected bound is ``|R^(x) - R(x)| <= sqrt(L ln(L/gamma)) (N/w + E_L)``.
    """

    KIND = "PrivateDyadicCountSketch"
    __slots__ = (
        "calibrations",
        "budget_kind",
        "epsilon",
        "delta",
        "rho",
        "split",
        "beta_noise",
        "neighbouring",
        "public_total",
        "consistency",
        "consistent_cache",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise TypeError(
            "PrivateDyadicCountSketch objects come from PrivateDyadicCountSketch.release(sketch, "
            "budget, stream) or from_bytes(data), never from raw counters"
        )

    # ---------------------------------------------------------------- calibration and release

    @classmethod
    def calibrate(
        cls,
        sketch: DyadicCountSketch,
        budget: PrivacyBudget,
        *,
        neighbouring: str = "add_remove",
        split: Any = "uniform",
        beta_noise: float = 0.005,
        approx_noise: str = "gaussian",
    ) -> tuple[LinearCalibration, ...]:
        """Per-level calibrations :meth:`release` would use for ``sketch``'s layout (no noise).

        Level ``j``'s record holds its share of the budget (``epsilon`` or ``rho``), noise
        scale, sensitivity and ``noise_bound`` ``E_j`` (union bound over **all** the sketch's
        counters, so all levels together fail with probability ``<= beta_noise``).

        ``approx_noise`` applies to an ``(epsilon, delta)`` budget only: ``"gaussian"``
        (default) spends ``rho = approx_to_zcdp(epsilon, delta)`` with discrete Gaussian noise;
        ``"auto"`` uses discrete Laplace at ``epsilon`` instead (pure ``epsilon``-DP, which
        implies ``(epsilon, delta)``-DP for every ``delta``) whenever its per-level noise
        variances sum to less. The choice depends on public parameters only; with few levels
        (a large ``branching``) and small ``epsilon`` Laplace usually wins.
        """
        if not isinstance(sketch, DyadicCountSketch):
            raise TypeError(
                f"PrivateDyadicCountSketch needs an exact DyadicCountSketch, got "
                f"{type(sketch).__name__}"
            )
        budget = check_budget(budget)
        name, _ = parse_neighbouring(neighbouring)
        beta_noise = check_probability(beta_noise, "beta_noise")
        weights = _split_weights(split, sketch.levels)
        counters = sketch.n_sketched * sketch.depth * sketch.width + sketch.exact_offsets[-1]
        if budget.is_pure:
            total, kind = budget.epsilon, "pure"
        elif budget.kind == "zcdp":
            total, kind = budget.rho, "zcdp"
        else:
            total, kind = approx_to_zcdp(budget.epsilon, budget.delta), "zcdp"  # type: ignore[arg-type]
        check_choice(approx_noise, "approx_noise", ("gaussian", "auto"))
        out = cls._level_calibrations(sketch, total, kind, weights, name, counters, beta_noise)
        if approx_noise == "auto" and budget.kind == "approx":
            laplace = cls._level_calibrations(
                sketch, budget.epsilon, "pure", weights, name, counters, beta_noise
            )
            if sum(c.noise_variance for c in laplace) < sum(c.noise_variance for c in out):
                out = laplace
        return out

    @staticmethod
    def _level_calibrations(
        sketch: DyadicCountSketch,
        total: Any,
        kind: str,
        weights: tuple[Fraction, ...],
        name: str,
        counters: int,
        beta_noise: float,
    ) -> tuple[LinearCalibration, ...]:
        wsum = sum(weights, Fraction(0))
        out = []
        for j in range(sketch.levels):
            share = _share(total, weights[j], wsum)  # type: ignore[arg-type]
            level_budget = (
                PrivacyBudget.pure(share) if kind == "pure" else PrivacyBudget.zcdp(share)
            )
            exact = sketch.is_exact_level(j)
            out.append(
                calibrate_linear(
                    "count-min" if exact else "count-sketch",
                    1 if exact else sketch.depth,
                    level_budget,
                    neighbouring=name,
                    counters=counters,
                    beta_noise=beta_noise,
                )
            )
        return tuple(out)

    @classmethod
    def release(
        cls,
        sketch: DyadicCountSketch,
        budget: PrivacyBudget,
        stream: Any,
        *,
        neighbouring: str = "add_remove",
        split: Any = "uniform",
        beta_noise: float = 0.005,
        publish_total: bool | None = None,
        consistency: bool = False,
        approx_noise: str = "gaussian",
    ) -> Self:
        """Release ``sketch`` once with ``budget`` split across its levels ([ZQR+22, Section 4.2]).

        Parameters
        ----------
        sketch
            The exact, fully merged :class:`DyadicCountSketch` (never modified).
        budget
            ``pure(eps)``: level ``j`` gets ``eps_j`` and exact discrete Laplace of scale
            ``Delta1_j / eps_j``. ``zcdp(rho)``: ``rho_j`` and discrete Gaussian with
            ``sigma_j = Delta2_j / sqrt(2 rho_j)``. ``approx(eps, delta)``: as zCDP with
            ``rho = approx_to_zcdp(eps, delta)`` ([ZQR+22, Section 2.1]).
        stream
            The release's noise stream; the number of draws depends on the layout only.
        neighbouring
            ``"add_remove"`` (default), ``"replace"``, ``"replace_update"`` or ``"user:k"``.
        split
            ``"uniform"`` (the paper's ``rho / L`` per level) or one positive weight per level
            (level 0 = leaves first); shares are rounded down so they never exceed the budget.
        beta_noise
            Failure probability of the uniform noise bounds ``noise_bounds``.
        publish_total
            Whether the exact total ``N`` is part of the release (then :meth:`total`, ranks at
            ``upper`` and the quantile targets ``ceil(q N)`` use it). ``None`` (default): exactly
            when ``neighbouring="replace"``, the caller's declaration of the paper's replace-one
            model (Zhao et al., Definition 2.3) in which ``N`` is a public invariant. ``False``:
            ``N`` stays private and is estimated from the noisy top level, e.g. when the noise
            is calibrated for replacement only because a pane can lose one element and gain
            another. ``True`` is accepted only with ``"replace"``.
        consistency
            Whether ranks and quantiles read the exact levels through their least-squares
            consistent estimates (:meth:`consistent_estimates`), and quantiles descend by
            fractions of each node's children (docs/algorithms.md#lin-wide-range). Post-processing of the noisy counts with public
            noise variances, so it costs no budget.
        approx_noise
            ``"gaussian"`` or ``"auto"``: see :meth:`calibrate`. When ``"auto"`` picks Laplace
            under an ``(epsilon, delta)`` budget, the release states the pure ``epsilon``-DP
            guarantee it then has.

        Raises
        ------
        ValueError
            If ``publish_total`` is not ``None`` or a bool, or is ``True`` under a relation
            other than ``"replace"``.
        """
        stream = check_stream(stream)
        cals = cls.calibrate(
            sketch,
            budget,
            neighbouring=neighbouring,
            split=split,
            beta_noise=beta_noise,
            approx_noise=approx_noise,
        )
        publish = check_publish_total(publish_total, cals[0].neighbouring)
        check_bool(consistency, "consistency")
        obj = object.__new__(cls)
        obj._init_layout(*sketch._config())
        sketched = sketch.sketched.copy()
        for j in range(sketch.n_sketched):
            cal = cals[j]
            z = draw_noise(stream, cal.noise, cal.sampler_parameter(), sketch.depth * sketch.width)
            sketched[j] += z.reshape(sketch.depth, sketch.width)
        exact = sketch.exact.copy()
        for j in range(sketch.n_sketched, sketch.levels):
            cal = cals[j]
            start = sketch.exact_offsets[j - sketch.n_sketched]
            stop = sketch.exact_offsets[j - sketch.n_sketched + 1]
            exact[start:stop] += draw_noise(
                stream, cal.noise, cal.sampler_parameter(), stop - start
            )
        name, _ = parse_neighbouring(neighbouring)
        if budget.is_pure or cals[0].rho is None:
            # Pure budget, or Laplace chosen for an (epsilon, delta) budget: epsilon-DP.
            guarantee = ("pure", float(budget.epsilon), 0.0, None)  # type: ignore[arg-type]
        elif budget.kind == "zcdp":
            rho = float(budget.rho)  # type: ignore[arg-type]
            dfc = budget.delta_for_conversion
            eps = None if dfc is None else zcdp_to_epsilon(rho, dfc)
            guarantee = ("zcdp", eps, dfc, rho)
        else:
            rho = approx_to_zcdp(budget.epsilon, budget.delta)  # type: ignore[arg-type]
            guarantee = ("approx", float(budget.epsilon), float(budget.delta), rho)  # type: ignore[arg-type]
        weights = _split_weights(split, sketch.levels)
        obj._finish(
            sketched,
            exact,
            cals,
            guarantee,
            [float(w) for w in weights],
            float(beta_noise),
            name,
            int(sketch.total_weight) if publish else None,
            consistency,
        )
        return obj

    def _finish(
        self, sketched, exact, cals, guarantee, split, beta_noise, name, public_total, consistency
    ):
        sketched = np.ascontiguousarray(sketched, dtype=np.int64)
        exact = np.ascontiguousarray(exact, dtype=np.int64)
        sketched.flags.writeable = False
        exact.flags.writeable = False
        self.sketched, self.exact = sketched, exact
        self.calibrations = tuple(cals)
        self.budget_kind, self.epsilon, self.delta, self.rho = guarantee
        self.split = tuple(split)
        self.beta_noise = beta_noise
        self.neighbouring = name
        self.public_total = public_total
        self.consistency = consistency
        self.consistent_cache = None

    # ---------------------------------------------------------------- consistency

    def consistent_estimates(self) -> tuple[np.ndarray, ...]:
        """Least-squares consistent counts of the exact levels (post-processing), finest first.

        The exact levels ``n_sketched .. levels-1`` form a tree whose finest level is treated
        as its leaves. Each node's released count ``y_v`` has the public noise variance
        ``V_j`` of its level; a node that lies wholly above ``upper`` holds no value of the
        domain, so its count is known to be 0 (variance 0). The classic two-pass estimator for
        trees (Hay, Rastogi, Miklau and Suciu, VLDB 2010, generalised to unequal variances)
        gives the unbiased, minimum-variance linear estimates whose children sum to their
        parent (and whose top level sums to the public total, when there is one):

        * up: ``z_v = (V_c y_v + V_v S_v) / (V_v + V_c)`` with ``S_v`` the sum of the
          children's ``z`` and ``V_c`` the sum of their variances; its variance is
          ``V_v V_c / (V_v + V_c)``;
        * down: each child gets ``z_c + (x_v - S_v) var(z_c) / V_c``.

        Only released counts and public parameters enter, so this is post-processing: it
        changes no guarantee. Returns one float64 array per exact level (finest first).
        """
        if self.consistent_cache is not None:
            return self.consistent_cache
        first = self.n_sketched
        b = self.branching
        z: list[np.ndarray] = []
        v: list[np.ndarray] = []
        for j in range(first, self.levels):
            count = self.level_nodes(j)
            start = self.exact_offsets[j - first]
            y = self.exact[start : start + count].astype(np.float64)
            var = np.full(count, float(self.calibrations[j].noise_variance))
            # Nodes starting at or above `size` cover no value of the domain: public zeros.
            outside = (np.arange(count, dtype=np.int64) << self.shifts[j]) >= self.size
            y[outside] = 0.0
            var[outside] = 0.0
            if z:
                kids_z = z[-1].reshape(count, -1).sum(axis=1)
                kids_v = v[-1].reshape(count, -1).sum(axis=1)
                both = var + kids_v
                safe = np.where(both > 0, both, 1.0)
                y = np.where(both > 0, (kids_v * y + var * kids_z) / safe, kids_z)
                var = np.where(both > 0, var * kids_v / safe, 0.0)
            z.append(y)
            v.append(var)
        x = [np.empty(0)] * len(z)
        top = z[-1].copy()
        if self.public_total is not None and v[-1].sum() > 0:
            top += (self.public_total - top.sum()) * v[-1] / v[-1].sum()
        x[-1] = top
        for i in range(len(z) - 1, 0, -1):
            kids_z = z[i - 1].reshape(len(z[i]), -1)
            kids_v = v[i - 1].reshape(len(z[i]), -1)
            total_v = kids_v.sum(axis=1)
            gap = x[i] - kids_z.sum(axis=1)
            share = np.where(
                total_v[:, None] > 0, kids_v / np.where(total_v > 0, total_v, 1.0)[:, None], 1.0 / b
            )
            x[i - 1] = (kids_z + gap[:, None] * share).ravel()
        out = tuple(a for a in x)
        for a in out:
            a.flags.writeable = False
        self.consistent_cache = out
        return out

    def _relative_descent(self) -> bool:
        return self.consistency

    def _node_estimates(self, level: int, nodes: np.ndarray) -> np.ndarray:
        if self.consistency and level >= self.n_sketched:
            return self.consistent_estimates()[level - self.n_sketched][nodes]
        return super()._node_estimates(level, nodes)

    # ---------------------------------------------------------------- metadata

    @property
    def noise(self) -> str:
        """``"discrete_laplace"`` or ``"discrete_gaussian"`` (same for every level)."""
        return self.calibrations[0].noise

    @property
    def level_scales(self) -> np.ndarray:
        """Noise scale (Laplace ``b_j`` or Gaussian ``sigma_j``) of each level."""
        return np.array([c.scale for c in self.calibrations])

    @property
    def level_sensitivities(self) -> np.ndarray:
        """Sensitivity (L1 or L2) of each level under :attr:`neighbouring`."""
        return np.array([c.sensitivity for c in self.calibrations])

    @property
    def level_budgets(self) -> np.ndarray:
        """Each level's share: ``epsilon_j`` (pure) or ``rho_j`` (zCDP / approx)."""
        return np.array(
            [c.epsilon if c.rho is None else c.rho for c in self.calibrations], dtype=float
        )

    @property
    def noise_bounds(self) -> np.ndarray:
        """``E_j``: w.p. ``>= 1 - beta_noise`` every level-``j`` noise value is within ``E_j``."""
        return np.array([c.noise_bound for c in self.calibrations])

    def epsilon_at(self, delta: float, method: str = "standard") -> float:
        """``epsilon`` of the implied ``(epsilon, delta)``-DP guarantee ([ZQR+22, Section 2.1, Lemma 2.9])."""
        if self.rho is None:
            return float(self.epsilon)  # type: ignore[arg-type]
        return zcdp_to_epsilon(self.rho, delta, method)

    def describe(self) -> dict[str, Any]:
        """JSON-friendly calibration facts (for reports and Beam ``describe``)."""
        return {
            "kind": self.KIND,
            "lower": self.lower,
            "upper": self.upper,
            "levels": self.levels,
            "sketched_levels": self.n_sketched,
            "width": self.width,
            "depth": self.depth,
            "noise": self.noise,
            "budget_kind": self.budget_kind,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
            "neighbouring": self.neighbouring,
            "split": list(self.split),
            "beta_noise": self.beta_noise,
            "level_scales": self.level_scales.tolist(),
            "level_sensitivities": self.level_sensitivities.tolist(),
            "noise_bounds": self.noise_bounds.tolist(),
            "total_public": self.public_total is not None,
            "branching": self.branching,
            "leaf_bits": self.leaf_bits,
            "consistency": self.consistency,
        }

    # ---------------------------------------------------------------- refused operations

    def _refuse(self, what: str) -> TypeError:
        return TypeError(
            f"PrivateDyadicCountSketch is a released (noisy) sketch and cannot be {what}: its "
            "noise covers ONE release of a final state ([ZQR+22, Section 3] and docs/algorithms.md#lin-e18). "
            "Update or merge the exact DyadicCountSketch and release it again with a fresh "
            "noise stream and budget; sum independently released trees with merge_released."
        )

    def update(self, *args: Any, **kwargs: Any) -> None:
        raise self._refuse("updated")

    def merge(self, other: Any) -> None:
        raise self._refuse("merged")

    # ---------------------------------------------------------------- merging releases

    def merge_released(
        self,
        *others: PrivateDyadicCountSketch,
        disjoint: bool = True,
        beta_noise: float | None = None,
    ) -> PrivateDyadicCountSketch:
        """Sum this released tree with other independently released trees of the same layout.

        Every level is a linear sketch ([ZQR+22, Section 4.2]), so the sum of released trees is
        the exact tree of the union of the data sets plus, per counter, the sum of the inputs'
        independent noise; ranks and quantiles then answer over the union. Level ``j``'s noise
        and bound follow :class:`~beam_dpsketch.sketches.linear.merged.MergedCalibration`
        (variance ``sum_i Var(Z_ij)``; the bound ``E_j`` a union bound over all the tree's
        counters, so all levels hold together w.p. ``>= 1 - beta_noise``; derived here,
        docs/algorithms.md#lin-merge-released).

        Guarantee: post-processing, no new cost. Each data set keeps the guarantee it was
        released with; the merged object states the largest of them under ``disjoint=True``
        (parallel composition), else their sum.

        Raises
        ------
        ValueError
            Naming the layout parameter (``lower``, ``upper``, ``width``, ``depth``, ``seed``,
            ``branching``, ...), ``split`` or ``neighbouring`` in which the releases differ.
        """
        if not others:
            raise ValueError("merge_released needs at least one other released tree")
        releases = (self, *others)
        check_same("kind", [getattr(r, "KIND", type(r).__name__) for r in releases])
        layouts = [r._layout_params() for r in releases]
        for name in layouts[0]:
            check_same(name, [layout[name] for layout in layouts])
        check_same("split", [r.split for r in releases], show=False)
        check_same("neighbouring", [r.neighbouring for r in releases])
        counters = int(self.sketched.size + self.exact.size)
        beta = min(r.beta_noise for r in releases) if beta_noise is None else beta_noise
        cals = [
            MergedCalibration.of(
                [r.calibrations[j] for r in releases],
                disjoint=disjoint,
                counters=counters,
                beta_noise=beta,
            )
            for j in range(self.levels)
        ]
        guarantee = combine_guarantees(
            [(r.budget_kind, r.epsilon, r.delta, r.rho) for r in releases], disjoint
        )
        totals = [r.public_total for r in releases]
        obj = object.__new__(type(self))
        obj._init_layout(*self._config())
        obj._finish(
            sum(r.sketched for r in releases),
            sum(r.exact for r in releases),
            cals,
            guarantee,
            list(self.split),
            float(cals[0].beta_noise),
            self.neighbouring,
            None if None in totals else int(sum(totals)),  # type: ignore[arg-type]
            self.consistency,
        )
        return obj

    # ---------------------------------------------------------------- queries

    def total(self) -> float:
        """``N^``: exact when published (declared replace-one model), else
        ``est_{L-1}(0) + est_{L-1}(1)`` from the noisy top level."""
        if self.public_total is not None:
            return float(self.public_total)
        return self._top_total()

    def rank_noise_bound(self, x: Any) -> np.ndarray | float:
        """Bound on ``|R^(x) - R~(x)|`` that holds for all ``x`` on the noise event (docs/algorithms.md#lin-oracles).

        ``sum`` of ``E_j`` over the nodes of the decomposition of ``[lower, x]`` (the
        ``popcount(x - lower + 1)`` dyadic nodes in the binary tree; the partial leaf, with
        ``leaf_bits > 0``, counts in proportion); ``level_nodes(top) E_top`` (or 0 when the
        total is public) for ``x >= upper``; 0 below. It bounds the raw noisy sums; the
        consistent estimates (``consistency=True``) are averages of such sums and are not
        covered by it.
        """
        off, scalar = self._query_offsets(x)
        bounds = self.noise_bounds
        out = np.zeros(len(off), dtype=np.float64)
        top = off >= self.size - 1
        top_nodes = self.level_nodes(self.levels - 1)
        out[top] = 0.0 if self.public_total is not None else top_nodes * bounds[-1]
        mid = np.flatnonzero((off >= 0) & ~top)
        out[mid] = self._prefix_terms(off[mid] + 1, lambda j, nodes: np.full(len(nodes), bounds[j]))
        return float(out[0]) if scalar else out

    # ---------------------------------------------------------------- identity and bytes

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        mine = (
            self._config(),
            self.calibrations,
            self.budget_kind,
            self.epsilon,
            self.delta,
            self.consistency,
        )
        theirs = (
            other._config(),
            other.calibrations,
            other.budget_kind,
            other.epsilon,
            other.delta,
            other.consistency,
        )
        rest = (self.rho, self.split, self.beta_noise, self.neighbouring, self.public_total)
        rest_o = (other.rho, other.split, other.beta_noise, other.neighbouring, other.public_total)
        return (
            mine == theirs
            and rest == rest_o
            and bool(np.array_equal(self.sketched, other.sketched))
            and bool(np.array_equal(self.exact, other.exact))
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        guarantee = f"eps={self.epsilon:g}" if self.rho is None else f"rho={self.rho:g}"
        return (
            f"PrivateDyadicCountSketch(lower={self.lower}, upper={self.upper}, "
            f"width={self.width}, depth={self.depth}, levels={self.levels}, {guarantee}, "
            f"neighbouring={self.neighbouring!r}, noise={self.noise!r})"
        )

    def to_bytes(self) -> bytes:
        """Versioned bytes (:mod:`beam_dpsketch.serialization`), kind ``PrivateDyadicCountSketch``."""
        params = self._layout_params()
        params.update(
            calibrations=[c.to_dict() for c in self.calibrations],
            budget_kind=self.budget_kind,
            epsilon=self.epsilon,
            delta=self.delta,
            rho=self.rho,
            split=list(self.split),
            beta_noise=self.beta_noise,
            neighbouring=self.neighbouring,
            public_total=self.public_total,
            consistency=self.consistency,
        )
        arrays = {"sketched": self.sketched, "exact": self.exact}
        return serialization.dumps(self.KIND, params, arrays)

    @classmethod
    def from_bytes(cls, data: bytes) -> PrivateDyadicCountSketch:
        """Inverse of :meth:`to_bytes`; ``SketchFormatError`` on malformed or foreign bytes."""
        err = serialization.SketchFormatError
        _, params, arrays = serialization.loads(data, expected_kind=cls.KIND)
        obj = object.__new__(cls)
        cls._layout_from_params(obj, params, arrays)
        raw = params.get("calibrations")
        if not isinstance(raw, list) or len(raw) != obj.levels:
            raise err("calibrations must be a list with one entry per level")
        try:
            cals = [calibration_from_dict(c) for c in raw]
            name, _ = parse_neighbouring(params.get("neighbouring"))
            beta_noise = check_probability(params.get("beta_noise"), "beta_noise")
            split = _split_weights(params.get("split"), obj.levels)
        except (TypeError, ValueError) as exc:
            raise err(f"invalid released dyadic sketch parameters: {exc}") from None
        kind = params.get("budget_kind")
        eps, dl, rho = params.get("epsilon"), params.get("delta"), params.get("rho")
        number = (int, float)
        if kind not in ("pure", "approx", "zcdp") or not all(
            v is None or (isinstance(v, number) and not isinstance(v, bool)) for v in (eps, dl, rho)
        ):
            raise err("malformed budget fields")
        if len({c.noise for c in cals}) != 1 or any(c.neighbouring != name for c in cals):
            raise err("inconsistent per-level calibrations")
        public_total = params.get("public_total")
        if public_total is not None and (
            not isinstance(public_total, int) or isinstance(public_total, bool)
        ):
            raise err("public_total must be an int or null")
        if public_total is not None and name != "replace":
            raise err("public_total may be present only for the 'replace' relation")
        consistency = params.get("consistency", False)
        if not isinstance(consistency, bool):
            raise err("consistency must be a bool")
        obj._finish(
            obj.sketched,
            obj.exact,
            cals,
            (kind, eps, dl, rho),
            [float(w) for w in split],
            beta_noise,
            name,
            public_total,
            consistency,
        )
        return obj

    def __reduce__(self):
        return (PrivateDyadicCountSketch.from_bytes, (self.to_bytes(),))
