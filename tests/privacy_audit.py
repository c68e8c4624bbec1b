"""Statistical helpers for the privacy regression suite (``tests/privacy/``).

A release path is audited on a pair of worst-case neighbouring inputs ``D`` and ``D'``: run the
mechanism ``n`` times on each with independent noise keys, count how often an event ``S`` (chosen
before the runs) occurs, and turn the two counts into a lower confidence bound on the epsilon the
mechanism really spends:

    eps >= ln( (P[S | D] - delta) / P[S | D'] )

with ``P[S | D]`` replaced by its Clopper-Pearson lower bound and ``P[S | D']`` by its upper
bound. Each bound fails with probability at most ``failure / 2``, so the whole statement is wrong
with probability at most ``failure`` (the suite uses ``failure = 1e-6``).
"""

from __future__ import annotations

import math

from scipy import stats

#: Failure probability of every statistical privacy assertion in the suite.
FAILURE = 1e-6


def cp_lower(hits: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson lower bound on a Bernoulli rate, at level ``1 - alpha``."""
    if not 0 <= hits <= n or n < 1:
        raise ValueError("need 0 <= hits <= n and n >= 1")
    return 0.0 if hits == 0 else float(stats.beta.ppf(alpha, hits, n - hits + 1))


def cp_upper(hits: int, n: int, alpha: float) -> float:
    """One-sided Clopper-Pearson upper bound on a Bernoulli rate, at level ``1 - alpha``."""
    if not 0 <= hits <= n or n < 1:
        raise ValueError("need 0 <= hits <= n and n >= 1")
    return 1.0 if hits == n else float(stats.beta.ppf(1.0 - alpha, hits + 1, n - hits))


def epsilon_lower_bound(
    hits_d: int,
    n_d: int,
    hits_d2: int,
    n_d2: int,
    delta: float = 0.0,
    failure: float = FAILURE,
) -> float:
    """A lower bound on epsilon that holds with probability ``1 - failure``.

    ``hits_d`` of ``n_d`` runs on ``D`` and ``hits_d2`` of ``n_d2`` runs on ``D'`` showed the
    event. Returns 0 when the counts give no evidence (the bound is never negative) and ``inf``
    when the event was never seen on ``D'`` yet certainly occurs on ``D`` (a deterministic leak).
    """
    p_lo = cp_lower(hits_d, n_d, failure / 2.0) - delta
    q_hi = cp_upper(hits_d2, n_d2, failure / 2.0)
    if p_lo <= 0.0:
        return 0.0
    if q_hi <= 0.0:
        return math.inf
    return max(0.0, math.log(p_lo / q_hi))
