"""The noise law and the guarantee of a sum of independently released DP linear sketches.

Linear sketches merge by cell-wise addition ([ZQR+22, Section 2.2]): the sum of the exact
sketches of two data sets is the exact sketch of their union. When each data set was already
**released** with its own noise, the sum of the released tables is the exact sketch of the union
plus the sum of the independent noise tables. This module states what that sum is:

* **Noise.** Cell ``(r, c)`` carries ``Z_1 + ... + Z_k`` (one independent value per release),
  of variance ``sum_i Var(Z_i)``; with discrete Gaussian noise the standard deviation is
  ``sigma = sqrt(sum_i sigma_i^2)``. The uniform bound ``E`` over all counters is the Chernoff
  bound of the sum (union bound over the counters): for discrete Gaussians it is
  ``sqrt(sum_i sigma_i^2) sqrt(2 ln(2 n / beta_noise))``, i.e. ``sqrt(k) E`` for ``k`` equal
  releases (each discrete Gaussian is ``sigma``-subgaussian, Canonne, Kamath and Steinke 2020,
  Corollary 9); discrete Laplace terms enter through their exact moment generating function.
* **Count-Min offset.** Each released Count-Min table may carry its public offset
  ``ceil(E_i)``; the merged table subtracts ``sum_i ceil(E_i)`` and adds ``ceil(E_merged)``, so
  the one-sided guarantee ``0 <= f^ - f~ <= 2 E_merged`` holds again on the noise event. Both
  constants are public, so the re-centring is post-processing.
* **Privacy.** Summing is post-processing of released objects: it costs nothing. Each
  contributing data set keeps the guarantee it was released with. Under a declaration that the
  data sets are **disjoint** (a neighbouring change touches one of them), the collection is
  ``max_i`` of the guarantees (parallel composition); otherwise a record may sit in several of
  them, and the guarantee is the **sum** (sequential composition: ``sum epsilon_i``,
  ``sum delta_i``, ``sum rho_i``).

The noise and re-centring formulas are derived here from [ZQR+22]'s linearity (the paper
releases one sketch); see docs/algorithms.md#lin-merge-released.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from beam_dpsketch.checks import check_bool, check_probability
from beam_dpsketch.privacy.budget import zcdp_to_epsilon
from beam_dpsketch.sketches.linear.calibration import (
    NOISE_DISCRETE_GAUSSIAN,
    NOISE_DISCRETE_LAPLACE,
    LinearCalibration,
    noise_minimum_mean,
    noise_pmf,
)

__all__ = [
    "Guarantee",
    "MergedCalibration",
    "calibration_from_dict",
    "check_same",
    "combine_guarantees",
    "flatten_noise",
    "guarantee_text",
    "merge_released",
]

#: ``(budget_kind, epsilon, delta, rho)`` of one release, as its calibration states it.
Guarantee = tuple[str, float | None, float | None, float | None]

# Above this many support points the law of a sum is replaced by the normal law of the same
# variance for the mean of a minimum (its scale is then over 10^4).
_MAX_SUPPORT = 1 << 20


def check_same(parameter: str, values: Sequence[Any], *, show: bool = True) -> None:
    """Refuse a merge unless every released sketch has the same public ``parameter``.

    The message names the parameter (and, with ``show``, its public values); never data.
    """
    distinct = list(dict.fromkeys(values))
    if len(distinct) > 1:
        seen = f" (got {', '.join(repr(v) for v in distinct)})" if show else ""
        raise ValueError(
            f"merge_released: the released sketches differ in {parameter}{seen}; only sketches "
            f"released with the same {parameter} can be summed"
        )


def combine_guarantees(guarantees: Sequence[Guarantee], disjoint: bool) -> Guarantee:
    """Guarantee of a collection of releases of ``k`` data sets (post-processing aside).

    ``disjoint=True``: a neighbouring change touches one data set, so the collection has the
    largest single guarantee (parallel composition). ``disjoint=False``: one record may be in
    every data set, so the guarantees add (sequential composition). zCDP levels combine as
    ``rho``; a pure ``epsilon`` counts as ``epsilon^2 / 2``-zCDP when it meets a zCDP release
    (Bun and Steinke 2016, Proposition 1.4); ``(epsilon, delta)`` are combined when every
    release states them.
    """
    check_bool(disjoint, "disjoint")
    agg = max if disjoint else math.fsum
    kinds = {g[0] for g in guarantees}
    kind = kinds.pop() if len(kinds) == 1 else "zcdp"
    rhos = [g[3] for g in guarantees]
    rho: float | None = None
    if any(r is not None for r in rhos):
        rho = float(
            agg(
                [
                    r if r is not None else float(g[1]) ** 2 / 2.0
                    for g, r in zip(guarantees, rhos, strict=True)
                ]
            )
        )
    eps: float | None = None
    delta: float | None = None
    if all(g[1] is not None for g in guarantees):
        eps = float(agg([float(g[1]) for g in guarantees]))  # type: ignore[arg-type]
        delta = float(agg([float(g[2] or 0.0) for g in guarantees]))
    return kind, eps, delta, rho


def guarantee_text(guarantee: Guarantee, disjoint: bool, count: int) -> str:
    """One sentence stating a merged guarantee per contributing data set (public values only)."""
    kind, eps, delta, rho = guarantee
    parts = []
    if eps is not None:
        parts.append(f"(eps={eps:g}, delta={delta:g})-DP" if delta else f"eps={eps:g} (pure DP)")
    if rho is not None:
        parts.append(f"rho={rho:g} (zCDP)")
    how = (
        "declared disjoint, so the largest single guarantee holds (parallel composition)"
        if disjoint
        else "they may overlap, so the sum of the guarantees holds (sequential composition)"
    )
    return (
        f"{' and '.join(parts)} for the {count} contributing data sets together: {how}; each "
        "data set keeps the guarantee it was released with, and merging adds no privacy cost"
    )


def flatten_noise(calibration: Any) -> tuple[LinearCalibration, ...]:
    """The single-release noise laws a (possibly merged) calibration is the sum of."""
    if isinstance(calibration, MergedCalibration):
        return calibration.parts
    return (calibration,)


def _guarantee_of(calibration: Any) -> Guarantee:
    c = calibration
    return (c.budget_kind, c.epsilon, c.delta, c.rho)


def _log_mgf(parts: Sequence[LinearCalibration], lam: float) -> float:
    """``log E[exp(lam S)]`` (an upper bound for discrete Gaussian terms) of the sum ``S``."""
    total = 0.0
    for p in parts:
        if p.noise == NOISE_DISCRETE_GAUSSIAN:
            # Discrete Gaussian of parameter sigma: E[e^(t Z)] <= e^(t^2 sigma^2 / 2).
            total += lam * lam * p.scale * p.scale / 2.0
            continue
        # Discrete Laplace in steps of 1 / g with ratio a = exp(-1 / (scale g)):
        # E[e^(t Z)] = (1 - a)^2 / ((1 - a e^t)(1 - a e^-t)) at t = lam / g.
        g = p.lattice
        t = lam / g
        a = math.exp(-1.0 / (p.scale * g))
        up = 1.0 - a * math.exp(t)
        if up <= 0.0:
            return math.inf
        total += 2.0 * math.log1p(-a) - math.log(up) - math.log1p(-a * math.exp(-t))
    return total


def sum_tail_bound(parts: Sequence[LinearCalibration], counters: int, beta: float) -> float:
    """``E`` with ``P(max over counters |S| > E) <= beta`` for the sum ``S`` of ``parts``.

    Chernoff bound ``P(S > t) <= exp(K(lam) - lam t)`` on each side, union bound over the
    counters: ``E = min_lam (K(lam) + ln(2 n / beta)) / lam``. For discrete Gaussians only the
    minimum is ``sqrt(sum sigma_i^2) sqrt(2 ln(2 n / beta))``.
    """
    n = int(counters)
    if n < 1:
        raise ValueError(f"counters must be >= 1, got {counters!r}")
    beta = check_probability(beta, "beta")
    log_term = math.log(2.0 * n / beta)
    if all(p.noise == NOISE_DISCRETE_GAUSSIAN for p in parts):
        return math.sqrt(math.fsum(p.scale * p.scale for p in parts)) * math.sqrt(2.0 * log_term)
    # lam must stay below 1 / scale of every Laplace term (its moment generating function).
    top = min(1.0 / p.scale for p in parts if p.noise == NOISE_DISCRETE_LAPLACE) * (1 - 1e-12)

    def level(lam: float) -> float:
        return (_log_mgf(parts, lam) + log_term) / lam

    # level is quasi-convex on (0, top): its derivative's numerator lam K' - K - L grows.
    lo, hi = top * 1e-9, top
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = level(a), level(b)
    for _ in range(200):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = level(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = level(b)
    return float(min(fa, fb))


@functools.lru_cache(maxsize=32)
def _sum_pmf(
    parts: tuple[LinearCalibration, ...], lattice: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """Support (in counts) and mass of the sum of ``parts`` on the lattice ``1 / lattice``.

    Cached: every query of a merged Count-Min without offset reads the mean of the minimum.
    """
    pmf = np.ones(1)
    low = 0
    for p in parts:
        step = lattice // p.lattice
        law = noise_pmf(p.noise, p.scale * p.lattice)
        if law is None:
            return None
        k, mass = law
        spread = np.zeros((len(mass) - 1) * step + 1)
        spread[::step] = mass
        if len(pmf) + len(spread) > _MAX_SUPPORT:
            return None
        pmf = np.convolve(pmf, spread)
        low += int(k[0]) * step
    support = (low + np.arange(len(pmf), dtype=np.float64)) / lattice
    mass = pmf / pmf.sum()
    support.flags.writeable = mass.flags.writeable = False  # shared by the cache
    return support, mass


@dataclass(frozen=True)
class MergedCalibration:
    """Public calibration facts of a sum of released linear sketches (all safe to publish).

    It answers the questions a single release's
    :class:`~beam_dpsketch.sketches.linear.calibration.LinearCalibration` answers (noise
    variance, uniform bound, tail bounds, mean of a minimum), for the sum of the noise laws
    in :attr:`parts`, so every query of a released sketch works on a merged one.

    Attributes
    ----------
    parts
        The single-release calibrations whose independent noise the merged cells add up.
    contributions
        ``(budget_kind, epsilon, delta, rho)`` of each merged input (an input that is itself
        a merge contributes its combined guarantee).
    disjoint
        The caller's declaration that the contributing data sets are disjoint.
    counters
        Counters covered by the uniform bound :attr:`noise_bound`.
    beta_noise
        Failure probability of the uniform bound.
    offset
        Public constant in every merged cell (Count-Min: ``ceil(noise_bound)`` when every input
        carried its offset; otherwise 0).
    lattice
        Lattice steps per count of the merged table (the finest of the inputs').
    """

    parts: tuple[LinearCalibration, ...]
    contributions: tuple[Guarantee, ...]
    disjoint: bool
    counters: int
    beta_noise: float
    offset: int = 0
    lattice: int = 1
    budget_kind: str = field(init=False)
    epsilon: float | None = field(init=False)
    delta: float | None = field(init=False)
    rho: float | None = field(init=False)

    def __post_init__(self) -> None:
        if len(self.parts) < 2 or not all(isinstance(p, LinearCalibration) for p in self.parts):
            raise ValueError("a merged calibration needs two or more single-release parts")
        check_same("neighbouring", [p.neighbouring for p in self.parts])
        kind, eps, delta, rho = combine_guarantees(self.contributions, self.disjoint)
        object.__setattr__(self, "budget_kind", kind)
        object.__setattr__(self, "epsilon", eps)
        object.__setattr__(self, "delta", delta)
        object.__setattr__(self, "rho", rho)

    @classmethod
    def of(
        cls,
        calibrations: Sequence[Any],
        *,
        disjoint: bool,
        counters: int,
        beta_noise: float | None = None,
        offset: bool = False,
    ) -> MergedCalibration:
        """The calibration of the sum of releases with ``calibrations`` (single or merged)."""
        check_bool(disjoint, "disjoint")
        parts = tuple(p for c in calibrations for p in flatten_noise(c))
        beta = (
            min(c.beta_noise for c in calibrations)
            if beta_noise is None
            else check_probability(beta_noise, "beta_noise")
        )
        lattice = max(p.lattice for p in parts)
        draft = cls(
            parts,
            tuple(_guarantee_of(c) for c in calibrations),
            disjoint,
            int(counters),
            float(beta),
            0,
            lattice,
        )
        if not offset:
            return draft
        if lattice != 1:
            raise ValueError("offset: a Count-Min offset needs integer noise (lattice 1)")
        return cls(
            draft.parts,
            draft.contributions,
            disjoint,
            draft.counters,
            draft.beta_noise,
            math.ceil(draft.noise_bound),
            1,
        )

    # ------------------------------------------------------------ what a single release states

    @property
    def noise(self) -> str:
        """The noise law of a cell: e.g. ``"2 x discrete_gaussian"`` (a sum of independent values)."""
        counts = Counter(p.noise for p in self.parts)
        return " + ".join(k if n == 1 else f"{n} x {k}" for k, n in counts.items())

    @property
    def neighbouring(self) -> str:
        return self.parts[0].neighbouring

    @property
    def scale(self) -> float:
        """``sqrt(sum scale_i^2)``: the merged ``sigma`` when every part is Gaussian."""
        return math.sqrt(math.fsum(p.scale * p.scale for p in self.parts))

    @property
    def noise_variance(self) -> float:
        """Exact variance of one merged cell's noise (in counts): ``sum_i Var(Z_i)``."""
        return math.fsum(p.noise_variance for p in self.parts)

    @property
    def sensitivity(self) -> float:
        """The largest sensitivity any part's noise was calibrated to."""
        return max(p.sensitivity for p in self.parts)

    @property
    def paper_compat(self) -> bool:
        return any(p.paper_compat for p in self.parts)

    @functools.cached_property
    def noise_bound(self) -> float:
        """``E_merged``: every merged counter's noise is within it w.p. ``>= 1 - beta_noise``."""
        return sum_tail_bound(self.parts, self.counters, self.beta_noise)

    def tail_bound(self, counters: int, beta: float) -> float:
        """Bound on ``counters`` merged noise values at once, w.p. ``>= 1 - beta`` (counts)."""
        return sum_tail_bound(self.parts, counters, beta)

    def abs_quantile(self, beta: float) -> float:
        """Smallest ``e`` with ``P(|S| > e) <= beta`` for one merged noise value (counts)."""
        beta = check_probability(beta, "beta")
        law = _sum_pmf(self.parts, self.lattice)
        if law is None:
            return self.tail_bound(1, beta)
        k, pmf = law
        absolute = np.abs(k)
        order = np.argsort(absolute, kind="stable")
        inside = np.cumsum(pmf[order])
        levels = np.unique(absolute)
        last = np.searchsorted(absolute[order], levels, side="right") - 1
        return float(levels[int(np.argmax(1.0 - inside[last] <= beta))])

    def minimum_mean(self, depth: int) -> float:
        """``E[min]`` of ``depth`` independent merged noise values (counts; a public constant)."""
        if depth == 1:
            return 0.0
        law = _sum_pmf(self.parts, self.lattice)
        if law is None:
            return noise_minimum_mean(depth, math.sqrt(self.noise_variance), "gaussian")
        k, pmf = law
        above = np.cumsum(pmf[::-1])[::-1] ** depth
        mass = above - np.append(above[1:], 0.0)
        return float(math.fsum((k * mass).tolist()))

    def sampler_parameter(self) -> Any:
        raise TypeError("a merged release draws no noise: it is the sum of released tables")

    def epsilon_at(self, delta: float, method: str = "standard") -> float:
        """``epsilon`` of the implied ``(epsilon, delta)``-DP guarantee of the collection."""
        if self.rho is None:
            return float(self.epsilon)  # type: ignore[arg-type]
        return zcdp_to_epsilon(self.rho, delta, method)

    def describe_guarantee(self) -> str:
        """The merged guarantee per contributing data set, in one sentence."""
        guarantee = (self.budget_kind, self.epsilon, self.delta, self.rho)
        return guarantee_text(guarantee, self.disjoint, len(self.contributions))

    # ------------------------------------------------------------ bytes

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly dict: the parts and the declaration, plus the derived public facts."""
        return {
            "merged": True,
            "parts": [p.to_dict() for p in self.parts],
            "contributions": [list(c) for c in self.contributions],
            "disjoint": self.disjoint,
            "counters": self.counters,
            "beta_noise": self.beta_noise,
            "offset": self.offset,
            "lattice": self.lattice,
            "noise": self.noise,
            "neighbouring": self.neighbouring,
            "scale": self.scale,
            "noise_variance": self.noise_variance,
            "noise_bound": self.noise_bound,
            "budget_kind": self.budget_kind,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "rho": self.rho,
        }

    @classmethod
    def from_dict(cls, data: Any) -> MergedCalibration:
        """Inverse of :meth:`to_dict`; ``ValueError`` on anything malformed or inconsistent."""
        if not isinstance(data, dict) or data.get("merged") is not True:
            raise ValueError("merged calibration must be a dict marked merged")
        parts, contributions = data.get("parts"), data.get("contributions")
        if not isinstance(parts, list) or not isinstance(contributions, list):
            raise ValueError("merged calibration needs lists of parts and contributions")
        number = (int, float)
        guarantees = []
        for c in contributions:
            if (
                not isinstance(c, list)
                or len(c) != 4
                or c[0] not in ("pure", "approx", "zcdp")
                or not all(
                    v is None or (isinstance(v, number) and not isinstance(v, bool)) for v in c[1:]
                )
            ):
                raise ValueError("malformed merged contribution")
            guarantees.append(tuple(c))
        ints = [data.get(k) for k in ("counters", "offset", "lattice")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ints):
            raise ValueError("malformed merged calibration sizes")
        counters, offset, lattice = ints
        if counters < 1 or offset < 0 or not isinstance(data.get("disjoint"), bool):
            raise ValueError("malformed merged calibration fields")
        merged = cls(
            tuple(LinearCalibration.from_dict(p) for p in parts),
            tuple(guarantees),
            data["disjoint"],
            counters,
            check_probability(data.get("beta_noise"), "beta_noise"),
            offset,
            lattice,
        )
        if lattice != max(p.lattice for p in merged.parts) or offset not in (
            0,
            math.ceil(merged.noise_bound),
        ):
            raise ValueError("merged calibration offset or lattice inconsistent with its parts")
        return merged


def calibration_from_dict(data: Any) -> LinearCalibration | MergedCalibration:
    """A single-release or merged calibration from its dict (``ValueError`` if malformed)."""
    if isinstance(data, dict) and data.get("merged") is True:
        return MergedCalibration.from_dict(data)
    return LinearCalibration.from_dict(data)


def merge_released(
    sketches: Sequence[Any], *, disjoint: bool = True, beta_noise: float | None = None
) -> Any:
    """Sum two or more independently released DP sketches of one kind (no new privacy cost).

    Dispatches on the released class: every released linear sketch (Count-Min, Count Sketch,
    Count-Median, and merges of them) and the released quantile tree
    (:class:`~beam_dpsketch.sketches.quantiles.PrivateDyadicCountSketch`) define
    ``merge_released``. The result answers queries over the union of the data sets, with the
    noise and error bounds of the sum (see the module docstring) and the guarantee per
    contributing data set: each keeps its own; the object states the largest under
    ``disjoint=True`` (declared disjoint data sets, parallel composition), else the sum.

    Parameters
    ----------
    sketches
        Released sketches with the same kind, shape, hash seed and neighbouring relation, and
        independent noise (e.g. each read back with ``from_bytes``).
    disjoint
        The caller's declaration that no record is in two of the data sets.
    beta_noise
        Failure probability of the merged uniform noise bound (default: the inputs' smallest).

    Raises
    ------
    ValueError
        Fewer than two sketches, or releases that differ in a public parameter (the message
        names it: ``kind``, ``width``, ``depth``, ``seed``, ``neighbouring``, ...).
    TypeError
        An object that is not a released sketch.
    """
    items = list(sketches)
    if len(items) < 2:
        raise ValueError("merge_released needs two or more released sketches")
    check_same("kind", [getattr(s, "KIND", type(s).__name__) for s in items])
    if not callable(getattr(items[0], "merge_released", None)):
        raise TypeError(f"merge_released needs released DP sketches, got {type(items[0]).__name__}")
    return items[0].merge_released(*items[1:], disjoint=disjoint, beta_noise=beta_noise)
