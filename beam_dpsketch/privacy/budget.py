"""Privacy budgets: pure DP, approximate DP and zCDP, their conversions and composition.

A :class:`PrivacyBudget` is an immutable value in one of three *kinds*:

``pure``
    ``eps``-DP (``delta = 0``).
``approx``
    ``(eps, delta)``-DP. ``delta = 0`` is allowed and means the same guarantee as ``pure``.
``zcdp``
    ``rho``-zCDP (Bun and Steinke 2016), optionally with a ``delta_for_conversion`` used only to
    *report* the implied ``(eps, delta)``.

Conversions (every formula names its source):

* pure to zCDP: ``eps``-DP implies ``eps^2/2``-zCDP (Bun and Steinke 2016, Proposition 1.4; the
  sketch papers cited in this library only use the zCDP side).
* zCDP to approximate DP, the library default: ``eps = rho + 2 sqrt(rho ln(1/delta))`` ([ZQR+22, Section 2.1, Lemma 2.9]; [WWC24, Theorem 3.2]). It is the
  default because the papers quote it.
* zCDP to approximate DP, tighter, ``method="cks"``: the Renyi-DP conversion of Canonne, Kamath and
  Steinke (2020, Proposition 12 / Corollary 13), minimised over the Renyi order ``alpha > 1``. It
  is valid for every ``rho``-zCDP mechanism and never larger than the default. (The exact Gaussian
  privacy profile of [ZQR+22, Section 2.1] is tighter still but holds only for a Gaussian
  mechanism; it lives in :func:`beam_dpsketch.privacy.calibration.gaussian_epsilon`.)
* approximate DP to zCDP, the exact inverse of the default conversion:
  ``rho = eps^2 / (sqrt(ln(1/delta) + eps) + sqrt(ln(1/delta)))^2`` ([WWC24, Theorem 3.2], Eq. 1,
  in its numerically stable form; [ZQR+22, Section 2.1]).

Composition helpers implement basic sequential composition (sum of ``eps``, sum of ``delta``; sum
of ``rho``, [ZQR+22, Section 2.1, Lemma 2.7]), parallel composition over disjoint partitions
(the maximum; [WWC24, Theorem 3.2]) and group privacy ([LT23, Section 8, Lemma 1]; [WWC24, Section 3] for zCDP). Mixing approximate DP with zCDP needs a delta split; that is the job
of :class:`beam_dpsketch.privacy.accountant.PrivacyAccountant`, and the helpers here refuse it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..checks import check_int

__all__ = [
    "BudgetKind",
    "PrivacyBudget",
    "approx_to_zcdp",
    "check_delta",
    "check_epsilon",
    "check_rho",
    "compose_parallel",
    "compose_sequential",
    "group_privacy",
    "pure_to_zcdp",
    "zcdp_to_epsilon",
]

BudgetKind = Literal["pure", "approx", "zcdp"]
ConversionMethod = Literal["standard", "cks"]


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _as_float(value: object, name: str) -> float:
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    return float(value)


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    """Return ``epsilon`` as a float after checking ``0 < epsilon < inf``; raise naming ``name``."""
    eps = _as_float(epsilon, name)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {epsilon!r}")
    return eps


def check_delta(delta: float, name: str = "delta", *, allow_zero: bool = True) -> float:
    """Return ``delta`` after checking ``0 <= delta < 1`` (``0 < delta`` if ``allow_zero`` is False)."""
    d = _as_float(delta, name)
    if math.isnan(d) or d < 0.0 or d >= 1.0 or (d == 0.0 and not allow_zero):
        bound = "0 <= delta < 1" if allow_zero else "0 < delta < 1"
        raise ValueError(f"{name} must satisfy {bound.replace('delta', name)}, got {delta!r}")
    return d


def check_rho(rho: float, name: str = "rho") -> float:
    """Return ``rho`` as a float after checking ``0 < rho < inf``; raise naming ``name``."""
    r = _as_float(rho, name)
    if not math.isfinite(r) or r <= 0.0:
        raise ValueError(f"{name} must be finite and > 0, got {rho!r}")
    return r


# --------------------------------------------------------------------------------------------
# Conversions
# --------------------------------------------------------------------------------------------


def pure_to_zcdp(epsilon: float) -> float:
    """``eps``-DP implies ``eps^2/2``-zCDP (Bun and Steinke 2016, Proposition 1.4).

    Parameters
    ----------
    epsilon
        Pure DP parameter, finite and ``> 0``.

    Returns
    -------
    float
        ``rho = epsilon**2 / 2``.
    """
    eps = check_epsilon(epsilon)
    return 0.5 * eps * eps


def _cks_epsilon(rho: float, delta: float) -> float:
    """Canonne-Kamath-Steinke (2020) Prop. 12 conversion, minimised over the Renyi order.

    For ``rho``-zCDP, ``D_alpha <= alpha * rho`` for every ``alpha > 1``, and Proposition 12 gives
    ``eps(alpha) = alpha*rho + (ln(1/delta) + (alpha-1) ln(1 - 1/alpha) - ln(alpha)) / (alpha-1)``.
    Any ``alpha`` gives a valid bound, so an inexact minimisation only loses tightness.
    """
    log_inv_delta = -math.log(delta)

    def eps_at(log_am1: float) -> float:
        am1 = math.exp(log_am1)  # alpha - 1 > 0
        alpha = 1.0 + am1
        return (
            alpha * rho + (log_inv_delta + am1 * math.log1p(-1.0 / alpha) - math.log(alpha)) / am1
        )

    # Coarse grid over log(alpha - 1), then golden-section refinement around the best point.
    grid = [-14.0 + 0.05 * i for i in range(int(28.0 / 0.05) + 1)]
    values = [eps_at(g) for g in grid]
    best = min(range(len(grid)), key=values.__getitem__)
    lo = grid[max(best - 1, 0)]
    hi = grid[min(best + 1, len(grid) - 1)]
    inv_phi = (math.sqrt(5.0) - 1.0) / 2.0
    a, b = lo, hi
    c, d = b - inv_phi * (b - a), a + inv_phi * (b - a)
    fc, fd = eps_at(c), eps_at(d)
    for _ in range(80):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - inv_phi * (b - a)
            fc = eps_at(c)
        else:
            a, c, fc = c, d, fd
            d = a + inv_phi * (b - a)
            fd = eps_at(d)
    return max(0.0, min(values[best], fc, fd))


def zcdp_to_epsilon(rho: float, delta: float, method: ConversionMethod = "standard") -> float:
    """Smallest ``eps`` such that ``rho``-zCDP implies ``(eps, delta)``-DP under ``method``.

    Parameters
    ----------
    rho
        zCDP parameter, finite and ``> 0``.
    delta
        Target ``delta`` in ``(0, 1)``.
    method
        ``"standard"`` (default): ``eps = rho + 2 sqrt(rho ln(1/delta))`` ([ZQR+22, Section 2.1, Lemma 2.9]; [WWC24, Theorem 3.2]). ``"cks"``: the tighter Canonne, Kamath
        and Steinke (2020) Proposition 12 conversion, valid for any zCDP mechanism.

    Returns
    -------
    float
        The ``eps`` of the implied ``(eps, delta)``-DP guarantee.
    """
    r = check_rho(rho)
    d = check_delta(delta, allow_zero=False)
    standard = r + 2.0 * math.sqrt(r * math.log(1.0 / d))
    if method == "standard":
        return standard
    if method == "cks":
        return min(standard, _cks_epsilon(r, d))
    raise ValueError(f"method must be 'standard' or 'cks', got {method!r}")


def approx_to_zcdp(epsilon: float, delta: float) -> float:
    """Largest ``rho`` whose default conversion (:func:`zcdp_to_epsilon`) gives ``(eps, delta)``.

    Solves ``rho + 2 sqrt(rho L) = eps`` with ``L = ln(1/delta)`` in the stable closed form
    ``rho = eps^2 / (sqrt(L + eps) + sqrt(L))^2`` ([WWC24, Theorem 3.2], Eq. 1; [ZQR+22, Section 2.1]).

    Parameters
    ----------
    epsilon
        Target ``eps``, finite and ``> 0``.
    delta
        Target ``delta`` in ``(0, 1)``.

    Returns
    -------
    float
        ``rho`` such that a ``rho``-zCDP mechanism is ``(epsilon, delta)``-DP.
    """
    eps = check_epsilon(epsilon)
    d = check_delta(delta, allow_zero=False)
    big_l = math.log(1.0 / d)
    root = math.sqrt(big_l + eps) + math.sqrt(big_l)
    return eps * eps / (root * root)


# --------------------------------------------------------------------------------------------
# The budget value
# --------------------------------------------------------------------------------------------


def _round_down_share(total: float, parts: int) -> float:
    """``total / parts`` rounded so that ``parts * share <= total`` holds in exact arithmetic."""
    from fractions import Fraction

    share = total / parts
    exact_total = Fraction(total)
    while share > 0.0 and Fraction(share) * parts > exact_total:
        share = math.nextafter(share, 0.0)
    return share


@dataclass(frozen=True)
class PrivacyBudget:
    """An immutable privacy budget or privacy cost.

    Build it with :meth:`pure`, :meth:`approx` or :meth:`zcdp`; the constructors validate and
    raise ``ValueError`` naming the parameter.

    Attributes
    ----------
    kind
        ``"pure"``, ``"approx"`` or ``"zcdp"``.
    epsilon
        ``eps`` for ``pure``/``approx``; ``None`` for ``zcdp``.
    delta
        ``delta`` for ``approx`` (0 for ``pure`` and ``zcdp``).
    rho
        ``rho`` for ``zcdp``; ``None`` otherwise.
    delta_for_conversion
        Optional ``delta`` used to report a ``zcdp`` budget as ``(eps, delta)``.
    """

    kind: BudgetKind
    epsilon: float | None = None
    delta: float = 0.0
    rho: float | None = None
    delta_for_conversion: float | None = None

    def __post_init__(self) -> None:
        if self.kind == "pure":
            check_epsilon(self.epsilon)  # type: ignore[arg-type]
            if self.delta != 0.0 or self.rho is not None or self.delta_for_conversion is not None:
                raise ValueError("a pure budget has only epsilon")
        elif self.kind == "approx":
            check_epsilon(self.epsilon)  # type: ignore[arg-type]
            check_delta(self.delta)
            if self.rho is not None or self.delta_for_conversion is not None:
                raise ValueError("an approx budget has only epsilon and delta")
        elif self.kind == "zcdp":
            check_rho(self.rho)  # type: ignore[arg-type]
            if self.epsilon is not None or self.delta != 0.0:
                raise ValueError("a zcdp budget has only rho (and delta_for_conversion)")
            if self.delta_for_conversion is not None:
                check_delta(self.delta_for_conversion, "delta_for_conversion", allow_zero=False)
        else:
            raise ValueError(f"kind must be 'pure', 'approx' or 'zcdp', got {self.kind!r}")

    # ---- constructors ---------------------------------------------------------------------

    @classmethod
    def pure(cls, epsilon: float) -> PrivacyBudget:
        """``epsilon``-DP. ``epsilon`` must be finite and ``> 0``."""
        return cls("pure", epsilon=check_epsilon(epsilon))

    @classmethod
    def approx(cls, epsilon: float, delta: float) -> PrivacyBudget:
        """``(epsilon, delta)``-DP with ``epsilon`` finite ``> 0`` and ``0 <= delta < 1``."""
        return cls("approx", epsilon=check_epsilon(epsilon), delta=check_delta(delta))

    @classmethod
    def zcdp(cls, rho: float, delta_for_conversion: float | None = None) -> PrivacyBudget:
        """``rho``-zCDP with ``rho`` finite ``> 0``.

        ``delta_for_conversion`` (in ``(0, 1)``) is only used by :meth:`to_approx` and reports.
        """
        dfc = (
            None
            if delta_for_conversion is None
            else check_delta(delta_for_conversion, "delta_for_conversion", allow_zero=False)
        )
        return cls("zcdp", rho=check_rho(rho), delta_for_conversion=dfc)

    # ---- predicates and views -------------------------------------------------------------

    @property
    def is_pure(self) -> bool:
        """True for ``pure`` budgets and ``approx`` budgets with ``delta == 0``."""
        return self.kind == "pure" or (self.kind == "approx" and self.delta == 0.0)

    def to_zcdp(self) -> PrivacyBudget:
        """This budget as zCDP: ``pure`` (or ``delta = 0``) gives ``rho = eps^2/2``.

        Raises
        ------
        ValueError
            For an ``approx`` budget with ``delta > 0`` (approximate DP does not imply zCDP).
        """
        if self.kind == "zcdp":
            return self
        if not self.is_pure:
            raise ValueError(
                f"{self} has delta > 0 and cannot be expressed as zCDP; use a zCDP budget or an "
                "approximate-DP accountant"
            )
        return PrivacyBudget.zcdp(pure_to_zcdp(self.epsilon))  # type: ignore[arg-type]

    def to_approx(
        self, delta: float | None = None, method: ConversionMethod = "standard"
    ) -> PrivacyBudget:
        """This budget as ``(eps, delta)``-DP.

        For ``zcdp`` the ``delta`` argument (or else ``delta_for_conversion``) is required and
        ``eps`` comes from :func:`zcdp_to_epsilon` with ``method``. ``pure``/``approx`` budgets are
        returned as ``approx`` unchanged (``delta`` must then be ``None``).
        """
        if self.kind != "zcdp":
            if delta is not None:
                raise ValueError("delta is only used to convert a zcdp budget")
            return PrivacyBudget.approx(self.epsilon, self.delta)  # type: ignore[arg-type]
        d = delta if delta is not None else self.delta_for_conversion
        if d is None:
            raise ValueError(
                "delta is required to convert a zcdp budget (or set delta_for_conversion)"
            )
        return PrivacyBudget.approx(zcdp_to_epsilon(self.rho, d, method), d)  # type: ignore[arg-type]

    # ---- arithmetic -----------------------------------------------------------------------

    def times(self, k: int) -> PrivacyBudget:
        """Basic sequential composition of ``k`` copies: ``k*eps``, ``k*delta``, or ``k*rho``."""
        k = check_int(k, "k")
        if self.kind == "pure":
            return PrivacyBudget.pure(self.epsilon * k)  # type: ignore[operator]
        if self.kind == "approx":
            return PrivacyBudget.approx(self.epsilon * k, _checked_delta(self.delta * k))  # type: ignore[operator]
        return PrivacyBudget.zcdp(self.rho * k, self.delta_for_conversion)  # type: ignore[operator]

    def fraction(self, f: float) -> PrivacyBudget:
        """The share ``f`` in ``(0, 1]`` of this budget (every parameter scaled by ``f``)."""
        fr = _as_float(f, "fraction")
        if not 0.0 < fr <= 1.0:
            raise ValueError(f"fraction must be in (0, 1], got {f!r}")
        if self.kind == "pure":
            return PrivacyBudget.pure(self.epsilon * fr)  # type: ignore[operator]
        if self.kind == "approx":
            return PrivacyBudget.approx(self.epsilon * fr, self.delta * fr)  # type: ignore[operator]
        return PrivacyBudget.zcdp(self.rho * fr, self.delta_for_conversion)  # type: ignore[operator]

    def divide(self, k: int) -> PrivacyBudget:
        """Per-release budget for ``k`` sequential releases: ``budget / k``, rounded down.

        Each parameter is rounded down so that ``k`` shares never exceed the total in exact
        arithmetic, so charging ``k`` shares to an accountant with this budget always fits.
        """
        k = check_int(k, "k")
        if self.kind == "pure":
            return PrivacyBudget.pure(_round_down_share(self.epsilon, k))  # type: ignore[arg-type]
        if self.kind == "approx":
            return PrivacyBudget.approx(
                _round_down_share(self.epsilon, k),  # type: ignore[arg-type]
                _round_down_share(self.delta, k),
            )
        return PrivacyBudget.zcdp(_round_down_share(self.rho, k), self.delta_for_conversion)  # type: ignore[arg-type]

    # ---- presentation ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, float | str | None]:
        """JSON-serialisable form."""
        out: dict[str, float | str | None] = {"kind": self.kind}
        if self.kind == "zcdp":
            out["rho"] = self.rho
            out["delta_for_conversion"] = self.delta_for_conversion
        else:
            out["epsilon"] = self.epsilon
            out["delta"] = self.delta
        return out

    def __str__(self) -> str:
        if self.kind == "pure":
            return f"eps={self.epsilon:.6g} (pure DP)"
        if self.kind == "approx":
            return f"(eps={self.epsilon:.6g}, delta={self.delta:.6g})-DP"
        text = f"rho={self.rho:.6g}-zCDP"
        if self.delta_for_conversion is not None:
            conv = self.to_approx()
            text += f" [= (eps={conv.epsilon:.6g}, delta={conv.delta:.6g})-DP]"
        return text


def _checked_delta(total: float) -> float:
    if total >= 1.0:
        raise ValueError(f"composed delta={total:.3g} >= 1: the guarantee would be vacuous")
    return total


# --------------------------------------------------------------------------------------------
# Composition helpers
# --------------------------------------------------------------------------------------------


def _common_kind(budgets: list[PrivacyBudget], what: str) -> str:
    if not budgets:
        raise ValueError(f"{what} needs at least one budget")
    kinds = {b.kind for b in budgets}
    if "zcdp" in kinds:
        if any(b.kind != "zcdp" and not b.is_pure for b in budgets):
            raise ValueError(
                f"{what} of zCDP and approximate DP with delta > 0 needs a delta split; "
                "use PrivacyAccountant with an approximate-DP budget"
            )
        return "zcdp"
    if kinds == {"pure"}:
        return "pure"
    return "approx"


def compose_sequential(budgets: Iterable[PrivacyBudget]) -> PrivacyBudget:
    """Basic sequential composition (docs/privacy-model.md#many-releases-from-one-noisy-state; [ZQR+22, Section 2.1]).

    Pure + pure is pure (sum of ``eps``); with any ``approx`` the result is ``approx`` (sum of
    ``eps`` and of ``delta``); zCDP budgets add their ``rho`` (Lemma 2.7), and pure ones join them
    as ``eps^2/2``. Approximate DP with ``delta > 0`` cannot be mixed with zCDP here.
    """
    items = list(budgets)
    kind = _common_kind(items, "sequential composition")
    if kind == "zcdp":
        dfc = [b.delta_for_conversion for b in items if b.kind == "zcdp"]
        return PrivacyBudget.zcdp(
            math.fsum(b.to_zcdp().rho for b in items),  # type: ignore[misc]
            min((d for d in dfc if d is not None), default=None),
        )
    eps = math.fsum(b.epsilon for b in items)  # type: ignore[misc]
    if kind == "pure":
        return PrivacyBudget.pure(eps)
    return PrivacyBudget.approx(eps, _checked_delta(math.fsum(b.delta for b in items)))


def compose_parallel(budgets: Iterable[PrivacyBudget]) -> PrivacyBudget:
    """Parallel composition over disjoint partitions: the maximum ([WWC24, Theorem 3.2]).

    Each neighbouring pair changes one partition only, so the guarantee is the worst partition's:
    ``max eps`` and ``max delta`` (pure/approx), or ``max rho`` (zCDP).
    """
    items = list(budgets)
    kind = _common_kind(items, "parallel composition")
    if kind == "zcdp":
        dfc = [b.delta_for_conversion for b in items if b.kind == "zcdp"]
        return PrivacyBudget.zcdp(
            max(b.to_zcdp().rho for b in items),  # type: ignore[type-var]
            min((d for d in dfc if d is not None), default=None),
        )
    eps = max(b.epsilon for b in items)  # type: ignore[type-var]
    if kind == "pure":
        return PrivacyBudget.pure(eps)
    return PrivacyBudget.approx(eps, max(b.delta for b in items))


def group_privacy(budget: PrivacyBudget, group_size: int) -> PrivacyBudget:
    """Guarantee for groups of ``group_size`` neighbouring steps (e.g. one user's elements).

    * pure: ``k*eps``;
    * approx: ``(k*eps, k*e^((k-1)eps)*delta)`` ([LT23, Section 8, Lemma 1], after Dwork and
      Roth);
    * zCDP: ``k^2*rho`` ([WWC24, Section 3]).

    Raises ``ValueError`` if the resulting ``delta`` is ``>= 1`` (the guarantee is vacuous).
    """
    k = check_int(group_size, "group_size")
    if budget.kind == "pure":
        return PrivacyBudget.pure(k * budget.epsilon)  # type: ignore[operator]
    if budget.kind == "approx":
        eps = budget.epsilon  # type: ignore[assignment]
        new_delta = k * math.exp((k - 1) * eps) * budget.delta  # type: ignore[operator]
        if new_delta >= 1.0:
            raise ValueError(
                f"group privacy for group_size={k} gives delta={new_delta:.3g} >= 1 (vacuous)"
            )
        return PrivacyBudget.approx(k * eps, new_delta)  # type: ignore[operator]
    return PrivacyBudget.zcdp(k * k * budget.rho, budget.delta_for_conversion)  # type: ignore[operator]
