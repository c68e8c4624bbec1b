"""Misra-Gries bytes whose numbers do not fit the sketch's int64 state are format errors.

The decoder checks that the counters add up to ``n - (k+1)d`` with an exact sum: in int64,
forged counters near ``2**63`` would wrap around to a small total that passes the check.
"""

from __future__ import annotations

import numpy as np
import pytest

from beam_dpsketch import serialization
from beam_dpsketch.serialization import SketchFormatError
from beam_dpsketch.sketches.misra_gries.sketch import MisraGries

INT64_MAX = (1 << 63) - 1


def _sketch() -> MisraGries:
    mg = MisraGries(4)
    mg.update(["a", "b", "c", "a"])
    return mg


def _forge(mg: MisraGries, params: dict | None = None, arrays: dict | None = None) -> bytes:
    kind, p, a = serialization.loads(mg.to_bytes())
    p.update(params or {})
    a.update(arrays or {})
    return serialization.dumps(kind, p, a)


@pytest.mark.parametrize("merged", [True, False])
@pytest.mark.parametrize(
    "counts",
    [[INT64_MAX, INT64_MAX, 2], [INT64_MAX, 1, 0], [1 << 62, 1 << 62, 1 << 62]],
    ids=["wraps-to-0", "wraps-negative", "wraps-positive"],
)
def test_counters_summing_past_int64_refused(merged, counts):
    mg = _sketch()
    n = sum(counts) % (1 << 64)  # what an int64 sum would claim, if it fits
    n = n if 0 <= n <= INT64_MAX else 10
    blob = _forge(mg, {"merged": merged, "n": n}, {"counts": np.array(counts, dtype="<i8")})
    with pytest.raises(SketchFormatError, match="add up"):
        MisraGries.from_bytes(blob)


@pytest.mark.parametrize("n", [1 << 63, 10**400], ids=["2**63", "1e400"])
def test_totals_beyond_int64_refused(n):
    with pytest.raises(SketchFormatError, match="totals"):
        MisraGries.from_bytes(_forge(_sketch(), {"n": n, "merged": True}))


@pytest.mark.parametrize("start", [1 << 63, 10**400], ids=["2**63", "1e400"])
def test_dummy_ids_beyond_int64_refused(start):
    mg = _sketch()
    _, params, _ = serialization.loads(mg.to_bytes())
    lo, hi = params["dummy_range"]
    with pytest.raises(SketchFormatError, match="dummy"):
        MisraGries.from_bytes(_forge(mg, {"dummy_range": [start, start + hi - lo]}))


def test_a_genuine_sketch_still_loads():
    mg = _sketch()
    again = MisraGries.from_bytes(mg.to_bytes())
    assert again.to_bytes() == mg.to_bytes()
