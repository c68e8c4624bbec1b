"""Shared parameter checks: integers and probabilities, one validator each.

Sketches, transforms and privacy helpers validate integer parameters through :func:`check_int`
and failure probabilities and other open-unit-interval parameters through
:func:`check_probability`, so the accepted types and the error wording are the same everywhere:
``TypeError`` naming the parameter and the offending type, ``ValueError`` naming the parameter
and the violated bound. Release-id / sketch-id parts are checked by
:func:`beam_dpsketch.hashing.check_key_like`, next to the key encoding it relies on.

This module imports nothing from the library, so every other module may import it.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["check_int", "check_probability"]


def check_int(value: Any, name: str, lower: int | None = 1, upper: int | None = None) -> int:
    """Return ``value`` as a Python int after checking its type and range.

    Parameters
    ----------
    value
        Candidate integer. Python ints and numpy integers (any ``numbers.Integral``) are accepted;
        ``bool`` / ``numpy.bool_`` and non-integral types (floats, even integral-valued ones,
        strings, ``None``) are not.
    name
        Parameter name used in error messages.
    lower, upper
        Inclusive bounds; ``None`` leaves that side unbounded. ``lower`` defaults to 1 because
        most checked parameters are sizes or counts.

    Returns
    -------
    int
        ``int(value)``: a Python int, so it is safe as a GroupByKey key and in serialized params.

    Raises
    ------
    TypeError
        If ``value`` is a bool or not an integral number: ``"<name> must be an int, got <type>"``.
    ValueError
        If ``value`` is out of range: ``"<name> must be >= <lower>, got <value>"``,
        ``"<name> must be <= <upper>, got <value>"`` or
        ``"<name> must be in [<lower>, <upper>], got <value>"``.
    """
    # bool is an Integral subclass; accepting it would let ``True`` pass as a width of 1.
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    value = int(value)
    too_low = lower is not None and value < lower
    too_high = upper is not None and value > upper
    if too_low or too_high:
        if upper is None:
            bound = f">= {lower}"
        elif lower is None:
            bound = f"<= {upper}"
        else:
            bound = f"in [{lower}, {upper}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return value


def check_probability(value: Any, name: str) -> float:
    """Return ``value`` as a float after checking it lies in the open interval ``(0, 1)``.

    Raises
    ------
    TypeError
        If ``value`` is a bool or not a real number: ``"<name> must be a real number, got <type>"``.
    ValueError
        If ``value`` is not in ``(0, 1)`` (NaN included): ``"<name> must be in (0, 1), got <value>"``.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    # Written so that NaN fails too: every comparison with NaN is False.
    if not 0.0 < v < 1.0:
        raise ValueError(f"{name} must be in (0, 1), got {value!r}")
    return v
