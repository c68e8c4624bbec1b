"""Sizing Misra-Gries sketches: counters from an error target or a memory budget.

In the style of the DataSketches frequent-items sizing helpers (a-priori error from the map size
and the stream weight, and the inverse). Every function here reads public numbers only (a
target error, an *expected* stream length, a memory budget), never data.

Error model ([LT23, Algorithm 1 and Fact 1]; Bose et al.): a sketch of ``k`` counters over
``n`` elements undercounts any key by at most ``d <= n / (k + 1)``. Design B
(:func:`~beam_dpsketch.sketches.misra_gries.design_b.approx_pp`) adds the noisy ``N/(k+1)`` back, so
its estimates over-count by at most the same amount (0 when every shard's sketch holds all of
its distinct keys), before noise; a key is released only when its count exceeds about
``N/(k+1)`` plus the noise threshold. Memory: one sketch holds ``k`` counters; Design B's
aggregate holds at most ``max_shards * k`` keys.
"""

from __future__ import annotations

import math

from beam_dpsketch.checks import check_int, check_real

__all__ = [
    "BYTES_PER_COUNTER",
    "DEFAULT_K",
    "MAX_K",
    "SELECT_COUNT_K",
    "apriori_error",
    "k_for_memory",
    "memory_bytes",
    "suggest_k",
]

#: Largest number of counters a Misra-Gries sketch accepts.
MAX_K = 1 << 24

#: Default number of counters of the heavy-hitter transforms and CLI. With ``k = 4096`` a
#: 3 M-row stream has ``N/(k+1) ~ 732``: every key above about 0.03% of the stream (plus the
#: noise threshold) is released, and streams with at most 4,096 distinct keys per shard (the
#: 3,399 flight routes) are summarised exactly.
DEFAULT_K = 4096

#: Default counters of element-level select-then-count (the heavy-hitter CLI's default
#: release). Its selection reads the sketches' exact counts whenever every segment held all of
#: its distinct keys, so a generous ``k`` turns most real key columns (up to about ``k``
#: distinct keys per segment, less the exactness test's margin) into exact histograms with a
#: threshold near ``1 + ln(1/delta)/eps``. The sketch loop is C, so a large ``k`` costs memory
#: only for keys that arrive: about ``k * BYTES_PER_COUNTER`` (26 MB) per open segment.
SELECT_COUNT_K = 1 << 17

#: Bytes per held counter assumed by :func:`memory_bytes` and :func:`k_for_memory`: a Python
#: dict slot, an int counter and a short (up to about 40 byte) string key, rounded up from
#: ``tracemalloc`` measurements (about 90-170 bytes). Longer keys need more.
BYTES_PER_COUNTER = 200


def apriori_error(k: int, n: int) -> float:
    """``n / (k + 1)``: the most a ``k``-counter sketch of ``n`` elements misses any key by.

    Parameters
    ----------
    k
        Counters per sketch.
    n
        (Expected) number of elements: a public planning figure, not a count of the data.
    """
    k = check_int(k, "k")
    n = check_int(n, "n", lower=0)
    return n / (k + 1)


def suggest_k(*, max_error: float, n: int) -> int:
    """Smallest ``k`` with ``n / (k + 1) <= max_error``.

    Parameters
    ----------
    max_error
        Largest acceptable sketch error, in elements (before noise).
    n
        Expected number of elements per window (a public planning figure).

    Raises
    ------
    ValueError
        For a non-positive ``max_error`` or a ``k`` above the sketch's limit (named in the
        message).
    """
    target = check_real(max_error, "max_error", 0.0, lower_open=True)
    n = check_int(n, "n")
    k = max(1, math.ceil(n / target) - 1)
    while k > 1 and n / k <= target:  # float rounding: step down to the smallest k
        k -= 1
    while n / (k + 1) > target:
        k += 1
    if k > MAX_K:
        raise ValueError(
            f"max_error={max_error!r} for n={n} needs k={k} counters, above the limit {MAX_K}"
        )
    return k


def memory_bytes(k: int, *, max_shards: int = 1, bytes_per_counter: int = BYTES_PER_COUNTER) -> int:
    """Estimated bytes of a Design B aggregate: ``max_shards * k`` keys of ``bytes_per_counter``.

    With ``max_shards=1`` it is one sketch's memory.
    """
    k = check_int(k, "k")
    shards = check_int(max_shards, "max_shards")
    per = check_int(bytes_per_counter, "bytes_per_counter")
    return shards * k * per


def k_for_memory(
    memory: int, *, max_shards: int = 1, bytes_per_counter: int = BYTES_PER_COUNTER
) -> int:
    """Largest ``k`` whose :func:`memory_bytes` fits in ``memory`` bytes.

    Raises
    ------
    ValueError
        If not even ``k = 1`` fits (the message names ``memory``).
    """
    budget = check_int(memory, "memory")
    shards = check_int(max_shards, "max_shards")
    per = check_int(bytes_per_counter, "bytes_per_counter")
    k = min(MAX_K, budget // (shards * per))
    if k < 1:
        raise ValueError(
            f"memory={memory} bytes holds no counter at max_shards={shards} "
            f"({shards * per} bytes per counter slot)"
        )
    return k
