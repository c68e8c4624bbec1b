"""Decoded count fields of intermittent sketches are bounded by what their parameters allow.

A state's ``batches`` (and, for use-and-forget cells, each cell's use count) grows by one per
answered batch, and the use-and-forget strategies refuse the batch whose noise scale would
exceed the sampler's 2**52. Bytes that claim more are forged: decoding refuses them with a
format error, instead of an ``answer()`` that computes ``eta**(k - 1)`` exactly for a huge ``k``
(tens of seconds from a 1 KB blob at ``k = 10**6``, unbounded beyond).
"""

from __future__ import annotations

import time
from fractions import Fraction

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.noise import NoiseSource
from beam_dpsketch.privacy import PrivacyBudget
from beam_dpsketch.privacy.calibration import geometric_split_epsilon
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.intermittent.sketch import check_scale
from beam_dpsketch.sketches.intermittent.strategies import make_intermittent_sketch

SRC = NoiseSource.insecure_for_tests(5)
GEOMETRIC = {"eta": 0.9}


def make(strategy: str, eps: float = 1.0, **kw):
    kw = {**(GEOMETRIC if "forget" in strategy else {}), **kw}
    s = make_intermittent_sketch(
        strategy, 16, 3, PrivacyBudget.pure(eps), noise_source=SRC, release_prefix="s", **kw
    )
    s.update([1, 2, 3, 1])
    return s


def forge(blob: bytes, params: dict | None = None, arrays: dict | None = None) -> bytes:
    kind, p, a = serialization.loads(blob)
    p.update(params or {})
    a.update(arrays or {})
    return serialization.dumps(kind, p, a)


@pytest.mark.parametrize(
    "batches",
    [10**6, 10**7, 2**62, 2**63 - 1, 10**400],
    ids=["1e6", "1e7", "2**62", "2**63-1", "1e400"],
)
def test_forged_batches_of_use_and_forget_median_refused_at_decode(batches):
    s = make("use_and_forget_median")
    s.answer([1])
    blob = forge(s.to_bytes(), {"batches": batches})
    assert len(blob) < 2000
    started = time.monotonic()
    with pytest.raises(SketchFormatError, match="batches"):
        type(s).from_bytes(blob, SRC)
    assert time.monotonic() - started < 2


@pytest.mark.parametrize(
    "strategy", ["use_and_keep", "batch_naive", "batch_m_q", "use_and_forget_cell"]
)
def test_batches_beyond_int64_refused_by_every_strategy(strategy):
    s = make(strategy)
    s.answer([1])
    for batches in (2**63, 10**400):
        with pytest.raises(SketchFormatError, match="batches"):
            type(s).from_bytes(forge(s.to_bytes(), {"batches": batches}), SRC)


def test_single_query_state_holds_at_most_one_batch():
    s = make("single_query")
    s.answer([1])
    assert type(s).from_bytes(s.to_bytes(), SRC).batches == 1
    with pytest.raises(SketchFormatError, match="at most one batch"):
        type(s).from_bytes(forge(s.to_bytes(), {"batches": 2}), SRC)


@pytest.mark.parametrize("uses", [10**4, 2**31 - 1])
def test_forged_use_counts_of_use_and_forget_cell_refused_at_decode(uses):
    s = make("use_and_forget_cell")
    s.answer([1])
    used = np.full((s.depth, s.width), uses, dtype=np.int32)
    blob = forge(s.to_bytes(), {"batches": 2**40}, {"uses": used})
    started = time.monotonic()
    with pytest.raises(SketchFormatError, match="use counts exceed"):
        type(s).from_bytes(blob, SRC)
    assert time.monotonic() - started < 2


def _exact_last_use(eps: Fraction, eta: Fraction) -> int:
    """The last use ``r`` whose exact scale ``1/share_r`` is at most 2**52 (0 if none): the
    shares decrease in ``r``, so a binary search over exact rationals finds it."""

    def fits(r: int) -> bool:
        return 1 / geometric_split_epsilon(eps, eta, r) <= 2**52

    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:  # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


@pytest.mark.parametrize("eps", [1.0, 0.01, 8.0])
@pytest.mark.parametrize("eta", [0.5, 0.9, "0.97", "0.999"])
def test_the_bound_is_never_below_the_exact_last_batch_and_at_most_two_above(eps, eta):
    s = make("use_and_forget_median", eps=eps, eta=eta)
    exact = _exact_last_use(s.epsilon, s.eta)
    assert exact <= s.max_batches() <= exact + 2
    cell = make("use_and_forget_cell", eps=eps, eta=eta)
    exact_cell = _exact_last_use(cell.epsilon / cell.depth, cell.eta)
    assert exact_cell <= cell.max_uses() <= exact_cell + 2


def test_an_exhausted_state_round_trips_and_keeps_refusing():
    # Every batch a legitimate sketch answers decodes again; the batch after the last one is a
    # ValueError naming the exhausted budget, before and after the round trip.
    s = make("use_and_forget_median", eta=0.5)
    answered = 0
    while True:
        try:
            s.answer([1])
        except ValueError as exc:
            assert "budget is exhausted" in str(exc)
            break
        answered += 1
    assert answered == s.batches >= 30
    again = type(s).from_bytes(s.to_bytes(), SRC)
    assert again.batches == answered
    with pytest.raises(ValueError, match="budget is exhausted"):
        again.answer([1])


def test_scale_check_message_survives_scales_beyond_floats():
    with pytest.raises(ValueError, match=r"about 2\*\*1328\b.*budget is exhausted"):
        check_scale(Fraction(10) ** 400, "x")
