"""String batches are counted before hashing (each distinct value hashed once): the tables must
equal per-key updates exactly, for every Arrow string/binary form, for lists, and for batches
the counting path must leave to the general one (mixed str/bytes, nulls, mostly distinct)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from beam_dpsketch.sketches import CountMinSketch, CountSketch

N = 20_000


def one_at_a_time(cls, keys: list):
    """The reference: the same keys in small batches of 100 (no counting path)."""
    sketch = cls(64, 4, 7)
    for start in range(0, len(keys), 100):
        sketch.update(keys[start : start + 100])
    return sketch


@pytest.fixture(scope="module")
def repeated() -> list[str]:
    rng = np.random.default_rng(5)
    return [f"route-{v}" for v in (rng.zipf(1.2, N) % 300).tolist()] + ["é", "漢字", ""]


@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_counted_string_batches_equal_per_key_updates(cls, repeated):
    want = one_at_a_time(cls, repeated)
    data = [s.encode() for s in repeated]
    forms = [
        repeated,
        pa.array(repeated),
        pa.array(repeated, pa.large_string()),
        pa.chunked_array([repeated[:7000], repeated[7000:]]),
    ]
    for batch in forms:
        assert cls(64, 4, 7).update(batch) == want
    assert cls(64, 4, 7).update(pa.array(data)) == one_at_a_time(cls, data)
    assert cls(64, 4, 7).update(pa.array(data, pa.large_binary())) == one_at_a_time(cls, data)


@pytest.mark.parametrize("cls", [CountMinSketch, CountSketch])
def test_batches_left_to_the_general_path(cls, repeated):
    mixed = repeated[:5000] + [b"route-1"] + repeated[5000:]
    assert cls(64, 4, 7).update(mixed) == one_at_a_time(cls, mixed)
    distinct = [f"k{i}" for i in range(N)]  # no repeats: the probe skips counting
    assert cls(64, 4, 7).update(distinct) == one_at_a_time(cls, distinct)
    with pytest.raises(TypeError, match="None"):
        cls(64, 4, 7).update(repeated + [None])
    with pytest.raises(TypeError, match="None"):
        cls(64, 4, 7).update(pa.array(repeated + [None]))


def test_weighted_string_batches_are_unchanged(repeated):
    weights = np.arange(len(repeated)) % 5 - 2
    want = CountSketch(64, 4, 7)
    for start in range(0, len(repeated), 100):
        want.update(repeated[start : start + 100], weights[start : start + 100])
    assert CountSketch(64, 4, 7).update(repeated, weights) == want
