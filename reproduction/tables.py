"""Small helpers the experiment reports share to read result tables and word their verdicts.

Every experiment module (``reproduction.experiments``) computes its verdicts from the
runner's Arrow tables with these helpers, so a filter, a fitted slope or a monotonicity test means
the same thing in every report.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["col", "fmt", "log_slope", "matching", "monotone", "param_tag"]


def matching(table: pa.Table, **eq: Any) -> pa.Table:
    """The rows of ``table`` where every named column equals its value (``None``: is null)."""
    mask = None
    for col, val in eq.items():
        m = pc.is_null(table[col]) if val is None else pc.equal(table[col], val)
        mask = m if mask is None else pc.and_(mask, m)
    return table.filter(mask) if mask is not None else table


def col(table: pa.Table, name: str) -> np.ndarray:
    """Column ``name`` as a float64 array (nulls become NaN)."""
    return np.asarray(table[name].to_pylist(), dtype=np.float64)


def log_slope(x: np.ndarray, y: np.ndarray) -> float:
    """Least-squares slope of log y against log x over the points where both are positive.

    NaN when fewer than two such points remain.
    """
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    keep = (x > 0) & (y > 0)
    if keep.sum() < 2:
        return math.nan
    return float(np.polyfit(np.log(x[keep]), np.log(y[keep]), 1)[0])


def monotone(y: np.ndarray, *, tol: float, increasing: bool = False, floor: float = 0.0) -> bool:
    """A curve that moves one way, up to trial noise.

    True when the last point is strictly beyond the first (above if ``increasing``, else below)
    and no step goes the other way by more than ``tol * |previous point| + floor * |first
    point|``; ``floor`` lets curves that flatten out near zero still count.
    """
    y = np.asarray(y, np.float64)
    if len(y) < 2:
        return False
    step = np.diff(y) if increasing else -np.diff(y)
    slack = tol * np.abs(y[:-1]) + floor * abs(y[0])
    ends = y[-1] > y[0] if increasing else y[-1] < y[0]
    return bool(ends and np.all(step >= -slack))


def fmt(values: float | Sequence[float] | np.ndarray, digits: int = 3, style: str = "g") -> str:
    """One number, or numbers joined by ``" / "``, each formatted as ``{x:.{digits}{style}}``."""
    if np.ndim(values) == 0:
        return f"{values:.{digits}{style}}"
    return " / ".join(f"{x:.{digits}{style}}" for x in values)


def param_tag(prefix: str, value: float, dot: str = "") -> str:
    """A column-name fragment for a parameter value: ``param_tag("r", 0.5) == "r05"``.

    The decimal point of ``{value:g}`` becomes ``dot`` (column names carry no dots).
    """
    return f"{prefix}{value:g}".replace(".", dot)
