"""Standard normal CDF helpers in pure Python (no scipy at run time).

``scipy`` is a test dependency of the project, not a run-time one, so the calibration code computes
the standard normal CDF ``Phi`` and ``log Phi`` from :func:`math.erfc` instead of
``scipy.special.ndtr`` / ``log_ndtr``. The test suite checks both against scipy.
"""

from __future__ import annotations

import math

__all__ = ["log_ndtr", "ndtr"]

_SQRT_HALF = math.sqrt(0.5)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# Below this point erfc underflows towards subnormal numbers; use the asymptotic series instead.
_ASYMPTOTIC_BELOW = -30.0


def ndtr(x: float) -> float:
    """Standard normal CDF ``Phi(x)``, accurate in both tails (``erfc`` based, no subtraction)."""
    if math.isnan(x):
        raise ValueError("ndtr argument is NaN")
    return 0.5 * math.erfc(-x * _SQRT_HALF)


def log_ndtr(x: float) -> float:
    """Natural log of the standard normal CDF, ``log Phi(x)``, finite for every finite ``x``.

    For ``x <= -30`` it uses the asymptotic (Mills ratio) series
    ``log Phi(x) = -x^2/2 - log(-x) - log(2 pi)/2 + log(1 - 1/x^2 + 3/x^4 - 15/x^6 + 105/x^8)``,
    whose truncation error is below ``1e-12`` relative there. For ``x > 0`` it uses
    ``log1p(-Phi(-x))`` so that values close to 0 keep full precision.
    """
    if math.isnan(x):
        raise ValueError("log_ndtr argument is NaN")
    if x > 0.0:
        return math.log1p(-ndtr(-x))
    if x > _ASYMPTOTIC_BELOW:
        return math.log(ndtr(x))
    if math.isinf(x):
        return -math.inf
    z = 1.0 / (x * x)
    series = 1.0 - z * (1.0 - z * (3.0 - z * (15.0 - z * 105.0)))
    return -0.5 * x * x - math.log(-x) - _LOG_SQRT_2PI + math.log(series)
