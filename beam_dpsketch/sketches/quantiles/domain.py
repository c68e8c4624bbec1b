"""Declared float domains for the dyadic quantile sketch (re-exported by :mod:`.dyadic`).

A :class:`FloatDomain` maps floats to the integer bins a
:class:`~beam_dpsketch.sketches.quantiles.dyadic.DyadicCountSketch` counts. Its bounds and resolution are
public configuration, chosen without looking at the private data (docs/algorithms.md#lin-hashing: "never derive the bounds from the data").
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["FloatDomain"]

_EDGE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class FloatDomain:
    """A declared, public mapping of floats in ``[lower, upper]`` to integer bins.

    Bin ``i`` is ``[lower + i * resolution, lower + (i + 1) * resolution)``; ``upper`` falls in
    the last bin ``bins - 1`` with ``bins = floor((upper - lower) / resolution) + 1``. Use the
    bins as the integer domain of a :class:`DyadicCountSketch`::

        dom = FloatDomain(0.0, 100.0, 0.01)
        sketch = DyadicCountSketch(*dom.int_bounds, width, depth, seed)
        sketch.update(dom.to_int(values))
        dom.to_float(private.quantiles([0.5, 0.9]))

    ``to_int(v) = floor((v - lower) / resolution + 1e-9)``: the tolerance absorbs float error
    at bin edges, so grid points (``0.3`` with resolution ``0.1``) fall in their own bin. Ranks and quantiles are then exact up to one
    bin (``resolution``): ``rank(to_int(x))`` counts the items of ``x``'s bin that exceed ``x``
    too. The bounds must be chosen
    without looking at the private data (docs/algorithms.md#lin-hashing).

    Parameters
    ----------
    lower, upper
        Finite floats, ``lower < upper``.
    resolution
        Bin width ``> 0``; at most ``2**52`` bins.
    """

    lower: float
    upper: float
    resolution: float

    def __post_init__(self) -> None:
        for name in ("lower", "upper", "resolution"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real):
                raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
            if not math.isfinite(float(value)):
                raise ValueError(f"{name} must be finite, got {value!r}")
            object.__setattr__(self, name, float(value))
        if not self.lower < self.upper:
            raise ValueError(f"lower must be < upper, got lower={self.lower}, upper={self.upper}")
        if self.resolution <= 0:
            raise ValueError(f"resolution must be > 0, got {self.resolution}")
        if (self.upper - self.lower) / self.resolution >= 2.0**52:
            raise ValueError("resolution is too fine: at most 2**52 bins")

    @property
    def bins(self) -> int:
        """Number of integer bins."""
        return math.floor((self.upper - self.lower) / self.resolution) + 1

    @property
    def int_bounds(self) -> tuple[int, int]:
        """``(0, bins - 1)``: the integer domain for :class:`DyadicCountSketch`."""
        return 0, self.bins - 1

    def to_int(self, values: Any, *, clamp: bool = False) -> np.ndarray:
        """Bin index (int64) of each value.

        NaN always raises ``ValueError``; values outside ``[lower, upper]`` raise ``ValueError``
        unless ``clamp=True`` (then they go to the first/last bin). The messages name the
        parameter and the declared bounds, never a value or its position (values are data).
        """
        try:
            arr = np.asarray(values, dtype=np.float64)
        except (TypeError, ValueError):
            raise TypeError("values must be real numbers") from None
        arr = np.atleast_1d(arr)
        if arr.ndim != 1:
            raise ValueError(f"values must be one-dimensional, got shape {arr.shape}")
        if np.isnan(arr).any():
            raise ValueError(
                "values: NaN is not a valid value; FloatDomain values must be numbers in "
                "[lower, upper]"
            )
        outside = (arr < self.lower) | (arr > self.upper)
        if outside.any() and not clamp:
            raise ValueError(
                f"values: some are outside the declared domain [{self.lower}, {self.upper}] "
                "(pass clamp=True to clamp them)"
            )
        arr = np.clip(arr, self.lower, self.upper)
        # The 1e-9 absorbs float error at bin edges: 0.3 / 0.1 = 2.9999999999999996 must still
        # put the grid point 0.3 in bin 3.
        idx = np.floor((arr - self.lower) / self.resolution + _EDGE_TOLERANCE)
        return np.clip(idx, 0, self.bins - 1).astype(np.int64)

    def to_float(self, indices: Any) -> np.ndarray:
        """Lower edge ``lower + i * resolution`` of each bin (float64)."""
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu" and not (
            idx.dtype.kind == "f" and np.all(idx == np.floor(idx))
        ):
            raise TypeError("indices must be integers")
        return self.lower + idx.astype(np.float64) * self.resolution

    def to_dict(self) -> dict[str, float]:
        return {"lower": self.lower, "upper": self.upper, "resolution": self.resolution}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> FloatDomain:
        return cls(data["lower"], data["upper"], data["resolution"])
