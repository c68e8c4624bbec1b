"""The data-independent plan of a DPSW-Sketch block: checkpoints, budgets, noise scales, layout.

Why a module of its own: checkpoint lists, per-level zCDP budgets and the block layout are fixed
before any item arrives and depend on no data, so they are kept apart from the sketch that counts,
seals and queries (:mod:`beam_dpsketch.sketches.sliding.dpsw`, which re-exports every name here).
See [WWC24, Section 4.1], docs/algorithms.md#dpsw-checkpoints and docs/algorithms.md#dpsw-segments.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from beam_dpsketch.checks import check_int, check_real
from beam_dpsketch.privacy.budget import PrivacyBudget, approx_to_zcdp

__all__ = [
    "BUDGET_SPLITS",
    "MAX_INDEX",
    "BudgetSplit",
    "DPSWLayout",
    "SelectedSketch",
    "as_fraction",
    "ceil_power",
    "check_checkpoints",
    "check_release_prefix",
    "checkpoint_list",
    "level_budgets",
    "position_costs",
    "resolve_rho",
    "sigma_up",
]

BudgetSplit = Literal["paper", "code_q", "tight"]
BUDGET_SPLITS: tuple[str, ...] = ("paper", "code_q", "tight")
# Largest window, block, position or time accepted: positions stay exact in int64 arithmetic.
MAX_INDEX = 1 << 62


# --------------------------------------------------------------------------------------------
# Validation helpers
# --------------------------------------------------------------------------------------------


def check_release_prefix(value: Any, default: str) -> str:
    """The ``release_prefix`` of a sliding-window sketch: a string (``default`` when ``None``).

    ``TypeError`` naming ``release_prefix`` for anything else: the sliding-window sketches key
    every noise stream by it and store it as text.
    """
    if value is None:
        return default
    if not isinstance(value, str):
        raise TypeError(f"release_prefix must be a str, got {type(value).__name__}")
    return value


def as_fraction(value: Any, name: str) -> Fraction:
    """An exact rational in (0, 1); floats are read from their shortest decimal string (docs/algorithms.md#dpsw-e9)."""
    if isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a number, got bool")
    if isinstance(value, Fraction):
        frac = value
    elif isinstance(value, int | np.integer):
        frac = Fraction(int(value))
    elif isinstance(value, float | np.floating):
        if not math.isfinite(value):
            raise ValueError(f"{name} must be finite, got {value}")
        frac = Fraction(repr(float(value)))
    elif isinstance(value, str):
        try:
            frac = Fraction(value)
        except ValueError:
            raise ValueError(f"{name} must be a rational number, got {value!r}") from None
    else:
        raise TypeError(f"{name} must be a Fraction, str, int or float, got {type(value).__name__}")
    if not 0 < frac < 1:
        raise ValueError(f"{name} must be in (0, 1), got {value}")
    return frac


def _float_floor(x: Fraction) -> float:
    """The largest float ``<= x`` (budgets are rounded down so that their sums stay <= rho)."""
    f = float(x)
    if Fraction(f) > x:
        f = math.nextafter(f, -math.inf)
    return f


# --------------------------------------------------------------------------------------------
# Checkpoints and budgets (docs/algorithms.md#dpsw-checkpoints)
# --------------------------------------------------------------------------------------------


def checkpoint_list(block: int, alpha: Any) -> tuple[int, ...]:
    """The smooth-histogram checkpoint lengths ``I = [B, ..., 1]`` of docs/algorithms.md#dpsw-checkpoints, exactly.

    Closed form ``I[k+1] = min(I[k] - 1, ceil((1 - alpha) I[k]))`` (docs/algorithms.md#dpsw-checkpoints, a library derivation, verified
    identical to the paper's pruning loop of Algorithm 2 with the dynamic bound of docs/algorithms.md#dpsw-e8),
    in exact rational arithmetic (docs/algorithms.md#dpsw-e9: ``alpha = 0.99``, ``B = 1000`` gives
    ``[1000, 10, 1]``, not the floating-point ``[1000, 11, 1]``).

    Parameters
    ----------
    block
        Block length ``B >= 1``.
    alpha
        Smooth-histogram factor in (0, 1): a ``Fraction``, a string (``"99/100"``, ``"0.99"``),
        or a float read from its shortest decimal representation.

    Returns
    -------
    tuple of int
        Strictly decreasing, first ``B``, last ``1``.
    """
    b = check_int(block, "block", 1, MAX_INDEX)
    keep = 1 - as_fraction(alpha, "alpha")
    out = [b]
    while out[-1] > 1:
        nxt = keep * out[-1]
        out.append(min(out[-1] - 1, -((-nxt.numerator) // nxt.denominator)))
    return tuple(out)


def check_checkpoints(checkpoints: Any, block: int) -> tuple[int, ...]:
    """``checkpoints`` as a valid list ``I``: ints, strictly decreasing from ``block`` to 1."""
    if isinstance(checkpoints, str | bytes) or not isinstance(checkpoints, Sequence):
        raise TypeError(f"checkpoints must be a sequence of ints, got {type(checkpoints).__name__}")
    vals = tuple(check_int(c, "checkpoints", 1, block) for c in checkpoints)
    if not vals or vals[0] != block or vals[-1] != 1:
        raise ValueError(f"checkpoints must start with the block length {block} and end with 1")
    if any(a <= b for a, b in zip(vals, vals[1:], strict=False)):
        raise ValueError(f"checkpoints must be strictly decreasing, got {list(vals)}")
    return vals


def position_costs(levels: Sequence[float], checkpoints: Sequence[int]) -> np.ndarray:
    """zCDP cost of the PCMSs containing each relative position ``p = 1..B`` of a block.

    ``rho_1 + sum_{j >= 2: p <= I[j]} rho_j + sum_{j >= 2: p >= B - I[j] + 1} rho_j`` (docs/algorithms.md#dpsw-checkpoints,
    "tight per-position accounting"). Its maximum is the exact per-block cost ``rho_eff``.
    """
    I = list(checkpoints)  # noqa: E741 - the paper's name
    b = I[0]
    p = np.arange(1, b + 1)
    cost = np.full(b, float(levels[0]))
    for j in range(1, len(I)):
        cost += np.where(p <= I[j], levels[j], 0.0) + np.where(p >= b - I[j] + 1, levels[j], 0.0)
    return cost


def level_budgets(
    rho: float,
    checkpoints: Sequence[int],
    *,
    split: str = "paper",
    alpha: Any = None,
    q: float = 0.8,
) -> tuple[float, ...]:
    """Per-level zCDP budgets ``(rho_1, ..., rho_|I|)`` of one block (docs/algorithms.md#dpsw-checkpoints).

    ``rho_1`` is the budget of the full-block PCMS ``F``; ``rho_j`` (``j >= 2``) that of *each* of
    the prefix ``P_j`` and the suffix ``Q_j``. Every value is rounded down to a float, so the
    stated sums hold exactly.

    Parameters
    ----------
    rho
        Total zCDP budget of a block (= of the whole stream, by parallel composition).
    checkpoints
        The list ``I``.
    split
        * ``"paper"`` (Algorithm 2): ``rho_1 = rho (1 - (1-alpha)^2)``,
          ``rho_j = rho alpha^(j-2) (1-alpha)^3 / 2``; the block sum is
          ``rho (1 - (1-alpha)^2 alpha^(|I|-1)) < rho``. Needs ``alpha``.
        * ``"code_q"`` (authors' code, docs/algorithms.md#dpsw-e12): ``rho_1 = q rho``,
          ``rho_j = (1-q) rho / 2^j`` for ``2 <= j < |I|``, ``rho_|I| = (1-q) rho / 2^(|I|-1)``;
          the block sum is ``rho``. With ``|I| = 1``, ``rho_1 = rho``.
        * ``"tight"`` (library choice, not the paper's): the paper shape rescaled so that the largest
          per-position cost (:func:`position_costs`) equals ``rho``. Needs ``alpha``.
    alpha
        Smooth-histogram factor (exact rational) for ``"paper"`` and ``"tight"``.
    q
        Share of ``F`` for ``"code_q"``, in (0, 1).
    """
    rho = check_real(rho, "rho", 0.0, lower_open=True)
    I = tuple(checkpoints)  # noqa: E741
    n = len(I)
    r = Fraction(float(rho))
    if split in ("paper", "tight"):
        if alpha is None:
            raise ValueError(f"alpha is required for the {split!r} budget split")
        a = as_fraction(alpha, "alpha")
        fr = [r * (1 - (1 - a) ** 2)] + [
            r * a ** (j - 2) * (1 - a) ** 3 / 2 for j in range(2, n + 1)
        ]
        if split == "tight":
            cost = max(_exact_position_costs(fr, I))
            fr = [x * r / cost for x in fr]
    elif split == "code_q":
        qf = as_fraction(q, "q")
        if n == 1:
            fr = [r]
        else:
            fr = [r * qf] + [(1 - qf) * r / 2**j for j in range(2, n)]
            fr.append((1 - qf) * r / 2 ** (n - 1))
    else:
        raise ValueError(f"split must be one of {BUDGET_SPLITS}, got {split!r}")
    return tuple(_float_floor(x) for x in fr)


def _exact_position_costs(levels: Sequence[Fraction], I: Sequence[int]) -> list[Fraction]:  # noqa: E741
    """Per-position costs in exact arithmetic, evaluated only where they can change."""
    b = I[0]
    points = sorted({1, b} | {c for c in I} | {b - c + 1 for c in I})
    out = []
    for p in points:
        cost = levels[0]
        for j in range(1, len(I)):
            cost += (levels[j] if p <= I[j] else 0) + (levels[j] if p >= b - I[j] + 1 else 0)
        out.append(cost)
    return out


# --------------------------------------------------------------------------------------------
# Block layout ([WWC24, Section 4.1] and docs/algorithms.md#dpsw-segments)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DPSWLayout:
    """Data-independent layout of one block: checkpoints, PCMS ranges and segments.

    Attributes
    ----------
    block
        Block length ``B``.
    checkpoints
        ``I = (B, ..., 1)``; ``I[0]`` here is the paper's ``I[1]``.
    cuts
        Segment boundaries ``0 = c_0 < c_1 < ... < c_S = B``: segment ``g`` holds the relative
        positions ``c_g + 1 .. c_{g+1}`` (1-based). At most ``2 |I| - 1`` segments.
    """

    block: int
    checkpoints: tuple[int, ...]

    @property
    def cuts(self) -> tuple[int, ...]:
        b = self.block
        cuts = {0, b} | {c for c in self.checkpoints[1:]} | {b - c for c in self.checkpoints[1:]}
        return tuple(sorted(cuts))

    @property
    def n_segments(self) -> int:
        return len(self.cuts) - 1

    @property
    def n_levels(self) -> int:
        return len(self.checkpoints)

    def segment_of(self, rel: np.ndarray) -> np.ndarray:
        """Segment index of 1-based relative positions ``rel`` (vectorised)."""
        return np.searchsorted(np.asarray(self.cuts[1:-1]), np.asarray(rel), side="left")

    def range_of(self, kind: str, level: int) -> tuple[int, int]:
        """1-based relative range ``(first, last)`` of ``F`` (level 1), ``P_j`` or ``Q_j``."""
        if kind == "F":
            return 1, self.block
        length = self.checkpoints[level - 1]
        return (1, length) if kind == "P" else (self.block - length + 1, self.block)

    def sketches(self) -> list[tuple[str, int]]:
        """The ``2 |I| - 1`` PCMSs of a block as ``(kind, level)``, level 1-based."""
        out = [("F", 1)]
        for j in range(2, self.n_levels + 1):
            out += [("P", j), ("Q", j)]
        return out


@dataclass(frozen=True)
class SelectedSketch:
    """One sealed PCMS selected by a query ([WWC24, Algorithm 3]); positions are absolute and 1-based."""

    block: int
    kind: str
    level: int
    start: int
    end: int


# --------------------------------------------------------------------------------------------
# Budgets and noise scales
# --------------------------------------------------------------------------------------------


def resolve_rho(budget: Any) -> tuple[float, PrivacyBudget]:
    """The zCDP ``rho`` of ``budget`` (zCDP, or approximate DP with ``delta > 0``) and ``budget``."""
    if not isinstance(budget, PrivacyBudget):
        raise TypeError(f"budget must be a PrivacyBudget, got {type(budget).__name__}")
    if budget.kind == "zcdp":
        return float(budget.rho), budget
    if budget.kind == "approx" and budget.delta > 0:
        # [WWC24, Theorem 3.2], Eq. 1 in the stable closed form.
        return approx_to_zcdp(budget.epsilon, budget.delta), budget
    raise ValueError(
        "budget must be zCDP or (epsilon, delta) with delta > 0: the Gaussian mechanism of "
        f"DPSW-Sketch cannot give pure DP, got {budget}"
    )


def sigma_up(variance: Fraction) -> float:
    """The smallest float ``sigma`` with ``sigma**2 >= variance`` (noise is never rounded down)."""
    s = math.sqrt(float(variance))
    while Fraction(s) ** 2 < variance:
        s = math.nextafter(s, math.inf)
    return s


def ceil_power(window: int, beta: float) -> int:
    """``ceil(window ** beta)`` robust to float error at exact powers."""
    v = window**beta
    r = round(v)
    if abs(v - r) < 1e-9 * max(1.0, v):
        return max(1, int(r))
    return max(1, math.ceil(v))
