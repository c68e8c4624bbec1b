"""Shared parameter checks: integers and probabilities, one validator each.

Sketches, transforms and privacy helpers validate integer parameters through :func:`check_int`
failure probabilities and other open-unit-interval parameters through
:func:`check_probability`, other real numbers through :func:`check_real`, flags through
:func:`check_bool` and named options through :func:`check_choice`, so the accepted types and the error wording are the same everywhere:
``TypeError`` naming the parameter and the offending type, ``ValueError`` naming the parameter
and the violated bound. Release-id / sketch-id parts are checked by
:func:`beam_dpsketch.hashing.check_key_like`, next to the key encoding it relies on.

This module imports nothing from the library, so every other module may import it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

__all__ = [
    "check_bool",
    "check_choice",
    "check_int",
    "check_probability",
    "check_real",
    "renamed_keyword",
]


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


def check_real(
    value: Any,
    name: str,
    lower: float | None = None,
    upper: float | None = None,
    *,
    lower_open: bool = False,
    upper_open: bool = False,
    finite: bool = True,
) -> float:
    """Return ``value`` as a float after checking its type and range (finite unless told).

    Parameters
    ----------
    value
        Candidate number: any ``numbers.Real`` (Python or numpy ints and floats, ``Fraction``)
        except ``bool`` / ``numpy.bool_``.
    name
        Parameter name used in error messages.
    lower, upper
        Bounds; ``None`` leaves that side unbounded.
    lower_open, upper_open
        Whether that bound is excluded (``> lower`` rather than ``>= lower``).
    finite
        Whether infinities are refused (NaN always is).

    Raises
    ------
    TypeError
        If ``value`` is a bool or not a real number: ``"<name> must be a real number, got <type>"``.
    ValueError
        If ``value`` is NaN (``"<name> must not be NaN"``), infinite while ``finite``
        (``"<name> must be finite, got <value>"``) or out of range:
        ``"<name> must be > <lower>, got <value>"``, ``"<name> must be in (<lower>, <upper>],
        got <value>"`` and so on.
    """
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__}")
    v = float(value)
    if math.isnan(v):
        raise ValueError(f"{name} must not be NaN")
    if finite and math.isinf(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    too_low = lower is not None and (v <= lower if lower_open else v < lower)
    too_high = upper is not None and (v >= upper if upper_open else v > upper)
    if too_low or too_high:
        if upper is None:
            bound = f"{'>' if lower_open else '>='} {lower:g}"
        elif lower is None:
            bound = f"{'<' if upper_open else '<='} {upper:g}"
        else:
            left, right = "(" if lower_open else "[", ")" if upper_open else "]"
            bound = f"in {left}{lower:g}, {upper:g}{right}"
        raise ValueError(f"{name} must be {bound}, got {value!r}")
    return v


def check_bool(value: Any, name: str) -> bool:
    """Return ``value`` as a Python bool; ``TypeError`` unless it is a ``bool`` or ``numpy.bool_``.

    Integers are refused (``1`` is not ``True`` for a flag): ``"<name> must be a bool, got <type>"``.
    """
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)


def check_choice(
    value: Any,
    name: str,
    choices: Iterable[Any],
    deprecated: Mapping[str, str] | None = None,
    *,
    stacklevel: int = 3,
) -> Any:
    """Return ``value`` after checking it is one of ``choices`` (compared with ``==``).

    A wrong option of the right kind and a value of the wrong type are the same mistake here
    (a name that is not on the list), so both raise ``ValueError``:
    ``"<name> must be one of (<choices>), got <value>"``. ``deprecated`` maps other accepted
    spellings to the choice each stands for: such a value is returned as that choice, with a
    ``DeprecationWarning`` naming both, attributed ``stacklevel`` frames up (as for
    ``warnings.warn``, counting this function) so that it points at the user's call.
    """
    if deprecated and isinstance(value, str) and value in deprecated:
        warnings.warn(
            f"{name}={value!r} is deprecated: use {name}={deprecated[value]!r}",
            DeprecationWarning,
            stacklevel=stacklevel,
        )
        return deprecated[value]
    options = tuple(choices)
    try:
        known = value in options
    except (TypeError, ValueError):  # e.g. an array, whose == is elementwise
        known = False
    if not known:
        raise ValueError(f"{name} must be one of {options}, got {value!r}")
    return value


def renamed_keyword(value: Any, old_value: Any, name: str, old_name: str) -> Any:
    """The value of keyword ``name``, also accepted under its deprecated spelling ``old_name``.

    ``None`` means "not given" for both. Giving ``old_name`` warns (``DeprecationWarning``
    naming both spellings); giving both is refused (``TypeError``, as Python refuses a keyword
    given twice).
    """
    if old_value is None:
        return value
    if value is not None:
        raise TypeError(f"give {name} only ({old_name} is its deprecated spelling)")
    warnings.warn(
        f"{old_name}= is deprecated: use {name}= (the same value)", DeprecationWarning, stacklevel=3
    )
    return old_value
